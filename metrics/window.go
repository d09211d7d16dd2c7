package metrics

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// Window keeps the last intervals of a Set, so that /stats?window=10s (and
// the live page at /, which reads it every second) can give rates and
// percentiles over the last seconds instead of since start.
//
// Every interval (Run; or Tick, in tests) it reads the Set's cumulative
// histograms in a view, as a scrape does, and stores what each (command,
// phase) and (shard, phase) gained since the previous tick — a sparse
// interval histogram of the bucket-by-bucket difference, plus the
// differences of the counts, errors and exact sums — in a ring of n slots.
// Stats merges the newest slots that cover the asked window.
//
// Memory: one sparse copy of the previous cumulative histogram per
// observed (command or shard, phase), plus, per interval in which it
// received values, a sparse histogram of that interval's buckets (about
// 250 bytes of hdrhistogram-go's per-histogram geometry plus 5 bytes per
// bucket); a slot's histogram is reused when the series is busy again when
// the ring comes round, dropped when it is idle.
//
// All methods are safe for concurrent use.
type Window struct {
	set      *Set
	interval time.Duration

	mu    sync.Mutex
	prev  windowSeries // cumulative at the last tick
	slots []windowSlot // ring, newest at slots[(next-1+n)%n]
	next  int          // slot the next tick fills
	used  int          // slots filled, at most len(slots)
	last  time.Time    // end of the newest slot, or the start

	// Lazy mode (Lazy): Run records only while windows are read.
	idle     time.Duration // 0: always record
	lastRead time.Time     // the latest Stats call
	on       bool          // recording: a Stats call came within idle
}

// windowSlot is one interval's differences.
type windowSlot struct {
	start, end time.Time
	windowSeries
}

// windowSeries holds one entry per command ID and one per shard index.
type windowSeries struct {
	cmds   []windowEntry
	shards []windowEntry
}

// windowEntry is one command's or shard's counts, exact sums (per phase)
// and histograms (per phase; nil until used), either cumulative (prev) or
// an interval's differences (slots).
type windowEntry struct {
	count, errors int64
	sums          [NumPhases]time.Duration
	hists         hists
}

// NewWindow returns a Window over s keeping n intervals of the given length
// (so windows up to n·interval); interval must be positive and n at least 1,
// or NewWindow panics. The first interval starts now and also holds what s
// recorded before. Call Run (or Tick) to fill it.
func NewWindow(s *Set, interval time.Duration, n int) *Window {
	if interval <= 0 || n < 1 {
		panic(fmt.Sprintf("metrics: NewWindow(%v, %d): interval must be > 0 and n >= 1", interval, n))
	}
	return &Window{set: s, interval: interval, slots: make([]windowSlot, n), last: time.Now()}
}

// Interval returns the length of one interval of w.
func (w *Window) Interval() time.Duration { return w.interval }

// Len returns the number of intervals w keeps: the longest window is
// Len()·Interval().
func (w *Window) Len() int { return len(w.slots) }

// Lazy makes Run record only while windows are read, so that a proxy whose
// live page and /stats?window= nobody uses pays nothing for them: the
// first Stats call starts the recording (from an empty window: what came
// before is not in it), and when no Stats call has come for idle, the
// intervals held are dropped and recording stops until the next one.
// Call it before Run.
func (w *Window) Lazy(idle time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.idle = idle
}

// Run calls Tick every interval until ctx is done (in lazy mode, only
// while windows are read; see Lazy).
func (w *Window) Run(ctx context.Context) {
	t := time.NewTicker(w.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			if w.recording(now) {
				w.Tick(now)
			}
		}
	}
}

// recording reports whether Run should tick at now, and drops what a lazy
// window holds once no Stats call has come for its idle time.
func (w *Window) recording(now time.Time) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.idle <= 0 {
		return true
	}
	if w.on && now.Sub(w.lastRead) > w.idle {
		w.on = false
		w.prev = windowSeries{}
		w.slots = make([]windowSlot, len(w.slots))
		w.next, w.used = 0, 0
	}
	return w.on
}

// Tick ends the current interval at now: it stores in the oldest slot what
// the Set recorded since the previous tick and starts the next interval.
// Run calls it; tests call it directly.
func (w *Window) Tick(now time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.tickLocked(now)
}

// tickLocked is Tick with w.mu held.
func (w *Window) tickLocked(now time.Time) {
	slot := &w.slots[w.next]
	slot.start, slot.end = w.last, now
	if now.Before(w.last) { // a wall clock stepped back
		slot.end = w.last
	}
	w.last = slot.end
	_ = w.set.view(func(sn *Snapshot) error {
		grow(&slot.cmds, len(sn.Commands))
		grow(&w.prev.cmds, len(sn.Commands))
		for ci := range sn.Commands {
			c := &sn.Commands[ci]
			diff(&slot.cmds[ci], &w.prev.cmds[ci], c.Count, c.Errors, &c.Phases)
		}
		grow(&slot.shards, len(sn.Shards))
		grow(&w.prev.shards, len(sn.Shards))
		slot.shards = slot.shards[:len(sn.Shards)]
		for si := range sn.Shards {
			ss := &sn.Shards[si]
			diff(&slot.shards[si], &w.prev.shards[si], ss.Count, ss.Errors, &ss.Phases)
		}
		return nil
	})
	w.next = (w.next + 1) % len(w.slots)
	w.used = min(w.used+1, len(w.slots))
}

