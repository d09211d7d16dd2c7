package proxy_test

// Regression tests for faults found by adversarial testing: each sends the
// bytes that once made the proxy differ from the engine, and requires the
// same bytes (and the same close) as a direct connection.

import (
	"bytes"
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/respmeter/respmeter/internal/redistest"
	"github.com/respmeter/respmeter/proxy"
	"github.com/respmeter/respmeter/proxy/proxytest"
)

func TestBreakerRegressions(t *testing.T) {
	t.Parallel()
	e := e2eSetup(t)
	until := func(frames int) redistest.ExchangeOptions {
		return redistest.ExchangeOptions{Frames: frames, Linger: 50 * time.Millisecond, Timeout: 3 * time.Second}
	}
	toClose := redistest.ExchangeOptions{Timeout: 3 * time.Second}
	for _, tc := range []struct {
		name   string
		setup  [][]any
		writes [][]byte
		o      redistest.ExchangeOptions
	}{
		{
			// RESP3: pub/sub messages are pushes; an array reply whose first
			// element is "message" answers LRANGE.
			name:  "resp3 subscribed array reply starting with message",
			setup: [][]any{{"RPUSH", "brk:l", "message", "x"}},
			writes: [][]byte{respJoin(respCmd("HELLO", "3"), respCmd("SUBSCRIBE", "brk:ch"),
				respCmd("LRANGE", "brk:l", "0", "-1"), []byte("*x\r\n"))},
			o: toClose,
		},
		{
			name:   "refused PSYNC does not turn the connection into a stream",
			writes: [][]byte{respJoin(respCmd("PSYNC", "x"), respCmd("PING"), []byte("*x\r\n"))},
			o:      toClose,
		},
		{
			name: "CLIENT REPLY OFF refused while subscribed (RESP2)",
			writes: [][]byte{respJoin(respCmd("SUBSCRIBE", "brk:ch"), respCmd("CLIENT", "REPLY", "OFF"),
				respCmd("PING"), []byte("*x\r\n"))},
			o: toClose,
		},
		{
			name: "MULTI refused while subscribed (RESP2)",
			writes: [][]byte{respJoin(respCmd("SUBSCRIBE", "brk:ch"), respCmd("MULTI"),
				respCmd("SUBSCRIBE", "brk:c2", "brk:c3"), respCmd("PING"), respCmd("QUIT"))},
			o: toClose,
		},
		{
			name: "subscribe confirmations under CLIENT REPLY OFF",
			writes: [][]byte{respJoin(respCmd("CLIENT", "REPLY", "OFF"), respCmd("SUBSCRIBE", "brk:a", "brk:b"),
				respCmd("CLIENT", "REPLY", "ON"), respCmd("PING"), respCmd("UNSUBSCRIBE"), respCmd("PING"), respCmd("QUIT"))},
			o: toClose,
		},
		{
			// Redis drops the reply of the command after CLIENT REPLY
			// SKIP even when it is an UNSUBSCRIBE (whose confirmation it
			// still sends), or a RESET.
			name:   "CLIENT REPLY SKIP consumed by UNSUBSCRIBE",
			setup:  [][]any{{"SET", "brk:k", "v"}},
			writes: [][]byte{respJoin(respCmd("CLIENT", "REPLY", "SKIP"), respCmd("UNSUBSCRIBE"), respCmd("GET", "brk:k"), respCmd("PING"), respCmd("QUIT"))},
			o:      toClose,
		},
		{
			name:   "RESET under CLIENT REPLY SKIP",
			writes: [][]byte{respJoin(respCmd("CLIENT", "REPLY", "SKIP"), respCmd("RESET"), respCmd("PING"), respCmd("QUIT"))},
			o:      toClose,
		},
		{
			// Half-closed after input that ends CLIENT REPLY OFF twice:
			// all of it runs and is answered.
			name:  "half-close after CLIENT REPLY ON, OFF, ON",
			setup: [][]any{{"DEL", "brk:k1"}},
			writes: [][]byte{respCmd("CLIENT", "REPLY", "OFF"), respJoin(respCmd("CLIENT", "REPLY", "ON"), respCmd("CLIENT", "REPLY", "OFF"),
				respCmd("SET", "brk:x", "1"), respCmd("CLIENT", "REPLY", "ON"), respCmd("SET", "brk:k1", "v"), respCmd("GET", "brk:k1"))},
			o: redistest.ExchangeOptions{Delay: 50 * time.Millisecond, CloseWrite: true, Timeout: 3 * time.Second},
		},
		{
			name:   "half-close with UNSUBSCRIBE in flight",
			writes: [][]byte{respCmd("SUBSCRIBE", "brk:a"), respJoin(respCmd("UNSUBSCRIBE", "brk:a"), respCmd("PING"), respCmd("ECHO", "x"))},
			o:      redistest.ExchangeOptions{Delay: 50 * time.Millisecond, CloseWrite: true, Timeout: 3 * time.Second},
		},
		{
			name:   "quoted inline QUIT",
			writes: [][]byte{[]byte("\"QUIT\"\r\nPING\r\n")},
			o:      toClose,
		},
		{
			name:   "inline SUBSCRIBE with a quoted channel",
			writes: [][]byte{[]byte("SUBSCRIBE \"brk a\"\r\nPING\r\nQUIT\r\n")},
			o:      toClose,
		},
		{
			// A half-closed client whose pipeline reaches a blocking command
			// gets the replies before it, as from Redis.
			name:   "half-close with GET then BLPOP",
			setup:  [][]any{{"SET", "brk:k", "1"}},
			writes: [][]byte{respJoin(respCmd("GET", "brk:k"), respCmd("BLPOP", "brk:none", "1"))},
			o:      redistest.ExchangeOptions{CloseWrite: true, Timeout: 3 * time.Second},
		},
		{
			name:   "plain pipeline answers before a bad frame",
			writes: [][]byte{respJoin(respCmd("PING"), respCmd("ECHO", "x"), []byte("*x\r\n"))},
			o:      until(3),
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, s := range tc.setup {
				defer e.srv.DoT(t, "DEL", s[1])
			}
			run := func() {
				for _, s := range tc.setup {
					e.srv.DoT(t, s...)
				}
			}
			e.srv.DoT(t, "FLUSHALL")
			run()
			direct, dClosed := redistest.Exchange(t, e.srv.Addr(), tc.writes, tc.o)
			e.srv.DoT(t, "FLUSHALL")
			run()
			via, pClosed := redistest.Exchange(t, e.paddr, tc.writes, tc.o)
			direct, via = redistest.MaskHelloID(direct), redistest.MaskHelloID(via)
			if !bytes.Equal(direct, via) || dClosed != pClosed {
				t.Errorf("proxy differs from engine\n direct (closed=%v): %q\n proxy  (closed=%v): %q",
					dClosed, redistest.Trunc(direct), pClosed, redistest.Trunc(via))
			}
		})
	}
	e.healthy(t)
}

