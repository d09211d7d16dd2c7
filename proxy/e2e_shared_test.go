package proxy_test

// Shared (multiplexed) upstream connections: --upstream-mode shared. The
// whole e2e suite also runs in this mode (RESPMETER_TEST_UPSTREAM_MODE=
// shared, see .ci/run); these tests cover what only this mode does.

import (
	"bytes"
	"context"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/respmeter/respmeter/internal/redistest"
	"github.com/respmeter/respmeter/proxy"
	"github.com/respmeter/respmeter/routing/command"
)

func sharedSetup(t *testing.T, args ...string) *e2eEnv {
	t.Helper()
	return e2eSetupWith(t, func(c *proxy.Config) {
		c.UpstreamMode = proxy.UpstreamShared
		c.Loops = 1
	}, args...)
}

// TestSharedMovesStatefulClientsToPrivate: a client that issues MULTI,
// BLPOP and SUBSCRIBE in the middle of a pipeline is moved to a private
// connection without losing or reordering a reply (the engine is the
// oracle), and each move is counted.
func TestSharedMovesStatefulClientsToPrivate(t *testing.T) {
	e := sharedSetup(t)
	pipeline := respJoin(
		respCmd("SET", "{sh}a", "1"), // one slot, so that routed modes run the same
		respCmd("INCR", "{sh}n"),
		respCmd("MULTI"),
		respCmd("INCR", "{sh}n"),
		respCmd("GET", "{sh}a"),
		respCmd("EXEC"),
		respCmd("GET", "{sh}n"),
	)
	e.same(t, [][]byte{pipeline}, redistest.ExchangeOptions{Want: len("+OK\r\n:1\r\n+OK\r\n+QUEUED\r\n+QUEUED\r\n*2\r\n:2\r\n$1\r\n1\r\n$1\r\n2\r\n")})
	blocking := respJoin(
		respCmd("RPUSH", "{sh}l", "x"),
		respCmd("BLPOP", "{sh}l", "{sh}empty", "1"),
		respCmd("BLPOP", "{sh}empty", "0.1"),
		respCmd("PING"),
	)
	e.same(t, [][]byte{blocking}, redistest.ExchangeOptions{Want: len(":1\r\n*2\r\n$5\r\n{sh}l\r\n$1\r\nx\r\n*-1\r\n+PONG\r\n")})
	sub := respJoin(
		respCmd("GET", "sh:a"),
		respCmd("SUBSCRIBE", "sh:ch"),
		respCmd("PING"),
	)
	e.same(t, [][]byte{sub}, redistest.ExchangeOptions{Want: len("$-1\r\n*3\r\n$9\r\nsubscribe\r\n$5\r\nsh:ch\r\n:1\r\n*2\r\n$4\r\npong\r\n$0\r\n\r\n")})
	// WAIT holds its connection up to its timeout (no replicas here), though
	// COMMAND INFO does not flag it blocking: it too moves the client.
	wait := respJoin(respCmd("SET", "sh:w", "1"), respCmd("WAIT", "1", "50"), respCmd("GET", "sh:w"))
	e.same(t, [][]byte{wait}, redistest.ExchangeOptions{Want: len("+OK\r\n:0\r\n$1\r\n1\r\n")})
	r := e.set.Snapshot().Routing
	if r.HandoffsTransaction != 1 || r.HandoffsBlocking != 2 || r.HandoffsPubSub != 1 {
		t.Errorf("handoffs: %+v, want 1 transaction, 2 blocking (BLPOP, WAIT), 1 pubsub", r)
	}
	if w := e.set.Snapshot().Commands[command.Wait]; w.Count == 0 {
		t.Errorf("WAIT not counted")
	}
	for _, id := range proxy.ExcludedFromTotals(nil) {
		if id == int(command.Wait) {
			return
		}
	}
	t.Errorf("WAIT is in the all-commands totals; it waits up to its timeout")
}

// TestSharedSubscriberGetsMessages: after the move, the subscriber gets
// messages published by another client.
func TestSharedSubscriberGetsMessages(t *testing.T) {
	e := sharedSetup(t)
	sub := redistest.Dial(t, e.paddr)
	defer sub.Close()
	sub.Roundtrip(t, respCmd("SET", "k", "v"), []byte("+OK\r\n"))
	sub.Roundtrip(t, respCmd("SUBSCRIBE", "news"), []byte("*3\r\n$9\r\nsubscribe\r\n$4\r\nnews\r\n:1\r\n"))
	pub := redistest.Dial(t, e.paddr)
	defer pub.Close()
	pub.Roundtrip(t, respCmd("PUBLISH", "news", "hi"), []byte(":1\r\n"))
	sub.Expect(t, []byte("*3\r\n$7\r\nmessage\r\n$4\r\nnews\r\n$2\r\nhi\r\n"), 0)
}