// grow extends *es to at least n entries, keeping the existing ones.
func grow(es *[]windowEntry, n int) {
	if len(*es) < n {
		*es = append(*es, make([]windowEntry, n-len(*es))...)
	}
}

// diff stores in d what the cumulative figures (count, errors, phases)
// gained over prev, and makes prev equal to them.
func diff(d, prev *windowEntry, count, errors int64, phases *[NumPhases]Durations) {
	d.count, d.errors = count-prev.count, errors-prev.errors
	prev.count, prev.errors = count, errors
	for p := range phases {
		cur := phases[p].sparse
		d.sums[p] = phases[p].Sum - prev.sums[p]
		prev.sums[p] = phases[p].Sum
		old := prev.hists[p]
		if cur == nil || (old != nil && old.TotalCount() == cur.TotalCount()) {
			// Nothing new (cumulative: same count). An idle series keeps
			// no histogram in the slot: memory follows what is in use.
			d.hists[p] = nil
			continue
		}
		if d.hists[p] != nil {
			d.hists[p].Reset()
		}
		if d.hists[p] == nil {
			d.hists[p] = newHistogram()
		}
		cur.ForEachBucket(func(v, n int64) bool {
			if old != nil {
				n -= old.CountAtValue(v)
			}
			if n > 0 {
				_ = d.hists[p].RecordValues(v, n) // in range: cur holds it
			}
			return true
		})
		// The slot is kept for the whole ring: give back the spare
		// capacity its growth left (up to half of it).
		d.hists[p].Compact()
		if old == nil {
			old = newHistogram()
			prev.hists[p] = old
		}
		old.Reset()
		old.Merge(cur) // same geometry, into an empty histogram: a copy
	}
}

// WindowStats is what a Set recorded over the last intervals of a Window.
type WindowStats struct {
	// Start and End bound the intervals merged; Seconds is End − Start,
	// the divisor of the rates (at most the asked window rounded up to
	// whole intervals; less when fewer intervals have passed).
	Start, End time.Time
	// Intervals is the number of intervals merged (0 before the first tick).
	Intervals int
	// Snapshot holds the intervals' commands (Count and Errors in the
	// window, per phase the window's histogram and exact Sum) and shards,
	// in ID and index order like a Set's; its Totals merges the commands
	// as the Set's does. Its other fields are zero.
	Snapshot *Snapshot
}

// Seconds returns the length of the window in seconds (End − Start).
func (ws *WindowStats) Seconds() float64 { return ws.End.Sub(ws.Start).Seconds() }

// Stats merges the newest intervals that cover d (at least one, at most
// Len) and returns them with their commands' and shards' names. The
// returned stats belong to the caller.
func (w *Window) Stats(d time.Duration) *WindowStats {
	sn := w.set.newSnapshot()
	w.mu.Lock()
	defer w.mu.Unlock()
	now := time.Now()
	w.lastRead = now
	if w.idle > 0 && !w.on {
		// A lazy window starts here: one tick takes the cumulative
		// figures as its baseline and is then forgotten.
		w.on = true
		w.tickLocked(now)
		w.next, w.used = 0, 0
	}
	k := min(max(int((d+w.interval-1)/w.interval), 1), w.used)
	ws := &WindowStats{Intervals: k, Snapshot: sn, Start: w.last, End: w.last}
	n := len(w.slots)
	for i := range k {
		slot := &w.slots[(w.next-1-i+2*n)%n]
		ws.Start = slot.start
		for ci := range min(len(slot.cmds), len(sn.Commands)) {
			add(&sn.Commands[ci].Count, &sn.Commands[ci].Errors, &sn.Commands[ci].Phases, &slot.cmds[ci])
		}
		for si := range min(len(slot.shards), len(sn.Shards)) {
			add(&sn.Shards[si].Count, &sn.Shards[si].Errors, &sn.Shards[si].Phases, &slot.shards[si])
		}
	}
	return ws
}

// add merges the interval entry e into a window's figures.
func add(count, errors *int64, phases *[NumPhases]Durations, e *windowEntry) {
	*count += e.count
	*errors += e.errors
	for p := range phases {
		phases[p].Sum += e.sums[p]
		if h := e.hists[p]; h != nil && h.TotalCount() > 0 {
			if phases[p].sparse == nil {
				phases[p].sparse = newHistogram()
			}
			phases[p].sparse.Merge(h)
		}
	}
}
