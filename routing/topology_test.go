package routing

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/respmeter/respmeter/internal/redistest"
)

// addrList returns n distinct loopback addresses 127.0.0.1:7000+i.
func addrList(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = "127.0.0.1:" + strconv.Itoa(7000+i)
	}
	return out
}

func mustSplit(t *testing.T, addrs []string) *Topology {
	t.Helper()
	top, err := EvenSplit(addrs)
	if err != nil {
		t.Fatal(err)
	}
	return top
}

// allRanges returns Ranges of every shard of top.
func allRanges(top *Topology) [][][2]uint16 {
	out := make([][][2]uint16, len(top.Addrs))
	for i := range top.Addrs {
		out[i] = top.Ranges(i)
	}
	return out
}

// TestEvenSplitByHand checks the ranges redis-cli --cluster create prints
// ("Master[i] -> Slots first - last"), worked out by hand from
// clusterManagerCommandCreate: slots_per_node = 16384/n, last =
// lround(cursor + slots_per_node - 1), cursor += slots_per_node.
func TestEvenSplitByHand(t *testing.T) {
	tests := []struct {
		n    int
		want [][][2]uint16
	}{
		// 16384/1: the whole range.
		{1, [][][2]uint16{{{0, 16383}}}},
		// 8192: lround(8191) = 8191.
		{2, [][][2]uint16{{{0, 8191}}, {{8192, 16383}}}},
		// 5461.33: lround(5460.33) = 5460, lround(10921.67) = 10922.
		{3, [][][2]uint16{{{0, 5460}}, {{5461, 10922}}, {{10923, 16383}}}},
		// 3276.8: lround(3275.8) = 3276, lround(6552.6) = 6553,
		// lround(9829.4) = 9829, lround(13106.2) = 13106.
		{5, [][][2]uint16{{{0, 3276}}, {{3277, 6553}}, {{6554, 9829}}, {{9830, 13106}}, {{13107, 16383}}}},
	}
	for _, tt := range tests {
		t.Run(strconv.Itoa(tt.n), func(t *testing.T) {
			addrs := addrList(tt.n)
			top := mustSplit(t, addrs)
			if !reflect.DeepEqual(top.Addrs, addrs) {
				t.Errorf("Addrs = %v, want %v", top.Addrs, addrs)
			}
			if got := allRanges(top); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("ranges = %v, want %v", got, tt.want)
			}
			if top.Unassigned() != 0 || top.Ranges(NoShard) != nil {
				t.Errorf("Unassigned = %d, Ranges(NoShard) = %v", top.Unassigned(), top.Ranges(NoShard))
			}
			for i, rs := range tt.want {
				for _, s := range []uint16{rs[0][0], rs[0][1]} {
					if top.Shard(s) != i || top.Addr(s) != addrs[i] {
						t.Errorf("slot %d: Shard %d Addr %q, want %d %q", s, top.Shard(s), top.Addr(s), i, addrs[i])
					}
				}
			}
		})
	}
}

// TestEvenSplitProperties checks, for every cluster size up to Redis
// Cluster's 1000-node design limit, that the ranges are contiguous, in the
// order of the addresses, cover every slot, and hold floor or ceil of
// 16384/n slots each; and that Topology agrees with them.
func TestEvenSplitProperties(t *testing.T) {
	for n := 1; n <= 1000; n++ {
		ranges, ok := evenRanges(n)
		if !ok || len(ranges) != n {
			t.Fatalf("evenRanges(%d) = %d ranges, %v", n, len(ranges), ok)
		}
		lo, hi := NumSlots/n, (NumSlots+n-1)/n
		next := 0
		for i, r := range ranges {
			size := r[1] - r[0] + 1
			if r[0] != next || size < lo || size > hi {
				t.Fatalf("n=%d: range %d = %v (size %d, want %d-%d, starting at %d)", n, i, r, size, lo, hi, next)
			}
			next = r[1] + 1
		}
		if next != NumSlots {
			t.Fatalf("n=%d: ranges end at %d", n, next-1)
		}
	}
	for _, n := range []int{1, 2, 3, 4, 5, 7, 16, 100} {
		ranges, _ := evenRanges(n)
		top := mustSplit(t, addrList(n))
		for i, r := range ranges {
			if got := top.Ranges(i); len(got) != 1 || int(got[0][0]) != r[0] || int(got[0][1]) != r[1] {
				t.Errorf("n=%d: Ranges(%d) = %v, want %v", n, i, got, r)
			}
		}
	}
	// The largest size that works, and the first where redis-cli's
	// single-precision cursor drifts past slot 16383.
	if _, err := EvenSplit(addrList(7541)); err != nil {
		t.Errorf("EvenSplit(7541 addrs): %v", err)
	}
	if _, err := EvenSplit(addrList(7542)); !errors.Is(err, ErrTooManyShards) {
		t.Errorf("EvenSplit(7542 addrs) error = %v, want ErrTooManyShards", err)
	}
}

