package engine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/respmeter/respmeter/internal/redistest"
	"github.com/respmeter/respmeter/internal/respconn"
)

// Integration tests against a real redis-server: redistest.Start skips them
// under -short or without redis-server in PATH, and starts the server with
// --save '' --appendonly no in a t.TempDir on a free port.

// startServer starts redis-server with DEBUG allowed.
func startServer(t *testing.T) *redistest.Server {
	t.Helper()
	return redistest.Start(t, "--enable-debug-command", "yes")
}

// runUntilCancel starts run on a goroutine and returns a stop function that
// cancels it, waits for it to return and checks that the goroutine count
// comes back to what it was before (polling: goroutines of closed
// connections end asynchronously).
func runUntilCancel(t *testing.T, run func(context.Context)) (stop func()) {
	t.Helper()
	before := runtime.NumGoroutine()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		run(ctx)
	}()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case <-done:
			case <-time.After(5 * time.Second):
				t.Fatal("Run did not return within 5s of cancel")
			}
			if err := redistest.Await(5*time.Second, 10*time.Millisecond, func() error {
				if n := runtime.NumGoroutine(); n > before {
					return fmt.Errorf("goroutines: %d before Run, %d after cancel", before, n)
				}
				return nil
			}); err != nil {
				t.Error(err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// waitFor is redistest.EventuallyEvery (10 ms) of a condition named what.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	redistest.EventuallyEvery(t, d, 10*time.Millisecond, func() error {
		if !cond() {
			return errors.New("waiting for " + what)
		}
		return nil
	})
}

// logBuffer is a slog text sink safe for concurrent use.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) count(s string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Count(l.b.String(), s)
}

func clientList(t *testing.T, s *redistest.Server) string {
	t.Helper()
	v, _ := s.Do("CLIENT", "LIST").(string)
	return v
}

