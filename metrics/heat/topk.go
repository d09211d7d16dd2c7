package heat

import "math/bits"

// Space-Saving (Metwally, Agrawal, El Abbadi, "Efficient Computation of
// Frequent and Top-k Elements in Data Streams", ICDT 2005), weighted and
// filtered (Homem, Carvalho, "Finding top-k elements in data streams",
// Information Sciences 180, 2010: Filtered Space-Saving). A summary
// monitors at most cap keys, each with a count and an error, and keeps a
// filter: one counter alpha per bucket of keys (by hash), an upper bound
// of the weight any unmonitored key of that bucket has received. A
// monitored key's count grows by each weight w it receives. An
// unmonitored key of bucket b, when the summary is full and m is its
// smallest count, adds w to alpha[b] while alpha[b] + w < m, and
// otherwise replaces the key of count m, taking count alpha[b] + w and
// error alpha[b]; the replaced key's bucket's counter becomes at least m
// (the most that key had received). Each counter so stays below m, and:
// for every monitored key, count - error <= true weight <= count, and
// every key whose true weight exceeds the smallest count is monitored,
// which is at most total/cap. Plain Space-Saving is the same with every
// counter at m; the filter keeps keys whose bucket has seen little weight
// out, where plain Space-Saving lets each unmonitored key replace one:
// over 100,000 keys taken at random, with the default capacity, only
// about one unmonitored key's weight in four replaces a key (the others
// cost two cache lines, not a dozen); with Zipf(1.1) keys one in twelve.
//
// Summaries merge (Agarwal et al., "Mergeable Summaries", PODS 2012): a
// key absent from a full summary received at most that summary's smallest
// count there, so the merged count adds it as count and as error.
//
// The summary is allocation-free after newSummary: entries live in one
// slice, a min-heap orders them by count, and an open-addressing table
// (linear probing, backward-shift deletion) finds a key's entry by its
// 64-bit hash.
//
// An entry is about 0.5 KiB (its statistics' histograms), so the entries
// of a summary (0.5 MiB at the default 1,024) do not stay in the CPU's
// caches between sampled requests. The heap and the table are therefore
// laid out so that their work reads only themselves: a heap item carries
// its entry's count (a copy; add keeps the two equal) and the low 32 bits
// of its key's hash (what the table's removal needs), and each entry's
// heap position is in pos, so a sift is a walk over 16 + 4 KiB (and a
// short one: see heapArity); a table slot carries the low 32 bits of its
// key's hash, its home position and a tag, so a probe or a deletion reads
// an entry only where the tag matches. Adding an unmonitored key to a
// full summary, the common case with many distinct keys, then touches one
// entry, the one it replaces, instead of one for each step of the sift
// and the probes.

// entry is one monitored key and its per-key statistics.
type entry struct {
	id    keyID
	count int64 // Space-Saving count: an upper bound of the key's weight
	err   int64 // the count it inherited on entry: count-err is a lower bound
	st    keyStats
}

// reset makes e the entry of id, of count and err, with no statistics.
// Field by field: a composite literal assigned to *e is built on the stack
// first and then copied, 0.5 KiB twice. The statistics' body is left as
// it is: record clears it at the key's second observation (keyStats).
func (e *entry) reset(id *keyID, count, err int64) {
	e.id = *id
	e.count, e.err = count, err
	e.st.n = 0
}

// heapItem is one position of the summary's min-heap: an entry's count
// (equal to the entry's own), its index and the low 32 bits of its key's
// hash, in what would be padding (16 bytes).
type heapItem struct {
	count int64
	ent   int32
	hash  uint32
}

// tableSlot is one position of the summary's hash table: an entry index
// + 1 (0: free) and the low 32 bits of its key's hash.
type tableSlot struct {
	hash uint32
	ent  int32
}

// summary is a weighted Space-Saving summary of at most cap keys.
type summary struct {
	ents  []entry     // len <= cap
	heap  []heapItem  // a min-heap by count, one item per entry
	pos   []int32     // pos[x]: entry x's position in heap; len cap
	table []tableSlot // len a power of 2, >= 2*cap
	// alpha are the filter's counters (Filtered Space-Saving), one per
	// bucket of keys; len a power of 2, 1 << (32-shift).
	alpha []int64
	shift uint8
	total int64 // sum of the weights added
}

func newSummary(capacity int) *summary {
	n := 1
	for n < 2*capacity {
		n <<= 1
	}
	return &summary{
		ents:  make([]entry, 0, capacity),
		heap:  make([]heapItem, 0, capacity),
		pos:   make([]int32, capacity),
		table: make([]tableSlot, n),
		alpha: make([]int64, n*alphaPerSlot),
		shift: uint8(32 - bits.Len(uint(n*alphaPerSlot)-1)),
	}
}

