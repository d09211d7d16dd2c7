// Package replay sends a captured workload (internal/capture) to a RESP
// engine: one connection per captured connection (or N, mapped stably),
// each connection's requests in their captured order and batches, sent
// open-loop at the captured time divided by the speed, and compares every
// reply with the captured one's summary.
//
// Latency is measured from the intended send time (the captured schedule
// scaled: coordinated omission corrected, as wrk2 and HdrHistogram do) and
// from the actual send. At speed max (Speed 0) each connection sends a
// batch as soon as the previous one is answered, and the two are the same.
//
// Concurrency: Run starts two goroutines per replay connection (sender and
// reader) and returns when all have finished.
package replay

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"

	"github.com/respmeter/respmeter/internal/capture"
	"github.com/respmeter/respmeter/internal/resp"
	"github.com/respmeter/respmeter/internal/respconn"
	"github.com/respmeter/respmeter/internal/tlsconf"
)

// Options configures Run.
type Options struct {
	// Target is the engine's (or a proxy's) host:port.
	Target string
	// Speed divides the captured times: 1 replays at the captured pace, 2
	// twice as fast; 0 means as fast as possible (closed loop per
	// connection).
	Speed float64
	// Connections is the number of replay connections; 0 means one per
	// captured connection. Captured connection i goes to replay
	// connection i mod Connections (in the workload's order).
	Connections int
	// Skip, when not nil, drops the commands it returns true for (e.g.
	// not readonly for --read-only). They are counted in Report.Skipped.
	Skip func(name string, req []byte) bool
	// Duration stops sending batches scheduled past it (captured time
	// divided by Speed); 0: the whole workload.
	Duration time.Duration
	// DialTimeout bounds a connection attempt; 0 means 5 s.
	DialTimeout time.Duration
	// User and Password, when Password is set, authenticate every replay
	// connection before anything else (AUTH user password, or AUTH
	// password when User is empty), as respconn.Options does for side
	// connections: the captured credentials are redacted in the file.
	// Neither appears in an error or the report.
	User, Password string
	// TLS, when set, makes every replay connection speak TLS with it (the
	// handshake within DialTimeout; tlsconf.NewDialer of what
	// internal/tlsconf.Client builds); nil speaks plaintext.
	TLS *tlsconf.Dialer
	// Compare says how the reply of a command is compared with the
	// captured one (nil: Full for all).
	Compare func(name string) Compare
	// OnSend, when not nil, is called after each batch is written with its
	// intended and actual send times, from the senders' goroutines
	// (concurrently).
	OnSend func(b *capture.Batch, intended, sent time.Time)
	// Observe, when not nil, is called with each command's name and its
	// latency from the intended send time, from the readers' goroutines
	// (concurrently).
	Observe func(name string, lat time.Duration)
	// Keys, when not nil, returns the keys of a request and whether the
	// command writes (the engine's key specs and write flag): mismatches
	// are then classified (see Report.PossibleRaces). Called after the
	// replay, from one goroutine.
	Keys func(name string, req []byte) (keys [][]byte, write bool)
	// StartAt, when not zero, is the wall-clock instant the schedule
	// starts at (captured time 0), once the connections are made: workers
	// on several machines given the same StartAt start together, as far
	// as their clocks agree (Report.Start).
	StartAt time.Time
}

// Compare is how a reply is compared with the captured one.
type Compare uint8

const (
	// Full compares RESP type, size and hash.
	Full Compare = iota
	// SizeOnly compares type and size: the engine may order the elements
	// differently (tip nondeterministic_output_order: SMEMBERS, HGETALL,
	// KEYS, ...).
	SizeOnly
	// Errors compares only whether the reply is an error (tip
	// nondeterministic_output: RANDOMKEY, TIME, INFO, HELLO's client id,
	// CLIENT ID, ...).
	Errors
)