func TestProbe(t *testing.T) {
	redistest.VerifyNoLeaks(t) // descriptors and goroutines, after the server's cleanup
	s := startServer(t)
	var logs logBuffer
	logger := slog.New(slog.NewTextHandler(&logs, nil))
	const interval = 20 * time.Millisecond
	p := NewProbe(s.Addr(), interval, logger)
	stop := runUntilCancel(t, p.Run)

	// ~N samples over a measured stretch.
	waitFor(t, 5*time.Second, "first sample", func() bool { return p.Stats().Count > 0 })
	c0, t0 := p.Stats().Count, time.Now()
	time.Sleep(500 * time.Millisecond)
	c1, elapsed := p.Stats().Count, time.Since(t0)
	n, want := c1-c0, int64(elapsed/interval)
	if n < want/2 || n > want+2 {
		t.Errorf("%d samples in %v at %v, want about %d", n, elapsed, interval, want)
	}
	if !strings.Contains(clientList(t, s), "name="+probeName) {
		t.Errorf("CLIENT LIST lacks name=%s:\n%s", probeName, clientList(t, s))
	}

	// SIGKILL: errors are counted, logged once; after a restart on the same
	// port the probe reconnects and samples again.
	s.Kill()
	waitFor(t, 5*time.Second, "errors after kill", func() bool { return p.Stats().Errors >= 2 })
	s.Restart()
	cRestart := p.Stats().Count
	waitFor(t, 10*time.Second, "samples after restart", func() bool { return p.Stats().Count > cRestart+3 })
	if !strings.Contains(clientList(t, s), "name="+probeName) {
		t.Errorf("after restart CLIENT LIST lacks name=%s", probeName)
	}
	st := p.Stats()
	if st.LastErr == "" {
		t.Error("LastErr empty after errors")
	}
	if st.Mean <= 0 || st.P50 <= 0 || st.P99 < st.P50 || st.Max < st.P99 {
		t.Errorf("implausible stats %+v", st)
	}
	if w, i := logs.count("engine not answering"), logs.count("engine answering"); w != 1 || i != 2 {
		t.Errorf("logged %d warnings and %d recoveries for %d errors, want 1 and 2:\n%s", w, i, st.Errors, logs.b.String())
	}

	stop()
	// Stopped: the exported histogram and Stats agree exactly.
	st = p.Stats()
	// The first window holds every round trip; the next one none.
	if p50, n := p.Window(); n != st.Count || p50 != st.P50 {
		t.Errorf("first Window: p50 %v over %d, want %v over %d", p50, n, st.P50, st.Count)
	}
	if p50, n := p.Window(); n != 0 || p50 != 0 {
		t.Errorf("second Window: p50 %v over %d, want nothing", p50, n)
	}
	reg := prometheus.NewPedanticRegistry()
	if err := p.Register(reg); err != nil {
		t.Fatal(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var h bool
	for _, mf := range mfs {
		if mf.GetName() != "respmeter_upstream_probe_seconds" {
			continue
		}
		m := mf.GetMetric()[0]
		h = true
		if got := m.GetHistogram().GetSampleCount(); got != uint64(st.Count) {
			t.Errorf("histogram count %d, Stats count %d", got, st.Count)
		}
		if l := m.GetLabel(); len(l) != 0 {
			t.Errorf("labels %v, want none (the caller wraps the registerer with shard=)", l)
		}
		if b := m.GetHistogram().GetBucket(); len(b) != 25 || b[0].GetUpperBound() != 1e-6 || b[24].GetUpperBound() != 10 {
			t.Errorf("buckets %v", b)
		}
		if n := m.GetHistogram().GetPositiveSpan(); len(n) == 0 || m.GetHistogram().GetSchema() != 3 {
			t.Errorf("native buckets: schema %d, spans %v", m.GetHistogram().GetSchema(), n)
		}
	}
	if !h {
		t.Error("no respmeter_upstream_probe_seconds")
	}
	lint(t, reg)
}

// TestProbeEngineDown: with nothing listening, Run backs off rather than
// spinning, and returns promptly on cancel.
func TestProbeEngineDown(t *testing.T) {
	addr := redistest.ClosedAddr(t)
	p := NewProbe(addr, time.Millisecond, nil)
	stop := runUntilCancel(t, p.Run)
	time.Sleep(time.Second)
	stop()
	// Pauses of 100, 200, 400 ms: 4 or so attempts in one second.
	if e := p.Stats().Errors; e < 2 || e > 8 {
		t.Errorf("%d dial errors in 1s, want backoff to allow 2..8", e)
	}
}

func TestPollerDebugSleep(t *testing.T) {
	s := startServer(t)
	p := NewPoller(s.Addr(), time.Hour, testNames, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c, err := dial(ctx, s.Addr(), pollName, respconn.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := p.poll(c); err != nil { // baseline
		t.Fatal(err)
	}
	engineBefore := s.Do("LATENCY", "HISTOGRAM", "debug")
	for range 20 {
		s.Do("DEBUG", "SLEEP", "0.005")
	}
	for i := range 7 {
		s.Do("SET", "k", i)
	}
	for range 5 {
		s.Do("GET", "k")
	}
	engineAfter := s.Do("LATENCY", "HISTOGRAM", "debug")
	if err := p.poll(c); err != nil {
		t.Fatal(err)
	}

	mean, calls, ok := p.EngineMean("debug")
	if !ok || calls != 20 {
		t.Fatalf("EngineMean(debug) = %v, %d, %v; want 20 calls", mean, calls, ok)
	}
	if mean < 4*time.Millisecond || mean > 6*time.Millisecond {
		t.Errorf("EngineMean(debug) = %v, want 5ms ±20%%", mean)
	}
	for cmd, want := range map[string]int64{"set": 7, "get": 5} {
		if _, calls, ok := p.EngineMean(cmd); !ok || calls != want {
			t.Errorf("EngineMean(%s) calls = %d, %v; want %d", cmd, calls, ok, want)
		}
	}
	if got := p.Sources(); !slices.Equal(got, []string{SourceLatencyHistogram, SourceCommandStats}) {
		t.Errorf("Sources = %v", got)
	}

	h := gatherHistogram(t, p, "respmeter_engine_command_duration_seconds", "debug")
	if h.GetSampleCount() != 20 {
		t.Errorf("debug histogram count %d, want 20", h.GetSampleCount())
	}
	// DEBUG SLEEP 0.005 sleeps at least 5 ms (nanosleep never returns
	// early): nothing in or below the engine's 4227 µs bucket, and normally
	// all 20 in its (4227, 8454] µs one. On a loaded machine a sleep can
	// overrun by 3.5 ms (seen once in 300 on a 2-CPU box at load 5), so
	// allow two above; the exact check is the oracle below.
	if lo, hi := cumulativeAt(h, 4227e-6), cumulativeAt(h, 8454e-6); lo != 0 || hi < 18 {
		t.Errorf("debug: %d calls <= 4227µs and %d <= 8454µs, want 0 and 20 (buckets %v)", lo, hi, h.GetBucket())
	}
	// Oracle: the engine's own histogram moved by exactly what we export.
	wantBuckets := bucketDelta(t, engineBefore, engineAfter)
	var prev uint64
	for _, b := range h.GetBucket() {
		us := int64(b.GetUpperBound()*1e6 + 0.5)
		if got := b.GetCumulativeCount() - prev; int64(got) != wantBuckets[us] {
			t.Errorf("bucket %d µs: exported %d, engine delta %d", us, got, wantBuckets[us])
		}
		prev = b.GetCumulativeCount()
	}
	for _, cmd := range []string{"get", "set"} {
		if hc := gatherHistogram(t, p, "respmeter_engine_command_duration_seconds", cmd).GetSampleCount(); hc != map[string]uint64{"get": 5, "set": 7}[cmd] {
			t.Errorf("%s histogram count %d", cmd, hc)
		}
	}
}

// bucketDelta returns per-bucket counts of the "debug" histogram in after
// minus before, both go-redis decodings of LATENCY HISTOGRAM debug.
func bucketDelta(t *testing.T, before, after any) map[int64]int64 {
	t.Helper()
	perBucket := func(v any) map[int64]int64 {
		out := map[int64]int64{}
		m, _ := v.(map[any]any)
		entry, _ := m["debug"].(map[any]any)
		cum, _ := entry["histogram_usec"].(map[any]any)
		var bounds []int64
		for b := range cum {
			bounds = append(bounds, b.(int64))
		}
		slices.Sort(bounds)
		var last int64
		for _, b := range bounds {
			c := cum[b].(int64)
			out[b] = c - last
			last = c
		}
		return out
	}
	b, a := perBucket(before), perBucket(after)
	if len(a) == 0 {
		t.Fatalf("cannot decode LATENCY HISTOGRAM debug: %#v", after)
	}
	for k, v := range b {
		a[k] -= v
	}
	return a
}

// TestPollerRun runs the Poller for real: names its connection, settles on
// LATENCY HISTOGRAM + commandstats, survives CONFIG RESETSTAT with exact
// counts, exports lint-clean metrics and leaves no goroutine behind.
func TestPollerRun(t *testing.T) {
	redistest.VerifyNoLeaks(t)
	s := startServer(t)
	p := NewPoller(s.Addr(), 50*time.Millisecond, testNames, nil)
	probe := NewProbe(s.Addr(), 10*time.Millisecond, nil)
	stop := runUntilCancel(t, func(ctx context.Context) {
		var wg sync.WaitGroup
		wg.Go(func() { p.Run(ctx) })
		wg.Go(func() { probe.Run(ctx) })
		wg.Wait()
	})
	polls := func(n int64) func() bool { return func() bool { return p.Stats().Polls >= n } }
	waitFor(t, 5*time.Second, "first poll", polls(1))
	list := clientList(t, s)
	for _, name := range []string{pollName, probeName} {
		if !strings.Contains(list, "name="+name) {
			t.Errorf("CLIENT LIST lacks name=%s:\n%s", name, list)
		}
	}

	setCalls := func() int64 {
		for _, c := range p.Stats().Commands {
			if c.Command == "set" {
				return c.Calls
			}
		}
		return 0
	}
	for range 6 {
		s.Do("SET", "k", "v")
	}
	waitFor(t, 5*time.Second, "6 SET counted", func() bool { return setCalls() >= 6 })
	s.Do("CONFIG", "RESETSTAT")
	for range 4 {
		s.Do("SET", "k", "v")
	}
	waitFor(t, 5*time.Second, "4 more SET counted", func() bool { return setCalls() >= 10 })
	n := p.Stats().Polls
	waitFor(t, 5*time.Second, "two more polls", polls(n+2))
	if got := setCalls(); got != 10 {
		t.Errorf("set calls across CONFIG RESETSTAT = %d, want 10", got)
	}
	if got := p.Sources(); !slices.Equal(got, []string{SourceLatencyHistogram, SourceCommandStats}) {
		t.Errorf("Sources = %v", got)
	}
	st := p.Stats()
	if st.Interval != 50*time.Millisecond || st.LastInterval <= 0 || st.LastPoll.IsZero() || st.Errors != 0 {
		t.Errorf("stats %+v", st)
	}
	// The probe's PINGs and the poller's own commands are counted too.
	seen := map[string]bool{}
	for _, c := range st.Commands {
		seen[c.Command] = c.Calls > 0
	}
	for _, cmd := range []string{"ping", "latency", "info"} {
		if !seen[cmd] {
			t.Errorf("no %s calls seen: %+v", cmd, st.Commands)
		}
	}

	reg := prometheus.NewPedanticRegistry()
	if err := p.Register(reg); err != nil {
		t.Fatal(err)
	}
	if err := probe.Register(reg); err != nil {
		t.Fatal(err)
	}
	lint(t, reg)
	if h := findMetric(t, reg, "respmeter_engine_command_duration_seconds", "set"); h == nil || h.GetHistogram().GetSampleCount() != 10 {
		t.Errorf("set histogram %v, want 10 calls", h)
	}
	if h := findMetric(t, reg, "respmeter_engine_command_duration_seconds", "set").GetHistogram(); h.GetSchema() != 3 || len(h.GetPositiveSpan()) == 0 {
		t.Errorf("set histogram: schema %d, native spans %v; want native buckets of schema 3", h.GetSchema(), h.GetPositiveSpan())
	}
	stop()
}

// TestSideConnectionsLogin: with SetLogin the probe and the poller
// authenticate before their first command, so an engine with requirepass
// is probed and polled; without it both only count NOAUTH errors.
func TestSideConnectionsLogin(t *testing.T) {
	const pw = "side-pw"
	s := redistest.Start(t, "--requirepass", pw)
	logger := slog.New(slog.DiscardHandler)
	probe := NewProbe(s.Addr(), 20*time.Millisecond, logger)
	probe.SetLogin("", pw)
	poller := NewPoller(s.Addr(), 50*time.Millisecond, []string{"ping"}, logger)
	poller.SetLogin("default", pw)
	anon := NewProbe(s.Addr(), 20*time.Millisecond, logger)
	stops := []func(){runUntilCancel(t, probe.Run), runUntilCancel(t, poller.Run), runUntilCancel(t, anon.Run)}
	defer func() { // last started first: each checks the goroutines it added are gone
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
	}()
	waitFor(t, 5*time.Second, "probe samples and polls with the password", func() bool {
		return probe.Stats().Count > 3 && poller.Stats().Polls > 2
	})
	waitFor(t, 5*time.Second, "errors of the probe without it", func() bool { return anon.Stats().Errors > 0 })
	if st := anon.Stats(); st.Count != 0 || !strings.Contains(st.LastErr, "NOAUTH") {
		t.Errorf("probe without the password: %d samples, last error %q; want 0 and NOAUTH", st.Count, st.LastErr)
	}
	for _, e := range []string{probe.Stats().LastErr, poller.Stats().LastErr, anon.Stats().LastErr} {
		if strings.Contains(e, pw) {
			t.Errorf("an error shows the password: %q", e)
		}
	}
}

// TestPollerEngineLabel: two Pollers of one engine, one given 127.0.0.1:port
// and one localhost:port (as two proxies may name it), export its series
// with the same engine label, the run_id of its INFO server, and each its
// own shard, so that max by (engine, command) counts the engine once; the
// Poller's own poll errors carry no engine. Without a run_id (a Poller that
// never read INFO server) engine is the address given.
func TestPollerEngineLabel(t *testing.T) {
	s := startServer(t)
	info, _ := s.Do("INFO", "server").(string)
	want := runID(info)
	if len(want) != 40 {
		t.Fatalf("run_id %q of INFO server, want 40 hex digits", want)
	}
	addrs := []string{s.Addr(), "localhost:" + strconv.Itoa(s.Port())}
	reg := prometheus.NewPedanticRegistry() // one scrape of both, as Prometheus sees them
	var ps []*Poller
	for _, addr := range addrs {
		p := NewPoller(addr, 20*time.Millisecond, testNames, nil)
		runUntilCancel(t, p.Run)
		if err := p.Register(prometheus.WrapRegistererWith(prometheus.Labels{"shard": addr}, reg)); err != nil {
			t.Fatal(err)
		}
		ps = append(ps, p)
	}
	for _, p := range ps { // counts are deltas since a Poller's first poll
		waitFor(t, 5*time.Second, "a first poll by "+p.addr, func() bool { return p.Stats().Polls >= 1 })
	}
	s.Do("SET", "k", "v")
	for _, p := range ps {
		waitFor(t, 5*time.Second, "SET polled by "+p.addr, func() bool {
			return slices.ContainsFunc(p.Stats().Commands, func(c CommandStats) bool { return c.Command == "set" && c.Calls > 0 })
		})
		waitFor(t, 5*time.Second, "the CPU witness of "+p.addr, func() bool { _, ok := p.WitnessTotal(); return ok })
	}
	lint(t, reg)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]map[string]bool{} // family -> shards with engine=want
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			engine, has := labels["engine"]
			switch {
			case mf.GetName() == "respmeter_engine_poll_errors_total":
				if has {
					t.Errorf("%s%v: the Poller's own errors carry engine", mf.GetName(), labels)
				}
			case !has || engine != want:
				t.Errorf("%s%v: engine %q, want the run_id %s", mf.GetName(), labels, engine, want)
			default:
				if seen[mf.GetName()] == nil {
					seen[mf.GetName()] = map[string]bool{}
				}
				seen[mf.GetName()][labels["shard"]] = true
			}
		}
	}
	for _, name := range []string{"respmeter_engine_commands_total", "respmeter_engine_command_seconds_total",
		"respmeter_engine_command_duration_seconds", "respmeter_engine_main_thread_cpu_seconds_total"} {
		if len(seen[name]) != 2 {
			t.Errorf("%s: engine=%s from shards %v, want both %v", name, want, seen[name], addrs)
		}
	}

	// No INFO server read: the address stands in.
	p := NewPoller("10.0.0.1:6379", time.Second, testNames, nil)
	applyCaptured(t, p, 1, time.Now())
	applyCaptured(t, p, 2, time.Now().Add(time.Second))
	reg = prometheus.NewPedanticRegistry()
	if err := p.Register(reg); err != nil {
		t.Fatal(err)
	}
	mfs, err = reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, mf := range mfs {
		if mf.GetName() != "respmeter_engine_commands_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			n++
			if !slices.ContainsFunc(m.GetLabel(), func(l *dto.LabelPair) bool { return l.GetName() == "engine" && l.GetValue() == "10.0.0.1:6379" }) {
				t.Errorf("respmeter_engine_commands_total%v without a run_id, want engine=\"10.0.0.1:6379\"", m.GetLabel())
			}
		}
	}
	if n == 0 {
		t.Error("no respmeter_engine_commands_total from the captured polls")
	}
}
