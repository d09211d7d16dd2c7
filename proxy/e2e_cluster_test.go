package proxy_test

// --route slots against a real 3-master Redis Cluster (cases
// of docs/cases.md, in our own data), resharding under load,
// and effective pipeline depth per shard.

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/respmeter/respmeter/internal/redistest"
	"github.com/respmeter/respmeter/internal/resp"
	"github.com/respmeter/respmeter/metrics"
	"github.com/respmeter/respmeter/proxy"
	"github.com/respmeter/respmeter/proxy/proxytest"
	"github.com/respmeter/respmeter/routing"
)

func startClusterProxy(t *testing.T, cl *redistest.Cluster, mod func(*proxy.Config)) (*proxy.Proxy, *metrics.Set) {
	t.Helper()
	return proxytest.StartProxy(t, "", func(c *proxy.Config) {
		c.Route = proxy.RouteSlots
		c.Cluster = cl.Addrs()[1]
		if mod != nil {
			mod(c)
		}
	})
}

// roundtrips sends each request on one connection and checks the reply
// bytes.
func roundtrips(t *testing.T, addr string, rows [][2]string) {
	t.Helper()
	c := redistest.Dial(t, addr)
	defer c.Close()
	for _, r := range rows {
		c.Send(t, []byte(r[0]))
		got, err := c.ReadFrame(5 * time.Second)
		if err != nil || string(got) != r[1] {
			t.Errorf("%q: got %q (err %v), want %q", r[0], got, err, r[1])
		}
	}
}

func cmdStr(args ...string) string { return string(redistest.Cmd(args...)) }

// TestClusterPlainClientMatchesClusterClient: go-redis's plain client
// through --route slots gets what go-redis's ClusterClient gets directly.
func TestClusterPlainClientMatchesClusterClient(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	p, set := startClusterProxy(t, cl, nil)
	ctx := context.Background()

	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), DisableIdentity: true})
	defer cc.Close()
	run := func(c redis.Cmdable, scanAll func() []string) []string {
		var out []string
		rec := func(cmd redis.Cmder) { out = append(out, fmt.Sprintf("%v => %s", cmd.Args(), cmdString(cmd))) }
		for i := range 50 {
			rec(c.Set(ctx, fmt.Sprintf("user:%d", i), i, 0))
			rec(c.Incr(ctx, fmt.Sprintf("{u%d}visits", i%5)))
		}
		rec(c.MSet(ctx, "{t}a", "1", "{t}b", "2"))
		rec(c.MGet(ctx, "{t}a", "{t}b", "{t}zz"))
		rec(c.Del(ctx, "{t}a", "{t}b"))
		rec(c.Eval(ctx, "return redis.call('INCRBY', KEYS[1], ARGV[1])", []string{"{t}n"}, 5))
		rec(c.Eval(ctx, "return {KEYS[1],KEYS[2]}", []string{"{t}k1", "{t}k2"}))
		rec(c.Eval(ctx, "return 1", nil))
		rec(c.XAdd(ctx, &redis.XAddArgs{Stream: "stream:a", ID: "1-1", Values: []string{"f", "v"}}))
		rec(c.XRange(ctx, "stream:a", "-", "+"))
		rec(c.ZAdd(ctx, "{t}z1", redis.Z{Score: 1, Member: "a"}))
		rec(c.ZUnion(ctx, redis.ZStore{Keys: []string{"{t}z1", "{t}z2"}}))
		rec(c.ObjectEncoding(ctx, "user:1"))
		rec(c.Exists(ctx, "user:1"))
		rec(c.DBSize(ctx))
		keys := scanAll()
		sort.Strings(keys)
		out = append(out, fmt.Sprintf("SCAN => %v", keys))
		return out
	}
	want := run(cc, func() []string {
		var mu sync.Mutex
		var all []string
		_ = cc.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error {
			it := n.Scan(ctx, 0, "*", 10).Iterator()
			for it.Next(ctx) {
				mu.Lock()
				all = append(all, it.Val())
				mu.Unlock()
			}
			return it.Err()
		})
		return all
	})
	// Same commands, fresh data, through the proxy.
	for _, n := range cl.Nodes {
		n.Do("FLUSHALL")
	}
	pc := goRedis(t, p.Addr())
	got := run(pc, func() []string {
		var all []string
		it := pc.Scan(ctx, 0, "*", 10).Iterator()
		for it.Next(ctx) {
			all = append(all, it.Val())
		}
		if err := it.Err(); err != nil {
			t.Fatal(err)
		}
		return all
	})
	if len(got) != len(want) {
		t.Fatalf("%d results through the proxy, %d from ClusterClient", len(got), len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("result %d differs\n ClusterClient: %s\n routed:        %s", i, want[i], got[i])
		}
	}
	if r := set.Snapshot().Routing; r.RedirectsMoved+r.RedirectsAsk != 0 {
		t.Errorf("redirects on a stable cluster: %+v", r)
	}
}

