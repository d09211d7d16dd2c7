// Package metrics records respmeter's per-command timings and connection
// counters and exports them as Prometheus metrics, a /stats JSON document and
// a memtier_benchmark-style text table.
//
// It is a leaf: callers identify commands by small integer IDs and give the
// label for each ID once, in the names slice passed to NewSet. Labels never
// come from client input.
//
// Units: durations are recorded in sparse HdrHistograms in whole
// microseconds (1 µs .. 1 h, 3 significant digits); everything exported (Prometheus,
// /stats) is in seconds, and the text table is in milliseconds.
//
// Concurrency: each event loop owns one Loop and is its only writer. The loop
// goroutine takes Loop.Lock once per read/write batch and calls the *Locked
// methods in between; readers (Snapshot, the Prometheus collector, /stats,
// WriteTable) take the same mutex briefly, once per command (or shard) of
// each loop, to copy that command's new values into the loop's one swap
// buffer and reset them (a hot/cold swap, as in client_golang's histogram,
// with one cold side per loop instead of one per histogram), then merge the
// swap buffer into the Set's cumulative histograms outside the loop's lock. Connection and byte counters are atomics that any
// goroutine may update. There is no package-level state: every Set is
// independent.
//
// With hash-slot routing, each command is also recorded for the shard
// (upstream) it went to, under a small index that Set.Shard gives each
// shard's address, as commands are under their IDs: per-shard phases,
// counts and upstream batch sizes, plus routing counters (redirects,
// misroutes, CROSSSLOT replies, handoffs). See shard.go.
package metrics

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"

	"github.com/respmeter/respmeter/metrics/heat"
)

// Phase names one of the durations measured for each command.
type Phase uint8

const (
	// PhaseTotal is t_out - t_in: from reading the request off the client
	// connection to writing the reply back.
	PhaseTotal Phase = iota
	// PhaseUpstream is t_reply - t_sent: from sending the request to the
	// engine to reading its reply.
	PhaseUpstream
	// PhaseProxy is total - upstream, clamped at 0: the time the proxy
	// itself added.
	PhaseProxy
	// PhaseService is t_reply(i) - max(t_sent(i), t_reply(i-1)) on one
	// connection: the part of upstream during which this command, not an
	// earlier one of the same pipeline, was being answered.
	PhaseService
	// PhaseQueue is upstream - service, clamped at 0: the time the command
	// waited upstream behind earlier commands of its own pipeline.
	PhaseQueue
	// PhaseInjected is the delay a fault injection rule added before the
	// request was sent (respmeter proxy --inject), recorded only for
	// requests a rule touched; it is part of total and of no other phase
	// (proxy = total - upstream - injected).
	PhaseInjected
	// PhaseTLS is the time the proxy spent decrypting a TLS client's
	// requests and encrypting its replies (crypto/tls, beyond the socket
	// reads and writes under it), booked to the commands of the read batch
	// it precedes (proxy.Config.TLSListen: "Measuring TLS" in docs/tls.md);
	// recorded only for commands of TLS clients. It is part of total and of
	// proxy (a sub-phase: proxy = total - upstream - injected, tls
	// included). The engine's TLS work, and the proxy's on its engine
	// connections, are in upstream.
	PhaseTLS
	// NumPhases is the number of phases; it is not a phase.
	NumPhases
)

// String returns the phase's label value: "total", "upstream", "proxy",
// "service", "queue", "injected" or "tls".
func (p Phase) String() string {
	switch p {
	case PhaseTotal:
		return "total"
	case PhaseUpstream:
		return "upstream"
	case PhaseProxy:
		return "proxy"
	case PhaseService:
		return "service"
	case PhaseQueue:
		return "queue"
	case PhaseInjected:
		return "injected"
	case PhaseTLS:
		return "tls"
	}
	return fmt.Sprintf("Phase(%d)", uint8(p))
}

