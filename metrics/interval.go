package metrics

import (
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// intervals is the state behind Set.Interval, kept in the Set's merger and
// guarded by its mutex. Until the first Interval call it is off and costs
// the merges nothing; from then on every merge adds what it drains from the
// loops into the interval histograms too, and Interval empties them.
type intervals struct {
	on bool
	// The histograms of the current interval, as in merger; Reset (keeping
	// their capacity) at the end of each Interval call.
	cmds   []hists // [cmd]
	extra  [numExtra]*hdrhistogram.PackedHistogram
	shards [MaxShards + 1]shardHists
	// The cumulative counts and sums at the end of the previous interval.
	prevCmds   []sums // [cmd]
	prevExtra  [numExtra]time.Duration
	prevShards [MaxShards + 1]shardSums
}

// sums are the cumulative counters of a command or shard.
type sums struct {
	count, errors int64
	phases        [NumPhases]time.Duration
}

// shardSums are a shard's cumulative counters.
type shardSums struct {
	sums
	batch int64
}

// track returns h if intervals are being kept, else nil: the ivl argument
// of drain.
func (iv *intervals) track(h **hdrhistogram.PackedHistogram) **hdrhistogram.PackedHistogram {
	if !iv.on {
		return nil
	}
	return h
}

// Interval merges the loops as a scrape does and calls fn with a Snapshot
// of the interval since the previous Interval call (the first call: since
// the Set was made): each histogram holds only the values merged in that
// interval, and command and shard counts, errors and sums are that
// interval's too; Counters and Routing are cumulative, as in Snapshot. A
// distribution without new values has a Count of 0.
//
// The Snapshot is a view: its histograms are the Set's sparse interval
// histograms (Durations.Sparse; Hist is nil), valid only
// until fn returns; fn must not keep or modify them. Interval resets them
// after fn returns, whatever fn returns, and returns fn's error.
//
// A Set keeps one interval: two callers of Interval would each see only
// the values merged since the other's last call. Scrapes (Snapshot, the
// Prometheus collector, /stats, the table) do not move the interval.
//
// Memory: from the first call on, the Set keeps one more sparse histogram
// per observed distribution, holding the buckets of one interval (reset,
// not freed, between intervals: no allocation once they have grown to the
// buckets an interval fills). It is the interval log's source (respmeter
// --hdr-log), which without it would keep a dense copy (~188 KB) per
// command and phase.
func (s *Set) Interval(fn func(*Snapshot) error) error {
	s.merge.mu.Lock()
	defer s.merge.mu.Unlock()
	m := &s.merge
	iv := &m.ivl
	if !iv.on {
		iv.on = true
		iv.seed(m)
	}
	sn := s.resetView()
	s.mergeLocked(sn)
	iv.fill(sn)
	defer iv.reset()
	return fn(sn)
}

// seed starts the first interval with everything merged so far: a copy of
// each cumulative histogram.
func (iv *intervals) seed(m *merger) {
	for ci := range m.cmds {
		for p, h := range m.cmds[ci] {
			mergeInto(h, &iv.cmds[ci][p], newHistogram)
		}
	}
	for x, h := range m.extra {
		mergeInto(h, &iv.extra[x], newHistogram)
	}
	for si := range m.shards {
		for p, h := range m.shards[si].phases {
			mergeInto(h, &iv.shards[si].phases[p], newHistogram)
		}
		mergeInto(m.shards[si].batch, &iv.shards[si].batch, newBatchHistogram)
	}
}

// mergeInto merges h, if it holds values, into *dst, allocated with
// newFn's geometry (h's) if nil.
func mergeInto(h *hdrhistogram.PackedHistogram, dst **hdrhistogram.PackedHistogram, newFn func() *hdrhistogram.PackedHistogram) {
	if h == nil || h.TotalCount() == 0 {
		return
	}
	if *dst == nil {
		*dst = newFn()
	}
	(*dst).Merge(h) // same geometry: nothing is dropped
}

// fill points sn's histograms, which mergeLocked made the cumulative ones,
// at the interval histograms, and turns its cumulative counts and sums into
// the interval's, remembering the cumulative ones for the next interval.
func (iv *intervals) fill(sn *Snapshot) {
	for ci := range sn.Commands {
		c := &sn.Commands[ci]
		iv.prevCmds[ci].delta(&c.Count, &c.Errors, &c.Phases)
		for p := range c.Phases {
			c.Phases[p].sparse = iv.cmds[ci][p]
		}
	}
	for x, d := range sn.extras() {
		d.Sum, iv.prevExtra[x] = d.Sum-iv.prevExtra[x], d.Sum
		d.sparse = iv.extra[x]
	}
	for si := range sn.Shards {
		ss, prev, h := &sn.Shards[si], &iv.prevShards[si], &iv.shards[si]
		prev.delta(&ss.Count, &ss.Errors, &ss.Phases)
		ss.Batch.Sum, prev.batch = ss.Batch.Sum-prev.batch, ss.Batch.Sum
		for p := range ss.Phases {
			ss.Phases[p].sparse = h.phases[p]
		}
		ss.Batch.sparse = h.batch
	}
}

// delta replaces the cumulative count, errors and phase sums by their
// increase since *prev and stores the cumulative values in *prev.
func (prev *sums) delta(count, errors *int64, phases *[NumPhases]Durations) {
	*count, prev.count = *count-prev.count, *count
	*errors, prev.errors = *errors-prev.errors, *errors
	for p := range phases {
		phases[p].Sum, prev.phases[p] = phases[p].Sum-prev.phases[p], phases[p].Sum
	}
}

// reset empties the interval histograms, keeping their capacity.
func (iv *intervals) reset() {
	for ci := range iv.cmds {
		resetAll(iv.cmds[ci][:]...)
	}
	resetAll(iv.extra[:]...)
	for si := range iv.shards {
		resetAll(iv.shards[si].phases[:]...)
		resetAll(iv.shards[si].batch)
	}
}

// resetAll resets the non-nil histograms among hs.
func resetAll(hs ...*hdrhistogram.PackedHistogram) {
	for _, h := range hs {
		if h != nil {
			h.Reset()
		}
	}
}
