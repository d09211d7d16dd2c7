package metrics_test

import (
	"bytes"
	"math"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"

	"github.com/respmeter/respmeter/metrics"
)

// newRegistry returns a pedantic registry (it checks Describe against Collect)
// with s registered.
func newRegistry(t *testing.T, s *metrics.Set) *prometheus.Registry {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	if err := s.Register(reg); err != nil {
		t.Fatal(err)
	}
	return reg
}

// findMetric returns the series of family name whose labels include labels.
func findMetric(t *testing.T, reg prometheus.Gatherer, name string, labels map[string]string) *dto.Metric {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if v, ok := labels[lp.GetName()]; ok && v != lp.GetValue() {
					continue next
				}
			}
			return m
		}
	}
	t.Fatalf("no series %s%v", name, labels)
	return nil
}

// nativeCounts decodes a histogram's positive native buckets to key -> count.
func nativeCounts(h *dto.Histogram) map[int]uint64 {
	out := make(map[int]uint64)
	deltas := h.GetPositiveDelta()
	var key, d int
	var count int64
	for _, sp := range h.GetPositiveSpan() {
		key += int(sp.GetOffset()) // the first offset is absolute: key starts at 0
		for range sp.GetLength() {
			count += deltas[d]
			d++
			if count != 0 {
				out[key] = uint64(count)
			}
			key++
		}
	}
	return out
}

func TestDurationHistogram(t *testing.T) {
	s := metrics.NewSet(2, testNames)
	record(s,
		op{loop: 0, cmd: cmdGet, total: 100 * us, upstream: 100 * us},
		op{loop: 1, cmd: cmdGet, total: time.Millisecond, upstream: time.Millisecond},
		op{loop: 0, cmd: cmdGet, total: 2 * time.Second, upstream: 2 * time.Second},
	)
	reg := newRegistry(t, s)

	// Classic buckets count each value at its HdrHistogram highest equivalent
	// value: 100 µs and 1 ms exactly, 2 s as 2.000895 s. Native keys k hold
	// (2^((k-1)/8), 2^(k/8)] seconds.
	threeValues := struct {
		sum     float64
		classic map[float64]uint64
		native  map[int]uint64
	}{
		sum: 2.0011,
		classic: map[float64]uint64{
			0.000001: 0, 0.00001: 0, 0.00005: 0, 0.0001: 1, 0.00025: 1, 0.0005: 1,
			0.001: 2, 0.0025: 2, 0.5: 2, 1: 2, 2.5: 3, 5: 3, 10: 3,
		},
		native: map[int]uint64{-106: 1, -79: 1, 9: 1},
	}
	tests := []struct {
		phase   metrics.Phase
		sum     float64
		classic map[float64]uint64 // le -> cumulative count
		native  map[int]uint64     // key -> count
	}{
		{metrics.PhaseTotal, threeValues.sum, threeValues.classic, threeValues.native},
		{metrics.PhaseUpstream, threeValues.sum, threeValues.classic, threeValues.native},
		{metrics.PhaseProxy, 0, map[float64]uint64{0.000001: 3, 10: 3}, map[int]uint64{-159: 3}}, // 3 × 0 s, recorded as 1 µs: the first bucket
	}
	for _, tc := range tests {
		t.Run(tc.phase.String(), func(t *testing.T) {
			h := findMetric(t, reg, "respmeter_command_duration_seconds",
				map[string]string{"command": "get", "phase": tc.phase.String()}).GetHistogram()
			if h.GetSampleCount() != 3 {
				t.Errorf("count %d, want 3", h.GetSampleCount())
			}
			if math.Abs(h.GetSampleSum()-tc.sum) > 1e-12 {
				t.Errorf("sum %g, want %g", h.GetSampleSum(), tc.sum)
			}
			if n := len(h.GetBucket()); n != 25 {
				t.Errorf("%d classic buckets, want 25 (1us..10s)", n)
			}
			seen := 0
			for _, b := range h.GetBucket() {
				if want, ok := tc.classic[b.GetUpperBound()]; ok {
					seen++
					if b.GetCumulativeCount() != want {
						t.Errorf("le=%g: %d, want %d", b.GetUpperBound(), b.GetCumulativeCount(), want)
					}
				}
			}
			if seen != len(tc.classic) {
				t.Errorf("found %d of the %d expected classic bounds", seen, len(tc.classic))
			}

			if h.GetSchema() != 3 || h.GetZeroCount() != 0 || h.GetZeroThreshold() <= 0 {
				t.Errorf("schema %d zero count %d threshold %g, want 3, 0, > 0", h.GetSchema(), h.GetZeroCount(), h.GetZeroThreshold())
			}
			got := nativeCounts(h)
			var total uint64
			for k, n := range got {
				total += n
				if got[k] != tc.native[k] {
					t.Errorf("native bucket %d: %d, want %d", k, n, tc.native[k])
				}
			}
			if total+h.GetZeroCount() != h.GetSampleCount() {
				t.Errorf("native buckets hold %d, want the sample count %d", total, h.GetSampleCount())
			}
			if len(got) != len(tc.native) {
				t.Errorf("native buckets %v, want %v", got, tc.native)
			}
		})
	}
}

