package proxy_test

// The failure semantics a cluster client has (issue 14 item 5): -TRYAGAIN
// retried during a slot migration.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/respmeter/respmeter/internal/redistest"
	"github.com/respmeter/respmeter/proxy"
	"github.com/respmeter/respmeter/proxy/proxytest"
	"github.com/respmeter/respmeter/routing"
)

// TestClusterTryAgainRetried: a slot migrates (BeginMove, MIGRATE of its
// keys in two halves, FinishMove) while plain clients run multi-key MGETs
// over every key of the slot and MSET/MGET/DEL cycles on keys of their own
// in it. While the keys are split between source and target the engines
// answer -TRYAGAIN; the proxy retries it, so no client sees one and every
// reply is the right one. The first half stays split until the proxy has
// retried a -TRYAGAIN (or a client got one: then the test fails), so the
// case is not left to timing.
func TestClusterTryAgainRetried(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	p, set := startClusterProxy(t, cl, nil)
	ctx := context.Background()
	const tag = "{m}"
	slot := int(routing.Slot([]byte(tag)))
	from, to := cl.Owner(slot), (cl.Owner(slot)+1)%3
	// Fixed keys: read by every MGET, never written during the move.
	fixed := make([]string, 10)
	for i := range fixed {
		fixed[i] = fmt.Sprintf("%sfixed%d", tag, i)
		if err := goRedis(t, p.Addr()).Set(ctx, fixed[i], i, 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	want := make([]any, len(fixed))
	for i := range want {
		want[i] = strconv.Itoa(i)
	}
	var stop atomic.Bool
	var ops, failures atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	fail := func(err error) {
		failures.Add(1)
		select {
		case errs <- err:
		default:
		}
	}
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := goRedis(t, p.Addr())
			own := []string{fmt.Sprintf("%sw%da", tag, w), fmt.Sprintf("%sw%db", tag, w)}
			for i := 0; !stop.Load() && failures.Load() == 0; i++ {
				got, err := c.MGet(ctx, fixed...).Result()
				if err != nil || !slices.Equal(got, want) {
					fail(fmt.Errorf("MGET fixed keys: %v (err %v)", got, err))
					return
				}
				v := strconv.Itoa(i)
				if err := c.MSet(ctx, own[0], v, own[1], v).Err(); err != nil {
					fail(fmt.Errorf("MSET: %w", err))
					return
				}
				if got, err := c.MGet(ctx, own...).Result(); err != nil || !slices.Equal(got, []any{v, v}) {
					fail(fmt.Errorf("MGET after MSET %s: %v (err %v)", v, got, err))
					return
				}
				if n, err := c.Del(ctx, own...).Result(); err != nil || n != 2 {
					fail(fmt.Errorf("DEL: %d (err %v)", n, err))
					return
				}
				if got, err := c.MGet(ctx, own...).Result(); err != nil || !slices.Equal(got, []any{nil, nil}) {
					fail(fmt.Errorf("MGET after DEL: %v (err %v)", got, err))
					return
				}
				ops.Add(5)
			}
		}()
	}
	migrate := func(keys []string) {
		t.Helper()
		args := []any{"MIGRATE", "127.0.0.1", strconv.Itoa(cl.Nodes[to].Port()), "", "0", "5000", "KEYS"}
		for _, k := range keys {
			args = append(args, k)
		}
		if r := cl.Nodes[from].DoT(t, args...); r != "OK" && r != "NOKEY" {
			t.Fatalf("MIGRATE: %v", r)
		}
	}
	redistest.Eventually(t, 10*time.Second, func() error {
		if ops.Load() < 100 {
			return fmt.Errorf("%d commands before the move", ops.Load())
		}
		return nil
	})
	cl.BeginMove(slot, to)
	migrate(fixed[:len(fixed)/2])
	redistest.Eventually(t, 10*time.Second, func() error {
		if set.Snapshot().Routing.TryAgainRetries > 0 || failures.Load() > 0 {
			return nil
		}
		return errors.New("no -TRYAGAIN while the fixed keys are split")
	})
	// The rest, and whatever the workers left on the source.
	rest, err := cl.Nodes[from].Client().ClusterGetKeysInSlot(ctx, slot, 100).Result()
	if err != nil {
		t.Fatal(err)
	}
	migrate(rest)
	cl.FinishMove(slot, to)
	before := ops.Load()
	redistest.Eventually(t, 10*time.Second, func() error {
		if ops.Load() < before+100 && failures.Load() == 0 {
			return fmt.Errorf("%d commands after the move", ops.Load()-before)
		}
		return nil
	})
	stop.Store(true)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	r := set.Snapshot().Routing
	t.Logf("%d commands; -TRYAGAIN retried %d times; redirects followed: %d ASK, %d MOVED", ops.Load(), r.TryAgainRetries, r.RedirectsAsk, r.RedirectsMoved)
	// The oracle: what the target holds.
	for i, k := range fixed {
		if v, err := cl.Nodes[to].Client().Get(ctx, k).Result(); err != nil || v != strconv.Itoa(i) {
			t.Errorf("%s on the new owner: %q (err %v)", k, v, err)
		}
	}
	if n, err := cl.Nodes[from].Client().ClusterCountKeysInSlot(ctx, slot).Result(); err != nil || n != 0 {
		t.Errorf("%d keys left on the source (err %v)", n, err)
	}
}

