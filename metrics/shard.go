package metrics

import (
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// Per-shard stats: with hash-slot routing the proxy sends each command to one
// of several upstreams (shards), and may write several commands to a shard's
// upstream connection at once. Shards are identified by a small index that
// Set.Shard hands out for a label (the shard's address); loops record under
// that index with the Shard*Locked methods, like commands under their ID.

// MaxShards bounds the shard label's values; shards registered beyond it share the label "other".
//
// The label takes at most MaxShards+1 values: up to MaxShards shard names,
// each with its own index, and "other", the index that every later name (and
// the names "" and "other") is given. Shard indexes are therefore in
// [0, MaxShards].
const MaxShards = 64

// otherShard is the label of the shared overflow shard index.
const otherShard = "other"

// Batch histogram geometry: commands per upstream write, a unit-less count.
// Values up to 2047 are recorded exactly; larger ones within 0.1%.
const (
	batchLowest  = 1
	batchHighest = 1 << 20 // larger batches are recorded as 1 << 20 (the exact sum is kept apart)
	batchSigFigs = 3
)

// newBatchHistogram allocates an empty sparse histogram of the batch
// geometry (allocated on the first batch of each loop and shard; it holds
// only the buckets that received values, as newHistogram's).
func newBatchHistogram() *hdrhistogram.PackedHistogram {
	return hdrhistogram.NewPacked(batchLowest, batchHighest, batchSigFigs)
}

// newDenseBatch allocates an empty dense histogram of the batch geometry
// (~90 KB): the caller-owned copies of Set.Snapshot.
func newDenseBatch() *hdrhistogram.Histogram {
	return hdrhistogram.New(batchLowest, batchHighest, batchSigFigs)
}

// shardRegistry maps shard labels to indexes. names is append-only and its
// backing array (MaxShards+1 entries) is allocated once, so a prefix read
// under mu stays valid, unchanged, after mu is released.
type shardRegistry struct {
	mu    sync.Mutex
	index map[string]int // label -> index
	names []string       // by index
	named int            // entries of names other than "other"
}

// Shard returns the stable index of the shard labelled name, its address
// such as "127.0.0.1:7001", registering the label on first use; Loops record
// the shard's stats under that index (ShardObserveLocked and friends) and
// the exports show them under the label. It is idempotent: the same name
// always gets the same index. Indexes are handed out densely from 0 in
// registration order, one per name, for up to MaxShards names; after that
// every new name shares the index labelled "other" (as do "" and "other"
// themselves), so the result is always in [0, MaxShards]. Invalid UTF-8 in
// name is replaced by U+FFFD, as Prometheus label values must be UTF-8.
//
// Shard is safe for concurrent use. It takes a mutex and looks the name up
// in a map: cheap, but not meant for the hot path; callers look a shard's
// index up once and keep it.
func (s *Set) Shard(name string) int {
	name = strings.ToValidUTF8(name, "\uFFFD")
	if name == "" {
		name = otherShard
	}
	r := &s.shards
	r.mu.Lock()
	defer r.mu.Unlock()
	if i, ok := r.index[name]; ok {
		return i
	}
	if name != otherShard && r.named >= MaxShards {
		name = otherShard
		if i, ok := r.index[name]; ok {
			return i
		}
	}
	if r.index == nil {
		r.index = make(map[string]int)
		r.names = make([]string, 0, MaxShards+1)
	}
	i := len(r.names)
	r.names = append(r.names, name)
	r.index[name] = i
	if name != otherShard {
		r.named++
	}
	return i
}

// ShardNames returns the registered shard labels, indexed by shard index
// (see Shard), in a new slice the caller owns: at most MaxShards+1 of them,
// including "other" once a name has overflowed. Safe for concurrent use.
func (s *Set) ShardNames() []string {
	return append([]string(nil), s.shards.list()...)
}

// list returns the registered labels, sharing the registry's backing array:
// the caller must not modify the slice.
func (r *shardRegistry) list() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.names[:len(r.names):len(r.names)]
}

// shardStats is one shard's cumulative stats in one loop.
type shardStats struct {
	count  int64 // commands counted, timed or not
	errors int64 // of which answered with an error reply
	phases [NumPhases]timing
	batch  tally // commands per upstream write
}

// tally is one distribution of unit-less counts in one loop, as timing is
// for durations.
type tally struct {
	// rec records values since the last scrape took them, clamped to
	// [batchLowest, batchHighest].
	rec rec
	sum int64 // cumulative exact sum of the observed values
	n   int64 // cumulative count of observations
}

// observe records v, which must be >= 1.
func (t *tally) observe(v int64) {
	t.sum += v
	t.n++
	t.rec.record(min(v, batchHighest), newBatchHistogram)
}

