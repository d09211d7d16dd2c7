package proxy_test

// A TLS Redis Cluster (tls-cluster yes, port 0: redistest.StartTLSCluster)
// behind respmeter's TLS listener: --route slots --cluster with TLS to
// the engines, and the facade with TLS virtual nodes. Clients: go-redis v9
// (a plain client and a ClusterClient) with a tls.Config, and
// redis-cli -c --tls; certificates made at test time.

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/respmeter/respmeter/internal/redistest"
	"github.com/respmeter/respmeter/internal/tlsconf"
	"github.com/respmeter/respmeter/proxy"
	"github.com/respmeter/respmeter/proxy/proxytest"
	"github.com/respmeter/respmeter/routing"
)

// tlsTap is a go-redis dialer that speaks TLS with cfg and keeps a copy of
// every decrypted byte its connections read.
type tlsTap struct {
	cfg *tls.Config
	mu  sync.Mutex
	buf bytes.Buffer
}

func (tp *tlsTap) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	var d tls.Dialer
	d.Config = tp.cfg
	conn, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return tapConn{conn, &tp.mu, &tp.buf}, nil
}

func (tp *tlsTap) read() []byte {
	tp.mu.Lock()
	defer tp.mu.Unlock()
	return bytes.Clone(tp.buf.Bytes())
}

// tlsClusterProxy starts a 3-master TLS cluster and a proxy in front of it
// with route, a TLS listener only (as Redis's port 0) and TLS to the
// engines with a client certificate; mod changes the Config last.
func tlsClusterProxy(t *testing.T, route string, mod func(*proxy.Config)) (*redistest.CA, *redistest.Cluster, *proxy.Proxy) {
	t.Helper()
	ca := redistest.NewCA(t)
	cl := redistest.StartTLSCluster(t, ca, 3)
	server, upstream := tlsClusterConfigs(t, ca)
	p, _ := proxytest.StartProxy(t, "", func(c *proxy.Config) {
		c.Route, c.Cluster = route, cl.Addrs()[1]
		c.Listen, c.TLSListen, c.TLS, c.UpstreamTLS = "", "127.0.0.1:0", server, upstream
		if mod != nil {
			mod(c)
		}
	})
	return ca, cl, p
}

// tlsClusterConfigs gives respmeter's TLS listener (its own certificate
// from ca, client certificates not asked for) and its TLS to the engines
// (a client certificate from ca, the engines verified against ca).
func tlsClusterConfigs(t *testing.T, ca *redistest.CA) (server *tls.Config, upstream *tlsconf.Dialer) {
	t.Helper()
	pc, uc := ca.IssueValid("respmeter"), ca.IssueValid("respmeter-upstream")
	server, err := tlsconf.Server(pc.CertFile, pc.KeyFile, ca.CertFile, tlsconf.AuthClientsNo, tlsconf.Suites{})
	if err != nil {
		t.Fatal(err)
	}
	up, err := tlsconf.Client(ca.CertFile, uc.CertFile, uc.KeyFile, "", false, tlsconf.Suites{})
	if err != nil {
		t.Fatal(err)
	}
	return server, tlsconf.NewDialer(up)
}

// tlsClusterWorkload sets and gets back keys of every master, with a hash
// tag per slot group and a pipeline over many slots, and returns each
// result as text.
func tlsClusterWorkload(t *testing.T, c redis.Cmdable) []string {
	t.Helper()
	ctx := context.Background()
	var out []string
	rec := func(cmd redis.Cmder) { out = append(out, fmt.Sprintf("%v => %s", cmd.Args(), cmdString(cmd))) }
	for i := range 60 {
		rec(c.Set(ctx, fmt.Sprintf("key:%d", i), fmt.Sprintf("v%d", i), 0))
	}
	for i := range 60 {
		rec(c.Get(ctx, fmt.Sprintf("key:%d", i)))
	}
	for i := range 10 {
		tag := fmt.Sprintf("{user%d}", i)
		rec(c.MSet(ctx, tag+"a", "1", tag+"b", "2"))
		rec(c.MGet(ctx, tag+"a", tag+"b", tag+"missing"))
	}
	cmds, _ := c.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i := range 100 {
			p.Incr(ctx, fmt.Sprintf("ctr:%d", i%37))
		}
		return nil
	})
	for _, cmd := range cmds {
		rec(cmd)
	}
	return out
}

// sameResults fails t at the first of got (the workload's results through
// respmeter, as what says) that differs from want (a ClusterClient's
// directly on the cluster), or when they differ in number.
func sameResults(t *testing.T, what string, got, want []string) {
	t.Helper()
	for i := range min(len(got), len(want)) {
		if got[i] != want[i] {
			t.Fatalf("result %d differs\n ClusterClient directly: %s\n %s: %s", i, want[i], what, got[i])
		}
	}
	if len(got) != len(want) {
		t.Fatalf("%d results %s, %d directly", len(got), what, len(want))
	}
}

// checkSpread fails t unless every master of cl holds some of the keys.
func checkSpread(t *testing.T, cl *redistest.Cluster) {
	t.Helper()
	for i, n := range cl.Nodes {
		if k, err := n.Client().DBSize(context.Background()).Result(); err != nil || k == 0 {
			t.Errorf("master %d holds %d keys (%v); want some of every run's", i, k, err)
		}
	}
}

