package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/respmeter/respmeter/internal/redistest"
	"github.com/respmeter/respmeter/metrics"
	"github.com/respmeter/respmeter/metrics/split"
	"github.com/respmeter/respmeter/metrics/verdict"
	"github.com/respmeter/respmeter/routing/command"
)

func TestProxyLimit(t *testing.T) {
	for in, want := range map[int64]int{0: -1, 1: 1, 64 << 20: 64 << 20, math.MaxInt64: math.MaxInt} {
		if got := proxyLimit(in); got != want {
			t.Errorf("proxyLimit(%d) = %d, want %d", in, got, want)
		}
	}
}

// testSet returns a one-loop Set with commands other, get, set and blpop
// (left out of the totals), and a function recording n commands of id with
// the given phases.
func testSet() (*metrics.Set, func(id, n int, total, upstream time.Duration)) {
	set := metrics.NewSet(1, []string{"other", "get", "set", "blpop"})
	set.ExcludeFromTotals(3)
	return set, func(id, n int, total, upstream time.Duration) {
		l := set.Loop(0)
		l.Lock()
		for range n {
			l.ObserveLocked(id, total, upstream, upstream, false)
		}
		l.Unlock()
	}
}

// TestAnalyzer runs the analyzer for a few intervals with neither probe nor
// poller and checks the verdict it serves and prints.
func TestAnalyzer(t *testing.T) {
	set, observe := testSet()
	// Two requests in flight from the start on.
	var inFlight metrics.InFlight
	inFlight.SetClock(time.Now())
	inFlight.Add(2)
	a := newAnalyzer(verdict.Config{Set: set, InFlightArea: inFlight.Area, Interval: 50 * time.Millisecond}, 0, 0)
	if doc := a.statsExtra(); doc["verdict"].(*verdictJSON) != nil || doc["engine"].(*engineJSON) != nil || doc["probe"].(*probeJSON) != nil {
		t.Fatalf("before the first interval, with probe and poller off: %v, want nils", doc)
	}
	var buf bytes.Buffer
	if err := a.writeVerdict(&buf); err != nil {
		t.Fatal(err)
	}
	if out := buf.String(); !strings.Contains(out, "\nverdict: no requests in the interval\n") || strings.Contains(out, "latest interval") ||
		!strings.Contains(out, "probe: off (--probe-interval 0)\n") || !strings.Contains(out, "think: none recorded\n") {
		t.Errorf("idle output:\n%s", out)
	}

	stop := startAnalyzer(t, a)
	redistest.Eventually(t, 10*time.Second, func() error {
		observe(1, 10, 2*time.Millisecond, time.Millisecond)
		if rec := a.Latest(); rec == nil || rec.Interval.Requests == 0 || !rec.Verdict.Little {
			return fmt.Errorf("no verdict with requests and Little's L: %+v", rec)
		}
		return nil
	})
	v := a.statsExtra()["verdict"].(*verdictJSON)
	if v.Bound != "proxy-bound" && v.Bound != "path-bound" || v.EngineKnown || math.Abs(v.L-2) > 0.05 || v.Requests == 0 ||
		math.Abs(v.Shares.Client+v.Shares.Path+v.Shares.Engine+v.Shares.Proxy-1) > 1e-9 || v.String == "" {
		t.Errorf("verdict %+v", v)
	}
	stop()

	buf.Reset()
	if err := a.writeVerdict(&buf); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	for _, re := range []string{
		`(?m)^verdict: cycle 2ms: client 0% \| path 50% \| engine n/a \(no engine stats for these commands\) \| proxy 50% — path-bound; Little: L 2\.00 vs λW \d+\.\d\d$`,
		`(?m)^latest interval with requests \(\d+ms, \d+ requests?, ended (\d+ms|0s) ago\): cycle 2ms: `,
		`(?m)^Command +Timed +total \(ms\) +upstream \(ms\) +engine \(ms\) +wait \(ms\) +run queue \(ms\) +path \(ms\) +proxy \(ms\) +loop wait \(ms\) +injected \(ms\)$`,
		`(?m)^get +[1-9]\d* +2\.0000 +1\.0000 +- +- +- +1\.0000 +1\.0000 +- +0\.0000$`,
		`(?m)^Totals +[1-9]\d* +2\.0000 +1\.0000 +- +- +- +1\.0000 +1\.0000 +- +0\.0000$`,
		`(?m)^account per request \(ms\): think 0\.0000 \+ path 1\.0000 \+ engine 0\.0000 \+ queue 0\.0000 \+ other_clients 0\.0000 \+ run_queue 0\.0000 \+ proxy 1\.0000 \+ loop_wait_request 0\.0000 \+ loop_wait_reply 0\.0000 \+ injected 0\.0000 \+ tls 0\.0000 = cycle 2\.0000$`,
	} {
		if !regexp.MustCompile(re).MatchString(out) {
			t.Errorf("no match for %s:\n%s", re, out)
		}
	}
	checkAccount(t, out)
}

