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
