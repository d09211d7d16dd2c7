package heat

import "math/bits"

// Space-Saving (Metwally, Agrawal, El Abbadi, "Efficient Computation of
// Frequent and Top-k Elements in Data Streams", ICDT 2005), weighted and
// filtered (Homem, Carvalho, "Finding top-k elements in data streams",
// Information Sciences 180, 2010: Filtered Space-Saving), one summary per
// ranking over one store of keys.
//
// Each ranking r monitors at most cap keys, each with a count and an
// error, and keeps a filter: one counter alpha[b][r] per bucket b of keys
// (by hash), an upper bound of the weight any key of the bucket that r
// does not monitor has received in r. A monitored key's count grows by
// each weight w it receives. A key r does not monitor, of bucket b, when
// r is full and m is r's smallest count, adds w to alpha[b][r] while
// alpha[b][r] + w < m, and otherwise replaces the key of count m, taking
// count alpha[b][r] + w and error alpha[b][r]; the replaced key's
// bucket's counter becomes at least m (the most that key had received).
// Each counter so stays below m, and: for every monitored key, count -
// error <= true weight <= count, and every key whose true weight exceeds
// the smallest count is monitored, which is at most total/cap. Plain
// Space-Saving is the same with every counter at m; the filter keeps keys
// whose bucket has seen little weight out, where plain Space-Saving lets
// each unmonitored key replace one: over 100,000 keys taken at random,
// with the default capacity and filterPerKey buckets, about one
// unmonitored key's weight in ten replaces a key (the others cost two
// cache lines, not a dozen or more); with Zipf(1.1) keys one in 86.
//
// Summaries merge (Agarwal et al., "Mergeable Summaries", PODS 2012): a
// key absent from a full summary received at most that summary's smallest
// count there, so the merged count adds it as count and as error.
//
// The three rankings share their keys' storage: a key has one entry
// while any ranking monitors it, holding each ranking's count and error
// and one set of statistics (keyStats) of every sampled request of the
// key since the entry was made, whichever rankings took it; an entry no
// ranking monitors any more is freed. One hash table finds a key's entry
// by its 64-bit hash, and a bucket's three filter counters lie side by
// side in one cache line, so a sampled request costs one probe and one
// filter line however many rankings take it, where three summaries of
// their own cost three of each and up to three entries.
//
// The summaries are allocation-free after newSummaries: entries live in
// one slice with a free list, each ranking's min-heap orders its entries
// by count, and the hash table is open addressing (linear probing,
// backward-shift deletion).
//
// An entry is 568 bytes (mostly its statistics' histograms), so the entries
// (1.7 MiB at the default 1,024 per ranking) do not stay in the CPU's
// caches between sampled requests. The heaps and the table are therefore
// laid out so that their work reads only themselves: a heap item carries
// its entry's count in that ranking (a copy; add keeps the two equal) and
// the low 32 bits of its key's hash (what the filter and the table's
// removal need), and each entry's position in each heap is in pos, so a
// sift is a walk over 16 + 12 KiB (and a short one: see heapArity); a
// table slot carries the low 32 bits of its key's hash, so a probe reads
// an entry only where they match. Replacing a key, the common case with
// many distinct keys, then touches one entry, the one it takes.

// entry is one key that some ranking monitors, with each ranking's
// Space-Saving count and error (where it monitors the key) and the key's
// statistics.
type entry struct {
	id    keyID
	count [numRankings]int64 // an upper bound of the key's weight in the ranking
	err   [numRankings]int64 // the count it inherited on entry: count-err is a lower bound
	st    keyStats
}

// reset makes e the entry of id, with no counts and no statistics. Field
// by field: a composite literal assigned to *e is built on the stack
// first and then copied, 0.5 KiB twice. The statistics' body is left as
// it is: record clears it at the key's second observation (keyStats).
func (e *entry) reset(id *keyID) {
	e.id = *id
	e.count, e.err = [numRankings]int64{}, [numRankings]int64{}
	e.st.n = 0
}

// heapItem is one position of a ranking's min-heap: an entry's count in
// the ranking (equal to the entry's own), its index and the low 32 bits
// of its key's hash, in what would be padding (16 bytes).
type heapItem struct {
	count int64
	ent   int32
	hash  uint32
}

// tableSlot is one position of the hash table: an entry index + 1 (0:
// free) and the low 32 bits of its key's hash.
type tableSlot struct {
	hash uint32
	ent  int32
}

// filterBucket holds one bucket's filter counters, one per ranking, in
// half a cache line (the fourth is padding, so that no bucket straddles
// two lines).
type filterBucket [numRankings + 1]int64

