package engine

import (
	"bufio"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/respmeter/respmeter/internal/respconn"
)

// The files testdata/redis-7.0.15-*.resp are raw RESP2 replies captured from
// redis-server 7.0.15 (-1 after CLIENT SETNAME, 4 SET, 3 GET, 2 DEBUG SLEEP
// 0.005; -2 after CONFIG RESETSTAT and 1 GET).

func readCaptured(t *testing.T, name string) respconn.Value {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	v, err := respconn.Read(bufio.NewReader(strings.NewReader(string(b))))
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return v
}

// Dragonfly-style replies, written by hand after Dragonfly's documented
// behaviour (not captured): LATENCY HISTOGRAM answers an empty array, INFO
// latencystats has the Redis line format, command names may be upper case.
var (
	dragonflyHistogram = "*0\r\n"
	dragonflyLatency   = "# Latencystats\r\n" +
		"latency_percentiles_usec_GET:p50=11.5,p99=40.1,p99.9=120\r\n" +
		"latency_percentiles_usec_set:p50=15,p99=50\r\n"
	dragonflyCommands = "# Commandstats\r\n" +
		"cmdstat_GET:calls=100,usec=1500,usec_per_call=15\r\n" +
		"cmdstat_set:calls=40,usec=800,usec_per_call=20\r\n"
)

func TestParseLatencyHistogramCaptured(t *testing.T) {
	got, err := parseLatencyHistogram(readCaptured(t, "redis-7.0.15-latency-histogram-1.resp"))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]cmdHist{
		"get":            {calls: 3, buckets: map[int64]int64{8: 2, 16: 1}},
		"debug":          {calls: 2, buckets: map[int64]int64{8454: 2}},
		"set":            {calls: 4, buckets: map[int64]int64{16: 4}},
		"client|setname": {calls: 1, buckets: map[int64]int64{16: 1}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v\nwant %+v", got, want)
	}
}

func TestParseLatencyHistogramBad(t *testing.T) {
	entry := func(calls int64, cum ...int64) respconn.Value {
		var e []respconn.Value
		for _, c := range cum {
			e = append(e, num(c))
		}
		return arr(bulk("calls"), num(calls), bulk("histogram_usec"), arr(e...))
	}
	tests := []struct {
		name string
		in   respconn.Value
		want error
	}{
		{"error reply (Redis 6)", respconn.Value{Type: '-', Str: "ERR unknown subcommand 'HISTOGRAM'"}, errReply},
		{"not an array", bulk("x"), errShape},
		{"odd array", arr(bulk("get")), errShape},
		{"entry not array", arr(bulk("get"), num(1)), errShape},
		{"no histogram", arr(bulk("get"), arr(bulk("calls"), num(1))), errShape},
		{"no calls", arr(bulk("get"), arr(bulk("histogram_usec"), arr())), errShape},
		{"descending bounds", arr(bulk("get"), entry(2, 16, 1, 8, 2)), errShape},
		{"descending counts", arr(bulk("get"), entry(2, 8, 2, 16, 1)), errShape},
		{"odd buckets", arr(bulk("get"), entry(2, 8)), errShape},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := parseLatencyHistogram(tt.in); !errors.Is(err, tt.want) {
				t.Errorf("err = %v, want %v", err, tt.want)
			}
		})
	}
	// Keys are matched by name, and unknown keys are ignored.
	v := arr(bulk("get"), arr(bulk("histogram_usec"), arr(num(4), num(3)), bulk("new_field"), num(7), bulk("calls"), num(3)))
	got, err := parseLatencyHistogram(v)
	if err != nil || got["get"].calls != 3 || got["get"].buckets[4] != 3 {
		t.Errorf("reordered keys: %+v, %v", got, err)
	}
}

func TestParseCommandStatsCaptured(t *testing.T) {
	text, err := infoText(readCaptured(t, "redis-7.0.15-commandstats-1.resp"))
	if err != nil {
		t.Fatal(err)
	}
	got, err := parseCommandStats(text)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]cmdStat{
		"get":               {calls: 3, usec: 26},
		"latency|histogram": {calls: 1, usec: 181},
		"debug":             {calls: 2, usec: 10289},
		"set":               {calls: 4, usec: 51},
		"client|setname":    {calls: 1, usec: 10},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v\nwant %+v", got, want)
	}
	for _, bad := range []string{
		"cmdstat_get:usec=1\r\n",
		"cmdstat_get:calls=-1,usec=1\r\n",
		"cmdstat_get:calls=1,usec=1.5\r\n",
		"cmdstat_:calls=1,usec=1\r\n",
		"cmdstat_get\r\n",
	} {
		if _, err := parseCommandStats(bad); !errors.Is(err, errShape) {
			t.Errorf("%q: err = %v, want errShape", bad, err)
		}
	}
	if _, err := infoText(respconn.Value{Type: '-', Str: "NOAUTH Authentication required."}); !errors.Is(err, errReply) {
		t.Errorf("error reply: %v", err)
	}
}

