// Package heat measures which keys and hash slots cost the most: exact
// per-slot counters (requests, bytes, engine time) for all 16,384 hash
// slots, and sampled top-K keys ranked three ways (requests, bytes, engine
// time), each with its error bound, command mix, reply sizes and small
// latency histograms.
//
// Units: bytes are request plus reply bytes as framed on the wire; engine
// time is the service time of a command (metrics.PhaseService: the part of
// the upstream time during which the engine answered this command), kept
// in nanoseconds and exported in seconds; latency histograms are in
// microseconds.
//
// Concurrency and cost follow package metrics: each event loop owns one
// Loop and is its only writer; Begin, Reply and End do not allocate. A
// scrape (Set.Keys, Set.Slots) locks each Loop briefly to sum its slot
// table (adding its batch first) or copy a ranking's top keys (adding its
// sample batch first), then merges the copies outside the lock. Memory is
// bounded by the slot table and the summaries' capacity whatever the
// number of distinct keys: per loop, 16,384 x 16 bytes (256 KiB) of slot
// counters every request goes to, their batch (2 KiB) and 16,384 x 32
// bytes (512 KiB) of wide counters they spill into when one would
// overflow, plus 3 x Capacity entries of 568 bytes (1.7 MiB at the
// default 1,024), the summaries' filter (32 x Capacity buckets of 32
// bytes: 1 MiB at the default), their table, heaps and positions (150 KiB
// at the default) and a batch of 32 sampled requests waiting for them
// (4.5 KiB). There is no package-level state.
//
// Sampling: each ranking samples by threshold sampling (see sampled),
// all three from one draw per request: a request enters a ranking of
// threshold z with probability v/z and weight z, v its value there (1,
// its bytes, its engine time), or always, at its own value, when v
// reaches z. The thresholds are Sample, and Sample times the loop's mean
// bytes and engine time per request so far, all times one scale (1 to 3,
// retune) that makes the rankings together take about one request in
// Sample; the bytes threshold is at most Sample KiB, so a big key's reply
// is never missed. The estimates are unbiased. A request at or over
// Config.SlowThreshold (the slow log's) always enters every ranking at
// its own value. Slot counters count every request exactly.
package heat

import (
	"math"
	"math/bits"
	"sync"
	"time"

	"github.com/cespare/xxhash/v2"

	"github.com/respmeter/respmeter/internal/resp"
	"github.com/respmeter/respmeter/metrics/slowlog"
	"github.com/respmeter/respmeter/routing"
)

// NumSlots is the number of Redis Cluster hash slots (routing.NumSlots).
const NumSlots = routing.NumSlots

// MaxKeyBytes is the most bytes of a key kept for display; longer keys are
// told apart by a 64-bit hash of the whole key and shown cut, marked
// "truncated". It is the slow log's, so that a slowlog.KeyBuf holds what
// End needs.
const MaxKeyBytes = slowlog.MaxKeyBytes

// Rankings of the top-K summaries.
const (
	ByRequests = iota
	ByBytes
	ByEngine
	numRankings
)

// Config configures a Set.
type Config struct {
	// Sample is N of "one request in N" entering the top-K summaries
	// (any of the three rankings; see retune); values below 1 mean 64.
	Sample int
	// Capacity is the number of keys each loop's summary of each ranking
	// monitors (Space-Saving's counters); values below 16 mean 1024. The
	// error bound of a count is at most the ranking's total / Capacity.
	Capacity int
	// SlowThreshold: requests whose total time is at least this always
	// enter the summaries (the slow log's threshold); 0 means none.
	SlowThreshold time.Duration
	// Names is how keys are shown: NamesPlain, NamesPattern or NamesHash.
	Names Names
	// Commands are the command labels by command ID (metrics.Set.Names),
	// for the command mix.
	Commands []string
	// Now returns the time; nil means time.Now. Rates are estimated over
	// the time since NewSet.
	Now func() time.Time
}

