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
	// digits; nil when nothing was observed. Its ValueAtQuantile takes a
	// percent (0-100), not a rank (0-1).
	Hist *hdrhistogram.Histogram
	// Sum is the exact sum of the observed durations (negative ones counted
	// as 0, not rounded to microseconds or clamped to the histogram range).
	Sum time.Duration
	// N is the number of observations when Hist is nil (Set.Sums); with a
	// histogram, Count reads it from the histogram.
	N int64
}

// Count returns the number of observed durations.
func (d Durations) Count() int64 {
	if d.Hist == nil {
		return d.N
	}
	return d.Hist.TotalCount()
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
// there are no observations.
func (d Durations) Percentile(pct float64) time.Duration {
	if d.Count() == 0 {
		return 0
	}
	return time.Duration(d.Hist.ValueAtQuantile(pct)) * time.Microsecond
}

// Max returns the largest observed duration, as the highest value equivalent
// to it at 3 significant digits, or 0 if there are no observations.
func (d Durations) Max() time.Duration {
	if d.Count() == 0 {
		return 0
	}
	return time.Duration(d.Hist.Max()) * time.Microsecond
}

// merge adds o into d, allocating d.Hist if needed.
func (d *Durations) merge(o Durations) {
	d.Sum += o.Sum
	if o.Hist == nil {
		d.N += o.N
		return
	}
	if o.Count() == 0 {
		return
	}
	if d.Hist == nil {
		d.Hist = newHistogram()
	}
	d.Hist.Merge(o.Hist) // same geometry: nothing is dropped
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
	var t CommandStats
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
	return t
}

// extras returns the Snapshot's per-loop distributions in extra* order.
func (sn *Snapshot) extras() [numExtra]*Durations {
	return [numExtra]*Durations{&sn.Think, &sn.ClientRTT, &sn.UpstreamRTT, &sn.RedirectPenalty, &sn.ReorderWait}
}

// hists holds one histogram per phase.
type hists [NumPhases]*hdrhistogram.Histogram

// shardHists holds the histograms of one shard.
type shardHists struct {
	phases hists
	batch  *hdrhistogram.Histogram
}

// merger is the reading side of the hot/cold swap. A reader holding mu locks
// each loop just long enough to exchange every non-empty histogram of the loop
// for an empty spare, then, without the loop's lock, merges the swapped-out
// histograms into the cumulative ones, resets them and keeps them as the next
// spares. So a loop is stalled for a few pointer swaps per scrape, never for
// a merge, and all histograms are allocated at most once.
type merger struct {
	mu          sync.Mutex
	spares      [][]hists                           // [loop][cmd]: empty, or swapped out and not yet merged
	extraSpares [][numExtra]*hdrhistogram.Histogram // [loop]
	cmds        []hists                             // [cmd]: cumulative, merged over loops
	extra       [numExtra]*hdrhistogram.Histogram   // cumulative, merged over loops
	// Shards have a fixed number of slots (MaxShards+1 shardHists of
	// pointers, ~3 KB per loop) so that registering one needs no growth here.
	shardSpares [][MaxShards + 1]shardHists // [loop][shard]
	shards      [MaxShards + 1]shardHists   // [shard]: cumulative, merged over loops
}

func (m *merger) init(loops, cmds int) {
	m.spares = make([][]hists, loops)
	for i := range m.spares {
		m.spares[i] = make([]hists, cmds)
	}
	m.extraSpares = make([][numExtra]*hdrhistogram.Histogram, loops)
	m.cmds = make([]hists, cmds)
	m.shardSpares = make([][MaxShards + 1]shardHists, loops)
}

// swap exchanges the histogram *h for *spare if *h holds values. A missing
// spare is allocated here, under the loop's lock, with *h's geometry; that
// happens once per (loop, command or shard, phase or batch).
func swap(h, spare **hdrhistogram.Histogram) {
	if *h == nil || (*h).TotalCount() == 0 {
		return
	}
	if *spare == nil {
		*spare = newLike(*h)
	}
	*h, *spare = *spare, *h
}

// drain merges a swapped-out histogram into *acc, allocating it with the
// spare's geometry if needed, and resets it.
func drain(spare *hdrhistogram.Histogram, acc **hdrhistogram.Histogram) {
	if spare == nil || spare.TotalCount() == 0 {
		return
	}
	if *acc == nil {
		*acc = newLike(spare)
	}
	(*acc).Merge(spare) // same geometry: nothing is dropped
	spare.Reset()
}

// mergeLocked folds every loop's new observations into the cumulative
// histograms and returns a Snapshot that shares them: it is valid only while
// s.merge.mu is held. The caller must hold s.merge.mu.
func (s *Set) mergeLocked() *Snapshot {
	m := &s.merge
	sn := s.newSnapshot()
	for li, l := range s.loops {
		spares, shardSpares := m.spares[li], &m.shardSpares[li]
		l.mu.Lock()
		for ci := range l.cmds {
			lc, sc := &l.cmds[ci], &sn.Commands[ci]
			sc.Count += lc.count
			sc.Errors += lc.errors
			for p := range lc.phases {
				sc.Phases[p].Sum += lc.phases[p].sum
				swap(&lc.phases[p].hist, &spares[ci][p])
			}
		}
		extraSums := sn.extras()
		for x := range l.extra {
			extraSums[x].Sum += l.extra[x].sum
			swap(&l.extra[x].hist, &m.extraSpares[li][x])
		}
		// Shards registered after sn was made wait for the next merge: their
		// histograms stay in the loop, their counters are cumulative.
		for si := range min(len(l.shards), len(sn.Shards)) {
			ls, ss, sp := &l.shards[si], &sn.Shards[si], &shardSpares[si]
			ss.Count += ls.count
			ss.Errors += ls.errors
			for p := range ls.phases {
				ss.Phases[p].Sum += ls.phases[p].sum
				swap(&ls.phases[p].hist, &sp.phases[p])
			}
			ss.Batch.Sum += ls.batch.sum
			swap(&ls.batch.hist, &sp.batch)
		}
		l.mu.Unlock()

		for ci := range spares {
			for p := range spares[ci] {
				drain(spares[ci][p], &m.cmds[ci][p])
			}
		}
		for x := range m.extraSpares[li] {
			drain(m.extraSpares[li][x], &m.extra[x])
		}
		for si := range sn.Shards {
			sp, acc := &shardSpares[si], &m.shards[si]
			for p := range sp.phases {
				drain(sp.phases[p], &acc.phases[p])
			}
			drain(sp.batch, &acc.batch)
		}
	}
	for ci := range sn.Commands {
		for p := range sn.Commands[ci].Phases {
			sn.Commands[ci].Phases[p].Hist = m.cmds[ci][p]
		}
	}
	for x, d := range sn.extras() {
		d.Hist = m.extra[x]
	}
	for si := range sn.Shards {
		ss, acc := &sn.Shards[si], &m.shards[si]
		for p := range ss.Phases {
			ss.Phases[p].Hist = acc.phases[p]
		}
		ss.Batch.Hist = acc.batch
	}
	sn.Routing = s.routing.load()
	sn.Counters = s.Counters()
	return sn
}

// Counters returns the connection and byte counters alone: atomic loads,
// no lock and no histogram copy (a Snapshot copies every histogram, about
// 190 KB each), so it may be polled often.
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

// view merges the loops and calls fn with a Snapshot that shares the Set's
// cumulative histograms; fn must not keep it or modify it. Readers are
// serialized.
func (s *Set) view(fn func(*Snapshot) error) error {
	s.merge.mu.Lock()
	defer s.merge.mu.Unlock()
	return fn(s.mergeLocked())
}

// Snapshot merges the stats of all loops, locking each only long enough to
// swap its histograms out, and returns a copy owned by the caller. It may be
// called from any goroutine, concurrently with recording. Each observed
// (command or shard, phase) costs one histogram copy (~190 KB) per call, each
// shard's batch histogram ~90 KB.
func (s *Set) Snapshot() *Snapshot {
	var out *Snapshot
	_ = s.view(func(sn *Snapshot) error {
		for ci := range sn.Commands {
			for p := range sn.Commands[ci].Phases {
				if h := sn.Commands[ci].Phases[p].Hist; h != nil {
					sn.Commands[ci].Phases[p].Hist = h.Clone()
				}
			}
		}
		for _, d := range sn.extras() {
			if d.Hist != nil {
				d.Hist = d.Hist.Clone()
			}
		}
		for si := range sn.Shards {
			ss := &sn.Shards[si]
			for p := range ss.Phases {
				if h := ss.Phases[p].Hist; h != nil {
					ss.Phases[p].Hist = h.Clone()
				}
			}
			if h := ss.Batch.Hist; h != nil {
				ss.Batch.Hist = h.Clone()
			}
		}
		out = sn
		return nil
	})
	return out
}