// CompareByTips returns the Compare of a command from its tips.
func CompareByTips(tips []string) Compare {
	c := Full
	for _, t := range tips {
		switch t {
		case "nondeterministic_output":
			return Errors
		case "nondeterministic_output_order":
			c = SizeOnly
		}
	}
	return c
}

// LateAfter is how late a batch may be sent before it counts as late.
const LateAfter = time.Millisecond

// hist bounds: 1 µs to 1 h, 3 significant digits (µs values).
const histMax = int64(time.Hour / time.Microsecond)

// Sample is one command whose reply differs from the captured one.
type Sample struct {
	Command  string `json:"command"`
	Request  string `json:"request"` // truncated
	Captured string `json:"captured"`
	Replayed string `json:"replayed"`
	// Class says what the difference may come from, when known (see
	// Report.PossibleRaces); empty otherwise.
	Class string `json:"class,omitempty"`

	cmd *capture.Cmd
}

// CommandStats is the comparison for one command name. Latencies are
// microseconds.
type CommandStats struct {
	Count      int64 `json:"count"`
	Mismatches int64 `json:"mismatches"`
	NewErrors  int64 `json:"new_errors"`
	GoneErrors int64 `json:"gone_errors"`
	// PossibleRaces is how many of Mismatches touched a key that another
	// captured connection also wrote near the same time (see Report).
	PossibleRaces int64    `json:"possible_races"`
	CapturedUS    [3]int64 `json:"captured_p50_p99_p999_us"`
	ReplayedUS    [3]int64 `json:"replayed_p50_p99_p999_us"`
	SentUS        [3]int64 `json:"replayed_from_send_p50_p99_p999_us"`
	// Ratio is replayed / captured at p50, p99, p99.9 (0 when nothing
	// was captured).
	Ratio [3]float64 `json:"ratio_p50_p99_p999"`

	captured, replayed, sent *hdrhistogram.Histogram
}

// Report is the result of a replay.
type Report struct {
	Commands        int64                    `json:"commands"`
	Skipped         int64                    `json:"skipped"`
	Mismatches      int64                    `json:"mismatches"`
	NewErrors       int64                    `json:"new_errors"`
	GoneErrors      int64                    `json:"gone_errors"`
	Batches         int64                    `json:"batches"`
	LateBatches     int64                    `json:"late_batches"`
	DurationSeconds float64                  `json:"duration_seconds"`
	Connections     int                      `json:"connections"`
	PerCommand      map[string]*CommandStats `json:"per_command"`
	MismatchSamples []Sample                 `json:"mismatch_samples"`
	NewErrorSamples []Sample                 `json:"new_error_samples"`
	GoneErrSamples  []Sample                 `json:"gone_error_samples"`
	// SendLagP99US is the p99 of how late batches were sent (µs): a
	// replayer that is itself the bottleneck shows here.
	SendLagP99US int64 `json:"send_lag_p99_us"`
	// ConnErrors are connections that failed (dial, write, read).
	ConnErrors []string `json:"connection_errors,omitempty"`
	// ErrorReplies is how many replayed replies were errors.
	ErrorReplies int64 `json:"error_replies"`
	// NewErrorKinds counts the new errors by their first word (NOAUTH,
	// WRONGTYPE, ...).
	NewErrorKinds map[string]int64 `json:"new_error_kinds,omitempty"`
	// PossibleRaces is how many mismatches are on a command whose key
	// another captured connection wrote within RaceWindowSeconds of it
	// (captured time): the replay need not keep the order of two
	// connections' commands, so the engine may have seen them the other
	// way round. The rest differ for another reason (data the target
	// started from, engine behaviour). Counted only when Options.Keys is
	// set.
	PossibleRaces int64 `json:"possible_races"`
	// RaceWindowSeconds is the window PossibleRaces used (captured time):
	// the whole capture at speed max, where connections keep no order
	// between them; otherwise 10 ms or twice the send lag p99, whichever
	// is longer, times the speed.
	RaceWindowSeconds float64 `json:"race_window_seconds"`
	// Start is the schedule's start with Options.StartAt, nil without.
	Start *Start `json:"start,omitempty"`
	// Injected counts the replayed commands the capture marks as touched
	// by a fault injection rule of respmeter's, by "rule effect" ("slow-get
	// delay"). The replay does not inject them again: they go to the
	// target as any other. A delayed command's captured time is compared
	// without the delay (its total less the injected time); a command a
	// rule answered itself (an error, an -ASK) has no captured reply to
	// compare.
	Injected map[string]int64 `json:"injected,omitempty"`

	mu         sync.Mutex
	lag        *hdrhistogram.Histogram
	mismatched []*capture.Cmd
}