// TestHalfCloseSlowReaderGetsPrefix: a half-closed client that does not
// read fast enough gets a prefix of its reply stream and then EOF — never a
// stream with a gap in the middle.
func TestHalfCloseSlowReaderGetsPrefix(t *testing.T) {
	t.Parallel()
	e := e2eSetupWith(t, func(c *proxy.Config) { c.ClientOutputLimit = 1 << 20 })
	val := strings.Repeat("v", 100<<10)
	e.srv.DoT(t, "SET", "brk:big", val)
	one := []byte("$102400\r\n" + val + "\r\n")
	c, err := net.Dial("tcp", e.paddr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.(*net.TCPConn).SetReadBuffer(8 << 10)
	if _, err := c.Write(bytes.Repeat(respCmd("GET", "brk:big"), 100)); err != nil { // 10 MiB of replies
		t.Fatal(err)
	}
	_ = c.(*net.TCPConn).CloseWrite()
	time.Sleep(300 * time.Millisecond) // let replies pile up behind the half-close
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	var got bytes.Buffer
	buf := make([]byte, 64<<10)
	for {
		n, err := c.Read(buf)
		got.Write(buf[:n])
		if err != nil {
			break
		}
	}
	want := bytes.Repeat(one, 100)
	if !bytes.HasPrefix(want, got.Bytes()) {
		i := 0
		for i < got.Len() && got.Bytes()[i] == want[i] {
			i++
		}
		t.Fatalf("received %d bytes that are not a prefix of the reply stream (diverge at %d)", got.Len(), i)
	}
	t.Logf("received %d of %d bytes, a prefix", got.Len(), len(want))
}

// TestStopWhileClientsPipeline: Stop does not wait for clients that keep
// sending: it stops taking their requests, lets the ones in flight finish,
// and every client ends on a complete reply.
func TestStopWhileClientsPipeline(t *testing.T) {
	srv := redistest.Start(t)
	p, _ := proxytest.StartProxy(t, srv.Addr(), func(c *proxy.Config) { c.DrainTimeout = 5 * time.Second })
	type result struct {
		got []byte
	}
	results := make(chan result, 4)
	answered := make(chan struct{}, 4) // one per client, at its first reply bytes
	for i := 0; i < 4; i++ {
		go func() {
			c, err := net.Dial("tcp", p.Addr())
			if err != nil {
				results <- result{}
				return
			}
			defer c.Close()
			var got bytes.Buffer
			done := make(chan struct{})
			go func() {
				defer close(done)
				buf := make([]byte, 64<<10)
				_ = c.SetReadDeadline(time.Now().Add(15 * time.Second))
				first := true
				for {
					n, err := c.Read(buf)
					got.Write(buf[:n])
					if n > 0 && first {
						first = false
						answered <- struct{}{}
					}
					if err != nil {
						return
					}
				}
			}()
			req := bytes.Repeat(respCmd("PING"), 64)
			for {
				if _, err := c.Write(req); err != nil {
					break
				}
				select {
				case <-done:
				default:
					continue
				}
				break
			}
			<-done
			results <- result{got: got.Bytes()}
		}()
	}
	// Stop while every client is pipelining: each has been answered once
	// (on a busy machine a fixed sleep left some not yet connected).
	for i := 0; i < 4; i++ {
		select {
		case <-answered:
		case <-time.After(10 * time.Second):
			t.Fatalf("%d of 4 clients answered within 10 s", i)
		}
	}
	start := time.Now()
	if err := p.Stop(context.Background()); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if el := time.Since(start); el > 3*time.Second {
		t.Errorf("Stop took %v with clients still sending: it waited for them", el)
	}
	for i := 0; i < 4; i++ {
		r := <-results
		if len(r.got) == 0 {
			t.Errorf("client %d received nothing", i)
			continue
		}
		if rest := strings.ReplaceAll(string(r.got), "+PONG\r\n", ""); rest != "" {
			t.Errorf("client %d: stream does not end on a complete reply (%d bytes, tail %q)", i, len(r.got), r.got[max(0, len(r.got)-20):])
		}
	}
}

// TestRestartOnSamePort: a proxy that served traffic can be replaced by a
// new one on the same port at once (SO_REUSEADDR), despite TIME-WAIT sockets.
func TestRestartOnSamePort(t *testing.T) {
	srv := redistest.Start(t)
	p1, _ := proxytest.StartProxy(t, srv.Addr(), nil)
	addr := p1.Addr()
	for i := 0; i < 20; i++ {
		got, _ := redistest.Exchange(t, addr, [][]byte{respCmd("QUIT")}, redistest.ExchangeOptions{Timeout: 2 * time.Second})
		if string(got) != "+OK\r\n" {
			t.Fatalf("QUIT: %q", got)
		}
	}
	proxytest.Stop(t, p1)
	p2, _ := proxytest.StartProxy(t, srv.Addr(), func(c *proxy.Config) { c.Listen = addr })
	if p2.Addr() != addr {
		t.Fatalf("second proxy on %s, want %s", p2.Addr(), addr)
	}
	got, _ := redistest.Exchange(t, addr, [][]byte{respCmd("PING")}, redistest.ExchangeOptions{Want: 7, Timeout: 2 * time.Second})
	if string(got) != "+PONG\r\n" {
		t.Errorf("PING via the restarted proxy: %q", got)
	}
}

// TestEngineProtocolErrorClose: requests the proxy accepts but the engine
// rejects as malformed (here Redis 7.0's limit on unauthenticated
// multibulk requests of a requirepass engine) get the engine's error, then
// the close, exactly as directly: no upstream-lost errors appended for the
// requests behind it.
func TestEngineProtocolErrorClose(t *testing.T) {
	skipIfRouted(t, "a DEL of keys in several slots is split per slot (fan-out), so the engine never sees the 21-element request")
	t.Parallel()
	e := e2eSetup(t, "--requirepass", "pw")
	args := []string{"DEL"}
	for i := 0; i < 20; i++ {
		args = append(args, "k"+strings.Repeat("x", i))
	}
	writes := [][]byte{respJoin(respCmd(args...), respCmd("PING"))}
	o := redistest.ExchangeOptions{Timeout: 3 * time.Second}
	direct, dClosed := redistest.Exchange(t, e.srv.Addr(), writes, o)
	via, pClosed := redistest.Exchange(t, e.paddr, writes, o)
	if !strings.HasPrefix(string(direct), "-ERR Protocol error") {
		t.Fatalf("engine answered %q; this test needs its unauthenticated-request limit", direct)
	}
	if !bytes.Equal(direct, via) || dClosed != pClosed {
		t.Errorf("proxy differs from engine\n direct (closed=%v): %q\n proxy  (closed=%v): %q", dClosed, direct, pClosed, via)
	}
	// A script's error that merely looks like it does not close anything.
	c := redistest.Dial(t, e.paddr)
	c.Roundtrip(t, respCmd("AUTH", "pw"), []byte("+OK\r\n"))
	c.Roundtrip(t, respCmd("EVAL", "return redis.error_reply('ERR Protocol error: fake')", "0"), []byte("-ERR Protocol error: fake\r\n"))
	c.Roundtrip(t, respCmd("PING"), []byte("+PONG\r\n"))
}