// shard returns the stats of shard index i, growing l.shards up to i if
// needed, or nil if i is outside [0, MaxShards]. The first call allocates
// room for every index Shard can return, so growing later is a reslice: the
// entries past the old length have never been used and are still zero. The
// caller holds the lock, so scrapes see the new length only under it.
func (l *Loop) shard(i int) *shardStats {
	if uint(i) < uint(len(l.shards)) {
		return &l.shards[i]
	}
	if uint(i) > MaxShards {
		return nil
	}
	if l.shards == nil {
		l.shards = make([]shardStats, 0, MaxShards+1)
	}
	l.shards = l.shards[:i+1]
	return &l.shards[i]
}

// ShardObserveLocked records one timed command sent to shard (an index from
// Set.Shard): it counts the command for the shard, and an error if isErr, and
// records total, upstream, proxy, service and queue durations into the
// shard's histograms by the same rules as ObserveLocked (negative durations
// count as 0; whole microseconds rounded up and clamped to 1 µs .. 1 h).
// There is no per-command split: the command's own stats are recorded with
// ObserveLocked, separately. A shard outside [0, MaxShards] is ignored. The
// caller must hold the lock.
func (l *Loop) ShardObserveLocked(shard int, total, upstream, service time.Duration, isErr bool) {
	l.ShardObserveInjectedLocked(shard, total, upstream, service, 0, isErr)
}

// ShardObserveInjectedLocked is ShardObserveLocked for a command that a
// fault injection rule delayed by injected (or that waited behind such a
// command), total holding it: injected is its own phase (PhaseInjected)
// and proxy = total - upstream - injected, as ObserveInjectedLocked
// records the command's own stats.
func (l *Loop) ShardObserveInjectedLocked(shard int, total, upstream, service, injected time.Duration, isErr bool) {
	sh := l.shard(shard)
	if sh == nil {
		return
	}
	sh.count++
	if isErr {
		sh.errors++
	}
	observePhases(&sh.phases, total, upstream, service, injected)
}

// ShardTLSLocked records d as the PhaseTLS of one command of a TLS client
// sent to shard, after its ShardObserveLocked (whose total already holds
// d), as TLSLocked does for the command's own stats. A shard outside [0,
// MaxShards] is ignored. The caller must hold the lock.
func (l *Loop) ShardTLSLocked(shard int, d time.Duration) {
	if sh := l.shard(shard); sh != nil {
		sh.phases[PhaseTLS].observe(max(d, 0))
	}
}

// ShardCountLocked counts a command sent to shard, and an error if isErr,
// without timing it (as CountLocked). A shard outside [0, MaxShards] is
// ignored. The caller must hold the lock.
func (l *Loop) ShardCountLocked(shard int, isErr bool) {
	sh := l.shard(shard)
	if sh == nil {
		return
	}
	sh.count++
	if isErr {
		sh.errors++
	}
}

// ShardBatchLocked records n, the number of commands carried by one write
// to shard's upstream connection: the effective pipeline depth. n < 1 is
// ignored (a write carries at least one command); n above 1<<20 is recorded
// in the histogram as 1<<20 but counted exactly in the mean. A shard outside
// [0, MaxShards] is ignored. The caller must hold the lock.
func (l *Loop) ShardBatchLocked(shard int, n int) {
	if n < 1 {
		return
	}
	if sh := l.shard(shard); sh != nil {
		sh.batch.observe(int64(n))
	}
}

// ReorderWaitLocked records d, the time a routed command's complete reply
// waited before it was written to the client (behind earlier replies of the
// same client from slower shards: head-of-line blocking). Negative d counts
// as 0. The caller must hold the lock.
func (l *Loop) ReorderWaitLocked(d time.Duration) {
	l.extra[extraReorderWait].observe(max(d, 0))
}

// RedirectPenaltyLocked records d, the extra time a command spent because
// of a MOVED or ASK redirect: from the redirect's arrival to the final
// reply, or however the caller measures what the redirect cost. Negative d
// counts as 0; recorded like ObserveLocked's durations. The caller must hold
// the lock.
func (l *Loop) RedirectPenaltyLocked(d time.Duration) {
	l.extra[extraRedirectPenalty].observe(max(d, 0))
}

// routingCounters are a Set's hash-slot routing counters; any goroutine may
// update them.
type routingCounters struct {
	moved, ask      atomic.Int64
	tryAgain        atomic.Int64
	pinnedMisroutes atomic.Int64
	crossSlot       atomic.Int64
	sharedStalls    atomic.Int64
	handoffs        [numHandoffReasons]atomic.Int64 // by handoffReason
	topology        [numTopologyKinds]atomic.Int64  // by TopologyKind
}