func TestEvenSplitErrors(t *testing.T) {
	tests := []struct {
		addrs []string
		want  error
	}{
		{nil, ErrNoShards},
		{[]string{}, ErrNoShards},
		{[]string{"127.0.0.1:7000", "127.0.0.1:7001", "127.0.0.1:7000"}, ErrDuplicateAddr},
		{[]string{"127.0.0.1"}, ErrBadAddr},
		{[]string{":7000"}, ErrBadAddr},
		{[]string{"h:"}, ErrBadAddr},
		{[]string{""}, ErrBadAddr},
		{addrList(NumSlots + 1), ErrTooManyShards},
	}
	for _, tt := range tests {
		top, err := EvenSplit(tt.addrs)
		if !errors.Is(err, tt.want) || top != nil {
			t.Errorf("EvenSplit(%.40q) = %v, %v; want %v", tt.addrs, top, err, tt.want)
		}
	}
	// The message names the culprit.
	_, err := EvenSplit([]string{"a:1", "b:2", "a:1"})
	if err == nil || !strings.Contains(err.Error(), `"a:1"`) {
		t.Errorf("duplicate error = %v", err)
	}
	// The caller's slice is copied.
	addrs := addrList(2)
	top := mustSplit(t, addrs)
	addrs[0] = "changed:1"
	if top.Addrs[0] != "127.0.0.1:7000" {
		t.Errorf("EvenSplit aliases its argument")
	}
}

// TestEvenSplitRedisCli is the oracle: redis-cli --cluster create prints
// its plan ("Master[0] -> Slots 0 - 5460") before asking for "yes"; the
// test answers "no", so no cluster is created, and compares the plan.
func TestEvenSplitRedisCli(t *testing.T) {
	redistest.SkipIfUnavailable(t)
	cli := redistest.Tool(t, "redis-cli")
	planRe := regexp.MustCompile(`Master\[(\d+)\] -> Slots (\d+) - (\d+)`)
	for _, n := range []int{3, 4, 5, 6, 7, 9} {
		t.Run(strconv.Itoa(n), func(t *testing.T) {
			var addrs []string
			for range n {
				addrs = append(addrs, redistest.Start(t, "--cluster-enabled", "yes").Addr())
			}
			cmd := exec.Command(cli, append(append([]string{"--cluster", "create"}, addrs...), "--cluster-replicas", "0")...)
			cmd.Stdin = strings.NewReader("no\n")
			out, _ := cmd.CombinedOutput() // it exits 1 when told no
			var got [][][2]uint16
			for _, m := range planRe.FindAllStringSubmatch(string(out), -1) {
				lo, _ := strconv.Atoi(m[2])
				hi, _ := strconv.Atoi(m[3])
				got = append(got, [][2]uint16{{uint16(lo), uint16(hi)}})
			}
			if len(got) != n {
				t.Fatalf("redis-cli printed no plan for %d masters:\n%s", n, out)
			}
			if want := allRanges(mustSplit(t, addrs)); !reflect.DeepEqual(got, want) {
				t.Errorf("redis-cli plans %v, EvenSplit gives %v", got, want)
			}
		})
	}
}

