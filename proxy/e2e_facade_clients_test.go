package proxy_test

// Cluster clients other than go-redis through --route facade, each run
// side by side with the same client directly against a real 3-master
// Redis Cluster (the oracle): memtier_benchmark --cluster-mode and
// redis-py's RedisCluster, over standalone engines (--shards) and over a
// real cluster (--cluster).

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/respmeter/respmeter/internal/redistest"
	"github.com/respmeter/respmeter/metrics"
	"github.com/respmeter/respmeter/proxy"
	"github.com/respmeter/respmeter/proxy/proxytest"
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
		c := commandstats(t, s)
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

// redisPy returns a python3 that imports redis.cluster (redis-py's
// RedisCluster; Debian's python3-redis 4.3.4): python3 on PATH, else
// /usr/bin/python3 (where Debian's package installs it). Without one it
// skips t, and fails it under CI (CI set), whose .ci/run installs
// python3-redis.
func redisPy(t *testing.T) string {
	t.Helper()
	var tried []string
	for _, py := range []string{"python3", "/usr/bin/python3"} {
		path, err := exec.LookPath(py)
		if err != nil {
			tried = append(tried, py+": "+err.Error())
			continue
		}
		out, err := exec.Command(path, "-c", "import redis.cluster").CombinedOutput()
		if err == nil {
			return path
		}
		tried = append(tried, fmt.Sprintf("%s: %v %s", path, err, bytes.TrimSpace(out)))
	}
	redistest.SkipMissingTool(t, "redis-py (import redis.cluster) not found; install python3-redis: "+strings.Join(tried, "; "))
	return ""
}

// pyRun is what testdata/rediscluster.py printed.
type pyRun struct {
	Results []json.RawMessage `json:"results"`
	Nodes   []string          `json:"nodes"`
}

// runRedisPy runs testdata/rediscluster.py with a RedisCluster seeded with
// addr and returns its parsed output and every byte it printed.
func runRedisPy(t *testing.T, py, addr string) (pyRun, []byte) {
	t.Helper()
	host, port, _ := net.SplitHostPort(addr)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, py, "testdata/rediscluster.py", host, port)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	all := append(out, stderr.Bytes()...)
	if err != nil {
		t.Fatalf("redis-py RedisCluster at %s: %v\n%s", addr, err, all)
	}
	var r pyRun
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("redis-py output: %v\n%s", err, all)
	}
	return r, all
}

// checkRedisPyFacade compares redis-py's RedisCluster through the facade
// (seeded with a virtual node of p) with the same script directly against
// the cluster cl: the same replies; the client learned the virtual nodes
// and only them; no engine port in anything it printed; and each shard's
// respmeter_shard_commands_total grew by what its engine ran.
func checkRedisPyFacade(t *testing.T, py string, cl *redistest.Cluster, p *proxy.Proxy, set *metrics.Set, engines []*redistest.Server) {
	t.Helper()
	want, _ := runRedisPy(t, py, cl.Nodes[0].Addr())
	if w := slices.Sorted(slices.Values(cl.Addrs())); !slices.Equal(want.Nodes, w) {
		t.Fatalf("redis-py directly: nodes %v, want the cluster's %v", want.Nodes, w)
	}
	for _, s := range cl.Nodes {
		s.Flush()
	}
	resetStats(t, engines)
	before := map[string]int64{}
	for _, sh := range set.Snapshot().Shards {
		before[sh.Name] = sh.Count
	}
	nodes := p.FacadeAddrs()
	got, printed := runRedisPy(t, py, nodes[2])
	if len(got.Results) != len(want.Results) {
		t.Fatalf("%d results through the facade, %d directly", len(got.Results), len(want.Results))
	}
	t.Logf("redis-py: %d results, the cross-slot MGET's: %s", len(want.Results), want.Results[len(want.Results)-3])
	for i := range want.Results {
		if !bytes.Equal(got.Results[i], want.Results[i]) {
			t.Errorf("result %d differs\n cluster: %s\n facade:  %s", i, want.Results[i], got.Results[i])
		}
	}
	if w := slices.Sorted(slices.Values(nodes)); !slices.Equal(got.Nodes, w) {
		t.Errorf("redis-py through the facade learned nodes %v, want the virtual nodes %v", got.Nodes, w)
	}
	noEnginePort(t, "redis-py RedisCluster through the facade", printed, engines...)
	// The client has its replies: each engine ran all it will run of the
	// client's. Its commandstats read once: what the client sent (its INFO
	// and COMMAND included), without the CONFIG RESETSTAT before it, what
	// respmeter's topology refresh asks a cluster node (the client's own
	// CLUSTER commands are answered by the facade), and the PING and HELLO
	// respmeter sends of its own on shared upstream connections, and the
	// ACL GETUSER of its new-client auth check there (the suite's shared
	// shapes; the script sends none of them).
	ran := map[string]int64{}
	for _, s := range engines {
		for name, n := range commandstats(t, s) {
			if name != "config|resetstat" && name != "ping" && name != "hello" && name != "acl|getuser" && !strings.HasPrefix(name, "cluster|") {
				ran[s.Addr()] += n
			}
		}
	}
	redistest.Eventually(t, 5*time.Second, func() error {
		served := map[string]int64{}
		for _, sh := range set.Snapshot().Shards {
			served[sh.Name] = sh.Count - before[sh.Name]
		}
		for _, s := range engines {
			if n := ran[s.Addr()]; served[s.Addr()] != n || n == 0 {
				return fmt.Errorf("shard %s: respmeter_shard_commands_total grew by %d, the engine's commandstats counted %d", s.Addr(), served[s.Addr()], n)
			}
		}
		return nil
	})
}

// TestFacadeRedisPyShards: redis-py's RedisCluster (testdata/
// rediscluster.py: SET/GET, MSET/MGET by hash tag, a cross-slot MGET, a
// pipeline over many slots) through the facade over three standalone
// engines gets what it gets directly from a real 3-master cluster, learns
// only the virtual nodes, and respmeter counts per shard what each engine
// ran.
func TestFacadeRedisPyShards(t *testing.T) {
	redistest.SkipIfUnavailable(t)
	py := redisPy(t)
	cl := redistest.StartCluster(t, 3)
	srvs, p, set := startFacade(t, 3, nil)
	checkRedisPyFacade(t, py, cl, p, set, srvs)
}

// TestFacadeRedisPyCluster: as TestFacadeRedisPyShards, with the facade in
// front of the real cluster that is also the oracle.
func TestFacadeRedisPyCluster(t *testing.T) {
	redistest.SkipIfUnavailable(t)
	py := redisPy(t)
	cl, p, set := facadeOverCluster(t)
	checkRedisPyFacade(t, py, cl, p, set, cl.Nodes)
}
