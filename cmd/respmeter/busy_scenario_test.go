package main

import (
	"strings"
	"testing"
	"time"

	"github.com/respmeter/respmeter/internal/redistest"
	"github.com/respmeter/respmeter/metrics/verdict"
)

// TestScenarioEngineBusy: two clients of GET through respmeter, pausing
// 500 µs between requests, then another client looping DEBUG SLEEP 0.002,
// or a 2 ms busy-loop Lua script, on the engine directly (the classic
// KEYS * or long script of someone else). Truth, in the same run: what the loop adds to the same GETs'
// upstream (with it less without it), all of it the engine's. respmeter
// must book that difference to the engine (engine wait plus execution,
// with the loop less without it) within ±15 %, name the engine (an
// engine-* outcome, not path, not proxy) in at least 80 % of the intervals
// with the loop, and name DEBUG (EVAL) as the command that kept it busy.
func TestScenarioEngineBusy(t *testing.T) {
	redistest.SkipIfUnavailable(t)
	for _, tc := range []struct {
		name    string
		culprit string
		args    []any
	}{
		{"DEBUG SLEEP", "debug", []any{"DEBUG", "SLEEP", "0.002"}},
		// 2 ms of Lua CPU work (scSpin): the engine's thread on a CPU,
		// not asleep.
		{"Lua", "eval", []any{"EVAL", scSpin, "0", "2000"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			redistest.Retry(t, 3, func(t testing.TB) { scenarioEngineBusy(t, tc.culprit, tc.args...) })
		})
	}
}

func scenarioEngineBusy(t testing.TB, culprit string, blockerArgs ...any) {
	srv := redistest.Start(t, "--enable-debug-command", "yes")
	srv.Do("SET", "sc:k", "v")
	st := scStack(t, srv.Addr(), scInterval)
	load := scStartThink(t, st.proxy.Addr(), 2, 500*time.Microsecond, "GET", "sc:k")
	before := scVerdicts(t, st, load)
	blocker := scStart(t, srv.Addr(), 1, blockerArgs...)
	recs := append(scVerdicts(t, st, load), scVerdicts(t, st, load)...)
	blocker.stop()
	load.stop()
	if len(blocker.errs) > 0 {
		t.Fatalf("%d errors of the blocking loop, first: %v", len(blocker.errs), blocker.errs[0])
	}
	sb, s := scMean(before), scMean(recs)
	truth := s.upstream - sb.upstream
	booked := (s.exec + s.wait) - (sb.exec + sb.wait)
	t.Logf("without the loop: %s", sb)
	t.Logf("with the loop: %s", s)
	t.Logf("the loop adds %v to the GETs' upstream; respmeter books %v more to the engine (%+.1f%%)",
		truth, booked, 100*float64(booked-truth)/float64(truth))
	if truth < time.Millisecond {
		t.Fatalf("the loop added only %v to the GETs' upstream: no blocked engine to find", truth)
	}
	if dev := float64(booked-truth) / float64(truth); dev < -0.15 || dev > 0.15 {
		t.Errorf("booked to the engine %v, the loop added %v (%+.1f%%), want within 15%%", booked, truth, 100*dev)
	}
	scEngineNamed(t, recs, culprit)
}

// scEngineNamed checks that at least 80 % of the intervals name the
// engine (an engine-* outcome) and culprit as the command of other
// clients that kept it busy, and logs them.
func scEngineNamed(t testing.TB, recs []*verdict.Record, culprit string) {
	t.Helper()
	engine, named := 0, 0
	for i, r := range recs {
		t.Logf("interval %d: %d requests, %s; next: %s", i, r.Interval.Requests, r.Verdict, r.Verdict.Next())
		if strings.HasPrefix(r.Verdict.Bound, "engine-") {
			engine++
		}
		if r.Verdict.Culprit == culprit {
			named++
		}
	}
	if 5*engine < 4*len(recs) {
		t.Errorf("the engine named in %d of %d intervals, want at least 80%%", engine, len(recs))
	}
	if 5*named < 4*len(recs) {
		t.Errorf("%s named as the culprit in %d of %d intervals, want at least 80%%", strings.ToUpper(culprit), named, len(recs))
	}
}