// TestAnalyzerHostStarvedTable: an analyzer whose witnesses are scripted
// (the proxy's threads' schedstat, a file the test writes, and the
// requests of a Set) reads respmeter's threads waiting 10 times as long
// for a CPU as they ran, 1 ms per request: the loop wait takes the path of
// every request (each waited unread at least that long), and the exit's
// table says so in every row as in its Totals row: each row's path and
// loop wait are its part of the account, which the Totals row is the
// request-weighted mean of, and the verdict's shares recompute from it
// (checkAccount). GETs of 200 µs upstream and SETs of 400 µs, and BLPOPs
// (left out of the account) printed under the Totals row.
func TestAnalyzerHostStarvedTable(t *testing.T) {
	set, _ := testSet()
	proc := t.TempDir()
	if err := os.MkdirAll(filepath.Join(proc, "task", "1"), 0o700); err != nil {
		t.Fatal(err)
	}
	stat, next := filepath.Join(proc, "task", "1", "schedstat"), filepath.Join(proc, "schedstat")
	var cpu, rq time.Duration
	// writeStat replaces the thread's schedstat whole, so that no read
	// finds it half written.
	writeStat := func() {
		if err := os.WriteFile(next, fmt.Appendf(nil, "%d %d 1\n", cpu, rq), 0o600); err != nil {
			t.Fatal(err)
		}
		redistest.ReplaceFile(t, next, stat)
	}
	writeStat()
	var inFlight metrics.InFlight
	inFlight.SetClock(time.Now())
	a := newAnalyzer(verdict.Config{Set: set, InFlightArea: inFlight.Area, Interval: 50 * time.Millisecond, ProcSelf: proc}, 0, 0)
	stop := startAnalyzer(t, a)
	// A batch's requests and its threads' time are recorded under the
	// loop's lock, which the analyzer's Set.Sums waits for before it reads
	// the schedstat: an interval's requests come with their wait.
	batch := func() {
		l := set.Loop(0)
		l.Lock()
		for range 10 {
			l.ObserveLocked(1, 300*time.Microsecond, 200*time.Microsecond, 200*time.Microsecond, false)
			l.ObserveLocked(2, 500*time.Microsecond, 400*time.Microsecond, 400*time.Microsecond, false)
		}
		l.ObserveLocked(3, 10*time.Millisecond, 9900*time.Microsecond, 9900*time.Microsecond, false)
		cpu, rq = cpu+20*100*time.Microsecond, rq+20*time.Millisecond
		writeStat()
		l.Unlock()
	}
	redistest.Eventually(t, 10*time.Second, func() error {
		batch()
		if n := a.SinceStartSum().Requests; n < 1000 {
			return fmt.Errorf("%d requests in the account", n)
		}
		return nil
	})
	stop()
	var buf bytes.Buffer
	if err := a.writeVerdict(&buf); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	checkAccount(t, out)
	for _, re := range []string{
		`(?m)^verdict: .* — host-starved; respmeter's threads waited \d+\.\dx their CPU time for a CPU`,
		// The replies waited unread all of their path.
		`(?m)^get +[1-9]\d* +0\.3000 +0\.2000 +- +- +- +0\.0000 +0\.1000 +0\.2000 +0\.0000$`,
		`(?m)^set +[1-9]\d* +0\.5000 +0\.4000 +- +- +- +0\.0000 +0\.1000 +0\.4000 +0\.0000$`,
		`(?m)^Totals +[1-9]\d* +0\.4000 +0\.3000 +- +- +- +0\.0000 +0\.1000 +0\.3000 +0\.0000$`,
		// BLPOP, left out of the account, under it with its own times.
		`(?m)^Totals .*\n-+\nblpop +[1-9]\d* +10\.0000 +9\.9000 +- +- +- +- +0\.1000 +- +-$`,
	} {
		if !regexp.MustCompile(re).MatchString(out) {
			t.Errorf("no match for %s:\n%s", re, out)
		}
	}
}