// Set holds the heat of all loops of a proxy. The zero value is not
// usable; create it with NewSet. Its methods are safe for concurrent use.
type Set struct {
	cfg   Config
	loops []*Loop
	start time.Time
	seed  uint64 // keys the hashes of NamesHash, so a name cannot be looked up by its hash
}

// NewSet returns a Set of loops Loops (at least 1).
func NewSet(loops int, cfg Config) *Set {
	if cfg.Sample < 1 {
		cfg.Sample = 64
	}
	if cfg.Capacity < 16 {
		cfg.Capacity = 1024
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	loops = max(loops, 1)
	s := &Set{cfg: cfg, loops: make([]*Loop, loops), start: cfg.Now(), seed: randSeed()}
	for i := range s.loops {
		l := &Loop{mu: &sync.Mutex{}, cfg: &s.cfg, rnd: randSeed() | 1, slow: cfg.SlowThreshold, scale: 1}
		l.z = cfg.thresholds()
		l.zMax = l.z
		l.sum = newSummaries(cfg.Capacity)
		s.loops[i] = l
	}
	return s
}

// Loop returns loop i's recorder, meant for that loop's goroutine only.
func (s *Set) Loop(i int) *Loop { return s.loops[i] }

// Loops returns the number of loops.
func (s *Set) Loops() int { return len(s.loops) }

// slotCounts are one slot's exact counters: a Set's sums (slotTable), and
// what a loop's narrow counters spilled (Loop.wide).
type slotCounts struct {
	requests int64
	bytes    int64
	engineNs int64
	shard    int32 // shard index (metrics.Set.Shard) of its last request + 1; 0 none
}

// slotNarrow are one slot's latest counters in one loop, 16 bytes: half
// the size of slotCounts, so that the table a loop adds every request to
// (256 KiB) takes half the CPU's caches that 64-bit counters would. A
// counter that would overflow first spills all three into the loop's
// wide counters (spill), which Snapshot adds: 2^32 requests, 4 GiB or
// 4.29 s of engine time in one slot since its last spill.
type slotNarrow struct {
	requests uint32
	bytes    uint32
	engineNs uint32
	shard    int32 // as slotCounts.shard
}

// slotDelta is one request's addition to its slot's counters, held in the
// loop's batch until the batch is full or a scrape applies it. A request
// of 4 GiB or more, or of 4.29 s of engine time or more, goes to the wide
// counters at once (addWide).
type slotDelta struct {
	bytes    uint32
	engineNs uint32
	shard    int32 // as slotCounts.shard; 0 leaves the slot's as it is
	slot     uint16
}

// sample is one sampled request waiting in its loop's sample batch: its
// key's identity and what the summaries record of it, with its weight in
// each ranking (0: not sampled there).
type sample struct {
	id keyID
	w  [numRankings]int64
	observation
}

// observation is what a key's statistics record of one sampled request
// (keyStats.record), 40 bytes.
type observation struct {
	cmd, shard    int32 // shard -1: unknown
	total, engine time.Duration
	repBytes      int64
	elems         int64 // -1: not a collection reply
}

// sampleBatchLen is the number of sampled requests a loop's sample batch
// holds: 32 x 144 bytes, some 1,000 to 2,000 requests at the default
// sampling (the rankings' samples overlap in part).
// Applying it holds the loop for 32 additions to the three rankings (some
// 7 microseconds with the summaries out of the CPU's caches, in
// BenchmarkApplySamples, where every addition replaces a key).
const sampleBatchLen = 32

// batchLen is the number of requests a loop's batch holds: 128 x 16 bytes
// (2 KiB), which stays in the L1 cache.
const batchLen = 128

// Loop is one event loop's heat. Only its loop records (Begin, Reply,
// End); Snapshot reads it under its lock.
type Loop struct {
	// The pointers come first: the garbage collector scans an object
	// only up to its last pointer, so it never reads the slot tables.

	// mu guards the loop's counters: its own mutex, or the lock its
	// recorder already holds while it records (ShareLock).
	mu  sync.Locker
	cfg *Config
	sum *summaries

	// What every request reads or writes (EndLocked) comes next, in the
	// object's first two cache lines (a large object is page-aligned):
	// between two requests of a loop its system calls push heat's lines
	// out of the L1 cache, and each line a request needs is one more
	// wait.

	// nbatch and nsamples are how much of batch and samples is filled.
	nbatch, nsamples int
	rnd              uint64        // xorshift64 state for sampling
	slow             time.Duration // cfg.SlowThreshold
	// z are the rankings' sampling thresholds (retune), zMax the largest
	// each has had, for the error bound; seen, seenBytes and seenEngine
	// sum the requests applied from the batch, which retune averages.
	z, zMax                     [numRankings]int64
	seen, seenBytes, seenEngine int64
	// scale is the factor, 1 to numRankings, by which retune raises all
	// three thresholds so that the rankings together take one request in
	// Sample; takenZ sums the requests threshold of each request some
	// ranking took since seen was winFrom, from which retune estimates it.
	scale           float64
	takenZ, winFrom int64
	taken           int64  // the requests some ranking took, slow ones included
	touched         uint32 // applyBatch's and applySamples's load-only passes' sums, kept so that they run
	// batch holds the slot counters' latest additions, batch[:nbatch]
	// (applyBatch).
	batch [batchLen]slotDelta
	// samples holds the sampled requests not yet in the summaries,
	// samples[:nsamples] (applySamples).
	samples [sampleBatchLen]sample
	// narrow are the slot counters every request goes to, wide what they
	// spilled; a slot's counters are the sum of the two.
	narrow [NumSlots]slotNarrow
	wide   [NumSlots]slotCounts
}

// ShareLock makes mu, a lock the loop's recorder holds whenever it calls
// EndLocked (metrics.Loop's), the loop's lock: recording then costs no
// lock of its own, and Snapshot takes mu. Call it before recording.
func (l *Loop) ShareLock(mu sync.Locker) { l.mu = mu }

// keyID identifies a key in a summary: the hash of the whole key (or of
// its pattern), plus up to MaxKeyBytes of it for display.
type keyID struct {
	hash  uint64
	n     uint8
	long  bool // the key was longer than MaxKeyBytes
	slot  uint16
	bytes [MaxKeyBytes]byte
}

func (a *keyID) same(b *keyID) bool {
	return a.hash == b.hash && a.n == b.n && a.long == b.long && a.bytes == b.bytes
}

// Bytes past n are zero in the summaries' keys (End, identify), so that
// same and the merge's map compare whole arrays.

// Pending is what heat keeps of one request between Begin and End: its
// key's slot and its sizes. It holds no copy of the key: the caller keeps
// the key's first MaxKeyBytes bytes for End (the proxy's slow log keeps
// them anyway), and End copies them only into a sampled request's
// identity. The proxy keeps one in each request; its zero value is "no
// key".
type Pending struct {
	has      bool   // a key was found
	long     bool   // the key was longer than MaxKeyBytes
	slot     uint16 // the key's hash slot
	hash     uint64 // a long key's hash (of the whole key, which End lacks)
	reqBytes int64  // request bytes
	repBytes int64  // reply bytes so far
	elems    int64  // element count of a collection reply, -1 none
}

// Begin starts p for a request: cmd is its command's label ("get"), args
// its arguments (args[0] the name), keyPos the index of its first key (-1
// none; as the slow log's SafeFirstKey, whose rules decide which key may
// be kept), reqBytes its size on the wire. It returns the key, nil if
// none, whose first MaxKeyBytes bytes End needs (args may be reused in
// between: keep a copy, as slowlog.KeyBuf does). The slot is the key's
// hash slot (routing.Slot) whether or not the proxy routes. It does not
// allocate.
func (l *Loop) Begin(p *Pending, cmd string, args [][]byte, keyPos, reqBytes int) []byte {
	k, ok := slowlog.SafeFirstKey(cmd, args, keyPos)
	l.BeginKey(p, k, ok, reqBytes)
	return k
}

// BeginKey is Begin for a caller that has the request's key from
// slowlog.SafeFirstKey already: key and ok are what it returned.
func (l *Loop) BeginKey(p *Pending, key []byte, ok bool, reqBytes int) {
	p.reqBytes, p.repBytes, p.elems = int64(reqBytes), 0, -1
	p.has = ok
	if !ok {
		return
	}
	p.slot = routing.Slot(key)
	p.long = len(key) > MaxKeyBytes
	if p.long {
		p.hash = xxhash.Sum64(key) // the whole key: End has only its start
	}
}

// Reply adds b, bytes of the request's reply (the whole reply, or the
// next piece of one streamed to the client), to p. The first piece's
// header gives the element count of an array, set, map or push reply.
// It does not allocate.
func (p *Pending) Reply(b []byte) {
	if len(b) == 0 {
		return
	}
	if p.repBytes == 0 {
		p.elems = header(b)
	}
	p.repBytes += int64(len(b))
}

// ReplySize adds n reply bytes to p whose content is not at hand (a
// capture's reply summary): the element count stays unknown.
func (p *Pending) ReplySize(n int64) { p.repBytes += max(n, 0) }

// header returns the element count of a RESP aggregate reply starting b
// (*, ~, %: pairs, >), or -1.
func header(b []byte) int64 {
	switch b[0] {
	case resp.TypeArray, resp.TypeSet, resp.TypeMap, resp.TypePush:
	default:
		return -1
	}
	var n int64
	for _, c := range b[1:] {
		if c < '0' || c > '9' {
			if c != '\r' {
				return -1 // *-1 (null array) or a bad header
			}
			return n
		}
		if n > 1<<40 {
			return -1
		}
		n = n*10 + int64(c-'0')
	}
	return -1 // the header itself was cut: unknown
}

// End records the request p describes, answered by the engine: key the
// first MaxKeyBytes bytes (or more) of the key given to Begin, cmd its
// command ID, shard the index of the shard that answered it (-1 unknown),
// total its total time and engine its engine (service) time. Its slot's
// counters count it always; the summaries take it when sampled or slow.
// It does not allocate.
func (l *Loop) End(p *Pending, key []byte, cmd, shard int, total, engine time.Duration) {
	l.mu.Lock()
	l.EndLocked(p, key, cmd, shard, total, engine)
	l.mu.Unlock()
}

// EndLocked is End for a caller holding the lock given to ShareLock.
func (l *Loop) EndLocked(p *Pending, key []byte, cmd, shard int, total, engine time.Duration) {
	if !p.has {
		return
	}
	engine = max(engine, 0)
	b := p.reqBytes + p.repBytes
	shard1 := int32(max(shard, -1)) + 1
	z := l.z // this request's thresholds follow only the requests before it
	if b > math.MaxUint32 || engine > math.MaxUint32 {
		l.addWide(p.slot, b, int64(engine), shard1)
	} else {
		d := &l.batch[l.nbatch]
		d.slot, d.bytes, d.engineNs, d.shard = p.slot, uint32(b), uint32(engine), shard1
		if l.nbatch++; l.nbatch == batchLen {
			l.applyBatch()
		}
	}
	// One draw r per request, independent of the workload's order, shared
	// by the three rankings. Each decision is an integer multiply and
	// compare (sampled); a request none takes (about 63 in 64 at the
	// default) does nothing more.
	r := xorshift(l.rnd)
	l.rnd = r
	eng := int64(engine)
	var w [numRankings]int64
	if l.slow > 0 && total >= l.slow {
		w = [numRankings]int64{1, b, eng} // slow: counted as it is
	} else {
		w[ByRequests] = sampled(1, z[ByRequests], r)
		w[ByBytes] = sampled(b, z[ByBytes], r)
		w[ByEngine] = sampled(eng, z[ByEngine], r)
		if w[ByRequests]|w[ByBytes]|w[ByEngine] == 0 {
			return
		}
		l.takenZ += z[ByRequests] // for retune's scale
	}
	l.taken++
	// Sampled: kept in the loop's sample batch, which applySamples adds
	// to the summaries when it is full or a scrape reads them.
	sm := &l.samples[l.nsamples]
	id := &sm.id
	id.slot, id.long, id.hash = p.slot, p.long, p.hash
	id.n = uint8(copy(id.bytes[:], key))
	clear(id.bytes[id.n:])
	sm.w = w
	sm.cmd, sm.shard = int32(cmd), int32(max(shard, -1))
	sm.total, sm.engine = total, engine
	sm.repBytes, sm.elems = p.repBytes, p.elems
	if l.nsamples++; l.nsamples == sampleBatchLen {
		l.applySamples()
	}
}

// applySamples adds the sample batch to the summaries and empties it; the
// caller holds mu. The summaries' table, filter, heaps and entries (some
// 2.8 MiB at the default capacity) do not stay in the CPU's caches over
// the 30 to 60 requests between two sampled ones: a sampled request costs its
// table slot and its filter line, and one that replaces a key walks a
// dozen more. A load-only pass first, as in applyBatch: each sample's
// home slot in the table and its filter line, so that the misses of the
// batch's first reads are in flight together. It is a loop of its own,
// after the keys' hashes: with a hash's work between them, only a few
// loads would be in flight at a time.
func (l *Loop) applySamples() {
	batch := l.samples[:l.nsamples]
	for i := range batch {
		l.cfg.Names.identify(&batch[i].id)
	}
	s := l.sum
	mask := uint64(len(s.table) - 1)
	var touch uint32
	for i := range batch {
		h := batch[i].id.hash
		touch += uint32(s.table[h&mask].ent) + uint32(s.bucket(uint32(h))[0])
	}
	l.touched += touch
	for i := range batch {
		sm := &batch[i]
		if e := s.add(&sm.id, &sm.w); e != nil {
			e.st.record(&sm.observation)
		}
	}
	l.nsamples = 0
}

// applyBatch adds the batch to the slot counters and empties it; the
// caller holds mu. The slot table (256 KiB) does not stay in the CPU's
// caches between requests, so a request's slot counter is most often a
// cache miss: one at a time, amid each request's own dependent work, the
// misses cost a request about as much as its slot's CRC16. Here the
// additions are independent of each other, so the CPU has many of the
// misses in flight at once and a request's share is a few nanoseconds.
func (l *Loop) applyBatch() {
	// First a pass that only loads each counter's line: a loop this
	// short lets the CPU run dozens of its iterations ahead and so have
	// as many misses (and page walks) in flight at once, which the
	// additions below, longer and with stores, would not; they then find
	// the lines in the L1 cache (128 lines, 8 KiB). Go has no prefetch
	// instruction; the loads' sum goes to a field so they are not
	// removed.
	var touch uint32
	for i := range l.batch[:l.nbatch] {
		touch += l.narrow[l.batch[i].slot].requests
	}
	l.touched = touch
	for i := range l.batch[:l.nbatch] {
		d := &l.batch[i]
		c := &l.narrow[d.slot]
		b, e := uint64(c.bytes)+uint64(d.bytes), uint64(c.engineNs)+uint64(d.engineNs)
		if (b|e) > math.MaxUint32 || c.requests == math.MaxUint32 {
			l.spill(d.slot)
			b, e = uint64(d.bytes), uint64(d.engineNs)
		}
		c.requests++
		c.bytes, c.engineNs = uint32(b), uint32(e)
		if d.shard != 0 {
			c.shard = d.shard
		}
		l.seenBytes += int64(d.bytes)
		l.seenEngine += int64(d.engineNs)
	}
	l.seen += int64(l.nbatch)
	l.nbatch = 0
	l.retune()
}

// spill moves slot's narrow counters into its wide ones; the caller holds
// mu.
func (l *Loop) spill(slot uint16) {
	c, w := &l.narrow[slot], &l.wide[slot]
	w.requests += int64(c.requests)
	w.bytes += int64(c.bytes)
	w.engineNs += int64(c.engineNs)
	c.requests, c.bytes, c.engineNs = 0, 0, 0
}

// addWide counts a request too big for a slotDelta in slot's wide
// counters at once; the caller holds mu.
func (l *Loop) addWide(slot uint16, bytes, engineNs int64, shard1 int32) {
	w := &l.wide[slot]
	w.requests++
	w.bytes += bytes
	w.engineNs += engineNs
	if shard1 != 0 {
		l.narrow[slot].shard = shard1
	}
	l.seen++
	l.seenBytes += bytes
	l.seenEngine += engineNs
}

// retune sets the rankings' thresholds: the bytes and engine-time ones to
// Sample times the loop's mean bytes and engine time per request so far,
// so that each alone would sample about one request in Sample (a request
// of value v enters with probability min(v/z, 1), whose mean is at most
// the mean v over z) whatever the workload's sizes and engine times; and
// all three raised by one factor, scale, so that together they take about
// one request in Sample.
//
// The rankings share each request's draw, so a request enters some
// ranking with probability m/z_req, m = max(1, bytes/mean bytes,
// engine/mean engine) and z_req the requests ranking's threshold (Sample
// x scale): one in Sample when every m is 1 (requests alike), more where
// the values vary apart. Under pipelining the engine's time of a
// pipeline falls on its first command (the service phase), so the
// engine-time ranking takes mostly commands the others do not, and with
// scale 1 the three together took about one request in 31 at -P 16.
// Each request some ranking took adds its z_req to takenZ, whose
// expectation is its m; every scaleWindow x Sample requests scale moves
// halfway to takenZ over the window's requests, the mean m, so that the
// requests any ranking takes average one in Sample. It stays between 1
// (each ranking alone at one in Sample, as where requests are alike) and
// numRankings (the mean of a maximum of three values of mean 1 is at
// most 3).
//
// The bytes threshold stays at most Sample KiB, so that a reply of that
// size (a big key's) is always counted at its own size, however big the
// mean; a command whose engine time reaches the slow log's threshold is
// always counted anyway. A threshold follows only requests already
// recorded, never the one it decides about, so each weight's expectation
// is still its value (see sampled) and the sums stay unbiased.
func (l *Loop) retune() {
	if l.seen == 0 {
		return
	}
	n := int64(l.cfg.Sample)
	if w := l.seen - l.winFrom; w >= scaleWindow*n {
		m := float64(l.takenZ) / float64(w)
		l.scale = min(max((l.scale+m)/2, 1), numRankings)
		l.takenZ, l.winFrom = 0, l.seen
	}
	zn := float64(n) * l.scale
	// Sample x scale x mean, the mean at least one byte or nanosecond,
	// with no overflow.
	z := func(sum int64) int64 { return int64(min(float64(max(sum/l.seen, 1))*zn, 1<<62)) }
	l.z[ByRequests] = int64(zn)
	l.z[ByBytes] = min(z(l.seenBytes), l.cfg.thresholds()[ByBytes])
	l.z[ByEngine] = z(l.seenEngine)
	for r := range l.z {
		l.zMax[r] = max(l.zMax[r], l.z[r])
	}
}

// scaleWindow is the requests over which retune estimates its scale, in
// units of Sample: some 256 requests taken by a ranking, a standard
// error of about 6 % in each estimate.
const scaleWindow = 256

// thresholds returns each ranking's sampling threshold z until a loop
// has requests to average (retune): Sample requests, Sample KiB, Sample x
// 10 µs of engine time.
func (c *Config) thresholds() [numRankings]int64 {
	n := int64(c.Sample)
	return [numRankings]int64{n, n << 10, n * int64(10*time.Microsecond)}
}

// xorshift returns the draw after r (nonzero) of the xorshift64
// generator (Marsaglia, "Xorshift RNGs", 2003), a loop's source of
// sampling decisions.
func xorshift(r uint64) uint64 {
	r ^= r << 13
	r ^= r >> 7
	r ^= r << 17
	return r
}

// sampled returns the weight with which a request of value v enters a
// ranking of threshold z (>= 1), given a uniform random r: threshold
// sampling (Duffield, Lund, Thorup, "Learn more, sample less", 2005): v
// itself when v >= z, else z with probability v/z, else 0. Its
// expectation is v, so the sums are unbiased, and a value at or over the
// threshold (a big key's reply, a long command) is always counted.
//
// With u = r / 2^64, uniform in [0, 1), the test u*z < v is exactly
// floor(r*z / 2^64) < v (v is an integer): the high word of the 128-bit
// product, one multiply and no division or floating point. That word is
// below z, so a value at or over z always passes.
func sampled(v, z int64, r uint64) int64 {
	if hi, _ := bits.Mul64(r, uint64(z)); v <= 0 || hi >= uint64(v) {
		return 0
	}
	return max(v, z)
}

// Bucket counts of the small histograms: powers of two.
const (
	latBuckets   = 24 // µs: [0,1], (1,2], (2,4] ... up to 2^23 µs (8.4 s), then the last
	sizeBuckets  = 32 // bytes: up to 2^31, then the last
	maxCmdsShown = 4  // distinct commands kept per key; others count as "other"
)

// keyStats are the sampled statistics of one monitored key: of each
// sampled request of the key, whichever rankings took it, since its entry
// was made. An entry records its key's first observation in first alone,
// and its body (the fields after first) only from the second on: with
// many distinct keys most entries are replaced before their key is
// sampled again, and a replacement then writes the entry's first 176
// bytes (three or four cache lines) instead of all its 568. While n is 1
// the body is stale (the previous key's) and merge reads first instead;
// merge's own result is always whole.
type keyStats struct {
	n     int64       // observations
	first observation // the one observation while n is 1
	// The body.
	cmds     [maxCmdsShown]struct{ id, n int32 }
	cmdOther int32
	shard    int32 // last shard index + 1
	repMax   int64
	rep      [sizeBuckets]int32
	elemsMax int64
	elemsSum int64
	elemsN   int32
	total    [latBuckets]int32
	engine   [latBuckets]int32
}

// log2Bucket returns the bucket of v: 0 for v <= 1, else ceil(log2 v),
// capped at n-1.
func log2Bucket(v int64, n int) int {
	if v <= 1 {
		return 0
	}
	return min(bits.Len64(uint64(v-1)), n-1)
}

// record adds o to the statistics of an entry (see keyStats).
func (s *keyStats) record(o *observation) {
	switch s.n {
	case 0:
		s.first, s.n = *o, 1
		return
	case 1:
		first := s.first
		*s = keyStats{}
		s.add(&first)
	}
	s.add(o)
}

// add adds o to the body.
func (s *keyStats) add(o *observation) {
	cmd, total, engine := o.cmd, o.total, o.engine
	s.n++
	if o.shard >= 0 {
		s.shard = o.shard + 1
	}
	found := false
	for i := range s.cmds {
		c := &s.cmds[i]
		if c.n > 0 && c.id == cmd {
			c.n++
			found = true
			break
		}
		if c.n == 0 {
			c.id, c.n = cmd, 1
			found = true
			break
		}
	}
	if !found {
		s.cmdOther++
	}
	s.repMax = max(s.repMax, o.repBytes)
	s.rep[log2Bucket(o.repBytes, sizeBuckets)]++
	if o.elems >= 0 {
		s.elemsMax = max(s.elemsMax, o.elems)
		s.elemsSum += o.elems
		s.elemsN++
	}
	s.total[log2Bucket(int64(total/time.Microsecond), latBuckets)]++
	s.engine[log2Bucket(int64(engine/time.Microsecond), latBuckets)]++
}
