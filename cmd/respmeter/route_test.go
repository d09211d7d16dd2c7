package main

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/respmeter/respmeter/configs"
	"github.com/respmeter/respmeter/internal/redistest"
	"github.com/respmeter/respmeter/proxy"
	"github.com/respmeter/respmeter/routing"
)

// TestRouteConstants pins configs' spellings of the routing modes, pin
// policies and upstream modes to proxy's: stack.go passes them through
// unchanged.
func TestRouteConstants(t *testing.T) {
	for _, p := range [][2]string{
		{configs.RouteNone, proxy.RouteNone},
		{configs.RouteSlots, proxy.RouteSlots},
		{configs.RoutePinned, proxy.RoutePinned},
		{configs.RouteFacade, proxy.RouteFacade},
		{configs.PinConnection, proxy.PinConnection},
		{configs.PinFirstKey, proxy.PinFirstKey},
		{configs.UpstreamPrivate, proxy.UpstreamPrivate},
		{configs.UpstreamShared, proxy.UpstreamShared},
	} {
		if p[0] != p[1] {
			t.Errorf("configs says %q, proxy says %q", p[0], p[1])
		}
	}
}

// redisCLI runs /usr/bin/redis-cli (from PATH) against 127.0.0.1:port with
// args and returns its standard output; it skips t when redis-cli is
// missing and fails it when redis-cli fails.
func redisCLI(t *testing.T, port string, args ...string) string {
	t.Helper()
	bin := redistest.Tool(t, "redis-cli")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, append([]string{"-h", "127.0.0.1", "-p", port}, args...)...)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("redis-cli %q: %v\n%s", args, err, out)
	}
	return string(out)
}

// evenSlotRanges are the slot ranges "redis-cli --cluster create" gives 3
// masters: the oracle of --shards with 3 addresses.
var evenSlotRanges = [3][2]uint16{{0, 5460}, {5461, 10922}, {10923, 16383}}

// keyPerShard returns one key whose hash slot falls in each of
// evenSlotRanges, in shard order.
func keyPerShard(t testing.TB) [3]string {
	t.Helper()
	var keys [3]string
	found := 0
	for i := 0; found < 3 && i < 1000; i++ {
		k := "key:" + strconv.Itoa(i)
		slot := routing.Slot([]byte(k))
		for s, r := range evenSlotRanges {
			if keys[s] == "" && slot >= r[0] && slot <= r[1] {
				keys[s] = k
				found++
			}
		}
	}
	if found < 3 {
		t.Fatalf("no key for every shard: %q", keys)
	}
	return keys
}

// shardCommandsRE matches one respmeter_shard_commands_total series.
var shardCommandsRE = regexp.MustCompile(`(?m)^respmeter_shard_commands_total\{shard="([^"]+)"\} (\d+)$`)

