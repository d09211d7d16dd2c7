package proxy

import (
	"fmt"
	"testing"
)

func replies(rs ...string) [][]byte {
	out := make([][]byte, len(rs))
	for i, r := range rs {
		out[i] = []byte(r)
	}
	return out
}

func TestFirstError(t *testing.T) {
	for _, tc := range []struct {
		in   []string
		want int
	}{
		{[]string{":1\r\n", ":2\r\n"}, -1},
		{[]string{":1\r\n", "-ERR a\r\n", "-ERR b\r\n"}, 1},
		{[]string{"!5\r\nERR x\r\n", "-ERR b\r\n"}, 0}, // RESP3 blob error
		{[]string{"+OK\r\n", "$-1\r\n", "*0\r\n"}, -1},
		{nil, -1},
	} {
		if got := firstError(replies(tc.in...)); got != tc.want {
			t.Errorf("firstError(%q) = %d, want %d", tc.in, got, tc.want)
		}
	}
}

func TestMergeSum(t *testing.T) {
	m := newMerger()
	for _, tc := range []struct {
		in      []string
		want    string
		wantBad int
	}{
		{[]string{":1\r\n", ":2\r\n", ":0\r\n"}, ":3\r\n", -1},
		{[]string{":-4\r\n", ":10\r\n"}, ":6\r\n", -1},
		{[]string{":1\r\n"}, ":1\r\n", -1},
		{[]string{":1\r\n", "+OK\r\n"}, "", 1},
		{[]string{"$1\r\n1\r\n", ":1\r\n"}, "", 0},
		{[]string{":9223372036854775807\r\n", ":0\r\n"}, ":9223372036854775807\r\n", -1},
	} {
		out, bad := m.sum(nil, replies(tc.in...))
		if bad != tc.wantBad || bad < 0 && string(out) != tc.want {
			t.Errorf("sum(%q) = %q, bad %d; want %q, bad %d", tc.in, out, bad, tc.want, tc.wantBad)
		}
	}
}

func TestMergeMGet(t *testing.T) {
	m := newMerger()
	for _, tc := range []struct {
		name    string
		in      []string
		pos     [][]int32
		want    string
		wantBad int
	}{
		{"two shards", []string{"*2\r\n$1\r\na\r\n$1\r\nc\r\n", "*1\r\n$1\r\nb\r\n"}, [][]int32{{0, 2}, {1}},
			"*3\r\n$1\r\na\r\n$1\r\nb\r\n$1\r\nc\r\n", -1},
		{"a key named twice (duplicates keep both positions)", []string{"*2\r\n$1\r\nx\r\n$1\r\nx\r\n", "*1\r\n$-1\r\n"}, [][]int32{{0, 2}, {1}},
			"*3\r\n$1\r\nx\r\n$-1\r\n$1\r\nx\r\n", -1},
		{"RESP3 nulls and nested values", []string{"*1\r\n_\r\n", "*1\r\n*2\r\n:1\r\n:2\r\n"}, [][]int32{{1}, {0}},
			"*2\r\n*2\r\n:1\r\n:2\r\n_\r\n", -1},
		{"wrong element count", []string{"*1\r\n$1\r\na\r\n", "*2\r\n$1\r\nb\r\n$1\r\nc\r\n"}, [][]int32{{0}, {1}}, "", 1},
		{"not an array", []string{"+OK\r\n", "*1\r\n$1\r\nb\r\n"}, [][]int32{{0}, {1}}, "", 0},
		{"truncated array", []string{"*2\r\n$1\r\na\r\n", "*1\r\n$1\r\nb\r\n"}, [][]int32{{0, 2}, {1}}, "", 0},
	} {
		out, bad := m.mget([]byte("prefix:"), replies(tc.in...), tc.pos)
		if bad != tc.wantBad || bad < 0 && string(out) != "prefix:"+tc.want {
			t.Errorf("%s: mget = %q, bad %d; want %q, bad %d", tc.name, out, bad, tc.want, tc.wantBad)
		}
		if len(m.elems) != 0 {
			t.Errorf("%s: %d scratch elements left", tc.name, len(m.elems))
		}
	}
}