func TestTopologyAccessors(t *testing.T) {
	addrs := addrList(3)
	top := mustSplit(t, addrs)
	if top.Shard(NumSlots) != NoShard || top.Shard(65535) != NoShard || top.Addr(NumSlots) != "" {
		t.Errorf("slot out of range: Shard %d, Addr %q", top.Shard(NumSlots), top.Addr(NumSlots))
	}
	if top.Index(addrs[1]) != 1 || top.Index("127.0.0.1:1") != -1 || top.Index("") != -1 {
		t.Errorf("Index: %d %d", top.Index(addrs[1]), top.Index("127.0.0.1:1"))
	}
	if top.Ranges(3) != nil || top.Ranges(-2) != nil {
		t.Errorf("Ranges out of range: %v %v", top.Ranges(3), top.Ranges(-2))
	}
	want := "127.0.0.1:7000[0-5460] 127.0.0.1:7001[5461-10922] 127.0.0.1:7002[10923-16383]"
	if got := top.String(); got != want {
		t.Errorf("String = %q, want %q", got, want)
	}
	if !top.Equal(mustSplit(t, addrs)) || top.Equal(mustSplit(t, addrList(2))) {
		t.Errorf("Equal")
	}
	// A Topology with holes, built as FetchCluster builds one.
	holes, err := buildTopology([]claim{{"b:2", 10, 19}, {"a:1", 0, 0}, {"b:2", 30, 30}, {"a:1", 2, 5}})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(holes.Addrs, []string{"a:1", "b:2"}) {
		t.Errorf("Addrs = %v, want ordered by lowest slot", holes.Addrs)
	}
	if got := holes.Ranges(0); !reflect.DeepEqual(got, [][2]uint16{{0, 0}, {2, 5}}) {
		t.Errorf("Ranges(0) = %v", got)
	}
	if got := holes.Ranges(NoShard); !reflect.DeepEqual(got, [][2]uint16{{1, 1}, {6, 9}, {20, 29}, {31, 16383}}) {
		t.Errorf("Ranges(NoShard) = %v", got)
	}
	if holes.Unassigned() != NumSlots-16 || holes.Shard(1) != NoShard || holes.Addr(1) != "" {
		t.Errorf("Unassigned = %d, Shard(1) = %d", holes.Unassigned(), holes.Shard(1))
	}
	if got, want := holes.String(), "a:1[0,2-5] b:2[10-19,30] unassigned[1,6-9,20-29,31-16383]"; got != want {
		t.Errorf("String = %q, want %q", got, want)
	}
	if _, err := buildTopology([]claim{{"a:1", 0, 10}, {"b:2", 10, 20}}); !errors.Is(err, ErrBadClusterReply) {
		t.Errorf("overlapping claims: %v", err)
	}
}

func TestWithSlot(t *testing.T) {
	addrs := addrList(3)
	top := mustSplit(t, addrs)
	orig := mustSplit(t, addrs)

	// MOVED to a known shard.
	moved := top.WithSlot(0, addrs[2])
	if moved.Shard(0) != 2 || moved.Addr(0) != addrs[2] || !reflect.DeepEqual(moved.Addrs, addrs) {
		t.Fatalf("WithSlot(0, shard 2): Shard %d, Addrs %v", moved.Shard(0), moved.Addrs)
	}
	if got := moved.Ranges(0); !reflect.DeepEqual(got, [][2]uint16{{1, 5460}}) {
		t.Errorf("Ranges(0) = %v", got)
	}
	if got := moved.Ranges(2); !reflect.DeepEqual(got, [][2]uint16{{0, 0}, {10923, 16383}}) {
		t.Errorf("Ranges(2) = %v", got)
	}
	for s := uint16(1); s < NumSlots; s++ {
		if moved.Shard(s) != top.Shard(s) {
			t.Fatalf("slot %d changed owner", s)
		}
	}
	if !top.Equal(orig) {
		t.Fatal("WithSlot modified its receiver")
	}
	// Already the owner: the same Topology.
	if top.WithSlot(5461, addrs[1]) != top {
		t.Error("WithSlot to the current owner copied")
	}
	// MOVED to a new node: appended, old indices unchanged.
	fresh := moved.WithSlot(16383, "127.0.0.1:7100")
	if want := append(append([]string(nil), addrs...), "127.0.0.1:7100"); !reflect.DeepEqual(fresh.Addrs, want) {
		t.Errorf("Addrs = %v, want %v", fresh.Addrs, want)
	}
	if fresh.Shard(16383) != 3 || fresh.Shard(16382) != 2 || fresh.Shard(0) != 2 {
		t.Errorf("after MOVED to a new node: %v", fresh)
	}
	if len(moved.Addrs) != 3 {
		t.Errorf("WithSlot appended to its receiver's Addrs: %v", moved.Addrs)
	}
	// Appending to the copies of one parent must not share storage.
	a, b := moved.WithSlot(1, "x:1"), moved.WithSlot(2, "y:2")
	if a.Addrs[3] != "x:1" || b.Addrs[3] != "y:2" {
		t.Errorf("siblings share Addrs: %v %v", a.Addrs, b.Addrs)
	}
	defer func() {
		if recover() == nil {
			t.Error("WithSlot(NumSlots) did not panic")
		}
	}()
	top.WithSlot(NumSlots, addrs[0])
}