// TestProxyRouteSlots runs "respmeter proxy --route slots --shards" over
// three real redis-server processes and drives it with redis-cli: each key
// lands on the shard that owns its slot, a cross-shard MGET and DEL are
// split and merged, DBSIZE is summed, a two-key command across slots gets
// CROSSSLOT, and /metrics, /stats and the SIGUSR1 table show the three
// shards, each with its own engine probe, poll and verdict.
func TestProxyRouteSlots(t *testing.T) {
	srvs := [3]*redistest.Server{redistest.Start(t), redistest.Start(t), redistest.Start(t)}
	shards := []string{srvs[0].Addr(), srvs[1].Addr(), srvs[2].Addr()}
	p := start(t, nil, "proxy",
		"--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0", "--loops", "2",
		"--route", "slots", "--shards", strings.Join(shards, ","),
		"--probe-interval", "20ms", "--engine-poll", "100ms", "--hdr-interval", "100ms", "--drain-timeout", "2s")
	m := p.waitFor(t, p.stderr, `msg="proxy listening" component=proxy addr=(\S+) route=slots shards=(\S+) upstream_mode=private loops=2 measure=true\n`)
	addr := m[1]
	if m[2] != strings.Join(shards, ",") {
		t.Errorf("proxy listening: shards=%s, want %s", m[2], strings.Join(shards, ","))
	}
	admin := "http://" + p.waitFor(t, p.stderr, logAddr("admin listening"))[1]
	if strings.Contains(p.stderr.String(), "upstream=127.0.0.1:6379") {
		t.Errorf("the default --upstream shows up in the log with --route slots:\n%s", p.stderr)
	}
	_, port, _ := strings.Cut(addr, ":")
	// Each shard's engine poll has its baseline before the first command,
	// so that every command is in its deltas.
	redistest.Eventually(t, 10*time.Second, func() error {
		var stats struct {
			ShardEngines []struct {
				Engine *struct{ Polls int64 }
			} `json:"shard_engines"`
		}
		getJSON(t, admin+"/stats", &stats)
		polled := 0
		for _, se := range stats.ShardEngines {
			if se.Engine != nil && se.Engine.Polls > 0 {
				polled++
			}
		}
		if polled < len(shards) {
			return fmt.Errorf("%d of %d shards polled", polled, len(shards))
		}
		return nil
	})

	keys := keyPerShard(t)
	for i, k := range keys {
		if got := redisCLI(t, port, "SET", k, "v"+strconv.Itoa(i)); got != "OK\n" {
			t.Fatalf("SET %s through the proxy: %q", k, got)
		}
	}
	// Each key is on the engine that owns its slot, and only there.
	for i, srv := range srvs {
		if got := srv.Do("GET", keys[i]); got != "v"+strconv.Itoa(i) {
			t.Errorf("shard %d (%s): GET %s = %v, want v%d", i, shards[i], keys[i], got, i)
		}
		if n := srv.Do("DBSIZE"); n != int64(1) {
			t.Errorf("shard %d (%s): DBSIZE %v, want 1", i, shards[i], n)
		}
	}

	// A cross-shard MGET: one sub-request per slot, replies back in request
	// order, a missing key as nil (an empty line from redis-cli).
	if got, want := redisCLI(t, port, "MGET", keys[2], "missing", keys[0], keys[1]), "v2\n\nv0\nv1\n"; got != want {
		t.Errorf("MGET across shards: %q, want %q", got, want)
	}
	if got := redisCLI(t, port, "DBSIZE"); got != "3\n" {
		t.Errorf("DBSIZE through the proxy: %q, want the sum 3", got)
	}
	if got := redisCLI(t, port, "RENAME", keys[0], keys[1]); !strings.Contains(got, "CROSSSLOT Keys in request don't hash to the same slot") {
		t.Errorf("RENAME across slots: %q, want CROSSSLOT", got)
	}
	if got := redisCLI(t, port, "DEL", keys[0], keys[1], keys[2], "missing"); got != "3\n" {
		t.Errorf("DEL across shards: %q, want 3", got)
	}
	for i, srv := range srvs {
		if n := srv.Do("DBSIZE"); n != int64(0) {
			t.Errorf("shard %d after DEL: DBSIZE %v, want 0", i, n)
		}
	}

	// /metrics: every shard counted under its address; the CROSSSLOT too;
	// each shard's probe and engine poll (the SET each engine ran).
	var body string
	counts := map[string]int{}
	var runIDs []string
	for _, a := range shards {
		runIDs = append(runIDs, engineRunID(t, a))
	}
	redistest.Eventually(t, 10*time.Second, func() error {
		body = httpGet(t, admin+"/metrics")
		clear(counts)
		for _, sm := range shardCommandsRE.FindAllStringSubmatch(body, -1) {
			counts[sm[1]], _ = strconv.Atoi(sm[2])
		}
		done := len(counts) == 3
		for _, a := range shards {
			// Per shard: SET, the MGET and DEL parts, DBSIZE.
			done = done && counts[a] >= 4
		}
		if !done {
			return fmt.Errorf("/metrics: respmeter_shard_commands_total %v, want >= 4 for each of %v:\n%s", counts, shards, body)
		}
		for i, a := range shards {
			for _, w := range []string{
				fmt.Sprintf("respmeter_upstream_probe_seconds_count{shard=%q}", a),
				fmt.Sprintf(`respmeter_engine_commands_total{command="set",engine=%q,shard=%q} 1`+"\n", runIDs[i], a),
			} {
				if !strings.Contains(body, w) {
					return fmt.Errorf("/metrics lacks %q:\n%s", w, body)
				}
			}
		}
		return nil
	})
	for _, want := range []string{
		"respmeter_crossslot_replies_total 1\n",
		`respmeter_commands_total{command="mget"} 1` + "\n",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q:\n%s", want, body)
		}
	}
	var stats struct {
		Shards []struct {
			Shard    string `json:"shard"`
			Commands int64  `json:"commands"`
		} `json:"shards"`
		Engine       json.RawMessage `json:"engine"`
		ShardEngines []struct {
			Shard   string `json:"shard"`
			Probe   *struct{ Count int64 }
			Engine  *struct{ Polls int64 }
			Verdict *struct{ Bound string }
		} `json:"shard_engines"`
	}
	getJSON(t, admin+"/stats", &stats)
	if len(stats.Shards) != 3 || string(stats.Engine) != "null" || len(stats.ShardEngines) != 3 {
		t.Errorf("/stats shards %+v (want 3), engine %s (want null: per shard), shard_engines %+v (want 3)",
			stats.Shards, stats.Engine, stats.ShardEngines)
	}
	for i, se := range stats.ShardEngines {
		if i < len(shards) && se.Shard != shards[i] || se.Probe == nil || se.Probe.Count == 0 || se.Engine == nil ||
			se.Engine.Polls == 0 || se.Verdict == nil {
			t.Errorf("/stats shard_engines[%d] = %+v, want shard %s with its probe, poll and verdict", i, se, shards[i])
		}
	}

	// The table printed on SIGUSR1 has one row per shard, and a verdict
	// and a row of where the time went per shard.
	p.signal(t, syscall.SIGUSR1)
	p.waitFor(t, p.stdout, `Per shard: `)
	p.waitFor(t, p.stdout, `(?m)^Shard +Requests +upstream \(ms\) +engine \(ms\) +wait \(ms\) +run queue \(ms\) +path \(ms\) +probe \(ms\)  bound$`)
	for _, a := range shards {
		p.waitFor(t, p.stdout, `(?m)^`+regexp.QuoteMeta(a)+` +[1-9]\d* \| `)
		p.waitFor(t, p.stdout, `(?m)^shard `+regexp.QuoteMeta(a)+`, latest interval with requests to it \(`)
		p.waitFor(t, p.stdout, `(?m)^`+regexp.QuoteMeta(a)+` +[1-9]\d*( +(\d+\.\d{4}|-)){6}  \S+$`)
	}
	p.signal(t, syscall.SIGTERM)
	if code := p.wait(t); code != exitOK {
		t.Fatalf("exit %d after SIGTERM\nstderr:\n%s", code, p.stderr)
	}
}

