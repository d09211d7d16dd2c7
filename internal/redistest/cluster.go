package redistest

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"
)

// ClusterSlots is the number of hash slots of a Redis Cluster.
const ClusterSlots = 16384

// clusterTimeout bounds how long StartCluster and MoveSlot wait for the
// nodes to agree.
const clusterTimeout = 15 * time.Second

// Cluster is a Redis Cluster of masters only (no replicas), one
// redis-server per master on 127.0.0.1, each started by Start in its own
// t.TempDir with its cluster-config-file (nodes.conf) inside it. The
// processes are killed by the cleanups Start registers.
//
// A Cluster keeps the slot map it has set up (Owner) and its methods that
// take no testing.TB report failures on the t given to StartCluster, so
// call them from that test's goroutine.
type Cluster struct {
	// Nodes are the masters; Nodes[i] owns the i-th EvenSplit range until
	// MoveSlot says otherwise.
	Nodes []*Server

	t     testing.TB
	ids   []string
	buses []int
	owner [ClusterSlots]int
}

// StartCluster is StartClusterWith without extra configuration.
func StartCluster(t testing.TB, masters int) *Cluster {
	t.Helper()
	return StartClusterWith(t, masters)
}

// StartClusterWith starts masters (at least 1) cluster-enabled
// redis-servers, gives node i the i-th range of `redis-cli --cluster
// create` (0-5460, 5461-10922, 10923-16383 for three; see
// routing.EvenSplit) with CLUSTER ADDSLOTSRANGE, joins them with CLUSTER
// MEET and waits until every node reports cluster_state:ok, knows all
// masters, and answers CLUSTER SLOTS with the same bytes as every other
// node, naming the expected owner for each range (so announced hostnames
// have spread too). extraConfig is appended to every node's command line,
// e.g. "--cluster-preferred-endpoint-type", "unknown-endpoint", or
// "--cluster-announce-hostname", "localhost".
//
// Each node gets its own free cluster bus port (--cluster-port) rather than
// port+10000, which may be above 65535. Start-up takes about 2.2 s, most of
// it Redis's CLUSTER_WRITABLE_DELAY: a master reports cluster_state:ok no
// sooner than 2 s after it started. Like Start, it skips t with -short or
// without redis-server, and fails t if the cluster does not form within
// 15 s.
func StartClusterWith(t testing.TB, masters int, extraConfig ...string) *Cluster {
	t.Helper()
	return startCluster(t, masters, func(args ...string) *Server { return Start(t, args...) }, extraConfig)
}

// StartClusterOf starts a cluster as StartClusterWith does of
// len(bins) masters, node i running the server binary bins[i] (StartBinary):
// a cluster of mixed engines or versions, as during an upgrade.
func StartClusterOf(t testing.TB, bins []string, extraConfig ...string) *Cluster {
	t.Helper()
	i := 0
	return startCluster(t, len(bins), func(args ...string) *Server {
		s := StartBinary(t, bins[i], args...)
		i++
		return s
	}, extraConfig)
}

// StartTLSCluster starts a Redis Cluster as StartClusterWith does whose
// nodes serve TLS only, each started by StartTLS with ca and
// "--tls-cluster yes" (the cluster bus on TLS too, and the TLS ports the
// ones the nodes announce in CLUSTER SLOTS, SHARDS and NODES and in
// MOVED). Its Nodes' Client and Do speak TLS. It skips t when the engine
// was built without TLS.
func StartTLSCluster(t testing.TB, ca *CA, masters int, extraConfig ...string) *Cluster {
	t.Helper()
	return startCluster(t, masters, func(args ...string) *Server {
		return StartTLS(t, ca, append(args, "--tls-cluster", "yes")...)
	}, extraConfig)
}

