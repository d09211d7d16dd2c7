package metrics_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"net/http"
	"net/http/httptest"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/respmeter/respmeter/metrics"
)

const (
	shardA = "127.0.0.1:7001"
	shardB = "127.0.0.1:7002"
)

// Kinds of shardOp.
const (
	opObserve = iota // ShardObserveLocked
	opCount          // ShardCountLocked
	opBatch          // ShardBatchLocked(shard, n)
	opPenalty        // RedirectPenaltyLocked(total)
)

// shardOp is one recording call on a loop.
type shardOp struct {
	kind                     int
	loop, shard              int
	total, upstream, service time.Duration
	isErr                    bool
	n                        int // opBatch
}

// recordShards applies ops, one lock per op.
func recordShards(s *metrics.Set, ops ...shardOp) {
	for _, o := range ops {
		l := s.Loop(o.loop)
		l.Lock()
		switch o.kind {
		case opObserve:
			l.ShardObserveLocked(o.shard, o.total, o.upstream, o.service, o.isErr)
		case opCount:
			l.ShardCountLocked(o.shard, o.isErr)
		case opBatch:
			l.ShardBatchLocked(o.shard, o.n)
		case opPenalty:
			l.RedirectPenaltyLocked(o.total)
		}
		l.Unlock()
	}
}

// batches returns one ShardBatchLocked op per n, on loop for shard.
func batches(loop, shard int, ns ...int) []shardOp {
	var ops []shardOp
	for _, n := range ns {
		ops = append(ops, shardOp{kind: opBatch, loop: loop, shard: shard, n: n})
	}
	return ops
}

func TestShardIndex(t *testing.T) {
	s := metrics.NewSet(1, testNames)
	if got := s.ShardNames(); len(got) != 0 {
		t.Fatalf("ShardNames of a new Set = %q, want none", got)
	}
	a, b := s.Shard(shardA), s.Shard(shardB)
	if a != 0 || b != 1 || s.Shard(shardA) != a || s.Shard(shardB) != b {
		t.Errorf("indexes %d %d (again %d %d), want 0 1, stable", a, b, s.Shard(shardA), s.Shard(shardB))
	}
	names := s.ShardNames()
	if !slices.Equal(names, []string{shardA, shardB}) {
		t.Errorf("ShardNames = %q", names)
	}
	names[0] = "changed" // the caller owns the copy
	if got := s.ShardNames()[0]; got != shardA {
		t.Errorf("ShardNames shares its slice: %q", got)
	}
	// "" and "other" are the overflow label, which takes an index only once
	// used; invalid UTF-8 is replaced.
	o := s.Shard("")
	if o != 2 || s.Shard("other") != o {
		t.Errorf(`Shard("") = %d, Shard("other") = %d; want 2, 2`, o, s.Shard("other"))
	}
	bad := s.Shard("10.0.0.1:\xff")
	if got := s.ShardNames()[bad]; got != "10.0.0.1:\uFFFD" {
		t.Errorf("invalid UTF-8 label = %q", got)
	}
}