// maxSamples bounds the samples kept per kind; samplesPerCommand bounds
// those of one command name, so that the samples show every command that
// differs, not ten of the first.
const (
	maxSamples        = 30
	samplesPerCommand = 3
)

// never replayed: they turn a connection into a feed whose frames cannot
// be matched with requests.
var feedCommands = map[string]bool{"subscribe": true, "psubscribe": true, "ssubscribe": true,
	"unsubscribe": true, "punsubscribe": true, "sunsubscribe": true, "monitor": true, "sync": true, "psync": true}

type pending struct {
	cmd      *capture.Cmd
	intended time.Time
	sent     time.Time
	last     bool // the last command of its batch
}

type rconn struct {
	batches []capture.Batch
	state   []byte
}

// Run replays w against o.Target and returns the report. It fails only
// when no connection could be made; connections that fail later are
// listed in Report.ConnErrors.
func Run(ctx context.Context, w *capture.Workload, o Options) (*Report, error) {
	if o.DialTimeout <= 0 {
		o.DialTimeout = 5 * time.Second
	}
	n := len(w.Conns)
	if o.Connections > 0 {
		n = min(o.Connections, max(len(w.Conns), 1))
	}
	rc := make([]rconn, n)
	for i, c := range w.Conns {
		r := &rc[i%n]
		r.batches = append(r.batches, c.Batches...)
		r.state = append(r.state, c.State...)
	}
	rep := &Report{PerCommand: map[string]*CommandStats{}, Connections: n,
		lag: hdrhistogram.New(1, histMax, 3)}
	for i := range rc {
		sort.SliceStable(rc[i].batches, func(a, b int) bool { return rc[i].batches[a].T < rc[i].batches[b].T })
	}
	conns := make([]net.Conn, n)
	for i := range rc {
		c, err := respconn.DialNet(ctx, o.Target, o.DialTimeout, o.TLS)
		if err != nil {
			for _, c := range conns[:i] {
				_ = c.Close()
			}
			return nil, fmt.Errorf("replay: dial %s: %w", o.Target, err)
		}
		conns[i] = c
		if err := login(c, o.User, o.Password, o.DialTimeout); err != nil {
			for _, c := range conns[:i+1] {
				_ = c.Close()
			}
			return nil, fmt.Errorf("replay: %s: %w", o.Target, err)
		}
	}
	// Connection state first (SELECT, HELLO, CLIENT SETNAME, ...;
	// redacted credentials are left out), answered before the clock
	// starts.
	for i, c := range conns {
		if err := sendState(c, rc[i].state); err != nil {
			rep.ConnErrors = append(rep.ConnErrors, err.Error())
		}
	}
	start := time.Now()
	if !o.StartAt.IsZero() {
		var err error
		if start, err = rep.startAt(ctx, o.StartAt); err != nil {
			for _, c := range conns {
				_ = c.Close()
			}
			return nil, err
		}
	}
	var wg sync.WaitGroup
	for i := range rc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := rep.runConn(ctx, conns[i], rc[i].batches, start, o); err != nil {
				rep.mu.Lock()
				rep.ConnErrors = append(rep.ConnErrors, err.Error())
				rep.mu.Unlock()
			}
		}()
	}
	wg.Wait()
	rep.DurationSeconds = time.Since(start).Seconds()
	rep.finish()
	rep.classify(w, o)
	return rep, nil
}

