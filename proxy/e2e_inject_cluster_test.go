package proxy_test

// Cluster events injected on --route facade over standalone shards
// (injtopo.go): a slot range migrating (-ASK while it runs, then -MOVED
// and a new announced layout, announced late), and a shard frozen then
// failed over to its replica. The clients are go-redis's ClusterClient and
// redis-cli -c; the oracle is each engine's own keyspace and what every
// client reads back afterwards.

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/respmeter/respmeter/internal/redistest"
	"github.com/respmeter/respmeter/metrics"
	"github.com/respmeter/respmeter/proxy"
	"github.com/respmeter/respmeter/proxy/proxytest"
	"github.com/respmeter/respmeter/routing"
)

// addRules puts a rule file into force on p, failing the test on error.
func addRules(t *testing.T, p *proxy.Proxy, yaml string) {
	t.Helper()
	in, err := proxy.ParseInjection("rules.yaml", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.AddInjection(in); err != nil {
		t.Fatal(err)
	}
}

// slotOwnerPort returns the port CLUSTER SLOTS, asked on node, gives as
// the owner of slot.
func slotOwnerPort(t *testing.T, node string, slot int) int64 {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: node, DisableIdentity: true, MaxRetries: -1})
	defer c.Close()
	//lint:ignore SA1019 CLUSTER SLOTS itself is under test: the facade announces its layout there, and cluster clients still send it
	slots, err := c.ClusterSlots(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range slots {
		if int(r.Start) <= slot && slot <= int(r.End) {
			_, port, _ := strings.Cut(r.Nodes[0].Addr, ":")
			n, _ := strconv.ParseInt(port, 10, 64)
			return n
		}
	}
	return -1
}

