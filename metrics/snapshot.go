package metrics

import (
	"sync"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// Snapshot is a merged view of all loops of a Set at one moment. Its
// histograms record microseconds; use the Durations helpers to read them as
// time.Duration. A Snapshot returned by Set.Snapshot belongs to the caller and
// does not change afterwards.
type Snapshot struct {
	// Commands has one entry per command ID, in ID order, including commands
	// never seen (Count 0, nil histograms).
	Commands []CommandStats
	// Think is the distribution of closed-loop clients' think times.
	Think Durations
	// ClientRTT and UpstreamRTT are the kernel's TCP round-trip estimates
	// (tcpi_rtt) sampled on client and upstream sockets.
	ClientRTT, UpstreamRTT Durations
	// RedirectPenalty is the distribution of the extra time commands spent
	// because of a MOVED or ASK redirect (Loop.RedirectPenaltyLocked).
	RedirectPenalty Durations
	// ReorderWait is the distribution, under hash-slot routing, of the time
	// from a command's reply being complete to its being written to the
	// client: the wait behind earlier commands of the same client still
	// out on slower shards (head-of-line blocking), plus the write itself
	// (Loop.ReorderWaitLocked).
	ReorderWait Durations
	// Shards has one entry per registered shard, indexed by shard index
	// (Set.Shard), including shards never seen (Count 0, nil histograms);
	// empty when no shard is registered.
	Shards []ShardStats
	// Counters holds the connection and byte counters.
	Counters Counters
	// Routing holds the hash-slot routing counters.
	Routing RoutingCounters
	// Excluded marks, by command ID, the commands Totals leaves out (see
	// Set.ExcludeFromTotals); nil when none are.
	Excluded []bool

	// totals, set in a view, is the Set's reused CommandStats that Totals
	// merges into (once per view: totalsDone) and returns.
	totals     *CommandStats
	totalsDone bool
}

// CommandStats is one command's stats merged over all loops.
type CommandStats struct {
	Name   string // label from the names slice given to NewSet
	Count  int64  // commands counted, timed (ObserveLocked) or not (CountLocked)
	Errors int64  // commands answered with an error reply
	// Phases holds the timed commands' durations, indexed by Phase.
	Phases [NumPhases]Durations
}

// Observed reports whether the command was timed at least once, that is
// whether its phase histograms hold any value.
func (c *CommandStats) Observed() bool { return c.Phases[PhaseTotal].Count() > 0 }

// Durations is a merged distribution of durations.
type Durations struct {
	// Hist records whole microseconds, 1 µs .. 1 h, with 3 significant
	// digits: a dense copy in the Snapshots Set.Snapshot returns, nil when
	// nothing was observed. Its ValueAtQuantile takes a percent (0-100),
	// not a rank (0-1). The readers that only look (Set.Register's
	// collector, /stats, Set.WriteTable) see the Set's sparse histogram
	// instead and a nil Hist; Count, Mean, Percentile and Max read either.
	Hist *hdrhistogram.Histogram
	// Sum is the exact sum of the observed durations (negative ones counted
	// as 0, not rounded to microseconds or clamped to the histogram range).
	Sum time.Duration
	// N is the number of observations when there is no histogram
	// (Set.Sums); with one, Count reads it from the histogram.
	N int64

	sparse *hdrhistogram.PackedHistogram // a view's: the Set's cumulative histogram
}

// hist returns the histogram d reads from, or nil.
func (d Durations) hist() histReader { return histOf(d.Hist, d.sparse) }

// Sparse returns the Set's sparse histogram that a view shares (Set.Interval),
// in microseconds with Hist's geometry, or nil (always nil in the Snapshots
// Set.Snapshot returns, which have Hist instead). It belongs to the Set:
// read it only while the view is valid, and do not change its counts (its
// tag and times, which only interval log writers read, may be set).
func (d Durations) Sparse() *hdrhistogram.PackedHistogram { return d.sparse }

// Count returns the number of observed durations.
func (d Durations) Count() int64 {
	if h := d.hist(); h != nil {
		return h.TotalCount()
	}
	return d.N
}

// Mean returns the exact mean of the observed durations (Sum / Count), or 0
// if there are none.
func (d Durations) Mean() time.Duration {
	n := d.Count()
	if n == 0 {
		return 0
	}
	return d.Sum / time.Duration(n)
}

// Percentile returns the duration at percent pct (0-100, so 99.9 is the 99.9th
// percentile): the highest value equivalent, at 3 significant digits, to the
// one that pct percent of the observations are at or below. It returns 0 if
// there are no observations or no histogram (Set.Sums).
func (d Durations) Percentile(pct float64) time.Duration {
	h := d.hist()
	if h == nil || h.TotalCount() == 0 {
		return 0
	}
	return time.Duration(h.ValueAtPercentile(pct)) * time.Microsecond
}

// Max returns the largest observed duration, as the highest value equivalent
// to it at 3 significant digits, or 0 if there are no observations or no
// histogram (Set.Sums).
func (d Durations) Max() time.Duration {
	h := d.hist()
	if h == nil || h.TotalCount() == 0 {
		return 0
	}
	return time.Duration(h.Max()) * time.Microsecond
}

// merge adds o into d: into d.Hist (allocated if needed) if o has a dense
// histogram, into d.sparse if o has a sparse one, else into d.N.
func (d *Durations) merge(o Durations) {
	d.Sum += o.Sum
	switch {
	case o.Hist != nil:
		if o.Hist.TotalCount() == 0 {
			return
		}
		if d.Hist == nil {
			d.Hist = newDense()
		}
		d.Hist.Merge(o.Hist) // same geometry: nothing is dropped
	case o.sparse != nil:
		if o.sparse.TotalCount() == 0 {
			return
		}
		if d.sparse == nil {
			d.sparse = newHistogram()
		}
		d.sparse.Merge(o.sparse)
	default:
		d.N += o.N
	}
}

// Counters are the connection and byte counters of a Set.
type Counters struct {
	ClientConns      int64 // client connections open now
	ClientConnsTotal int64 // client connections accepted
	ClientsRejected  int64 // client connections refused at the client limit
	// Clients disconnected for crossing a memory limit (ClientEvicted), by reason.
	ClientsEvictedOutputLimit int64
	ClientsEvictedQueryLimit  int64
	ClientsEvictedOther       int64
	UpstreamConns             int64 // upstream connections open now
	UpstreamDialErrors        int64 // failed upstream dials
	UpstreamLost              int64 // upstream connections lost with commands pending
	ProtocolErrors            int64 // clients closed for malformed input
	ClientReadBytes           int64 // bytes read from clients
	ClientWrittenBytes        int64 // bytes written to clients
	UpstreamReadBytes         int64 // bytes read from the engine
	UpstreamWrittenBytes      int64 // bytes written to the engine
}

// Totals returns the stats of all commands merged, except those excluded
// with Set.ExcludeFromTotals: summed counts and errors, and per phase one
// histogram over every command. Its Name is empty.
func (sn *Snapshot) Totals() CommandStats {
	if t := sn.totals; t != nil { // a view: merge into the reused histograms
		if !sn.totalsDone {
			t.Count, t.Errors = 0, 0
			for p := range t.Phases {
				if h := t.Phases[p].sparse; h != nil {
					h.Reset()
				}
				t.Phases[p].Sum = 0
			}
			sn.mergeTotals(t)
			sn.totalsDone = true
		}
		return *t
	}
	var t CommandStats
	sn.mergeTotals(&t)
	return t
}

// mergeTotals merges every command that Totals covers into t.
func (sn *Snapshot) mergeTotals(t *CommandStats) {
	for i := range sn.Commands {
		if i < len(sn.Excluded) && sn.Excluded[i] {
			continue
		}
		c := &sn.Commands[i]
		t.Count += c.Count
		t.Errors += c.Errors
		for p := range t.Phases {
			t.Phases[p].merge(c.Phases[p])
		}
	}
}

// extras returns the Snapshot's per-loop distributions in extra* order.
func (sn *Snapshot) extras() [numExtra]*Durations {
	return [numExtra]*Durations{&sn.Think, &sn.ClientRTT, &sn.UpstreamRTT, &sn.RedirectPenalty, &sn.ReorderWait}
}

// hists holds one histogram per phase.
type hists [NumPhases]*hdrhistogram.PackedHistogram

// shardHists holds the histograms of one shard.
type shardHists struct {
	phases hists
	batch  *hdrhistogram.PackedHistogram
}

// merger is the reading side of the hot/cold swap. A reader holding mu locks
// each loop once per command (once per shard, once for the per-loop
// distributions) just long enough to copy that command's new values into
// the loop's swap buffer and reset them, then, without the loop's lock,
// merges the swap buffer into the cumulative histograms. So a loop is
// stalled for one command's copy at a time, never for a merge, and the
// scrape side holds one swap buffer per loop and one cumulative histogram
// per observed (command or shard, phase): no spare per histogram, nothing
// allocated per scrape that outlives it once the histograms have grown to
// the buckets they hold.
type merger struct {
	mu     sync.Mutex
	swaps  []swapBuf                               // [loop]
	cmds   []hists                                 // [cmd]: cumulative, merged over loops
	extra  [numExtra]*hdrhistogram.PackedHistogram // cumulative, merged over loops
	shards [MaxShards + 1]shardHists               // [shard]: cumulative, merged over loops
	// view is the Snapshot that views (Set.view) fill and share, reused from
	// scrape to scrape, and totals what its Totals merges into.
	view   Snapshot
	totals CommandStats
	// ivl is Set.Interval's state: what was merged since its last call.
	ivl intervals
}

func (m *merger) init(loops, cmds int) {
	m.swaps = make([]swapBuf, loops)
	m.cmds = make([]hists, cmds)
	m.ivl.cmds = make([]hists, cmds)
	m.ivl.prevCmds = make([]sums, cmds)
}

// mergeLocked folds every loop's new observations into the cumulative
// histograms and fills sn (which newSnapshot or resetView prepared) so that
// it shares them: sn's histograms are valid only while s.merge.mu is held.
// The caller must hold s.merge.mu.
func (s *Set) mergeLocked(sn *Snapshot) {
	m := &s.merge
	extras := sn.extras()
	for li, l := range s.loops {
		sw := &m.swaps[li]
		for ci := range l.cmds {
			lc, sc := &l.cmds[ci], &sn.Commands[ci]
			l.mu.Lock()
			sc.Count += lc.count
			sc.Errors += lc.errors
			for p := range lc.phases {
				sc.Phases[p].Sum += lc.phases[p].sum
				sw.durs[p].takeFrom(&lc.phases[p].rec, newHistogram)
			}
			l.mu.Unlock()
			for p := range lc.phases {
				drain(&sw.durs[p], &m.cmds[ci][p], m.ivl.track(&m.ivl.cmds[ci][p]), newHistogram)
			}
		}
		l.mu.Lock()
		for x := range l.extra {
			extras[x].Sum += l.extra[x].sum
			sw.durs[x].takeFrom(&l.extra[x].rec, newHistogram)
		}
		// Shards registered after sn was made wait for the next merge: their
		// histograms stay in the loop, their counters are cumulative.
		shards := min(len(l.shards), len(sn.Shards))
		l.mu.Unlock()
		for x := range m.extra {
			drain(&sw.durs[x], &m.extra[x], m.ivl.track(&m.ivl.extra[x]), newHistogram)
		}
		for si := range shards {
			ss, acc := &sn.Shards[si], &m.shards[si]
			l.mu.Lock()
			ls := &l.shards[si] // l.shards grows under the lock
			ss.Count += ls.count
			ss.Errors += ls.errors
			for p := range ls.phases {
				ss.Phases[p].Sum += ls.phases[p].sum
				sw.durs[p].takeFrom(&ls.phases[p].rec, newHistogram)
			}
			ss.Batch.Sum += ls.batch.sum
			sw.batch.takeFrom(&ls.batch.rec, newBatchHistogram)
			l.mu.Unlock()
			for p := range acc.phases {
				drain(&sw.durs[p], &acc.phases[p], m.ivl.track(&m.ivl.shards[si].phases[p]), newHistogram)
			}
			drain(&sw.batch, &acc.batch, m.ivl.track(&m.ivl.shards[si].batch), newBatchHistogram)
		}
	}
	for ci := range sn.Commands {
		for p := range sn.Commands[ci].Phases {
			sn.Commands[ci].Phases[p].sparse = m.cmds[ci][p]
		}
	}
	for x, d := range extras {
		d.sparse = m.extra[x]
	}
	for si := range sn.Shards {
		ss, acc := &sn.Shards[si], &m.shards[si]
		for p := range ss.Phases {
			ss.Phases[p].sparse = acc.phases[p]
		}
		ss.Batch.sparse = acc.batch
	}
	sn.Routing = s.routing.load()
	sn.Counters = s.Counters()
}

// Counters returns the connection and byte counters alone: atomic loads,
// no lock and no histogram copy (a Snapshot makes a dense copy of every
// histogram, 188 KB each), so it may be polled often.
func (s *Set) Counters() Counters {
	var bytes [numByteCounters]int64
	for _, l := range s.loops {
		for i := range bytes {
			bytes[i] += l.bytes[i].Load()
		}
	}
	return Counters{
		ClientConns:               s.clientConns.Load(),
		ClientConnsTotal:          s.clientConnsTotal.Load(),
		ClientsRejected:           s.clientsRejected.Load(),
		ClientsEvictedOutputLimit: s.clientsEvicted[evictOutputLimit].Load(),
		ClientsEvictedQueryLimit:  s.clientsEvicted[evictQueryLimit].Load(),
		ClientsEvictedOther:       s.clientsEvicted[evictOther].Load(),
		UpstreamConns:             s.upstreamConns.Load(),
		UpstreamDialErrors:        s.upstreamDialErrors.Load(),
		UpstreamLost:              s.upstreamLost.Load(),
		ProtocolErrors:            s.protocolErrors.Load(),
		ClientReadBytes:           bytes[clientReadBytes],
		ClientWrittenBytes:        bytes[clientWrittenBytes],
		UpstreamReadBytes:         bytes[upstreamReadBytes],
		UpstreamWrittenBytes:      bytes[upstreamWrittenBytes],
	}
}

// Sums returns the counts and exact sums of every command's phases and of
// the per-loop distributions (think time, TCP RTT), without touching any
// histogram: a cheap Snapshot whose Durations have a nil Hist and N set, so
// Count, Mean and Totals work but percentiles do not. It locks each loop
// only to read its counters. Use it for per-interval arithmetic (the
// verdict) where a full Snapshot's histogram copies would cost too much.
func (s *Set) Sums() *Snapshot {
	sn := s.newSnapshot()
	extras := sn.extras()
	for _, l := range s.loops {
		l.mu.Lock()
		for ci := range l.cmds {
			lc, sc := &l.cmds[ci], &sn.Commands[ci]
			sc.Count += lc.count
			sc.Errors += lc.errors
			for p := range lc.phases {
				sc.Phases[p].Sum += lc.phases[p].sum
				sc.Phases[p].N += lc.phases[p].n
			}
		}
		for x := range l.extra {
			extras[x].Sum += l.extra[x].sum
			extras[x].N += l.extra[x].n
		}
		for si := range min(len(l.shards), len(sn.Shards)) {
			ls, ss := &l.shards[si], &sn.Shards[si]
			ss.Count += ls.count
			ss.Errors += ls.errors
			for p := range ls.phases {
				ss.Phases[p].Sum += ls.phases[p].sum
				ss.Phases[p].N += ls.phases[p].n
			}
			ss.Batch.Sum += ls.batch.sum
			ss.Batch.N += ls.batch.n
		}
		l.mu.Unlock()
	}
	sn.Routing = s.routing.load()
	sn.Counters = s.Counters()
	return sn
}

// newSnapshot returns an empty Snapshot with the command and shard names
// filled in: one CommandStats per command ID, one ShardStats per shard
// registered now.
func (s *Set) newSnapshot() *Snapshot {
	shards := s.shards.list()
	sn := &Snapshot{
		Commands: make([]CommandStats, len(s.names)),
		Shards:   make([]ShardStats, len(shards)),
		Excluded: s.excludedCopy(),
	}
	for i := range sn.Commands {
		sn.Commands[i].Name = s.names[i]
	}
	for i := range sn.Shards {
		sn.Shards[i].Name = shards[i]
	}
	return sn
}

// resetView empties the Set's reused view Snapshot, as newSnapshot would
// make it but reusing its slices, and returns it. The caller must hold
// s.merge.mu.
func (s *Set) resetView() *Snapshot {
	sn := &s.merge.view
	shards := s.shards.list()
	if sn.Commands == nil {
		sn.Commands = make([]CommandStats, len(s.names))
		sn.Shards = make([]ShardStats, 0, MaxShards+1)
	}
	for i := range sn.Commands {
		sn.Commands[i] = CommandStats{Name: s.names[i]}
	}
	sn.Shards = sn.Shards[:len(shards)]
	for i := range sn.Shards {
		sn.Shards[i] = ShardStats{Name: shards[i]}
	}
	sn.Think, sn.ClientRTT, sn.UpstreamRTT, sn.RedirectPenalty, sn.ReorderWait = Durations{}, Durations{}, Durations{}, Durations{}, Durations{}
	s.exclMu.Lock()
	sn.Excluded = append(sn.Excluded[:0], s.excluded...)
	s.exclMu.Unlock()
	if len(sn.Excluded) == 0 {
		sn.Excluded = nil
	}
	sn.totals, sn.totalsDone = &s.merge.totals, false
	return sn
}

// view merges the loops and calls fn with a Snapshot that shares the Set's
// cumulative histograms, reused from call to call; fn must not keep it or
// modify it. Readers are serialized.
func (s *Set) view(fn func(*Snapshot) error) error {
	s.merge.mu.Lock()
	defer s.merge.mu.Unlock()
	sn := s.resetView()
	s.mergeLocked(sn)
	return fn(sn)
}

// Snapshot merges the stats of all loops, locking each only long enough to
// copy its new values out, and returns a copy owned by the caller, with
// dense histograms (Durations.Hist, Counts.Hist). It may be called from any
// goroutine, concurrently with recording. Each observed (command or shard,
// phase) costs one dense histogram (~188 KB) per call, each shard's batch
// histogram ~90 KB: the scrapes (Register's collector, StatsHandler,
// WriteTable) read the Set's sparse histograms in place instead.
func (s *Set) Snapshot() *Snapshot {
	s.merge.mu.Lock()
	defer s.merge.mu.Unlock()
	sn := s.newSnapshot()
	s.mergeLocked(sn)
	for ci := range sn.Commands {
		for p := range sn.Commands[ci].Phases {
			toDense(&sn.Commands[ci].Phases[p])
		}
	}
	for _, d := range sn.extras() {
		toDense(d)
	}
	for si := range sn.Shards {
		ss := &sn.Shards[si]
		for p := range ss.Phases {
			toDense(&ss.Phases[p])
		}
		if h := ss.Batch.sparse; h != nil {
			ss.Batch.Hist = newDenseBatch()
			h.MergeInto(ss.Batch.Hist)
			ss.Batch.sparse = nil
		}
	}
	return sn
}

// toDense replaces d's shared sparse histogram, if any, with a dense copy.
func toDense(d *Durations) {
	if d.sparse == nil {
		return
	}
	d.Hist = newDense()
	d.sparse.MergeInto(d.Hist) // same geometry: nothing is dropped
	d.sparse = nil
}
