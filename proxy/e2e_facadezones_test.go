package proxy_test

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/respmeter/respmeter/internal/redistest"
	"github.com/respmeter/respmeter/proxy"
	"github.com/respmeter/respmeter/proxy/proxytest"
)

// shardZones reads CLUSTER SHARDS on c (RESP2 or RESP3) and returns, per
// shard's first slot, its master's availability-zone ("" when the node has
// none: the field is absent).
func shardZones(ctx context.Context, c *redis.Client) (map[int64]string, error) {
	v, err := c.Do(ctx, "CLUSTER", "SHARDS").Result()
	if err != nil {
		return nil, err
	}
	fields := func(x any) map[string]any { // a RESP3 map or a RESP2 array of pairs
		out := map[string]any{}
		switch x := x.(type) {
		case map[any]any:
			for k, v := range x {
				out[fmt.Sprint(k)] = v
			}
		case []any:
			for i := 0; i+1 < len(x); i += 2 {
				out[fmt.Sprint(x[i])] = x[i+1]
			}
		}
		return out
	}
	shards, _ := v.([]any)
	zones := map[int64]string{}
	for _, sh := range shards {
		f := fields(sh)
		slots, _ := f["slots"].([]any)
		nodes, _ := f["nodes"].([]any)
		if len(slots) == 0 {
			continue
		}
		first, _ := slots[0].(int64)
		for _, n := range nodes {
			nf := fields(n)
			if nf["role"] == "master" {
				z, ok := nf["availability-zone"]
				if ok {
					zones[first] = fmt.Sprint(z)
				} else {
					zones[first] = ""
				}
			}
		}
	}
	return zones, nil
}

// facadeZones checks every virtual node of p's facade, over RESP2 and
// RESP3: its CLUSTER SHARDS gives the zones want by shard's first slot
// (shardZones); it returns the first difference.
func facadeZones(ctx context.Context, p *proxy.Proxy, want map[int64]string) error {
	for _, proto := range []int{2, 3} {
		for i, addr := range p.FacadeAddrs() {
			c := redis.NewClient(&redis.Options{Addr: addr, Protocol: proto, DisableIdentity: true})
			got, err := shardZones(ctx, c)
			_ = c.Close()
			if err != nil || !maps.Equal(got, want) {
				return fmt.Errorf("RESP%d: virtual node %d's CLUSTER SHARDS: zones by first slot %v (%v), want %v", proto, i, got, err, want)
			}
		}
	}
	return nil
}

// TestFacadeClusterShardsZones: a 3-master Valkey 9.1 cluster whose nodes
// have availability zones of their own (availability-zone, set on each);
// the facade's CLUSTER SHARDS gives each virtual node the zone of its
// shard's master, as the engine's own CLUSTER SHARDS does, over RESP2 and
// RESP3; with no zones set, neither carries the field. Skips on an engine
// without the setting, or whose CLUSTER SHARDS does not carry it (Valkey
// 8.1).
func TestFacadeClusterShardsZones(t *testing.T) {
	ctx := context.Background()
	cl := redistest.StartCluster(t, 3)
	if got, _ := cl.Nodes[0].Client().ConfigGet(ctx, "availability-zone").Result(); len(got) == 0 {
		_, engine := cl.Nodes[0].Version()
		t.Skipf("%s has no availability-zone (set %s to a Valkey 9.1 server)", engine, redistest.EngineEnv)
	}
	p, _ := proxytest.StartProxy(t, "", func(c *proxy.Config) {
		c.Route, c.Cluster = proxy.RouteFacade, cl.Nodes[0].Addr()
		c.FacadeListen = []string{"127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"}
		c.TopologyRefresh = 200 * time.Millisecond
	})
	compare := func(want map[int64]string) error { return facadeZones(ctx, p, want) }
	engineZones := func() map[int64]string {
		t.Helper()
		z, err := shardZones(ctx, cl.Nodes[1].Client())
		if err != nil {
			t.Fatal(err)
		}
		return z
	}
	none := engineZones()
	for first, z := range none {
		if z != "" {
			t.Fatalf("the shard of slot %d has zone %q before any was set", first, z)
		}
	}
	if err := compare(none); err != nil {
		t.Fatal(err)
	}

	for i, n := range cl.Nodes {
		n.DoT(t, "CONFIG", "SET", "availability-zone", fmt.Sprintf("zone-%c", 'a'+i))
	}
	// Valkey 8.1 has the setting but its CLUSTER SHARDS does not carry it:
	// a node's own entry shows its zone at once where the engine has it.
	if own, err := shardZones(ctx, cl.Nodes[0].Client()); err != nil || own[0] == "" {
		_, engine := cl.Nodes[0].Version()
		t.Skipf("%s's CLUSTER SHARDS carries no availability-zone (node 0's own shard: %v, %v; set %s to a Valkey 9.1 server)", engine, own, err, redistest.EngineEnv)
	}
	// The zones spread over the cluster bus; the facade reads them with
	// the map (CLUSTER SHARDS of its next refresh).
	var want map[int64]string
	redistest.Eventually(t, 10*time.Second, func() error {
		want = engineZones()
		for first, z := range want {
			if z == "" {
				return fmt.Errorf("the shard of slot %d has no zone yet: %v", first, want)
			}
		}
		return nil
	})
	redistest.Eventually(t, 5*time.Second, func() error { return compare(want) })
	t.Logf("zones by first slot: %v", want)
}

// TestFacadeShardZonesConfigured: three standalone engines behind the
// facade (Config.Shards) with a zone given for each (Config.ShardZones):
// every virtual node's CLUSTER SHARDS, over RESP2 and RESP3, gives each
// shard's master the zone given for that shard, by its first slot (the
// even split: 0, 5461, 10923). A zone list of another length than the
// shards is refused.
func TestFacadeShardZonesConfigured(t *testing.T) {
	ctx := context.Background()
	var shards []string
	for range 3 {
		shards = append(shards, redistest.Start(t).Addr())
	}
	zones := []string{"zone-a", "zone-b", "zone-c"}
	p, _ := proxytest.StartProxy(t, "", func(c *proxy.Config) {
		c.Route, c.Shards, c.ShardZones = proxy.RouteFacade, shards, zones
		c.FacadeListen = []string{"127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"}
	})
	want := map[int64]string{0: "zone-a", 5461: "zone-b", 10923: "zone-c"}
	if err := facadeZones(ctx, p, want); err != nil {
		t.Error(err)
	}
	_, err := proxy.New(proxy.Config{Listen: "127.0.0.1:0", Route: proxy.RouteFacade, Shards: shards, ShardZones: zones[:2],
		FacadeListen: []string{"127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"}})
	if err == nil || !strings.Contains(err.Error(), "shard zones: 2 for 3 shards") {
		t.Errorf("2 zones for 3 shards: %v, want refused", err)
	}
}
