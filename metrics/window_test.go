package metrics_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/respmeter/respmeter/internal/heaptest"
	"github.com/respmeter/respmeter/internal/redistest"
	"github.com/respmeter/respmeter/metrics"
	"github.com/respmeter/respmeter/routing/command"
)

// repeat returns n copies of o.
func repeat(n int, o op) []op {
	ops := make([]op, n)
	for i := range ops {
		ops[i] = o
	}
	return ops
}

// windowFixture records three intervals into a 2-loop Set with a Window of
// n slots of 1 s, ticking at t0+1s, t0+2s, t0+3s:
//
//	interval 1: 100 GET of 100 µs total (upstream 40 µs), one an error
//	interval 2: 50 GET of 1000 µs, 10 SET of 300 µs; shard A: 20 of 500 µs
//	interval 3: 5 GET of 2000 µs (a late error on SET counts, untimed)
func windowFixture(t *testing.T, n int) (*metrics.Set, *metrics.Window, time.Time) {
	t.Helper()
	s := metrics.NewSet(2, testNames)
	a := s.Shard(shardA)
	t0 := time.Now()
	w := metrics.NewWindow(s, time.Second, n)
	ops1 := repeat(100, op{loop: 0, cmd: cmdGet, total: 100 * us, upstream: 40 * us})
	ops1[7].isErr = true
	record(s, ops1...)
	w.Tick(t0.Add(1 * time.Second))
	record(s, repeat(50, op{loop: 1, cmd: cmdGet, total: 1000 * us, upstream: 900 * us})...)
	record(s, repeat(10, op{loop: 0, cmd: cmdSet, total: 300 * us})...)
	for range 20 {
		recordShards(s, shardOp{kind: opObserve, loop: 1, shard: a, total: 500 * us, upstream: 450 * us})
	}
	w.Tick(t0.Add(2 * time.Second))
	record(s, repeat(5, op{loop: 0, cmd: cmdGet, total: 2000 * us, upstream: 1500 * us})...)
	record(s, op{loop: 1, cmd: cmdSet, untimed: true, isErr: true})
	w.Tick(t0.Add(3 * time.Second))
	return s, w, t0
}

func TestWindowStats(t *testing.T) {
	_, w, t0 := windowFixture(t, 60)
	for _, tc := range []struct {
		window             time.Duration
		intervals          int
		secs               float64 // End - Start; the first interval starts at NewWindow, just after t0
		getCount, getErrs  int64
		getP50, getMaxUS   float64
		getMeanUS          float64
		setCount, setErrs  int64
		setTimed           int64
		shardCount         int64
		totalsCount        int64
		getUpstreamP99US   float64
		totalsP999US       float64
		firstIntervalInAll bool
	}{
		{window: time.Second, intervals: 1, secs: 1, getCount: 5, getP50: 2000, getMaxUS: 2000, getMeanUS: 2000,
			setCount: 1, setErrs: 1, totalsCount: 6, getUpstreamP99US: 1500, totalsP999US: 2000},
		{window: 1500 * time.Millisecond, intervals: 2, secs: 2, getCount: 55, getP50: 1000, getMaxUS: 2000,
			getMeanUS: (50*1000 + 5*2000) / 55.0, setCount: 11, setErrs: 1, setTimed: 10, shardCount: 20,
			totalsCount: 66, getUpstreamP99US: 1500, totalsP999US: 2000},
		{window: time.Hour, intervals: 3, getCount: 155, getErrs: 1, getP50: 100, getMaxUS: 2000,
			getMeanUS: (100*100 + 50*1000 + 5*2000) / 155.0, setCount: 11, setErrs: 1, setTimed: 10, shardCount: 20,
			totalsCount: 166, getUpstreamP99US: 1500, totalsP999US: 2000, firstIntervalInAll: true},
	} {
		t.Run(tc.window.String(), func(t *testing.T) {
			ws := w.Stats(tc.window)
			sn := ws.Snapshot
			get, set := &sn.Commands[cmdGet], &sn.Commands[cmdSet]
			totals := sn.Totals()
			if ws.Intervals != tc.intervals {
				t.Errorf("intervals = %d, want %d", ws.Intervals, tc.intervals)
			}
			if !ws.End.Equal(t0.Add(3 * time.Second)) {
				t.Errorf("end = %v, want t0+3s", ws.End.Sub(t0))
			}
			if tc.firstIntervalInAll {
				if s := ws.Seconds(); s <= 2 || s > 3 {
					t.Errorf("seconds = %g, want in (2, 3]", s)
				}
			} else if ws.Seconds() != tc.secs {
				t.Errorf("seconds = %g, want %g", ws.Seconds(), tc.secs)
			}
			for _, c := range []struct {
				name      string
				got, want float64
			}{
				{"get count", float64(get.Count), float64(tc.getCount)},
				{"get errors", float64(get.Errors), float64(tc.getErrs)},
				{"get total count", float64(get.Phases[metrics.PhaseTotal].Count()), float64(tc.getCount)},
				{"get total p50 µs", float64(get.Phases[metrics.PhaseTotal].Percentile(50).Microseconds()), tc.getP50},
				{"get total max µs", float64(get.Phases[metrics.PhaseTotal].Max().Microseconds()), tc.getMaxUS},
				{"get total mean µs", float64(get.Phases[metrics.PhaseTotal].Mean().Nanoseconds()) / 1e3, tc.getMeanUS},
				{"get upstream p99 µs", float64(get.Phases[metrics.PhaseUpstream].Percentile(99).Microseconds()), tc.getUpstreamP99US},
				{"set count", float64(set.Count), float64(tc.setCount)},
				{"set errors", float64(set.Errors), float64(tc.setErrs)},
				{"set timed", float64(set.Phases[metrics.PhaseTotal].Count()), float64(tc.setTimed)},
				{"shard count", float64(sn.Shards[0].Count), float64(tc.shardCount)},
				{"shard timed", float64(sn.Shards[0].Phases[metrics.PhaseTotal].Count()), float64(tc.shardCount)},
				{"totals count", float64(totals.Count), float64(tc.totalsCount)},
				{"totals p99.9 µs", float64(totals.Phases[metrics.PhaseTotal].Percentile(99.9).Microseconds()), tc.totalsP999US},
			} {
				// Means are exact sums over counts; allow float rounding (and
				// the integer division of a Duration).
				if math.Abs(c.got-c.want) > 1e-3 {
					t.Errorf("%s = %g, want %g", c.name, c.got, c.want)
				}
			}
		})
	}
}