// login sends AUTH on c when password is set and reads its reply within
// timeout: an error reply fails with the engine's text, which never holds
// the credentials.
func login(c net.Conn, user, password string, timeout time.Duration) error {
	if password == "" {
		return nil
	}
	args := []string{"AUTH", password}
	if user != "" {
		args = []string{"AUTH", user, password}
	}
	_ = c.SetDeadline(time.Now().Add(timeout))
	defer func() { _ = c.SetDeadline(time.Time{}) }()
	if _, err := c.Write(respconn.AppendCommand(nil, args...)); err != nil {
		return fmt.Errorf("AUTH: %w", err)
	}
	reply, err := newReplyReader(c).next()
	if err != nil {
		return fmt.Errorf("AUTH: %w", err)
	}
	if capture.Summarize(reply).IsErr() {
		msg := reply[1:] // -ERR text
		if reply[0] == resp.TypeBlobError {
			_, msg, _ = bytes.Cut(reply, []byte("\n")) // !len, then the text
		}
		return fmt.Errorf("AUTH refused: %s", strings.TrimSpace(string(msg)))
	}
	return nil
}

// sendState sends the state requests that carry no redacted credential and
// reads their replies.
func sendState(c net.Conn, state []byte) error {
	var scan resp.RequestScanner
	var out []byte
	n := 0
	for len(state) > 0 {
		scan.Reset()
		k, _, err := scan.Scan(state)
		if err != nil || k == 0 {
			break
		}
		if !bytes.Contains(state[:k], []byte(capture.Redacted)) {
			out = append(out, state[:k]...)
			n++
		}
		state = state[k:]
	}
	if n == 0 {
		return nil
	}
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	defer func() { _ = c.SetDeadline(time.Time{}) }()
	if _, err := c.Write(out); err != nil {
		return err
	}
	rd := newReplyReader(c)
	for range n {
		if _, err := rd.next(); err != nil {
			return fmt.Errorf("replay: connection state: %w", err)
		}
	}
	return nil
}

// replyReader reads whole replies (pushes skipped).
type replyReader struct {
	br  *bufio.Reader
	f   *resp.ReplyFramer
	cur []byte
	buf []byte
}

func newReplyReader(c io.Reader) *replyReader {
	return &replyReader{br: bufio.NewReaderSize(c, 64<<10), f: resp.NewReplyFramer(), buf: make([]byte, 64<<10)}
}

// next returns the next reply that is not a push; it aliases the reader's
// memory until the next call.
func (r *replyReader) next() ([]byte, error) {
	r.cur = r.cur[:0]
	for {
		if _, err := r.br.Peek(1); err != nil {
			return nil, err
		}
		b, _ := r.br.Peek(r.br.Buffered())
		n, done, err := r.f.Feed(b)
		r.cur = append(r.cur, b[:n]...)
		_, _ = r.br.Discard(n)
		if err != nil {
			return nil, err
		}
		if !done {
			continue
		}
		if len(r.cur) > 0 && r.cur[0] == resp.TypePush {
			r.cur = r.cur[:0]
			continue
		}
		return r.cur, nil
	}
}