func TestParseLatencyStats(t *testing.T) {
	text, err := infoText(readCaptured(t, "redis-7.0.15-latencystats-1.resp"))
	if err != nil {
		t.Fatal(err)
	}
	got, err := parseLatencyStats(text)
	if err != nil {
		t.Fatal(err)
	}
	us := func(f float64) time.Duration { return time.Duration(f * float64(time.Microsecond)) }
	if d := got["debug"]; d != (latencyPct{p50: us(5144.575), p99: us(5177.343), p999: us(5177.343)}) {
		t.Errorf("debug = %+v", d)
	}
	if len(got) != 6 {
		t.Errorf("got %d commands, want 6: %v", len(got), got)
	}
	df, err := parseLatencyStats(dragonflyLatency)
	if err != nil {
		t.Fatal(err)
	}
	if df["GET"].p99 != us(40.1) || df["set"].p999 != 0 {
		t.Errorf("dragonfly = %+v", df)
	}
	if _, err := parseLatencyStats("latency_percentiles_usec_get:p50=abc\r\n"); !errors.Is(err, errShape) {
		t.Errorf("bad float: %v", err)
	}
}

func TestContainerName(t *testing.T) {
	for in, want := range map[string]string{
		"get": "get", "GET": "get", "client|setname": "client", "CONFIG|RESETSTAT": "config", "": "",
	} {
		if got := containerName(in); got != want {
			t.Errorf("containerName(%q) = %q, want %q", in, got, want)
		}
	}
}

var testNames = []string{"other", "get", "set", "debug", "client", "latency", "info", "ping"}

// applyCaptured applies captured poll n (1 or 2) to p.
func applyCaptured(t *testing.T, p *Poller, n int, at time.Time) {
	t.Helper()
	sfx := strconv.Itoa(n) + ".resp"
	hist, err := parseLatencyHistogram(readCaptured(t, "redis-7.0.15-latency-histogram-"+sfx))
	if err != nil {
		t.Fatal(err)
	}
	text, err := infoText(readCaptured(t, "redis-7.0.15-commandstats-"+sfx))
	if err != nil {
		t.Fatal(err)
	}
	stat, err := parseCommandStats(text)
	if err != nil {
		t.Fatal(err)
	}
	p.apply(at, hist, true, stat, nil)
}

// TestApplyResetstat applies the two captured polls: the second follows
// CONFIG RESETSTAT, so every counter went backwards and counts from zero.
func TestApplyResetstat(t *testing.T) {
	p := NewPoller("test:0", time.Second, testNames, nil)
	t0 := time.Unix(1000, 0)
	applyCaptured(t, p, 1, t0) // baseline
	if tot := p.Totals(); tot != (Totals{}) {
		t.Errorf("totals after baseline = %+v, want zero", tot)
	}
	if _, _, ok := p.EngineMean("get"); ok {
		t.Error("EngineMean ok after the baseline poll alone")
	}
	applyCaptured(t, p, 2, t0.Add(5*time.Second))
	if got := p.LastInterval(); got != 5*time.Second {
		t.Errorf("LastInterval = %v", got)
	}
	if mean, calls, ok := p.EngineMean("GET"); !ok || calls != 1 || mean != 8*time.Microsecond {
		t.Errorf("EngineMean(get) = %v, %d, %v; want 8µs, 1, true", mean, calls, ok)
	}
	// latency|histogram: calls 1 -> 1 but usec 181 -> 155: a reset too.
	if mean, calls, ok := p.EngineMean("latency"); !ok || calls != 1 || mean != 155*time.Microsecond {
		t.Errorf("EngineMean(latency) = %v, %d, %v; want 155µs, 1, true", mean, calls, ok)
	}
	// config is not a label: counted as other.
	if _, calls, ok := p.EngineMean("other"); !ok || calls != 1 {
		t.Errorf("EngineMean(other) calls = %d, %v", calls, ok)
	}
	if _, _, ok := p.EngineMean("config"); ok {
		t.Error("EngineMean(config) ok for a name outside the label set")
	}
	if got, want := p.Totals(), (Totals{Calls: 3, Time: 252 * time.Microsecond, LastCalls: 3, LastTime: 252 * time.Microsecond}); got != want {
		t.Errorf("Totals = %+v, want %+v", got, want)
	}
	if got := p.Sources(); !slices.Equal(got, []string{SourceLatencyHistogram, SourceCommandStats}) {
		t.Errorf("Sources = %v", got)
	}

	st := p.Stats()
	byName := map[string]CommandStats{}
	for _, c := range st.Commands {
		byName[c.Command] = c
	}
	if g := byName["get"]; g.Calls != 1 || g.P50 != 8*time.Microsecond || g.PctSource != SourceLatencyHistogram {
		t.Errorf("stats get = %+v", g)
	}
	if _, ok := byName["debug"]; ok {
		t.Error("debug had no calls since the baseline but is listed")
	}

	// The Prometheus histogram holds the post-reset calls only.
	h := gatherHistogram(t, p, "respmeter_engine_command_duration_seconds", "other")
	if h.GetSampleCount() != 1 || cumulativeAt(h, 132e-6) != 1 || cumulativeAt(h, 66e-6) != 0 {
		t.Errorf("other histogram = %v", h)
	}
}