// tlsCliRoundtrip sets and gets back keys of every master with
// redis-cli -c --tls at addr and fails t on a wrong reply.
func tlsCliRoundtrip(t *testing.T, ca *redistest.CA, addr string, cl *redistest.Cluster) []byte {
	t.Helper()
	var out bytes.Buffer
	base := []string{"-c", "--tls", "--cacert", ca.CertFile, "-h", "127.0.0.1", "-p", e2ePort(t, addr)}
	for _, k := range []string{"cli:a", "cli:b", "cli:c", "cli:d", "cli:e", "cli:f"} {
		if got := e2eRedisCli(t, "", append(base, "SET", k, "val-"+k)...); got != "OK\n" {
			t.Errorf("redis-cli -c --tls SET %s: %q", k, got)
		}
		got := e2eRedisCli(t, "", append(base, "GET", k)...)
		if got != "val-"+k+"\n" {
			t.Errorf("redis-cli -c --tls GET %s: %q", k, got)
		}
		out.WriteString(got)
	}
	return out.Bytes()
}

// TestTLSClusterSlots: --route slots --cluster in front of a TLS cluster,
// clients on the TLS listener: a go-redis client with a tls.Config gets
// what a ClusterClient gets directly from the cluster, keys land on every
// master, redis-cli -c --tls sets and gets keys of every master, and no
// engine port appears in what either client read.
func TestTLSClusterSlots(t *testing.T) {
	t.Parallel()
	ca, cl, p := tlsClusterProxy(t, proxy.RouteSlots, nil)

	direct := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), DisableIdentity: true,
		TLSConfig: ca.ClientConfig(ca.IssueValid("direct"))})
	defer direct.Close()
	want := tlsClusterWorkload(t, direct)
	for _, n := range cl.Nodes {
		n.Do("FLUSHALL")
	}
	tap := &tlsTap{cfg: ca.ClientConfig()}
	c := redis.NewClient(&redis.Options{Addr: p.TLSAddr(), Dialer: tap.dial, DisableIdentity: true, MaxRetries: -1,
		ReadTimeout: 10 * time.Second})
	defer c.Close()
	sameResults(t, "through respmeter", tlsClusterWorkload(t, c), want)
	checkSpread(t, cl)
	noEnginePort(t, "go-redis over TLS through --route slots", tap.read(), cl.Nodes...)
	noEnginePort(t, "redis-cli -c --tls through --route slots", tlsCliRoundtrip(t, ca, p.TLSAddr(), cl), cl.Nodes...)
}

// TestTLSClusterFacade: the facade with TLS virtual nodes (FacadeTLS) over
// a TLS cluster: a go-redis ClusterClient with a tls.Config, seeded with
// one virtual node, gets what it gets directly from the cluster, with keys
// on every master; CLUSTER SLOTS and SHARDS name the virtual nodes' TLS
// ports (SHARDS as "tls-port", as a node of a tls-cluster with port 0
// does); a node answers a key of another with MOVED to that node's TLS
// port; redis-cli -c --tls follows it; a plaintext client is refused on a
// virtual node; no engine port appears in what the clients read.
func TestTLSClusterFacade(t *testing.T) {
	t.Parallel()
	ca, cl, p := tlsClusterProxy(t, proxy.RouteFacade, func(c *proxy.Config) {
		c.Listen, c.FacadeTLS = "127.0.0.1:0", true
		c.FacadeListen = []string{"127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"}
	})
	nodes := p.FacadeAddrs()
	ctx := context.Background()

	direct := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), DisableIdentity: true,
		TLSConfig: ca.ClientConfig(ca.IssueValid("direct"))})
	defer direct.Close()
	want := tlsClusterWorkload(t, direct)
	for _, n := range cl.Nodes {
		n.Do("FLUSHALL")
	}
	tap := &tlsTap{cfg: ca.ClientConfig()}
	fc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{nodes[1]}, Dialer: tap.dial, Protocol: 3,
		DisableIdentity: true, MaxRetries: -1, MaxRedirects: 3, ReadTimeout: 10 * time.Second,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}})
	defer fc.Close()
	sameResults(t, "ClusterClient through the facade", tlsClusterWorkload(t, fc), want)
	checkSpread(t, cl)

	isNode := map[string]bool{}
	for _, a := range nodes {
		isNode[a] = true
	}
	//lint:ignore SA1019 CLUSTER SLOTS itself is under test: the facade answers it as a Redis 7 node does, and cluster clients still send it
	slots, err := fc.ClusterSlots(ctx).Result()
	if err != nil || len(slots) != 3 {
		t.Fatalf("CLUSTER SLOTS through the facade: %v %v", slots, err)
	}
	for _, s := range slots {
		if a := s.Nodes[0].Addr; !isNode[a] {
			t.Errorf("CLUSTER SLOTS names %s for %d-%d, not a virtual node %v", a, s.Start, s.End, nodes)
		}
	}
	shards, err := fc.ClusterShards(ctx).Result()
	if err != nil || len(shards) != 3 {
		t.Fatalf("CLUSTER SHARDS through the facade: %v %v", shards, err)
	}
	for _, s := range shards {
		n := s.Nodes[0]
		if a := net.JoinHostPort(n.IP, strconv.FormatInt(n.TLSPort, 10)); n.Port != 0 || !isNode[a] {
			t.Errorf("CLUSTER SHARDS node port %d tls-port %d; want only a virtual node's TLS port %v", n.Port, n.TLSPort, nodes)
		}
	}

	// MOVED, read on a raw TLS connection to node 0, names the owner's
	// virtual node.
	key := "moved:probe"
	owner := cl.Owner(int(routing.Slot([]byte(key))))
	if owner == 0 {
		key = "moved:probe2"
		owner = cl.Owner(int(routing.Slot([]byte(key))))
	}
	if owner != 0 {
		c, err := redistest.DialConnTLS(nodes[0], 2*time.Second, ca.ClientConfig())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.Send(t, redistest.Cmd("GET", key))
		f, err := c.ReadFrame(5 * time.Second)
		wantMoved := fmt.Sprintf("-MOVED %d %s\r\n", routing.Slot([]byte(key)), nodes[owner])
		if err != nil || string(f) != wantMoved {
			t.Errorf("GET %s on virtual node 0: %q %v, want %q", key, f, err, wantMoved)
		}
	} else {
		t.Errorf("both probe keys are on master 0")
	}

	// A plaintext client on a TLS virtual node gets no reply.
	pc := redistest.Dial(t, nodes[2])
	pc.Send(t, redistest.Cmd("PING"))
	if f, err := pc.ReadFrame(time.Second); err == nil {
		t.Errorf("plaintext PING on a TLS virtual node answered %q", f)
	}

	noEnginePort(t, "ClusterClient over TLS through the facade", tap.read(), cl.Nodes...)
	noEnginePort(t, "redis-cli -c --tls through the facade", tlsCliRoundtrip(t, ca, nodes[0], cl), cl.Nodes...)
}

