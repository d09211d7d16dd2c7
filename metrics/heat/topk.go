package heat

// Space-Saving (Metwally, Agrawal, El Abbadi, "Efficient Computation of
// Frequent and Top-k Elements in Data Streams", ICDT 2005), weighted: a
// summary monitors at most cap keys, each with a count and an error. A
// monitored key's count grows by each weight it receives; an unmonitored
// key replaces the key of smallest count m, taking count m + w and error
// m. For every monitored key, count - error <= true weight <= count, and
// every key whose true weight exceeds the smallest count is monitored. The
// smallest count is at most total/cap.
//
// Summaries merge (Agarwal et al., "Mergeable Summaries", PODS 2012): a
// key absent from a full summary received at most that summary's smallest
// count there, so the merged count adds it as count and as error.
//
// The summary is allocation-free after newSummary: entries live in one
// slice, a min-heap of entry indexes orders them by count, and an
// open-addressing table (linear probing, backward-shift deletion) finds a
// key's entry by its 64-bit hash.

// entry is one monitored key and its per-key statistics.
type entry struct {
	id    keyID
	count int64 // Space-Saving count: an upper bound of the key's weight
	err   int64 // the count it inherited on entry: count-err is a lower bound
	heap  int32 // position in summary.heap
	st    keyStats
}

// summary is a weighted Space-Saving summary of at most cap keys.
type summary struct {
	ents  []entry // len <= cap
	heap  []int32 // entry indexes, a min-heap by count
	table []int32 // entry index + 1 by hash slot; 0 = free; len a power of 2, >= 2*cap
	total int64   // sum of the weights added
}

func newSummary(capacity int) *summary {
	n := 1
	for n < 2*capacity {
		n <<= 1
	}
	return &summary{
		ents:  make([]entry, 0, capacity),
		heap:  make([]int32, 0, capacity),
		table: make([]int32, n),
	}
}

// min returns the smallest count when the summary is full, else 0: the
// most weight an unmonitored key may have received.
func (s *summary) min() int64 {
	if len(s.ents) < cap(s.ents) || len(s.heap) == 0 {
		return 0
	}
	return s.ents[s.heap[0]].count
}

// find returns the table position of id's entry, or of the free position
// where it would go, and whether it is there.
func (s *summary) find(id *keyID) (int, bool) {
	mask := len(s.table) - 1
	for i := int(id.hash) & mask; ; i = (i + 1) & mask {
		x := s.table[i]
		if x == 0 {
			return i, false
		}
		if s.ents[x-1].id.same(id) {
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
		x := s.table[pos] - 1
		e := &s.ents[x]
		e.count += w
		s.down(int(e.heap))
		return e
	}
	if len(s.ents) < cap(s.ents) {
		x := int32(len(s.ents))
		s.ents = s.ents[:x+1]
		e := &s.ents[x]
		*e = entry{id: *id, count: w, heap: int32(len(s.heap))}
		s.heap = append(s.heap, x)
		s.table[pos] = x + 1
		s.up(int(e.heap))
		return e
	}
	// Full: the key of smallest count gives its place to id.
	x := s.heap[0]
	e := &s.ents[x]
	s.remove(&e.id)
	m := e.count
	*e = entry{id: *id, count: m + w, err: m, heap: 0}
	pos, _ = s.find(id) // the removal may have moved entries
	s.table[pos] = x + 1
	s.down(0)
	return e
}

// remove takes id out of the table (not the heap), shifting back the
// entries of its probe run so that lookups need no tombstones.
func (s *summary) remove(id *keyID) {
	i, ok := s.find(id)
	if !ok {
		return
	}
	mask := len(s.table) - 1
	for j := (i + 1) & mask; ; j = (j + 1) & mask {
		x := s.table[j]
		if x == 0 {
			break
		}
		home := int(s.ents[x-1].id.hash) & mask
		// Move x back to i if i lies cyclically in [home, j).
		if (j > i && (home <= i || home > j)) || (j < i && home <= i && home > j) {
			s.table[i] = x
			i = j
		}
	}
	s.table[i] = 0
}

func (s *summary) less(a, b int) bool {
	return s.ents[s.heap[a]].count < s.ents[s.heap[b]].count
}

func (s *summary) swap(a, b int) {
	s.heap[a], s.heap[b] = s.heap[b], s.heap[a]
	s.ents[s.heap[a]].heap = int32(a)
	s.ents[s.heap[b]].heap = int32(b)
}

func (s *summary) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
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
		l := 2*i + 1
		if l >= n {
			return
		}
		c := l
		if r := l + 1; r < n && s.less(r, l) {
			c = r
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
	copy(d.table, s.table)
	d.total = s.total
}
