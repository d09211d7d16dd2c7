package proxy

import (
	"bytes"
	"slices"
	"strconv"

	"github.com/respmeter/respmeter/internal/resp"
	"github.com/respmeter/respmeter/routing"
	"github.com/respmeter/respmeter/routing/command"
)

// Pub/sub and MONITOR of a routed client (client) are a mode of its own
// shard connections:
//
//   - SUBSCRIBE, PSUBSCRIBE and their UNSUBSCRIBEs go to one connection, the
//     client's subscription link (its home shard's): a cluster delivers every
//     PUBLISH to every node over its bus, and over standalone shards the
//     proxy sends PUBLISH to every shard, summing the receivers, so that a
//     subscriber (or a pattern) on any shard gets what is published anywhere.
//   - SSUBSCRIBE and SUNSUBSCRIBE go to the shard of their channels' slot
//     (Redis Cluster specification: shard channels are assigned to slots like
//     keys; channels of several slots get -CROSSSLOT), so one client may
//     hold shard subscriptions on several connections. SUNSUBSCRIBE without
//     channels goes to each of them. Their confirmations carry the client's
//     total count of shard channels, as from one engine.
//   - Messages, and RESP3 pushes, are relayed as they arrive, after the
//     replies the client has been sent so far (see client.oob).
//   - A RESP2 connection in subscribe mode answers only (P|S)(UN)SUBSCRIBE,
//     PING, QUIT and RESET (redis-server 7.0 server.c processCommand): while
//     the client is subscribed, its other requests go to a subscribed
//     connection, which answers them as the engine would (an error, or PING's
//     subscribe-mode reply). A RESP3 client's keyed commands are routed by
//     slot as usual.
//   - MONITOR turns the connection it is sent on into a feed as well: its
//     lines ("+<unix time> [db addr] ...") are relayed as they arrive, and
//     RESET ends it.
//
// Whether the client is subscribed is kept from its requests (subModel), the
// channels it named, so that routing never waits for a confirmation; the
// connections keep the engine's counts from the confirmations.

// Subscription families; a confirmation's count is per family set as in
// redis-server 7.0 pubsub.c: channels and patterns share one count
// (clientSubscriptionsCount), shard channels have their own.
const (
	famChan uint8 = iota + 1
	famPat
	famShard
)

// subCounts are one connection's subscription counts, as the engine's
// latest confirmations give them: a confirmation carries the connection's
// channels + patterns (SUBSCRIBE and PSUBSCRIBE families) or its shard
// channels (redis-server 7.0 pubsub.c, clientSubscriptionsCount and
// clientShardSubscriptionsCount).
type subCounts struct{ chans, pats, shards int64 }

// set records a confirmation of family fam carrying count.
func (c *subCounts) set(fam uint8, count int64) {
	switch fam {
	case famChan:
		c.chans = max(0, count-c.pats)
	case famPat:
		c.pats = max(0, count-c.chans)
	case famShard:
		c.shards = count
	}
}

// of returns the count of family fam alone.
func (c *subCounts) of(fam uint8) int64 {
	switch fam {
	case famChan:
		return c.chans
	case famPat:
		return c.pats
	}
	return c.shards
}

// any reports whether the connection holds a subscription.
func (c *subCounts) any() bool { return c.chans+c.pats+c.shards > 0 }

// subModel is the client's subscriptions as its requests define them.
type subModel struct {
	chans, pats map[string]struct{}
	shardCh     map[string]int // shard channel -> shard index it was subscribed on
}

func newSubModel() *subModel {
	return &subModel{chans: map[string]struct{}{}, pats: map[string]struct{}{}, shardCh: map[string]int{}}
}

// any reports whether the client is subscribed to anything.
func (m *subModel) any() bool {
	return m != nil && len(m.chans)+len(m.pats)+len(m.shardCh) > 0
}

// subFamily returns the subscription family of a pub/sub command (0 for
// any other) and whether it unsubscribes.
func subFamily(id command.ID) (fam uint8, unsub bool) {
	switch id {
	case command.Subscribe:
		return famChan, false
	case command.Unsubscribe:
		return famChan, true
	case command.Psubscribe:
		return famPat, false
	case command.Punsubscribe:
		return famPat, true
	case command.Ssubscribe:
		return famShard, false
	case command.Sunsubscribe:
		return famShard, true
	}
	return 0, false
}

// resp2Subscribed reports whether the client's next request reaches a RESP2
// connection in subscribe mode.
func (s *client) resp2Subscribed() bool { return !s.has(cfResp3) && s.subs.any() }

// feedShard returns a shard whose connection is in subscribe mode: the
// subscription link's, or the lowest shard holding a shard channel.
func (s *client) feedShard() int {
	if len(s.subs.chans)+len(s.subs.pats) > 0 && s.subShard >= 0 {
		return s.subShard
	}
	best := -1
	for _, sh := range s.subs.shardCh {
		if best < 0 || sh < best {
			best = sh
		}
	}
	if best < 0 {
		return s.home
	}
	return best
}