// TestTLSClusterBothPorts: a TLS cluster whose nodes also serve plaintext
// (port beside tls-port, CLUSTER SHARDS naming both): --route slots
// --cluster with TLS to the engines dials each master's TLS port, not its
// plaintext one, and a go-redis client over TLS reaches every master.
func TestTLSClusterBothPorts(t *testing.T) {
	t.Parallel()
	ca := redistest.NewCA(t)
	cl := redistest.StartTLSCluster(t, ca, 3)
	ctx := context.Background()
	plain := map[int64]bool{}
	for i, n := range cl.Nodes {
		port, err := redistest.FreePort()
		if err != nil {
			t.Fatal(err)
		}
		// The port, and the ports the node announces: under tls-cluster
		// yes, cluster-announce-port alone would replace the TLS port
		// announced (Redis 7's deriveAnnouncedPorts); with
		// cluster-announce-tls-port beside it, it is the plaintext one.
		for _, kv := range [][2]string{{"port", strconv.Itoa(port)}, {"cluster-announce-tls-port", strconv.Itoa(n.Port())},
			{"cluster-announce-port", strconv.Itoa(port)}} {
			if err := n.Client().ConfigSet(ctx, kv[0], kv[1]).Err(); err != nil {
				t.Skipf("node %d: CONFIG SET %s: %v", i, kv[0], err)
			}
		}
		plain[int64(port)] = true
	}
	// Every node's plaintext port has reached the seed's CLUSTER SHARDS.
	redistest.Eventually(t, 10*time.Second, func() error {
		shards, err := cl.Nodes[1].Client().ClusterShards(ctx).Result()
		if err != nil {
			return err
		}
		for _, s := range shards {
			for _, n := range s.Nodes {
				if !plain[n.Port] || n.TLSPort == 0 || plain[n.TLSPort] {
					return fmt.Errorf("CLUSTER SHARDS node %s: port %d tls-port %d", n.ID, n.Port, n.TLSPort)
				}
			}
		}
		return nil
	})
	server, upstream := tlsClusterConfigs(t, ca)
	p, _ := proxytest.StartProxy(t, "", func(c *proxy.Config) {
		c.Route, c.Cluster = proxy.RouteSlots, cl.Addrs()[1]
		c.TLSListen, c.TLS, c.UpstreamTLS = "127.0.0.1:0", server, upstream
	})
	c := redis.NewClient(&redis.Options{Addr: p.TLSAddr(), TLSConfig: ca.ClientConfig(), DisableIdentity: true,
		MaxRetries: -1, ReadTimeout: 10 * time.Second})
	defer c.Close()
	for i := range 60 {
		k := fmt.Sprintf("both:%d", i)
		if err := c.Set(ctx, k, i, 0).Err(); err != nil {
			t.Fatalf("SET %s through respmeter: %v", k, err)
		}
		if v, err := c.Get(ctx, k).Int(); err != nil || v != i {
			t.Fatalf("GET %s through respmeter = %d %v, want %d", k, v, err, i)
		}
	}
	checkSpread(t, cl)
}
