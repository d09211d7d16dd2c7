package routing

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/respmeter/respmeter/internal/redistest"
	"github.com/respmeter/respmeter/internal/respconn"
)

// enc encodes v as RESP2: a string as a bulk string, an int as an integer,
// nil as a null bulk string, a []any as an array, a raw as itself.
func enc(v any) string {
	switch v := v.(type) {
	case nil:
		return "$-1\r\n"
	case raw:
		return string(v)
	case int:
		return ":" + strconv.Itoa(v) + "\r\n"
	case string:
		return "$" + strconv.Itoa(len(v)) + "\r\n" + v + "\r\n"
	case []any:
		var b strings.Builder
		b.WriteString("*" + strconv.Itoa(len(v)) + "\r\n")
		for _, e := range v {
			b.WriteString(enc(e))
		}
		return b.String()
	}
	panic(fmt.Sprintf("enc: %T", v))
}

// raw is RESP written as is.
type raw string

// Replies of a fake node.
const (
	unknownShards = "-ERR unknown subcommand 'shards'. Try CLUSTER HELP.\r\n"
	disabled      = "-ERR This instance has cluster support disabled\r\n"
	silent        = ""        // answer nothing
	hangUp        = "<close>" // close the connection
)

// fakeNode is a scripted RESP2 server on a loopback port: it reads each
// request as a RESP array and writes answer(request) back, where request
// is the arguments joined by spaces ("CLUSTER SHARDS"). It records the
// requests, and its cleanup closes everything and waits for its
// goroutines.
type fakeNode struct {
	addr string
	mu   sync.Mutex
	reqs []string
}

func startFake(t *testing.T, answer func(req string) string) *fakeNode {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeNode{addr: l.Addr().String()}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	wg.Go(func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Go(func() { f.serve(c, answer) })
		}
	})
	t.Cleanup(func() {
		l.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return f
}

func (f *fakeNode) serve(c net.Conn, answer func(string) string) {
	defer c.Close()
	r := bufio.NewReader(c)
	for {
		v, err := respconn.Read(r)
		if err != nil {
			return
		}
		words := make([]string, len(v.Elems))
		for i, e := range v.Elems {
			words[i] = e.Str
		}
		req := strings.Join(words, " ")
		f.mu.Lock()
		f.reqs = append(f.reqs, req)
		f.mu.Unlock()
		switch a := answer(req); a {
		case hangUp:
			return
		case silent:
		default:
			if _, err := io.WriteString(c, a); err != nil {
				return
			}
		}
	}
}

func (f *fakeNode) requests() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.reqs...)
}

// scripted answers CLUSTER SHARDS and CLUSTER SLOTS with the given bytes.
func scripted(shards, slots string) func(string) string {
	return func(req string) string {
		switch req {
		case "CLUSTER SHARDS":
			return shards
		case "CLUSTER SLOTS":
			return slots
		}
		return "-ERR unexpected request " + req + "\r\n"
	}
}

// relay refuses CLUSTER SHARDS, as a server older than 7.0 does, and
// passes anything else to the real node at addr: FetchCluster then parses
// a real CLUSTER SLOTS reply.
func relay(addr string) func(string) string {
	return func(req string) string {
		if req == "CLUSTER SHARDS" {
			return unknownShards
		}
		c, err := redistest.DialConn(addr, 2*time.Second)
		if err != nil {
			return "-ERR relay: " + err.Error() + "\r\n"
		}
		defer c.Close()
		if err := c.Write(redistest.Cmd(strings.Fields(req)...)); err != nil {
			return "-ERR relay: " + err.Error() + "\r\n"
		}
		b, err := c.ReadFrame(0)
		if err != nil {
			return "-ERR relay: " + err.Error() + "\r\n"
		}
		return string(b)
	}
}

