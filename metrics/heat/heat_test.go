package heat

import (
	"bytes"
	"encoding/json"
	"math"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/respmeter/respmeter/routing"
)

// TestSlotsCountEveryRequest records requests in batches of every size
// around the loop's batch (none full, one full, full and some) and checks
// after each that Slots holds every one of them exactly: requests, bytes,
// engine time and shard per slot, whatever is still waiting in the batch.
// The keys mix plain ones, hash tags, the empty key and keys longer than
// MaxKeyBytes whose hash tag lies past it (End, as the proxy, is given
// only their first MaxKeyBytes bytes).
func TestSlotsCountEveryRequest(t *testing.T) {
	h := NewSet(2, Config{})
	args := [][]byte{[]byte("get"), nil}
	type want struct {
		requests, bytes int64
		engine          time.Duration
		shard           string
	}
	truth := map[int]*want{}
	names := []string{"a", "b", "c"}
	i := 0
	for _, n := range []int{1, batchLen - 2, 1, batchLen, 3 * batchLen, 7} {
		for range n {
			l := h.Loop(i % 2)
			key := []byte("k:" + strconv.Itoa(i*7919))
			switch i % 5 {
			case 1:
				key = []byte("{user" + strconv.Itoa(i%7) + "}:cart")
			case 2:
				key = []byte(strings.Repeat("x", MaxKeyBytes+i%3) + "{tag" + strconv.Itoa(i) + "}")
			case 3:
				key = []byte{}
			}
			args[1] = key
			var p Pending
			k := l.Begin(&p, "get", args, 1, 20+i%5)
			p.Reply([]byte("$3\r\nabc\r\n"))
			slot := int(routing.Slot(key))
			shard := slot % 3 // a slot's shard, as a cluster's is
			engine := time.Duration(1000 + i)
			l.End(&p, k[:min(len(k), MaxKeyBytes)], 1, shard, 2*engine, engine)
			w := truth[slot]
			if w == nil {
				w = &want{}
				truth[slot] = w
			}
			w.requests++
			w.bytes += int64(20+i%5) + 9
			w.engine += engine
			w.shard = names[shard]
			i++
		}
		got := h.Slots(names)
		if len(got.Slots) != len(truth) {
			t.Fatalf("after %d requests: %d slots, want %d", i, len(got.Slots), len(truth))
		}
		for _, s := range got.Slots {
			w := truth[s.Slot]
			if w == nil || s.Requests != w.requests || s.Bytes != w.bytes ||
				s.EngineSeconds != w.engine.Seconds() || s.Shard != w.shard {
				t.Fatalf("after %d requests: slot %d = %+v, want %+v", i, s.Slot, s, w)
			}
		}
	}
}

// TestSamplingFollowsTheMean: with every command taking 500 µs of engine
// time (a busy engine, a pipeline) and 512 bytes, the bytes and
// engine-time rankings still sample about one request in Sample, their
// thresholds being Sample times the loop's means, and the estimates of
// all three rankings hold the true totals within their errors.
func TestSamplingFollowsTheMean(t *testing.T) {
	const n, sample = 64_000, 64
	h := NewSet(1, Config{Sample: sample})
	l := h.Loop(0)
	args := [][]byte{[]byte("get"), []byte("hot")}
	reply := make([]byte, 512-20)
	engine := 500 * time.Microsecond
	for range n {
		var p Pending
		k := l.Begin(&p, "get", args, 1, 20)
		p.ReplySize(int64(len(reply)))
		l.End(&p, k, 1, 0, time.Millisecond, engine)
	}
	k := h.Keys(1, nil)
	for _, c := range []struct {
		name  string
		keys  []Key
		truth float64
	}{
		{"requests", k.ByRequests, n},
		{"bytes", k.ByBytes, n * 512},
		{"engine", k.ByEngineTime, n * engine.Seconds()},
	} {
		if len(c.keys) != 1 {
			t.Fatalf("%s: %d keys", c.name, len(c.keys))
		}
		got := c.keys[0]
		// One in 64 of 64,000: 1,000 samples, a standard deviation of
		// about 31; twice that is far out of reach of chance.
		if got.Samples > 2*n/sample {
			t.Errorf("%s: %d of %d requests sampled, want about %d", c.name, got.Samples, n, n/sample)
		}
		if d := got.Estimate - c.truth; d > got.Error || -d > got.Error {
			t.Errorf("%s: estimate %.6g ± %.3g, true %.6g", c.name, got.Estimate, got.Error, c.truth)
		}
		t.Logf("%s: %d samples, estimate %.6g ± %.3g, true %.6g", c.name, got.Samples, got.Estimate, got.Error, c.truth)
	}
	// A reply of Sample KiB is always counted, at its size, whatever the
	// mean: after a run of 1 MiB replies (a mean far over it) one more
	// request of 64 KiB still enters the bytes ranking.
	big := [][]byte{[]byte("get"), []byte("big")}
	for range 1000 {
		var p Pending
		k := l.Begin(&p, "get", big, 1, 20)
		p.ReplySize(1 << 20)
		l.End(&p, k, 1, 0, time.Millisecond, engine)
	}
	last := [][]byte{[]byte("get"), []byte("last")}
	var p Pending
	lk := l.Begin(&p, "get", last, 1, 0)
	p.ReplySize(sample << 10)
	l.End(&p, lk, 1, 0, time.Millisecond, engine)
	found := false
	for _, key := range h.Keys(1024, nil).ByBytes {
		found = found || key.Key == "last" && key.Samples == 1 && key.Estimate >= sample<<10
	}
	if !found {
		t.Errorf("a reply of %d KiB after 1 MiB ones was not counted at its size", sample)
	}
}

