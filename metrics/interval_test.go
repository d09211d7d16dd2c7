package metrics_test

import (
	"errors"
	"io"
	"testing"
	"time"

	"github.com/respmeter/respmeter/metrics"
)

// sumUs returns the sum of from..to µs.
func sumUs(from, to int) time.Duration {
	return time.Duration((from+to)*(to-from+1)/2) * us
}

// TestInterval checks that Set.Interval reports what was recorded since its
// previous call, histograms, counts, errors and sums alike, for commands,
// per-loop distributions and shards; that the first interval also holds
// what was recorded (and scraped) before it; that scrapes in between move
// nothing; and that the cumulative Snapshot is not affected.
func TestInterval(t *testing.T) {
	s := metrics.NewSet(2, testNames)
	a := s.Shard(shardA)
	record(s, span(0, cmdGet, 1, 100)...)
	record(s, op{loop: 1, cmd: cmdSet, total: 5 * time.Millisecond, upstream: 4 * time.Millisecond, isErr: true})
	recordShards(s, shardOp{loop: 0, shard: a, total: 2 * time.Millisecond, upstream: time.Millisecond, service: time.Millisecond})
	recordShards(s, batches(1, a, 7)...)
	l := s.Loop(0)
	l.Lock()
	l.ThinkLocked(300 * us)
	l.Unlock()
	s.Snapshot() // a scrape before the first interval
	record(s, span(1, cmdGet, 1001, 1050)...)

	interval := func(fn func(sn *metrics.Snapshot)) {
		t.Helper()
		if err := s.Interval(func(sn *metrics.Snapshot) error { fn(sn); return nil }); err != nil {
			t.Fatal(err)
		}
	}
	interval(func(sn *metrics.Snapshot) {
		get, set := &sn.Commands[cmdGet], &sn.Commands[cmdSet]
		tot := get.Phases[metrics.PhaseTotal]
		if get.Count != 150 || tot.Count() != 150 || tot.Sum != sumUs(1, 100)+sumUs(1001, 1050) {
			t.Errorf("interval 1: get count %d, histogram %d, sum %v; want 150, 150, %v", get.Count, tot.Count(), tot.Sum, sumUs(1, 100)+sumUs(1001, 1050))
		}
		if got := tot.Percentile(50); got != 75*us {
			t.Errorf("interval 1: get p50 %v, want 75µs", got)
		}
		if got := tot.Max(); got != 1050*us {
			t.Errorf("interval 1: get max %v, want 1.05ms", got)
		}
		if tot.Hist != nil || tot.Sparse() == nil || tot.Sparse().TotalCount() != 150 {
			t.Errorf("interval 1: get total Hist %v, Sparse %v: want a sparse histogram of 150 values only", tot.Hist, tot.Sparse())
		}
		if set.Count != 1 || set.Errors != 1 || set.Phases[metrics.PhaseUpstream].Max() != 4001*us { // highest equivalent value
			t.Errorf("interval 1: set count %d errors %d upstream max %v, want 1, 1, 4.001ms", set.Count, set.Errors, set.Phases[metrics.PhaseUpstream].Max())
		}
		if sn.Think.Count() != 1 || sn.Think.Sum != 300*us {
			t.Errorf("interval 1: think count %d sum %v, want 1, 300µs", sn.Think.Count(), sn.Think.Sum)
		}
		sh := &sn.Shards[a]
		if sh.Count != 1 || sh.Phases[metrics.PhaseTotal].Count() != 1 || sh.Batch.Count() != 1 || sh.Batch.Sum != 7 {
			t.Errorf("interval 1: shard count %d, total %d, batches %d (sum %d), want 1, 1, 1 (7)",
				sh.Count, sh.Phases[metrics.PhaseTotal].Count(), sh.Batch.Count(), sh.Batch.Sum)
		}
		if got := sn.Totals(); got.Count != 151 || got.Phases[metrics.PhaseTotal].Count() != 151 {
			t.Errorf("interval 1: totals count %d, histogram %d, want 151", got.Count, got.Phases[metrics.PhaseTotal].Count())
		}
	})

	record(s, span(0, cmdGet, 2001, 2010)...)
	s.Snapshot() // scrapes between two intervals move nothing
	if err := s.WriteTable(io.Discard); err != nil {
		t.Fatal(err)
	}
	interval(func(sn *metrics.Snapshot) {
		get, set := &sn.Commands[cmdGet], &sn.Commands[cmdSet]
		tot := get.Phases[metrics.PhaseTotal]
		if get.Count != 10 || tot.Count() != 10 || tot.Sum != sumUs(2001, 2010) || tot.Percentile(0) != 2001*us {
			t.Errorf("interval 2: get count %d, histogram %d, sum %v, min %v; want 10, 10, %v, 2.001ms",
				get.Count, tot.Count(), tot.Sum, tot.Percentile(0), sumUs(2001, 2010))
		}
		if set.Count != 0 || set.Errors != 0 || set.Observed() || set.Phases[metrics.PhaseTotal].Sum != 0 {
			t.Errorf("interval 2: set count %d errors %d observed %v sum %v, want nothing", set.Count, set.Errors, set.Observed(), set.Phases[metrics.PhaseTotal].Sum)
		}
		if sn.Think.Count() != 0 || sn.Shards[a].Count != 0 || sn.Shards[a].Batch.Count() != 0 {
			t.Errorf("interval 2: think %d, shard %d, batches %d, want none", sn.Think.Count(), sn.Shards[a].Count, sn.Shards[a].Batch.Count())
		}
	})

	// fn's error is returned, and the interval ends all the same.
	record(s, span(1, cmdPing, 1, 3)...)
	errFn := errors.New("fn failed")
	if err := s.Interval(func(*metrics.Snapshot) error { return errFn }); err != errFn {
		t.Errorf("Interval returned %v, want fn's error", err)
	}
	interval(func(sn *metrics.Snapshot) {
		if tot := sn.Totals(); tot.Count != 0 || tot.Phases[metrics.PhaseTotal].Count() != 0 {
			t.Errorf("interval 4: totals count %d, histogram %d, want nothing", tot.Count, tot.Phases[metrics.PhaseTotal].Count())
		}
	})

	// The cumulative view is whole.
	sn := s.Snapshot()
	if get := sn.Commands[cmdGet]; get.Count != 160 || get.Phases[metrics.PhaseTotal].Count() != 160 || get.Phases[metrics.PhaseTotal].Max() != 2010*us {
		t.Errorf("Snapshot after the intervals: get count %d, histogram %d, max %v; want 160, 160, 2.01ms",
			get.Count, get.Phases[metrics.PhaseTotal].Count(), get.Phases[metrics.PhaseTotal].Max())
	}
}