// startCluster is StartClusterWith with the nodes started by start.
func startCluster(t testing.TB, masters int, start func(args ...string) *Server, extraConfig []string) *Cluster {
	t.Helper()
	ranges, ok := evenRanges(masters)
	if !ok {
		t.Fatalf("redistest: StartCluster: cannot split the slots over %d masters", masters)
	}
	SkipIfUnavailable(t)
	c := &Cluster{t: t}
	for i := range masters {
		bus, err := FreePort()
		if err != nil {
			t.Fatalf("redistest: %v", err)
		}
		args := append([]string{
			"--cluster-enabled", "yes",
			"--cluster-config-file", "nodes.conf", // relative to --dir, the node's temp dir
			"--cluster-port", strconv.Itoa(bus),
		}, extraConfig...)
		s := start(args...)
		c.Nodes = append(c.Nodes, s)
		c.buses = append(c.buses, bus)
		id, err := clusterCmd(s, "CLUSTER", "MYID")
		if err != nil {
			t.Fatalf("redistest: node %d: CLUSTER MYID: %v", i, err)
		}
		c.ids = append(c.ids, id)
		r := ranges[i]
		for slot := r[0]; slot <= r[1]; slot++ {
			c.owner[slot] = i
		}
		if _, err := clusterCmd(s, "CLUSTER", "ADDSLOTSRANGE", strconv.Itoa(r[0]), strconv.Itoa(r[1])); err != nil {
			t.Fatalf("redistest: node %d: %v", i, err)
		}
		// A distinct config epoch per master, as `redis-cli --cluster
		// create` assigns: left at 0, the nodes resolve the collision
		// by gossip some time after they meet, and a slot moved while two
		// masters still share an epoch can flip back to its old owner on
		// one node (each then answers MOVED to the other).
		if _, err := clusterCmd(s, "CLUSTER", "SET-CONFIG-EPOCH", strconv.Itoa(i+1)); err != nil {
			t.Fatalf("redistest: node %d: %v", i, err)
		}
	}
	// Every node meets every later one: a full mesh of handshakes forms
	// faster than one introduction left to gossip.
	for i := range masters {
		for j := i + 1; j < masters; j++ {
			if _, err := clusterCmd(c.Nodes[i], "CLUSTER", "MEET", "127.0.0.1",
				strconv.Itoa(c.Nodes[j].Port()), strconv.Itoa(c.buses[j])); err != nil {
				t.Fatalf("redistest: node %d meets %d: %v", i, j, err)
			}
		}
	}
	c.Wait()
	return c
}

// clusterCmd runs one command on a fresh raw connection to s and returns
// its simple or bulk string reply; any other reply is an error.
func clusterCmd(s *Server, args ...string) (string, error) {
	f, err := rawCommand(s, args...)
	if err != nil {
		return "", err
	}
	switch {
	case bytes.HasPrefix(f, []byte("+")):
		return string(f[1 : len(f)-2]), nil
	case bytes.HasPrefix(f, []byte("$")) && !bytes.HasPrefix(f, []byte("$-1")):
		i := bytes.Index(f, []byte("\r\n"))
		return string(f[i+2 : len(f)-2]), nil
	}
	return "", fmt.Errorf("%s: unexpected reply %q", strings.Join(args, " "), Trunc(f))
}

// evenRanges mirrors routing.EvenSplit (which this package cannot import:
// routing's own tests import redistest). Both packages test the same
// hand-computed ranges, and routing's TestFetchCluster compares a cluster
// built from these ranges with EvenSplit. It returns the inclusive ranges redis-cli --cluster create gives n
// masters, computed in single precision as redis-cli does, and false when
// n is out of range or the arithmetic runs past slot 16383.
func evenRanges(n int) ([][2]int, bool) {
	if n < 1 || n > ClusterSlots {
		return nil, false
	}
	out := make([][2]int, n)
	per := float32(ClusterSlots) / float32(n)
	var cursor float32
	first := 0
	for i := range n {
		last := int(math.Round(float64(float32(float32(cursor+per) - 1))))
		if last > ClusterSlots || i == n-1 {
			last = ClusterSlots - 1
		}
		if last < first {
			last = first
		}
		if last >= ClusterSlots {
			return nil, false
		}
		out[i] = [2]int{first, last}
		first = last + 1
		cursor = float32(cursor + per)
	}
	return out, true
}

// Addrs returns the nodes' "127.0.0.1:port" addresses, Addrs()[i] being
// Nodes[i]'s (a fresh slice).
func (c *Cluster) Addrs() []string {
	out := make([]string, len(c.Nodes))
	for i, s := range c.Nodes {
		out[i] = s.Addr()
	}
	return out
}

// NodeID returns the 40-character cluster node ID of Nodes[i].
func (c *Cluster) NodeID(i int) string { return c.ids[i] }

// BusPort returns the cluster bus port of Nodes[i].
func (c *Cluster) BusPort(i int) int { return c.buses[i] }

// Owner returns the index in Nodes of the master that owns slot, as set up
// by StartCluster and MoveSlot.
func (c *Cluster) Owner(slot int) int { return c.owner[slot] }