// TestSharedManyClientsNoCrossTalk: clients of one loop share one upstream
// connection; each still gets exactly its own replies, in order.
func TestSharedManyClientsNoCrossTalk(t *testing.T) {
	e := sharedSetup(t)
	const clients, rounds, depth = 40, 50, 8
	var wg sync.WaitGroup
	errs := make(chan error, clients)
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			conn, err := redistest.DialConn(e.paddr, 5*time.Second)
			if err != nil {
				errs <- err
				return
			}
			defer conn.Close()
			for r := range rounds {
				var req, want []byte
				for i := range depth {
					v := fmt.Sprintf("c%d-r%d-i%d", c, r, i)
					req = append(req, respCmd("ECHO", v)...)
					want = append(want, fmt.Sprintf("$%d\r\n%s\r\n", len(v), v)...)
				}
				if err := conn.Write(req); err != nil {
					errs <- err
					return
				}
				got, err := conn.ReadN(len(want), 5*time.Second)
				if err != nil || string(got) != string(want) {
					errs <- fmt.Errorf("client %d round %d: got %q, want %q (%v)", c, r, got, want, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	// One shared connection (RESP2) on the one loop served all of them
	// (besides it: ours, and the one the auth check keeps).
	clist := e.srv.Do("CLIENT", "LIST").(string)
	if n := strings.Count(clist, "\n") - strings.Count(clist, " name=respmeter-auth-check "); n > 2 {
		t.Errorf("engine sees %d connections, want the shared one (and ours):\n%s", n, clist)
	}
	sums := e.set.Snapshot().Shards
	var cmds, batches int64
	for _, sh := range sums {
		cmds += sh.Batch.Sum
		batches += sh.Batch.Count()
	}
	if cmds != clients*rounds*depth {
		t.Errorf("batches carried %d commands, want %d", cmds, clients*rounds*depth)
	}
	_ = context.Background
}

// TestSharedDeepPipelineWindow: one client pipelining 20,000 requests in
// one write gets every reply, in order, while the shared connection never
// carries more than 512 of its requests at once, and gets them in batches
// far deeper than the 32 the window once was (which also waited for every
// reply before reading on: a round trip per 32 commands).
func TestSharedDeepPipelineWindow(t *testing.T) {
	e := sharedSetup(t)
	const n = 20000
	var req, want []byte
	for i := range n {
		v := fmt.Sprintf("deep-%d", i)
		req = append(req, respCmd("ECHO", v)...)
		want = append(want, fmt.Sprintf("$%d\r\n%s\r\n", len(v), v)...)
	}
	conn, err := redistest.DialConn(e.paddr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if err := conn.Write(req); err != nil {
		t.Fatal(err)
	}
	got, err := conn.ReadN(len(want), 30*time.Second)
	if err != nil || string(got) != string(want) {
		t.Fatalf("replies differ from the requests' order (%v): got %d bytes, want %d", err, len(got), len(want))
	}
	var b struct{ sum, count, max int64 }
	for _, sh := range e.set.Snapshot().Shards {
		b.sum += sh.Batch.Sum
		b.count += sh.Batch.Count()
		b.max = max(b.max, sh.Batch.Max())
	}
	t.Logf("%d commands in %d upstream writes: mean %.1f, max %d", b.sum, b.count, float64(b.sum)/float64(b.count), b.max)
	if b.sum != n {
		t.Errorf("upstream writes carried %d commands, want %d", b.sum, n)
	}
	if b.max > 512 {
		t.Errorf("a write carried %d of the client's requests, over the window of 512", b.max)
	}
	if mean := float64(b.sum) / float64(b.count); mean < 128 {
		t.Errorf("mean batch %.1f commands, want at least 128 (a window of 512 read on at 256)", mean)
	}
}

// TestSharedHelloAfterPipelinedRequest: HELLO switching protocol behind a
// request still in flight waits for that reply, then is answered; the
// engine is the oracle. (It once resumed as soon as half of the shared
// window was free, paused again at once, and overflowed the stack: the
// whole proxy died.)
func TestSharedHelloAfterPipelinedRequest(t *testing.T) {
	e := sharedSetup(t)
	for _, tc := range []struct {
		in     []byte
		frames int
	}{
		{respJoin(respCmd("PING"), respCmd("HELLO", "3"), respCmd("PING")), 3},
		{respJoin(respCmd("HELLO", "3"), respCmd("SET", "sh:h", "1"), respCmd("HELLO", "2"), respCmd("GET", "sh:h")), 4},
	} {
		in := tc.in
		got := e.same(t, [][]byte{in}, redistest.ExchangeOptions{Frames: tc.frames, Linger: 50 * time.Millisecond}, maskHelloID)
		if len(got) == 0 || !bytes.HasSuffix(got, []byte("\r\n")) {
			t.Errorf("%q: got %q", in, got)
		}
	}
	e.healthy(t)
}

// helloID is the client id field of a HELLO reply (RESP2 or RESP3).
var helloID = regexp.MustCompile(`\$2\r\nid\r\n:[0-9]+\r\n`)

// maskHelloID blanks the client ids in HELLO replies: the engine numbers
// its connections, and the proxy's are not the test's.
func maskHelloID(b []byte) []byte {
	return helloID.ReplaceAll(b, []byte("$2\r\nid\r\n:N\r\n"))
}