// TestSlotsSpill: a slot's counters stay exact when its narrow 32-bit
// counters overflow (requests of 1 GiB and 1 s, so that bytes and engine
// time spill every few requests), when one request alone is too big for
// them (6 GiB, 5 s), and when its request count reaches 2^32.
func TestSlotsSpill(t *testing.T) {
	h := NewSet(1, Config{})
	l := h.Loop(0)
	key := []byte("big")
	slot := int(routing.Slot(key))
	var requests, bytes int64
	var engine time.Duration
	rec := func(reply int64, eng time.Duration) {
		var p Pending
		k := l.Begin(&p, "get", [][]byte{[]byte("get"), key}, 1, 20)
		p.ReplySize(reply)
		l.End(&p, k, 1, 2, 2*eng, eng)
		requests++
		bytes += 20 + reply
		engine += eng
	}
	check := func(when string) {
		t.Helper()
		got := h.Slots([]string{"a", "b", "c"})
		if len(got.Slots) != 1 {
			t.Fatalf("%s: %d slots, want 1", when, len(got.Slots))
		}
		s := got.Slots[0]
		if s.Slot != slot || s.Requests != requests || s.Bytes != bytes || s.EngineSeconds != engine.Seconds() || s.Shard != "c" {
			t.Fatalf("%s: %+v, want slot %d, %d requests, %d bytes, %v, shard c", when, s, slot, requests, bytes, engine)
		}
	}
	for range 2 * batchLen {
		rec(1<<30, time.Second)
	}
	check("after 1 GiB, 1 s requests")
	rec(6<<30, 5*time.Second)
	rec(10, time.Microsecond)
	check("after a 6 GiB, 5 s request")
	l.mu.Lock()
	l.applyBatch()
	requests += math.MaxUint32 - 1 - int64(l.narrow[slot].requests) // as if that many more came
	l.narrow[slot].requests = math.MaxUint32 - 1
	l.mu.Unlock()
	for range 3 {
		rec(10, time.Microsecond)
	}
	check("past 2^32 requests")
}

// TestSampledProbability checks threshold sampling's decision exactly: over
// draws r evenly spread across the 64-bit range (k * 2^64/n), a value v
// under the threshold z is taken, at weight z, by v/z of them (to one
// draw), and a value at or over z by all of them at its own weight, so
// that the weights sum to n*v, unbiased; zero and negative values never.
func TestSampledProbability(t *testing.T) {
	const n = 1 << 16
	step := uint64(1) << (64 - 16) // 2^64 / n
	for _, c := range []struct{ v, z int64 }{
		{1, 64}, {1, 1}, {7, 64}, {63, 64}, {64, 64}, {65, 64}, {1 << 20, 64 << 10},
		{100, 640_000}, {5_000, 640_000}, {1, 1 << 62}, {0, 64}, {-5, 64},
	} {
		var taken, sum int64
		for k := range uint64(n) {
			if w := sampled(c.v, c.z, k*step+step/2); w != 0 {
				taken++
				sum += w
				if want := max(c.v, c.z); w != want {
					t.Fatalf("sampled(%d, %d) = %d, want 0 or %d", c.v, c.z, w, want)
				}
			}
		}
		want := float64(n) * min(max(float64(c.v), 0)/float64(c.z), 1)
		if math.Abs(float64(taken)-want) > 1 {
			t.Errorf("sampled(%d, %d): taken by %d of %d draws, want %.1f", c.v, c.z, taken, n, want)
		}
		if c.v >= c.z && sum != n*c.v {
			t.Errorf("sampled(%d, %d): weights sum to %d, want %d", c.v, c.z, sum, n*c.v)
		}
	}
}