// TestClusterR03WhereTheKeyIs: commands whose key is not the first
// argument reach the owner without a redirect.
func TestClusterR03WhereTheKeyIs(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	p, set := startClusterProxy(t, cl, nil)
	roundtrips(t, p.Addr(), [][2]string{
		{cmdStr("XGROUP", "CREATE", "stream:a", "g1", "0", "MKSTREAM"), "+OK\r\n"},
		{cmdStr("SET", "key:a", "1"), "+OK\r\n"},
		{cmdStr("RPUSH", "{t}k1", "a"), ":1\r\n"},
		{cmdStr("ZADD", "{t}z1", "1", "a"), ":1\r\n"},
		{cmdStr("SADD", "{t}s1", "a"), ":1\r\n"},
		{cmdStr("XREAD", "COUNT", "10", "BLOCK", "100", "STREAMS", "stream:a", "0"), "*-1\r\n"},
		{cmdStr("XREADGROUP", "GROUP", "g1", "c1", "COUNT", "1", "STREAMS", "stream:a", ">"), "*-1\r\n"},
		{cmdStr("OBJECT", "ENCODING", "key:a"), "$3\r\nint\r\n"},
		{cmdStr("LMPOP", "2", "{t}k1", "{t}k2", "LEFT"), "*2\r\n$5\r\n{t}k1\r\n*1\r\n$1\r\na\r\n"},
		{cmdStr("ZUNION", "2", "{t}z1", "{t}z2"), "*1\r\n$1\r\na\r\n"},
		{cmdStr("SINTERCARD", "2", "{t}s1", "{t}s2"), ":0\r\n"},
	})
	c := redistest.Dial(t, p.Addr())
	c.Send(t, redistest.Cmd("MEMORY", "USAGE", "key:a"))
	if got, err := c.ReadFrame(5 * time.Second); err != nil || got[0] != resp.TypeInteger {
		t.Errorf("MEMORY USAGE key:a: %q %v", got, err)
	}
	c.Close()
	if r := set.Snapshot().Routing; r.RedirectsMoved+r.RedirectsAsk != 0 {
		t.Errorf("redirects: %+v", r)
	}
	// Each command ran on the owner of its key.
	for _, k := range []struct {
		cmd, key string
	}{{"xreadgroup", "stream:a"}, {"lmpop", "{t}k1"}, {"sintercard", "{t}s1"}} {
		owner := cl.Nodes[cl.Owner(int(routing.Slot([]byte(k.key))))]
		info := owner.Do("INFO", "commandstats").(string)
		if !containsLine(info, "cmdstat_"+k.cmd+":calls=1,") {
			t.Errorf("%s did not run on the owner of %s", k.cmd, k.key)
		}
	}
}

func containsLine(text, prefix string) bool {
	for len(text) > 0 {
		i := 0
		for i < len(text) && text[i] != '\n' {
			i++
		}
		line := text[:i]
		if len(line) >= len(prefix) && line[:len(prefix)] == prefix {
			return true
		}
		if i == len(text) {
			break
		}
		text = text[i+1:]
	}
	return false
}