func TestShardOverflow(t *testing.T) {
	addr := func(i int) string { return fmt.Sprintf("10.0.%d.%d:7000", i/256, i%256) }
	s := metrics.NewSet(2, testNames)
	for i := range metrics.MaxShards {
		if got := s.Shard(addr(i)); got != i {
			t.Fatalf("Shard(%s) = %d, want %d", addr(i), got, i)
		}
	}
	other := s.Shard(addr(metrics.MaxShards))
	if other != metrics.MaxShards {
		t.Fatalf("first shard beyond MaxShards: index %d, want %d", other, metrics.MaxShards)
	}
	for _, name := range []string{addr(metrics.MaxShards + 1), addr(1000), "other", ""} {
		if got := s.Shard(name); got != other {
			t.Errorf("Shard(%q) = %d, want the other index %d", name, got, other)
		}
	}
	if got := s.Shard(addr(7)); got != 7 { // earlier names keep theirs
		t.Errorf("Shard(%s) after overflow = %d, want 7", addr(7), got)
	}
	names := s.ShardNames()
	if len(names) != metrics.MaxShards+1 || names[other] != "other" || names[3] != addr(3) {
		t.Fatalf("ShardNames: %d names, [%d] = %q, [3] = %q", len(names), other, names[other], names[3])
	}

	// Two overflowing shards are counted together under "other"; indexes
	// that Shard never returns are ignored.
	recordShards(s,
		shardOp{loop: 0, shard: s.Shard(addr(100)), total: 10 * us, upstream: 5 * us},
		shardOp{loop: 1, shard: s.Shard(addr(101)), total: 20 * us, upstream: 5 * us},
		shardOp{loop: 1, shard: s.Shard(addr(102)), kind: opCount, isErr: true},
		shardOp{loop: 0, shard: -1, total: time.Second},
		shardOp{loop: 0, shard: metrics.MaxShards + 1, total: time.Second},
		shardOp{loop: 1, shard: 1 << 30, kind: opCount},
	)
	sn := s.Snapshot()
	if len(sn.Shards) != metrics.MaxShards+1 {
		t.Fatalf("%d shards in the snapshot, want %d", len(sn.Shards), metrics.MaxShards+1)
	}
	o := sn.Shards[other]
	if o.Name != "other" || o.Count != 3 || o.Errors != 1 || o.Phases[metrics.PhaseTotal].Max() != 20*us {
		t.Errorf("other: %q count %d errors %d max %v; want other 3 1 20µs", o.Name, o.Count, o.Errors, o.Phases[metrics.PhaseTotal].Max())
	}
	var n int64
	for _, sh := range sn.Shards {
		n += sh.Count
	}
	if n != 3 {
		t.Errorf("%d commands over all shards, want 3 (out-of-range indexes ignored)", n)
	}

	reg := newRegistry(t, s)
	if got, err := testutil.GatherAndCount(reg, "respmeter_shard_commands_total"); err != nil || got != metrics.MaxShards+1 {
		t.Errorf("shard_commands_total series: %d, %v; want %d", got, err, metrics.MaxShards+1)
	}
	if v := findMetric(t, reg, "respmeter_shard_commands_total", map[string]string{"shard": "other"}).GetCounter().GetValue(); v != 3 {
		t.Errorf(`shard_commands_total{shard="other"} = %g, want 3`, v)
	}
}