func TestMergeConcat(t *testing.T) {
	m := newMerger()
	for _, tc := range []struct {
		in      []string
		want    string
		wantBad int
	}{
		{[]string{"*2\r\n$1\r\na\r\n$1\r\nb\r\n", "*0\r\n", "*1\r\n$2\r\ncc\r\n"}, "*3\r\n$1\r\na\r\n$1\r\nb\r\n$2\r\ncc\r\n", -1},
		{[]string{"*0\r\n", "*0\r\n"}, "*0\r\n", -1},
		{[]string{"*12\r\n" + "$1\r\nk\r\n$1\r\nk\r\n$1\r\nk\r\n$1\r\nk\r\n$1\r\nk\r\n$1\r\nk\r\n$1\r\nk\r\n$1\r\nk\r\n$1\r\nk\r\n$1\r\nk\r\n$1\r\nk\r\n$1\r\nk\r\n"},
			"*12\r\n" + "$1\r\nk\r\n$1\r\nk\r\n$1\r\nk\r\n$1\r\nk\r\n$1\r\nk\r\n$1\r\nk\r\n$1\r\nk\r\n$1\r\nk\r\n$1\r\nk\r\n$1\r\nk\r\n$1\r\nk\r\n$1\r\nk\r\n", -1},
		{[]string{"*1\r\n$1\r\na\r\n", ":1\r\n"}, "", 1},
	} {
		out, bad := m.concat([]byte("p:"), replies(tc.in...))
		if bad != tc.wantBad || bad < 0 && string(out) != "p:"+tc.want || bad >= 0 && string(out) != "p:" {
			t.Errorf("concat(%q) = %q, bad %d; want %q, bad %d", tc.in, out, bad, tc.want, tc.wantBad)
		}
	}
}

// TestScanCursorCoversEveryShard: a full iteration through the client's
// cursors visits each shard's engine cursors in order, every shard once,
// and ends at 0.
func TestScanCursorCoversEveryShard(t *testing.T) {
	for _, n := range []int{1, 2, 3, 7} {
		// Each fake shard k iterates engine cursors 0 -> 5 -> 9 -> 0.
		next := map[uint64]uint64{0: 5, 5: 9, 9: 0}
		var visited []string
		c := uint64(0)
		for steps := 0; ; steps++ {
			if steps > 4*n {
				t.Fatalf("n=%d: no end after %d steps: %v", n, steps, visited)
			}
			engine, k := scanCursor(c, n)
			visited = append(visited, fmt.Sprintf("%d:%d", k, engine))
			c = scanNext(next[engine], k, n)
			if c == 0 {
				break
			}
		}
		var want []string
		for k := range n {
			want = append(want, fmt.Sprintf("%d:0", k), fmt.Sprintf("%d:5", k), fmt.Sprintf("%d:9", k))
		}
		if fmt.Sprint(visited) != fmt.Sprint(want) {
			t.Errorf("n=%d: visited %v, want %v", n, visited, want)
		}
	}
}

func TestMergeScanReply(t *testing.T) {
	m := newMerger()
	out, ok := m.scan(nil, []byte("*2\r\n$2\r\n17\r\n*1\r\n$3\r\nkey\r\n"), 1, 3)
	if want := "*2\r\n$2\r\n52\r\n*1\r\n$3\r\nkey\r\n"; !ok || string(out) != want { // 17*3 + 1
		t.Errorf("scan = %q, %v; want %q", out, ok, want)
	}
	out, ok = m.scan(nil, []byte("*2\r\n$1\r\n0\r\n*0\r\n"), 1, 3)
	if want := "*2\r\n$1\r\n2\r\n*0\r\n"; !ok || string(out) != want { // the next shard from 0
		t.Errorf("scan at a shard's end = %q, %v; want %q", out, ok, want)
	}
	out, ok = m.scan(nil, []byte("*2\r\n$1\r\n0\r\n*0\r\n"), 2, 3)
	if want := "*2\r\n$1\r\n0\r\n*0\r\n"; !ok || string(out) != want {
		t.Errorf("scan at the last shard's end = %q, %v; want %q", out, ok, want)
	}
	for _, bad := range []string{"-ERR invalid cursor\r\n", "*2\r\n:1\r\n*0\r\n", "*2\r\n$1\r\nx\r\n*0\r\n", "*1\r\n$1\r\n0\r\n"} {
		if _, ok := m.scan(nil, []byte(bad), 0, 3); ok {
			t.Errorf("scan(%q) accepted", bad)
		}
	}
}