// TestHugeBinaryKeys records two keys of 512 MiB (the most a Redis bulk
// string holds, proto-max-bulk-len) of binary bytes, one a byte longer
// than the other: /keys and /slots stay valid JSON of a few KiB, and the
// two keys stay apart (the hash of the whole key), with 2 and 1 requests.
// Plain names show both cut to their first MaxKeyBytes bytes, escaped and
// marked truncated; hashed names show two different hashes and none of
// the keys' bytes. The keys carry a hash tag, so that their slot's CRC16
// reads 3 bytes, not 512 MiB; the whole key is still read, for its hash.
func TestHugeBinaryKeys(t *testing.T) {
	if testing.Short() {
		t.Skip("reads 512 MiB keys")
	}
	prefix := "{bin}\x00\xff\xfe\"<>&\\\n</script>"
	// Fresh memory from the OS, written only in its first page: the zero
	// bytes after are read, never resident. The two keys share it.
	buf := make([]byte, 512<<20+1)
	copy(buf, prefix)
	keys := [2][]byte{buf[:len(buf)-1], buf}
	for _, names := range []Names{NamesPlain, NamesHash} {
		t.Run(names.String(), func(t *testing.T) {
			h := NewSet(1, Config{Sample: 1, Names: names})
			l := h.Loop(0)
			for i, key := range keys {
				for range i + 1 { // 1 and 2 requests: a distinct count each
					var p Pending
					k := l.Begin(&p, "get", [][]byte{[]byte("get"), key}, 1, len(key)+30)
					p.Reply([]byte("$-1\r\n"))
					l.End(&p, k[:MaxKeyBytes], 1, 0, time.Millisecond, time.Microsecond)
				}
			}
			rec := httptest.NewRecorder()
			h.KeysHandler(func() []string { return nil }).ServeHTTP(rec, httptest.NewRequest("GET", "/keys", nil))
			keysDoc := rec.Body.Bytes()
			rec = httptest.NewRecorder()
			h.SlotsHandler(func() []string { return nil }).ServeHTTP(rec, httptest.NewRequest("GET", "/slots", nil))
			slotsDoc := rec.Body.Bytes()
			for _, doc := range [][]byte{keysDoc, slotsDoc} {
				if !json.Valid(doc) || len(doc) > 16<<10 {
					t.Fatalf("%d bytes, valid JSON %v:\n%.2000s", len(doc), json.Valid(doc), doc)
				}
			}
			var got Keys
			if err := json.Unmarshal(keysDoc, &got); err != nil {
				t.Fatal(err)
			}
			if len(got.ByRequests) != 2 || got.ByRequests[0].Estimate != 2 || got.ByRequests[1].Estimate != 1 {
				t.Fatalf("by requests %+v, want the two keys apart, 2 and 1 requests", got.ByRequests)
			}
			a, b := got.ByRequests[0], got.ByRequests[1]
			switch names {
			case NamesPlain:
				q := strconv.Quote(string(buf[:MaxKeyBytes]))
				for _, k := range []Key{a, b} {
					if !k.Truncated || k.Key != q[1:len(q)-1] {
						t.Errorf("key %q (truncated %v), want %s cut", k.Key, k.Truncated, q)
					}
				}
			case NamesHash:
				if a.Key == b.Key || len(a.Key) != 16 || len(b.Key) != 16 || a.Truncated || b.Truncated {
					t.Errorf("hashed keys %q and %q (truncated %v, %v), want two 16-digit hashes", a.Key, b.Key, a.Truncated, b.Truncated)
				}
			}
			if names == NamesHash && (bytes.Contains(keysDoc, []byte("bin")) || bytes.Contains(keysDoc, []byte("script"))) {
				t.Errorf("a key's bytes shown with hashed names:\n%s", keysDoc)
			}
		})
	}
}

