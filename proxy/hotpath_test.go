package proxy

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/panjf2000/gnet/v2"

	"github.com/respmeter/respmeter/internal/resp"
	"github.com/respmeter/respmeter/metrics"
	"github.com/respmeter/respmeter/metrics/slowlog"
	"github.com/respmeter/respmeter/routing/command"
)

// memConn is the part of gnet.Conn the session uses, in memory: Next hands
// out what the test put in, Write collects what the session sends. Any
// other method panics (the embedded interface is nil), which keeps the
// benchmark honest about what the hot path touches.
type memConn struct {
	gnet.Conn
	in  []byte
	out []byte
	ctx any
}

func (c *memConn) Next(int) ([]byte, error)    { b := c.in; c.in = nil; return b, nil }
func (c *memConn) Write(b []byte) (int, error) { c.out = append(c.out, b...); return len(b), nil }
func (c *memConn) Context() any                { return c.ctx }
func (c *memConn) SetContext(v any)            { c.ctx = v }
func (c *memConn) RemoteAddr() net.Addr        { return memPeer }
func (c *memConn) Close() error                { return nil }
func (c *memConn) Fd() int                     { return -1 }
func (c *memConn) OutboundBuffered() int       { return 0 }
func (c *memConn) EventLoop() gnet.EventLoop   { return nil }

// memPeer is every memConn's peer, one value as gnet keeps one per
// connection (net.IPv4 gives the 16-byte form, as the kernel's IPv4 peers
// come).
var memPeer net.Addr = &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1}

// pair builds a client in the default shape (one engine, a private
// connection) whose client and engine connections are memConns, logging to
// sl (nil: no slow log).
func pair(tb testing.TB, measure bool, sl *slowlog.Log) (*client, *memConn, *link) {
	tb.Helper()
	return memPair(tb, Config{Listen: "127.0.0.1:0", Upstream: "127.0.0.1:1", Measure: measure}, sl)
}