// runConn replays batches on c.
func (rep *Report) runConn(ctx context.Context, c net.Conn, batches []capture.Batch, start time.Time, o Options) error {
	defer c.Close()
	q := make(chan pending, 1<<16)
	rd := newReplyReader(c)
	var rerr error
	rdone := make(chan struct{})
	answered := make(chan struct{}, 1)
	go func() {
		defer close(rdone)
		for p := range q {
			reply, err := rd.next()
			if err != nil {
				rerr = fmt.Errorf("replay: read: %w", err)
				for range q { // drain until the sender stops
				}
				return
			}
			now := time.Now()
			rep.record(p, reply, now, o)
			if p.last && o.Speed == 0 {
				answered <- struct{}{}
			}
		}
	}()
	var out []byte
	var ps []pending // the batch's commands: reused, they are copied into q
	tm := time.NewTimer(time.Hour)
	tm.Stop()
	sendErr := func() error {
		for bi := range batches {
			// By index: OnSend takes the batch's address, and a copy of
			// it would be allocated per batch (TestReplayAllocsPerBatch).
			b := &batches[bi]
			intended := start
			if o.Speed > 0 {
				d := time.Duration(float64(b.T) / o.Speed)
				if o.Duration > 0 && d > o.Duration {
					return nil
				}
				intended = start.Add(d)
				if err := waitUntil(ctx, intended, tm); err != nil {
					return err
				}
			} else if o.Duration > 0 && time.Since(start) > o.Duration {
				return nil
			}
			out, ps = out[:0], ps[:0]
			for i := range b.Cmds {
				cmd := &b.Cmds[i]
				if feedCommands[cmd.Name] || bytes.Contains(cmd.Req, []byte(capture.Redacted)) ||
					o.Skip != nil && o.Skip(cmd.Name, cmd.Req) {
					rep.mu.Lock()
					rep.Skipped++
					rep.mu.Unlock()
					continue
				}
				out = append(out, cmd.Req...)
				ps = append(ps, pending{cmd: cmd})
			}
			if len(ps) == 0 {
				continue
			}
			// Written first, the bookkeeping after: handing the requests
			// to the reader may wake it (a futex call) and the lag takes
			// the lock the readers hold while they compare replies, and
			// either before the write was part of the time the engine saw
			// (BenchmarkReplayLateness). The reader reads a reply only
			// after its request is queued, so the order of the two does
			// not matter to it.
			sent := time.Now()
			if o.Speed == 0 {
				intended = sent
			}
			if _, err := c.Write(out); err != nil {
				return fmt.Errorf("replay: write: %w", err)
			}
			ps[len(ps)-1].last = true
			for i := range ps {
				ps[i].intended, ps[i].sent = intended, sent
				q <- ps[i]
			}
			rep.mu.Lock()
			rep.Batches++
			lag := sent.Sub(intended)
			if lag > LateAfter {
				rep.LateBatches++
			}
			_ = rep.lag.RecordValue(max(int64(lag/time.Microsecond), 1))
			rep.mu.Unlock()
			if o.OnSend != nil {
				o.OnSend(b, intended, sent)
			}
			if o.Speed == 0 {
				select {
				case <-answered:
				case <-rdone:
					return errors.New("replay: reader ended")
				case <-ctx.Done():
					return ctx.Err()
				}
			}
		}
		return nil
	}()
	close(q)
	if sendErr != nil {
		_ = c.Close()
		<-rdone
		if rerr != nil {
			return rerr
		}
		return sendErr
	}
	<-rdone
	return rerr
}

func (rep *Report) stats(name string) *CommandStats {
	s := rep.PerCommand[name]
	if s == nil {
		s = &CommandStats{captured: hdrhistogram.New(1, histMax, 3), replayed: hdrhistogram.New(1, histMax, 3),
			sent: hdrhistogram.New(1, histMax, 3)}
		rep.PerCommand[name] = s
	}
	return s
}

