package proxy_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/respmeter/respmeter/internal/redistest"
	"github.com/respmeter/respmeter/proxy"
	"github.com/respmeter/respmeter/proxy/proxytest"
)

// flushGets is how many GETs of a flushValue-byte value the tests below
// pipeline: 16 MiB of replies, more than loopback's socket buffers hold, so
// most of them wait in the proxy (gnet's outbound buffer) while the client
// is not reading. Still under the default 64 MiB output limit.
const (
	flushGets  = 4000
	flushValue = 4096
)

func flushRequests(tail []byte) []byte {
	var b bytes.Buffer
	b.Write(respCmd("SET", "k", strings.Repeat("v", flushValue)))
	for range flushGets {
		b.Write(respCmd("GET", "k"))
	}
	b.Write(tail)
	return b.Bytes()
}

// TestQuitDeliversQueuedReplies: a client that pipelines many large
// replies, then QUIT, and reads only a second later gets every reply and
// QUIT's +OK before the close, as from Redis (CLIENT_CLOSE_AFTER_REPLY).
// gnet's Close drops what the socket does not take at once: before the
// proxy waited for its queued replies, this client got about half of its
// 16 MiB and no +OK.
func TestQuitDeliversQueuedReplies(t *testing.T) {
	e := e2eSetup(t)
	// The empty second write only makes the client wait 1 s before reading.
	got := e.same(t, [][]byte{flushRequests(respCmd("QUIT")), {}},
		redistest.ExchangeOptions{Delay: time.Second, Timeout: 20 * time.Second})
	if n := bytes.Count(got, []byte("$4096\r\n")); n != flushGets || !bytes.HasSuffix(got, []byte("+OK\r\n")) {
		t.Errorf("engine itself: %d GET replies, ends with +OK: %v", n, bytes.HasSuffix(got, []byte("+OK\r\n")))
	}
}

// TestProtocolErrorDeliversQueuedReplies: the same with a malformed request
// in place of QUIT: every earlier reply, then Redis's protocol error, then
// the close.
func TestProtocolErrorDeliversQueuedReplies(t *testing.T) {
	e := e2eSetup(t)
	got := e.same(t, [][]byte{flushRequests([]byte("*x\r\n")), {}},
		redistest.ExchangeOptions{Delay: time.Second, Timeout: 20 * time.Second})
	if !bytes.HasSuffix(got, []byte("-ERR Protocol error: invalid multibulk length\r\n")) {
		t.Errorf("engine itself ends with %q", redistest.Trunc(got[max(0, len(got)-80):]))
	}
}

// TestStopDeliversQueuedReplies: Stop closes a client that is not reading
// only after the replies it was sent have been written (within the drain
// timeout), so the client reads all of them, then the close.
func TestStopDeliversQueuedReplies(t *testing.T) {
	srv := redistest.Start(t)
	p, set := proxytest.StartProxy(t, srv.Addr(), func(c *proxy.Config) { c.DrainTimeout = 10 * time.Second })
	c, err := redistest.DialConn(p.Addr(), 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Write(flushRequests(nil)); err != nil {
		t.Fatal(err)
	}
	// Every GET answered: the replies are queued in the proxy, not read.
	if n := e2eWaitCount(t, set, "get", flushGets).Count; n != flushGets {
		t.Fatalf("get counted %d times, want %d", n, flushGets)
	}
	stopped := make(chan error, 1)
	go func() { stopped <- p.Stop(context.Background()) }()
	time.Sleep(300 * time.Millisecond) // Stop is waiting for the client now
	got, rerr := c.ReadWhile(func([]byte) bool { return false }, 20*time.Second)
	if !errors.Is(rerr, io.EOF) {
		t.Errorf("reading ended with %v, want the proxy's close (EOF)", rerr)
	}
	want := "+OK\r\n" + strings.Repeat("$4096\r\n"+strings.Repeat("v", flushValue)+"\r\n", flushGets)
	if string(got) != want {
		t.Errorf("client read %d bytes with %d GET replies, want %d bytes with %d", len(got),
			bytes.Count(got, []byte("$4096\r\n")), len(want), flushGets)
	}
	select {
	case err := <-stopped:
		if err != nil {
			t.Errorf("Stop: %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("Stop did not return")
	}
}

// TestProtocolErrorEndsMonitorFeed: a MONITOR client that sends a malformed
// request while it is not reading, with a busy engine, gets the feed queued
// so far, the protocol error, and then nothing: Redis drops output to a
// client it will close after its replies, and so must the proxy (a feed
// still arriving behind the error would also keep the connection open for
// as long as the client reads slower than the feed grows).
func TestProtocolErrorEndsMonitorFeed(t *testing.T) {
	e := e2eSetup(t)
	const errLine = "-ERR Protocol error: invalid multibulk length\r\n"
	flood := func() []byte {
		var b bytes.Buffer
		for i := range 20000 {
			b.Write(respCmd("SET", "k", strconv.Itoa(i)))
		}
		return b.Bytes()
	}()
	for _, tg := range e.targets() {
		t.Run(tg.name, func(t *testing.T) {
			mon := redistest.Dial(t, tg.addr)
			if err := mon.Write(respCmd("MONITOR")); err != nil {
				t.Fatal(err)
			}
			if b, err := mon.ReadN(5, 2*time.Second); err != nil || string(b) != "+OK\r\n" {
				t.Fatalf("MONITOR: %q %v", b, err)
			}
			// Other clients keep the feed going (about 1 MB per batch)
			// while the monitor does not read.
			stop := make(chan struct{})
			flooded := make(chan struct{})
			go func() {
				defer close(flooded)
				c, err := redistest.DialConn(e.srv.Addr(), 2*time.Second)
				if err != nil {
					return
				}
				defer c.Close()
				for {
					select {
					case <-stop:
						return
					default:
					}
					if c.Write(flood) != nil {
						return
					}
					if _, err := c.ReadWhile(func(b []byte) bool { return bytes.Count(b, []byte("+OK\r\n")) >= 20000 }, 10*time.Second); err != nil {
						return
					}
					c.Consume(20000 * 5)
				}
			}()
			time.Sleep(300 * time.Millisecond)
			if err := mon.Write([]byte("*x\r\n")); err != nil {
				t.Fatal(err)
			}
			time.Sleep(500 * time.Millisecond) // the feed goes on, unread
			got, rerr := mon.ReadWhile(func([]byte) bool { return false }, 20*time.Second)
			close(stop)
			<-flooded
			if !errors.Is(rerr, io.EOF) {
				t.Errorf("reading ended with %v, want the close (EOF)", rerr)
			}
			if n := bytes.Count(got, []byte(errLine)); n != 1 || !bytes.HasSuffix(got, []byte(errLine)) {
				i := bytes.Index(got, []byte(errLine))
				t.Errorf("%d bytes of feed, protocol error seen %d times, at %d; %d bytes after it, want none",
					len(got), n, i, len(got)-i-len(errLine))
			}
		})
	}
}