// memPair builds a client of cfg's shape whose client and engine
// connections (one per shard; cfg.Upstream's alone without routing) are
// memConns, and returns it with the connection of shard 0 (key:a's owner).
// With shared upstream connections they are the loop's.
func memPair(tb testing.TB, cfg Config, sl *slowlog.Log) (*client, *memConn, *link) {
	tb.Helper()
	set := metrics.NewSet(1, command.Names())
	cfg.Metrics, cfg.SlowLog = set, sl
	if cfg.UpstreamTimeout == 0 {
		cfg.UpstreamTimeout = 5 * time.Second // respmeter proxy's default: each command is looked at for a blocking wait
	}
	p, err := New(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	l := p.loopFor(nil)
	if cfg.Measure {
		l.m = set.Loop(0)
	}
	cl := &memConn{}
	s := newClient(p, cl, l)
	s.home = 0
	addrs := cfg.Shards
	if len(addrs) == 0 {
		addrs = []string{cfg.Upstream}
	}
	var ln *link
	for i, addr := range addrs {
		x := &link{p: p, l: l, idx: i, addr: addr, rf: resp.NewReplyFramer(), mshard: set.Shard(addr), c: &memConn{}}
		if p.shared {
			for len(l.shared) <= i*2 {
				l.shared = append(l.shared, nil)
			}
			l.shared[i*2] = x
		} else {
			x.owner = s
			s.links = append(s.links, x)
		}
		if i == 0 {
			ln = x
		}
	}
	return s, cl, ln
}

// roundTrip sends one request through the client and its reply back.
func roundTrip(s *client, cl *memConn, ln *link, req, reply []byte) {
	up := ln.c.(*memConn)
	cl.in = req
	s.clientTraffic(cl)
	up.out = up.out[:0]
	up.in = reply
	ln.traffic(up)
	cl.out = cl.out[:0]
}

var (
	getReq   = []byte("*2\r\n$3\r\nGET\r\n$5\r\nkey:a\r\n")
	getReply = []byte("$5\r\nvalue\r\n")
)

// TestHotPathAllocs pins the steady-state per-command path (frame the
// request, queue it, forward it, frame the reply, match it, relay it,
// record its timings) at zero allocations.
func TestHotPathAllocs(t *testing.T) {
	for _, measure := range []bool{true, false} {
		s, cl, up := pair(t, measure, nil)
		for i := 0; i < 100; i++ { // warm up: histograms, fifo, scratch slices
			roundTrip(s, cl, up, getReq, getReply)
		}
		allocs := testing.AllocsPerRun(1000, func() { roundTrip(s, cl, up, getReq, getReply) })
		if allocs != 0 {
			t.Errorf("measure=%v: %v allocations per command, want 0", measure, allocs)
		}
	}
}

// TestSessionForwardsAndMatches checks the in-memory pair itself: bytes go
// through unchanged, and the reply is matched to the request.
func TestSessionForwardsAndMatches(t *testing.T) {
	s, cl, ln := pair(t, true, nil)
	up := ln.c.(*memConn)
	cl.in = append(append([]byte{}, getReq...), getReq...)
	s.clientTraffic(cl)
	if string(up.out) != string(getReq)+string(getReq) {
		t.Fatalf("upstream got %q", up.out)
	}
	if s.q.len() != 2 {
		t.Fatalf("pending = %d, want 2", s.q.len())
	}
	up.in = append(append([]byte{}, getReply...), getReply[:3]...)
	ln.traffic(up)
	if s.q.len() != 1 {
		t.Fatalf("pending after 1.5 replies = %d, want 1", s.q.len())
	}
	up.in = getReply[3:]
	ln.traffic(up)
	if s.q.len() != 0 || string(cl.out) != string(getReply)+string(getReply) {
		t.Fatalf("pending %d, client got %q", s.q.len(), cl.out)
	}
}

// BenchmarkHotPath is the whole per-command path on an in-memory pair.
func BenchmarkHotPath(b *testing.B) {
	for _, bc := range []struct {
		name    string
		measure bool
	}{{"measure", true}, {"forward-only", false}} {
		b.Run(bc.name, func(b *testing.B) {
			s, cl, up := pair(b, bc.measure, nil)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				roundTrip(s, cl, up, getReq, getReply)
			}
		})
	}
	// p16v256: 16 GETs in one client read, their 16 replies of 256-byte
	// values in one engine read, as memtier --pipeline=16 drives it; b.N
	// counts commands, so ns/op is per command.
	p16v256 := func(b *testing.B, s *client, cl *memConn, up *link) {
		r1 := []byte("$256\r\n" + strings.Repeat("v", 256) + "\r\n")
		q1 := []byte("*2\r\n$3\r\nGET\r\n$13\r\nmemtier-12345\r\n")
		req, reply := bytes.Repeat(q1, 16), bytes.Repeat(r1, 16)
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i += 16 {
			roundTrip(s, cl, up, req, reply)
		}
	}
	b.Run("p16v256", func(b *testing.B) {
		s, cl, up := pair(b, true, nil)
		p16v256(b, s, cl, up)
	})
	// shared-p16v256: the same through --upstream-mode shared with the
	// slow log on at respmeter proxy's defaults (128 entries, 10 ms), as
	// bench/peers.sh's respmeter-shared target runs (issue 20).
	b.Run("shared-p16v256", func(b *testing.B) {
		cfg := Config{Listen: "127.0.0.1:0", Upstream: "127.0.0.1:1", UpstreamMode: UpstreamShared, Measure: true}
		s, cl, up := memPair(b, cfg, slowlog.New(128, 10*time.Millisecond))
		p16v256(b, s, cl, up)
	})
	b.Run("pipeline16", func(b *testing.B) {
		s, cl, up := pair(b, true, nil)
		req, reply := bytes.Repeat(getReq, 16), bytes.Repeat(getReply, 16)
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i += 16 {
			roundTrip(s, cl, up, req, reply)
		}
	})
}

