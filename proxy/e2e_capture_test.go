package proxy_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/respmeter/respmeter/internal/redistest"

	"github.com/redis/go-redis/v9"

	"github.com/respmeter/respmeter/internal/capture"
	"github.com/respmeter/respmeter/proxy"
)

// captureSetup starts an engine and a proxy in the suite's shape.
func captureSetup(t *testing.T) *e2eEnv {
	t.Helper()
	return e2eSetup(t)
}

// TestCaptureRecordsClients captures a go-redis RESP3 pipeline and single
// commands on another connection (opened before the capture started), and
// reads back each request with its batch and the summary of its reply.
func TestCaptureRecordsClients(t *testing.T) {
	e := captureSetup(t)
	ctx := context.Background()
	// (PipelinePoolSize -1: go-redis runs pipelines on a pool of their own
	// by default, whose connection would be opened after the capture.)
	before := redis.NewClient(&redis.Options{Addr: e.paddr, Protocol: 3, MaxRetries: -1, PipelinePoolSize: -1})
	t.Cleanup(func() { _ = before.Close() })
	if err := before.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "c.respcap")
	if err := e.p.StartCapture(proxy.CaptureConfig{File: path}); err != nil {
		t.Fatal(err)
	}
	if err := e.p.StartCapture(proxy.CaptureConfig{File: path + "2"}); !errors.Is(err, capture.ErrRunning) {
		t.Errorf("second capture: %v, want ErrRunning", err)
	}
	pipe := before.Pipeline()
	pipe.Set(ctx, "k1", "v1", 0)
	pipe.Get(ctx, "k1")
	pipe.Incr(ctx, "n")
	pipe.RPush(ctx, "l", "a", "b")
	pipe.LRange(ctx, "l", 0, -1)
	pipe.LPush(ctx, "k1", "x") // WRONGTYPE
	_, _ = pipe.Exec(ctx)
	other := e2eGoRedis(t, e.paddr)
	for range 3 {
		if err := other.Get(ctx, "k1").Err(); err != nil {
			t.Fatal(err)
		}
	}
	st, err := e.p.StopCapture()
	if err != nil {
		t.Fatal(err)
	}
	if st.Records == 0 || st.Dropped != 0 || st.Running {
		t.Errorf("stats %+v: want records, no drops, stopped", st)
	}
	if _, err := e.p.StopCapture(); !errors.Is(err, proxy.ErrNoCapture) {
		t.Errorf("second stop: %v, want ErrNoCapture", err)
	}
	w, err := capture.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	var pipeBatch *capture.Batch
	var pipeConn *capture.Conn
	gets := 0
	for _, c := range w.Conns {
		for i := range c.Batches {
			b := &c.Batches[i]
			if len(b.Cmds) == 6 {
				pipeBatch, pipeConn = b, c
			}
			for _, cmd := range b.Cmds {
				if cmd.Name == "get" && len(b.Cmds) == 1 {
					gets++
				}
			}
		}
	}
	if pipeBatch == nil {
		t.Fatalf("no batch of the 6 pipelined commands in %d connections", len(w.Conns))
	}
	if gets != 3 {
		t.Errorf("%d single GET batches, want 3", gets)
	}
	// The connection was open before the capture: its HELLO 3 is recorded
	// as its state, for replay to send first.
	if !bytes.Contains(bytes.ToLower(pipeConn.State), []byte("hello\r\n$1\r\n3")) {
		t.Errorf("state of the connection opened before the capture: %q, want its HELLO 3", pipeConn.State)
	}
	var names []string
	for _, c := range pipeBatch.Cmds {
		names = append(names, c.Name)
	}
	if want := []string{"set", "get", "incr", "rpush", "lrange", "lpush"}; !slices.Equal(names, want) {
		t.Fatalf("pipeline %v, want %v", names, want)
	}
	wantReply := []capture.Summary{
		capture.Summarize([]byte("+OK\r\n")),
		capture.Summarize([]byte("$2\r\nv1\r\n")),
		capture.Summarize([]byte(":1\r\n")),
		capture.Summarize([]byte(":2\r\n")),
		capture.Summarize([]byte("*2\r\n$1\r\na\r\n$1\r\nb\r\n")),
	}
	for i, want := range wantReply {
		got := pipeBatch.Cmds[i].Reply
		if got == nil || *got != want {
			t.Errorf("%s: reply %+v, want %+v", names[i], got, want)
		}
		if c := pipeBatch.Cmds[i]; c.Total <= 0 || c.Upstream <= 0 || c.Upstream > c.Total {
			t.Errorf("%s: total %d ns, upstream %d ns", names[i], c.Total, c.Upstream)
		}
	}
	if r := pipeBatch.Cmds[5].Reply; r == nil || r.ErrPfx != "WRONGTYPE" || !r.IsErr() {
		t.Errorf("lpush on a string: reply %+v, want a WRONGTYPE error", r)
	}
}

// TestCaptureSample captures about the fraction of connections asked for,
// the same ones for the same ids, and stops by itself after Duration.
func TestCaptureSample(t *testing.T) {
	e := captureSetup(t)
	path := filepath.Join(t.TempDir(), "c.respcap")
	if err := e.p.StartCapture(proxy.CaptureConfig{File: path, Sample: 0.5, Duration: 3 * time.Second}); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	const conns = 40
	for range conns {
		c := e2eGoRedis(t, e.paddr)
		if err := c.Ping(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		_ = c.Close()
	}
	redistest.EventuallyEvery(t, 15*time.Second, 50*time.Millisecond, func() error {
		if st, _ := e.p.CaptureStats(); st.Running {
			return errors.New("capture still running after a 3 s duration")
		}
		return nil
	})
	w, err := capture.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	// Ids 1..40 through SplitMix64: a fixed set, so a fixed count.
	if n := len(w.Conns); n < conns/4 || n > conns*3/4 {
		t.Errorf("%d of %d connections captured at sample 0.5", n, conns)
	}
}

// TestCaptureDropsNeverBlock: with a capture buffer far too small for the
// load (the writer drains it once a second), records are dropped and
// counted while every client command is still answered.
func TestCaptureDropsNeverBlock(t *testing.T) {
	e := captureSetup(t)
	path := filepath.Join(t.TempDir(), "c.respcap")
	if err := e.p.StartCapture(proxy.CaptureConfig{File: path, BufferBytes: 1024}); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	c := e2eGoRedis(t, e.paddr)
	const n = 2000
	for i := range n / 100 {
		pipe := c.Pipeline()
		for j := range 100 {
			pipe.Set(ctx, fmt.Sprint("k", i*100+j), j, 0)
		}
		if _, err := pipe.Exec(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if got := e.srv.DoT(t, "DBSIZE"); got != int64(n) {
		t.Fatalf("engine holds %v keys, want %d", got, n)
	}
	st, err := e.p.StopCapture()
	if err != nil {
		t.Fatal(err)
	}
	if st.Dropped == 0 || e.p.CaptureDropped() != st.Dropped {
		t.Errorf("dropped %d (total %d): want drops with a 1 KiB buffer", st.Dropped, e.p.CaptureDropped())
	}
	if _, err := capture.Load(path); err != nil {
		t.Errorf("the file with drops does not read: %v", err)
	}
}
