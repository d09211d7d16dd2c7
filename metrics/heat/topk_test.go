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

// TestSummaryBounds checks Filtered Space-Saving's guarantees on a
// weighted Zipf stream against exact counts: every monitored key's true
// weight lies in [count-err, count], every unmonitored key's is at most
// its bucket's filter counter, which is at most the smallest count, so
// every key heavier than that is monitored; the hash table finds every
// entry after evictions and holds no other, and the heap's copies of the
// counts and hashes equal the entries'.
func TestSummaryBounds(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	z := rand.NewZipf(rng, 1.1, 1, 49_999)
	s := newSummary(200)
	truth := map[string]int64{}
	for range 300_000 {
		k := fmt.Sprintf("key:%d", z.Uint64())
		w := int64(1 + rng.IntN(4))
		truth[k] += w
		id := idOf(k)
		s.add(&id, w)
	}
	if len(s.ents) != 200 {
		t.Fatalf("%d entries, want 200", len(s.ents))
	}
	monitored := map[string]bool{}
	for i := range s.ents {
		e := &s.ents[i]
		k := string(e.id.bytes[:e.id.n])
		monitored[k] = true
		tr := truth[k]
		if tr > e.count || tr < e.count-e.err {
			t.Errorf("%s: true %d outside [%d, %d]", k, tr, e.count-e.err, e.count)
		}
		if pos, ok := s.find(&e.id); !ok || s.table[pos].ent-1 != int32(i) || s.table[pos].hash != uint32(e.id.hash) {
			t.Errorf("%s: table lookup lost entry %d", k, i)
		}
		if h := s.heap[s.pos[i]]; h.ent != int32(i) || h.count != e.count || h.hash != uint32(e.id.hash) {
			t.Errorf("%s: heap item %+v, want entry %d count %d hash %#x", k, h, i, e.count, uint32(e.id.hash))
		}
	}
	used := 0
	for _, ts := range s.table {
		if ts.ent != 0 {
			used++
		}
	}
	if used != len(s.ents) {
		t.Errorf("%d table slots in use, want %d", used, len(s.ents))
	}
	m := s.min()
	for k, w := range truth {
		if monitored[k] {
			continue
		}
		id := idOf(k)
		if a := s.alpha[s.bucket(uint32(id.hash))]; w > a || a > m {
			t.Errorf("%s is not monitored: weighs %d, its bucket's counter is %d, the smallest count %d; want weight <= counter <= smallest", k, w, a, m)
		}
	}
	for i := 1; i < len(s.heap); i++ {
		if s.less(i, (i-1)/heapArity) {
			t.Fatalf("heap order broken at %d", i)
		}
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