// routedPair builds a client under --route slots over three shards (or
// with shared upstream connections) on memConns; see memPair.
func routedPair(tb testing.TB, shared bool, sl *slowlog.Log) (*client, *memConn, *link) {
	tb.Helper()
	cfg := Config{Listen: "127.0.0.1:0", Route: RouteSlots, Shards: []string{"127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"}, Measure: true}
	if shared {
		cfg.UpstreamMode = UpstreamShared
	}
	return memPair(tb, cfg, sl)
}

// TestRoutedHotPathAllocs pins the routed per-command path (route by slot,
// queue on the shard's link, match, put back in order, record the command
// and shard timings) at zero allocations, private and shared.
func TestRoutedHotPathAllocs(t *testing.T) {
	for _, shared := range []bool{false, true} {
		s, cl, ln := routedPair(t, shared, nil)
		roundTrip(s, cl, ln, getReq, getReply)
		if string(cl.out) != "" { // cleared by roundTrip; check one by hand
			t.Fatal("unexpected")
		}
		cl.in = getReq
		s.clientTraffic(cl)
		up := ln.c.(*memConn)
		if string(up.out) != string(getReq) {
			t.Fatalf("shared=%v: shard 0 got %q", shared, up.out)
		}
		up.out, up.in = up.out[:0], getReply
		ln.traffic(up)
		if string(cl.out) != string(getReply) {
			t.Fatalf("shared=%v: client got %q", shared, cl.out)
		}
		cl.out = cl.out[:0]
		for i := 0; i < 100; i++ {
			roundTrip(s, cl, ln, getReq, getReply)
		}
		allocs := testing.AllocsPerRun(1000, func() { roundTrip(s, cl, ln, getReq, getReply) })
		if allocs != 0 {
			t.Errorf("shared=%v: %v allocations per command, want 0", shared, allocs)
		}
	}
}

// BenchmarkRoutedHotPath is the routed per-command path on in-memory
// connections.
func BenchmarkRoutedHotPath(b *testing.B) {
	for _, shared := range []bool{false, true} {
		name := "slots"
		if shared {
			name = "slots-shared"
		}
		b.Run(name, func(b *testing.B) {
			s, cl, ln := routedPair(b, shared, nil)
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				roundTrip(s, cl, ln, getReq, getReply)
			}
		})
	}
}

// TestHotPathAllocsSlowLogged: with a slow-log threshold of 0 every
// command is a slow command, as most are when a saturated engine queues
// pipelines for more than the default 10 ms; recording them allocates
// nothing either (they used to cost about ten allocations each), and the
// log holds them.
func TestHotPathAllocsSlowLogged(t *testing.T) {
	sl := slowlog.New(8, 0)
	s, cl, up := pair(t, true, sl)
	for i := 0; i < 100; i++ {
		roundTrip(s, cl, up, getReq, getReply)
	}
	if a := testing.AllocsPerRun(1000, func() { roundTrip(s, cl, up, getReq, getReply) }); a != 0 {
		t.Errorf("passthrough: %v allocations per slow command, want 0", a)
	}
	rs, rcl, ln := routedPair(t, false, sl)
	for i := 0; i < 100; i++ {
		roundTrip(rs, rcl, ln, getReq, getReply)
	}
	if a := testing.AllocsPerRun(1000, func() { roundTrip(rs, rcl, ln, getReq, getReply) }); a != 0 {
		t.Errorf("routed: %v allocations per slow command, want 0", a)
	}
	es := sl.Entries()
	if len(es) != 8 || es[0].Command != "get" || es[0].FirstKey != "key:a" || es[0].Client != "127.0.0.1:1" || es[0].Args != 2 {
		t.Fatalf("slow log after 2,202 slow GETs: %d entries, newest %+v", len(es), es[0])
	}
	if es[0].ID != 2201 {
		t.Errorf("newest ID %d, want 2201 (2 x (100 + 1001 AllocsPerRun runs) - 1)", es[0].ID)
	}
}