func TestRebase(t *testing.T) {
	a, b, c, d := "10.0.0.1:6379", "10.0.0.2:6379", "10.0.0.3:6379", "10.0.0.4:6379"
	prev := mustSplit(t, []string{a, b, c})
	// The refreshed map lists c, a, d (b is gone; d is new).
	next := mustSplit(t, []string{c, a, d})
	got := next.Rebase(prev)
	if want := []string{a, b, c, d}; !reflect.DeepEqual(got.Addrs, want) {
		t.Fatalf("Addrs = %v, want %v", got.Addrs, want)
	}
	for s := uint16(0); s < NumSlots; s++ {
		if got.Addr(s) != next.Addr(s) {
			t.Fatalf("slot %d: owner %q, want %q", s, got.Addr(s), next.Addr(s))
		}
	}
	if got.Ranges(1) != nil {
		t.Errorf("vanished %s still owns %v", b, got.Ranges(1))
	}
	if got.Shard(0) != 2 || got.Shard(5461) != 0 || got.Shard(16383) != 3 {
		t.Errorf("indices: %d %d %d", got.Shard(0), got.Shard(5461), got.Shard(16383))
	}
	if !next.Equal(mustSplit(t, []string{c, a, d})) || !prev.Equal(mustSplit(t, []string{a, b, c})) {
		t.Error("Rebase modified an argument")
	}
	// Rebasing again changes nothing, and returns the receiver.
	if got.Rebase(prev) != got || got.Rebase(got) != got {
		t.Error("Rebase on a compatible map copied")
	}
	if next.Rebase(nil) != next {
		t.Error("Rebase(nil) copied")
	}
	// b comes back: it gets its old index again.
	back := mustSplit(t, []string{b, d}).Rebase(got)
	if !reflect.DeepEqual(back.Addrs, got.Addrs) || back.Shard(0) != 1 || back.Shard(16383) != 3 || back.Ranges(0) != nil {
		t.Errorf("b back: %v", back)
	}
	// Holes stay holes.
	holes, _ := buildTopology([]claim{{d, 100, 200}})
	h := holes.Rebase(prev)
	if h.Shard(150) != 3 || h.Shard(0) != NoShard || h.Unassigned() != NumSlots-101 {
		t.Errorf("holes: %v", h)
	}
}