// TestClusterR04EvalNumkeys: scripts are routed by their keys only.
func TestClusterR04EvalNumkeys(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	p, _ := startClusterProxy(t, cl, nil)
	direct := redistest.Dial(t, cl.Addrs()[0])
	defer direct.Close()
	engineErr := func(args ...string) string {
		direct.Send(t, redistest.Cmd(args...))
		b, err := direct.ReadFrame(5 * time.Second)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	sha := "e0e1f9fabfc9d4800c877a703b823ac0578ff8db" // SHA1 of "return 1"
	// Loaded through the proxy: broadcast to every master (their tips say
	// all_nodes / all_shards), so EVALSHA and FCALL work wherever a key
	// sends them, and the direct oracle connection sees them too.
	roundtrips(t, p.Addr(), [][2]string{
		{cmdStr("SCRIPT", "LOAD", "return 1"), "$40\r\n" + sha + "\r\n"},
		{cmdStr("FUNCTION", "LOAD", "#!lua name=lib\nredis.register_function('f', function(keys, args) return keys[1] end)\nredis.register_function{function_name='g', callback=function(keys, args) return 1 end, flags={'no-writes'}}"), "$3\r\nlib\r\n"},
	})
	var rows [][2]string
	for _, v := range []struct{ cmd, script string }{{"EVAL", "return 1"}, {"EVALSHA", sha}, {"EVAL_RO", "return 1"}, {"EVALSHA_RO", sha}, {"FCALL", "g"}, {"FCALL_RO", "g"}} {
		rows = append(rows,
			[2]string{cmdStr(v.cmd, v.script, "0"), ":1\r\n"},
			[2]string{cmdStr(v.cmd, v.script, "2", "key:a", "key:b"), "-CROSSSLOT Keys in request don't hash to the same slot\r\n"},
			[2]string{cmdStr(v.cmd, v.script, "5", "key:a"), engineErr(v.cmd, v.script, "5", "key:a")},
			[2]string{cmdStr(v.cmd, v.script, "-1"), engineErr(v.cmd, v.script, "-1")},
			[2]string{cmdStr(v.cmd, v.script, "2", "{t}k1", "{t}k2"), ":1\r\n"},
		)
	}
	rows = append(rows,
		[2]string{cmdStr("EVAL", "return KEYS[1]", "1", "key:a", "arg-1"), "$5\r\nkey:a\r\n"},
		[2]string{cmdStr("EVAL", "return {KEYS[1],KEYS[2]}", "2", "{t}k1", "{t}k2"), "*2\r\n$5\r\n{t}k1\r\n$5\r\n{t}k2\r\n"},
		[2]string{cmdStr("FCALL", "f", "1", "key:b"), "$5\r\nkey:b\r\n"},
	)
	roundtrips(t, p.Addr(), rows)
}

// TestClusterR05FanOut: multi-key commands across masters, in request
// order, duplicates included; a dead master fails MSET with an error.
func TestClusterR05FanOut(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	p, _ := startClusterProxy(t, cl, nil)
	roundtrips(t, p.Addr(), [][2]string{
		{cmdStr("SET", "key:a", "1"), "+OK\r\n"},
		{cmdStr("SET", "key:b", "2"), "+OK\r\n"},
		{cmdStr("SET", "key:c", "3"), "+OK\r\n"},
		{cmdStr("MGET", "{a}1", "{b}1"), "*2\r\n$-1\r\n$-1\r\n"},
		{cmdStr("MGET", "key:c", "key:a", "key:c", "key:b", "missing:x"), "*5\r\n$1\r\n3\r\n$1\r\n1\r\n$1\r\n3\r\n$1\r\n2\r\n$-1\r\n"},
		{cmdStr("EXISTS", "key:a", "key:a", "key:b"), ":3\r\n"},
		{cmdStr("TOUCH", "key:a", "key:b", "key:c", "nope"), ":3\r\n"},
		{cmdStr("DEL", "key:a", "key:a"), ":1\r\n"},
		{cmdStr("MSET", "key:a", "1", "key:b", "2", "key:c", "3"), "+OK\r\n"},
		{cmdStr("UNLINK", "key:a", "key:b", "key:c", "key:c"), ":3\r\n"},
		{cmdStr("SUNIONSTORE", "key:a", "key:b"), "-CROSSSLOT Keys in request don't hash to the same slot\r\n"},
		// Odd arguments: what the engine says (a cluster node checks the
		// slots before MSET counts its arguments: CROSSSLOT).
		{cmdStr("MSET", "key:a", "1", "key:b"), "-CROSSSLOT Keys in request don't hash to the same slot\r\n"},
	})
	// Stop the owner of key:b (M3): MSET must fail, never +OK.
	cl.Nodes[cl.Owner(int(routing.Slot([]byte("key:b"))))].Kill()
	c := redistest.Dial(t, p.Addr())
	c.Send(t, redistest.Cmd("MSET", "key:a", "1", "key:b", "2", "key:c", "3"))
	got, err := c.ReadFrame(10 * time.Second)
	if err != nil || got[0] != resp.TypeError {
		t.Errorf("MSET with a master down: %q (err %v), want an error reply", got, err)
	}
	f := redistest.Dial(t, p.Addr())
	f.Roundtrip(t, redistest.Cmd("PING"), []byte("+PONG\r\n"))
	f.Close()
}

// TestClusterR02AskDuringMigration: ASK is followed with ASKING on the
// target, once, without touching the map; then MOVED switches it.
func TestClusterR02AskDuringMigration(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	p, set := startClusterProxy(t, cl, nil)
	const slot = 244 // key:a and {key:a}x
	from, to := cl.Owner(slot), (cl.Owner(slot)+1)%3
	roundtrips(t, p.Addr(), [][2]string{
		{cmdStr("SET", "key:a", "10"), "+OK\r\n"},
		{cmdStr("SET", "{key:a}x", "1"), "+OK\r\n"},
	})
	cl.BeginMove(slot, to)
	cl.Nodes[from].Do("MIGRATE", "127.0.0.1", strconv.Itoa(cl.Nodes[to].Port()), "", "0", "5000", "KEYS", "key:a")
	roundtrips(t, p.Addr(), [][2]string{
		{cmdStr("INCR", "key:a"), ":11\r\n"},
		{cmdStr("GET", "key:a"), "$2\r\n11\r\n"},
		{cmdStr("GET", "{key:a}x"), "$1\r\n1\r\n"},
		{cmdStr("ASKING") + cmdStr("GET", "{key:a}x"), "+OK\r\n"},
	})
	r := set.Snapshot().Routing
	if r.RedirectsAsk != 2 || r.RedirectsMoved != 0 {
		t.Errorf("redirects after two ASKs: %+v", r)
	}
	// The target executed INCR once: calls counted on it.
	if info := cl.Nodes[to].Do("INFO", "commandstats").(string); !containsLine(info, "cmdstat_incr:calls=1,") {
		t.Errorf("INCR did not run exactly once on the target:\n%s", info)
	}
	// Finish the migration: the proxy switches on the first MOVED.
	cl.Nodes[from].Do("MIGRATE", "127.0.0.1", strconv.Itoa(cl.Nodes[to].Port()), "", "0", "5000", "KEYS", "{key:a}x")
	cl.FinishMove(slot, to)
	roundtrips(t, p.Addr(), [][2]string{
		{cmdStr("GET", "{key:a}x"), "$1\r\n1\r\n"},
		{cmdStr("GET", "key:a"), "$2\r\n11\r\n"},
	})
	if r := set.Snapshot().Routing; r.RedirectsMoved != 1 {
		t.Errorf("want exactly one MOVED, got %+v", r)
	}
}

// TestClusterReshardUnderLoad: a slot moves (MIGRATING/IMPORTING, MIGRATE
// key by key, SETSLOT NODE) while clients write through the proxy: every
// write lands exactly once and no client sees a redirect.
func TestClusterReshardUnderLoad(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	p, set := startClusterProxy(t, cl, nil)
	ctx := context.Background()
	const slot = 15891 // {t}
	from, to := cl.Owner(slot), (cl.Owner(slot)+1)%3
	keys := make([]string, 20)
	for i := range keys {
		keys[i] = fmt.Sprintf("{t}c%d", i)
	}
	var sent [20]atomic.Int64
	var stop atomic.Bool
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := goRedis(t, p.Addr())
			for i := 0; !stop.Load(); i++ {
				k := (i*4 + w) % len(keys)
				if err := c.Incr(ctx, keys[k]).Err(); err != nil {
					errs <- fmt.Errorf("INCR %s: %w", keys[k], err)
					return
				}
				sent[k].Add(1)
				if err := c.Set(ctx, fmt.Sprintf("other:%d:%d", w, i%100), i, 0).Err(); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	time.Sleep(200 * time.Millisecond)
	cl.BeginMove(slot, to)
	for _, k := range keys {
		cl.Nodes[from].Do("MIGRATE", "127.0.0.1", strconv.Itoa(cl.Nodes[to].Port()), k, "0", "5000")
		time.Sleep(20 * time.Millisecond)
	}
	cl.FinishMove(slot, to)
	time.Sleep(300 * time.Millisecond)
	stop.Store(true)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	total := int64(0)
	for i, k := range keys {
		v, err := cl.Nodes[to].Client().Get(ctx, k).Int64()
		if err != nil && err != redis.Nil {
			t.Fatal(err)
		}
		if v != sent[i].Load() {
			t.Errorf("%s = %d on the new owner, %d INCRs acknowledged", k, v, sent[i].Load())
		}
		total += v
	}
	r := set.Snapshot().Routing
	t.Logf("%d INCRs across the move; redirects followed: %d ASK, %d MOVED", total, r.RedirectsAsk, r.RedirectsMoved)
	if r.RedirectsAsk == 0 || r.RedirectsMoved == 0 {
		t.Errorf("expected both ASK and MOVED to be followed during the move: %+v", r)
	}
}

// TestClusterR01RedirectEndpointForms: MOVED with an empty host (endpoint
// type unknown-endpoint), with a hostname and with an IPv6 address (which
// Redis writes bare: "MOVED 244 ::1:7001") are followed.
func TestClusterR01RedirectEndpointForms(t *testing.T) {
	for _, tc := range []struct {
		name  string
		extra []string
		host  string // the MOVED's host, as the engine writes it
	}{
		{"empty-host", []string{"--cluster-preferred-endpoint-type", "unknown-endpoint"}, ""},
		{"hostname", []string{"--cluster-announce-hostname", "localhost", "--cluster-preferred-endpoint-type", "hostname"}, "localhost"},
		{"ipv6", []string{"--bind", "127.0.0.1", "::1", "--cluster-announce-ip", "::1"}, "::1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cl := redistest.StartClusterWith(t, 3, tc.extra...)
			p, set := startClusterProxy(t, cl, nil)
			const slot = 244
			from := cl.Owner(slot)
			roundtrips(t, p.Addr(), [][2]string{{cmdStr("SET", "key:a", "val"), "+OK\r\n"}})
			if r := set.Snapshot().Routing; r.TopologySlotMoved+r.TopologyReassigned+r.TopologyMasters != 0 {
				t.Errorf("topology events before any change: %+v", r)
			}
			// Move the (one-key) slot behind the proxy's back.
			to := (from + 1) % 3
			cl.BeginMove(slot, to)
			cl.Nodes[from].Do("MIGRATE", "127.0.0.1", strconv.Itoa(cl.Nodes[to].Port()), "key:a", "0", "5000")
			cl.FinishMove(slot, to)
			moved := fmt.Sprintf("MOVED %d %s:%d", slot, tc.host, cl.Nodes[to].Port())
			if err := cl.Nodes[from].Client().Get(context.Background(), "key:a").Err(); err == nil || err.Error() != moved {
				t.Fatalf("the engine directly: %v, want %s", err, moved)
			}
			roundtrips(t, p.Addr(), [][2]string{{cmdStr("GET", "key:a"), "$3\r\nval\r\n"}})
			if r := set.Snapshot().Routing; r.RedirectsMoved != 1 || r.TopologySlotMoved != 1 {
				t.Errorf("want one MOVED followed, counted as one slot_moved topology event, got %+v", r)
			}
		})
	}
}

// TestRouteEffectiveDepth: a client pipelining 16 commands over 3 shards
// gives each shard batches of about 16/3 under --route slots, and 16 under
// --route pinned (read from respmeter_upstream_batch_commands).
func TestRouteEffectiveDepth(t *testing.T) {
	_, addrs := startShards(t, 3)
	for _, tc := range []struct {
		route    string
		lo, hi   float64
		keysFrom string
	}{
		{proxy.RouteSlots, 16.0 / 3 * 0.8, 16.0 / 3 * 1.2, "random"},
		{proxy.RoutePinned, 15.5, 16, "random"},
	} {
		t.Run(tc.route, func(t *testing.T) {
			p, set := startRouted(t, tc.route, addrs, nil)
			c := redistest.Dial(t, p.Addr())
			defer c.Close()
			var batch []byte
			n := 0
			for round := range 300 {
				batch = batch[:0]
				for i := range 16 {
					batch = append(batch, redistest.Cmd("GET", fmt.Sprintf("k:%d:%d", round, i))...)
				}
				c.Send(t, batch)
				for range 16 {
					if _, err := c.ReadFrame(5 * time.Second); err != nil {
						t.Fatal(err)
					}
					n++
				}
			}
			var cmds, batches int64
			for _, sh := range set.Snapshot().Shards {
				cmds += sh.Batch.Sum
				batches += sh.Batch.Count()
				if sh.Batch.Count() > 0 {
					t.Logf("%s %s: %d batches, mean depth %.2f", tc.route, sh.Name, sh.Batch.Count(), sh.Batch.Mean())
				}
			}
			mean := float64(cmds) / float64(batches)
			if mean < tc.lo || mean > tc.hi {
				t.Errorf("%s: mean effective depth %.2f, want %.2f..%.2f", tc.route, mean, tc.lo, tc.hi)
			}
		})
	}
}

// TestClusterTransactions: MULTI/EXEC and WATCH go to the shard of the
// transaction's first command (its key's owner; the home shard for a
// keyless one); a key of another slot inside the transaction gets
// CROSSSLOT and the EXEC fails with EXECABORT, as in Redis Cluster.
func TestClusterTransactions(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	p, _ := startClusterProxy(t, cl, nil)
	roundtrips(t, p.Addr(), [][2]string{
		{cmdStr("WATCH", "{t}w"), "+OK\r\n"},
		{cmdStr("MULTI"), "+OK\r\n"},
		{cmdStr("SET", "{t}a", "1"), "+QUEUED\r\n"},
		{cmdStr("INCR", "{t}n"), "+QUEUED\r\n"},
		{cmdStr("EXEC"), "*2\r\n+OK\r\n:1\r\n"},
		{cmdStr("MULTI"), "+OK\r\n"},
		{cmdStr("PING"), "+QUEUED\r\n"},
		{cmdStr("EXEC"), "*1\r\n+PONG\r\n"},
		{cmdStr("MULTI"), "+OK\r\n"},
		{cmdStr("SET", "{t}a", "2"), "+QUEUED\r\n"},
		{cmdStr("SET", "key:a", "2"), "-CROSSSLOT Keys in request don't hash to the same slot\r\n"},
		{cmdStr("EXEC"), "-EXECABORT Transaction discarded because of previous errors.\r\n"},
		{cmdStr("GET", "{t}a"), "$1\r\n1\r\n"},
		{cmdStr("MULTI"), "+OK\r\n"},
		{cmdStr("DISCARD"), "+OK\r\n"},
		// A nested MULTI gets Redis's error and does not pick the
		// transaction's shard: the keyed command after it still does.
		{cmdStr("MULTI"), "+OK\r\n"},
		{cmdStr("MULTI"), "-ERR MULTI calls can not be nested\r\n"},
		{cmdStr("SET", "key:a", "4"), "+QUEUED\r\n"},
		{cmdStr("EXEC"), "*1\r\n+OK\r\n"},
	})
	// The first transaction ran on the owner of {t}; the aborted one was
	// discarded there.
	owner := cl.Nodes[cl.Owner(int(routing.Slot([]byte("{t}"))))]
	info := owner.Do("INFO", "commandstats").(string)
	if !containsLine(info, "cmdstat_exec:calls=1,") || !containsLine(info, "cmdstat_watch:calls=1,") || !containsLine(info, "cmdstat_discard:calls=1,") {
		t.Errorf("WATCH/EXEC/DISCARD not on the owner of {t}:\n%s", info)
	}
}