// taskLoop is the part of gnet.EventLoop a loop uses for deferred writes:
// Execute keeps the task for the test to run, as gnet runs it after the
// ready connections of its next pass.
type taskLoop struct {
	gnet.EventLoop
	tasks []gnet.Runnable
}

func (e *taskLoop) Execute(_ context.Context, r gnet.Runnable) error {
	e.tasks = append(e.tasks, r)
	return nil
}

// TestSharedWritesOncePerPass: in shared mode the requests of two clients
// read in the same pass of the event loop go to the engine in one write,
// made by one task queued for the end of the pass; their replies still
// reach each its own client.
func TestSharedWritesOncePerPass(t *testing.T) {
	set := metrics.NewSet(1, command.Names())
	p, err := New(Config{Listen: "127.0.0.1:0", Upstream: "127.0.0.1:1", UpstreamMode: UpstreamShared, Measure: true, Metrics: set})
	if err != nil {
		t.Fatal(err)
	}
	p.stallAfter = 0 // no timer's task among the pass's
	el := &taskLoop{}
	l := p.loopFor(el)
	l.m = set.Loop(0)
	up := &memConn{}
	ln := &link{p: p, l: l, idx: 0, addr: "127.0.0.1:1", rf: resp.NewReplyFramer(), mshard: set.Shard("127.0.0.1:1"), c: up}
	l.shared = []*link{ln}
	c1, c2 := &memConn{}, &memConn{}
	s1, s2 := newClient(p, c1, l), newClient(p, c2, l)
	s1.slot, s2.slot = 0, 0
	c1.in = []byte("*2\r\n$3\r\nGET\r\n$1\r\na\r\n")
	s1.clientTraffic(c1)
	c2.in = []byte("*2\r\n$3\r\nGET\r\n$1\r\nb\r\n")
	s2.clientTraffic(c2)
	if len(up.out) != 0 {
		t.Fatalf("the engine got %q before the end of the pass", up.out)
	}
	if len(el.tasks) != 1 {
		t.Fatalf("%d tasks queued, want 1 for the pass", len(el.tasks))
	}
	if err := el.tasks[0].Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if want := "*2\r\n$3\r\nGET\r\n$1\r\na\r\n*2\r\n$3\r\nGET\r\n$1\r\nb\r\n"; string(up.out) != want {
		t.Fatalf("the engine got %q, want both requests in one write", up.out)
	}
	if b := set.Snapshot().Shards[0].Batch; b.Count() != 1 || b.Sum != 2 {
		t.Errorf("batches: %d writes carrying %d commands, want 1 carrying 2", b.Count(), b.Sum)
	}
	up.in = []byte("$2\r\nva\r\n$2\r\nvb\r\n")
	ln.traffic(up)
	if string(c1.out) != "$2\r\nva\r\n" || string(c2.out) != "$2\r\nvb\r\n" {
		t.Errorf("replies: client 1 got %q, client 2 got %q", c1.out, c2.out)
	}
	// A second pass queues a task again.
	c1.in = []byte("*1\r\n$4\r\nPING\r\n")
	s1.clientTraffic(c1)
	if len(el.tasks) != 2 {
		t.Errorf("%d tasks after a second pass, want 2", len(el.tasks))
	}
}