// MoveSlot gives slot to Nodes[to] the way redis-cli --cluster reshard
// does, minus the key migration (so the slot must hold no keys, or the
// source refuses): BeginMove, then FinishMove. Moving a slot to its owner
// does nothing.
func (c *Cluster) MoveSlot(slot, to int) {
	c.t.Helper()
	if c.owner[slot] == to {
		return
	}
	c.BeginMove(slot, to)
	c.FinishMove(slot, to)
}

// BeginMove opens the migration of slot from its owner to Nodes[to]
// (Redis Cluster specification, "Live resharding"): CLUSTER SETSLOT slot
// IMPORTING on the target, then MIGRATING on the source. The caller may
// MIGRATE keys; the source answers ASK for keys it no longer has.
func (c *Cluster) BeginMove(slot, to int) {
	c.t.Helper()
	from := c.owner[slot]
	s := strconv.Itoa(slot)
	c.steps(slot, to, [][2]any{
		{to, []string{"CLUSTER", "SETSLOT", s, "IMPORTING", c.ids[from]}},
		{from, []string{"CLUSTER", "SETSLOT", s, "MIGRATING", c.ids[to]}},
	})
}

// MigrateKeys moves every key of slot from its owner to Nodes[to] the way
// redis-cli --cluster reshard does, between BeginMove and FinishMove:
// CLUSTER GETKEYSINSLOT slot batch on the owner, then one MIGRATE ... KEYS
// of those keys to Nodes[to], until the owner holds none of the slot's
// keys. between, when not nil, runs after each MIGRATE (to let clients
// write while the slot is half moved). A key created on the owner while
// the slot migrates is moved too; a migrating owner answers ASK for keys
// it does not have, so new keys land on the target and the loop ends. It
// returns how many keys it moved, and fails the test on an error reply.
func (c *Cluster) MigrateKeys(slot, to, batch int, between func()) int {
	c.t.Helper()
	src := c.Nodes[c.owner[slot]]
	ctx := context.Background()
	moved := 0
	for {
		keys, err := src.Client().ClusterGetKeysInSlot(ctx, slot, batch).Result()
		if err != nil {
			c.t.Fatalf("redistest: CLUSTER GETKEYSINSLOT %d on node %d: %v", slot, c.owner[slot], err)
		}
		if len(keys) == 0 {
			return moved
		}
		args := []any{"MIGRATE", "127.0.0.1", c.Nodes[to].Port(), "", 0, 5000, "KEYS"}
		for _, k := range keys {
			args = append(args, k)
		}
		if err := src.Client().Do(ctx, args...).Err(); err != nil {
			c.t.Fatalf("redistest: MIGRATE of %d keys of slot %d to node %d: %v", len(keys), slot, to, err)
		}
		moved += len(keys)
		if between != nil {
			between()
		}
	}
}

// FinishMove ends the migration BeginMove opened: CLUSTER SETSLOT slot
// NODE on the target (which bumps its config epoch), the source and every
// other node, in that order. It then waits as StartCluster does, so every
// node agrees that Nodes[to] owns slot when it returns.
func (c *Cluster) FinishMove(slot, to int) {
	c.t.Helper()
	from := c.owner[slot]
	set := []string{"CLUSTER", "SETSLOT", strconv.Itoa(slot), "NODE", c.ids[to]}
	steps := [][2]any{{to, set}, {from, set}}
	for i := range c.Nodes {
		if i != from && i != to {
			steps = append(steps, [2]any{i, set})
		}
	}
	c.steps(slot, to, steps)
	c.owner[slot] = to
	c.Wait()
}

// steps runs each {node index, command} in order, failing the test on an
// error reply.
func (c *Cluster) steps(slot, to int, steps [][2]any) {
	c.t.Helper()
	for _, st := range steps {
		node, args := st[0].(int), st[1].([]string)
		if _, err := clusterCmd(c.Nodes[node], args...); err != nil {
			c.t.Fatalf("redistest: moving slot %d to node %d: %s on node %d: %v", slot, to, strings.Join(args, " "), node, err)
		}
	}
}