func fetch(t *testing.T, seed string) *Topology {
	t.Helper()
	top, err := FetchCluster(context.Background(), seed, 5*time.Second, respconn.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return top
}

// wantTopology fails t unless got Equals want.
func wantTopology(t *testing.T, how string, got, want *Topology) {
	t.Helper()
	if !got.Equal(want) {
		t.Errorf("%s:\n got  %v\n want %v", how, got, want)
	}
}

// TestFetchCluster reads a real 3-master cluster from each node, directly
// (CLUSTER SHARDS) and through a relay that refuses CLUSTER SHARDS (so
// FetchCluster falls back to the real CLUSTER SLOTS reply), before and
// after slots move.
func TestFetchCluster(t *testing.T) {
	t.Parallel() // a cluster takes about 2 s to form
	c := redistest.StartCluster(t, 3)
	addrs := c.Addrs()
	want := mustSplit(t, addrs)
	check := func(want *Topology, order []string) {
		t.Helper()
		for _, seed := range addrs {
			got := fetch(t, seed)
			if !reflect.DeepEqual(got.Addrs, order) {
				t.Errorf("seed %s: Addrs = %v, want %v", seed, got.Addrs, order)
			}
			wantTopology(t, "from "+seed+", rebased", got.Rebase(want), want)
		}
		f := startFake(t, relay(addrs[1]))
		wantTopology(t, "CLUSTER SLOTS via relay, rebased", fetch(t, f.addr).Rebase(want), want)
		if got := f.requests(); !reflect.DeepEqual(got, []string{"CLUSTER SHARDS", "CLUSTER SLOTS"}) {
			t.Errorf("relay saw %q", got)
		}
	}
	// As StartCluster set it up: exactly EvenSplit of the addresses.
	check(want, addrs)
	// Each master's node id, from CLUSTER SHARDS and (through the relay,
	// which refuses SHARDS) from CLUSTER SLOTS.
	ids := map[string]string{}
	for i, a := range addrs {
		ids[a] = c.NodeID(i)
	}
	for _, seed := range []string{addrs[0], startFake(t, relay(addrs[1])).addr} {
		if got := fetch(t, seed).IDs; !reflect.DeepEqual(got, ids) {
			t.Errorf("from %s: IDs = %v, want %v", seed, got, ids)
		}
	}
	for _, seed := range addrs {
		wantTopology(t, "from "+seed, fetch(t, seed), want)
	}

	// "foo" (slot 12182) to node 0 and slot 0 to node 2: node 2 now owns
	// the lowest slot, so it comes first in Addrs.
	c.MoveSlot(12182, 0)
	c.MoveSlot(0, 2)
	moved := want.WithSlot(12182, addrs[0]).WithSlot(0, addrs[2])
	check(moved, []string{addrs[2], addrs[0], addrs[1]})
	got := fetch(t, addrs[1])
	if r := got.Ranges(1); !reflect.DeepEqual(r, [][2]uint16{{1, 5460}, {12182, 12182}}) {
		t.Errorf("node 0 owns %v", r)
	}
	if got.Addr(Slot([]byte("foo"))) != addrs[0] || got.Addr(0) != addrs[2] || got.Unassigned() != 0 {
		t.Errorf("after moves: %v", got)
	}
}

// TestFetchClusterOneMaster: a node that has never met a peer does not
// know its own IP and reports ip and endpoint empty; the seed's host
// stands in.
func TestFetchClusterOneMaster(t *testing.T) {
	t.Parallel()
	c := redistest.StartCluster(t, 1)
	port := strconv.Itoa(c.Nodes[0].Port())
	for _, seed := range []string{"127.0.0.1:" + port, "localhost:" + port} {
		got := fetch(t, seed)
		wantTopology(t, "from "+seed, got, mustSplit(t, []string{seed}))
	}
	f := startFake(t, relay(c.Addrs()[0]))
	got := fetch(t, f.addr)
	wantTopology(t, "via relay", got, mustSplit(t, []string{"127.0.0.1:" + port}))
}

// TestFetchClusterEndpoints runs clusters whose nodes report endpoints
// other than their IP (cluster-preferred-endpoint-type).
func TestFetchClusterEndpoints(t *testing.T) {
	t.Parallel()
	t.Run("unknown-endpoint", func(t *testing.T) {
		t.Parallel()
		c := redistest.StartClusterWith(t, 3, "--cluster-preferred-endpoint-type", "unknown-endpoint")
		addrs := c.Addrs()
		want := mustSplit(t, addrs)
		verify := func(how string) {
			t.Helper()
			// The endpoint is empty (SHARDS) or null (SLOTS) and the
			// node's ip field gives the host, whatever host the seed is
			// reached on.
			for _, seed := range []string{addrs[0], "localhost:" + strconv.Itoa(c.Nodes[2].Port())} {
				wantTopology(t, how+" from "+seed, fetch(t, seed), want)
			}
			f := startFake(t, relay(addrs[1]))
			wantTopology(t, how+" via relay", fetch(t, f.addr), want)
		}
		verify("unknown-endpoint")
		// Hostname preferred, none announced: the endpoint is "?".
		for _, s := range c.Nodes {
			s.Do("CONFIG", "SET", "cluster-preferred-endpoint-type", "hostname")
		}
		verify("hostname without hostname")
	})
	t.Run("hostname", func(t *testing.T) {
		t.Parallel()
		c := redistest.StartClusterWith(t, 3,
			"--cluster-announce-hostname", "localhost", "--cluster-preferred-endpoint-type", "hostname")
		var names []string
		for _, s := range c.Nodes {
			names = append(names, "localhost:"+strconv.Itoa(s.Port()))
		}
		want := mustSplit(t, names)
		for _, seed := range c.Addrs() {
			wantTopology(t, "from "+seed, fetch(t, seed), want)
		}
		f := startFake(t, relay(c.Addrs()[0]))
		wantTopology(t, "via relay", fetch(t, f.addr), want)
	})
}

// node is a CLUSTER SHARDS node entry.
func node(port int, ip, endpoint, role string, extra ...any) []any {
	return append([]any{"id", strings.Repeat("a", 40), "port", port, "ip", ip, "endpoint", endpoint,
		"role", role, "replication-offset", 0, "health", "online"}, extra...)
}

// TestFetchClusterShardsForms feeds CLUSTER SHARDS replies in every form
// FetchCluster must handle.
func TestFetchClusterShardsForms(t *testing.T) {
	shards := []any{
		// Two ranges; the replica is listed first.
		[]any{"slots", []any{0, 99, 200, 299}, "nodes", []any{
			node(7009, "10.0.0.9", "10.0.0.9", "replica"),
			node(7000, "10.0.0.1", "10.0.0.1", "master", "hostname", "a.example"),
		}},
		// Hostname preferred but unset: "?" endpoint, ip used.
		[]any{"slots", []any{100, 199}, "nodes", []any{node(7001, "10.0.0.2", "?", "master")}},
		// Nothing known: the seed's host.
		[]any{"slots", []any{300, 399}, "nodes", []any{node(7002, "", "", "master")}},
		// A hostname endpoint and a TLS-only node (port 0).
		[]any{"slots", []any{400, 16000}, "nodes", []any{
			node(0, "10.0.0.4", "node-d.example", "master", "tls-port", 7003),
		}},
		// IPv6.
		[]any{"slots", []any{16001, 16100}, "nodes", []any{node(7005, "::1", "::1", "master")}},
		// No master (failover under way): unassigned.
		[]any{"slots", []any{16101, 16150}, "nodes", []any{node(7006, "10.0.0.6", "10.0.0.6", "replica")}},
		// After a failover under Redis 7.2+ (8.0.2, Valkey 8.1.1 seen):
		// the failed master stays in the shard, listed first, still with
		// role "master"; the promoted replica owns the slots.
		[]any{"slots", []any{16201, 16383}, "nodes", []any{
			node(7010, "10.0.0.10", "10.0.0.10", "master", "health", "fail"),
			node(7008, "10.0.0.8", "10.0.0.8", "master"),
		}},
		// A failed master with no replica to take over keeps its slots.
		[]any{"slots", []any{16151, 16200}, "nodes", []any{
			node(7011, "10.0.0.11", "10.0.0.11", "master", "health", "fail"),
			node(7012, "10.0.0.12", "10.0.0.12", "replica", "health", "fail"),
		}},
		// A master without slots, and an empty shard: left out.
		[]any{"slots", []any{}, "nodes", []any{node(7007, "10.0.0.7", "10.0.0.7", "master")}},
		[]any{"slots", []any{}, "nodes", []any{}},
	}
	f := startFake(t, scripted(enc(shards), "-ERR not asked\r\n"))
	got := fetch(t, f.addr)
	want := []string{"10.0.0.1:7000", "10.0.0.2:7001", "127.0.0.1:7002", "node-d.example:7003", "[::1]:7005",
		"10.0.0.11:7011", "10.0.0.8:7008"}
	if !reflect.DeepEqual(got.Addrs, want) {
		t.Errorf("Addrs = %q, want %q", got.Addrs, want)
	}
	if s, w := got.String(), "10.0.0.1:7000[0-99,200-299] 10.0.0.2:7001[100-199] 127.0.0.1:7002[300-399] "+
		"node-d.example:7003[400-16000] [::1]:7005[16001-16100] 10.0.0.11:7011[16151-16200] "+
		"10.0.0.8:7008[16201-16383] unassigned[16101-16150]"; s != w {
		t.Errorf("got  %s\nwant %s", s, w)
	}
	if got := f.requests(); !reflect.DeepEqual(got, []string{"CLUSTER SHARDS"}) {
		t.Errorf("requests %q", got)
	}
}

// TestFetchClusterSlotsFallback: CLUSTER SHARDS refused, CLUSTER SLOTS in
// the forms of Redis 3.0 (endpoint and port), 4-6 (+ id) and 7 (+ metadata;
// endpoint possibly null, empty or "?").
func TestFetchClusterSlotsFallback(t *testing.T) {
	id := strings.Repeat("b", 40)
	slots := []any{
		[]any{0, 99, []any{"10.0.0.1", 7000, id, []any{"hostname", "a.example"}}, []any{"10.0.0.9", 7009, id, []any{}}},
		[]any{100, 199, []any{nil, 7001, id, []any{"ip", "10.0.0.2"}}},
		[]any{200, 299, []any{"10.0.0.1", 7000, id, []any{"hostname", "a.example"}}},
		[]any{300, 349, []any{"", 7002}},
		[]any{350, 399, []any{"?", 7003, id, []any{"ip", "10.0.0.4", "hostname", ""}}},
		[]any{400, 16000, []any{"node-e.example", 7004, id}},
		[]any{16001, 16100, []any{"::1", 7005, id, []any{}}},
		[]any{16101, 16200, []any{raw("+10.0.0.8\r\n"), 7008}},
	}
	f := startFake(t, scripted(unknownShards, enc(slots)))
	got := fetch(t, f.addr)
	want := "10.0.0.1:7000[0-99,200-299] 10.0.0.2:7001[100-199] 127.0.0.1:7002[300-349] 10.0.0.4:7003[350-399] " +
		"node-e.example:7004[400-16000] [::1]:7005[16001-16100] 10.0.0.8:7008[16101-16200] unassigned[16201-16383]"
	if got.String() != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
	if got.Unassigned() != 183 {
		t.Errorf("Unassigned = %d", got.Unassigned())
	}
	if got := f.requests(); !reflect.DeepEqual(got, []string{"CLUSTER SHARDS", "CLUSTER SLOTS"}) {
		t.Errorf("requests %q", got)
	}
}

func TestFetchClusterErrors(t *testing.T) {
	okSlots := enc([]any{[]any{0, 16383, []any{"10.0.0.1", 7000}}})
	master := func(port any) []any {
		return []any{"id", "x", "port", port, "ip", "10.0.0.1", "endpoint", "10.0.0.1", "role", "master"}
	}
	shard := func(slots []any, n []any) []any { return []any{"slots", slots, "nodes", []any{n}} }
	deep := strings.Repeat("*1\r\n", respconn.MaxDepth+1) + ":1\r\n"
	tests := []struct {
		name          string
		shards, slots string
		want          error
		text          string // in the message
	}{
		{"disabled", disabled, okSlots, ErrClusterDisabled, `"ERR This instance has cluster support disabled"`},
		{"disabled on SLOTS", unknownShards, "-ERR Cluster is disabled. Use --cluster_mode=yes to enable.\r\n",
			ErrClusterDisabled, "Cluster is disabled"},
		{"refused", "-NOAUTH Authentication required.\r\n", "-NOAUTH Authentication required.\r\n",
			ErrClusterRefused, "NOAUTH"},
		{"not an array", "+OK\r\n", "", ErrBadClusterReply, "not an array"},
		{"null array", "*-1\r\n", "", ErrBadClusterReply, "not an array"},
		{"shard not pairs", enc([]any{[]any{"slots"}}), "", ErrBadClusterReply, "key/value"},
		{"key not a string", enc([]any{[]any{1, 2}}), "", ErrBadClusterReply, "not a string"},
		{"no nodes", enc([]any{[]any{"slots", []any{0, 1}}}), "", ErrBadClusterReply, "without slots or nodes"},
		{"odd slots", enc([]any{shard([]any{0}, master(1))}), "", ErrBadClusterReply, "without slots or nodes"},
		{"slot 16384", enc([]any{shard([]any{0, 16384}, master(1))}), "", ErrBadClusterReply, "slot range"},
		{"reversed range", enc([]any{shard([]any{10, 5}, master(1))}), "", ErrBadClusterReply, "slot range"},
		{"slot as string", enc([]any{shard([]any{"0", "5"}, master(1))}), "", ErrBadClusterReply, "slot range"},
		{"no port", enc([]any{shard([]any{0, 5}, master(nil))}), "", ErrBadClusterReply, "without port"},
		{"port too big", enc([]any{shard([]any{0, 5}, master(70000))}), "", ErrBadClusterReply, "bad port"},
		{"overlap", enc([]any{shard([]any{0, 10}, master(1)), shard([]any{10, 20}, master(2))}), "",
			ErrBadClusterReply, "slot 10 claimed"},
		{"slots entry short", unknownShards, enc([]any{[]any{0, 1}}), ErrBadClusterReply, "entry"},
		{"slots port as string", unknownShards, enc([]any{[]any{0, 1, []any{"h", "7000"}}}), ErrBadClusterReply, "master"},
		{"slots bad range", unknownShards, enc([]any{[]any{0, 99999, []any{"h", 7000}}}), ErrBadClusterReply, "slot range"},
		{"slots bad metadata", unknownShards, enc([]any{[]any{0, 1, []any{"h", 7000, "id", []any{"ip"}}}}),
			ErrBadClusterReply, "key/value"},
		{"type byte", "@1\r\n+a\r\n+b\r\n", "", ErrBadClusterReply, "type byte"},
		{"bad integer", ":x\r\n", "", ErrBadClusterReply, `integer "x"`},
		{"bad length", "*x\r\n", "", ErrBadClusterReply, `integer "x"`},
		{"negative length", "$-2\r\n", "", ErrBadClusterReply, "length -2 outside"},
		{"huge array", "*99999999\r\n", "", ErrBadClusterReply, "outside"},
		{"huge bulk", "$99999999\r\n", "", ErrBadClusterReply, "outside"},
		{"bulk without CRLF", "$2\r\nabcd\r\n", "", ErrBadClusterReply, "CRLF"},
		{"LF only", "+OK\n", "", ErrBadClusterReply, "not ended by CRLF"},
		{"long line", "+" + strings.Repeat("x", respconn.MaxLineLen) + "\r\n", "", ErrBadClusterReply, "longer than"},
		{"too deep", deep, "", ErrBadClusterReply, "deeper"},
		{"hang-up", hangUp, "", io.EOF, "EOF"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := startFake(t, scripted(tt.shards, tt.slots))
			top, err := FetchCluster(context.Background(), f.addr, 5*time.Second, respconn.Options{})
			if !errors.Is(err, tt.want) || top != nil {
				t.Fatalf("FetchCluster = %v, %v; want %v", top, err, tt.want)
			}
			msg := err.Error()
			if !strings.Contains(msg, tt.text) || !strings.HasPrefix(msg, "routing: fetch cluster topology from "+f.addr+": ") {
				t.Errorf("message %q lacks %q or the seed", msg, tt.text)
			}
			if tt.want == ErrClusterDisabled && tt.shards == disabled {
				if got := f.requests(); len(got) != 1 {
					t.Errorf("asked %q after cluster support disabled", got)
				}
			}
		})
	}
}