func TestOnlyObservedSeries(t *testing.T) {
	s := metrics.NewSet(2, testNames)
	record(s,
		op{loop: 0, cmd: cmdGet, total: 100 * us},
		op{loop: 1, cmd: cmdSet, untimed: true, isErr: true},
	)
	reg := newRegistry(t, s)
	for _, tc := range []struct {
		name string
		want int
	}{
		{"respmeter_command_duration_seconds", 5}, // get × 5 phases; set was never timed
		{"respmeter_commands_total", 2},
		{"respmeter_command_errors_total", 2},
		{"respmeter_think_duration_seconds", 1},
		{"respmeter_client_connections_open", 1},
		{"respmeter_client_evictions_total", 3}, // every reason, even at 0
		{"respmeter_redirects_total", 3},        // moved, ask and tryagain, even at 0
		{"respmeter_handoffs_total", 6},         // every reason, even at 0
		{"respmeter_topology_events_total", 3},  // every kind, even at 0
		{"respmeter_redirect_penalty_seconds", 1},
		{"respmeter_reorder_wait_seconds", 1},
		// No shard registered: no shard series at all.
		{"respmeter_shard_commands_total", 0},
		{"respmeter_shard_command_errors_total", 0},
		{"respmeter_shard_command_duration_seconds", 0},
		{"respmeter_upstream_batch_commands", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got, err := testutil.GatherAndCount(reg, tc.name); err != nil || got != tc.want {
				t.Errorf("GatherAndCount = %d, %v; want %d", got, err, tc.want)
			}
		})
	}
	// 11 counters and gauges, 3 evictions; routing: 3 redirects, the
	// penalty histogram, misroutes, crossslot, 6 handoffs, the reorder
	// wait histogram, shared stalls and 3 topology event kinds.
	const want = 5 + 2 + 2 + 1 + 11 + 3 + 3 + 1 + 1 + 1 + 6 + 1 + 1 + 3
	if n := testutil.CollectAndCount(collectorOf(t, s)); n != want {
		t.Errorf("CollectAndCount = %d, want %d", n, want)
	}
	errs := findMetric(t, reg, "respmeter_command_errors_total", map[string]string{"command": "set"})
	if v := errs.GetCounter().GetValue(); v != 1 {
		t.Errorf("set errors = %g, want 1", v)
	}
}

// collectorOf returns the Collector that s.Register registers.
func collectorOf(t *testing.T, s *metrics.Set) prometheus.Collector {
	t.Helper()
	var rec recordingRegisterer
	if err := s.Register(&rec); err != nil {
		t.Fatal(err)
	}
	if len(rec.cs) != 1 {
		t.Fatalf("Register registered %d collectors, want 1", len(rec.cs))
	}
	return rec.cs[0]
}