// TestWindowRing: with 2 slots, the third tick overwrites the first
// interval, and a window longer than the ring merges the 2 kept.
func TestWindowRing(t *testing.T) {
	_, w, t0 := windowFixture(t, 2)
	ws := w.Stats(time.Hour)
	if ws.Intervals != 2 || !ws.Start.Equal(t0.Add(time.Second)) {
		t.Fatalf("intervals %d from t0%+v, want 2 from t0+1s", ws.Intervals, ws.Start.Sub(t0))
	}
	if got := ws.Snapshot.Commands[cmdGet].Count; got != 55 {
		t.Errorf("get count over the ring = %d, want 55 (interval 1's 100 overwritten)", got)
	}
	// Another empty tick: the window of one interval holds nothing.
	w.Tick(t0.Add(4 * time.Second))
	if got := w.Stats(time.Second).Snapshot.Commands[cmdGet].Count; got != 0 {
		t.Errorf("get count in an idle interval = %d, want 0", got)
	}
}

// TestWindowBeforeTick: before the first tick a window is empty, not an
// error, and rates divide by nothing.
func TestWindowBeforeTick(t *testing.T) {
	s := metrics.NewSet(1, testNames)
	record(s, op{cmd: cmdGet, total: 10 * us})
	ws := metrics.NewWindow(s, time.Second, 5).Stats(10 * time.Second)
	if ws.Intervals != 0 || ws.Seconds() != 0 || ws.Snapshot.Commands[cmdGet].Count != 0 {
		t.Errorf("before a tick: %d intervals, %g s, get %d", ws.Intervals, ws.Seconds(), ws.Snapshot.Commands[cmdGet].Count)
	}
}

// windowDoc is the part of /stats?window=D this test reads.
type windowDoc struct {
	Commands map[string]struct {
		Count  int64                   `json:"count"`
		Rate   *float64                `json:"rate"`
		Phases map[string]durationsDoc `json:"phases"`
	} `json:"commands"`
	Totals struct {
		Count int64    `json:"count"`
		Rate  *float64 `json:"rate"`
	} `json:"totals"`
	Shards []struct {
		Shard    string        `json:"shard"`
		Commands int64         `json:"commands"`
		Rate     *float64      `json:"rate"`
		Total    percentileDoc `json:"total"`
		Batch    *struct{}     `json:"batch"`
	} `json:"shards"`
	Window *struct {
		Seconds         float64 `json:"seconds"`
		Intervals       int     `json:"intervals"`
		IntervalSeconds float64 `json:"interval_seconds"`
		End             string  `json:"end"`
	} `json:"window"`
	Extra string `json:"extra"`
}