// TestFetchClusterNotCluster asks a real redis-server running without
// cluster-enabled.
func TestFetchClusterNotCluster(t *testing.T) {
	srv := redistest.Start(t)
	top, err := FetchCluster(context.Background(), srv.Addr(), 5*time.Second, respconn.Options{})
	if !errors.Is(err, ErrClusterDisabled) || top != nil {
		t.Fatalf("FetchCluster = %v, %v; want ErrClusterDisabled", top, err)
	}
	want := "routing: fetch cluster topology from " + srv.Addr() +
		`: routing: cluster support disabled on the seed: "ERR This instance has cluster support disabled"`
	if err.Error() != want {
		t.Errorf("error = %q\nwant    %q", err, want)
	}
}

func TestFetchClusterNetErrors(t *testing.T) {
	ctx := context.Background()
	closed := redistest.ClosedAddr(t)
	if _, err := FetchCluster(ctx, closed, time.Second, respconn.Options{}); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("closed port: %v", err)
	}
	for _, seed := range []string{"nohost", "", "a:b:c"} {
		if _, err := FetchCluster(ctx, seed, time.Second, respconn.Options{}); !errors.Is(err, ErrBadAddr) {
			t.Errorf("seed %q: %v", seed, err)
		}
	}

	f := startFake(t, func(string) string { return silent })
	start := time.Now()
	_, err := FetchCluster(ctx, f.addr, 200*time.Millisecond, respconn.Options{})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("silent node with timeout: %v", err)
	}
	if d := time.Since(start); d < 150*time.Millisecond || d > 2*time.Second {
		t.Errorf("timeout 200ms returned after %v", d)
	}

	cctx, cancel := context.WithCancel(ctx)
	time.AfterFunc(100*time.Millisecond, cancel)
	start = time.Now()
	_, err = FetchCluster(cctx, f.addr, 0, respconn.Options{})
	if !errors.Is(err, context.Canceled) {
		t.Errorf("silent node, cancelled: %v", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("cancel after 100ms returned after %v", d)
	}

	// A context that has ended already: nothing is dialled.
	if _, err := FetchCluster(cctx, f.addr, time.Second, respconn.Options{}); !errors.Is(err, context.Canceled) {
		t.Errorf("ended context: %v", err)
	}
}

