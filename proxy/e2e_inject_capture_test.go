package proxy_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/respmeter/respmeter/internal/capture"
	"github.com/respmeter/respmeter/internal/replay"
	"github.com/respmeter/respmeter/proxy"
)

// TestInjectCaptureMarks: a capture marks the commands a rule touched (the
// rule, its effect, the delay drawn), and only those; a replay of it counts
// them by rule and compares a delayed command's captured time without the
// delay. A reply a bandwidth rule paces is captured as it came in, before
// its pacing: marked with no injected time.
func TestInjectCaptureMarks(t *testing.T) {
	e := e2eSetup(t)
	ctx := context.Background()
	addRules(t, e.p, `rules:
- name: slow-get
  commands: [GET]
  keys: "slow:*"
  delay: 3ms
- name: loading
  keys: "err:*"
  error: "LOADING Redis is loading the dataset in memory"
- name: thin
  keys: "wide:*"
  bandwidth: 10KB/s
`)
	path := filepath.Join(t.TempDir(), "c.respcap")
	if err := e.p.StartCapture(proxy.CaptureConfig{File: path}); err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(&redis.Options{Addr: e.paddr, MaxRetries: -1, DisableIdentity: true})
	t.Cleanup(func() { _ = c.Close() })
	_ = c.Get(ctx, "slow:1").Err()
	_ = c.Get(ctx, "plain").Err()
	if err := c.Get(ctx, "err:1").Err(); err == nil || err.Error() != "LOADING Redis is loading the dataset in memory" {
		t.Fatalf("GET err:1: %v", err)
	}
	_ = c.Get(ctx, "slow:2").Err()
	_ = c.Get(ctx, "wide:1").Err()
	if _, err := e.p.StopCapture(); err != nil {
		t.Fatal(err)
	}
	w, err := capture.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	marks := map[string]capture.Injected{}
	n := 0
	var engineUS int64 // the longest captured GET less its delay, µs: what the replay compares
	for _, cn := range w.Conns {
		for _, b := range cn.Batches {
			for _, cmd := range b.Cmds {
				ns := int64(0)
				if cmd.Injected != nil {
					marks[string(cmd.Req)] = *cmd.Injected
					ns = cmd.Injected.Ns
				}
				if cmd.Name == "get" && cmd.Reply != nil {
					engineUS = max(engineUS, (cmd.Total-ns)/1000)
				}
				n++
			}
		}
	}
	want := map[string]capture.Injected{
		"*2\r\n$3\r\nget\r\n$6\r\nslow:1\r\n": {Rule: "slow-get", Effect: "delay", Ns: 3_000_000},
		"*2\r\n$3\r\nget\r\n$6\r\nslow:2\r\n": {Rule: "slow-get", Effect: "delay", Ns: 3_000_000},
		"*2\r\n$3\r\nget\r\n$5\r\nerr:1\r\n":  {Rule: "loading", Effect: "error"},
		"*2\r\n$3\r\nget\r\n$6\r\nwide:1\r\n": {Rule: "thin", Effect: "bandwidth"},
	}
	if len(marks) != len(want) || n < 4 {
		t.Fatalf("marks %v on %d commands, want %v", marks, n, want)
	}
	for req, wm := range want {
		if got, ok := marks[req]; !ok || got != wm {
			t.Errorf("%q marked %+v, want %+v", req, got, wm)
		}
	}
	rep, err := replay.Run(ctx, w, replay.Options{Target: e.srv.Addr()})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Injected["slow-get delay"] != 2 || rep.Injected["loading error"] != 1 || rep.Injected["thin bandwidth"] != 1 {
		t.Errorf("replay counted %v, want slow-get delay 2, loading error 1, thin bandwidth 1", rep.Injected)
	}
	// HdrHistogram's 3 significant digits: within 1 %.
	if p := rep.PerCommand["get"]; p == nil || p.CapturedUS[2] < engineUS*99/100 || p.CapturedUS[2] > engineUS*101/100+1 {
		t.Errorf("replay's captured GET p99.9 %v µs, want %d: the longest GET less its delay", p.CapturedUS, engineUS)
	}
}