// TopologyKind is a kind of change to a cluster's shard map that the proxy
// saw (Set.TopologyEvent); its String is the value of the kind label.
type TopologyKind int

// The kinds of topology change.
const (
	// TopologySlotMoved: a -MOVED reply named a new owner for its slot
	// (Redis Cluster specification, "Redirection and resharding"; a
	// CLUSTER MIGRATESLOTS cut-over or a resharding seen by a request).
	TopologySlotMoved TopologyKind = iota
	// TopologySlotsReassigned: a refresh of the map (CLUSTER SHARDS or
	// SLOTS) found slots owned by another master than before.
	TopologySlotsReassigned
	// TopologyMastersChanged: a refresh found a master that joined or
	// left the map (a failover, a node added or removed).
	TopologyMastersChanged
	numTopologyKinds
)

func (k TopologyKind) String() string {
	switch k {
	case TopologySlotMoved:
		return "slot_moved"
	case TopologySlotsReassigned:
		return "slots_reassigned"
	case TopologyMastersChanged:
		return "masters_changed"
	}
	return "other"
}

// TopologyEvent counts one change of the cluster's shard map of kind k.
func (s *Set) TopologyEvent(k TopologyKind) {
	if k >= 0 && k < numTopologyKinds {
		s.routing.topology[k].Add(1)
	}
}

// Redirect counts one followed redirect: an -ASK reply if ask, else -MOVED.
func (s *Set) Redirect(ask bool) {
	if ask {
		s.routing.ask.Add(1)
	} else {
		s.routing.moved.Add(1)
	}
}

// TryAgain counts one -TRYAGAIN reply the proxy retried (the Redis Cluster
// answer to a multi-key command whose keys a migration split).
func (s *Set) TryAgain() { s.routing.tryAgain.Add(1) }

// PinnedMisroute counts a command sent, in pinned routing, to a shard that
// does not own its key's hash slot.
func (s *Set) PinnedMisroute() { s.routing.pinnedMisroutes.Add(1) }

// CrossSlot counts a command the proxy answered with -CROSSSLOT itself,
// without sending it upstream.
func (s *Set) CrossSlot() { s.routing.crossSlot.Add(1) }

// SharedStall counts a shared upstream connection taken out of use because
// its oldest request had no reply for a while (a script or CLIENT PAUSE
// holding it).
func (s *Set) SharedStall() { s.routing.sharedStalls.Add(1) }

// handoffReason indexes routingCounters.handoffs; its String is the value of
// the reason label.
type handoffReason int

const (
	handoffPubSub handoffReason = iota
	handoffMonitor
	handoffBlocking
	handoffTransaction
	handoffState
	handoffOther
	numHandoffReasons
)

func (r handoffReason) String() string {
	switch r {
	case handoffPubSub:
		return "pubsub"
	case handoffMonitor:
		return "monitor"
	case handoffBlocking:
		return "blocking"
	case handoffTransaction:
		return "transaction"
	case handoffState:
		return "state"
	}
	return "other"
}

// Handoff counts a client moved from the shared upstream connections to a
// private one. reason is one of "pubsub", "monitor", "blocking",
// "transaction" and "state" (connection state such as SELECT or CLIENT
// TRACKING); any other value is counted as "other", so the label stays
// bounded.
func (s *Set) Handoff(reason string) {
	r := handoffOther
	for i := range numHandoffReasons - 1 { // all but other
		if reason == i.String() {
			r = i
			break
		}
	}
	s.routing.handoffs[r].Add(1)
}

// load reads the counters into a RoutingCounters.
func (c *routingCounters) load() RoutingCounters {
	return RoutingCounters{
		RedirectsMoved:      c.moved.Load(),
		RedirectsAsk:        c.ask.Load(),
		TryAgainRetries:     c.tryAgain.Load(),
		PinnedMisroutes:     c.pinnedMisroutes.Load(),
		CrossSlotReplies:    c.crossSlot.Load(),
		SharedStalls:        c.sharedStalls.Load(),
		HandoffsPubSub:      c.handoffs[handoffPubSub].Load(),
		HandoffsMonitor:     c.handoffs[handoffMonitor].Load(),
		HandoffsBlocking:    c.handoffs[handoffBlocking].Load(),
		HandoffsTransaction: c.handoffs[handoffTransaction].Load(),
		HandoffsState:       c.handoffs[handoffState].Load(),
		HandoffsOther:       c.handoffs[handoffOther].Load(),
		TopologySlotMoved:   c.topology[TopologySlotMoved].Load(),
		TopologyReassigned:  c.topology[TopologySlotsReassigned].Load(),
		TopologyMasters:     c.topology[TopologyMastersChanged].Load(),
	}
}