// startAnalyzer runs a.run until stop is called (at the latest when t
// ends); stop waits for it to return.
func startAnalyzer(t *testing.T, a *analyzer) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { a.Run(ctx) })
	stop = func() { cancel(); wg.Wait() }
	t.Cleanup(stop)
	return stop
}

func TestStatsHandlerWith(t *testing.T) {
	set, observe := testSet()
	observe(1, 1, time.Millisecond, time.Millisecond)
	h := set.StatsHandlerWith(func() map[string]any {
		return map[string]any{"verdict": nil, "probe": map[string]int{"count": 3}, "totals": "not replaced"}
	})
	do := func(method string) (*http.Response, string) {
		t.Helper()
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(method, "/stats", nil))
		res := rec.Result()
		body, _ := io.ReadAll(res.Body)
		return res, string(body)
	}
	res, body := do(http.MethodGet)
	var doc map[string]json.RawMessage
	if err := json.Unmarshal([]byte(body), &doc); err != nil || res.StatusCode != http.StatusOK {
		t.Fatalf("GET: %s, %v\n%s", res.Status, err, body)
	}
	if string(doc["verdict"]) != "null" || !strings.Contains(string(doc["probe"]), `"count": 3`) ||
		!strings.Contains(string(doc["commands"]), `"get"`) || !strings.Contains(string(doc["totals"]), `"count"`) {
		t.Errorf("GET /stats:\n%s", body)
	}
	if ct := res.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type %q", ct)
	}
	if res, body := do(http.MethodHead); res.StatusCode != http.StatusOK || body != "" || res.Header.Get("Content-Type") != "application/json" {
		t.Errorf("HEAD: %s, body %q", res.Status, body)
	}
	if res, _ := do(http.MethodPost); res.StatusCode != http.StatusMethodNotAllowed || res.Header.Get("Allow") != "GET, HEAD" {
		t.Errorf("POST: %s, Allow %q", res.Status, res.Header.Get("Allow"))
	}
}

// TestWriteVerdictCopiesNoHistograms checks that the verdict's tables (on
// SIGUSR1 and at exit) read counts and sums only: with 32 command names in
// use, writing them allocates less than 1 MiB, where a Snapshot's dense
// copies were 188 KB per command name and phase (30 MB).
func TestWriteVerdictCopiesNoHistograms(t *testing.T) {
	names := command.Names()[:32]
	set := metrics.NewSet(1, names)
	hdrRound(set, len(names), 50, 1)
	a := newAnalyzer(verdict.Config{Set: set, InFlightArea: func() int64 { return 1 }, Interval: time.Second}, 0, 0)
	var buf bytes.Buffer
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	if err := a.writeVerdict(&buf); err != nil {
		t.Fatal(err)
	}
	runtime.ReadMemStats(&after)
	if got := after.TotalAlloc - before.TotalAlloc; got > 1<<20 {
		t.Errorf("writeVerdict allocated %d B, want < 1 MiB", got)
	}
	if !strings.Contains(buf.String(), "\n"+names[1]+" ") {
		t.Errorf("no row for %s:\n%s", names[1], buf.String())
	}
}