// filterPerKey is the filter's buckets per key a ranking can monitor:
// 32,768 buckets (1 MiB) at the default capacity. Fewer let more keys
// replace one: over 100,000 keys taken at random, one unmonitored key's
// weight in ten replaces a key with 32 buckets per key, one in six with
// 16, one in four with 8 (256 KiB), one in 1.0 with no filter; with
// Zipf(1.1) keys one in 86 with 32, one in 18 with 8. In the proxy's
// profile under a pipelined load the summaries' functions took about
// 3 ns a request less with 32 than with 8 (BENCHMARKS.md), for 768 KiB
// more per loop.
const filterPerKey = 32

// summaries are a loop's three rankings' weighted Filtered Space-Saving
// summaries of at most cap keys each, over one store of entries.
type summaries struct {
	ents  []entry     // len 3*cap; entry x is live while some ranking monitors it
	free  []int32     // the entries no ranking monitors, a stack
	table []tableSlot // len a power of 2, >= 2*len(ents): the live entries
	rk    [numRankings]ranking
	// alpha are the filter's counters (Filtered Space-Saving); len a
	// power of 2, 1 << (32-shift).
	alpha []filterBucket
	shift uint8
	cap   int
}

// ranking is one ranking's summary: its heap of the entries it monitors
// and each entry's position there.
type ranking struct {
	heap []heapItem // a min-heap by count; len <= cap
	pos  []int32    // pos[x]: entry x's position in heap, -1 when not monitored; len 3*cap
}

func newSummaries(capacity int) *summaries {
	n := 1
	for n < 2*numRankings*capacity {
		n <<= 1
	}
	nb := 1
	for nb < filterPerKey*capacity {
		nb <<= 1
	}
	s := &summaries{
		ents:  make([]entry, numRankings*capacity),
		free:  make([]int32, numRankings*capacity),
		table: make([]tableSlot, n),
		alpha: make([]filterBucket, nb),
		shift: uint8(32 - bits.Len(uint(nb)-1)),
		cap:   capacity,
	}
	for i := range s.free {
		s.free[i] = int32(len(s.free) - 1 - i) // entry 0 first
	}
	for r := range s.rk {
		k := &s.rk[r]
		k.heap = make([]heapItem, 0, capacity)
		k.pos = make([]int32, len(s.ents))
		for i := range k.pos {
			k.pos[i] = -1
		}
	}
	return s
}

// bucket returns the filter bucket of a key whose hash has the low 32
// bits h: Fibonacci hashing of h, whose top bits do not follow the
// table's (its low bits).
func (s *summaries) bucket(h uint32) *filterBucket {
	return &s.alpha[(h*0x9e3779b1)>>s.shift]
}

// min returns ranking r's smallest count when it is full, else 0: the
// most weight a key it does not monitor may have received in it.
func (s *summaries) min(r int) int64 {
	k := &s.rk[r]
	if len(k.heap) < s.cap || len(k.heap) == 0 {
		return 0
	}
	return k.heap[0].count
}

// find returns the table position of id's entry, or of the free position
// where it would go, and whether it is there.
func (s *summaries) find(id *keyID) (int, bool) {
	mask := len(s.table) - 1
	h := uint32(id.hash)
	for i := int(h) & mask; ; i = (i + 1) & mask {
		t := s.table[i]
		if t.ent == 0 {
			return i, false
		}
		if t.hash == h && s.ents[t.ent-1].id.same(id) {
			return i, true
		}
	}
}

