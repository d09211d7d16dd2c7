package proxy

import (
	"context"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/panjf2000/gnet/v2"
	"gopkg.in/yaml.v3"

	"github.com/respmeter/respmeter/internal/resp"
)

// Wire effects of fault injection (bandwidth, slicer), as Toxiproxy's
// bandwidth and slicer toxics pace a connection's bytes (Shopify/toxiproxy
// README, "Toxics").
//
// Downstream (the default), the reply to a request a rule matches goes to
// the client paced. It is collected whole (not cut through, as a reply
// delay's) and held at the head of the client's queue, where it counts
// against the client output limit as any reply held; paceReply then
// writes it a slice at a time, each on a timer of the delays' clock
// (injclock.go) that re-enters the client's event loop, so the replies
// behind it keep their order. The time from its reply's arrival to its
// last slice is the request's injected phase, and the wait of the replies
// ready behind it is theirs (releaseWaiters).
//
// Upstream, the request is held as a delay's is (client.injPause) until
// its last byte, or its last slice, would have passed (paceRequest), and
// then forwarded whole.

// holdWire is request.hold of a request whose reply a wire rule paces
// (paceReply); a positive hold is a reply delay's.
const holdWire = -1

// bandwidthSlice is how much of a reply a bandwidth rule writes at a time:
// 10 ms of its rate (Toxiproxy writes 100 ms of it at a time); at least
// one byte.
const bandwidthSlice = 10 * time.Millisecond

// wireRule is a wire effect's parameters: rate for bandwidth; avg, vary
// and gap for slicer; up: the requests are paced (direction: upstream),
// not the replies.
type wireRule struct {
	up   bool
	rate float64 // bytes per second (bandwidth)
	avg  int     // bytes: the average slice (slicer)
	vary int     // bytes: a slice is avg ± up to vary, drawn uniformly
	gap  int64   // ns between two slices (slicer)
}

// next returns the size (bytes) of the slice of a reply of size bytes
// that starts at off, and when it is due (ns on the proxy's clock): the
// pacing started at from, and prev was the previous slice's due time.
func (w *wireRule) next(off, size int, from, prev int64, r *rand.Rand) (int, int64) {
	rest := size - off
	if w.rate > 0 {
		n := min(rest, max(1, int(w.rate*bandwidthSlice.Seconds())))
		return n, from + int64(math.Ceil(float64(off+n)*1e9/w.rate))
	}
	n := w.avg
	if w.vary > 0 {
		n += r.IntN(2*w.vary+1) - w.vary
	}
	n = min(rest, n)
	if off == 0 {
		return n, from // the first slice at once
	}
	return n, prev + w.gap
}

// paceRequest returns when a request of size bytes that s read at at,
// matched by wire rule ru upstream, is to be forwarded: when its last
// slice would be written, paced as paceReply paces a reply, from when the
// client's last request paced upstream was due (s.injUpEnd) or from at if
// later, so that a pipeline is paced as one stream.
func (s *client) paceRequest(ru *injRule, at int64, size int) int64 {
	from := max(at, s.injUpEnd)
	if s.injUpEnd > at {
		from += ru.wire.gap // a slicer's delay after the last slice before
	}
	due := from
	for off, n := 0, 0; off < size; off += n {
		n, due = ru.wire.next(off, size, from, due, s.l.injRand)
	}
	s.injUpEnd = due
	return due
}

// wirePace is the paced reply of a client (client.wire): the one at the
// head of its queue, if any.
type wirePace struct {
	e     *request
	seq   uint64 // e.seq: e is recycled once written
	off   int    // bytes of e.out written
	n     int    // the next slice's size; 0: not drawn yet
	due   int64  // the next slice's due time, once drawn
	armed bool   // a timer writes the next slice at due
	// from is when the pacing of e started, inj when its injected time
	// counts from; end is when the last slice of the previous paced reply
	// was due (a reply ready by then goes on from there).
	from, inj, end int64
}

// paceReply writes e's reply, ready at the head of its client's queue, to
// the write buffer as e.rule's wire effect paces it, each slice when due;
// it reports whether e is still held (slices to come: a timer of the
// delays' clock flushes the client when the next is due).
func (s *client) paceReply(e *request) bool {
	if e.flags&(eWritten|eSilent) != 0 {
		e.hold = 0 // written already (a replication stream), or dropped
		return false
	}
	w := s.wire
	if w == nil {
		w = new(wirePace)
		s.wire = w
	}
	if w.armed && w.e == e && w.seq == e.seq {
		return true // its timer writes the next slice
	}
	now := s.p.now()
	ru := &e.rule.wire
	if w.e != e || w.seq != e.seq {
		// A new reply: the stream goes on from the previous paced reply's
		// end (a slicer's delay after it) if this one was ready by then (a
		// pipeline), else from now.
		*w = wirePace{e: e, seq: e.seq, from: now, inj: now, end: w.end}
		if e.tReply > 0 && e.tReply <= w.end && w.end <= now {
			w.from, w.inj = w.end+ru.gap, e.tReply
		}
		w.due = w.from
	}
	for w.off < len(e.out) {
		if w.n == 0 {
			w.n, w.due = ru.next(w.off, len(e.out), w.from, w.due, s.l.injRand)
		}
		if w.due > now {
			s.armPace(w)
			return true
		}
		s.wbuf = append(s.wbuf, e.out[w.off:w.off+w.n]...)
		s.buffered -= w.n
		w.off += w.n
		w.n = 0
	}
	// The last slice is out: the reply is written, its pacing injected.
	end := w.due
	e.inj += end - w.inj
	e.hold = 0
	e.flags |= eWritten
	e.isErr = resp.IsErrorReply(e.out)
	s.releaseWaiters(w.inj, end)
	*w = wirePace{end: end}
	return false
}