// pubsub routes a (P|S)(UN)SUBSCRIBE sent outside a transaction (see the
// comment at the top of this file).
func (s *client) pubsub(v *topoView, e *request, id command.ID, args [][]byte, frame []byte) {
	fam, unsub := subFamily(id)
	names := args[1:]
	if s.subs == nil {
		s.subs = newSubModel()
	}
	if fam != famShard {
		shard := s.subShard
		if shard < 0 {
			shard = s.home
			if !unsub {
				s.subShard = shard
			}
		}
		set := s.subs.chans
		if fam == famPat {
			set = s.subs.pats
		}
		switch {
		case !unsub:
			for _, n := range names {
				set[string(n)] = struct{}{}
			}
		case len(names) == 0:
			clear(set)
		default:
			for _, n := range names {
				delete(set, string(n))
			}
		}
		s.sendSub(e, shard, fam, len(names), frame)
		return
	}
	if len(names) == 0 { // SUNSUBSCRIBE: every connection with shard channels
		var shards []int
		for _, sh := range s.subs.shardCh {
			if !slices.Contains(shards, sh) {
				shards = append(shards, sh)
			}
		}
		clear(s.subs.shardCh)
		if len(shards) == 0 {
			shards = append(shards, s.home)
		}
		slices.Sort(shards)
		if len(shards) > 1 {
			e.agg = aggSubs
		}
		for _, sh := range shards {
			s.sendSub(e, sh, fam, 0, frame)
		}
		return
	}
	shard := s.home
	if !s.fixed() {
		slot := routing.Slot(names[0])
		for _, n := range names[1:] {
			if routing.Slot(n) != slot {
				s.crossSlot(e)
				return
			}
		}
		if shard = v.t.Shard(slot); shard < 0 {
			s.local(e, []byte("-CLUSTERDOWN Hash slot not served\r\n"))
			return
		}
	}
	for _, n := range names {
		if unsub {
			delete(s.subs.shardCh, string(n))
		} else {
			s.subs.shardCh[string(n)] = shard
		}
	}
	s.sendSub(e, shard, fam, len(names), frame)
}

// sendSub queues a part of e on shard's connection that is answered by
// expect confirmations of family fam (0: one per channel until the link has
// none of the family left, for an UNSUBSCRIBE of everything).
func (s *client) sendSub(e *request, shard int, fam uint8, expect int, frame []byte) {
	ln := s.linkTo(shard)
	s.release(ln)
	p := e.part()
	p.sub, p.expect = fam, int32(expect)
	if s.p.router.cluster {
		p.req = append(p.req, frame...)
	}
	ln.queue(e, len(e.ps)-1, frame)
}

// shardSubs returns the client's shard channel count, as the engines'
// latest confirmations give it, over all of its connections.
func (s *client) shardSubs() int64 {
	var n int64
	for _, ln := range s.links {
		if ln != nil {
			n += ln.subs.shards
		}
	}
	for _, ln := range s.extra {
		n += ln.subs.shards
	}
	return n
}

// pushTag marks where a held out-of-band frame ends in pushHold, and the
// seq of the request it must follow.
type pushTag struct {
	seq uint64
	end int
}

// oob relays a frame that answers no request (a pub/sub message, a RESP3
// push, a MONITOR line) from link ln. It must follow the replies ln sent
// before it, and may come before anything else: while the last of them
// is not written yet (held behind a slower shard), or while another link's
// reply is streaming, it waits in pushHold (releasePushes). Frames keep
// their order of arrival.
func (s *client) oob(ln *link, frame []byte) {
	if s.gone() {
		return
	}
	if (s.streaming == nil || s.streaming == ln) && ln.lastSeq <= s.written && len(s.pushTags) == 0 {
		s.wbuf = append(s.wbuf, frame...)
		s.markDirty()
		return
	}
	s.pushHold = append(s.pushHold, frame...)
	s.pushTags = append(s.pushTags, pushTag{seq: ln.lastSeq, end: len(s.pushHold)})
}

// releasePushes moves the held out-of-band frames whose reply is written
// (the leading run of them, in order) to the write buffer, unless a reply
// is streaming.
func (s *client) releasePushes() {
	if s.streaming != nil || len(s.pushTags) == 0 {
		return
	}
	n := 0
	for n < len(s.pushTags) && s.pushTags[n].seq <= s.written {
		n++
	}
	if n == 0 {
		return
	}
	end := s.pushTags[n-1].end
	s.wbuf = append(s.wbuf, s.pushHold[:end]...)
	s.pushHold = s.pushHold[:copy(s.pushHold, s.pushHold[end:])]
	s.pushTags = s.pushTags[:copy(s.pushTags, s.pushTags[n:])]
	for i := range s.pushTags {
		s.pushTags[i].end -= end
	}
	if len(s.pushTags) == 0 && cap(s.pushHold) > 1<<20 {
		s.pushHold = nil
	}
	s.markDirty()
}

