package proxy

import (
	"bytes"
	"errors"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"

	"github.com/respmeter/respmeter/metrics/hdrlog"
)

// TestInjectDistributions: 20,000 draws of each delay distribution give
// back its percentiles within 5 % (lognormal p50 = median, p99 = median ×
// e^(2.326 σ); Pareto pN = min / (1 - N/100)^(1/α); uniform and normal by
// their quantiles), and the same seed gives the same draws.
func TestInjectDistributions(t *testing.T) {
	const n = 20_000
	ms := float64(time.Millisecond)
	for _, tc := range []struct {
		name string
		d    dist
		pcts map[float64]float64 // percentile -> want (ns)
	}{
		{"fixed", dist{kind: "fixed", a: 2 * ms}, map[float64]float64{50: 2 * ms, 99: 2 * ms}},
		{"uniform", dist{kind: "uniform", a: 1 * ms, b: 3 * ms}, map[float64]float64{10: 1.2 * ms, 50: 2 * ms, 99: 2.98 * ms}},
		{"normal", dist{kind: "normal", a: 5 * ms, b: 1 * ms}, map[float64]float64{50: 5 * ms, 99: 5*ms + 2.326*ms, 10: 5*ms - 1.2816*ms}},
		{"lognormal", dist{kind: "lognormal", a: 1 * ms, s: 0.5}, map[float64]float64{50: 1 * ms, 99: ms * math.Exp(2.326*0.5)}},
		{"pareto", dist{kind: "pareto", a: 1 * ms, s: 2}, map[float64]float64{50: ms / math.Sqrt(0.5), 99: ms / math.Sqrt(0.01)}},
	} {
		r := rand.New(rand.NewPCG(1, 0))
		xs := make([]float64, n)
		for i := range xs {
			xs[i] = float64(tc.d.sample(r))
		}
		slices.Sort(xs)
		for p, want := range tc.pcts {
			got := xs[int(p/100*n)]
			if math.Abs(got-want) > 0.05*want {
				t.Errorf("%s p%v = %.0f ns, want %.0f ± 5 %%", tc.name, p, got, want)
			}
		}
	}
	a, b := rand.New(rand.NewPCG(9, 1)), rand.New(rand.NewPCG(9, 1))
	d := dist{kind: "lognormal", a: float64(time.Millisecond), s: 1}
	for range 100 {
		if d.sample(a) != d.sample(b) {
			t.Fatal("the same seed gave different draws")
		}
	}
}

// BenchmarkInjectHotPath: the per-command cost of fault injection on the
// in-memory pair (GET round trips of key:a, hash slot 244): off (no rule
// file: one branch), and with a rule file whose rules do not touch GET
// (each request is matched against every rule: a command scope, a key
// glob, a slot range, a shard, clients by address and name, the write
// flag and a window not yet open).
func BenchmarkInjectHotPath(b *testing.B) {
	miss, err := ParseInjection("rules.yaml", []byte(`rules:
- name: slow-set
  commands: [SET]
  delay: 1ms
- name: hot
  keys: "hot:*"
  error: "ERR injected"
- name: other-slots
  slots: [245, 16383]
  error: "ERR injected"
- name: other-shard
  shards: ["10.0.0.1:6379"]
  error: "ERR injected"
- name: other-clients
  clients: [{addr: 10.0.0.0/8}, {addr: "192.168.*"}, {name: "worker-*"}]
  error: "ERR injected"
- name: writes
  write: true
  error: "ERR injected"
- name: later
  at: 1h
  error: "ERR injected"
`))
	if err != nil {
		b.Fatal(err)
	}
	for _, bc := range []struct {
		name string
		in   *Injection
	}{{"off", nil}, {"rules-miss", miss}} {
		b.Run(bc.name, func(b *testing.B) {
			s, cl, up := memPair(b, Config{Listen: "127.0.0.1:0", Upstream: "127.0.0.1:1", Measure: true, Inject: bc.in}, nil)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				roundTrip(s, cl, up, getReq, getReply)
			}
		})
	}
}