// redirectCases are error lines as redis-server 7.0 writes them
// (clusterRedirectClient: "-%s %d %s:%d", the endpoint from
// cluster-preferred-endpoint-type) and lines that are not redirects.
var redirectCases = []struct {
	msg, from string
	ok        bool
	want      Redirect
}{
	{"MOVED 244 127.0.0.1:7001", "127.0.0.1:7000", true, Redirect{false, 244, "127.0.0.1:7001"}},
	{"ASK 244 127.0.0.1:7001", "127.0.0.1:7000", true, Redirect{true, 244, "127.0.0.1:7001"}},
	{"MOVED 0 10.1.2.3:6379", "h:1", true, Redirect{false, 0, "10.1.2.3:6379"}},
	{"MOVED 16383 10.1.2.3:65535", "h:1", true, Redirect{false, 16383, "10.1.2.3:65535"}},
	// unknown-endpoint: empty host, the answering node's host.
	{"ASK 244 :7001", "10.0.0.5:7000", true, Redirect{true, 244, "10.0.0.5:7001"}},
	{"MOVED 12182 :7001", "node-a.example:7000", true, Redirect{false, 12182, "node-a.example:7001"}},
	// hostname preferred, none announced.
	{"MOVED 244 ?:7001", "10.0.0.5:7000", true, Redirect{false, 244, "10.0.0.5:7001"}},
	{"MOVED 244 ?:7001", "[::1]:7000", true, Redirect{false, 244, "[::1]:7001"}},
	// hostname: kept as a name.
	{"MOVED 244 node-b.example:7001", "10.0.0.5:7000", true, Redirect{false, 244, "node-b.example:7001"}},
	{"ASK 1 localhost:7001", "127.0.0.1:7000", true, Redirect{true, 1, "localhost:7001"}},
	// IPv6: bare as Redis writes it, or bracketed.
	{"MOVED 1 ::1:7001", "h:1", true, Redirect{false, 1, "[::1]:7001"}},
	{"MOVED 1 [::1]:7001", "h:1", true, Redirect{false, 1, "[::1]:7001"}},
	{"MOVED 1 fe80::1:2:3:7001", "h:1", true, Redirect{false, 1, "[fe80::1:2:3]:7001"}},
	{"MOVED 1 [fe80::1%eth0]:7001", "h:1", true, Redirect{false, 1, "[fe80::1%eth0]:7001"}},
	// Leading zeros are read as decimal and dropped.
	{"MOVED 00244 h:07001", "h:1", true, Redirect{false, 244, "h:7001"}},

	{"", "h:1", false, Redirect{}},
	{"MOVED", "h:1", false, Redirect{}},
	{"MOVED 244", "h:1", false, Redirect{}},
	{"MOVED 244 ", "h:1", false, Redirect{}},
	{"MOVED 244 127.0.0.1", "h:1", false, Redirect{}},
	{"MOVED 244 127.0.0.1:", "h:1", false, Redirect{}},
	{"MOVED 244 127.0.0.1:0", "h:1", false, Redirect{}},
	{"MOVED 244 127.0.0.1:65536", "h:1", false, Redirect{}},
	{"MOVED 244 127.0.0.1:+7001", "h:1", false, Redirect{}},
	{"MOVED 244 127.0.0.1:7001 ", "h:1", false, Redirect{}},
	{"MOVED 244 127.0.0.1:7001\r", "h:1", false, Redirect{}},
	{"MOVED 16384 127.0.0.1:7001", "h:1", false, Redirect{}},
	{"MOVED -1 127.0.0.1:7001", "h:1", false, Redirect{}},
	{"MOVED 1x 127.0.0.1:7001", "h:1", false, Redirect{}},
	{"MOVED  244 127.0.0.1:7001", "h:1", false, Redirect{}},
	{"MOVED 244  127.0.0.1:7001", "h:1", false, Redirect{}},
	{"MOVED 244 a b:7001", "h:1", false, Redirect{}},
	{"MOVED 244 [::1:7001", "h:1", false, Redirect{}},
	{"MOVED 244 [[::1]]:7001", "h:1", false, Redirect{}},
	{"moved 244 127.0.0.1:7001", "h:1", false, Redirect{}},
	{"-MOVED 244 127.0.0.1:7001", "h:1", false, Redirect{}},
	{"ASKING", "h:1", false, Redirect{}},
	{"ERR unknown command", "h:1", false, Redirect{}},
	{"CLUSTERDOWN Hash slot not served", "h:1", false, Redirect{}},
	{"TRYAGAIN Multiple keys request during rehashing of slot", "h:1", false, Redirect{}},
	// Same host wanted, but from gives none.
	{"MOVED 244 :7001", "", false, Redirect{}},
	{"ASK 244 ?:7001", "nohostport", false, Redirect{}},
	{"MOVED 244 :7001", ":7000", false, Redirect{}},
}