// TestShardObserveAndMerge records into two shards from two loops and checks
// the merged counts, percentiles and phases, and that commands are untouched.
func TestShardObserveAndMerge(t *testing.T) {
	s := metrics.NewSet(2, testNames)
	a, b := s.Shard(shardA), s.Shard(shardB)
	var ops []shardOp
	// Shard A: v = 1..200 µs, loops 0 and 1 alternating; total 2v, upstream
	// and service v: proxy v, queue 0.
	for v := 1; v <= 200; v++ {
		d := time.Duration(v) * us
		ops = append(ops, shardOp{loop: v % 2, shard: a, total: 2 * d, upstream: d, service: d})
	}
	// Shard B: totals 1001..1010 µs, upstream 900 µs of which 100 µs
	// service, the first an error; plus one untimed error.
	for v := 1001; v <= 1010; v++ {
		ops = append(ops, shardOp{loop: v / 1006, shard: b, total: time.Duration(v) * us,
			upstream: 900 * us, service: 100 * us, isErr: v == 1001})
	}
	ops = append(ops, shardOp{loop: 1, shard: b, kind: opCount, isErr: true})
	recordShards(s, ops...)

	sn := s.Snapshot()
	if len(sn.Shards) != 2 || sn.Shards[a].Name != shardA || sn.Shards[b].Name != shardB {
		t.Fatalf("shards %+v", sn.Shards)
	}
	sa, sb := sn.Shards[a], sn.Shards[b]
	for _, tc := range []struct {
		name              string
		sh                metrics.ShardStats
		count, errs, nObs int64
	}{
		{"A", sa, 200, 0, 200},
		{"B", sb, 11, 2, 10},
	} {
		if tc.sh.Count != tc.count || tc.sh.Errors != tc.errs || !tc.sh.Observed() {
			t.Errorf("%s: count %d errors %d observed %v; want %d %d true", tc.name, tc.sh.Count, tc.sh.Errors, tc.sh.Observed(), tc.count, tc.errs)
		}
		for p, d := range tc.sh.Phases {
			if metrics.Phase(p) == metrics.PhaseInjected || metrics.Phase(p) == metrics.PhaseTLS {
				continue // per shard, injected and tls time are not recorded
			}
			if d.Count() != tc.nObs {
				t.Errorf("%s %s: %d observations, want %d", tc.name, metrics.Phase(p), d.Count(), tc.nObs)
			}
		}
	}
	for _, tc := range []struct {
		name string
		d    metrics.Durations
		pct  float64 // 0: mean, < 0: max
		want time.Duration
	}{
		{"A total p50", sa.Phases[metrics.PhaseTotal], 50, 200 * us},
		{"A total p99", sa.Phases[metrics.PhaseTotal], 99, 396 * us},
		{"A total max", sa.Phases[metrics.PhaseTotal], -1, 400 * us},
		{"A total mean", sa.Phases[metrics.PhaseTotal], 0, 201 * us},
		{"A upstream p50", sa.Phases[metrics.PhaseUpstream], 50, 100 * us},
		{"A upstream p99.9", sa.Phases[metrics.PhaseUpstream], 99.9, 200 * us},
		{"A proxy p99", sa.Phases[metrics.PhaseProxy], 99, 198 * us},
		{"A queue max", sa.Phases[metrics.PhaseQueue], -1, 1 * us}, // 0 recorded as 1 µs
		{"B total p50", sb.Phases[metrics.PhaseTotal], 50, 1005 * us},
		{"B total max", sb.Phases[metrics.PhaseTotal], -1, 1010 * us},
		{"B service max", sb.Phases[metrics.PhaseService], -1, 100 * us},
		{"B queue mean", sb.Phases[metrics.PhaseQueue], 0, 800 * us},
		{"B proxy p50", sb.Phases[metrics.PhaseProxy], 50, 105 * us},
	} {
		var got time.Duration
		switch {
		case tc.pct < 0:
			got = tc.d.Max()
		case tc.pct == 0:
			got = tc.d.Mean()
		default:
			got = tc.d.Percentile(tc.pct)
		}
		if got != tc.want {
			t.Errorf("%s = %v, want %v", tc.name, got, tc.want)
		}
	}
	for _, c := range sn.Commands {
		if c.Count != 0 || c.Observed() {
			t.Errorf("command %s: count %d: shard recording must not touch commands", c.Name, c.Count)
		}
	}

	// The cheap Sums agree on counts and exact sums.
	sums := s.Sums()
	for i := range sn.Shards {
		x, y := sums.Shards[i], sn.Shards[i]
		if x.Name != y.Name || x.Count != y.Count || x.Errors != y.Errors {
			t.Errorf("Sums shard %d: %q %d %d vs %q %d %d", i, x.Name, x.Count, x.Errors, y.Name, y.Count, y.Errors)
		}
		for p := range x.Phases {
			if x.Phases[p].Count() != y.Phases[p].Count() || x.Phases[p].Sum != y.Phases[p].Sum {
				t.Errorf("Sums shard %d %s: (%d, %v) vs (%d, %v)", i, metrics.Phase(p),
					x.Phases[p].Count(), x.Phases[p].Sum, y.Phases[p].Count(), y.Phases[p].Sum)
			}
		}
	}

	// Cumulative: more observations after a snapshot add to it.
	recordShards(s, shardOp{loop: 0, shard: a, total: 5 * time.Millisecond, upstream: time.Millisecond})
	if sa2 := s.Snapshot().Shards[a]; sa2.Count != 201 || sa2.Phases[metrics.PhaseTotal].Max() != 5003*us {
		t.Errorf("after one more: count %d max %v; want 201, 5.003ms", sa2.Count, sa2.Phases[metrics.PhaseTotal].Max())
	}
	if sa.Count != 200 || sa.Phases[metrics.PhaseTotal].Count() != 200 {
		t.Errorf("the earlier Snapshot changed: %d %d", sa.Count, sa.Phases[metrics.PhaseTotal].Count())
	}
}

func TestShardBatch(t *testing.T) {
	s := metrics.NewSet(2, testNames)
	a, b, c := s.Shard(shardA), s.Shard(shardB), s.Shard("127.0.0.1:7003")
	ops := append(batches(0, a, 1, 2, 3, 4, 0, -3), batches(1, a, 10, 100, 1000, 5000)...)
	ops = append(ops, batches(1, c, 1<<21, 1)...)
	recordShards(s, ops...)

	sn := s.Snapshot()
	ba := sn.Shards[a].Batch
	// 0 and -3 are ignored; 5000 is recorded as 5003 at 3 significant
	// digits, the mean stays exact: 6120 / 8.
	if ba.Count() != 8 || ba.Sum != 6120 || ba.Mean() != 765 {
		t.Errorf("A: count %d sum %d mean %g; want 8 6120 765", ba.Count(), ba.Sum, ba.Mean())
	}
	for _, tc := range []struct {
		pct  float64
		want int64
	}{{25, 2}, {50, 4}, {75, 100}, {99, 5003}, {100, 5003}} {
		if got := ba.Percentile(tc.pct); got != tc.want {
			t.Errorf("A p%g = %d, want %d", tc.pct, got, tc.want)
		}
	}
	if ba.Max() != 5003 {
		t.Errorf("A max %d, want 5003", ba.Max())
	}
	if bb := sn.Shards[b].Batch; bb.Count() != 0 || bb.Mean() != 0 || bb.Percentile(50) != 0 || bb.Max() != 0 || bb.Hist != nil {
		t.Errorf("B, no batches: %+v", bb)
	}
	// Above 1<<20 the histogram clamps, the mean does not.
	if bc := sn.Shards[c].Batch; bc.Count() != 2 || bc.Mean() != float64(1<<21+1)/2 || bc.Max() < 1<<20 {
		t.Errorf("C: count %d mean %g max %d", bc.Count(), bc.Mean(), bc.Max())
	}
	if sums := s.Sums().Shards[a].Batch; sums.Count() != 8 || sums.Mean() != 765 {
		t.Errorf("Sums A batch: count %d mean %g", sums.Count(), sums.Mean())
	}
}