func TestStatsHandlerWindow(t *testing.T) {
	s, w, t0 := windowFixture(t, 60)
	var asked []time.Duration // the windows extra was called with
	h := s.StatsHandlerWindowed(w, func(d time.Duration) map[string]any {
		asked = append(asked, d)
		return map[string]any{"extra": "kept"}
	})
	get := func(target string) (int, string) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, target, nil))
		return rec.Code, rec.Body.String()
	}

	code, body := get("/stats?window=2s")
	if code != http.StatusOK {
		t.Fatalf("status %d: %s", code, body)
	}
	var doc windowDoc
	if err := json.Unmarshal([]byte(body), &doc); err != nil {
		t.Fatalf("decode: %v\n%s", err, body)
	}
	if doc.Window == nil || doc.Window.Seconds != 2 || doc.Window.Intervals != 2 || doc.Window.IntervalSeconds != 1 ||
		doc.Window.End != t0.Add(3*time.Second).UTC().Format(time.RFC3339Nano) {
		t.Fatalf("window section %+v, want 2 s, 2 intervals of 1 s ending t0+3s", doc.Window)
	}
	g := doc.Commands["get"]
	if g.Count != 55 || g.Rate == nil || *g.Rate != 27.5 || g.Phases["total"].P50 != 0.001 || g.Phases["total"].Max != 0.002 {
		t.Errorf("get over 2 s: count %d rate %v p50 %g max %g; want 55, 27.5/s, 0.001, 0.002",
			g.Count, g.Rate, g.Phases["total"].P50, g.Phases["total"].Max)
	}
	if doc.Totals.Count != 66 || doc.Totals.Rate == nil || *doc.Totals.Rate != 33 {
		t.Errorf("totals over 2 s: count %d rate %v; want 66, 33/s", doc.Totals.Count, doc.Totals.Rate)
	}
	if len(doc.Shards) != 1 || doc.Shards[0].Commands != 20 || doc.Shards[0].Rate == nil || *doc.Shards[0].Rate != 10 ||
		doc.Shards[0].Total.P99 != 0.0005 || doc.Shards[0].Batch != nil {
		t.Errorf("shards over 2 s: %+v; want one of 20 commands at 10/s, p99 0.0005, no batch", doc.Shards)
	}
	if doc.Extra != "kept" {
		t.Errorf("extra section %q, want kept", doc.Extra)
	}

	// Without window: cumulative, no rate, no window section.
	code, body = get("/stats")
	if code != http.StatusOK || strings.Contains(body, `"window"`) || strings.Contains(body, `"rate"`) ||
		!strings.Contains(body, `"count": 155`) {
		t.Errorf("plain /stats: status %d, body:\n%s", code, body)
	}

	// extra follows the window asked: 2 s, then none (0).
	if !slices.Equal(asked, []time.Duration{2 * time.Second, 0}) {
		t.Errorf("extra called with windows %v, want [2s 0s]", asked)
	}
	for _, bad := range []string{"/stats?window=x", "/stats?window=-1s", "/stats?window=0s"} {
		if code, _ := get(bad); code != http.StatusBadRequest {
			t.Errorf("%s: status %d, want 400", bad, code)
		}
	}
	// A Set's handler without a Window refuses a window.
	rec := httptest.NewRecorder()
	s.StatsHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/stats?window=2s", nil))
	if rec.Code != http.StatusBadRequest {
		t.Errorf("window without a Window: status %d, want 400", rec.Code)
	}
}