func TestParseRedirect(t *testing.T) {
	for _, tt := range redirectCases {
		t.Run(tt.msg, func(t *testing.T) {
			got, ok := ParseRedirect([]byte(tt.msg), tt.from)
			if ok != tt.ok || got != tt.want {
				t.Fatalf("ParseRedirect(%q, %q) = %+v, %v; want %+v, %v", tt.msg, tt.from, got, ok, tt.want, tt.ok)
			}
		})
	}
}

// TestParseRedirectOracle parses the redirects a real cluster sends.
func TestParseRedirectOracle(t *testing.T) {
	t.Parallel() // a cluster takes about 2 s to form
	c := redistest.StartCluster(t, 2)
	addrs := c.Addrs()
	// "foo" is slot 12182 (node 1), "bar" 5061 (node 0).
	for _, tt := range []struct {
		node int
		key  string
		want Redirect
	}{
		{0, "foo", Redirect{false, 12182, addrs[1]}},
		{1, "bar", Redirect{false, 5061, addrs[0]}},
	} {
		conn := redistest.Dial(t, addrs[tt.node])
		conn.Send(t, redistest.Cmd("GET", tt.key))
		f, err := conn.ReadFrame(0)
		if err != nil || !bytes.HasPrefix(f, []byte("-")) {
			t.Fatalf("GET %s: %q %v", tt.key, f, err)
		}
		got, ok := ParseRedirect(bytes.TrimSuffix(f[1:], []byte("\r\n")), addrs[tt.node])
		if !ok || got != tt.want {
			t.Errorf("ParseRedirect(%q) = %+v, %v; want %+v", f, got, ok, tt.want)
		}
	}
}

// FuzzParseRedirect checks that ParseRedirect never panics and that what
// it accepts is well formed and survives a round trip through the MOVED
// text a node would write.
func FuzzParseRedirect(f *testing.F) {
	for _, tt := range redirectCases {
		f.Add([]byte(tt.msg), tt.from)
	}
	f.Fuzz(func(t *testing.T, msg []byte, from string) {
		if len(msg) > 512 || len(from) > 512 {
			return
		}
		r, ok := ParseRedirect(msg, from)
		if !ok {
			if r != (Redirect{}) {
				t.Fatalf("rejected %q but returned %+v", msg, r)
			}
			return
		}
		if r.Slot >= NumSlots {
			t.Fatalf("slot %d", r.Slot)
		}
		host, port, err := net.SplitHostPort(r.Addr)
		if err != nil || host == "" {
			t.Fatalf("Addr %q: %v", r.Addr, err)
		}
		if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 || strconv.Itoa(p) != port {
			t.Fatalf("Addr %q: port", r.Addr)
		}
		kind := "MOVED"
		if r.Ask {
			kind = "ASK"
		}
		again, ok := ParseRedirect([]byte(fmt.Sprintf("%s %d %s", kind, r.Slot, r.Addr)), "other:1")
		if !ok || again != r {
			t.Fatalf("round trip of %+v gave %+v, %v", r, again, ok)
		}
	})
}

func TestWithSlots(t *testing.T) {
	top, err := EvenSplit([]string{"a:1", "b:1"})
	if err != nil {
		t.Fatal(err)
	}
	u := top.WithSlots(100, 8191, "b:1")
	if got := u.Ranges(1); len(got) != 1 || got[0] != [2]uint16{100, 16383} {
		t.Errorf("b:1 owns %v, want [100 16383]", got)
	}
	if got := u.Ranges(0); len(got) != 1 || got[0] != [2]uint16{0, 99} {
		t.Errorf("a:1 owns %v, want [0 99]", got)
	}
	if top.Shard(100) != 0 {
		t.Error("WithSlots changed its receiver")
	}
	if u.WithSlots(200, 300, "b:1") != u {
		t.Error("WithSlots of slots addr owns already: a copy")
	}
	w := u.WithSlots(0, 5, "c:1")
	if len(w.Addrs) != 3 || w.Shard(5) != 2 || w.Shard(6) != 0 || len(u.Addrs) != 2 {
		t.Errorf("a new address: Addrs %v, slot 5 on %d, slot 6 on %d", w.Addrs, w.Shard(5), w.Shard(6))
	}
}