// shardSet returns a Set with two used shards, one registered idle shard and
// routing counters, for the export tests.
func shardSet() *metrics.Set {
	s := metrics.NewSet(2, testNames)
	a, b := s.Shard(shardA), s.Shard(shardB)
	s.Shard("127.0.0.1:7003")
	ops := []shardOp{
		{loop: 0, shard: a, total: 100 * us, upstream: 80 * us, service: 80 * us},
		{loop: 1, shard: a, total: time.Millisecond, upstream: 900 * us, service: 300 * us},
		{loop: 1, shard: a, total: 2 * time.Second, upstream: 2 * time.Second, service: 2 * time.Second, isErr: true},
		{loop: 0, shard: b, kind: opCount},
		{kind: opPenalty, loop: 1, total: 1500 * us},
		{kind: opPenalty, loop: 0, total: 250 * us},
	}
	ops = append(ops, batches(0, a, 1, 2, 3, 4)...)
	ops = append(ops, batches(1, a, 10, 100, 1000, 5000)...)
	recordShards(s, ops...)
	s.Redirect(false)
	s.Redirect(false)
	s.Redirect(true)
	s.PinnedMisroute()
	for range 3 {
		s.CrossSlot()
	}
	for _, r := range []string{"pubsub", "pubsub", "monitor", "blocking", "transaction", "state", "state", "junk", ""} {
		s.Handoff(r)
	}
	for _, k := range []metrics.TopologyKind{metrics.TopologySlotMoved, metrics.TopologySlotMoved, metrics.TopologySlotsReassigned, metrics.TopologyMastersChanged + 1, -1} {
		s.TopologyEvent(k) // the last two are out of range: not counted
	}
	return s
}

