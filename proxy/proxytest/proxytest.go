// Package proxytest runs respmeter's proxy in-process for integration tests.
//
// It is kept apart from package redistest because it imports package proxy:
// proxy's own internal tests may import redistest, and redistest importing
// proxy would be an import cycle for them. External tests (package
// proxy_test) and tests of other packages may import both.
package proxytest

import (
	"context"
	"log/slog"
	"os"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/respmeter/respmeter/metrics"
	"github.com/respmeter/respmeter/proxy"
)

// DefaultLoops is the number of event loops StartProxy configures: more
// than one, so that cross-loop bugs can show, but few enough for -race.
const DefaultLoops = 2

// stopTimeout bounds the Stop run by the cleanup.
const stopTimeout = 10 * time.Second

// StartProxy starts a proxy listening on a free loopback port in front of
// upstream, with measuring on, DefaultLoops loops, the engine's command
// table (proxy.FetchCommands, read after mod unless mod sets Commands), a
// metrics.Set labelled with its Labels(), DialTimeout 1 s, DrainTimeout 200 ms (tests leave
// blocking commands pending) and a logger writing Warn and above to t.Log
// (Debug with RESPMETER_TEST_LOG=debug). mod, if not nil, may change the
// Config before proxy.New; if it leaves Metrics nil with Measure on, the Set
// is created after mod, with mod's Loops. A cleanup stops the proxy. It
// returns the running proxy and the Set it records into (nil when
// measuring is off).
func StartProxy(t testing.TB, upstream string, mod func(*proxy.Config)) (*proxy.Proxy, *metrics.Set) {
	t.Helper()
	lw := &tbWriter{t: t}
	level := slog.LevelWarn
	if os.Getenv("RESPMETER_TEST_LOG") == "debug" {
		level = slog.LevelDebug
	}
	cfg := proxy.Config{
		Listen:       "127.0.0.1:0",
		Upstream:     upstream,
		Loops:        DefaultLoops,
		Measure:      true,
		DrainTimeout: 200 * time.Millisecond,
		DialTimeout:  time.Second,
		Logger:       slog.New(slog.NewTextHandler(lw, &slog.HandlerOptions{Level: level})),
	}
	// RESPMETER_TEST_UPSTREAM_MODE=shared runs the same tests with
	// shared (multiplexed) upstream connections.
	cfg.UpstreamMode = os.Getenv("RESPMETER_TEST_UPSTREAM_MODE")
	if mod != nil {
		mod(&cfg)
	}
	// RESPMETER_TEST_ROUTE=slots (or pinned) runs the tests written for one
	// engine through hash-slot routing, the engine as the only shard: the
	// routed client must then answer exactly as the passthrough one does.
	// (A test that asks for shared connections keeps them: pinned does not
	// apply to shared.)
	if r := os.Getenv("RESPMETER_TEST_ROUTE"); r != "" && (cfg.Route == "" || cfg.Route == proxy.RouteNone) && cfg.Upstream != "" &&
		!(r == proxy.RoutePinned && cfg.UpstreamMode == proxy.UpstreamShared) {
		cfg.Route, cfg.Shards = r, []string{cfg.Upstream}
	}
	if cfg.Route == proxy.RoutePinned {
		cfg.UpstreamMode = "" // shared does not apply to pinned
	}
	if cfg.Commands == nil {
		cfg.Commands = proxy.FetchCommands(cfg, cfg.Logger)
	}
	if cfg.Measure && cfg.Metrics == nil {
		loops := cfg.Loops
		if loops == 0 {
			loops = runtime.NumCPU()
		}
		cfg.Metrics = metrics.NewSet(loops, cfg.Commands.Labels())
	}
	if !cfg.Measure {
		cfg.Metrics = nil
	}
	p, err := proxy.New(cfg)
	if err != nil {
		t.Fatalf("proxytest: proxy.New: %v", err)
	}
	// Registered before Stop's cleanup so that it runs after it: log lines
	// written during Stop still reach t, later ones are dropped.
	t.Cleanup(lw.done)
	if err := p.Start(); err != nil {
		t.Fatalf("proxytest: Start: %v", err)
	}
	st := &stopper{p: p}
	stoppers.Store(p, st)
	t.Cleanup(func() {
		stoppers.Delete(p)
		if err := st.stop(); err != nil {
			t.Errorf("proxytest: Stop: %v", err)
		}
	})
	if p.Addr() == "" && p.TLSAddr() == "" {
		t.Fatalf("proxytest: proxy has no address after Start")
	}
	return p, cfg.Metrics
}

// stoppers maps each running *proxy.Proxy to its stopper, so that Stop
// and the cleanup stop it once.
var stoppers sync.Map

type stopper struct {
	p    *proxy.Proxy
	once sync.Once
	err  error
}

func (s *stopper) stop() error {
	s.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), stopTimeout)
		defer cancel()
		s.err = s.p.Stop(ctx)
	})
	return s.err
}

// Stop stops a proxy started by StartProxy now (the cleanup then does
// nothing) and fails t if Stop returns an error.
func Stop(t testing.TB, p *proxy.Proxy) {
	t.Helper()
	v, ok := stoppers.Load(p)
	if !ok {
		t.Fatalf("proxytest: Stop: proxy not started by StartProxy or already cleaned up")
	}
	if err := v.(*stopper).stop(); err != nil {
		t.Errorf("proxytest: Stop: %v", err)
	}
}

// Command returns the stats of the command labelled name (lower case, as in
// command.Names or the engine's Labels) from a fresh snapshot of set, and fails t if there is none.
func Command(t testing.TB, set *metrics.Set, name string) metrics.CommandStats {
	t.Helper()
	if set == nil {
		t.Fatalf("proxytest: no metrics.Set")
	}
	for _, c := range set.Snapshot().Commands {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("proxytest: no command %q in the metrics set", name)
	return metrics.CommandStats{}
}

// tbWriter forwards log output to t.Log until done is called: testing
// panics on Log after the test has finished, and the proxy's loops may log
// while they wind down.
type tbWriter struct {
	mu     sync.Mutex
	t      testing.TB
	closed bool
}

func (w *tbWriter) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case w.closed:
	case isF(w.t):
		// A proxy started for a whole fuzz test (on its *testing.F) logs
		// while the fuzz target runs, where F.Log panics.
		_, _ = os.Stderr.Write(b)
	default:
		w.t.Log(string(b))
	}
	return len(b), nil
}

func isF(t testing.TB) bool {
	_, ok := t.(*testing.F)
	return ok
}

func (w *tbWriter) done() {
	w.mu.Lock()
	w.closed = true
	w.mu.Unlock()
}