type recordingRegisterer struct{ cs []prometheus.Collector }

func (r *recordingRegisterer) Register(c prometheus.Collector) error {
	r.cs = append(r.cs, c)
	return nil
}
func (r *recordingRegisterer) MustRegister(cs ...prometheus.Collector) { r.cs = append(r.cs, cs...) }
func (r *recordingRegisterer) Unregister(prometheus.Collector) bool    { return false }

// populated returns a Set with every metric holding known values.
func populated() *metrics.Set {
	s := metrics.NewSet(2, testNames)
	record(s,
		op{loop: 0, cmd: cmdGet, total: 120 * us, upstream: 80 * us},
		op{loop: 1, cmd: cmdGet, total: 480 * us, upstream: 400 * us},
		op{loop: 0, cmd: cmdGet, total: 3 * time.Millisecond, upstream: 2 * time.Millisecond, isErr: true},
		op{loop: 1, cmd: cmdSet, total: 75 * time.Millisecond, upstream: 70 * time.Millisecond},
		op{loop: 0, cmd: cmdPing, untimed: true},
		op{loop: 1, cmd: 42, total: 30 * us, upstream: 10 * us, isErr: true},
	)
	for i, d := range []time.Duration{time.Millisecond, 20 * time.Millisecond} {
		l := s.Loop(i)
		l.Lock()
		l.ThinkLocked(d)
		l.Unlock()
	}
	a, b := s.Shard("127.0.0.1:7001"), s.Shard("127.0.0.1:7002")
	s.Shard("127.0.0.1:7003") // registered, never used
	l0, l1 := s.Loop(0), s.Loop(1)
	l0.Lock()
	l0.ShardObserveLocked(a, 120*us, 80*us, 80*us, false)
	l0.ShardBatchLocked(a, 1)
	l0.ShardObserveLocked(b, 3*time.Millisecond, 2*time.Millisecond, time.Millisecond, true)
	l0.ShardCountLocked(b, false)
	l0.ShardBatchLocked(b, 2)
	l0.Unlock()
	l1.Lock()
	l1.ShardObserveLocked(a, 480*us, 400*us, 300*us, false)
	l1.ShardBatchLocked(a, 3)
	l1.RedirectPenaltyLocked(1500 * us)
	l1.Unlock()
	s.Redirect(false)
	s.Redirect(true)
	s.PinnedMisroute()
	s.CrossSlot()
	s.Handoff("pubsub")
	s.Handoff("transaction")
	s.ClientOpened()
	s.ClientOpened()
	s.ClientClosed()
	s.UpstreamOpened()
	s.UpstreamDialFailed()
	s.UpstreamLost()
	s.ProtocolError()
	s.ClientRejected()
	s.ClientEvicted(metrics.EvictQueryLimit)
	s.Loop(0).AddClientBytes(100, 200)
	s.Loop(1).AddUpstreamBytes(150, 90)
	return s
}

func TestPromlint(t *testing.T) {
	reg := newRegistry(t, populated())
	problems, err := testutil.GatherAndLint(reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("promlint: %s: %s", p.Metric, p.Text)
	}
}

func TestExpositionGolden(t *testing.T) {
	golden(t, "metrics.txt", exposition(t, newRegistry(t, populated())))
}

// exposition gathers g and encodes it as Prometheus text, what /metrics
// serves (testutil.GatherAndFormat with no metric names selects none).
func exposition(tb testing.TB, g prometheus.Gatherer) []byte {
	tb.Helper()
	mfs, err := g.Gather()
	if err != nil {
		tb.Fatal(err)
	}
	var buf bytes.Buffer
	enc := expfmt.NewEncoder(&buf, expfmt.NewFormat(expfmt.TypeTextPlain))
	for _, mf := range mfs {
		if err := enc.Encode(mf); err != nil {
			tb.Fatal(err)
		}
	}
	return buf.Bytes()
}