// TestApplyGrowth checks plain deltas, histogram bucket deltas and bucket
// bounds shared by all commands.
func TestApplyGrowth(t *testing.T) {
	p := NewPoller("test:0", time.Second, testNames, nil)
	hist := func(calls int64, b map[int64]int64) cmdHist { return cmdHist{calls: calls, buckets: b} }
	t0 := time.Unix(1000, 0)
	p.apply(t0, map[string]cmdHist{"get": hist(10, map[int64]int64{8: 10})}, true,
		map[string]cmdStat{"get": {10, 50}}, nil)
	p.apply(t0.Add(time.Second), map[string]cmdHist{
		"get": hist(15, map[int64]int64{8: 12, 16: 3}),
		"set": hist(2, map[int64]int64{33: 2}),
	}, true, map[string]cmdStat{"get": {15, 80}, "set": {2, 40}}, nil)
	if mean, calls, ok := p.EngineMean("get"); !ok || calls != 5 || mean != 6*time.Microsecond {
		t.Errorf("EngineMean(get) = %v, %d, %v", mean, calls, ok)
	}
	h := gatherHistogram(t, p, "respmeter_engine_command_duration_seconds", "get")
	if h.GetSampleCount() != 5 || cumulativeAt(h, 8e-6) != 2 || cumulativeAt(h, 16e-6) != 5 || cumulativeAt(h, 33e-6) != 5 {
		t.Errorf("get histogram = %v", h)
	}
	if h.GetSampleSum() != 30e-6 {
		t.Errorf("get sum = %v, want 30e-6 (commandstats usec)", h.GetSampleSum())
	}
	if len(h.GetBucket()) != 3 {
		t.Errorf("get has %d buckets, want the 3 bounds seen for any command", len(h.GetBucket()))
	}
	// A poll without calls leaves the totals and empties the last interval.
	p.apply(t0.Add(2*time.Second), map[string]cmdHist{
		"get": hist(15, map[int64]int64{8: 12, 16: 3}),
		"set": hist(2, map[int64]int64{33: 2}),
	}, true, map[string]cmdStat{"get": {15, 80}, "set": {2, 40}}, nil)
	if _, _, ok := p.EngineMean("get"); ok {
		t.Error("EngineMean ok for an interval without calls")
	}
	if tot := p.Totals(); tot.Calls != 7 || tot.LastCalls != 0 {
		t.Errorf("Totals = %+v", tot)
	}
	// A restarted engine (new run_id): everything it reports is new.
	p.noteRunID("a")
	p.noteRunID("b")
	p.apply(t0.Add(3*time.Second), map[string]cmdHist{"get": hist(20, map[int64]int64{8: 20})}, true,
		map[string]cmdStat{"get": {20, 100}}, nil)
	if _, calls, ok := p.EngineMean("get"); !ok || calls != 20 {
		t.Errorf("after restart EngineMean(get) calls = %d, %v; want 20", calls, ok)
	}
}