// BenchmarkWindowMemory measures what a full Window (30 intervals of 1 s,
// as the proxy keeps) holds on top of its Set, with every command name of
// the built-in table in use on 2 loops and 3 shards (the workload of
// BenchmarkScrapeMemory, 20 timings per command and loop per interval):
// the live heap of a Set given 40 intervals and a Window ticked after each,
// minus that of a Set given the same recordings (same seeds) and no
// Window. Run it once:
//
//	go test -run '^$' -bench BenchmarkWindowMemory -benchtime 1x ./metrics/
func BenchmarkWindowMemory(b *testing.B) {
	const intervals, slots = 40, 30
	build := func(window bool) uint64 {
		base := heaptest.Live()
		s := metrics.NewSet(memLoops, command.Names())
		ws := make([]*memWorkload, memLoops)
		for li := range ws {
			ws[li] = newMemWorkload(s, uint64(li), memShards)
		}
		var w *metrics.Window
		if window {
			w = metrics.NewWindow(s, time.Second, slots)
		}
		t0 := time.Now()
		for i := range intervals {
			for li, wl := range ws {
				wl.round(s.Loop(li), 20)
			}
			if w != nil {
				w.Tick(t0.Add(time.Duration(i+1) * time.Second))
			}
		}
		// A scrape, so that both Sets hold their cumulative histograms.
		rec := httptest.NewRecorder()
		s.StatsHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/stats", nil))
		live := heaptest.Live() - base
		runtime.KeepAlive(s)
		runtime.KeepAlive(w)
		return live
	}
	var with, without uint64
	for b.Loop() {
		without = build(false)
		with = build(true)
	}
	series := float64((command.NumIDs() + memShards) * timedPhases)
	extra := float64(with) - float64(without)
	b.ReportMetric(float64(without)/(1<<20), "set-MiB")
	b.ReportMetric(extra/(1<<20), "window-MiB")
	b.ReportMetric(extra/series, "window-B/series")
}

// TestWindowConcurrent: recording, ticks, windowed reads and scrapes at
// once (run with -race); every command recorded lands in exactly one
// interval, so the window over the whole ring counts them all.
func TestWindowConcurrent(t *testing.T) {
	s := metrics.NewSet(2, testNames)
	w := metrics.NewWindow(s, time.Millisecond, 1<<16) // never wraps here
	const perLoop = 5000
	done := make(chan struct{})
	var wg sync.WaitGroup
	for li := range 2 {
		wg.Go(func() {
			for i := range perLoop {
				record(s, op{loop: li, cmd: cmdGet, total: time.Duration(1+i%700) * us, upstream: us})
			}
		})
	}
	go func() { wg.Wait(); close(done) }()
	h := s.StatsHandlerWindowed(w, nil)
	t0 := time.Now()
	for i := 1; ; i++ {
		w.Tick(t0.Add(time.Duration(i) * time.Millisecond))
		_ = w.Stats(time.Hour)
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/stats?window=5s", nil))
		select {
		case <-done:
			w.Tick(t0.Add(time.Duration(i+1) * time.Millisecond))
			ws := w.Stats(time.Hour)
			if n := ws.Snapshot.Commands[cmdGet].Count; n != 2*perLoop || ws.Snapshot.Commands[cmdGet].Phases[metrics.PhaseTotal].Count() != 2*perLoop {
				t.Errorf("window over %d intervals: get %d, timed %d; want %d", ws.Intervals, n,
					ws.Snapshot.Commands[cmdGet].Phases[metrics.PhaseTotal].Count(), 2*perLoop)
			}
			return
		default:
		}
	}
}

// TestWindowLazy: a lazy window records nothing until it is read, starts
// empty (what came before the first read is not in it), and once nobody
// has read it for its idle time drops what it held and starts afresh at
// the next read.
func TestWindowLazy(t *testing.T) {
	s := metrics.NewSet(1, testNames)
	w := metrics.NewWindow(s, 10*time.Millisecond, 100)
	w.Lazy(200 * time.Millisecond)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); w.Run(ctx) }()
	defer func() { cancel(); <-done }()

	record(s, repeat(100, op{loop: 0, cmd: cmdGet, total: 100 * us})...)
	time.Sleep(50 * time.Millisecond) // ticks pass, nothing is recorded
	if ws := w.Stats(time.Second); ws.Intervals != 0 || ws.Snapshot.Commands[cmdGet].Count != 0 {
		t.Fatalf("first read: %d intervals, %d GETs; want an empty window", ws.Intervals, ws.Snapshot.Commands[cmdGet].Count)
	}
	record(s, repeat(5, op{loop: 0, cmd: cmdGet, total: 100 * us})...)
	redistest.Eventually(t, 5*time.Second, func() error {
		if n := w.Stats(time.Second).Snapshot.Commands[cmdGet].Count; n != 5 {
			return fmt.Errorf("window holds %d GETs, want the 5 recorded since the first read", n)
		}
		return nil
	})
	time.Sleep(600 * time.Millisecond) // no read for 3x the idle time
	record(s, repeat(7, op{loop: 0, cmd: cmdGet, total: 100 * us})...)
	if ws := w.Stats(time.Second); ws.Intervals != 0 || ws.Snapshot.Commands[cmdGet].Count != 0 {
		t.Errorf("read after idle: %d intervals, %d GETs; want an empty window again", ws.Intervals, ws.Snapshot.Commands[cmdGet].Count)
	}
}
