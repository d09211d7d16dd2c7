package main

import (
	"fmt"
	"net"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/respmeter/respmeter/internal/redistest"
)

// TestProxyRouteFacade runs "respmeter proxy --route facade" over three
// real redis-server processes, the virtual nodes' addresses from
// RESPMETER_FACADE_LISTEN: the log names them, redis-cli -c entering at
// node 0 follows MOVED to the node of each key's shard and the key lands
// on that shard, CLUSTER SLOTS names the virtual nodes only, and /metrics
// counts each shard's commands.
func TestProxyRouteFacade(t *testing.T) {
	srvs := [3]*redistest.Server{redistest.Start(t), redistest.Start(t), redistest.Start(t)}
	shards := []string{srvs[0].Addr(), srvs[1].Addr(), srvs[2].Addr()}
	p := start(t, []string{"RESPMETER_FACADE_LISTEN=127.0.0.1:0,127.0.0.1:0,127.0.0.1:0"}, "proxy",
		"--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0", "--loops", "2",
		"--route", "facade", "--shards", strings.Join(shards, ","), "--drain-timeout", "2s")
	m := p.waitFor(t, p.stderr, `msg="proxy listening" component=proxy addr=\S+ route=facade shards=\S+ facade=(\S+) `)
	nodes := strings.Split(m[1], ",")
	if len(nodes) != 3 {
		t.Fatalf("facade=%s: want 3 virtual nodes", m[1])
	}
	admin := "http://" + p.waitFor(t, p.stderr, logAddr("admin listening"))[1]
	_, port0, _ := net.SplitHostPort(nodes[0])

	keys := keyPerShard(t)
	for i, k := range keys {
		if got := redisCLI(t, port0, "-c", "SET", k, "v"+strconv.Itoa(i)); got != "OK\n" {
			t.Fatalf("redis-cli -c SET %s through node 0: %q", k, got)
		}
	}
	for i, srv := range srvs {
		if got := srv.Do("GET", keys[i]); got != "v"+strconv.Itoa(i) {
			t.Errorf("shard %d (%s): GET %s = %v, want v%d", i, shards[i], keys[i], got, i)
		}
	}
	slots := redisCLI(t, port0, "CLUSTER", "SLOTS")
	for i, n := range nodes {
		_, port, _ := net.SplitHostPort(n)
		_, enginePort, _ := net.SplitHostPort(shards[i])
		if !strings.Contains(slots, "\n"+port+"\n") || strings.Contains(slots, enginePort) {
			t.Errorf("CLUSTER SLOTS does not name node %s (or names engine %s):\n%s", n, shards[i], slots)
		}
	}

	redistest.Eventually(t, 10*time.Second, func() error {
		body := httpGet(t, admin+"/metrics")
		counts := map[string]int{}
		for _, sm := range shardCommandsRE.FindAllStringSubmatch(body, -1) {
			counts[sm[1]], _ = strconv.Atoi(sm[2])
		}
		for _, a := range shards {
			if counts[a] < 1 {
				return fmt.Errorf("respmeter_shard_commands_total %v: want the SET of each of %v", counts, shards)
			}
		}
		return nil
	})
	p.signal(t, syscall.SIGTERM)
	if code := p.wait(t); code != exitOK {
		t.Fatalf("exit %d after SIGTERM\nstderr:\n%s", code, p.stderr)
	}
}

// TestProxyFacadeListenBusy: with one of the proxy's addresses taken by
// another listener (a virtual node's, then --listen's), the proxy exits 1
// naming that address, not the free one.
func TestProxyFacadeListenBusy(t *testing.T) {
	srv := redistest.Start(t)
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	port, err := redistest.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	free := fmt.Sprintf("127.0.0.1:%d", port)
	for _, tc := range []struct{ listen, node, taken string }{
		{free, busy.Addr().String(), busy.Addr().String()},
		{busy.Addr().String(), free, busy.Addr().String()},
	} {
		p := start(t, nil, "proxy", "--listen", tc.listen, "--route", "facade", "--shards", srv.Addr(),
			"--facade-listen", tc.node)
		if code := p.wait(t); code != exitFailure {
			t.Fatalf("--listen %s --facade-listen %s: exit %d, want %d\nstderr:\n%s", tc.listen, tc.node, code, exitFailure, p.stderr)
		}
		if msg := p.stderr.String(); !strings.Contains(msg, "listen "+tc.taken+": ") || strings.Contains(msg, "listen "+free) {
			t.Errorf("--listen %s --facade-listen %s: the error does not name the busy address %s:\n%s", tc.listen, tc.node, tc.taken, msg)
		}
	}
}

// TestProxyFacadeTLS runs "respmeter proxy --route facade --facade-tls"
// with no --tls-listen: the virtual nodes serve TLS with --tls-cert-file,
// redis-cli -c --tls entering at node 0 follows MOVED to the node of each
// key's shard over TLS, and the key lands on that shard.
func TestProxyFacadeTLS(t *testing.T) {
	srvs := [3]*redistest.Server{redistest.Start(t), redistest.Start(t), redistest.Start(t)}
	shards := []string{srvs[0].Addr(), srvs[1].Addr(), srvs[2].Addr()}
	ca := redistest.NewCA(t)
	cert := ca.IssueValid("respmeter")
	p := start(t, []string{"RESPMETER_FACADE_LISTEN=127.0.0.1:0,127.0.0.1:0,127.0.0.1:0"}, "proxy",
		"--listen", "127.0.0.1:0", "--admin", "off", "--loops", "2",
		"--route", "facade", "--shards", strings.Join(shards, ","), "--drain-timeout", "2s",
		"--facade-tls", "--tls-cert-file", cert.CertFile, "--tls-key-file", cert.KeyFile, "--tls-auth-clients", "no")
	m := p.waitFor(t, p.stderr, `msg="proxy listening" component=proxy addr=\S+ route=facade shards=\S+ facade=(\S+) `)
	nodes := strings.Split(m[1], ",")
	if len(nodes) != 3 {
		t.Fatalf("facade=%s: want 3 virtual nodes", m[1])
	}
	_, port0, _ := net.SplitHostPort(nodes[0])
	keys := keyPerShard(t)
	for i, k := range keys {
		if got := redisCLI(t, port0, "--tls", "--cacert", ca.CertFile, "-c", "SET", k, "v"+strconv.Itoa(i)); got != "OK\n" {
			t.Fatalf("redis-cli -c --tls SET %s through node 0: %q", k, got)
		}
	}
	for i, srv := range srvs {
		if got := srv.Do("GET", keys[i]); got != "v"+strconv.Itoa(i) {
			t.Errorf("shard %d (%s): GET %s = %v, want v%d", i, shards[i], keys[i], got, i)
		}
	}
	p.signal(t, syscall.SIGTERM)
	if code := p.wait(t); code != exitOK {
		t.Fatalf("exit %d after SIGTERM\nstderr:\n%s", code, p.stderr)
	}
}