// armPace arms the timer that writes w's next slice, due at w.due.
func (s *client) armPace(w *wirePace) {
	w.armed = true
	e, seq, due, el, clock := w.e, w.seq, w.due, s.conn.EventLoop(), &s.p.clock
	clock.add(due, func() {
		_ = el.Execute(context.Background(), gnet.RunnableFunc(func(context.Context) error {
			clock.handedOver(s.p.now() - due)
			if w := s.wire; !s.gone() && w.armed && w.e == e && w.seq == seq && w.due == due {
				w.armed = false
				s.markDirty()
				s.l.flushAll()
			}
			return nil
		})) // an error: the loop is stopping
	})
}

// parseWire reads a wire effect: bandwidth: a rate ("100KB/s"), or
// slicer: {average_size: BYTES, size_variation: BYTES, delay: DURATION}.
func parseWire(k, v *yaml.Node, fail failFunc) (wireRule, error) {
	if k.Value == "bandwidth" {
		rate, ok := parseRate(v.Value)
		if v.Kind != yaml.ScalarNode || !ok {
			return wireRule{}, fail(v, "bandwidth: want a rate more than 0 such as 100KB/s (B/s, KB/s, MB/s, GB/s: powers of 1000; KiB/s, MiB/s, GiB/s: of 1024), got %q", v.Value)
		}
		return wireRule{rate: rate}, nil
	}
	const want = "slicer: want {average_size: BYTES, size_variation: BYTES, delay: DURATION}"
	if v.Kind != yaml.MappingNode {
		return wireRule{}, fail(v, want)
	}
	var w wireRule
	seen := map[string]bool{}
	for i := 0; i+1 < len(v.Content); i += 2 {
		pk, pv := v.Content[i], v.Content[i+1]
		seen[pk.Value] = true
		switch pk.Value {
		case "average_size", "size_variation":
			n, err := strconv.Atoi(pv.Value)
			if pv.Kind != yaml.ScalarNode || err != nil || n < 0 || n == 0 && pk.Value == "average_size" {
				return wireRule{}, fail(pv, "slicer: %s: want a number of bytes (average_size at least 1, size_variation at least 0), got %q", pk.Value, pv.Value)
			}
			if pk.Value == "average_size" {
				w.avg = n
			} else {
				w.vary = n
			}
		case "delay":
			d, err := time.ParseDuration(pv.Value)
			if pv.Kind != yaml.ScalarNode || err != nil || d <= 0 {
				return wireRule{}, fail(pv, "slicer: delay: want a duration more than 0 such as 1ms, got %q", pv.Value)
			}
			w.gap = int64(d)
		default:
			return wireRule{}, fail(pk, "slicer: unknown key %q (want average_size, size_variation, delay)", pk.Value)
		}
	}
	switch {
	case !seen["average_size"] || !seen["delay"]:
		return wireRule{}, fail(v, "%s (average_size and delay needed)", want)
	case w.vary >= w.avg:
		return wireRule{}, fail(v, "slicer: size_variation %d: want less than average_size %d", w.vary, w.avg)
	}
	return w, nil
}

// rateUnits are the units of a bandwidth rate, in bytes per second.
var rateUnits = []struct {
	unit string
	n    float64
}{
	{"KiB/s", 1 << 10}, {"MiB/s", 1 << 20}, {"GiB/s", 1 << 30},
	{"KB/s", 1e3}, {"MB/s", 1e6}, {"GB/s", 1e9}, {"B/s", 1},
}

// parseRate reads a rate such as "100KB/s" or "1.5MiB/s" into bytes per
// second; it reports false for anything else, or a rate of 0 or less.
func parseRate(s string) (float64, bool) {
	for _, u := range rateUnits {
		num, ok := strings.CutSuffix(s, u.unit)
		if !ok {
			continue
		}
		f, err := strconv.ParseFloat(strings.TrimSpace(num), 64)
		if err != nil || !(f > 0) || math.IsInf(f, 0) {
			return 0, false
		}
		return f * u.n, true
	}
	return 0, false
}
