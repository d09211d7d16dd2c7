package heat

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"
)

func idOf(s string) keyID {
	var id keyID
	id.n = uint8(copy(id.bytes[:], s))
	NamesPlain.identify(&id)
	return id
}

// TestSummaryBounds checks Filtered Space-Saving's guarantees in each of
// the three rankings, fed different weights of one Zipf stream (a
// ranking takes a request only now and then, as sampling does), against
// exact counts: every monitored key's true weight lies in [count-err,
// count], every unmonitored key's is at most its bucket's filter counter,
// which is at most the smallest count, so every key heavier than that is
// monitored. And the shared store: the hash table holds exactly the
// entries some ranking monitors, each once, the free list exactly the
// others, and each heap's positions, counts and hashes equal its
// entries'.
func TestSummaryBounds(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	z := rand.NewZipf(rng, 1.1, 1, 49_999)
	const capacity = 200
	s := newSummaries(capacity)
	truth := [numRankings]map[string]int64{{}, {}, {}}
	for range 300_000 {
		k := fmt.Sprintf("key:%d", z.Uint64())
		var w [numRankings]int64
		w[ByRequests] = int64(1 + rng.IntN(4))
		if rng.IntN(3) == 0 {
			w[ByBytes] = int64(1 + rng.IntN(1000))
		}
		if rng.IntN(5) == 0 {
			w[ByEngine] = int64(1 + rng.IntN(50))
		}
		for r := range w {
			truth[r][k] += w[r]
		}
		id := idOf(k)
		s.add(&id, &w)
	}
	live := map[int32]bool{}
	for r := range numRankings {
		k := &s.rk[r]
		if len(k.heap) != capacity {
			t.Fatalf("ranking %d monitors %d keys, want %d", r, len(k.heap), capacity)
		}
		monitored := map[string]bool{}
		for i, it := range k.heap {
			e := &s.ents[it.ent]
			name := string(e.id.bytes[:e.id.n])
			monitored[name] = true
			live[it.ent] = true
			if tr := truth[r][name]; tr > e.count[r] || tr < e.count[r]-e.err[r] {
				t.Errorf("ranking %d, %s: true %d outside [%d, %d]", r, name, tr, e.count[r]-e.err[r], e.count[r])
			}
			if k.pos[it.ent] != int32(i) || it.count != e.count[r] || it.hash != uint32(e.id.hash) {
				t.Errorf("ranking %d: heap item %d %+v, entry position %d count %d hash %#x", r, i, it, k.pos[it.ent], e.count[r], uint32(e.id.hash))
			}
			if i > 0 && it.count < k.heap[(i-1)/heapArity].count {
				t.Fatalf("ranking %d: heap order broken at %d", r, i)
			}
		}
		m := s.min(r)
		for name, w := range truth[r] {
			if monitored[name] {
				continue
			}
			id := idOf(name)
			if a := s.bucket(uint32(id.hash))[r]; w > a || a > m {
				t.Errorf("ranking %d: %s is not monitored: weighs %d, its bucket's counter is %d, the smallest count %d; want weight <= counter <= smallest", r, name, w, a, m)
			}
		}
	}
	for x := range s.ents {
		for r := range numRankings {
			if p := s.rk[r].pos[x]; p >= 0 && s.rk[r].heap[p].ent != int32(x) {
				t.Errorf("entry %d: position %d in ranking %d holds entry %d", x, p, r, s.rk[r].heap[p].ent)
			}
		}
	}
	used := 0
	for _, ts := range s.table {
		if ts.ent == 0 {
			continue
		}
		used++
		if x := ts.ent - 1; !live[x] {
			t.Errorf("the table holds entry %d, which no ranking monitors", x)
		}
	}
	for x := range live {
		e := &s.ents[x]
		if pos, ok := s.find(&e.id); !ok || s.table[pos].ent-1 != x || s.table[pos].hash != uint32(e.id.hash) {
			t.Errorf("%s: table lookup lost entry %d", e.id.bytes[:e.id.n], x)
		}
	}
	if used != len(live) || len(s.free) != len(s.ents)-len(live) {
		t.Errorf("%d table slots and %d free entries for %d live entries of %d", used, len(s.free), len(live), len(s.ents))
	}
	if len(live) == capacity {
		t.Errorf("the rankings monitor the same %d keys: the test's weights do not tell them apart", len(live))
	}
}