// TestMergeAllocs: merging allocates nothing once the scratch is warm.
func TestMergeAllocs(t *testing.T) {
	m := newMerger()
	rs := replies("*2\r\n$1\r\na\r\n$1\r\nc\r\n", "*1\r\n$1\r\nb\r\n")
	pos := [][]int32{{0, 2}, {1}}
	ints := replies(":1\r\n", ":2\r\n")
	scanReply := []byte("*2\r\n$1\r\n0\r\n*0\r\n")
	dst := make([]byte, 0, 256)
	run := func() {
		dst, _ = m.mget(dst[:0], rs, pos)
		dst, _ = m.concat(dst[:0], rs)
		dst, _ = m.sum(dst[:0], ints)
		dst, _ = m.scan(dst[:0], scanReply, 0, 2)
	}
	run()
	if a := testing.AllocsPerRun(100, run); a != 0 {
		t.Errorf("%v allocations per merge round, want 0", a)
	}
}

func TestOneSucceeded(t *testing.T) {
	for _, tc := range []struct {
		in   []string
		want int
	}{
		{[]string{"-NOTBUSY No scripts in execution right now.\r\n", "+OK\r\n", "-NOTBUSY x\r\n"}, 1},
		{[]string{"-NOTBUSY a\r\n", "-NOTBUSY b\r\n"}, 0},
		{[]string{"+OK\r\n", "-ERR x\r\n"}, 0},
		{nil, -1},
	} {
		if got := oneSucceeded(replies(tc.in...)); got != tc.want {
			t.Errorf("oneSucceeded(%q) = %d, want %d", tc.in, got, tc.want)
		}
	}
}

func TestMergeInts(t *testing.T) {
	m := newMerger()
	for _, tc := range []struct {
		name    string
		op      uint8
		in      []string
		want    string
		wantBad int
	}{
		{"SCRIPT EXISTS: and per element", aggAnd, []string{"*3\r\n:1\r\n:1\r\n:0\r\n", "*3\r\n:1\r\n:0\r\n:0\r\n", "*3\r\n:1\r\n:1\r\n:1\r\n"},
			"*3\r\n:1\r\n:0\r\n:0\r\n", -1},
		{"or per element", aggOr, []string{"*2\r\n:0\r\n:0\r\n", "*2\r\n:0\r\n:1\r\n"}, "*2\r\n:0\r\n:1\r\n", -1},
		{"and of scalars", aggAnd, []string{":1\r\n", ":1\r\n"}, ":1\r\n", -1},
		{"and normalises to 0/1", aggAnd, []string{":2\r\n", ":5\r\n"}, ":1\r\n", -1},
		{"WAIT: the fewest replicas", aggMin, []string{":2\r\n", ":0\r\n", ":1\r\n"}, ":0\r\n", -1},
		{"WAITAOF: element-wise min", aggMin, []string{"*2\r\n:1\r\n:3\r\n", "*2\r\n:0\r\n:4\r\n"}, "*2\r\n:0\r\n:3\r\n", -1},
		{"max", aggMax, []string{":-1\r\n", ":7\r\n"}, ":7\r\n", -1},
		{"empty arrays", aggAnd, []string{"*0\r\n", "*0\r\n"}, "*0\r\n", -1},
		{"shapes differ: scalar then array", aggMin, []string{":1\r\n", "*1\r\n:1\r\n"}, "", 1},
		{"lengths differ", aggAnd, []string{"*1\r\n:1\r\n", "*2\r\n:1\r\n:1\r\n"}, "", 1},
		{"not an integer", aggAnd, []string{"*1\r\n:1\r\n", "*1\r\n$1\r\n1\r\n"}, "", 1},
		{"not an integer reply", aggMin, []string{"+OK\r\n", ":1\r\n"}, "", 0},
	} {
		out, bad := m.ints(nil, replies(tc.in...), tc.op)
		if bad != tc.wantBad || bad < 0 && string(out) != tc.want {
			t.Errorf("%s: ints = %q, bad %d; want %q, bad %d", tc.name, out, bad, tc.want, tc.wantBad)
		}
	}
}