func TestShardPrometheus(t *testing.T) {
	reg := newRegistry(t, shardSet())

	problems, err := testutil.GatherAndLint(reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("promlint: %s: %s", p.Metric, p.Text)
	}

	// Counters, with their label values; the idle shard is there at 0.
	const counters = `
# HELP respmeter_shard_commands_total Redis commands the proxy sent to each upstream shard (its address), timed or not.
# TYPE respmeter_shard_commands_total counter
respmeter_shard_commands_total{shard="127.0.0.1:7001"} 3
respmeter_shard_commands_total{shard="127.0.0.1:7002"} 1
respmeter_shard_commands_total{shard="127.0.0.1:7003"} 0
# HELP respmeter_shard_command_errors_total Redis commands an upstream shard (its address) answered with an error reply.
# TYPE respmeter_shard_command_errors_total counter
respmeter_shard_command_errors_total{shard="127.0.0.1:7001"} 1
respmeter_shard_command_errors_total{shard="127.0.0.1:7002"} 0
respmeter_shard_command_errors_total{shard="127.0.0.1:7003"} 0
# HELP respmeter_redirects_total MOVED and ASK redirects the proxy followed and TRYAGAIN replies it retried, by kind (moved, ask, tryagain).
# TYPE respmeter_redirects_total counter
respmeter_redirects_total{kind="ask"} 1
respmeter_redirects_total{kind="moved"} 2
respmeter_redirects_total{kind="tryagain"} 0
# HELP respmeter_pinned_misroutes_total Commands sent, in pinned routing, to a shard that does not own their key's hash slot.
# TYPE respmeter_pinned_misroutes_total counter
respmeter_pinned_misroutes_total 1
# HELP respmeter_crossslot_replies_total Commands the proxy answered with -CROSSSLOT itself, without sending them upstream.
# TYPE respmeter_crossslot_replies_total counter
respmeter_crossslot_replies_total 3
# HELP respmeter_handoffs_total Clients moved to a private upstream connection, by reason (pubsub, monitor, blocking, transaction, state, other).
# TYPE respmeter_handoffs_total counter
respmeter_handoffs_total{reason="blocking"} 1
respmeter_handoffs_total{reason="monitor"} 1
respmeter_handoffs_total{reason="other"} 2
respmeter_handoffs_total{reason="pubsub"} 2
respmeter_handoffs_total{reason="state"} 2
respmeter_handoffs_total{reason="transaction"} 1
# HELP respmeter_topology_events_total Changes of the cluster's shard map the proxy saw, by kind: slot_moved (a MOVED reply named a new owner), slots_reassigned (a refresh found slots with another owner), masters_changed (a refresh found a master joined or gone), all three with shard empty; and by shard (the engine's address) the atomic slot migrations that shard's engine listed as source or target (CLUSTER GETSLOTMIGRATIONS): slot_migration_started, slot_migration_ended.
# TYPE respmeter_topology_events_total counter
respmeter_topology_events_total{kind="masters_changed",shard=""} 0
respmeter_topology_events_total{kind="slot_moved",shard=""} 2
respmeter_topology_events_total{kind="slots_reassigned",shard=""} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(counters),
		"respmeter_shard_commands_total", "respmeter_shard_command_errors_total", "respmeter_redirects_total",
		"respmeter_pinned_misroutes_total", "respmeter_crossslot_replies_total", "respmeter_handoffs_total",
		"respmeter_topology_events_total"); err != nil {
		t.Error(err)
	}

	// Durations: only (shard, phase) pairs observed, same buckets as the
	// command histogram.
	for _, tc := range []struct {
		name string
		want int
	}{
		{"respmeter_shard_command_duration_seconds", 5}, // shard A × 5 phases
		{"respmeter_upstream_batch_commands", 1},        // shard A only
		{"respmeter_redirect_penalty_seconds", 1},
	} {
		if got, err := testutil.GatherAndCount(reg, tc.name); err != nil || got != tc.want {
			t.Errorf("%s: %d series, %v; want %d", tc.name, got, err, tc.want)
		}
	}
	h := findMetric(t, reg, "respmeter_shard_command_duration_seconds",
		map[string]string{"shard": shardA, "phase": "total"}).GetHistogram()
	if h.GetSampleCount() != 3 || math.Abs(h.GetSampleSum()-2.0011) > 1e-12 || len(h.GetBucket()) != 25 {
		t.Errorf("shard A total: count %d sum %g, %d buckets; want 3, 2.0011, 25", h.GetSampleCount(), h.GetSampleSum(), len(h.GetBucket()))
	}
	wantCum := map[float64]uint64{0.00005: 0, 0.0001: 1, 0.001: 2, 1: 2, 2.5: 3}
	for _, bk := range h.GetBucket() {
		if want, ok := wantCum[bk.GetUpperBound()]; ok && bk.GetCumulativeCount() != want {
			t.Errorf("shard A total le=%g: %d, want %d", bk.GetUpperBound(), bk.GetCumulativeCount(), want)
		}
	}
	if got, want := nativeCounts(h), map[int]uint64{-106: 1, -79: 1, 9: 1}; !maps.Equal(got, want) {
		t.Errorf("shard A total native %v, want %v", got, want)
	}
	q := findMetric(t, reg, "respmeter_shard_command_duration_seconds",
		map[string]string{"shard": shardA, "phase": "queue"}).GetHistogram()
	if math.Abs(q.GetSampleSum()-0.0006) > 1e-12 { // 0 + 600 µs + 0
		t.Errorf("shard A queue sum %g, want 0.0006", q.GetSampleSum())
	}

	// Batches: classic 1, 2, 4 .. 1024 in commands, native schema 3.
	bh := findMetric(t, reg, "respmeter_upstream_batch_commands", map[string]string{"shard": shardA}).GetHistogram()
	if bh.GetSampleCount() != 8 || bh.GetSampleSum() != 6120 {
		t.Errorf("batch count %d sum %g, want 8 6120", bh.GetSampleCount(), bh.GetSampleSum())
	}
	wantBounds := []float64{1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024}
	wantBatchCum := []uint64{1, 2, 4, 4, 5, 5, 5, 6, 6, 6, 7} // 5000 only in +Inf
	if len(bh.GetBucket()) != len(wantBounds) {
		t.Fatalf("%d batch buckets, want %d", len(bh.GetBucket()), len(wantBounds))
	}
	for i, bk := range bh.GetBucket() {
		if bk.GetUpperBound() != wantBounds[i] || bk.GetCumulativeCount() != wantBatchCum[i] {
			t.Errorf("batch bucket %d: le=%g %d, want le=%g %d", i, bk.GetUpperBound(), bk.GetCumulativeCount(), wantBounds[i], wantBatchCum[i])
		}
	}
	// Native keys k hold (2^((k-1)/8), 2^(k/8)]: 1→0, 2→8, 3→13, 4→16,
	// 10→27, 100→54, 1000→80, 5003→99.
	wantNative := map[int]uint64{0: 1, 8: 1, 13: 1, 16: 1, 27: 1, 54: 1, 80: 1, 99: 1}
	if got := nativeCounts(bh); bh.GetSchema() != 3 || !maps.Equal(got, wantNative) {
		t.Errorf("batch schema %d native %v, want 3 %v", bh.GetSchema(), got, wantNative)
	}

	ph := findMetric(t, reg, "respmeter_redirect_penalty_seconds", nil).GetHistogram()
	if ph.GetSampleCount() != 2 || math.Abs(ph.GetSampleSum()-0.00175) > 1e-12 {
		t.Errorf("penalty count %d sum %g, want 2 0.00175", ph.GetSampleCount(), ph.GetSampleSum())
	}
}

func TestShardStatsJSON(t *testing.T) {
	s := shardSet()
	rec := httptest.NewRecorder()
	s.StatsHandlerWith(func() map[string]any { return map[string]any{"shards": "not replaced"} }).
		ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/stats", nil))
	var doc statsDoc
	dec := json.NewDecoder(rec.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&doc); err != nil {
		t.Fatal(err)
	}
	if len(doc.Shards) != 3 {
		t.Fatalf("%d shards, want 3: %+v", len(doc.Shards), doc.Shards)
	}
	a, b, idle := doc.Shards[0], doc.Shards[1], doc.Shards[2]
	for _, tc := range []struct {
		name      string
		got, want float64
	}{
		{"A commands", float64(a.Commands), 3},
		{"A errors", float64(a.Errors), 1},
		{"A total p50", a.Total.P50, 0.001},
		{"A total p99", a.Total.P99, 2.000895},
		{"A total p99.9", a.Total.P999, 2.000895},
		{"A upstream p50", a.Upstream.P50, 0.0009},
		{"A batch count", float64(a.Batch.Count), 8},
		{"A batch mean", a.Batch.Mean, 765},
		{"A batch p50", float64(a.Batch.P50), 4},
		{"A batch p99", float64(a.Batch.P99), 5003},
		{"B commands", float64(b.Commands), 1},
		{"B total p50", b.Total.P50, 0}, // counted, never timed
		{"idle commands", float64(idle.Commands), 0},
		{"idle batch mean", idle.Batch.Mean, 0},
		{"redirects moved", float64(doc.Routing.RedirectsMoved), 2},
		{"redirects ask", float64(doc.Routing.RedirectsAsk), 1},
		{"pinned misroutes", float64(doc.Routing.PinnedMisroutes), 1},
		{"crossslot", float64(doc.Routing.CrossSlotReplies), 3},
		{"penalty count", float64(doc.Routing.RedirectPenalty.Count), 2},
		{"penalty max", doc.Routing.RedirectPenalty.Max, 0.0015},
		{"handoffs pubsub", float64(doc.Routing.Handoffs["pubsub"]), 2},
		{"handoffs other", float64(doc.Routing.Handoffs["other"]), 2},
		{"handoffs reasons", float64(len(doc.Routing.Handoffs)), 6},
		{"topology slot_moved", float64(doc.Routing.TopologyEvents["slot_moved"]), 2},
		{"topology slots_reassigned", float64(doc.Routing.TopologyEvents["slots_reassigned"]), 1},
		{"topology masters_changed", float64(doc.Routing.TopologyEvents["masters_changed"]), 0},
		{"topology kinds", float64(len(doc.Routing.TopologyEvents)), 3},
	} {
		if math.Abs(tc.got-tc.want) > 1e-12 {
			t.Errorf("%s = %g, want %g", tc.name, tc.got, tc.want)
		}
	}
	if a.Shard != shardA || b.Shard != shardB || idle.Shard != "127.0.0.1:7003" {
		t.Errorf("shard names %q %q %q", a.Shard, b.Shard, idle.Shard)
	}
}

func TestShardTable(t *testing.T) {
	var buf bytes.Buffer
	if err := shardSet().WriteTable(&buf); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	_, shards, ok := strings.Cut(out, "Per shard:")
	if !ok {
		t.Fatalf("no shard table:\n%s", out)
	}
	// One unit in both tables, said in the header: milliseconds.
	if !strings.Contains(shards, "Shard                   Ops |  p50 total (ms)  p99 total (ms) |      mean batch") {
		t.Errorf("shard table's header does not say ms:\n%s", shards)
	}
	for _, row := range []string{
		// name, Ops, p50 and p99 total in ms, mean batch
		fmt.Sprintf("%s %12d | %15s %15s | %15s", shardA, 3, "1.000", "2000.895", "765.00"),
		fmt.Sprintf("%s %12d | %15s %15s | %15s", shardB, 1, "-", "-", "-"),
		fmt.Sprintf("%s %12d | %15s %15s | %15s", "127.0.0.1:7003", 0, "-", "-", "-"),
	} {
		if !strings.Contains(shards, row) {
			t.Errorf("shard table lacks %q:\n%s", row, shards)
		}
	}
	// Without shards, no second table.
	buf.Reset()
	if err := metrics.NewSet(1, testNames).WriteTable(&buf); err != nil || strings.Contains(buf.String(), "Per shard") {
		t.Errorf("shard table without shards (%v):\n%s", err, buf.String())
	}
}

func TestShardLockedAllocs(t *testing.T) {
	s := metrics.NewSet(1, testNames)
	a, b := s.Shard(shardA), s.Shard(shardB)
	l := s.Loop(0)
	i := 0
	record := func() {
		i++
		l.Lock()
		l.ShardObserveLocked(a, time.Duration(100+i%900)*us, 80*us, 50*us, false)
		l.ShardObserveLocked(b, 3*time.Millisecond, 2*time.Millisecond, 2*time.Millisecond, i%5 == 0)
		l.ShardCountLocked(b, true)
		l.ShardBatchLocked(a, 1+i%64)
		l.ShardBatchLocked(b, 5000)
		l.RedirectPenaltyLocked(time.Duration(i%3000) * us)
		l.Unlock()
	}
	record() // allocates the shard table and the histograms
	if n := testing.AllocsPerRun(1000, record); n != 0 {
		t.Errorf("shard recording after warm-up: %v allocs per run, want 0", n)
	}
	// A scrape copies the histograms out and resets them, keeping their
	// capacity; recording into them again allocates nothing either.
	s.Snapshot()
	record()
	s.Snapshot()
	if n := testing.AllocsPerRun(1000, record); n != 0 {
		t.Errorf("shard recording after a scrape: %v allocs per run, want 0", n)
	}
	// Growing the table to a later index is a reslice.
	c := s.Shard("127.0.0.1:7003")
	grow := func() {
		l.Lock()
		l.ShardCountLocked(c, false)
		l.Unlock()
	}
	if n := testing.AllocsPerRun(1, grow); n != 0 {
		t.Errorf("growing to shard %d: %v allocs, want 0", c, n)
	}
}

// TestShardConcurrentGrowth registers shards (past MaxShards) from several
// loops while they record into them and readers scrape; run it with -race.
// Every shard is counted, so every loop's table grows to MaxShards+1; only
// every 16th shard is timed and batched, since each timed (loop, shard) costs
// ~1 MB of histograms (twice, with the scrape's spares), which -race makes
// slow to merge and reset.
func TestShardConcurrentGrowth(t *testing.T) {
	const loops, names, minOps, minReads = 3, metrics.MaxShards + 16, 20000, 5
	s := metrics.NewSet(loops, testNames)
	reg := newRegistry(t, s)
	addr := func(i int) string { return fmt.Sprintf("10.1.%d.%d:6379", i/256, i%256) }
	var reads atomic.Int64
	var ops, timed, batched [loops]int64
	var cached [loops][]int // each loop's cache of shard indexes, k-th for name (k*7+loop)%names
	var wg sync.WaitGroup
	for li := range loops {
		wg.Go(func() {
			l := s.Loop(li)
			var idx []int
			defer func() { cached[li] = idx }()
			i := 0
			for ; i < minOps || reads.Load() < minReads; i++ {
				if i%200 == 0 && len(idx) < names { // a new shard now and then, as topology changes
					idx = append(idx, s.Shard(addr((len(idx)*7+li)%names)))
				}
				if i%50 == 0 { // one lock per batch of 50, then a pause as for I/O
					if i > 0 {
						l.Unlock()
						runtime.Gosched()
					}
					l.Lock()
				}
				sh := idx[i%len(idx)]
				if sh%16 != 0 {
					l.ShardCountLocked(sh, false)
					continue
				}
				l.ShardObserveLocked(sh, time.Duration(i%4000)*us, time.Duration(i%2000)*us, time.Duration(i%1000)*us, i%11 == 0)
				timed[li]++
				if i%4 == 0 {
					l.ShardBatchLocked(sh, 1+i%100)
					batched[li]++
				}
			}
			l.Unlock()
			ops[li] = int64(i)
		})
	}
	done := make(chan struct{})
	var readers sync.WaitGroup
	for r := range 2 {
		readers.Go(func() {
			for {
				select {
				case <-done:
					return
				default:
				}
				if r == 0 {
					sn := s.Snapshot()
					for i, sh := range sn.Shards {
						// Counts and histograms are swapped out together.
						if n := sh.Phases[metrics.PhaseTotal].Count(); i%16 == 0 && n != sh.Count || i%16 != 0 && n != 0 {
							t.Errorf("shard %d (%s): %d timed, %d counted", i, sh.Name, n, sh.Count)
						}
					}
					if _, err := reg.Gather(); err != nil {
						t.Errorf("Gather: %v", err)
					}
				} else {
					var buf bytes.Buffer
					if err := s.WriteTable(&buf); err != nil {
						t.Errorf("WriteTable: %v", err)
					}
					rec := httptest.NewRecorder()
					s.StatsHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/stats", nil))
					if rec.Code != http.StatusOK {
						t.Errorf("/stats: %d", rec.Code)
					}
					s.Sums()
					if n := len(s.ShardNames()); n > metrics.MaxShards+1 {
						t.Errorf("%d shard names, more than MaxShards+1", n)
					}
				}
				reads.Add(1)
			}
		})
	}
	wg.Wait()
	close(done)
	readers.Wait()

	// Every loop got the same index for a name, whoever registered it first.
	for li := range loops {
		for k, got := range cached[li] {
			if want := s.Shard(addr((k*7 + li) % names)); got != want {
				t.Errorf("loop %d: %s has index %d, now %d", li, addr((k*7+li)%names), got, want)
			}
		}
	}
	sn := s.Snapshot()
	if len(sn.Shards) != metrics.MaxShards+1 || sn.Shards[metrics.MaxShards].Name != "other" {
		t.Fatalf("%d shards, last %q; want %d, other", len(sn.Shards), sn.Shards[len(sn.Shards)-1].Name, metrics.MaxShards+1)
	}
	var count, nTimed, nBatch, wantOps, wantTimed, wantBatch int64
	for _, sh := range sn.Shards {
		count += sh.Count
		nTimed += sh.Phases[metrics.PhaseTotal].Count()
		nBatch += sh.Batch.Count()
	}
	for li := range loops {
		wantOps += ops[li]
		wantTimed += timed[li]
		wantBatch += batched[li]
	}
	if count != wantOps || nTimed != wantTimed || nBatch != wantBatch {
		t.Errorf("counted %d commands, %d timed, %d batches; want %d, %d, %d", count, nTimed, nBatch, wantOps, wantTimed, wantBatch)
	}
	if got, err := testutil.GatherAndCount(reg, "respmeter_shard_commands_total"); err != nil || got != metrics.MaxShards+1 {
		t.Errorf("shard_commands_total series: %d, %v", got, err)
	}
}

// TestReorderWait: the head-of-line wait is recorded and merged like the
// other per-loop distributions.
func TestReorderWait(t *testing.T) {
	s := metrics.NewSet(2, []string{"other"})
	for i, d := range []time.Duration{time.Millisecond, 3 * time.Millisecond, -time.Second} {
		l := s.Loop(i % 2)
		l.Lock()
		l.ReorderWaitLocked(d)
		l.Unlock()
	}
	w := s.Snapshot().ReorderWait
	if w.Count() != 3 || w.Max() < 3*time.Millisecond || w.Max() > 3100*time.Microsecond || w.Sum != 4*time.Millisecond {
		t.Errorf("reorder wait: count %d max %v sum %v, want 3, 3ms, 4ms (negative as 0)", w.Count(), w.Max(), w.Sum)
	}
}