// Wait blocks until every node reports cluster_state:ok and
// cluster_known_nodes equal to len(Nodes), and all answer CLUSTER SLOTS
// with the same bytes, whose ranges name the owners Owner reports. It
// fails the test after 15 s, quoting what was last wrong. StartCluster,
// MoveSlot and FinishMove call it; call it after changing the cluster by
// hand (CONFIG SET cluster-announce-hostname, say). Slots moved by hand
// rather than by MoveSlot or BeginMove/FinishMove make Wait fail, since
// Owner no longer matches.
func (c *Cluster) Wait() {
	c.t.Helper()
	Eventually(c.t, clusterTimeout, func() error {
		if err := c.agreed(); err != nil {
			return fmt.Errorf("redistest: cluster did not converge: %w", err)
		}
		return nil
	})
}

// agreed returns nil when the cluster is in the state Wait waits for, or
// what is still wrong.
func (c *Cluster) agreed() error {
	var first []byte
	for i, s := range c.Nodes {
		info, err := clusterCmd(s, "CLUSTER", "INFO")
		if err != nil {
			return fmt.Errorf("node %d: %w", i, err)
		}
		if !strings.Contains(info, "cluster_state:ok\r\n") {
			return fmt.Errorf("node %d: cluster_state not ok", i)
		}
		if want := fmt.Sprintf("cluster_known_nodes:%d\r\n", len(c.Nodes)); !strings.Contains(info, want) {
			return fmt.Errorf("node %d: not %s", i, strings.TrimSpace(want))
		}
		raw, err := rawCommand(s, "CLUSTER", "SLOTS")
		if err != nil {
			return fmt.Errorf("node %d: %w", i, err)
		}
		if i == 0 {
			first = raw
			continue
		}
		if !bytes.Equal(raw, first) {
			return fmt.Errorf("node %d: CLUSTER SLOTS differs from node 0's", i)
		}
	}
	return c.checkSlots()
}

// checkSlots compares node 0's view (CLUSTER SLOTS, decoded) with c.owner.
func (c *Cluster) checkSlots() error {
	ctx, cancel := context.WithTimeout(context.Background(), DefaultTimeout)
	defer cancel()
	v, err := c.Nodes[0].Client().Do(ctx, "CLUSTER", "SLOTS").Slice()
	if err != nil {
		return err
	}
	var got [ClusterSlots]int
	for i := range got {
		got[i] = -1
	}
	byID := make(map[string]int, len(c.ids))
	for i, id := range c.ids {
		byID[id] = i
	}
	for _, e := range v {
		r, ok := e.([]any)
		if !ok || len(r) < 3 {
			return fmt.Errorf("CLUSTER SLOTS entry %v", e)
		}
		lo, ok1 := r[0].(int64)
		hi, ok2 := r[1].(int64)
		node, ok3 := r[2].([]any)
		if !ok1 || !ok2 || !ok3 || len(node) < 3 || lo < 0 || hi >= ClusterSlots {
			return fmt.Errorf("CLUSTER SLOTS entry %v", e)
		}
		id, _ := node[2].(string)
		owner, ok := byID[id]
		if !ok {
			return fmt.Errorf("CLUSTER SLOTS names unknown node %q", id)
		}
		for s := lo; s <= hi; s++ {
			got[s] = owner
		}
	}
	for s, o := range got {
		if o != c.owner[s] {
			return fmt.Errorf("slot %d served by node %d, want %d", s, o, c.owner[s])
		}
	}
	return nil
}

// rawCommand runs one command on a fresh raw connection and returns the
// reply frame's bytes; an error reply is an error.
func rawCommand(s *Server, args ...string) ([]byte, error) {
	dial := DialConn
	if s.tls != nil {
		dial = func(addr string, timeout time.Duration) (*Conn, error) { return DialConnTLS(addr, timeout, s.tls) }
	}
	c, err := dial(s.Addr(), 2*time.Second)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	if s.password != "" { // --requirepass: authenticate first
		if err := c.Write(Cmd("AUTH", s.password)); err != nil {
			return nil, err
		}
		if f, err := c.ReadFrame(DefaultTimeout); err != nil || !bytes.Equal(f, []byte("+OK\r\n")) {
			return nil, fmt.Errorf("AUTH: %q %v", f, err)
		}
	}
	if err := c.Write(Cmd(args...)); err != nil {
		return nil, err
	}
	f, err := c.ReadFrame(DefaultTimeout)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", strings.Join(args, " "), err)
	}
	if bytes.HasPrefix(f, []byte("-")) {
		return nil, fmt.Errorf("%s: %q", strings.Join(args, " "), f)
	}
	return f, nil
}
