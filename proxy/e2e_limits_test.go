package proxy_test

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/respmeter/respmeter/internal/redistest"
	"github.com/respmeter/respmeter/proxy"
	"github.com/respmeter/respmeter/proxy/proxytest"
)

// TestOutputLimitEvictsSlowReader: a client that pipelines GETs of a large
// value and reads nothing is disconnected once the replies queued for it
// cross ClientOutputLimit; a neighbour on the same proxy keeps working.
func TestOutputLimitEvictsSlowReader(t *testing.T) {
	e := e2eSetupWith(t, func(c *proxy.Config) { c.ClientOutputLimit = 4 << 20 })
	e.srv.DoT(t, "SET", "big:a", strings.Repeat("x", 1<<20))

	slow, err := net.Dial("tcp", e.paddr)
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()
	_ = slow.(*net.TCPConn).SetReadBuffer(4096)
	req := bytes.Repeat(respCmd("GET", "big:a"), 64) // 64 MiB of replies, never read
	if _, err := slow.Write(req); err != nil {
		t.Fatal(err)
	}
	redistest.Eventually(t, 5*time.Second, func() error {
		if e.set.Counters().ClientsEvictedOutputLimit == 0 {
			return errors.New("slow reader not evicted")
		}
		return nil
	})
	// Its connection is closed: reading drains at most what was queued, then EOF.
	_ = slow.SetReadDeadline(time.Now().Add(5 * time.Second))
	var n int
	buf := make([]byte, 1<<16)
	for {
		k, err := slow.Read(buf)
		n += k
		if err != nil {
			break
		}
	}
	if n >= 64<<20 {
		t.Errorf("slow reader received all %d bytes: not evicted", n)
	}
	e.healthy(t)
}

// TestMaxClients: past MaxClients a connection gets Redis's error and is
// closed; the existing ones keep working.
func TestMaxClients(t *testing.T) {
	e := e2eSetupWith(t, func(c *proxy.Config) { c.MaxClients = 2 })
	a, b := redistest.Dial(t, e.paddr), redistest.Dial(t, e.paddr)
	a.Roundtrip(t, respCmd("PING"), []byte("+PONG\r\n"))
	b.Roundtrip(t, respCmd("PING"), []byte("+PONG\r\n"))
	c := redistest.Dial(t, e.paddr)
	got, closed := c.ReadToClose(2 * time.Second)
	if string(got) != "-ERR max number of clients reached\r\n" || !closed {
		t.Errorf("third client got %q (closed %v)", got, closed)
	}
	a.Roundtrip(t, respCmd("PING"), []byte("+PONG\r\n"))
	if n := e.set.Counters().ClientsRejected; n != 1 {
		t.Errorf("rejected = %d, want 1", n)
	}
}

// TestQueryLimitCountsStalledEngineBacklog: a client pipelining large
// requests to an engine that stopped reading (SIGSTOP) is evicted at the
// client query limit: the bytes waiting for the engine in the client's own
// engine connections count against it, as the requests' bytes would in
// Redis's query buffer. Under --route slots (before the client types were
// one) only the requests' bookkeeping counted, and 64 MiB of SETs sat in the
// proxy's memory under a 4 MiB limit.
func TestQueryLimitCountsStalledEngineBacklog(t *testing.T) {
	if sharedMode() {
		t.Skip("a shared connection's backlog is every client's, not counted against one")
	}
	srv := redistest.Start(t)
	p, set := proxytest.StartProxy(t, srv.Addr(), func(c *proxy.Config) { c.ClientQueryLimit = 4 << 20 })
	c := redistest.Dial(t, p.Addr())
	c.Send(t, respCmd("PING"))
	c.Expect(t, []byte("+PONG\r\n"), 2*time.Second) // its engine connection is up
	srv.Stop()
	defer srv.Cont()
	val := strings.Repeat("v", 1<<20)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range 64 {
			if c.Write(respCmd("SET", "big:"+strconv.Itoa(i), val)) != nil {
				return // evicted: the proxy closed the connection
			}
		}
	}()
	redistest.Eventually(t, 20*time.Second, func() error {
		if n := set.Counters().ClientsEvictedQueryLimit; n != 1 {
			return fmt.Errorf("%d query-limit evictions, want 1", n)
		}
		return nil
	})
	_, closed := c.ReadToClose(5 * time.Second)
	if !closed {
		t.Error("the evicted client's connection is still open")
	}
	<-done
}

// TestLargeRequestLetGo: the buffer a client's one large request (a GET
// of an 8 MiB key, read over many reads) is gathered in is let go once the
// request has gone to the engine, while the client stays connected: the
// proxy's heap after a GC is within 4 MiB of what it was before (it kept
// the whole 8 MiB and more before). 8 MiB: a larger request takes longer
// than redistest's write timeout under -race.
func TestLargeRequestLetGo(t *testing.T) {
	e := e2eSetup(t)
	c := redistest.Dial(t, e.paddr)
	c.Roundtrip(t, respCmd("PING"), []byte("+PONG\r\n"))
	req := respCmd("GET", "big:"+strings.Repeat("k", 8<<20))
	before := heapInuse()
	c.Roundtrip(t, req, []byte("$-1\r\n"))
	after := heapInuse()
	runtime.KeepAlive(req)
	t.Logf("heap in use %.1f MiB before the 8 MiB request, %.1f MiB after", float64(before)/(1<<20), float64(after)/(1<<20))
	if after > before+4<<20 {
		t.Errorf("the heap grew by %.1f MiB over one 8 MiB request (limit 4 MiB)", float64(after-before)/(1<<20))
	}
	c.Roundtrip(t, respCmd("PING"), []byte("+PONG\r\n"))
}

// heapInuse returns the heap in use after a garbage collection (two: the
// second empties sync.Pool's victim caches).
func heapInuse() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}