// TestInjectHDRLog: a delay drawn from a recorded HdrHistogram interval
// log (delay: {hdr_log: FILE}) gives back the log's own p50 and p99 within
// 5 % over 20,000 draws: a bimodal GET upstream (80 % lognormal around
// 400 µs, 20 % around 6 ms) written by respmeter's own log writer
// (metrics/hdrlog, microseconds, two tags, several intervals), and a
// Pareto tail written untagged in nanoseconds by hdrhistogram-go's
// HistogramLogWriter. A draw does not allocate. A bad delay is refused
// with the rule file's line: no such file, not a log, a tag the log lacks,
// a log of several tags without tag:, a unit it does not know.
func TestInjectHDRLog(t *testing.T) {
	dir := t.TempDir()
	src := rand.New(rand.NewPCG(7, 7))
	// respmeter's log: get.upstream (drawn from) and get.total (not).
	var buf bytes.Buffer
	w, err := hdrlog.NewWriter(&buf, time.Unix(1_700_000_000, 0))
	if err != nil {
		t.Fatal(err)
	}
	for iv := range 5 {
		up, tot := hdrhistogram.New(1, 3_600_000_000, 3), hdrhistogram.New(1, 3_600_000_000, 3)
		for range 20_000 {
			us := 400 * math.Exp(0.4*src.NormFloat64())
			if src.Float64() < 0.2 {
				us = 6000 * math.Exp(0.2*src.NormFloat64())
			}
			_ = up.RecordValue(int64(math.Ceil(us)))
			_ = tot.RecordValue(int64(math.Ceil(us)) + 50)
		}
		start := time.Unix(1_700_000_000+int64(iv), 0)
		for tag, h := range map[string]*hdrhistogram.Histogram{"get.upstream": up, "get.total": tot} {
			if err := w.WriteInterval(start, start.Add(time.Second), tag, h); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "run.hlog"), buf.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	// hdrhistogram-go's own writer, untagged, nanoseconds.
	buf.Reset()
	lw := hdrhistogram.NewHistogramLogWriter(&buf)
	if err := errors.Join(lw.OutputLogFormatVersion(), lw.OutputLegend()); err != nil {
		t.Fatal(err)
	}
	ns := hdrhistogram.New(1, int64(time.Hour), 3)
	for range 50_000 {
		_ = ns.RecordValue(int64(200_000 / math.Pow(1-src.Float64(), 1/1.5))) // Pareto: 200 µs, α 1.5
	}
	if err := lw.OutputIntervalHistogram(ns); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "go.hlog"), buf.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}

	rules := filepath.Join(dir, "rules.yaml")
	in, err := ParseInjection(rules, []byte(`rules:
- name: replay
  commands: [GET]
  delay: {hdr_log: run.hlog, tag: get.upstream}
- name: go-tail
  commands: [SET]
  reply_delay: {hdr_log: `+filepath.Join(dir, "go.hlog")+`, unit: ns}
`))
	if err != nil {
		t.Fatal(err)
	}
	logs := map[string]*hdrhistogram.Histogram{}
	for name, f := range map[string]string{"replay": "run.hlog", "go-tail": "go.hlog"} {
		fh, err := os.Open(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		lg, err := hdrlog.Load(fh)
		fh.Close()
		if err != nil {
			t.Fatal(err)
		}
		if name == "replay" {
			logs[name] = lg.Histogram("get.upstream")
		} else {
			logs[name] = lg.Histogram(hdrlog.Untagged)
		}
	}
	r := rand.New(rand.NewPCG(1, 2))
	for i, unit := range []int64{1000, 1} { // replay: µs, go-tail: ns
		ru := in.rules[i]
		got := hdrhistogram.New(1, int64(time.Hour), 3)
		for range 20_000 {
			// Recorded as respmeter records them: whole µs rounded up
			// (the replay log's unit), or the nanoseconds as drawn.
			d := ru.delay.sample(r)
			_ = got.RecordValue((d + unit - 1) / unit)
		}
		for _, p := range []float64{50, 99} {
			want, have := logs[ru.name].ValueAtQuantile(p), got.ValueAtQuantile(p)
			t.Logf("%s p%v: drawn %d, the log's %d (unit %d ns)", ru.name, p, have, want, unit)
			if math.Abs(float64(have-want)) > 0.05*float64(want) {
				t.Errorf("%s p%v = %d, the log's %d: not within 5 %%", ru.name, p, have, want)
			}
		}
		if a := testing.AllocsPerRun(100, func() { ru.delay.sample(r) }); a != 0 {
			t.Errorf("%s: a draw allocates %v times", ru.name, a)
		}
	}

	if err := os.WriteFile(filepath.Join(dir, "not.hlog"), []byte("secret=hunter2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ delay, want string }{
		{"{hdr_log: none.hlog}", `rules.yaml:3: rules[0]: hdr_log: open ` + filepath.Join(dir, "none.hlog")},
		{"{hdr_log: not.hlog}", `rules.yaml:3: rules[0]: hdr_log: ` + filepath.Join(dir, "not.hlog") + `: not an HdrHistogram interval log`},
		{"{hdr_log: run.hlog}", `rules.yaml:3: rules[0]: hdr_log: ` + filepath.Join(dir, "run.hlog") + ` has 2 tags ("get.total", "get.upstream"): name one with tag:`},
		{"{hdr_log: run.hlog, tag: set.total}", `rules.yaml:3: rules[0]: tag: ` + filepath.Join(dir, "run.hlog") + ` has no tag "set.total"`},
		{"{hdr_log: go.hlog, unit: s}", `rules.yaml:3: rules[0]: unit: want us, ns or ms, got "s"`},
		{"{hdr_log: go.hlog, median: 1ms}", `rules.yaml:3: rules[0]: delay: unknown key "median" for hdr_log`},
	} {
		_, err := ParseInjection(rules, []byte("rules:\n- name: x\n  delay: "+tc.delay+"\n"))
		if want := rules + strings.TrimPrefix(tc.want, "rules.yaml"); err == nil || !strings.HasPrefix(err.Error(), want) {
			t.Errorf("delay %s: error %v, want %s", tc.delay, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), "hunter2") {
			t.Errorf("delay %s: the error quotes the file: %v", tc.delay, err)
		}
	}
}

// TestInjectScenarioExample: configs/inject-scenario.yaml, the example
// scenario the docs point to, loads, and its steps have the windows and
// effects its comment describes.
func TestInjectScenarioExample(t *testing.T) {
	in, err := LoadInjection("../configs/inject-scenario.yaml")
	if err != nil {
		t.Fatal(err)
	}
	type step struct {
		rule, effect string
		at, dur      time.Duration
	}
	want := []step{
		{"far-zone", "delay", 10 * time.Second, 20 * time.Second},
		{"busy-shard", "error", 30 * time.Second, 2 * time.Second},
		{"read-tail", "delay", 32 * time.Second, 8 * time.Second},
	}
	var got []step
	for _, r := range in.rules {
		got = append(got, step{r.name, r.effect.String(), time.Duration(r.at), time.Duration(r.dur)})
	}
	if !slices.Equal(got, want) {
		t.Errorf("steps %+v, want %+v", got, want)
	}
	// Applied at 0: nothing before 10 s, the far zone from 10 s to 30 s,
	// nothing from 40 s.
	for _, tc := range []struct {
		at     time.Duration
		active []bool
	}{
		{0, []bool{false, false, false}},
		{10 * time.Second, []bool{true, false, false}},
		{30*time.Second - 1, []bool{true, false, false}},
		{31 * time.Second, []bool{false, true, false}},
		{39 * time.Second, []bool{false, false, true}},
		{40 * time.Second, []bool{false, false, false}},
	} {
		for i, r := range in.rules {
			if a := r.inWindow(int64(tc.at)); a != tc.active[i] {
				t.Errorf("at %v: %s active %v, want %v", tc.at, r.name, a, tc.active[i])
			}
		}
	}
}

// TestInjectWindowPlace: a rule's window counts from when its rules are
// applied (apply); a rule without at: or for: is in force from then to the
// end; Counts gives the window on the wall clock.
func TestInjectWindowPlace(t *testing.T) {
	in, err := ParseInjection("rules.yaml", []byte("rules:\n- name: always\n  delay: 1ms\n- name: later\n  at: 10s\n  delay: 1ms\n- name: first\n  for: 1s\n  delay: 1ms\n- name: step\n  at: 10s\n  for: 2s\n  delay: 1ms\n"))
	if err != nil {
		t.Fatal(err)
	}
	base := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	const applied = int64(5 * time.Second)
	in.apply(base, applied)
	s := int64(time.Second)
	for _, tc := range []struct {
		now    int64
		active [4]bool
	}{
		{0, [4]bool{false, false, false, false}},     // before it was applied
		{applied, [4]bool{true, false, true, false}}, // applied
		{applied + s - 1, [4]bool{true, false, true, false}},
		{applied + s, [4]bool{true, false, false, false}},  // first's second is over
		{applied + 10*s, [4]bool{true, true, false, true}}, // step begins
		{applied + 12*s - 1, [4]bool{true, true, false, true}},
		{applied + 12*s, [4]bool{true, true, false, false}},
		{math.MaxInt64, [4]bool{true, true, false, false}},
	} {
		for i, r := range in.rules {
			if a := r.inWindow(tc.now); a != tc.active[i] {
				t.Errorf("%v after the proxy's start: %s active %v, want %v", time.Duration(tc.now), r.name, a, tc.active[i])
			}
		}
	}
	cs := in.Counts()
	if cs[0].Window != nil {
		t.Errorf("always: window %+v, want none", cs[0].Window)
	}
	if w := cs[3].Window; w == nil || w.At != 10 || w.For != 2 || !w.Start.Equal(base.Add(15*time.Second)) || w.End == nil || !w.End.Equal(base.Add(17*time.Second)) {
		t.Errorf("step: window %+v, want 10 s + 2 s from 5 s after %v", w, base)
	}
	if w := cs[1].Window; w == nil || w.End != nil || w.For != 0 {
		t.Errorf("later: window %+v, want no end", w)
	}
	// base is long past: "first" and "step" are over.
	if got := [4]bool{cs[0].Active, cs[1].Active, cs[2].Active, cs[3].Active}; got != [4]bool{true, true, false, false} {
		t.Errorf("Counts now, long after base: active %v, want [true true false false]", got)
	}
}