// inSubMode reports whether the link's frames must be classified as
// pub/sub traffic: it holds subscriptions, or a pub/sub request is next.
func (ln *link) inSubMode() bool {
	if ln.subs.any() {
		return true
	}
	if ln.q.len() == 0 {
		return false
	}
	r := ln.q.front()
	return r.e != nil && r.e.ps[r.part].sub != 0
}

// feed handles a frame of a private link that may be pub/sub or MONITOR
// traffic rather than a reply; it reports whether it did.
func (ln *link) feed(frame []byte, typ byte, head []byte, count int64, now int64) bool {
	s := ln.owner
	if typ == resp.TypePush || typ == resp.TypeArray && !s.has(cfResp3) && ln.inSubMode() {
		fam, confirm, message := classifyPubsub(head)
		switch {
		case message:
			s.oob(ln, frame)
			return true
		case confirm != 0:
			ln.confirmation(fam, confirm == 2, frame, count, now)
			return true
		case typ == resp.TypePush:
			s.oob(ln, frame)
			return true
		}
	}
	if ln.monitor && typ == resp.TypeSimpleString && len(head) > 0 && head[0] >= '0' && head[0] <= '9' {
		s.oob(ln, frame) // "+1700000000.123456 [0 127.0.0.1:5000] ..."
		return true
	}
	return false
}

// confirmation handles a (P|S)(UN)SUBSCRIBE confirmation carrying the
// connection's new count: it is a part of the pub/sub request at the head
// of the link, complete once every confirmation it expects has come; one
// no request expects (an engine unsubscribing the client from a shard
// channel whose slot moved) is relayed as it is.
func (ln *link) confirmation(fam uint8, unsub bool, frame []byte, count int64, now int64) {
	s := ln.owner
	ln.subs.set(fam, count)
	total := count
	if fam == famShard {
		total = s.shardSubs()
	}
	var r linkRef
	if ln.q.len() > 0 {
		r = ln.q.front()
	}
	if r.e == nil || r.e.ps[r.part].sub != fam {
		ln.subAcc = setCount(ln.subAcc[:0], frame, total)
		s.oob(ln, ln.subAcc)
		ln.subAcc = ln.subAcc[:0]
		return
	}
	ln.subAcc = setCount(ln.subAcc, frame, total)
	p := &r.e.ps[r.part]
	if p.expect > 0 {
		if p.expect--; p.expect > 0 {
			return
		}
	} else if unsub && ln.subs.of(fam) > 0 {
		return // an UNSUBSCRIBE of everything: one per channel until none is left
	}
	ln.q.pop()
	prev := ln.lastReply
	ln.lastReply = now
	if !r.e.s.gone() {
		p.svcFrom = max(p.tSent, prev)
		r.e.s.complete(r.e, int(r.part), ln.subAcc, now, false)
	}
	if cap(ln.subAcc) > 64<<10 {
		ln.subAcc = nil
	} else {
		ln.subAcc = ln.subAcc[:0]
	}
}

// setCount appends to dst the pub/sub confirmation frame with its count
// (the last element, an integer) set to n.
func setCount(dst, frame []byte, n int64) []byte {
	end := len(frame) - 2 // the last line's CR
	i := bytes.LastIndexByte(frame[:end], '\n') + 1
	if end < 1 || frame[i] != resp.TypeInteger {
		return append(dst, frame...)
	}
	dst = append(dst, frame[:i+1]...)
	dst = strconv.AppendInt(dst, n, 10)
	return append(dst, "\r\n"...)
}

// renumber rewrites the counts of the confirmations in out (the parts of
// a SUNSUBSCRIBE sent to several connections, concatenated in part order)
// so that they fall by one per confirmation down to last, as one engine's
// would. It returns out unchanged if a frame is not a confirmation.
func (l *loop) renumber(out []byte, last int64) []byte {
	var frames [][]byte
	f := l.sf
	for rest := out; len(rest) > 0; {
		f.Reset()
		n, fin, err := f.Feed(rest)
		if err != nil || !fin {
			return out
		}
		frames = append(frames, rest[:n])
		rest = rest[n:]
	}
	b := l.scratch[:0]
	for i, fr := range frames {
		b = setCount(b, fr, last+int64(len(frames)-1-i))
	}
	l.scratch = b
	return append(out[:0], b...)
}

// classifyPubsub looks at the first element of an array or push. confirm is
// 1 for a subscribe confirmation, 2 for an unsubscribe one (0: neither);
// message is true for a delivered message.
func classifyPubsub(head []byte) (fam uint8, confirm int, message bool) {
	switch {
	case eqFold(head, "message"), eqFold(head, "pmessage"), eqFold(head, "smessage"):
		return 0, 0, true
	case eqFold(head, "subscribe"):
		return famChan, 1, false
	case eqFold(head, "unsubscribe"):
		return famChan, 2, false
	case eqFold(head, "psubscribe"):
		return famPat, 1, false
	case eqFold(head, "punsubscribe"):
		return famPat, 2, false
	case eqFold(head, "ssubscribe"):
		return famShard, 1, false
	case eqFold(head, "sunsubscribe"):
		return famShard, 2, false
	}
	return 0, 0, false
}
