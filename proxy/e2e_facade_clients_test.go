package proxy_test

// Cluster clients other than go-redis through --route facade, each run
// side by side with the same client directly against a real 3-master
// Redis Cluster (the oracle): memtier_benchmark --cluster-mode and
// redis-py's RedisCluster, over standalone engines (--shards) and over a
// real cluster (--cluster).

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/respmeter/respmeter/internal/redistest"
	"github.com/respmeter/respmeter/internal/redistest/proxytest"
	"github.com/respmeter/respmeter/metrics"
	"github.com/respmeter/respmeter/proxy"
)

// facadeOverCluster starts a real 3-master cluster and --route facade in
// front of it, one virtual node per master.
func facadeOverCluster(t *testing.T) (*redistest.Cluster, *proxy.Proxy, *metrics.Set) {
	t.Helper()
	cl := redistest.StartCluster(t, 3)
	p, set := proxytest.StartProxy(t, "", func(c *proxy.Config) {
		c.Route, c.Cluster = proxy.RouteFacade, cl.Nodes[0].Addr()
		c.FacadeListen = []string{"127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"}
	})
	return cl, p, set
}

// resetStats runs CONFIG RESETSTAT on every engine, so that their
// commandstats count only what comes after.
func resetStats(t *testing.T, srvs []*redistest.Server) {
	t.Helper()
	for _, s := range srvs {
		if err := s.Client().ConfigResetStat(context.Background()).Err(); err != nil {
			t.Fatal(err)
		}
	}
}

// cmdstatCalls returns the calls of each command in names as the engine's
// commandstats count them (names lower case, as commandstats spell them).
func cmdstatCalls(t *testing.T, s *redistest.Server, names ...string) map[string]int64 {
	t.Helper()
	info, err := s.Client().Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for _, n := range names {
		m := regexp.MustCompile(`(?m)^cmdstat_` + regexp.QuoteMeta(n) + `:calls=(\d+),`).FindStringSubmatch(info)
		if m != nil {
			out[n], _ = strconv.ParseInt(m[1], 10, 64)
		}
	}
	return out
}

// memtier's fixed workload: 1 thread × 2 connections, pipeline 4, SET:GET
// 1:1 of 16-byte values, keys mt:1 .. mt:600 in parallel sequences (P:P:
// each connection its own part of the range), 300 requests per connection.
const (
	mtClients  = 2
	mtRequests = 300
)

// runMemtierCluster runs memtier_benchmark --cluster-mode seeded with addr
// and returns what it printed; it fails t unless memtier exits 0.
func runMemtierCluster(t *testing.T, bin, addr string) string {
	t.Helper()
	host, port, _ := net.SplitHostPort(addr)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, "-s", host, "-p", port, "--cluster-mode", "--protocol", "redis",
		"-t", "1", "-c", strconv.Itoa(mtClients), "--pipeline", "4", "--ratio", "1:1",
		"--key-pattern", "P:P", "--key-prefix", "mt:", "--key-minimum", "1", "--key-maximum", "600",
		"-n", strconv.Itoa(mtRequests), "-d", "16", "--hide-histogram").CombinedOutput()
	if err != nil {
		t.Fatalf("memtier --cluster-mode at %s: %v\n%s", addr, err, out)
	}
	return string(out)
}

// memtierCounts runs memtier's workload seeded with addr after resetting
// the engines' statistics, and returns the SETs and GETs each engine ran.
func memtierCounts(t *testing.T, bin, addr string, engines []*redistest.Server) (out string, sets, gets []int64) {
	t.Helper()
	resetStats(t, engines)
	out = runMemtierCluster(t, bin, addr)
	for _, s := range engines {
		c := cmdstatCalls(t, s, "set", "get")
		sets, gets = append(sets, c["set"]), append(gets, c["get"])
	}
	return out, sets, gets
}

// checkMemtierFacade compares memtier through the facade (seeded with a
// virtual node of p) with memtier directly against the cluster cl: both
// exit 0 with no error printed; the engines behind the facade ran as many
// SETs and GETs as the cluster's nodes did, shard for shard; each shard's
// respmeter_shard_commands_total equals what its engine ran; no engine
// port appears in what memtier printed.
func checkMemtierFacade(t *testing.T, bin string, cl *redistest.Cluster, p *proxy.Proxy, set *metrics.Set, engines []*redistest.Server) {
	t.Helper()
	_, wantSets, wantGets := memtierCounts(t, bin, cl.Nodes[0].Addr(), cl.Nodes)
	var total int64
	for i := range wantSets {
		total += wantSets[i] + wantGets[i]
	}
	if total != mtClients*mtRequests {
		t.Fatalf("memtier directly against the cluster: SETs %v GETs %v, want %d commands in all", wantSets, wantGets, mtClients*mtRequests)
	}
	before := map[string]int64{}
	for _, sh := range set.Snapshot().Shards {
		before[sh.Name] = sh.Count
	}
	nodes := p.FacadeAddrs()
	out, sets, gets := memtierCounts(t, bin, nodes[1], engines)
	t.Logf("memtier through the facade: SETs %v GETs %v per shard (directly: %v %v)", sets, gets, wantSets, wantGets)
	for i := range engines {
		if sets[i] != wantSets[i] || gets[i] != wantGets[i] {
			t.Errorf("shard %d ran %d SETs and %d GETs through the facade, the cluster's node %d ran %d and %d",
				i, sets[i], gets[i], i, wantSets[i], wantGets[i])
		}
	}
	if strings.Contains(strings.ToLower(out), "error") {
		t.Errorf("memtier through the facade printed an error:\n%s", out)
	}
	noEnginePort(t, "memtier --cluster-mode through the facade", []byte(out), engines...)
	// What respmeter counted per shard for the run is what each engine ran.
	redistest.Eventually(t, 5*time.Second, func() error {
		served := map[string]int64{}
		for _, sh := range set.Snapshot().Shards {
			served[sh.Name] = sh.Count - before[sh.Name]
		}
		for i, s := range engines {
			if n := sets[i] + gets[i]; served[s.Addr()] != n {
				return fmt.Errorf("shard %s: respmeter_shard_commands_total grew by %d, the engine ran %d SETs and GETs", s.Addr(), served[s.Addr()], n)
			}
		}
		return nil
	})
}

// TestFacadeMemtierShards: memtier_benchmark --cluster-mode through the
// facade over three standalone engines runs its fixed workload with no
// error and the same SETs and GETs per shard as directly against a real
// 3-master cluster (same slot ranges), counted per shard by respmeter as
// the engines count them; no engine port in its output.
func TestFacadeMemtierShards(t *testing.T) {
	redistest.SkipIfUnavailable(t)
	bin := redistest.Memtier(t)
	cl := redistest.StartCluster(t, 3)
	srvs, p, set := startFacade(t, 3, nil)
	checkMemtierFacade(t, bin, cl, p, set, srvs)
}

// TestFacadeMemtierCluster: as TestFacadeMemtierShards, with the facade in
// front of a real 3-master cluster; the oracle is memtier directly against
// that same cluster.
func TestFacadeMemtierCluster(t *testing.T) {
	redistest.SkipIfUnavailable(t)
	bin := redistest.Memtier(t)
	cl, p, set := facadeOverCluster(t)
	checkMemtierFacade(t, bin, cl, p, set, cl.Nodes)
}