func TestRollUp(t *testing.T) {
	for in, want := range map[string]string{
		"user:1001:cart": "user:#:cart",
		"session:3f2b8c1e-9d4a-4e7b-8c2f-1a2b3c4d5e6f:data": "session:#:data",
		"plain":  "plain",
		"a1b22c": "a#b#c",
	} {
		b := []byte(in)
		if got := string(b[:rollUp(b, len(b))]); got != want {
			t.Errorf("rollUp(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestHeader(t *testing.T) {
	for in, want := range map[string]int64{
		"*3\r\n$1\r\na\r\n": 3, "~100000\r\n": 100000, "%2\r\n": 2, "*-1\r\n": -1,
		"$5\r\nhello\r\n": -1, "*12": -1, "+OK\r\n": -1,
	} {
		if got := header([]byte(in)); got != want {
			t.Errorf("header(%q) = %d, want %d", in, got, want)
		}
	}
}

// TestReplacedEntryStats checks that a key taking the place of an evicted
// one shows its own statistics only: an entry's body is written from its
// key's second observation on, and until then holds the evicted key's.
// On the way it checks the filter: a new key enters a summary whose
// smallest count is 3 on its third request of weight 1, when its
// bucket's counter (2) plus its weight reaches that count.
func TestReplacedEntryStats(t *testing.T) {
	h := NewSet(1, Config{Sample: 1, Capacity: 16, Commands: []string{"other", "get", "set"}})
	l := h.Loop(0)
	req := func(key string, cmd int, reply string, total time.Duration) {
		var p Pending
		k := l.Begin(&p, "get", [][]byte{[]byte("get"), []byte(key)}, 1, 30)
		p.Reply([]byte(reply))
		l.End(&p, k, cmd, 0, total, total/2)
	}
	big := "*3\r\n$300\r\n" + strings.Repeat("x", 300) + "\r\n"
	for i := range 16 { // the summary full of keys seen three times each
		for range 3 {
			req(fmt.Sprintf("old:%d", i), 1, big, 5*time.Millisecond)
		}
	}
	find := func(want string) Key {
		t.Helper()
		for _, k := range h.Keys(100, nil).ByRequests {
			if k.Key == want {
				return k
			}
		}
		t.Fatalf("%s is not among the top keys", want)
		return Key{}
	}
	// The statistics are the key's entry's, which every ranking that
	// takes the key adds to. The bytes ranking takes a request of fewer
	// bytes than its threshold by a random draw (sampled), which must
	// keep new out of it here: new's 35 bytes are under a quarter of the
	// threshold, so draws of at least a quarter of the range do, and the
	// loop's next five draws are made so. (The engine-time ranking's
	// threshold is under new's 50 µs: it counts each of new's requests
	// as it is, far under its smallest count, 7.5 ms: new never enters.)
	if z := l.z[ByBytes]; z < 4*35 {
		t.Fatalf("bytes threshold %d: new's requests could enter the bytes ranking", z)
	}
	l.rnd = highDraws(5, 1<<62)
	for range 2 {
		req("new", 2, "+OK\r\n", 100*time.Microsecond)
		for _, k := range h.Keys(100, nil).ByRequests {
			if k.Key == "new" {
				t.Fatalf("new is among the top keys after a request of weight 1 with the smallest count 3: %+v", k)
			}
		}
	}
	for n := 1; n <= 3; n++ {
		req("new", 2, "+OK\r\n", 100*time.Microsecond)
		k := find("new")
		if n == 1 && (k.Estimate != 3 || k.Error != 2) {
			t.Errorf("new entered with estimate %v, error %v; want 3, 2 (its bucket's 2 and its own 1)", k.Estimate, k.Error)
		}
		want := [][2]int64{{128, int64(n)}} // 100 µs: the bucket (64, 128]
		if k.Samples != int64(n) || len(k.Commands) != 1 || k.Commands["set"] != 1 ||
			k.ReplyBytesMax != 5 || k.ElementsMax != 0 || !slices.Equal(k.TotalMicros, want) {
			t.Fatalf("after %d requests: %d samples, commands %v, reply max %d, elements max %d, total µs %v; want %d, set only, 5, 0, %v",
				n, k.Samples, k.Commands, k.ReplyBytesMax, k.ElementsMax, k.TotalMicros, n, want)
		}
	}
}

// highDraws returns a state of the loops' generator (xorshift) whose
// next n draws are all at least min. The states tried are spread over
// the range (a Weyl sequence): from a small state, xorshift's first
// draws are small too.
func highDraws(n int, min uint64) uint64 {
	const step = 0x9e3779b97f4a7c15 // 2^64 / the golden ratio
	for seed := uint64(step); ; seed += step {
		r, ok := seed, true
		for range n {
			if r = xorshift(r); r < min {
				ok = false
				break
			}
		}
		if ok {
			return seed
		}
	}
}

// TestSummariesShareEntries checks the store the rankings share: a key
// that two rankings monitor has one entry holding both counts, it stays
// while either monitors it, and it is freed, out of the table, when the
// last one replaces it.
func TestSummariesShareEntries(t *testing.T) {
	s := newSummaries(16)
	k := idOf("k")
	e1 := s.add(&k, &[numRankings]int64{1, 0, 0})
	e2 := s.add(&k, &[numRankings]int64{0, 7, 0})
	if e1 == nil || e1 != e2 || e1.count != [numRankings]int64{1, 7, 0} {
		t.Fatalf("entries %p and %p, counts %v; want one entry counting 1, 7, 0", e1, e2, e2.count)
	}
	if live := len(s.ents) - len(s.free); live != 1 {
		t.Fatalf("%d live entries, want 1", live)
	}
	fill := func(r int, prefix string, w int64) {
		for i := range 16 {
			id := idOf(fmt.Sprintf("%s:%d", prefix, i))
			var ws [numRankings]int64
			ws[r] = w
			s.add(&id, &ws)
		}
	}
	fill(ByRequests, "a", 5) // 15 fill the ranking, the 16th replaces k (count 1)
	if s.rk[ByRequests].pos[e1Index(s, e1)] >= 0 {
		t.Fatal("k is still monitored by requests after 16 keys of weight 5 filled it")
	}
	if _, ok := s.find(&k); !ok {
		t.Fatal("k's entry left the table while the bytes ranking still monitors it")
	}
	fill(ByBytes, "b", 100)
	if _, ok := s.find(&k); ok {
		t.Fatal("k's entry is still in the table after both rankings replaced it")
	}
	if live := len(s.ents) - len(s.free); live != 32 {
		t.Fatalf("%d live entries, want 32 (16 keys in each of two rankings)", live)
	}
}

func e1Index(s *summaries, e *entry) int {
	for i := range s.ents {
		if &s.ents[i] == e {
			return i
		}
	}
	return -1
}