// Histogram geometry. Every histogram of a Set records whole microseconds with
// this range and precision so that they can be merged bucket for bucket.
//
// The range costs nothing where it is not used: histograms are sparse
// (hdrhistogram-go's PackedHistogram, the dense HdrHistogram's bucket
// geometry without its dense counts array), so a histogram holds only the
// buckets that received values, 4 bytes of index plus 1 to 8 bytes of count
// each. The same 1 µs .. 1 h range therefore serves every phase, from queue
// (mostly 1 µs) to a BLPOP's 30 s, with HdrHistogram's percentiles to the
// bit: a dense histogram of this range holds 23,552 counters (~188 KB)
// whatever it records.
const (
	histLowestMicros  = 1             // 1 µs; smaller values are recorded as 1
	histHighestMicros = 3_600_000_000 // 1 h; larger values are recorded as 1 h
	histSigFigs       = 3
)

// newHistogram allocates an empty sparse histogram of the Set geometry
// (~250 bytes until it records). Loops create them lazily, on the first
// observation of each (command, phase).
func newHistogram() *hdrhistogram.PackedHistogram {
	return hdrhistogram.NewPacked(histLowestMicros, histHighestMicros, histSigFigs)
}

// newDense allocates an empty dense histogram of the Set geometry (~188 KB):
// the caller-owned copies of Set.Snapshot.
func newDense() *hdrhistogram.Histogram {
	return hdrhistogram.New(histLowestMicros, histHighestMicros, histSigFigs)
}

// toMicros converts d to the value recorded in a histogram: whole
// microseconds rounded up, clamped to [1 µs, 1 h]. Rounding up keeps the
// reported percentiles (HdrHistogram's highest equivalent values) from
// understating a duration.
func toMicros(d time.Duration) int64 {
	us := (int64(d) + int64(time.Microsecond) - 1) / int64(time.Microsecond)
	return min(max(us, histLowestMicros), histHighestMicros)
}

// Set holds the stats of all event loops of one proxy, plus its connection and
// byte counters. Create it with NewSet; the zero value is not usable.
//
// All methods of Set are safe for concurrent use.
type Set struct {
	names []string
	loops []*Loop

	clientConns        atomic.Int64
	clientConnsTotal   atomic.Int64
	clientsRejected    atomic.Int64
	clientsEvicted     [numEvictReasons]atomic.Int64 // by evictReason
	upstreamConns      atomic.Int64
	upstreamDialErrors atomic.Int64
	upstreamLost       atomic.Int64
	protocolErrors     atomic.Int64

	shards  shardRegistry // shard labels; see shard.go
	routing routingCounters

	merge merger // scrape-side state; see snapshot.go

	exclMu   sync.Mutex
	excluded []bool // by command ID: left out of Totals

	heat *heat.Set // key and slot heat; nil when off (SetHeat)
}

// SetHeat attaches h, which must have as many loops as s, so that each
// Loop's Heat returns h's recorder for that loop. Call it before any loop
// records; nil detaches.
func (s *Set) SetHeat(h *heat.Set) {
	if h != nil && h.Loops() != len(s.loops) {
		panic(fmt.Sprintf("metrics: heat has %d loops, the Set %d", h.Loops(), len(s.loops)))
	}
	s.heat = h
	for i, l := range s.loops {
		l.heat = nil
		if h != nil {
			l.heat = h.Loop(i)
			l.heat.ShareLock(&l.mu) // recorded under the loop's lock (EndLocked)
		}
	}
}

// Heat returns the heat attached with SetHeat, or nil.
func (s *Set) Heat() *heat.Set { return s.heat }

// ExcludeFromTotals marks commands whose durations say nothing about the
// engine's responsiveness (blocking commands such as BLPOP, pub/sub, MONITOR)
// so that Snapshot.Totals, the table's Totals row and the /stats totals leave
// them out; they are still recorded and exported under their own names. IDs
// out of range are ignored. Safe for concurrent use.
func (s *Set) ExcludeFromTotals(ids ...int) {
	s.exclMu.Lock()
	defer s.exclMu.Unlock()
	if s.excluded == nil {
		s.excluded = make([]bool, len(s.names))
	}
	for _, id := range ids {
		if id >= 0 && id < len(s.excluded) {
			s.excluded[id] = true
		}
	}
}

func (s *Set) excludedCopy() []bool {
	s.exclMu.Lock()
	defer s.exclMu.Unlock()
	return append([]bool(nil), s.excluded...)
}