// add adds weight w[r] to key id in each ranking r where w[r] > 0 and
// returns its entry, whose statistics the caller then updates, or nil
// when no ranking monitors the key. It does not allocate.
func (s *summaries) add(id *keyID, w *[numRankings]int64) *entry {
	x := int32(-1)
	if pos, ok := s.find(id); ok {
		x = s.table[pos].ent - 1
	}
	var b *filterBucket // id's, loaded once a full ranking needs it
	for r := range s.rk {
		wr := w[r]
		if wr <= 0 {
			continue
		}
		k := &s.rk[r]
		if x >= 0 {
			if i := k.pos[x]; i >= 0 {
				e := &s.ents[x]
				e.count[r] += wr
				k.heap[i].count = e.count[r]
				s.down(r, int(i))
				continue
			}
		}
		if len(k.heap) < s.cap {
			if x < 0 {
				x = s.alloc(id)
			}
			s.ents[x].count[r] = wr
			k.pos[x] = int32(len(k.heap))
			k.heap = append(k.heap, heapItem{count: wr, ent: x, hash: uint32(id.hash)})
			s.up(r, len(k.heap)-1)
			continue
		}
		// Full: the key of smallest count gives its place to id, if its
		// bucket's counter says it may have reached that count.
		m := k.heap[0].count
		if b == nil {
			b = s.bucket(uint32(id.hash))
		}
		if b[r]+wr < m {
			b[r] += wr
			continue
		}
		count, err := b[r]+wr, b[r]
		y, yh := k.heap[0].ent, k.heap[0].hash
		if yb := &s.bucket(yh)[r]; *yb < m {
			*yb = m
		}
		k.pos[y] = -1
		if !s.monitored(y) {
			s.release(y, yh) // not the entry's hash: the entry is not read
		}
		if x < 0 {
			x = s.alloc(id)
		}
		e := &s.ents[x]
		e.count[r], e.err[r] = count, err
		k.pos[x] = 0
		k.heap[0] = heapItem{count: count, ent: x, hash: uint32(id.hash)} // not e.count: its line may still be on its way
		s.down(r, 0)
	}
	if x < 0 {
		return nil
	}
	return &s.ents[x]
}

// monitored reports whether some ranking monitors entry x.
func (s *summaries) monitored(x int32) bool {
	for r := range s.rk {
		if s.rk[r].pos[x] >= 0 {
			return true
		}
	}
	return false
}

// alloc takes a free entry for id, which has none, and enters it in the
// table.
func (s *summaries) alloc(id *keyID) int32 {
	x := s.free[len(s.free)-1]
	s.free = s.free[:len(s.free)-1]
	s.ents[x].reset(id)
	pos, _ := s.find(id) // after any removal, which may have moved slots
	s.table[pos] = tableSlot{hash: uint32(id.hash), ent: x + 1}
	return x
}

// release frees entry x, which no ranking monitors and whose key's hash
// has the low 32 bits hash: it leaves the table, shifting back the slots
// of its probe run so that lookups need no tombstones.
func (s *summaries) release(x int32, hash uint32) {
	s.free = append(s.free, x)
	mask := len(s.table) - 1
	i := int(hash) & mask
	for s.table[i].ent != x+1 {
		if s.table[i].ent == 0 {
			return
		}
		i = (i + 1) & mask
	}
	for j := (i + 1) & mask; ; j = (j + 1) & mask {
		t := s.table[j]
		if t.ent == 0 {
			break
		}
		home := int(t.hash) & mask
		// Move t back to i if i lies cyclically in [home, j).
		if (j > i && (home <= i || home > j)) || (j < i && home <= i && home > j) {
			s.table[i] = t
			i = j
		}
	}
	s.table[i] = tableSlot{}
}

// The heaps are 4-ary: a sift moves through log4(cap) levels (5 at the
// default 1,024) instead of log2(cap), and each level's children are 4
// adjacent items (64 bytes, one or two cache lines): a sift's reads wait
// on each other, level by level, so fewer levels are fewer waits.
const heapArity = 4

func (s *summaries) up(r, i int) {
	k := &s.rk[r]
	h := k.heap
	for i > 0 {
		p := (i - 1) / heapArity
		if h[i].count >= h[p].count {
			return
		}
		k.swap(i, p)
		i = p
	}
}

func (s *summaries) down(r, i int) {
	k := &s.rk[r]
	h := k.heap
	n := len(h)
	for {
		first := heapArity*i + 1
		if first >= n {
			return
		}
		c := first
		for j := first + 1; j < min(first+heapArity, n); j++ {
			if h[j].count < h[c].count {
				c = j
			}
		}
		if h[c].count >= h[i].count {
			return
		}
		k.swap(i, c)
		i = c
	}
}

func (k *ranking) swap(a, b int) {
	h := k.heap
	h[a], h[b] = h[b], h[a]
	k.pos[h[a].ent] = int32(a)
	k.pos[h[b].ent] = int32(b)
}

// ranked is one key of a ranking as a scrape copies it out of a loop:
// its identity, its count and error in the ranking and its statistics.
type ranked struct {
	id         keyID
	count, err int64
	st         keyStats
}

// view appends ranking r's monitored keys to dst and returns it with
// r's smallest count (min).
func (s *summaries) view(r int, dst []ranked) ([]ranked, int64) {
	for _, it := range s.rk[r].heap {
		e := &s.ents[it.ent]
		dst = append(dst, ranked{id: e.id, count: e.count[r], err: e.err[r], st: e.st})
	}
	return dst, s.min(r)
}
