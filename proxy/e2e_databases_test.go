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
	"testing"

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
	modes := []struct {
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
	for _, m := range modes {
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
