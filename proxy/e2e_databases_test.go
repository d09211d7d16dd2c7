package proxy_test

// Several databases in cluster mode (Valkey 9.0 and later, with
// cluster-databases above 1): SELECT is allowed on a cluster node, so a
// routed request's target is its db and its hash slot. These tests skip on
// an engine without cluster-databases (Redis, Valkey before 9.0); .ci/run
// runs them against Valkey 9.1 through RESPMETER_TEST_ENGINE.

import (
	"context"
	"fmt"
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

// skipUnlessValkey9 skips t unless has, asked of a probe server of the
// test's engine, finds what (a Valkey 9 feature) there.
func skipUnlessValkey9(t *testing.T, what string, has func(probe *redistest.Server) bool) {
	t.Helper()
	probe := redistest.Start(t)
	if !has(probe) {
		_, engine := probe.Version()
		t.Skipf("%s has no %s (set %s to a Valkey 9 server)", engine, what, redistest.EngineEnv)
	}
}

// skipWithoutClusterDatabases skips t unless the engine has the
// cluster-databases configuration (Valkey 9.0 on).
func skipWithoutClusterDatabases(t *testing.T) {
	t.Helper()
	skipUnlessValkey9(t, "cluster-databases", func(probe *redistest.Server) bool {
		got, _ := probe.Client().ConfigGet(context.Background(), "cluster-databases").Result()
		return len(got) > 0
	})
}

// clusterDBModes are the ways through respmeter to a 3-master cluster that
// the databases tests take, each a change to a --route slots --cluster
// Config: private and shared upstream connections, and the facade (its
// clients cluster clients of the virtual nodes).
var clusterDBModes = []struct {
	name string
	mod  func(*proxy.Config)
}{
	{"private", func(c *proxy.Config) { c.UpstreamMode = proxy.UpstreamPrivate }},
	{"shared", func(c *proxy.Config) { c.UpstreamMode = proxy.UpstreamShared }},
	{"facade", func(c *proxy.Config) {
		c.Route = proxy.RouteFacade
		c.FacadeListen = []string{"127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"}
	}},
}

// TestClusterDatabases: on a 3-master cluster with 16 databases, two
// go-redis clients, one on db 0 and one on db 3 (SELECT on connect), write
// the same keys at once, with values naming their db, through --route slots
// --cluster with private and with shared upstream connections and through
// the facade (a ClusterClient on the virtual nodes). Afterwards, read on
// each engine directly, every db of every node holds only keys of that
// node's slots, each with its own db's value, and each db holds every key:
// no write of one client landed in the other's db or on another node.
func TestClusterDatabases(t *testing.T) {
	skipWithoutClusterDatabases(t)
	cl := redistest.StartClusterWith(t, 3, "--cluster-databases", "16")
	const n = 300
	ctx := context.Background()
	for _, m := range clusterDBModes {
		p, _ := proxytest.StartProxy(t, "", func(c *proxy.Config) {
			c.Route, c.Cluster = proxy.RouteSlots, cl.Nodes[1].Addr()
			m.mod(c)
		})
		var clients [2]redis.UniversalClient
		for i, db := range []int{0, 3} {
			if m.name == "facade" {
				clients[i] = redis.NewClusterClient(&redis.ClusterOptions{Addrs: p.FacadeAddrs(), DisableIdentity: true,
					OnConnect: func(ctx context.Context, cn *redis.Conn) error { return cn.Select(ctx, db).Err() }})
			} else {
				clients[i] = redis.NewClient(&redis.Options{Addr: p.Addr(), DB: db, DisableIdentity: true})
			}
			t.Cleanup(func() { _ = clients[i].Close() })
		}
		var wg sync.WaitGroup
		for i, db := range []int{0, 3} {
			wg.Go(func() {
				c := clients[i]
				for k := range n {
					key := fmt.Sprintf("db:%s:%d", m.name, k)
					if err := c.Set(ctx, key, fmt.Sprintf("%d:%s", db, key), 0).Err(); err != nil {
						t.Errorf("%s db %d: SET %s: %v", m.name, db, key, err)
						return
					}
				}
				// A pipeline too: several keys per node in one round trip.
				_, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
					for k := n; k < n+50; k++ {
						key := fmt.Sprintf("db:%s:%d", m.name, k)
						p.Set(ctx, key, fmt.Sprintf("%d:%s", db, key), 0)
					}
					return nil
				})
				if err != nil {
					t.Errorf("%s db %d: pipeline: %v", m.name, db, err)
				}
			})
		}
		wg.Wait()
		for _, db := range []int{0, 3} {
			seen := 0
			for i, node := range cl.Nodes {
				c := redis.NewClient(&redis.Options{Addr: node.Addr(), DB: db, DisableIdentity: true})
				keys, err := c.Keys(ctx, "db:"+m.name+":*").Result()
				if err != nil {
					t.Fatal(err)
				}
				for _, key := range keys {
					if owner := cl.Owner(int(routing.Slot([]byte(key)))); owner != i {
						t.Errorf("%s: db %d of node %d holds %s, a key of node %d's slots", m.name, db, i, key, owner)
					}
					if v, err := c.Get(ctx, key).Result(); err != nil || v != fmt.Sprintf("%d:%s", db, key) {
						t.Errorf("%s: db %d of node %d: %s = %q (%v), want db %d's value", m.name, db, i, key, v, err, db)
					}
				}
				if len(keys) == 0 {
					t.Errorf("%s: db %d of node %d holds no key", m.name, db, i)
				}
				seen += len(keys)
				_ = c.Close()
			}
			if seen != n+50 {
				t.Errorf("%s: db %d holds %d keys over the nodes, want %d", m.name, db, seen, n+50)
			}
		}
		if t.Failed() {
			t.Logf("engine nodes: %s", strings.Join(cl.Addrs(), " "))
			return
		}
	}
}