// TestApplyDragonfly feeds Dragonfly-style replies: an empty LATENCY
// HISTOGRAM, so latencystats and commandstats are the sources.
func TestApplyDragonfly(t *testing.T) {
	v, err := respconn.Read(bufio.NewReader(strings.NewReader(dragonflyHistogram)))
	if err != nil {
		t.Fatal(err)
	}
	hist, err := parseLatencyHistogram(v)
	if err != nil || len(hist) != 0 {
		t.Fatalf("empty histogram: %v, %v", hist, err)
	}
	lat, err := parseLatencyStats(dragonflyLatency)
	if err != nil {
		t.Fatal(err)
	}
	stat, err := parseCommandStats(dragonflyCommands)
	if err != nil {
		t.Fatal(err)
	}
	p := NewPoller("test:0", time.Second, []string{"get", "set"}, nil) // no "other": added
	p.apply(time.Unix(1, 0), hist, true, stat, lat)
	stat2 := map[string]cmdStat{"GET": {160, 2700}, "set": {40, 800}, "FLUSHALL": {1, 9}}
	p.apply(time.Unix(2, 0), hist, true, stat2, lat)
	if got := p.Sources(); !slices.Equal(got, []string{SourceLatencyStats, SourceCommandStats}) {
		t.Errorf("Sources = %v", got)
	}
	if mean, calls, ok := p.EngineMean("get"); !ok || calls != 60 || mean != 20*time.Microsecond {
		t.Errorf("EngineMean(get) = %v, %d, %v", mean, calls, ok)
	}
	st := p.Stats()
	var get CommandStats
	for _, c := range st.Commands {
		if c.Command == "get" {
			get = c
		}
	}
	if get.PctSource != SourceLatencyStats || get.P50 != 11500*time.Nanosecond || get.P99 != 40100*time.Nanosecond {
		t.Errorf("get stats = %+v", get)
	}
	// No LATENCY HISTOGRAM: counters only, FLUSHALL under "other".
	reg := prometheus.NewPedanticRegistry()
	if err := p.Register(reg); err != nil {
		t.Fatal(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "respmeter_engine_command_duration_seconds" {
			t.Errorf("histogram exported without LATENCY HISTOGRAM: %v", mf)
		}
	}
	if n := testutil.ToFloat64(counterOf(t, reg, "respmeter_engine_commands_total", "other")); n != 1 {
		t.Errorf("commands_total{other} = %v", n)
	}
}

func TestNewPollerNames(t *testing.T) {
	for _, names := range [][]string{{"get", "GET"}, {"get", ""}} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("NewPoller(%q) did not panic", names)
				}
			}()
			NewPoller("x:0", 0, names, nil)
		}()
	}
	p := NewPoller("x:0", 0, nil, nil)
	if p.every != DefaultPollInterval || !slices.Equal(p.labels, []string{"other"}) {
		t.Errorf("defaults: every %v labels %v", p.every, p.labels)
	}
}

func TestPromlintPoller(t *testing.T) {
	p := NewPoller("test:0", time.Second, testNames, nil)
	applyCaptured(t, p, 1, time.Unix(1, 0))
	applyCaptured(t, p, 2, time.Unix(2, 0))
	reg := prometheus.NewPedanticRegistry()
	if err := p.Register(reg); err != nil {
		t.Fatal(err)
	}
	if err := p.Register(reg); err == nil {
		t.Error("second Register succeeded")
	}
	lint(t, reg)
}

func lint(t *testing.T, reg *prometheus.Registry) {
	t.Helper()
	problems, err := testutil.GatherAndLint(reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("promlint: %s: %s", p.Metric, p.Text)
	}
}

// gatherHistogram registers c's collector with a fresh registry and returns
// the histogram of family name with label command=cmd.
func gatherHistogram(t *testing.T, p *Poller, name, cmd string) *dto.Histogram {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	if err := p.Register(reg); err != nil {
		t.Fatal(err)
	}
	m := findMetric(t, reg, name, cmd)
	if m == nil {
		t.Fatalf("no %s{command=%q}", name, cmd)
	}
	return m.GetHistogram()
}

func findMetric(t *testing.T, reg prometheus.Gatherer, name, cmd string) *dto.Metric {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "command" && l.GetValue() == cmd {
					return m
				}
			}
		}
	}
	return nil
}

// counterOf wraps a gathered counter as a prometheus.Collector for
// testutil.ToFloat64.
func counterOf(t *testing.T, reg prometheus.Gatherer, name, cmd string) prometheus.Collector {
	t.Helper()
	m := findMetric(t, reg, name, cmd)
	if m == nil {
		t.Fatalf("no %s{command=%q}", name, cmd)
	}
	return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "x"}, m.GetCounter().GetValue)
}

// cumulativeAt returns the cumulative count of h's bucket with upper bound
// le (seconds), or the one just below it; 0 below the first bucket.
func cumulativeAt(h *dto.Histogram, le float64) uint64 {
	var c uint64
	for _, b := range h.GetBucket() {
		if b.GetUpperBound() > le*(1+1e-9) {
			break
		}
		c = b.GetCumulativeCount()
	}
	return c
}