func TestRegisterTwice(t *testing.T) {
	s := metrics.NewSet(1, testNames)
	reg := newRegistry(t, s)
	if err := s.Register(reg); err == nil {
		t.Error("second Register with the same registry succeeded")
	}
}

// TestExportBudget: with MaxCommands 1 and Phases {total}, the first
// command seen keeps its label for good, later ones are added (counts,
// errors, durations) to command="other" together with the unknown
// commands, and only the total phase is exported.
func TestExportBudget(t *testing.T) {
	s := metrics.NewSet(2, testNames)
	record(s,
		op{loop: 0, cmd: cmdSet, total: 100 * us, upstream: 90 * us},
		op{loop: 1, cmd: cmdOther, total: 3 * time.Millisecond, upstream: 2 * time.Millisecond, isErr: true},
	)
	reg := prometheus.NewPedanticRegistry()
	if err := s.RegisterExport(reg, metrics.Export{Phases: []metrics.Phase{metrics.PhaseTotal}, MaxCommands: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := reg.Gather(); err != nil { // the first scrape admits set
		t.Fatal(err)
	}
	// get and ping arrive after the cap is reached: both go to "other",
	// while set, admitted first, keeps its label (and gets new values).
	record(s,
		op{loop: 0, cmd: cmdGet, total: time.Millisecond, upstream: time.Millisecond},
		op{loop: 1, cmd: cmdPing, total: 2 * time.Second, upstream: 2 * time.Second, isErr: true},
		op{loop: 1, cmd: cmdSet, total: 200 * us, upstream: 150 * us},
	)
	if got, err := testutil.GatherAndCount(reg, "respmeter_command_duration_seconds"); err != nil || got != 2 {
		t.Errorf("duration series: %d, %v; want 2 (set and other, total phase only)", got, err)
	}
	for cmd, want := range map[string]struct {
		count, errs float64
		sum         float64 // seconds, total phase
	}{
		"set":   {2, 0, 300e-6},
		"other": {3, 2, 3e-3 + 1e-3 + 2},
	} {
		if got := findMetric(t, reg, "respmeter_commands_total", map[string]string{"command": cmd}).GetCounter().GetValue(); got != want.count {
			t.Errorf("%s: %g commands, want %g", cmd, got, want.count)
		}
		if got := findMetric(t, reg, "respmeter_command_errors_total", map[string]string{"command": cmd}).GetCounter().GetValue(); got != want.errs {
			t.Errorf("%s: %g errors, want %g", cmd, got, want.errs)
		}
		h := findMetric(t, reg, "respmeter_command_duration_seconds", map[string]string{"command": cmd, "phase": "total"}).GetHistogram()
		if h.GetSampleCount() != uint64(want.count) || math.Abs(h.GetSampleSum()-want.sum) > 1e-9 {
			t.Errorf("%s total: count %d sum %g, want %g, %g", cmd, h.GetSampleCount(), h.GetSampleSum(), want.count, want.sum)
		}
		var native uint64
		for _, n := range nativeCounts(h) {
			native += n
		}
		if native != uint64(want.count) {
			t.Errorf("%s total: %d values in native buckets, want %g", cmd, native, want.count)
		}
	}
	// A scrape adds nothing twice: the scratch "other" starts afresh.
	h := findMetric(t, reg, "respmeter_command_duration_seconds", map[string]string{"command": "other", "phase": "total"}).GetHistogram()
	if h.GetSampleCount() != 3 {
		t.Errorf("other after another scrape: count %d, want 3", h.GetSampleCount())
	}
	if problems, err := testutil.GatherAndLint(reg); err != nil || len(problems) > 0 {
		t.Errorf("promlint: %v %v", problems, err)
	}
}