// TestSampledKeySlot: a top key shows its own hash slot, for a plain key,
// a hash tag, and a key longer than MaxKeyBytes whose tag lies past what
// End is given.
func TestSampledKeySlot(t *testing.T) {
	h := NewSet(1, Config{Sample: 1})
	l := h.Loop(0)
	keys := []string{"plain:1", "{user42}:cart", strings.Repeat("y", 2*MaxKeyBytes) + "{far}"}
	for _, key := range keys {
		var p Pending
		k := l.Begin(&p, "get", [][]byte{[]byte("get"), []byte(key)}, 1, 30)
		p.Reply([]byte("+OK\r\n"))
		l.End(&p, k[:min(len(k), MaxKeyBytes)], 1, 0, time.Millisecond, time.Microsecond)
	}
	got := h.Keys(10, nil).ByRequests
	if len(got) != len(keys) {
		t.Fatalf("%d top keys, want %d", len(got), len(keys))
	}
	for _, key := range keys {
		want := int(routing.Slot([]byte(key)))
		q := strconv.Quote(key[:min(len(key), MaxKeyBytes)])
		found := false
		for _, k := range got {
			if k.Key == q[1:len(q)-1] {
				found = true
				if k.Slot != want {
					t.Errorf("%s: slot %d, want %d", k.Key, k.Slot, want)
				}
			}
		}
		if !found {
			t.Errorf("%.20s... is not among the top keys %+v", key, got)
		}
	}
}

// TestSamplingTakesOneInSample: under a pipeline's attribution of engine
// time (the first command of each 16 carries the pipeline's whole engine
// time, the others almost none), the engine-time ranking takes mostly
// commands the other two do not, and with thresholds of Sample times the
// means alone the three together took about one request in 31 at Sample
// 64. Their common scale (retune) brings that back to about one in
// Sample, and every ranking's estimates still hold the true totals within
// their errors. The draws are fixed, so the run is the same every time.
func TestSamplingTakesOneInSample(t *testing.T) {
	const n, sample, keys, depth = 64 * 8192, 64, 17, 16
	h := NewSet(1, Config{Sample: sample})
	l := h.Loop(0)
	l.rnd = 0x9e3779b97f4a7c15
	names := make([][]byte, keys)
	for i := range names {
		names[i] = []byte("key:" + strconv.Itoa(i))
	}
	truth := map[string]*[numRankings]float64{}
	for i := range n {
		key := names[i%keys]
		engine := time.Microsecond
		if i%depth == 0 {
			engine = depth * 100 * time.Microsecond // the pipeline's round trip
		}
		var p Pending
		k := l.Begin(&p, "get", [][]byte{[]byte("get"), key}, 1, 30)
		p.ReplySize(106)
		l.End(&p, k, 1, 0, 2*engine, engine)
		tr := truth[string(key)]
		if tr == nil {
			tr = new([numRankings]float64)
			truth[string(key)] = tr
		}
		tr[ByRequests]++
		tr[ByBytes] += 136
		tr[ByEngine] += engine.Seconds()
	}
	got := h.Keys(keys, nil)
	samples := map[string]int64{} // each key's entry counts every request any ranking took
	for r, list := range [numRankings][]Key{got.ByRequests, got.ByBytes, got.ByEngineTime} {
		if len(list) != keys {
			t.Fatalf("ranking %d: %d keys, want %d", r, len(list), keys)
		}
		for _, k := range list {
			samples[k.Key] = k.Samples
			if d := k.Estimate - truth[k.Key][r]; math.Abs(d) > k.Error {
				t.Errorf("ranking %d, %s: estimate %.6g ± %.3g, true %.6g", r, k.Key, k.Estimate, k.Error, truth[k.Key][r])
			}
		}
	}
	var taken int64
	for _, s := range samples {
		taken += s
	}
	if got.Requests != n || got.Sampled != taken {
		t.Errorf("/keys counts %d requests, %d sampled; want %d and the entries' %d", got.Requests, got.Sampled, n, taken)
	}
	// Scale 1 throughout would take about n/31 (some 16,900); the first
	// window runs at scale 1 and the scale then settles, so the whole run
	// takes a few percent more than n/sample (8,192).
	if want := int64(n / sample); taken < want*85/100 || taken > want*115/100 {
		t.Errorf("%d of %d requests taken into some ranking, want about one in %d (%d)", taken, n, sample, want)
	}
	t.Logf("%d of %d requests taken (one in %.1f), scale %.3f", taken, n, float64(n)/float64(taken), l.scale)
}