// NewSet returns a Set with the given number of loops (at least 1; smaller
// values are raised to 1). names[i] is the label of command ID i and
// names[0] must be "other", the ID that unknown and out-of-range commands are
// counted under; an empty names slice means just {"other"}. NewSet copies
// names and panics if a name is empty or repeated, since that would produce
// clashing Prometheus series.
func NewSet(loops int, names []string) *Set {
	if len(names) == 0 {
		names = []string{"other"}
	}
	seen := make(map[string]bool, len(names))
	for i, n := range names {
		if n == "" || seen[n] {
			panic(fmt.Sprintf("metrics: command name %d (%q) is empty or repeated", i, n))
		}
		seen[n] = true
	}
	loops = max(loops, 1)
	s := &Set{names: append([]string(nil), names...), loops: make([]*Loop, loops)}
	for i := range s.loops {
		s.loops[i] = &Loop{cmds: make([]cmdStats, len(names))}
	}
	s.merge.init(loops, len(names))
	return s
}

// Loop returns the stats of event loop i, 0 <= i < Loops(); it panics for
// other i. The returned Loop is meant for that loop's goroutine only.
func (s *Set) Loop(i int) *Loop { return s.loops[i] }

// Loops returns the number of loops the Set was created with.
func (s *Set) Loops() int { return len(s.loops) }

// Names returns the command labels, indexed by command ID. The caller must not
// modify the returned slice.
func (s *Set) Names() []string { return s.names }

// ClientOpened counts an accepted client connection: it raises the current
// client connections and the accepted total.
func (s *Set) ClientOpened() {
	s.clientConns.Add(1)
	s.clientConnsTotal.Add(1)
}

// ClientClosed counts a closed client connection.
func (s *Set) ClientClosed() { s.clientConns.Add(-1) }

// ClientRejected counts a client connection refused because the proxy's
// client limit was reached (it is not counted by ClientOpened).
func (s *Set) ClientRejected() { s.clientsRejected.Add(1) }

// Reasons for ClientEvicted; they are the values of the reason label.
const (
	// EvictOutputLimit: the replies pending for the client crossed the output
	// buffer limit.
	EvictOutputLimit = "output_limit"
	// EvictQueryLimit: the client's unparsed input crossed the query buffer
	// limit.
	EvictQueryLimit = "query_limit"
)

// evictReason indexes Set.clientsEvicted.
type evictReason int

const (
	evictOutputLimit evictReason = iota
	evictQueryLimit
	evictOther
	numEvictReasons
)

func (r evictReason) String() string {
	switch r {
	case evictOutputLimit:
		return EvictOutputLimit
	case evictQueryLimit:
		return EvictQueryLimit
	}
	return "other"
}

// ClientEvicted counts a client disconnected for crossing a memory limit.
// reason should be EvictOutputLimit or EvictQueryLimit; any other value is
// counted as "other", so the label stays bounded. Call ClientClosed too.
func (s *Set) ClientEvicted(reason string) {
	r := evictOther
	switch reason {
	case EvictOutputLimit:
		r = evictOutputLimit
	case EvictQueryLimit:
		r = evictQueryLimit
	}
	s.clientsEvicted[r].Add(1)
}

// UpstreamOpened counts an established upstream (engine) connection.
func (s *Set) UpstreamOpened() { s.upstreamConns.Add(1) }

// UpstreamClosed counts a closed upstream connection, for whatever reason.
func (s *Set) UpstreamClosed() { s.upstreamConns.Add(-1) }

// UpstreamDialFailed counts a failed attempt to connect to the engine.
func (s *Set) UpstreamDialFailed() { s.upstreamDialErrors.Add(1) }

// UpstreamLost counts an upstream connection closed by the engine or the
// network while commands were still pending on it. Call UpstreamClosed too.
func (s *Set) UpstreamLost() { s.upstreamLost.Add(1) }

// ProtocolError counts a client that sent malformed input and was closed.
func (s *Set) ProtocolError() { s.protocolErrors.Add(1) }