// TestUpstreamTimeoutFrozenEngine: an engine frozen with SIGSTOP (no reset:
// the kernel keeps its connections open) under one engine (private and
// shared connections) and under slot routing over two standalone shards.
// The requests pipelined to it get "-ERR upstream <addr> not answering",
// in order, no sooner than UpstreamTimeout after they were sent and long
// before TCP would notice (the bound is generous: the check runs every
// quarter of the timeout); nothing stays in flight. With one engine the
// client is then closed, as its own timed-out connection would be; under
// slot routing it keeps its connection and its other shard, and the frozen
// shard serves it again once thawed. Without the timeout the requests wait
// as long as the engine is frozen (the test would fail on its 11 s read).
func TestUpstreamTimeoutFrozenEngine(t *testing.T) {
	const timeout = time.Second
	for _, tc := range []struct {
		name, route, mode string
	}{
		{"one engine", proxy.RouteNone, proxy.UpstreamPrivate},
		{"one engine shared", proxy.RouteNone, proxy.UpstreamShared},
		{"slots", proxy.RouteSlots, proxy.UpstreamPrivate},
		{"slots shared", proxy.RouteSlots, proxy.UpstreamShared},
	} {
		t.Run(tc.name, func(t *testing.T) {
			frozen, other := redistest.Start(t), redistest.Start(t)
			// {a} hashes to slot 15495 (second of two shards), {b} to 3300 (first).
			p, _ := proxytest.StartProxy(t, frozen.Addr(), func(c *proxy.Config) {
				c.UpstreamTimeout = timeout
				c.UpstreamMode = tc.mode
				if tc.route == proxy.RouteSlots {
					c.Route, c.Shards = proxy.RouteSlots, []string{other.Addr(), frozen.Addr()}
				}
			})
			c := redistest.Dial(t, p.Addr())
			defer c.Close()
			c.Roundtrip(t, redistest.Cmd("SET", "{a}k", "1"), []byte("+OK\r\n"))
			frozen.Stop()
			thawed := false
			defer func() {
				if !thawed {
					frozen.Cont()
				}
			}()
			sent := time.Now()
			c.Send(t, respJoin(redistest.Cmd("GET", "{a}k"), redistest.Cmd("INCR", "{a}n"), redistest.Cmd("SET", "{a}k", "2")))
			want := "-ERR upstream " + frozen.Addr() + " not answering\r\n"
			for i := range 3 {
				got, err := c.ReadFrame(timeout + 10*time.Second)
				if err != nil || string(got) != want {
					t.Fatalf("reply %d: %q (err %v), want %q", i+1, got, err, want)
				}
			}
			took := time.Since(sent)
			t.Logf("errors after %v (timeout %v)", took.Round(time.Millisecond), timeout)
			if took < timeout || took > timeout+5*time.Second {
				t.Errorf("pending requests failed after %v, want between the timeout %v and %v", took, timeout, timeout+5*time.Second)
			}
			redistest.Eventually(t, 5*time.Second, func() error {
				if n := p.InFlight(); n != 0 {
					return fmt.Errorf("in flight %d after the timeout, want 0", n)
				}
				return nil
			})
			if tc.route != proxy.RouteSlots && !routedMode() {
				if b, closed := c.ReadToClose(5 * time.Second); !closed || len(b) > 0 {
					t.Errorf("one engine: client not closed after the timeout (closed %v, extra %q)", closed, b)
				}
				return
			}
			if tc.route == proxy.RouteSlots {
				c.Roundtrip(t, redistest.Cmd("SET", "{b}k", "x"), []byte("+OK\r\n"))
			}
			frozen.Cont()
			thawed = true
			// (What the engine does with the failed requests once thawed is
			// unknown to the client, as after any timeout: it may run them.)
			c.Roundtrip(t, redistest.Cmd("SET", "{a}z", "1"), []byte("+OK\r\n"))
		})
	}
}

