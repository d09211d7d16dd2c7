package redistest

import (
	"context"
	"fmt"
	"net"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

func TestEvenRanges(t *testing.T) {
	// By hand from redis-cli's clusterManagerCommandCreate: slots_per_node
	// = 16384/n, last = lround(cursor + slots_per_node - 1).
	want := map[int][][2]int{
		1: {{0, 16383}},
		2: {{0, 8191}, {8192, 16383}},
		3: {{0, 5460}, {5461, 10922}, {10923, 16383}},
		5: {{0, 3276}, {3277, 6553}, {6554, 9829}, {9830, 13106}, {13107, 16383}},
	}
	for n, w := range want {
		got, ok := evenRanges(n)
		if !ok || !reflect.DeepEqual(got, w) {
			t.Errorf("evenRanges(%d) = %v, %v; want %v", n, got, ok, w)
		}
	}
	for _, n := range []int{0, -1, 7542, ClusterSlots + 1} {
		if got, ok := evenRanges(n); ok {
			t.Errorf("evenRanges(%d) = %v, want false", n, got)
		}
	}
}

// slotsView decodes CLUSTER SLOTS from node i into "lo-hi id port" lines.
func slotsView(t *testing.T, s *Server) []string {
	t.Helper()
	v, err := s.Client().Do(context.Background(), "CLUSTER", "SLOTS").Slice()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range v {
		r := e.([]any)
		node := r[2].([]any)
		out = append(out, fmt.Sprintf("%d-%d %s %d", r[0], r[1], node[2], node[1]))
	}
	return out
}

// getReply sends GET key to s and returns the raw reply.
func getReply(t *testing.T, s *Server, key string) string {
	t.Helper()
	c := Dial(t, s.Addr())
	c.Send(t, Cmd("GET", key))
	f, err := c.ReadFrame(0)
	if err != nil {
		t.Fatalf("GET %s on %s: %v", key, s.Addr(), err)
	}
	return string(f)
}

func TestStartCluster(t *testing.T) {
	t.Parallel() // each cluster takes about 2 s to report cluster_state:ok
	start := time.Now()
	c := StartCluster(t, 3)
	t.Logf("3-master cluster ready in %v", time.Since(start).Round(time.Millisecond))

	addrs := c.Addrs()
	if len(addrs) != 3 || len(c.Nodes) != 3 {
		t.Fatalf("Addrs = %v, %d nodes", addrs, len(c.Nodes))
	}
	hexID := regexp.MustCompile(`^[0-9a-f]{40}$`)
	for i, s := range c.Nodes {
		if addrs[i] != s.Addr() {
			t.Errorf("Addrs()[%d] = %s, want %s", i, addrs[i], s.Addr())
		}
		if !hexID.MatchString(c.NodeID(i)) {
			t.Errorf("NodeID(%d) = %q", i, c.NodeID(i))
		}
		for j := range i {
			if c.NodeID(i) == c.NodeID(j) || c.BusPort(i) == c.BusPort(j) {
				t.Errorf("nodes %d and %d share an ID or bus port", i, j)
			}
		}
		info := s.Do("CLUSTER", "INFO").(string)
		for _, want := range []string{"cluster_state:ok", "cluster_slots_assigned:16384", "cluster_known_nodes:3", "cluster_size:3"} {
			if !strings.Contains(info, want+"\r\n") {
				t.Errorf("node %d CLUSTER INFO lacks %s:\n%s", i, want, info)
			}
		}
	}
	want := []string{
		fmt.Sprintf("0-5460 %s %d", c.NodeID(0), c.Nodes[0].Port()),
		fmt.Sprintf("5461-10922 %s %d", c.NodeID(1), c.Nodes[1].Port()),
		fmt.Sprintf("10923-16383 %s %d", c.NodeID(2), c.Nodes[2].Port()),
	}
	for i, s := range c.Nodes {
		if got := slotsView(t, s); !reflect.DeepEqual(got, want) {
			t.Errorf("node %d CLUSTER SLOTS = %q, want %q", i, got, want)
		}
	}

	// "foo" hashes to slot 12182 (CLUSTER KEYSLOT), in node 2's range.
	if got := c.Nodes[0].Do("CLUSTER", "KEYSLOT", "foo"); got != int64(12182) {
		t.Fatalf("CLUSTER KEYSLOT foo = %v", got)
	}
	if c.Owner(12182) != 2 || c.Owner(0) != 0 || c.Owner(5461) != 1 {
		t.Fatalf("Owner: %d %d %d", c.Owner(12182), c.Owner(0), c.Owner(5461))
	}
	if got, want := getReply(t, c.Nodes[0], "foo"), "-MOVED 12182 "+addrs[2]+"\r\n"; got != want {
		t.Errorf("GET foo on node 0 = %q, want %q", got, want)
	}
	if got := getReply(t, c.Nodes[2], "foo"); got != "$-1\r\n" {
		t.Errorf("GET foo on node 2 = %q, want a nil", got)
	}

	// Move the (empty) slot to node 0: every node must redirect there.
	c.MoveSlot(12182, 0)
	if c.Owner(12182) != 0 {
		t.Fatalf("Owner(12182) = %d after MoveSlot", c.Owner(12182))
	}
	for _, i := range []int{1, 2} {
		if got, want := getReply(t, c.Nodes[i], "foo"), "-MOVED 12182 "+addrs[0]+"\r\n"; got != want {
			t.Errorf("after MoveSlot, GET foo on node %d = %q, want %q", i, got, want)
		}
	}
	c.Nodes[0].Do("SET", "foo", "bar")
	if got := c.Nodes[0].Do("GET", "foo"); got != "bar" {
		t.Errorf("GET foo on its new owner = %v", got)
	}
	want = []string{
		fmt.Sprintf("0-5460 %s %d", c.NodeID(0), c.Nodes[0].Port()),
		fmt.Sprintf("5461-10922 %s %d", c.NodeID(1), c.Nodes[1].Port()),
		fmt.Sprintf("10923-12181 %s %d", c.NodeID(2), c.Nodes[2].Port()),
		fmt.Sprintf("12182-12182 %s %d", c.NodeID(0), c.Nodes[0].Port()),
		fmt.Sprintf("12183-16383 %s %d", c.NodeID(2), c.Nodes[2].Port()),
	}
	if got := slotsView(t, c.Nodes[1]); !reflect.DeepEqual(got, want) {
		t.Errorf("after MoveSlot, CLUSTER SLOTS = %q, want %q", got, want)
	}
	c.MoveSlot(12182, 0) // already there: nothing to do

	// Move it on with its keys, two per MIGRATE.
	c.Nodes[0].Do("SET", "{foo}1", "one")
	c.Nodes[0].Do("SET", "{foo}2", "two")
	c.BeginMove(12182, 1)
	batches := 0
	if n := c.MigrateKeys(12182, 1, 2, func() { batches++ }); n != 3 || batches != 2 {
		t.Errorf("MigrateKeys moved %d keys in %d batches, want 3 in 2", n, batches)
	}
	c.FinishMove(12182, 1)
	for k, want := range map[string]string{"foo": "bar", "{foo}1": "one", "{foo}2": "two"} {
		if got := c.Nodes[1].Do("GET", k); got != want {
			t.Errorf("GET %s on the slot's new owner = %v, want %s", k, got, want)
		}
	}
	if n := c.Nodes[0].Do("CLUSTER", "COUNTKEYSINSLOT", "12182"); n != int64(0) {
		t.Errorf("the old owner still holds %v keys of the slot", n)
	}
}

func TestStartClusterOneMaster(t *testing.T) {
	t.Parallel()
	c := StartCluster(t, 1)
	want := []string{fmt.Sprintf("0-16383 %s %d", c.NodeID(0), c.Nodes[0].Port())}
	if got := slotsView(t, c.Nodes[0]); !reflect.DeepEqual(got, want) {
		t.Errorf("CLUSTER SLOTS = %q, want %q", got, want)
	}
	c.Nodes[0].Do("SET", "foo", "bar")
	if got := c.Nodes[0].Do("GET", "foo"); got != "bar" {
		t.Errorf("GET foo = %v", got)
	}
}

// TestStartClusterEndpoints checks that extraConfig reaches the nodes, and
// that Wait sees a hostname spread by gossip: the redirect text follows
// cluster-preferred-endpoint-type.
func TestStartClusterEndpoints(t *testing.T) {
	t.Parallel()
	c := StartClusterWith(t, 2, "--cluster-preferred-endpoint-type", "unknown-endpoint")
	// "foo" is slot 12182, node 1's half.
	moved := func(host string) {
		t.Helper()
		want := fmt.Sprintf("-MOVED 12182 %s:%d\r\n", host, c.Nodes[1].Port())
		if got := getReply(t, c.Nodes[0], "foo"); got != want {
			t.Errorf("GET foo on node 0 = %q, want %q", got, want)
		}
	}
	moved("")
	for _, s := range c.Nodes {
		s.Do("CONFIG", "SET", "cluster-preferred-endpoint-type", "hostname")
	}
	moved("?") // hostname preferred, none announced
	for _, s := range c.Nodes {
		s.Do("CONFIG", "SET", "cluster-announce-hostname", "localhost")
	}
	c.Wait() // until node 0 has heard node 1's hostname
	moved("localhost")
	for _, s := range c.Nodes {
		s.Do("CONFIG", "SET", "cluster-preferred-endpoint-type", "ip")
	}
	moved("127.0.0.1")
}

// TestStartTLSCluster: the nodes of a TLS cluster serve TLS only, agree on
// the slot map, and announce their TLS ports; go-redis's ClusterClient
// over TLS sets and gets keys of every master.
func TestStartTLSCluster(t *testing.T) {
	t.Parallel()
	ca := NewCA(t)
	c := StartTLSCluster(t, ca, 3)
	if pc, err := DialConn(c.Nodes[0].Addr(), time.Second); err == nil {
		if pc.Write(Cmd("PING")) == nil {
			if f, err := pc.ReadFrame(time.Second); err == nil {
				t.Errorf("a TLS node answered a plaintext PING: %q", f)
			}
		}
		_ = pc.Close()
	}
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs(), TLSConfig: ca.ClientConfig(ca.IssueValid("cc")), DisableIdentity: true})
	defer cc.Close()
	ctx := context.Background()
	for i := range 30 {
		k := fmt.Sprintf("k%d", i)
		if err := cc.Set(ctx, k, i, 0).Err(); err != nil {
			t.Fatalf("SET %s: %v", k, err)
		}
		if v, err := cc.Get(ctx, k).Int(); err != nil || v != i {
			t.Fatalf("GET %s = %v %v, want %d", k, v, err, i)
		}
	}
	//lint:ignore SA1019 CLUSTER SLOTS itself is under test: go-redis's ClusterClient reads it, so it must name the TLS ports
	slots, err := cc.ClusterSlots(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	ports := map[string]bool{}
	for _, n := range c.Nodes {
		ports[strconv.Itoa(n.Port())] = true
	}
	for _, s := range slots {
		_, port, _ := net.SplitHostPort(s.Nodes[0].Addr)
		if !ports[port] {
			t.Errorf("CLUSTER SLOTS names %s, not a node's TLS port", s.Nodes[0].Addr)
		}
	}
	for i := range c.Nodes {
		if n, err := c.Nodes[i].Client().DBSize(ctx).Result(); err != nil || n == 0 {
			t.Errorf("node %d holds %d keys (%v); want some of the 30", i, n, err)
		}
	}
}