// TestProxyRoutePinned runs "respmeter proxy --route pinned --pin-by
// first-key" over two real redis-server processes: a connection is bound
// to the shard of its first key, and a later key of the other shard goes
// there too and is counted as a misroute.
func TestProxyRoutePinned(t *testing.T) {
	srvs := [2]*redistest.Server{redistest.Start(t), redistest.Start(t)}
	shards := []string{srvs[0].Addr(), srvs[1].Addr()}
	p := start(t, []string{"RESPMETER_SHARDS=" + strings.Join(shards, ",")}, "proxy",
		"--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0", "--loops", "1", "--route", "pinned", "--pin-by", "first-key")
	m := p.waitFor(t, p.stderr, `msg="proxy listening" component=proxy addr=(\S+) route=pinned shards=(\S+) pin_by=first-key upstream_mode=private `)
	if m[2] != strings.Join(shards, ",") {
		t.Errorf("proxy listening: shards=%s, want %s", m[2], strings.Join(shards, ","))
	}
	admin := "http://" + p.waitFor(t, p.stderr, logAddr("admin listening"))[1]

	// Two shards split the slots at 8191/8192 ("redis-cli --cluster create").
	var low, high string
	for i := 0; (low == "" || high == "") && i < 1000; i++ {
		k := "key:" + strconv.Itoa(i)
		if routing.Slot([]byte(k)) < 8192 {
			low = cmp.Or(low, k)
		} else {
			high = cmp.Or(high, k)
		}
	}
	// One connection: the first key pins it to shard 0; the second key,
	// of shard 1's range, is written to shard 0 all the same. (Not
	// redis-cli: it sends COMMAND DOCS first, a keyless command that pins
	// round-robin.)
	c, err := net.DialTimeout("tcp", m[1], 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Write([]byte("SET " + low + " a\r\nSET " + high + " b\r\n")); err != nil {
		t.Fatal(err)
	}
	if got, err := io.ReadAll(io.LimitReader(c, 10)); err != nil || string(got) != "+OK\r\n+OK\r\n" {
		t.Fatalf("two SETs on one connection: %q, %v", got, err)
	}
	if got := srvs[0].Do("MGET", low, high); fmt.Sprint(got) != "[a b]" {
		t.Errorf("shard 0 holds %v, want both keys [a b] (the connection is pinned there)", got)
	}
	if n := srvs[1].Do("DBSIZE"); n != int64(0) {
		t.Errorf("shard 1: DBSIZE %v, want 0", n)
	}
	// Each shard is probed and polled on its own connections: its probe
	// series and its engine poll's error counter carry its address.
	redistest.Eventually(t, 10*time.Second, func() error {
		body := httpGet(t, admin+"/metrics")
		want := []string{"respmeter_pinned_misroutes_total 1\n"}
		for _, a := range shards {
			want = append(want, fmt.Sprintf("respmeter_upstream_probe_seconds_count{shard=%q}", a),
				fmt.Sprintf("respmeter_engine_poll_errors_total{shard=%q} 0\n", a))
		}
		for _, w := range want {
			if !strings.Contains(body, w) {
				return fmt.Errorf("/metrics lacks %q:\n%s", w, body)
			}
		}
		return nil
	})
	p.signal(t, syscall.SIGTERM)
	if code := p.wait(t); code != exitOK {
		t.Fatalf("exit %d after SIGTERM\nstderr:\n%s", code, p.stderr)
	}
}

// TestProxyRouteCluster runs "respmeter proxy --route slots --cluster" in
// front of a real 3-master Redis Cluster, seeded with its second node: the
// shard map comes from the cluster, keys land on their owners, a
// cross-shard MGET works, a slot moved behind the proxy's back is followed
// through MOVED and counted, and the probe measures the seed node.
func TestProxyRouteCluster(t *testing.T) {
	cl := redistest.StartCluster(t, 3) // skips without redis-server or with -short
	seed := cl.Addrs()[1]
	p := start(t, nil, "proxy",
		"--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0", "--loops", "2",
		"--route", "slots", "--cluster", seed, "--topology-refresh", "1m", "--probe-interval", "20ms")
	m := p.waitFor(t, p.stderr, `msg="proxy listening" component=proxy addr=(\S+) route=slots cluster=(\S+) topology_refresh=1m0s upstream_mode=private loops=2 `)
	if m[2] != seed {
		t.Errorf("proxy listening: cluster=%s, want %s", m[2], seed)
	}
	admin := "http://" + p.waitFor(t, p.stderr, logAddr("admin listening"))[1]
	_, port, _ := strings.Cut(m[1], ":")

	keys := keyPerShard(t)
	for i, k := range keys {
		if got := redisCLI(t, port, "SET", k, "v"+strconv.Itoa(i)); got != "OK\n" {
			t.Fatalf("SET %s through the proxy: %q", k, got)
		}
		owner := cl.Nodes[cl.Owner(int(routing.Slot([]byte(k))))]
		if got := owner.Do("GET", k); got != "v"+strconv.Itoa(i) {
			t.Errorf("owner %s of %s: GET = %v, want v%d", owner.Addr(), k, got, i)
		}
	}
	if got, want := redisCLI(t, port, "MGET", keys[0], keys[1], keys[2]), "v0\nv1\nv2\n"; got != want {
		t.Errorf("MGET across shards: %q, want %q", got, want)
	}

	// Move an empty slot from its owner to another node: the proxy's map is
	// stale until the engine answers MOVED, which the proxy follows.
	moved := "moved:" + keys[0]
	slot := int(routing.Slot([]byte(moved)))
	from := cl.Owner(slot)
	to := (from + 1) % 3
	cl.MoveSlot(slot, to)
	if got := redisCLI(t, port, "SET", moved, "x"); got != "OK\n" {
		t.Fatalf("SET %s after its slot moved: %q", moved, got)
	}
	if got := cl.Nodes[to].Do("GET", moved); got != "x" {
		t.Errorf("new owner of slot %d: GET %s = %v, want x", slot, moved, got)
	}

	want := []string{
		`respmeter_redirects_total{kind="moved"} 1` + "\n",
	}
	// Every master: its commands, and its own probe and engine poll.
	for _, a := range cl.Addrs() {
		want = append(want, fmt.Sprintf("respmeter_shard_commands_total{shard=%q} ", a),
			fmt.Sprintf("respmeter_upstream_probe_seconds_count{shard=%q}", a),
			fmt.Sprintf("respmeter_engine_poll_errors_total{shard=%q} 0\n", a))
	}
	redistest.Eventually(t, 10*time.Second, func() error {
		body := httpGet(t, admin+"/metrics")
		for _, w := range want {
			if !strings.Contains(body, w) {
				return fmt.Errorf("/metrics lacks %q:\n%s", w, body)
			}
		}
		return nil
	})
	p.signal(t, syscall.SIGTERM)
	if code := p.wait(t); code != exitOK {
		t.Fatalf("exit %d after SIGTERM\nstderr:\n%s", code, p.stderr)
	}
}

// TestProxyRouteClusterPassword: a cluster whose nodes require a password
// is routed when respmeter's side connections are given it
// (RESPMETER_UPSTREAM_PASSWORD): the shard map and the command table are
// read with AUTH first, clients authenticate themselves, and the password
// appears nowhere in the proxy's output (debug level), /stats, /metrics or
// /slowlog (every command kept), nor in --check's; under --route slots
// (redis-cli with -a through --listen) and --route facade (a go-redis
// ClusterClient with the password through the virtual nodes, and
// redis-cli through the plain endpoint). A wrong password fails the start
// with the engine's WRONGPASS, without the password. Without one the proxy
// exited at start with "seed refused CLUSTER SHARDS and CLUSTER SLOTS:
// NOAUTH".
func TestProxyRouteClusterPassword(t *testing.T) {
	const pw = "s3cret-cluster-pw"
	cl := redistest.StartClusterWith(t, 3, "--requirepass", pw)
	seed := cl.Addrs()[0]
	env := []string{"RESPMETER_UPSTREAM_PASSWORD=" + pw}

	chk := start(t, env, "proxy", "--route", "slots", "--cluster", seed, "--check")
	chk.wait(t)
	if out := chk.stdout.String(); strings.Contains(out, pw) || !strings.Contains(out, "upstream_password: <redacted>") {
		t.Errorf("--check shows the password, or not its redaction:\n%s", out)
	}

	// A wrong password: the start fails, and says so without it.
	const wrong = "wr0ng-cluster-pw"
	bad := start(t, []string{"RESPMETER_UPSTREAM_PASSWORD=" + wrong}, "proxy",
		"--listen", "127.0.0.1:0", "--admin", "off", "--route", "facade", "--cluster", seed,
		"--facade-listen", "127.0.0.1:0,127.0.0.1:0,127.0.0.1:0", "--log-level", "debug")
	if code := bad.wait(t); code == exitOK || strings.Contains(bad.stderr.String(), wrong) || !strings.Contains(bad.stderr.String(), "WRONGPASS") {
		t.Errorf("a wrong password: exit %d, want a failed start naming WRONGPASS without the password:\n%s", code, bad.stderr)
	}

	for _, route := range []string{configs.RouteSlots, configs.RouteFacade} {
		t.Run(route, func(t *testing.T) {
			args := []string{"proxy",
				"--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0", "--loops", "1",
				"--route", route, "--cluster", seed, "--topology-refresh", "1m", "--log-level", "debug",
				"--slowlog-threshold", "0"}
			if route == configs.RouteFacade {
				args = append(args, "--facade-listen", "127.0.0.1:0,127.0.0.1:0,127.0.0.1:0")
			}
			p := start(t, env, args...)
			m := p.waitFor(t, p.stderr, `msg="proxy listening" component=proxy addr=(\S+) route=`+route+` cluster=\S+ topology_refresh=\S+ (?:facade=(\S+) )?`)
			admin := "http://" + p.waitFor(t, p.stderr, logAddr("admin listening"))[1]
			_, port, _ := strings.Cut(m[1], ":")
			keys := keyPerShard(t)
			for i, k := range keys {
				if got := redisCLI(t, port, "--no-auth-warning", "-a", pw, "SET", k, route); got != "OK\n" {
					t.Fatalf("SET %s through the proxy: %q", k, got)
				}
				owner := cl.Nodes[cl.Owner(int(routing.Slot([]byte(k))))]
				if got := owner.Do("GET", k); got != route {
					t.Errorf("key %d: owner %s has %v", i, owner.Addr(), got)
				}
			}
			if got := redisCLI(t, port, "GET", "k"); !strings.Contains(got, "NOAUTH") {
				t.Errorf("a client without AUTH got %q, want the engine's NOAUTH", got)
			}
			if route == configs.RouteFacade {
				nodes := strings.Split(m[2], ",")
				ctx := context.Background()
				c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{nodes[1]}, Password: pw, Protocol: 3,
					MaxRetries: -1, DisableIdentity: true})
				defer c.Close()
				for i, k := range keys {
					if v, err := c.Get(ctx, k).Result(); err != nil || v != route {
						t.Errorf("ClusterClient GET %s through the facade: %q %v", k, v, err)
					}
					if err := c.Set(ctx, k+":cc", i, 0).Err(); err != nil {
						t.Errorf("ClusterClient SET through the facade: %v", err)
					}
				}
				//lint:ignore SA1019 CLUSTER SLOTS itself is under test: the facade answers it as a Redis 7 node does, and cluster clients still send it
				slots, err := c.ClusterSlots(ctx).Result()
				if err != nil || len(slots) != 3 {
					t.Fatalf("CLUSTER SLOTS through the facade: %v %v", slots, err)
				}
				for _, sl := range slots {
					if !slices.Contains(nodes, sl.Nodes[0].Addr) {
						t.Errorf("CLUSTER SLOTS %d-%d names %s, not a virtual node %v", sl.Start, sl.End, sl.Nodes[0].Addr, nodes)
					}
				}
			}
			for _, path := range []string{"/stats", "/metrics", "/slowlog"} {
				if body := httpGet(t, admin+path); strings.Contains(body, pw) || len(body) < 10 {
					t.Errorf("%s shows the password or is empty:\n%s", path, body)
				}
			}
			if body := httpGet(t, admin+"/slowlog"); !strings.Contains(body, keys[0]) {
				t.Errorf("/slowlog (threshold 0) lacks the SET of %s:\n%s", keys[0], body)
			}
			p.signal(t, syscall.SIGTERM)
			p.wait(t)
			if log := p.stderr.String(); strings.Contains(log, pw) || strings.Contains(log, "command table not read") {
				t.Errorf("proxy output shows the password or did not read the command table:\n%s", log)
			}
		})
	}
}