// RoutingCounters are the hash-slot routing counters of a Set.
type RoutingCounters struct {
	RedirectsMoved   int64 // -MOVED redirects followed (Set.Redirect)
	RedirectsAsk     int64 // -ASK redirects followed
	TryAgainRetries  int64 // -TRYAGAIN replies retried (Set.TryAgain)
	PinnedMisroutes  int64 // commands sent, pinned, to a shard not owning their slot
	CrossSlotReplies int64 // -CROSSSLOT replies the proxy gave itself
	SharedStalls     int64 // shared upstream connections taken out of use as stalled
	// Clients moved to a private upstream connection (Set.Handoff), by reason.
	HandoffsPubSub      int64
	HandoffsMonitor     int64
	HandoffsBlocking    int64
	HandoffsTransaction int64
	HandoffsState       int64
	HandoffsOther       int64
	// Changes of the cluster's shard map (Set.TopologyEvent), by kind.
	TopologySlotMoved  int64
	TopologyReassigned int64
	TopologyMasters    int64
}

// topologyEvents returns the topology counters in TopologyKind order.
func (c RoutingCounters) topologyEvents() []int64 {
	return []int64{c.TopologySlotMoved, c.TopologyReassigned, c.TopologyMasters}
}

// handoffs returns the handoff counters in handoffReason order.
func (r RoutingCounters) handoffs() [numHandoffReasons]int64 {
	return [numHandoffReasons]int64{
		r.HandoffsPubSub, r.HandoffsMonitor, r.HandoffsBlocking,
		r.HandoffsTransaction, r.HandoffsState, r.HandoffsOther,
	}
}

// ShardStats is one shard's stats merged over all loops.
type ShardStats struct {
	Name   string // label given to Set.Shard: the shard's address, or "other"
	Count  int64  // commands sent to the shard, timed (ShardObserveLocked) or not (ShardCountLocked)
	Errors int64  // of which answered with an error reply
	// Phases holds the timed commands' durations, indexed by Phase, as in
	// CommandStats.
	Phases [NumPhases]Durations
	// Batch is the distribution of commands per write to the shard's
	// upstream connection (ShardBatchLocked).
	Batch Counts
}

// Observed reports whether a command sent to the shard was timed at least
// once, that is whether its phase histograms hold any value.
func (s *ShardStats) Observed() bool { return s.Phases[PhaseTotal].Count() > 0 }

// Counts is a merged distribution of unit-less counts, such as the commands
// carried by one upstream write.
type Counts struct {
	// Hist records the values, 1 .. 1<<20 (larger ones as 1<<20), with 3
	// significant digits, so values up to 2047 exactly: a dense copy in the
	// Snapshots Set.Snapshot returns, nil when nothing was observed (and in
	// the views the scrapes read, as Durations.Hist). Its ValueAtQuantile
	// takes a percent (0-100).
	Hist *hdrhistogram.Histogram
	// Sum is the exact sum of the observed values (not clamped).
	Sum int64
	// N is the number of observations when there is no histogram
	// (Set.Sums); with one, Count reads it from the histogram.
	N int64

	sparse *hdrhistogram.PackedHistogram // a view's: the Set's cumulative histogram
}

// hist returns the histogram c reads from, or nil.
func (c Counts) hist() histReader { return histOf(c.Hist, c.sparse) }

// Count returns the number of observed values.
func (c Counts) Count() int64 {
	if h := c.hist(); h != nil {
		return h.TotalCount()
	}
	return c.N
}

// Mean returns the exact mean of the observed values (Sum / Count), or 0 if
// there are none.
func (c Counts) Mean() float64 {
	n := c.Count()
	if n == 0 {
		return 0
	}
	return float64(c.Sum) / float64(n)
}

// Percentile returns the value at percent pct (0-100): the highest value
// equivalent, at 3 significant digits, to the one that pct percent of the
// observations are at or below. It returns 0 if there are no observations
// or no histogram (Set.Sums).
func (c Counts) Percentile(pct float64) int64 {
	h := c.hist()
	if h == nil || h.TotalCount() == 0 {
		return 0
	}
	return h.ValueAtPercentile(pct)
}

// Max returns the largest observed value, as the highest value equivalent to
// it at 3 significant digits, or 0 if there are no observations or no
// histogram (Set.Sums).
func (c Counts) Max() int64 {
	h := c.hist()
	if h == nil || h.TotalCount() == 0 {
		return 0
	}
	return h.Max()
}