// TestClusterDatabasesMigrateSlots: a go-redis client on db 3 writes keys
// of slots 0-999 through --route slots --cluster (private, then shared
// upstream connections) while CLUSTER MIGRATESLOTS moves those slots from
// node 0 to node 1. The client's connection to node 1 is opened after the
// MOVED, so it must get the client's SELECT 3 before the re-sent write:
// afterwards every key is in db 3 of node 1 with its last acknowledged
// value, and no node's db 0 holds any of them.
func TestClusterDatabasesMigrateSlots(t *testing.T) {
	skipWithoutClusterDatabases(t)
	skipWithoutMigrateSlots(t)
	cl := redistest.StartClusterWith(t, 3, "--cluster-databases", "16")
	ctx := context.Background()
	for i, mode := range []string{proxy.UpstreamPrivate, proxy.UpstreamShared} {
		first, last := 1000*i, 1000*i+999
		p, _ := proxytest.StartProxy(t, "", func(c *proxy.Config) {
			c.Route, c.Cluster, c.UpstreamMode = proxy.RouteSlots, cl.Nodes[2].Addr(), mode
		})
		c := redis.NewClient(&redis.Options{Addr: p.Addr(), DB: 3, DisableIdentity: true, MaxRetries: -1})
		t.Cleanup(func() { _ = c.Close() })
		keys := keysInSlots("mdb:"+mode+":", first, last, 500)
		var stop atomic.Bool
		var written atomic.Int64
		done := make(chan struct{})
		go func() {
			defer close(done)
			for i := 0; !stop.Load(); i++ {
				if err := c.Set(ctx, keys[i%len(keys)], fmt.Sprintf("3:%d", i), 0).Err(); err != nil {
					t.Errorf("%s: SET %s (write %d): %v", mode, keys[i%len(keys)], i, err)
					return
				}
				written.Store(int64(i + 1))
			}
		}()
		time.Sleep(200 * time.Millisecond)
		cl.MigrateSlots(first, last, 1, 60*time.Second)
		// Every key written at least once more after the cut-over.
		after := written.Load()
		redistest.Eventually(t, 20*time.Second, func() error {
			if n := written.Load(); n < after+int64(len(keys)) && !t.Failed() {
				return fmt.Errorf("%s: %d writes since the migration ended", mode, n-after)
			}
			return nil
		})
		stop.Store(true)
		<-done
		want := map[string]string{}
		for i := range int(written.Load()) {
			want[keys[i%len(keys)]] = fmt.Sprintf("3:%d", i)
		}
		target := redis.NewClient(&redis.Options{Addr: cl.Nodes[1].Addr(), DB: 3, DisableIdentity: true})
		for k, v := range want {
			if got, err := target.Get(ctx, k).Result(); err != nil || got != v {
				t.Errorf("%s: db 3 of node 1: %s = %q, %v; last acknowledged write %q", mode, k, got, err, v)
			}
		}
		_ = target.Close()
		for n, node := range cl.Nodes {
			db0 := redis.NewClient(&redis.Options{Addr: node.Addr(), DB: 0, DisableIdentity: true})
			got, err := db0.Keys(ctx, "mdb:*").Result()
			_ = db0.Close()
			if err != nil || len(got) > 0 {
				t.Errorf("%s: db 0 of node %d holds %d of the db-3 client's keys (%v)", mode, n, len(got), err)
			}
		}
	}
}