// startReplica starts a cluster-enabled redis-server, joins it to cl and
// makes it the replica of cl.Nodes[master] (CLUSTER MEET, CLUSTER
// REPLICATE), and waits until it has synced and the master lists it.
// (redistest.Cluster is masters only, and its Wait counts them alone: the
// cluster is not Wait-ed on once it has a replica.)
func startReplica(t *testing.T, cl *redistest.Cluster, master int, extra ...string) *redistest.Server {
	t.Helper()
	bus, err := redistest.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	args := append([]string{"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
		"--cluster-port", strconv.Itoa(bus)}, extra...)
	r := redistest.Start(t, args...)
	m := cl.Nodes[master]
	r.DoT(t, "CLUSTER", "MEET", "127.0.0.1", strconv.Itoa(m.Port()), strconv.Itoa(cl.BusPort(master)))
	ctx := context.Background()
	id := cl.NodeID(master)
	redistest.Eventually(t, 15*time.Second, func() error {
		return r.Client().Do(ctx, "CLUSTER", "REPLICATE", id).Err()
	})
	redistest.Eventually(t, 15*time.Second, func() error {
		info, err := r.Client().Info(ctx, "replication").Result()
		if err != nil || !strings.Contains(info, "master_link_status:up") {
			return fmt.Errorf("replica not synced: %v", err)
		}
		for _, n := range cl.Nodes {
			nodes, err := n.Client().ClusterNodes(ctx).Result()
			if err != nil || !strings.Contains(nodes, "slave "+id) {
				return fmt.Errorf("node %s does not list the replica yet (%v)", n.Addr(), err)
			}
		}
		return nil
	})
	return r
}

// TestClusterFailoverAfterFreeze: under --route slots --cluster (a plain
// client) and --route facade --cluster (a ClusterClient at a virtual node),
// the master of a key is frozen with SIGSTOP (no reset) while its replica
// takes over (cluster-node-timeout 1 s). The client's pending write gets
// "-ERR upstream <master> not answering" no sooner than the upstream
// timeout and long before the 30 s topology refresh; writes resume through
// the proxy once the replica is master, within the upstream timeout and a
// refresh of the failover (measured in the same run: the replica's ROLE),
// not after the refresh period. Under Redis 8.0 and Valkey 8.1 the frozen
// master stays in its CLUSTER SHARDS shard next to the promoted replica
// (both role "master"), so this also checks the topology fetch picks the
// online one. Through the facade the error names the frozen master's
// virtual node, the promoted replica takes the spare virtual node, and no
// byte the client read names an engine.
func TestClusterFailoverAfterFreeze(t *testing.T) {
	for _, route := range []string{proxy.RouteSlots, proxy.RouteFacade} {
		t.Run(route, func(t *testing.T) { clusterFailoverAfterFreeze(t, route) })
	}
}