// TestSharedLinkDropsRepliesOfGoneClient: on a shared link, the replies in
// flight for a client that left are framed and dropped as they arrive, not
// collected whole (an evicted client with hundreds of 1 MiB replies in
// flight cost a copy of each: 212 MiB peak RSS against 114 MiB since), and
// the next reply on the link still goes to its own client.
func TestSharedLinkDropsRepliesOfGoneClient(t *testing.T) {
	gone, goneCl, ln := routedPair(t, true, nil)
	gone.clientTraffic(&memConn{in: getReq})
	stay := newClient(gone.p, &memConn{}, gone.l)
	stay.home = 0
	stayCl := stay.conn.(*memConn)
	stayCl.in = getReq
	stay.clientTraffic(stayCl)
	if ln.q.len() != 2 {
		t.Fatalf("%d requests on the shared link, want 2", ln.q.len())
	}
	gone.shutdown()
	big := []byte("$1048576\r\n" + strings.Repeat("v", 1<<20) + "\r\n")
	for off := 0; off < len(big); off += 64 << 10 {
		ln.onData(big[off:min(off+64<<10, len(big))])
		if len(ln.cur) != 0 {
			t.Fatalf("after %d bytes of the gone client's reply, %d held", off, len(ln.cur))
		}
	}
	ln.onData(getReply)
	if string(stayCl.out) != string(getReply) || len(goneCl.out) != 0 {
		t.Fatalf("client that stayed got %q, the one that left %d bytes", stayCl.out, len(goneCl.out))
	}
	if ln.q.len() != 0 {
		t.Fatalf("%d requests left on the link", ln.q.len())
	}
}

// pipeTrip sends one pipeline (req, n requests) through s and answers
// each shard connection with one reply per request it got, all in one
// read per connection, as a shard answers a batch.
func pipeTrip(s *client, cl *memConn, links []*link, req, reply []byte) {
	cl.in = req
	s.clientTraffic(cl)
	for _, ln := range links {
		up := ln.c.(*memConn)
		n := bytes.Count(up.out, []byte("*2\r\n$3\r\nGET"))
		up.out = up.out[:0]
		if n == 0 {
			continue
		}
		up.in = bytes.Repeat(reply, n)
		ln.traffic(up)
	}
	cl.out = cl.out[:0]
}

// BenchmarkPipeline16 is a pipeline of 16 GETs whose keys hash to all
// three shards, through --route slots (split per shard, put back in
// order) and through --route pinned (all to one shard, the perfectly
// routing client); b.N counts commands. The slot-routing CPU target
// (BENCHMARKS.md, "CPU targets and their floors": at most 1.5x) compares
// the two.
func BenchmarkPipeline16(b *testing.B) {
	var req []byte
	for i := range 16 {
		k := "key:" + strconv.Itoa(i)
		req = fmt.Appendf(req, "*2\r\n$3\r\nGET\r\n$%d\r\n%s\r\n", len(k), k)
	}
	for _, route := range []string{RouteSlots, RoutePinned} {
		b.Run(route, func(b *testing.B) {
			cfg := Config{Listen: "127.0.0.1:0", Route: route, Shards: []string{"127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"}, Measure: true}
			s, cl, _ := memPair(b, cfg, nil)
			links := s.links
			if route == RoutePinned {
				links = s.links[:1]
				s.home = 0
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i += 16 {
				pipeTrip(s, cl, links, req, getReply)
			}
		})
	}
}

// TestLoopLookupRemembersRightly: the loop's remembered command name
// (loop.lookup) answers as the resolver does for every name in a sequence
// of repeats, case changes, lengths around what it remembers, an empty
// name and unknown ones, and a repeat after a name too long to remember
// still gets the earlier name's ID.
func TestLoopLookupRemembersRightly(t *testing.T) {
	s, _, _ := pair(t, true, nil)
	l := s.l
	long := strings.Repeat("x", lastNameLen+1)
	names := []string{"", "GET", "GET", "get", "SET", "GET", "gEt", "", "client", "CLIENT",
		long, "GET", strings.Repeat("y", lastNameLen), strings.Repeat("y", lastNameLen), "nosuchcommand",
		"nosuchcommand", "GET", "set", long, long, "SET"}
	for i, n := range names {
		got, want := l.lookup([]byte(n)), s.p.resolver.Lookup([]byte(n))
		if got != want {
			t.Fatalf("name %d %q: lookup = %v, resolver = %v", i, n, got, want)
		}
	}
	// The second lookup of a name is answered from the loop's last-name cache.
	if first, cached := l.lookup([]byte("GET")), l.lookup([]byte("GET")); first != command.Get || cached != command.Get {
		t.Fatalf("GET is not Get: %v, then %v (cached)", first, cached)
	}
}