// TestStatsWindowHoldsVerdict: when load stops, /stats?window=D keeps the
// verdict of the latest interval with requests (held, with its age) until
// D has passed since that interval ended, then shows the idle one; plain
// /stats shows the latest interval as before.
func TestStatsWindowHoldsVerdict(t *testing.T) {
	set, observe := testSet()
	a := newAnalyzer(verdict.Config{Set: set, Interval: 50 * time.Millisecond}, 0, 0)
	h := set.StatsHandlerWindowed(metrics.NewWindow(set, a.Interval(), 10), a.statsExtraWindow)
	verdict := func(target string) verdictJSON {
		t.Helper()
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, target, nil))
		var doc struct{ Verdict *verdictJSON }
		if err := json.Unmarshal(rec.Body.Bytes(), &doc); err != nil || rec.Code != http.StatusOK || doc.Verdict == nil {
			t.Fatalf("%s: status %d, %v:\n%s", target, rec.Code, err, rec.Body)
		}
		return *doc.Verdict
	}

	startAnalyzer(t, a)
	// Load until an interval has requests, then stop and wait for an idle one.
	redistest.Eventually(t, 10*time.Second, func() error {
		observe(1, 10, 2*time.Millisecond, time.Millisecond)
		if rec := a.Latest(); rec == nil || rec.Interval.Requests == 0 {
			return errors.New("no interval with requests yet")
		}
		return nil
	})
	redistest.Eventually(t, 10*time.Second, func() error {
		if rec := a.Latest(); rec.Interval.Requests != 0 {
			return fmt.Errorf("latest interval has %d requests", rec.Interval.Requests)
		}
		return nil
	})

	if v := verdict("/stats"); v.Bound != "idle" || v.Held || v.LastRequestsAgeSeconds == nil || *v.LastRequestsAgeSeconds <= 0 {
		t.Errorf("plain /stats after the load: bound %q held %v age %v; want idle, not held, an age", v.Bound, v.Held, v.LastRequestsAgeSeconds)
	}
	v := verdict("/stats?window=1h")
	if v.Bound == "idle" || !v.Held || v.Requests == 0 || v.LastRequestsAgeSeconds == nil || *v.LastRequestsAgeSeconds <= 0 ||
		!strings.Contains(v.String, "cycle 2ms") {
		t.Errorf("/stats?window=1h after the load: %+v; want the last busy interval's verdict, held, with its age", v)
	}
	// A window shorter than the time since then shows idle at once; a
	// 300 ms one once 300 ms have passed.
	if v := verdict("/stats?window=1ns"); v.Bound != "idle" || v.Held {
		t.Errorf("/stats?window=1ns: bound %q held %v; want idle", v.Bound, v.Held)
	}
	redistest.Eventually(t, 10*time.Second, func() error {
		if v := verdict("/stats?window=300ms"); v.Bound != "idle" || v.Held {
			return fmt.Errorf("bound %q held %v age %vs", v.Bound, v.Held, *v.LastRequestsAgeSeconds)
		}
		return nil
	})
	if v := verdict("/stats?window=300ms"); *v.LastRequestsAgeSeconds < 0.3 {
		t.Errorf("/stats?window=300ms turned idle %vs after the last requests, want >= 0.3", *v.LastRequestsAgeSeconds)
	}
}

// TestAccountCols: a row's engine, waits and loop wait print where they
// were measured, each on its own: the engine thread's witnesses without
// the engine's execution figures (the verdict's "engine n/a | engine wait
// 60%") give the wait columns and no engine column, as the verdict line
// beside the table counts them.
func TestAccountCols(t *testing.T) {
	var p [len(split.PartNames)]time.Duration
	p[1], p[2], p[3], p[4], p[5], p[6], p[7], p[8], p[9], p[10] = 5, 1, 2, 3, 4, 5, 7, 8, 9, 1
	col := func(d time.Duration) string { return fmt.Sprintf(" %d", d) }
	for _, tc := range []struct {
		engine, wait, loop bool
		want               string
	}{
		{true, true, true, " 1 9 4 5 6 15 9"},
		{false, true, true, " - 9 4 5 6 15 9"},
		{true, false, false, " 1 - - 5 6 - 9"},
		{false, false, false, " - - - 5 6 - 9"},
	} {
		if got := accountCols(col, " -", p, tc.engine, tc.wait, tc.loop); got != tc.want {
			t.Errorf("engine %v, wait %v, loop %v: %q, want %q", tc.engine, tc.wait, tc.loop, got, tc.want)
		}
	}
}