// alphaPerSlot is the filter's counters per slot of the table: 8,192
// counters (64 KiB) at the default capacity. Fewer let more keys replace
// one: with half as many, about one in 2.3 of 100,000 keys taken at
// random; with as many, one in 1.4 (one in 1.0 with no filter).
const alphaPerSlot = 4

// bucket returns the filter bucket of a key whose hash has the low 32
// bits h: Fibonacci hashing of h, whose top bits do not follow the
// table's (its low bits).
func (s *summary) bucket(h uint32) int { return int((h * 0x9e3779b1) >> s.shift) }

// min returns the smallest count when the summary is full, else 0: the
// most weight an unmonitored key may have received.
func (s *summary) min() int64 {
	if len(s.ents) < cap(s.ents) || len(s.heap) == 0 {
		return 0
	}
	return s.heap[0].count
}

// find returns the table position of id's entry, or of the free position
// where it would go, and whether it is there.
func (s *summary) find(id *keyID) (int, bool) {
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

// add adds weight w (> 0) to key id and returns its entry, whose stats the
// caller then updates. It does not allocate.
func (s *summary) add(id *keyID, w int64) *entry {
	s.total += w
	pos, ok := s.find(id)
	if ok {
		x := s.table[pos].ent - 1
		e := &s.ents[x]
		e.count += w
		i := int(s.pos[x])
		s.heap[i].count = e.count
		s.down(i)
		return e
	}
	if len(s.ents) < cap(s.ents) {
		x := int32(len(s.ents))
		s.ents = s.ents[:x+1]
		e := &s.ents[x]
		e.reset(id, w, 0)
		s.table[pos] = tableSlot{hash: uint32(id.hash), ent: x + 1}
		s.pos[x] = int32(len(s.heap))
		s.heap = append(s.heap, heapItem{count: w, ent: x, hash: uint32(id.hash)})
		s.up(len(s.heap) - 1)
		return e
	}
	// Full: the key of smallest count gives its place to id, if its
	// bucket's counter says it may have reached that count.
	x, m := s.heap[0].ent, s.heap[0].count
	a := &s.alpha[s.bucket(uint32(id.hash))]
	if *a+w < m {
		*a += w
		return nil
	}
	count, err := *a+w, *a
	old := s.heap[0].hash
	if b := &s.alpha[s.bucket(old)]; *b < m {
		*b = m
	}
	s.remove(x, old) // not e.id.hash: the entry is not read
	e := &s.ents[x]
	e.reset(id, count, err)
	pos, _ = s.find(id) // the removal may have moved slots
	s.table[pos] = tableSlot{hash: uint32(id.hash), ent: x + 1}
	s.heap[0].count, s.heap[0].hash = count, uint32(id.hash) // not e.count: its line may still be on its way
	s.down(0)
	return e
}

// remove takes entry x, whose key's hash has the low 32 bits hash, out of
// the table (not the heap), shifting back the slots of its probe run so
// that lookups need no tombstones.
func (s *summary) remove(x int32, hash uint32) {
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

// The heap is 4-ary: a sift moves through log4(cap) levels (5 at the
// default 1,024) instead of log2(cap), and each level's children are 4
// adjacent items (64 bytes, one or two cache lines): a sift's reads wait
// on each other, level by level, so fewer levels are fewer waits.
const heapArity = 4

func (s *summary) less(a, b int) bool {
	return s.heap[a].count < s.heap[b].count
}

func (s *summary) swap(a, b int) {
	h := s.heap
	h[a], h[b] = h[b], h[a]
	s.pos[h[a].ent] = int32(a)
	s.pos[h[b].ent] = int32(b)
}

func (s *summary) up(i int) {
	for i > 0 {
		p := (i - 1) / heapArity
		if !s.less(i, p) {
			return
		}
		s.swap(i, p)
		i = p
	}
}

func (s *summary) down(i int) {
	n := len(s.heap)
	for {
		first := heapArity*i + 1
		if first >= n {
			return
		}
		c := first
		for k := first + 1; k < min(first+heapArity, n); k++ {
			if s.less(k, c) {
				c = k
			}
		}
		if !s.less(c, i) {
			return
		}
		s.swap(i, c)
		i = c
	}
}

// copyTo copies s into d, which must have s's capacity, reusing d's
// storage.
func (s *summary) copyTo(d *summary) {
	d.ents = append(d.ents[:0], s.ents...)
	d.heap = append(d.heap[:0], s.heap...)
	copy(d.pos, s.pos)
	copy(d.table, s.table)
	d.total = s.total
}