// record compares one reply with the captured one.
func (rep *Report) record(p pending, reply []byte, now time.Time, o Options) {
	got := capture.Summarize(reply)
	cmp := Full
	if o.Compare != nil {
		cmp = o.Compare(p.cmd.Name)
	}
	lat := now.Sub(p.intended)
	if o.Observe != nil {
		o.Observe(p.cmd.Name, lat)
	}
	rep.mu.Lock()
	defer rep.mu.Unlock()
	rep.Commands++
	s := rep.stats(p.cmd.Name)
	s.Count++
	_ = s.replayed.RecordValue(max(int64(lat/time.Microsecond), 1))
	_ = s.sent.RecordValue(max(int64(now.Sub(p.sent)/time.Microsecond), 1))
	total := p.cmd.Total
	if in := p.cmd.Injected; in != nil {
		if rep.Injected == nil {
			rep.Injected = map[string]int64{}
		}
		rep.Injected[in.Rule+" "+in.Effect]++
		total -= in.Ns // the engine's and the path's time, as the replay's
	}
	c := p.cmd.Reply
	if c == nil {
		return
	}
	_ = s.captured.RecordValue(max(total/int64(time.Microsecond), 1))
	if got.IsErr() {
		rep.ErrorReplies++
	}
	// keep adds a sample to *to unless its command has samplesPerCommand
	// already (n counts them, this one included) or *to is full.
	keep := func(to *[]Sample, n int64) {
		if n <= samplesPerCommand && len(*to) < maxSamples {
			*to = append(*to, Sample{Command: p.cmd.Name, Request: trunc(p.cmd.Req), Captured: describe(*c),
				Replayed: describe(got) + " " + trunc(reply), cmd: p.cmd})
		}
	}
	switch {
	case got.IsErr() && !c.IsErr():
		rep.NewErrors++
		s.NewErrors++
		if rep.NewErrorKinds == nil {
			rep.NewErrorKinds = map[string]int64{}
		}
		rep.NewErrorKinds[got.ErrPfx]++
		keep(&rep.NewErrorSamples, s.NewErrors)
	case c.IsErr() && !got.IsErr():
		rep.GoneErrors++
		s.GoneErrors++
		keep(&rep.GoneErrSamples, s.GoneErrors)
	case c.Flags&capture.ReplyStreamed != 0:
		// Size and hash were not recorded.
	case cmp == Errors:
	case c.Type != got.Type || c.Size != got.Size || cmp == Full && c.Hash != got.Hash:
		rep.Mismatches++
		s.Mismatches++
		if o.Keys != nil {
			rep.mismatched = append(rep.mismatched, p.cmd)
		}
		keep(&rep.MismatchSamples, s.Mismatches)
	}
}

func describe(s capture.Summary) string {
	if s.IsErr() {
		return fmt.Sprintf("error %s", s.ErrPfx)
	}
	return fmt.Sprintf("type %q, %d bytes, hash %016x", s.Type, s.Size, s.Hash)
}

func trunc(b []byte) string {
	const n = 80
	s := string(b)
	if len(s) > n {
		s = s[:n] + "..."
	}
	return strings.ReplaceAll(s, "\r\n", " ")
}

// pcts are the percentiles reported (HdrHistogram's 0-100 scale).
var pcts = [3]float64{50, 99, 99.9}

func (rep *Report) finish() {
	for _, s := range rep.PerCommand {
		for i, p := range pcts {
			s.ReplayedUS[i] = s.replayed.ValueAtQuantile(p)
			s.SentUS[i] = s.sent.ValueAtQuantile(p)
			if s.captured.TotalCount() > 0 {
				s.CapturedUS[i] = s.captured.ValueAtQuantile(p)
				s.Ratio[i] = float64(s.ReplayedUS[i]) / float64(s.CapturedUS[i])
			}
		}
	}
	rep.SendLagP99US = rep.lag.ValueAtQuantile(99)
}

// Slower returns the command names whose replayed p99 is at least factor
// times the captured one, slowest ratio first.
func (rep *Report) Slower(factor float64) []string {
	var names []string
	for n, s := range rep.PerCommand {
		if s.Ratio[1] >= factor {
			names = append(names, n)
		}
	}
	sort.Slice(names, func(i, j int) bool { return rep.PerCommand[names[i]].Ratio[1] > rep.PerCommand[names[j]].Ratio[1] })
	return names
}

// Replayed returns the histogram (µs) of the latencies from the intended
// send time of command name, nil when none was replayed.
func (rep *Report) Replayed(name string) *hdrhistogram.Histogram {
	if s := rep.PerCommand[name]; s != nil {
		return s.replayed
	}
	return nil
}