func TestInjectMigrateFacade(t *testing.T) {
	srvs, p, _ := startFacade(t, 3, nil)
	nodes := p.FacadeAddrs()
	ctx := context.Background()
	const lo, hi = 0, 999 // shard 0's first thousand slots, to shard 1
	old := keysInSlots("old:", lo, hi, 100)
	c, tap := tappedCluster(t, nodes[0])
	for _, k := range old {
		if err := c.Set(ctx, k, "v0", 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if n := srvs[0].Client().DBSize(ctx).Val(); n != int64(len(old)) {
		t.Fatalf("shard 0 has %d keys before the migration, want %d", n, len(old))
	}
	addRules(t, p, fmt.Sprintf(`rules:
- name: reshard
  slots: [%d, %d]
  for: 1s
  migrate: {to: %q, announce_after: 1s}
`, lo, hi, srvs[1].Addr()))
	start := time.Now()

	// During the migration: go-redis overwrites the old keys and writes
	// new ones; redis-cli -c writes its own, through the source's node.
	fresh := keysInSlots("new:", lo, hi, 100)
	overwrite(t, c, old, fresh)
	cli := keysInSlots("cli:", lo, hi, 5)
	host, port, _ := strings.Cut(nodes[0], ":")
	for _, k := range cli {
		out, err := exec.Command(redistest.Tool(t, "redis-cli"), "-c", "-h", host, "-p", port, "SET", k, "c1").CombinedOutput()
		if err != nil || !strings.Contains(string(out), "OK") {
			t.Fatalf("redis-cli -c SET %s during the migration: %v %q", k, err, out)
		}
	}
	if el := time.Since(start); el > 900*time.Millisecond {
		t.Skipf("the writes took %v, past the migration's window: too slow a machine to see the ASKs", el)
	}
	if !bytes.Contains(tap(), []byte("-ASK ")) {
		t.Fatal("go-redis saw no -ASK during the migration")
	}
	asks := p.Injection().Hits(0)
	if asks < uint64(len(old)) {
		t.Fatalf("the rule answered %d ASKs, want at least %d", asks, len(old))
	}

	// The window over: the source's node answers MOVED, while the old
	// layout is announced a second more, then the new one.
	redistest.Eventually(t, 5*time.Second, func() error {
		if p.Injection().Counts()[0].Active {
			return fmt.Errorf("migration still running")
		}
		return nil
	})
	end := *p.Injection().Counts()[0].Window.End
	got := slotOwnerPort(t, nodes[2], lo)
	if time.Now().Before(end.Add(900 * time.Millisecond)) { // announce_after 1s, read well within it
		if want := int64(portOf(nodes[0])); got != want {
			t.Errorf("CLUSTER SLOTS right after the migration: slot %d on port %d, want the old owner's %d (announced late)", lo, got, want)
		}
	} else {
		t.Logf("CLUSTER SLOTS read %v after the migration's end: the late announcement not checked", time.Since(end))
	}
	moved := redis.NewClient(&redis.Options{Addr: nodes[0], DisableIdentity: true, MaxRetries: -1})
	defer moved.Close()
	if err := moved.Get(ctx, old[0]).Err(); err == nil || !strings.HasPrefix(err.Error(), "MOVED ") || !strings.HasSuffix(err.Error(), nodes[1]) {
		t.Errorf("GET on the source's node after the migration: %v, want MOVED to %s", err, nodes[1])
	}
	redistest.Eventually(t, 5*time.Second, func() error {
		if got, want := slotOwnerPort(t, nodes[2], lo), int64(portOf(nodes[1])); got != want {
			return fmt.Errorf("CLUSTER SLOTS: slot %d on port %d, want %d", lo, got, want)
		}
		return nil
	})

	// No write lost: every key reads back, through both clients, and the
	// slots' keys are all on the target engine.
	redistest.Eventually(t, 5*time.Second, func() error {
		if n := countSlotKeys(t, srvs[0], lo, hi); n != 0 {
			return fmt.Errorf("shard 0 still has %d keys of the migrated slots", n)
		}
		return nil
	})
	c2, _ := tappedCluster(t, nodes[2])
	readBack(t, c2, old, fresh)
	for _, k := range cli {
		out, err := exec.Command(redistest.Tool(t, "redis-cli"), "-c", "-h", host, "-p", port, "GET", k).CombinedOutput()
		if err != nil || !strings.Contains(string(out), "c1") {
			t.Fatalf("redis-cli -c GET %s after the migration: %v %q", k, err, out)
		}
	}
	if n, want := countSlotKeys(t, srvs[1], lo, hi), len(old)+len(fresh)+len(cli); n != want {
		t.Fatalf("shard 1 has %d keys of the migrated slots, want %d", n, want)
	}
}

// overwrite sets each key of old to v1 and each of fresh to n1, in turns,
// through c.
func overwrite(t *testing.T, c redis.Cmdable, old, fresh []string) {
	t.Helper()
	for i, k := range old {
		if err := c.Set(context.Background(), k, "v1", 0).Err(); err != nil {
			t.Fatal(err)
		}
		if err := c.Set(context.Background(), fresh[i], "n1", 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
}

// readBack checks, through c, what overwrite wrote.
func readBack(t *testing.T, c redis.Cmdable, old, fresh []string) {
	t.Helper()
	for i, k := range old {
		if v := c.Get(context.Background(), k).Val(); v != "v1" {
			t.Fatalf("GET %s: %q, want v1", k, v)
		}
		if v := c.Get(context.Background(), fresh[i]).Val(); v != "n1" {
			t.Fatalf("GET %s: %q, want n1", fresh[i], v)
		}
	}
}

// portOf returns the port of host:port.
func portOf(addr string) int {
	_, p, _ := strings.Cut(addr, ":")
	n, _ := strconv.Atoi(p)
	return n
}

// countSlotKeys counts the keys of srv whose hash slots are in [lo, hi].
func countSlotKeys(t *testing.T, srv *redistest.Server, lo, hi uint16) int {
	t.Helper()
	keys, err := srv.Client().Keys(context.Background(), "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, k := range keys {
		if sl := routing.Slot([]byte(k)); sl >= lo && sl <= hi {
			n++
		}
	}
	return n
}

func TestInjectFailoverFacade(t *testing.T) {
	srvs, addrs := startShards(t, 3)
	srvs[1].DoT(t, "CONFIG", "SET", "repl-diskless-sync-delay", "0") // the replica syncs at once
	replica := redistest.Start(t, "--replicaof", "127.0.0.1", strconv.Itoa(srvs[1].Port()))
	// A fourth, spare virtual node: the promoted replica's.
	p, set := startRouted(t, proxy.RouteFacade, addrs, func(c *proxy.Config) {
		c.FacadeListen = []string{"127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"}
	})
	nodes := p.FacadeAddrs()
	ctx := context.Background()
	c, _ := tappedCluster(t, nodes[0])
	keys := keysInSlots("fo:", 5461, 10922, 200) // shard 1's
	for _, k := range keys {
		if err := c.Set(ctx, k, "v0", 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	redistest.Eventually(t, 5*time.Second, func() error {
		if n := replica.Client().DBSize(ctx).Val(); n != int64(len(keys)) {
			return fmt.Errorf("replica has %d keys, want %d", n, len(keys))
		}
		return nil
	})
	const freeze = time.Second
	addRules(t, p, fmt.Sprintf(`rules:
- name: shard1-down
  shards: [%q]
  at: 200ms
  for: %s
  failover: {to: %q}
`, addrs[1], freeze, replica.Addr()))
	start := time.Now()

	// A writer goes on through the freeze: each SET timed by the client.
	var mu sync.Mutex
	var slowest time.Duration
	var written []string
	for i := 0; time.Since(start) < freeze+600*time.Millisecond; i++ {
		k := keys[i%len(keys)]
		t0 := time.Now()
		if err := c.Set(ctx, k, "v"+strconv.Itoa(i), 0).Err(); err != nil {
			t.Fatalf("SET %s at %v: %v", k, time.Since(start), err)
		}
		mu.Lock()
		slowest = max(slowest, time.Since(t0))
		written = append(written, k)
		mu.Unlock()
		time.Sleep(2 * time.Millisecond)
	}
	if slowest < freeze/2 {
		t.Errorf("the slowest SET took %v: the client saw no stall of the %v freeze", slowest, freeze)
	}
	if p.Injection().Hits(0) == 0 {
		t.Error("the rule froze no request")
	}
	// The frozen SETs, answered -MOVED by their node once the failover is
	// over, are timed, their wait injected: the SETs' injected time holds
	// most of the client's slowest SET.
	if inj := proxytest.Command(t, set, "set").Phases[metrics.PhaseInjected]; inj.Count() == 0 || inj.Sum < slowest/2 {
		t.Errorf("SET's injected phase: %d observations, %v in all; want the freeze the slowest SET (%v) waited", inj.Count(), inj.Sum, slowest)
	}
	// The replica is the shard's master now, announced as the spare node,
	// and holds every write, the last ones included.
	if role := replica.Client().Do(ctx, "ROLE").Val(); fmt.Sprint(role) == "" || !strings.HasPrefix(fmt.Sprint(role), "[master") {
		t.Fatalf("replica's ROLE after the failover: %v, want master", role)
	}
	redistest.Eventually(t, 5*time.Second, func() error {
		if got, want := slotOwnerPort(t, nodes[0], 5461), int64(portOf(nodes[3])); got != want {
			return fmt.Errorf("CLUSTER SLOTS: slot 5461 on port %d, want the spare node's %d", got, want)
		}
		return nil
	})
	last := map[string]string{}
	for i, k := range written {
		last[k] = "v" + strconv.Itoa(i)
	}
	c2, _ := tappedCluster(t, nodes[2])
	for k, want := range last {
		if v := c2.Get(ctx, k).Val(); v != want {
			t.Fatalf("GET %s after the failover: %q, want %q", k, v, want)
		}
		if v := replica.Client().Get(ctx, k).Val(); v != want {
			t.Fatalf("the new master has %s = %q, want %q", k, v, want)
		}
	}
}

// TestInjectClusterEventsNeedShardMap: a migrate or failover rule is
// refused, whole, where respmeter does not own the slot map (one engine, or
// a cluster's own map), in the file and at run time.
func TestInjectClusterEventsNeedShardMap(t *testing.T) {
	const file = `rules:
- name: slow
  delay: 1ms
- name: reshard
  slots: [0, 99]
  for: 1s
  migrate: {to: "127.0.0.1:7001"}
`
	refusedOverOneEngine(t, "rules.yaml", file, `rules[1]: rule "reshard": migrate needs route slots or facade over shards`, "migrate")
}

// TestInjectMigrateSlotsRoute: under --route slots the clients see no
// redirect (respmeter is their cluster client): while a migrate rule runs
// and after, a plain client's writes of the slots land on the target, and
// every key reads back.
func TestInjectMigrateSlotsRoute(t *testing.T) {
	srvs, addrs := startShards(t, 3)
	p, _ := startRouted(t, proxy.RouteSlots, addrs, nil)
	ctx := context.Background()
	c := goRedis(t, p.Addr())
	const lo, hi = 11000, 11999 // shard 2's, to shard 0
	old := keysInSlots("old:", lo, hi, 50)
	for _, k := range old {
		if err := c.Set(ctx, k, "v0", 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	addRules(t, p, fmt.Sprintf("rules:\n- name: reshard\n  slots: [%d, %d]\n  for: 300ms\n  migrate: {to: %q}\n", lo, hi, addrs[0]))
	fresh := keysInSlots("new:", lo, hi, 50)
	overwrite(t, c, old, fresh)
	redistest.Eventually(t, 5*time.Second, func() error {
		if n := countSlotKeys(t, srvs[2], lo, hi); n != 0 {
			return fmt.Errorf("shard 2 still has %d keys of the migrated slots", n)
		}
		return nil
	})
	readBack(t, c, old, fresh)
	if n := countSlotKeys(t, srvs[0], lo, hi); n != len(old)+len(fresh) {
		t.Fatalf("shard 0 has %d keys of the migrated slots, want %d", n, len(old)+len(fresh))
	}
}

// TestInjectMigrateRemoved: removing a migrate rule while its window runs
// ends the migration at once: the layout announced is the new one, and the
// old owner's node answers MOVED.
func TestInjectMigrateRemoved(t *testing.T) {
	srvs, p, _ := startFacade(t, 3, nil)
	nodes := p.FacadeAddrs()
	addRules(t, p, fmt.Sprintf("rules:\n- name: reshard\n  slots: [0, 99]\n  for: 1h\n  migrate: {to: %q}\n", srvs[2].Addr()))
	if got, want := slotOwnerPort(t, nodes[1], 0), int64(portOf(nodes[0])); got != want {
		t.Fatalf("CLUSTER SLOTS while migrating: slot 0 on port %d, want the old owner's %d", got, want)
	}
	if !p.RemoveInjection("reshard") {
		t.Fatal("no rule removed")
	}
	if got, want := slotOwnerPort(t, nodes[1], 0), int64(portOf(nodes[2])); got != want {
		t.Errorf("CLUSTER SLOTS after the rule's removal: slot 0 on port %d, want the target's %d", got, want)
	}
	c := redis.NewClient(&redis.Options{Addr: nodes[0], DisableIdentity: true, MaxRetries: -1})
	defer c.Close()
	k := keysInSlots("k:", 0, 99, 1)[0]
	if err := c.Get(context.Background(), k).Err(); err == nil || !strings.HasPrefix(err.Error(), "MOVED ") {
		t.Errorf("GET on the old owner's node after the removal: %v, want MOVED", err)
	}
}