// FuzzClusterReply feeds arbitrary bytes to the RESP2 reader and both
// topology parsers: no panic, and every Topology they build is sound.
func FuzzClusterReply(f *testing.F) {
	id := strings.Repeat("c", 40)
	f.Add([]byte(enc([]any{[]any{"slots", []any{0, 16383}, "nodes", []any{node(7000, "10.0.0.1", "", "master")}}})))
	f.Add([]byte(enc([]any{[]any{0, 5460, []any{nil, 7000, id, []any{"ip", "10.0.0.1"}}}, []any{5461, 16383, []any{"?", 7001}}})))
	f.Add([]byte(unknownShards))
	f.Add([]byte("$2\r\nabcd\r\n*-1\r\n:12\r\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) > 4096 {
			return
		}
		v, err := respconn.Read(bufio.NewReaderSize(bytes.NewReader(b), respconn.MaxLineLen))
		if err != nil {
			return
		}
		shardsTLS := func(v respconn.Value, seed string) (*Topology, error) { return parseShards(v, seed, true) }
		shardsPlain := func(v respconn.Value, seed string) (*Topology, error) { return parseShards(v, seed, false) }
		for _, parse := range []func(respconn.Value, string) (*Topology, error){shardsPlain, shardsTLS, parseSlots} {
			top, err := parse(v, "seed.example")
			if err != nil {
				if !errors.Is(err, ErrBadClusterReply) {
					t.Fatalf("error %v does not wrap ErrBadClusterReply", err)
				}
				continue
			}
			owned := 0
			for i, a := range top.Addrs {
				if _, _, err := net.SplitHostPort(a); err != nil {
					t.Fatalf("Addrs[%d] = %q: %v", i, a, err)
				}
				rs := top.Ranges(i)
				if len(rs) == 0 {
					t.Fatalf("%q owns no slot", a)
				}
				for _, r := range rs {
					owned += int(r[1]-r[0]) + 1
				}
			}
			if owned+top.Unassigned() != NumSlots {
				t.Fatalf("owned %d + unassigned %d", owned, top.Unassigned())
			}
		}
	})
}

// TestParseShardsTLSPort: a master with a port and a tls-port (tls-cluster
// yes beside a plaintext port) is reached at its port, or at its tls-port
// when the engines are spoken to in TLS; a TLS-only master at its tls-port
// either way.
func TestParseShardsTLSPort(t *testing.T) {
	shards := []any{
		[]any{"slots", []any{0, 8191}, "nodes", []any{node(7000, "10.0.0.1", "10.0.0.1", "master", "tls-port", 7100)}},
		[]any{"slots", []any{8192, 16383}, "nodes", []any{node(0, "10.0.0.2", "10.0.0.2", "master", "tls-port", 7101)}},
	}
	v, err := respconn.Read(bufio.NewReader(strings.NewReader(enc(shards))))
	if err != nil {
		t.Fatal(err)
	}
	for tls, want := range map[bool][]string{false: {"10.0.0.1:7000", "10.0.0.2:7101"}, true: {"10.0.0.1:7100", "10.0.0.2:7101"}} {
		top, err := parseShards(v, "seed.example", tls)
		if err != nil || !reflect.DeepEqual(top.Addrs, want) {
			t.Errorf("parseShards(tls %v) = %v, %v; want %v", tls, top, err, want)
		}
	}
}