// Loop holds the stats one event loop records. Only that loop's goroutine
// records: it calls Lock once per read/write batch, then any number of
// *Locked methods, then Unlock. Readers take the same mutex briefly to swap
// histograms out (see Set.Snapshot), so the lock is uncontended except during
// a scrape. Steady-state recording allocates nothing; the first observation
// of each (command, phase), (shard, phase) and shard batch allocates its
// histogram, a histogram grows when it holds more distinct buckets than it
// ever held between two scrapes (above 65,536 µs) or a value below 65,536 µs
// falls in a range of 32 buckets it never had (see rec), and the first shard
// observation of a loop allocates its table of shards.
type Loop struct {
	mu    sync.Mutex
	cmds  []cmdStats // indexed by command ID
	extra [numExtra]timing
	// shards is indexed by shard index (Set.Shard); nil until the first
	// shard observation, then grown up to the index seen, within a backing
	// array of MaxShards+1 entries allocated once (see Loop.shard).
	shards []shardStats
	// bytes counts the loop's client and engine bytes, by byteCounter.
	// Atomics, so that Counters reads them without the lock; per loop,
	// because one set of counters for all loops would move its cache line
	// between cores on every read and write of every loop.
	bytes [numByteCounters]atomic.Int64
	// heat is this loop's key and slot heat recorder; nil when off.
	heat *heat.Loop
}

// Heat returns the loop's key and slot heat recorder (package heat), nil
// when heat is off or l is nil. The proxy keeps a heat.Pending in each
// request: Begin when it routes the request, Reply with the reply's bytes,
// EndLocked when it records the request's timing, under the Loop's lock,
// which the recorder shares.
func (l *Loop) Heat() *heat.Loop {
	if l == nil {
		return nil
	}
	return l.heat
}

// The byte counters of a Loop.
const (
	clientReadBytes = iota
	clientWrittenBytes
	upstreamReadBytes
	upstreamWrittenBytes
	numByteCounters
)

// AddClientBytes adds in bytes read from and out bytes written to clients.
// It does not need the lock.
func (l *Loop) AddClientBytes(in, out int) {
	if in != 0 {
		l.bytes[clientReadBytes].Add(int64(in))
	}
	if out != 0 {
		l.bytes[clientWrittenBytes].Add(int64(out))
	}
}

// AddUpstreamBytes adds in bytes read from and out bytes written to the
// engine. It does not need the lock.
func (l *Loop) AddUpstreamBytes(in, out int) {
	if in != 0 {
		l.bytes[upstreamReadBytes].Add(int64(in))
	}
	if out != 0 {
		l.bytes[upstreamWrittenBytes].Add(int64(out))
	}
}

// Per-loop distributions that are not per command.
const (
	extraThink           = iota // closed-loop think time
	extraRTTClient              // TCP_INFO tcpi_rtt of client sockets
	extraRTTUpstream            // TCP_INFO tcpi_rtt of upstream sockets
	extraRedirectPenalty        // extra time of commands redirected by MOVED/ASK
	extraReorderWait            // routed: a complete reply waiting for earlier ones (head of line)
	numExtra
)

// cmdStats is one command's cumulative stats in one loop.
type cmdStats struct {
	count  int64 // commands counted, timed or not
	errors int64 // of which answered with an error reply
	phases [NumPhases]timing
}

// timing is one duration distribution in one loop.
type timing struct {
	// rec records microseconds since the last scrape took its values. A
	// scrape moves them out and resets it, so it keeps its storage: it
	// allocates again only to hold more buckets than it ever held between
	// two scrapes.
	rec rec
	sum time.Duration // cumulative exact sum of the observed durations (clamped at 0)
	n   int64         // cumulative count of observations
}

// observe records d, which must be >= 0.
func (t *timing) observe(d time.Duration) {
	t.sum += d
	t.n++
	t.rec.record(toMicros(d), newHistogram) // in range: 1 µs .. 1 h
}

// Lock locks the Loop for a batch of *Locked calls. Only the owning event
// loop's goroutine records; readers lock it internally.
func (l *Loop) Lock() { l.mu.Lock() }

