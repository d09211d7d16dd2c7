package proxy

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/respmeter/respmeter/internal/redistest"
)

// TestFlushWaitBacksOff: a client that sent QUIT behind 25.6 MiB of replies
// (more than loopback's socket buffers take) and does not read waits to be
// closed without the loop looking at it every flushPoll: with no progress
// the looks back off to one per flushPollMax (a helper measured 6 % of a
// core for one such client, 19 % for 300, when every look was 2 ms apart).
// Once it reads, it gets every reply and the close.
func TestFlushWaitBacksOff(t *testing.T) {
	srv := redistest.Start(t)
	srv.DoT(t, "SET", "k", strings.Repeat("v", 64<<10))
	p, err := New(Config{Listen: "127.0.0.1:0", Upstream: srv.Addr(), Loops: 1, DrainTimeout: time.Second,
		DialTimeout: time.Second, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = p.Stop(context.Background()) }()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const gets = 400
	req := strings.Repeat(string(redistest.Cmd("GET", "k")), gets) + string(redistest.Cmd("QUIT"))
	if _, err := c.Write([]byte(req)); err != nil {
		t.Fatal(err)
	}
	redistest.Eventually(t, 5*time.Second, func() error {
		if n := p.flushing(); n != 1 {
			return fmt.Errorf("the client is not waiting to be closed (%d waiting)", n)
		}
		return nil
	})
	time.Sleep(500 * time.Millisecond) // backed off by now
	looks := func() int64 { return p.sumLoops(func(l *loop) int64 { return l.flushLooks.Load() }) }
	before := looks()
	time.Sleep(time.Second)
	// One look per flushPollMax (200 ms) is 5; every flushPoll, 500.
	if n := looks() - before; n > 20 {
		t.Errorf("%d looks in 1 s at a client that does not read, want at most 20", n)
	}
	b, err := io.ReadAll(c)
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	if n := strings.Count(string(b), "$65536\r\n"); n != gets || !strings.HasSuffix(string(b), "+OK\r\n") {
		t.Errorf("%d GET replies, ends with +OK: %v; want %d and +OK", n, strings.HasSuffix(string(b), "+OK\r\n"), gets)
	}
}
