package proxy

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/panjf2000/gnet/v2"

	"github.com/respmeter/respmeter/internal/redistest"
	"github.com/respmeter/respmeter/routing/command"
)

// TestBlockWait: the wait each blocking command asks for, from its own
// timeout argument.
func TestBlockWait(t *testing.T) {
	split := func(s ...string) [][]byte {
		out := make([][]byte, len(s))
		for i, a := range s {
			out[i] = []byte(a)
		}
		return out
	}
	for _, tc := range []struct {
		id   command.ID
		args [][]byte
		want int64
	}{
		{command.Blpop, split("BLPOP", "a", "b", "5"), int64(5 * time.Second)},
		{command.Blpop, split("BLPOP", "a", "0"), -1},
		{command.Brpop, split("BRPOP", "a", "0.25"), int64(250 * time.Millisecond)},
		{command.Brpoplpush, split("BRPOPLPUSH", "a", "b", "2"), int64(2 * time.Second)},
		{command.Blmove, split("BLMOVE", "a", "b", "LEFT", "RIGHT", "1.5"), int64(1500 * time.Millisecond)},
		{command.Bzpopmin, split("BZPOPMIN", "z", "3"), int64(3 * time.Second)},
		{command.Blmpop, split("BLMPOP", "4", "1", "a", "LEFT"), int64(4 * time.Second)},
		{command.Bzmpop, split("BZMPOP", "0", "1", "z", "MIN"), -1},
		{command.Wait, split("WAIT", "1", "100"), int64(100 * time.Millisecond)},
		{command.Wait, split("WAIT", "1", "0"), -1},
		{command.Xread, split("XREAD", "COUNT", "2", "BLOCK", "700", "STREAMS", "s", "$"), int64(700 * time.Millisecond)},
		{command.Xread, split("XREAD", "BLOCK", "0", "STREAMS", "s", "$"), -1},
		{command.Xread, split("XREAD", "STREAMS", "block", "0"), 0}, // a stream named "block", no BLOCK
		{command.Xreadgroup, split("XREADGROUP", "GROUP", "g", "c", "BLOCK", "20", "STREAMS", "s", ">"), int64(20 * time.Millisecond)},
		{command.Blpop, split("BLPOP", "a", "soon"), -1},
		{command.Other, split("MODULE.BLOCK", "k"), -1},
	} {
		if got := blockWait(tc.id, tc.args); got != tc.want {
			t.Errorf("%q: %d, want %d", tc.args, got, tc.want)
		}
	}
}

// startTimeoutProxy starts a one-loop proxy in front of srv with
// UpstreamTimeout 300 ms (stopped by a cleanup), and returns it with a
// count of its timeout checks so far.
func startTimeoutProxy(t *testing.T, srv *redistest.Server) (*Proxy, func() int64) {
	t.Helper()
	p, err := New(Config{Listen: "127.0.0.1:0", Upstream: srv.Addr(), Loops: 1, DrainTimeout: time.Second,
		DialTimeout: time.Second, UpstreamTimeout: 300 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Stop(context.Background()) })
	return p, func() int64 { return p.sumLoops(func(l *loop) int64 { return l.upLooks.Load() }) }
}

// TestUpstreamTimeoutSparesBlocking: with UpstreamTimeout 300 ms, a BLPOP
// with timeout 0 pending on a healthy engine is never cut (the loop looked
// at it at least 8 times, 600 ms, twice the timeout, before the element
// comes), and a BLPOP 1 gets the engine's own nil after its 1 s, not the
// proxy's error at 300 ms: the engine was waiting on purpose.
func TestUpstreamTimeoutSparesBlocking(t *testing.T) {
	p, looks := startTimeoutProxy(t, redistest.Start(t))
	forever, timed := redistest.Dial(t, p.Addr()), redistest.Dial(t, p.Addr())
	defer forever.Close()
	defer timed.Close()
	forever.Send(t, redistest.Cmd("BLPOP", "q0", "0"))
	timed.Send(t, redistest.Cmd("BLPOP", "q1", "1"))
	sent := time.Now()
	timed.Expect(t, []byte("*-1\r\n"), 10*time.Second)
	if took := time.Since(sent); took < time.Second {
		t.Errorf("BLPOP q1 1 answered after %v, before its own timeout", took)
	}
	from := looks()
	redistest.Eventually(t, 10*time.Second, func() error {
		if n := looks() - from; n < 8 {
			return fmt.Errorf("%d looks at the pending BLPOP 0", n)
		}
		return nil
	})
	if b := forever.Quiet(50 * time.Millisecond); len(b) > 0 {
		t.Fatalf("BLPOP q0 0 got %q before any element", b)
	}
	push := redistest.Dial(t, p.Addr())
	defer push.Close()
	push.Roundtrip(t, redistest.Cmd("LPUSH", "q0", "x"), []byte(":1\r\n"))
	forever.Expect(t, []byte("*2\r\n$2\r\nq0\r\n$1\r\nx\r\n"), 5*time.Second)
}

// TestUpstreamTimeoutReadsFirst: a reply that came while the loop was kept
// busy (here: a task that holds it for 1 s, past the 300 ms timeout) sits
// unread in the socket when the timeout check runs; the check reads it
// first, so the request gets its reply, not "not answering".
func TestUpstreamTimeoutReadsFirst(t *testing.T) {
	p, looks := startTimeoutProxy(t, redistest.Start(t, "--enable-debug-command", "yes"))
	c := redistest.Dial(t, p.Addr())
	defer c.Close()
	c.Roundtrip(t, redistest.Cmd("PING"), []byte("+PONG\r\n"))
	before := looks()
	c.Send(t, redistest.Cmd("DEBUG", "SLEEP", "0.25")) // slow, within the timeout
	// A look saw it pending (its wait starts there), then the loop is held.
	redistest.Eventually(t, 5*time.Second, func() error {
		if looks() == before || p.InFlight() != 1 {
			return fmt.Errorf("no look at the pending DEBUG SLEEP yet (looks %d, before %d, in flight %d)", looks(), before, p.InFlight())
		}
		return nil
	})
	p.mu.Lock()
	var l *loop
	for _, x := range p.loops {
		l = x
	}
	p.mu.Unlock()
	if err := l.el.Execute(context.Background(), gnet.RunnableFunc(func(context.Context) error {
		time.Sleep(time.Second)
		return nil
	})); err != nil {
		t.Fatal(err)
	}
	c.Expect(t, []byte("+OK\r\n"), 10*time.Second)
}

// BenchmarkUpstreamTimeoutHotPath: the per-command cost of the upstream
// timeout (a blocking-command check per request) on the in-memory pair,
// off (a negative UpstreamTimeout, as 0 means 5 s in memPair) and on.
func BenchmarkUpstreamTimeoutHotPath(b *testing.B) {
	for _, bc := range []struct {
		name    string
		timeout time.Duration
	}{{"off", -1}, {"on", 5 * time.Second}} {
		b.Run(bc.name, func(b *testing.B) {
			s, cl, up := memPair(b, Config{Listen: "127.0.0.1:0", Upstream: "127.0.0.1:1", Measure: true, UpstreamTimeout: bc.timeout}, nil)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				roundTrip(s, cl, up, getReq, getReply)
			}
		})
	}
}