// Unlock unlocks the Loop after a batch of *Locked calls.
func (l *Loop) Unlock() { l.mu.Unlock() }

// ObserveLocked records one timed command: total (t_out - t_in), upstream
// (t_reply - t_sent) and service durations, proxy = total - upstream and
// queue = upstream - service (both clamped at 0), each into the command's
// histogram for that phase; it also counts the
// command, and an error if isErr (the engine answered with an error reply).
// Negative durations count as 0. Histograms record whole microseconds,
// rounded up and clamped to 1 µs .. 1 h (so 0 is recorded as 1 µs); the
// exact sums behind the means are kept apart. A cmd outside the names slice
// is counted as command 0 ("other"). The caller must hold the lock.
func (l *Loop) ObserveLocked(cmd int, total, upstream, service time.Duration, isErr bool) {
	c := l.cmd(cmd)
	c.count++
	if isErr {
		c.errors++
	}
	observePhases(&c.phases, total, upstream, service, 0)
}

// ObserveInjectedLocked records one timed command that a fault injection
// rule delayed by injected (or that waited behind such a command): as
// ObserveLocked, with injected its own phase (PhaseInjected) and proxy =
// total - upstream - injected. The caller must hold the lock.
func (l *Loop) ObserveInjectedLocked(cmd int, total, upstream, service, injected time.Duration, isErr bool) {
	c := l.cmd(cmd)
	c.count++
	if isErr {
		c.errors++
	}
	observePhases(&c.phases, total, upstream, service, injected)
}

// observePhases records one timed command into phases by ObserveLocked's
// rules: negative durations count as 0, proxy = total - upstream and queue =
// upstream - service (both clamped at 0), service clamped into [0, upstream];
// injected > 0 is recorded as PhaseInjected and taken out of proxy.
func observePhases(phases *[NumPhases]timing, total, upstream, service, injected time.Duration) {
	total = max(total, 0)
	upstream = max(upstream, 0)
	phases[PhaseTotal].observe(total)
	phases[PhaseUpstream].observe(upstream)
	if injected > 0 {
		phases[PhaseInjected].observe(injected)
	}
	phases[PhaseProxy].observe(max(total-upstream-max(injected, 0), 0))
	service = min(max(service, 0), upstream)
	phases[PhaseService].observe(service)
	phases[PhaseQueue].observe(upstream - service)
}

// TLSLocked records d as the PhaseTLS of one command of a TLS client,
// after its ObserveLocked or ObserveInjectedLocked (whose total already
// holds d). A cmd outside the names slice is command 0 ("other"). The
// caller must hold the lock.
func (l *Loop) TLSLocked(cmd int, d time.Duration) {
	l.cmd(cmd).phases[PhaseTLS].observe(max(d, 0))
}

// CountLocked counts a command, and an error if isErr, without timing it; the
// proxy uses it for commands it cannot time, such as ones without a reply. A
// cmd outside the names slice is counted as command 0 ("other"). The caller
// must hold the lock.
func (l *Loop) CountLocked(cmd int, isErr bool) {
	c := l.cmd(cmd)
	c.count++
	if isErr {
		c.errors++
	}
}

// ThinkLocked records a closed-loop client's think time d: from writing a
// reply to the client to reading its next request. Negative d counts as 0,
// clamped into the histogram range as in ObserveLocked. The caller must hold
// the lock.
func (l *Loop) ThinkLocked(d time.Duration) {
	l.extra[extraThink].observe(max(d, 0))
}

// TCPRTTLocked records the kernel's smoothed round-trip time estimate of a
// socket (TCP_INFO tcpi_rtt, sampled periodically): of a client socket, or
// of an upstream socket when upstream is true. The caller must hold the lock.
func (l *Loop) TCPRTTLocked(upstream bool, rtt time.Duration) {
	i := extraRTTClient
	if upstream {
		i = extraRTTUpstream
	}
	l.extra[i].observe(max(rtt, 0))
}

// cmd returns the stats of command ID id, or of ID 0 if id is out of range.
func (l *Loop) cmd(id int) *cmdStats {
	if uint(id) >= uint(len(l.cmds)) {
		id = 0
	}
	return &l.cmds[id]
}