func clusterFailoverAfterFreeze(t *testing.T, route string) {
	const timeout = time.Second
	nodeTimeout := []string{"--cluster-node-timeout", "1000"}
	cl := redistest.StartClusterWith(t, 3, nodeTimeout...)
	const key = "{b}n" // slot 3300: node 0, not the proxy's seed
	slot := int(routing.Slot([]byte(key)))
	master := cl.Owner(slot)
	rep := startReplica(t, cl, master, nodeTimeout...)
	p, _ := startClusterProxy(t, cl, func(c *proxy.Config) {
		c.UpstreamTimeout = timeout
		c.TopologyRefresh = 30 * time.Second
		if route == proxy.RouteFacade {
			// Virtual node i is the i-th master by slot order, as
			// cl.Nodes; the fourth is spare, for the promoted replica.
			c.Route = proxy.RouteFacade
			c.FacadeListen = []string{"127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"}
		}
	})
	ctx := context.Background()
	frozen := cl.Nodes[master]
	var c redis.Cmdable
	var read func() []byte // every byte the facade's client read
	want := "ERR upstream " + frozen.Addr() + " not answering"
	if route == proxy.RouteFacade {
		nodes := p.FacadeAddrs()
		c, read = tappedCluster(t, nodes[(master+1)%3])
		want = "ERR upstream " + nodes[master] + " not answering"
	} else {
		c = goRedis(t, p.Addr())
	}
	if err := c.Set(ctx, key, 0, 0).Err(); err != nil {
		t.Fatal(err)
	}
	frozen.Stop()
	defer frozen.Cont()
	froze := time.Now()
	// The oracle: when the replica says it is master.
	promoted := make(chan time.Duration, 1)
	go func() {
		err := redistest.Await(time.Until(froze.Add(30*time.Second)), 20*time.Millisecond, func() error {
			role, err := rep.Client().Do(ctx, "ROLE").Slice()
			if err == nil && len(role) > 0 && role[0] == "master" {
				return nil
			}
			return fmt.Errorf("ROLE %v, %v", role, err)
		})
		if err != nil {
			close(promoted)
			return
		}
		promoted <- time.Since(froze)
	}()
	sent := time.Now()
	err := c.Incr(ctx, key).Err()
	took := time.Since(sent)
	if err == nil || err.Error() != want {
		t.Fatalf("INCR on the frozen master: %v, want %q", err, want)
	}
	t.Logf("pending write failed after %v (upstream timeout %v)", took.Round(time.Millisecond), timeout)
	if took < timeout || took > timeout+5*time.Second {
		t.Errorf("pending write failed after %v, want between %v and %v", took, timeout, timeout+5*time.Second)
	}
	var resumed time.Duration
	var errs []string
	if err := redistest.Await(time.Until(froze.Add(25*time.Second)), 50*time.Millisecond, func() error {
		n, err := c.Incr(ctx, key).Result()
		if err == nil {
			resumed = time.Since(froze)
			if n != 1 {
				t.Errorf("INCR after the failover: %d, want 1 (the replica had the SET)", n)
			}
			return nil
		}
		if len(errs) == 0 || errs[len(errs)-1] != err.Error() {
			errs = append(errs, err.Error())
		}
		return err
	}); err != nil {
		role, rerr := rep.Client().Do(ctx, "ROLE").Slice()
		if rerr == nil && len(role) > 0 {
			t.Fatalf("writes did not resume within 25 s (the replica's role: %v); errors: %q", role[0], errs)
		}
		t.Fatalf("writes did not resume within 25 s (ROLE on the replica: %v); errors: %q", rerr, errs)
	}
	failover, ok := <-promoted
	if !ok {
		t.Fatal("the replica never became master")
	}
	t.Logf("replica master after %v; writes resumed after %v; errors meanwhile: %q", failover.Round(time.Millisecond), resumed.Round(time.Millisecond), errs)
	// The last request to the frozen master may have been sent just before
	// the promotion: it times out, then the refresh it asks for finds the
	// new master.
	if limit := failover + timeout*3/2 + 3*time.Second; resumed > limit {
		t.Errorf("writes resumed %v after the freeze, the replica was master after %v: want within %v (no wait for the 30 s refresh)", resumed, failover, limit)
	}
	if read == nil {
		return
	}
	// The facade: the promoted replica serves the slot from the spare
	// virtual node, and the client never read an engine's address.
	spare := p.FacadeAddrs()[3]
	slots, err := c.ClusterSlots(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	served := ""
	for _, s := range slots {
		if s.Start <= slot && slot <= s.End && len(s.Nodes) > 0 {
			served = s.Nodes[0].Addr
		}
	}
	if served != spare {
		t.Errorf("CLUSTER SLOTS after the failover: slot %d served by %q, want the spare virtual node %s (%v)", slot, served, spare, slots)
	}
	noEnginePort(t, "ClusterClient through the facade across a failover", read(), append(cl.Nodes, rep)...)
}
