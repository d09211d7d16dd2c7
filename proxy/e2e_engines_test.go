package proxy_test

// Newer engines: what Redis 7.2+, Redis 8.0 and Valkey 8.1 say about their
// commands in COMMAND INFO decides how respmeter routes, moves and counts
// them (proxy.FetchCommands, routing.Resolver). These tests skip on an
// engine older than 7.2 (Debian's 7.0.15, the default); .ci/run runs them
// against Redis 8.0 and Valkey 8.1 by pointing RESPMETER_TEST_ENGINE at
// each (internal/redistest, .ci/build-engines.sh).

import (
	"bytes"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/respmeter/respmeter/internal/redistest"
	"github.com/respmeter/respmeter/metrics"
	"github.com/respmeter/respmeter/metrics/slowlog"
	"github.com/respmeter/respmeter/proxy"
	"github.com/respmeter/respmeter/proxy/proxytest"
	"github.com/respmeter/respmeter/routing"
)

// TestEngineZrankWithscoreShards: ZRANK and ZREVRANK with WITHSCORE (Redis
// 7.2 made their arity "at least 3") go to the shard that owns the key,
// as a single engine holding the same data answers them. Under the 7.0
// table they were keyless, sent to the home shard, and answered nil.
func TestEngineZrankWithscoreShards(t *testing.T) {
	srvs, addrs := startShards(t, 3)
	srvs[0].SkipBelow(t, "7.2")
	oracle := redistest.Start(t)
	p, _ := startRouted(t, proxy.RouteSlots, addrs, nil)
	via := redistest.Dial(t, p.Addr())
	defer via.Close()
	direct := redistest.Dial(t, oracle.Addr())
	defer direct.Close()
	for i := range 30 {
		key := fmt.Sprintf("z:%d", i)
		for _, c := range []*redistest.Conn{via, direct} {
			c.Roundtrip(t, respCmd("ZADD", key, "1.5", "a", "2.5", "b"), []byte(":2\r\n"))
		}
		for _, req := range [][]byte{
			respCmd("ZRANK", key, "b", "WITHSCORE"), respCmd("ZREVRANK", key, "b", "WITHSCORE"),
			respCmd("zrank", key, "nosuch", "withscore"),
		} {
			direct.Send(t, req)
			want, err := direct.ReadFrame(5 * time.Second)
			if err != nil {
				t.Fatal(err)
			}
			via.Send(t, req)
			got, err := via.ReadFrame(5 * time.Second)
			if err != nil || string(got) != string(want) {
				t.Fatalf("%q through the proxy: %q (err %v); one engine answers %q", redistest.Trunc(req), got, err, want)
			}
		}
	}
}

// TestEngineZrankWithscoreCluster: through a real cluster, ZRANK WITHSCORE
// goes straight to the key's node: no MOVED at all. Under the 7.0 table
// nearly every call cost a MOVED and a topology refresh.
func TestEngineZrankWithscoreCluster(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	cl.Nodes[0].SkipBelow(t, "7.2")
	p, set := startClusterProxy(t, cl, nil)
	c := redistest.Dial(t, p.Addr())
	defer c.Close()
	const n = 300
	for i := range n {
		c.Roundtrip(t, respCmd("ZADD", fmt.Sprintf("zc:%d", i), "1", "m"), []byte(":1\r\n"))
	}
	moved := set.Snapshot().Routing.RedirectsMoved
	for i := range n {
		key := fmt.Sprintf("zc:%d", i)
		c.Send(t, respCmd("ZRANK", key, "m", "WITHSCORE"))
		got, err := c.ReadFrame(5 * time.Second)
		if err != nil || len(got) < 4 || string(got[:4]) != "*2\r\n" {
			t.Fatalf("ZRANK %s m WITHSCORE: %q (err %v), want [0, 1]", key, got, err)
		}
	}
	if d := set.Snapshot().Routing.RedirectsMoved - moved; d != 0 {
		t.Errorf("%d MOVED redirects for %d ZRANK WITHSCORE calls, want 0", d, n)
	}
}

// sharedPair starts an engine compatible with Redis 7.2 or later (or skips
// t) behind a proxy with one loop on shared upstream connections, and
// returns two clients that have each had a PING answered on the loop's
// shared connection. A cleanup closes them.
func sharedPair(t *testing.T) (e *e2eEnv, a, b *redistest.Conn) {
	t.Helper()
	e = sharedSetup(t)
	e.srv.SkipBelow(t, "7.2")
	a, b = redistest.Dial(t, e.paddr), redistest.Dial(t, e.paddr)
	t.Cleanup(func() { a.Close(); b.Close() })
	for _, c := range []*redistest.Conn{a, b} {
		c.Roundtrip(t, respCmd("PING"), []byte("+PONG\r\n"))
	}
	return e, a, b
}

// pingLatencies sends n PINGs on c one after another and returns each
// round trip, sorted.
func pingLatencies(t *testing.T, c *redistest.Conn, n int) []time.Duration {
	t.Helper()
	out := make([]time.Duration, 0, n)
	for range n {
		start := time.Now()
		c.Roundtrip(t, respCmd("PING"), []byte("+PONG\r\n"))
		out = append(out, time.Since(start))
	}
	slices.Sort(out)
	return out
}

// TestEngineWaitaofSharedMoves: WAITAOF, which the engine flags blocking
// (Redis 7.2+), moves a shared-mode client to a private connection, so
// another client's PINGs on the shared connection do not wait behind it.
// The injected wait (1.5 s, WAITAOF's timeout with no replica to answer)
// is large against the PINGs' own time: behind it one PING would take
// about 1.5 s. The PINGs are measured before and while it waits, in the
// same run: the median while it waits stays within 2x of the median
// before (plus 1 ms, a scheduling quantum on a busy machine).
func TestEngineWaitaofSharedMoves(t *testing.T) {
	e, a, b := sharedPair(t)
	base := pingLatencies(t, b, 200)

	const hold = 1500 * time.Millisecond
	start := time.Now()
	a.Send(t, respCmd("WAITAOF", "0", "1", fmt.Sprint(hold.Milliseconds())))
	var during []time.Duration
	for time.Since(start) < hold/2 {
		during = append(during, pingLatencies(t, b, 20)...)
	}
	slices.Sort(during)
	got, err := a.ReadFrame(5 * time.Second)
	if err != nil || string(got) != "*2\r\n:0\r\n:0\r\n" {
		t.Fatalf("WAITAOF: %q (err %v), want [0, 0]", got, err)
	}
	if waited := time.Since(start); waited < hold {
		t.Fatalf("WAITAOF answered after %v, before its %v timeout: nothing was injected", waited, hold)
	}
	med := func(d []time.Duration) time.Duration { return d[len(d)/2] }
	t.Logf("PING median %v before, %v while WAITAOF waits (%d PINGs, max %v)", med(base), med(during), len(during), during[len(during)-1])
	if max := during[len(during)-1]; max > hold/3 {
		t.Errorf("a PING took %v while WAITAOF waited: it queued behind it", max)
	}
	if med(during) > 2*med(base)+time.Millisecond {
		t.Errorf("PING median %v while WAITAOF waits, %v before: more than 2x", med(during), med(base))
	}
	if r := e.set.Snapshot().Routing; r.HandoffsBlocking != 1 {
		t.Errorf("blocking handoffs = %d, want 1 (WAITAOF)", r.HandoffsBlocking)
	}
}

// TestEngineWaitaofOutOfTotals: WAITAOF is counted under its own label
// (an engine-only command, see routing.Resolver), so named in the slow
// log, and, being blocking, left out of the all-commands totals. Under the
// 7.0 table it was "other" and its wait landed in the totals' max.
func TestEngineWaitaofOutOfTotals(t *testing.T) {
	sl := slowlog.New(16, 100*time.Millisecond)
	e := e2eSetupWith(t, func(c *proxy.Config) { c.SlowLog = sl })
	e.srv.SkipBelow(t, "7.2")
	c := redistest.Dial(t, e.paddr)
	defer c.Close()
	const hold = 300 * time.Millisecond
	c.Roundtrip(t, respCmd("WAITAOF", "0", "1", fmt.Sprint(hold.Milliseconds())), []byte("*2\r\n:0\r\n:0\r\n"))
	for range 20 {
		c.Roundtrip(t, respCmd("GET", "k"), []byte("$-1\r\n"))
	}
	w := e2eWaitCount(t, e.set, "waitaof", 1)
	if w.Count != 1 || w.Phases[metrics.PhaseTotal].Max() < hold {
		t.Fatalf("waitaof: count %d, max %v; want 1, at least %v", w.Count, w.Phases[metrics.PhaseTotal].Max(), hold)
	}
	e2eWaitCount(t, e.set, "get", 20)
	tot := e.set.Snapshot().Totals()
	if m := tot.Phases[metrics.PhaseTotal].Max(); m >= hold {
		t.Errorf("totals max %v: WAITAOF's %v wait is in the all-commands totals", m, hold)
	}
	if es := sl.Entries(); len(es) != 1 || es[0].Command != "waitaof" {
		t.Errorf("slow log %+v, want one waitaof entry", es)
	}
}

// TestEngineLatencyResetSummed: LATENCY RESET, which the engine tips as
// all_nodes with agg_sum (Redis 7.2+), goes to every shard and answers the
// sum of the event types each reset. Under the 7.0 table (all_succeeded)
// the client got one shard's count. The oracle is each shard's own
// LATENCY LATEST read just before: an engine may hold more event types than
// the one DEBUG SLEEP makes (a busy host's fast-command or expire-cycle
// crossing the threshold), so the test sums what the shards hold.
func TestEngineLatencyResetSummed(t *testing.T) {
	var srvs []*redistest.Server
	var addrs []string
	for range 3 {
		s := redistest.Start(t, "--latency-monitor-threshold", "50", "--enable-debug-command", "yes")
		srvs, addrs = append(srvs, s), append(addrs, s.Addr())
	}
	srvs[0].SkipBelow(t, "7.2")
	p, _ := startRouted(t, proxy.RouteSlots, addrs, nil)
	want := 0
	for i, s := range srvs {
		s.DoT(t, "DEBUG", "SLEEP", "0.1") // one "command" latency event of 100 ms
		ev, _ := s.DoT(t, "LATENCY", "LATEST").([]any)
		if len(ev) < 1 {
			t.Fatalf("shard %d: LATENCY LATEST holds no event after a 100 ms DEBUG SLEEP", i)
		}
		want += len(ev)
	}
	c := redistest.Dial(t, p.Addr())
	defer c.Close()
	c.Roundtrip(t, respCmd("LATENCY", "RESET"), []byte(fmt.Sprintf(":%d\r\n", want)))
	for i, s := range srvs {
		if ev, _ := s.DoT(t, "LATENCY", "LATEST").([]any); len(ev) != 0 {
			t.Errorf("shard %d still holds %d latency event types after LATENCY RESET through the proxy", i, len(ev))
		}
	}
}

// TestEngineClientSetinfoSharedMoves: CLIENT SETINFO (Redis 7.2+, Valkey),
// a connection-state setter the 7.0 table does not know, is recognised by
// rule from the engine's entry (command.ConnState) and moves a shared-mode
// client to a private connection, so the library name it sets is its own,
// not the shared connection's: in CLIENT LIST run by another client on the
// shared connection (the line with cmd=client|list), that connection has
// no such name. Under the fixed list the name landed on the shared
// connection, for every client on it.
func TestEngineClientSetinfoSharedMoves(t *testing.T) {
	e, a, b := sharedPair(t)
	a.Roundtrip(t, respCmd("CLIENT", "SETINFO", "LIB-NAME", "respmeter-test-lib"), []byte("+OK\r\n"))
	if r := e.set.Snapshot().Routing; r.HandoffsState != 1 {
		t.Errorf("state handoffs = %d, want 1 (CLIENT SETINFO)", r.HandoffsState)
	}
	b.Send(t, respCmd("CLIENT", "LIST"))
	list, err := b.ReadFrame(5 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var shared []string
	for _, line := range strings.Split(string(list), "\n") {
		if strings.Contains(line, "cmd=client|list") {
			shared = append(shared, line)
		}
	}
	if len(shared) != 1 {
		t.Fatalf("%d connections ran CLIENT LIST, want 1:\n%s", len(shared), list)
	}
	if strings.Contains(shared[0], "lib-name=respmeter-test-lib") {
		t.Errorf("the shared connection carries the client's library name: %s", shared[0])
	}
	if n := strings.Count(string(list), "lib-name=respmeter-test-lib"); n != 1 {
		t.Errorf("%d engine connections carry the library name, want 1 (the client's own):\n%s", n, list)
	}
}

// TestSharedUnknownClientSubcommandMoves: with only the built-in table
// (the engine's COMMAND INFO not read: requirepass, say), a CLIENT
// subcommand the table does not know (NO-TOUCH is newer than 7.0) still
// moves a shared-mode client to a private connection: the engine may
// know it as connection state. Any engine: 7.0 answers an error, which
// the client gets as from the engine directly.
func TestSharedUnknownClientSubcommandMoves(t *testing.T) {
	e := e2eSetupWith(t, func(c *proxy.Config) {
		c.UpstreamMode = proxy.UpstreamShared
		c.Loops = 1
		c.Commands = routing.NewResolver(nil)
	})
	req := respCmd("CLIENT", "NO-TOUCH", "ON")
	direct := redistest.Dial(t, e.srv.Addr())
	defer direct.Close()
	direct.Send(t, req)
	want, err := direct.ReadFrame(5 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	c := redistest.Dial(t, e.paddr)
	defer c.Close()
	c.Roundtrip(t, respCmd("PING"), []byte("+PONG\r\n"))
	c.Roundtrip(t, req, want)
	if r := e.set.Snapshot().Routing; r.HandoffsState != 1 {
		t.Errorf("state handoffs = %d, want 1 (CLIENT NO-TOUCH, unknown to the table)", r.HandoffsState)
	}
}

// secondEngine skips t unless RESPMETER_TEST_ENGINE names an engine to run
// beside redis-server from PATH, and returns its path.
func secondEngine(t *testing.T) string {
	t.Helper()
	bin := os.Getenv(redistest.EngineEnv)
	if bin == "" {
		t.Skipf("needs a second engine: set %s", redistest.EngineEnv)
	}
	redistest.SkipIfUnavailable(t)
	return bin
}

// engineKnows reports whether s's COMMAND INFO has an entry for name
// ("hsetex", "client|capa").
func engineKnows(t *testing.T, s *redistest.Server, name string) bool {
	t.Helper()
	return fmt.Sprint(s.DoT(t, "COMMAND", "INFO", name)) != "[<nil>]"
}

// TestShardsWithAnotherTable: FetchCommands reads every --shards engine's
// table and names, in an info line, the shards whose table differs from the
// first shard's (TestMixedShardsOwnTables: what each table routes): here a
// shard running the engine RESPMETER_TEST_ENGINE names next to two
// redis-server 7.0.15 from PATH. Shards alike get no such line. Skipped
// without a second engine.
func TestShardsWithAnotherTable(t *testing.T) {
	bin := secondEngine(t)
	first := redistest.StartBinary(t, redistest.ServerBinary)
	same := redistest.StartBinary(t, redistest.ServerBinary)
	other := redistest.Start(t)
	_, a := first.Version()
	_, b := other.Version()
	if a == b {
		t.Skipf("%s is the engine in PATH too (%s)", bin, a)
	}
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	proxy.FetchCommands(proxy.Config{Route: proxy.RouteSlots, Shards: []string{first.Addr(), same.Addr()}}, log)
	if strings.Contains(buf.String(), "another command table") {
		t.Errorf("warning for shards alike:\n%s", buf.String())
	}
	buf.Reset()
	proxy.FetchCommands(proxy.Config{Route: proxy.RouteSlots, Shards: []string{first.Addr(), same.Addr(), other.Addr()}}, log)
	if out := buf.String(); !strings.Contains(out, "another command table") || !strings.Contains(out, "shards="+other.Addr()+"\n") {
		t.Errorf("want a warning naming %s only:\n%s", other.Addr(), out)
	}
}

// TestMixedShardsOwnTables: under --route slots over a redis-server 7.0.15
// shard (PATH) and a shard running RESPMETER_TEST_ENGINE, HSETEX, which
// only the newer engine knows (Redis 8.0, Valkey 9.0), and MSETEX where it
// has it (Valkey 9.1) find their keys by the newer engine's own table: each
// call goes to its keys' shard, so keys of the newer shard's slots are
// written there, and keys of the old shard's slots get that engine's own
// unknown-command error. With the first shard's table routing all, they had
// no keys and went to the home shard.
func TestMixedShardsOwnTables(t *testing.T) {
	bin := secondEngine(t)
	old := redistest.StartBinary(t, redistest.ServerBinary)
	newer := redistest.Start(t)
	if !engineKnows(t, newer, "hsetex") {
		t.Skipf("%s has no HSETEX", bin)
	}
	if engineKnows(t, old, "hsetex") {
		t.Skipf("%s knows HSETEX too", redistest.ServerBinary)
	}
	addrs := []string{old.Addr(), newer.Addr()}
	topo, err := routing.EvenSplit(addrs)
	if err != nil {
		t.Fatal(err)
	}
	msetex := engineKnows(t, newer, "msetex")
	p, _ := startRouted(t, proxy.RouteSlots, addrs, nil)
	c := redistest.Dial(t, p.Addr())
	defer c.Close()
	var onNewer int
	for i := range 40 {
		key := fmt.Sprintf("hx:%d", i)
		if writeOwnTable(t, c, newer, key, msetex, topo.Addr(routing.Slot([]byte(key))) != old.Addr()) {
			onNewer++
		}
	}
	if onNewer == 0 || onNewer == 40 {
		t.Fatalf("%d of 40 keys on the newer shard: the keys must cover both", onNewer)
	}
}

// TestMixedClusterOwnTables: TestMixedShardsOwnTables over a cluster of
// mixed engines, as during an upgrade: a redis-server 7.0.15 master (PATH)
// as --cluster's seed beside a master running RESPMETER_TEST_ENGINE, under
// --route slots. HSETEX, which only the newer engine knows, and MSETEX
// where it has it (Valkey 9.1: numkeys, then key value pairs) are routed
// by the newer master's own table: from two clients (homed on each master
// in turn) each call goes straight to its keys' master, no MOVED met, keys
// of the newer master's slots written there and keys of the seed's slots
// answered by the seed's unknown-command error. With the seed's table
// routing all, they had no keys and went to each client's home master.
func TestMixedClusterOwnTables(t *testing.T) {
	bin := secondEngine(t)
	probe := redistest.StartBinary(t, bin)
	if !engineKnows(t, probe, "hsetex") {
		t.Skipf("%s has no HSETEX", bin)
	}
	cl := redistest.StartClusterOf(t, []string{redistest.ServerBinary, bin})
	old, newer := cl.Nodes[0], cl.Nodes[1]
	if engineKnows(t, old, "hsetex") {
		t.Skipf("%s knows HSETEX too", redistest.ServerBinary)
	}
	msetex := engineKnows(t, newer, "msetex")
	p, set := proxytest.StartProxy(t, "", func(c *proxy.Config) {
		c.Route, c.Cluster = proxy.RouteSlots, old.Addr()
	})
	var onNewer int
	for n := range 2 {
		c := redistest.Dial(t, p.Addr())
		for i := range 40 {
			key := fmt.Sprintf("hx:%d:%d", n, i)
			if writeOwnTable(t, c, newer, key, msetex, cl.Owner(int(routing.Slot([]byte(key)))) == 1) {
				onNewer++
			}
		}
		c.Close()
	}
	if onNewer == 0 || onNewer == 80 {
		t.Fatalf("%d of 80 keys on the newer master: the keys must cover both", onNewer)
	}
	if m := set.Snapshot().Routing.RedirectsMoved; m != 0 {
		t.Errorf("%d MOVED redirects met: a command went to a master other than its keys'", m)
	}
}

// writeOwnTable sends HSETEX key FIELDS 1 f v<key> on c, a connection to
// respmeter over an older engine (no HSETEX) and a newer one, and, with
// msetex (the newer engine has it: Valkey 9.1), MSETEX 2 {key}a v {key}b v,
// whose keys sit at the key positions of a keynum spec; and checks the
// replies: where onNewer (key's slot is the newer engine's) :1 each and the
// values on newer, read directly; else the older engine's own
// unknown-command error. It returns onNewer.
func writeOwnTable(t *testing.T, c *redistest.Conn, newer *redistest.Server, key string, msetex, onNewer bool) bool {
	t.Helper()
	reqs := [][]string{{"HSETEX", key, "FIELDS", "1", "f", "v" + key}}
	if msetex {
		reqs = append(reqs, []string{"MSETEX", "2", "{" + key + "}a", "v" + key, "{" + key + "}b", "v" + key})
	}
	for _, args := range reqs {
		c.Send(t, respCmd(args...))
		got, err := c.ReadFrame(5 * time.Second)
		switch {
		case err != nil:
			t.Fatal(err)
		case !onNewer && !bytes.HasPrefix(got, []byte("-ERR unknown command")):
			t.Errorf("%s (the older engine's slot): %q, want its unknown command error", args, got)
		case onNewer && string(got) != ":1\r\n":
			t.Errorf("%s (the newer engine's slot): %q, want :1", args, got)
		}
	}
	if !onNewer {
		return false
	}
	nc := newer.Client()
	if v, err := nc.HGet(t.Context(), key, "f").Result(); err != nil || v != "v"+key {
		t.Errorf("HGET %s on the newer engine: %q, %v", key, v, err)
	}
	if msetex {
		if v, err := nc.MGet(t.Context(), "{"+key+"}a", "{"+key+"}b").Result(); err != nil || fmt.Sprint(v) != fmt.Sprintf("[v%s v%s]", key, key) {
			t.Errorf("MGET {%s}a {%s}b on the newer engine: %v, %v", key, key, v, err)
		}
	}
	return true
}

// TestEngineClientNoTouchReplayed: CLIENT NO-TOUCH (Redis 7.2+, Valkey), a
// connection-state setter the 7.0 table does not know, reaches every shard
// connection of a routed client, those open when it is sent and those
// opened later (replayed), so reads on every shard leave LRU/LFU alone, as
// they would on one engine connection: each shard lists one connection with
// the no-touch flag (T). It reached the home shard only.
func TestEngineClientNoTouchReplayed(t *testing.T) {
	srvs, addrs := startShards(t, 3)
	srvs[0].SkipBelow(t, "7.2")
	p, _ := startRouted(t, proxy.RouteSlots, addrs, func(c *proxy.Config) { c.UpstreamMode = proxy.UpstreamPrivate })
	topo, _ := routing.EvenSplit(addrs)
	c := redistest.Dial(t, p.Addr())
	defer c.Close()
	c.Roundtrip(t, respCmd("GET", "nt:0"), []byte("$-1\r\n")) // one shard connection open before
	c.Roundtrip(t, respCmd("CLIENT", "NO-TOUCH", "on"), []byte("+OK\r\n"))
	for i, found := 0, 0; found < 3; i++ { // then one key per shard: the others open now
		k := fmt.Sprintf("nt:%d", i)
		if topo.Shard(routing.Slot([]byte(k))) == found {
			c.Roundtrip(t, respCmd("GET", k), []byte("$-1\r\n"))
			found++
		}
	}
	for i, s := range srvs {
		n := 0
		for _, line := range strings.Split(s.Do("CLIENT", "LIST").(string), "\n") {
			if f := strings.Fields(line); len(f) > 0 && strings.Contains(line, " flags=") {
				for _, kv := range f {
					if strings.HasPrefix(kv, "flags=") && strings.Contains(kv, "T") {
						n++
					}
				}
			}
		}
		if n != 1 {
			t.Errorf("shard %d (%s): %d connections with the no-touch flag, want 1 (the client's)", i, addrs[i], n)
		}
	}
}

// TestRouteConfigResetstatAllShards: CONFIG RESETSTAT (command tips
// request_policy:all_nodes, response_policy:all_succeeded) resets every
// shard's statistics, not the home shard's only.
func TestRouteConfigResetstatAllShards(t *testing.T) {
	srvs, addrs := startShards(t, 3)
	p, _ := startRouted(t, proxy.RouteSlots, addrs, nil)
	for _, s := range srvs {
		s.Do("GET", "rs:k")
	}
	c := redistest.Dial(t, p.Addr())
	defer c.Close()
	c.Roundtrip(t, respCmd("CONFIG", "RESETSTAT"), []byte("+OK\r\n"))
	for i, s := range srvs {
		if st := s.Do("INFO", "commandstats").(string); strings.Contains(st, "cmdstat_get:") {
			t.Errorf("shard %d still counts GET after CONFIG RESETSTAT through the proxy", i)
		}
	}
}

// TestEngineRedirectRelayed: a client that sent CLIENT CAPA redirect (Valkey
// 8.0 on) to a standalone replica through respmeter gets the replica's
// "-REDIRECT host:port" for a write, unchanged, in private and in shared
// upstream mode (CLIENT CAPA moves the client to private connections
// there) and in the test's shape (slots or pinned over the replica as one
// shard), as it would on a direct connection, and the write reaches no
// engine; a client that did not ask gets the replica's READONLY error.
// Twice: with the primary given to the replica as 127.0.0.1, and as ::1,
// which the replica names bare ("-REDIRECT ::1:7001", checked on the
// replica directly).
func TestEngineRedirectRelayed(t *testing.T) {
	for _, host := range []string{"127.0.0.1", "::1"} {
		primary := redistest.Start(t, "--bind", "127.0.0.1", "::1")
		if !engineKnows(t, primary, "client|capa") {
			_, engine := primary.Version()
			t.Skipf("%s has no CLIENT CAPA", engine)
		}
		replica := redistest.Start(t, "--replicaof", host, fmt.Sprint(primary.Port()))
		direct := redistest.Dial(t, replica.Addr())
		direct.Roundtrip(t, respCmd("CLIENT", "CAPA", "redirect"), []byte("+OK\r\n"))
		direct.Send(t, respCmd("SET", "k", "v"))
		want, err := direct.ReadFrame(5 * time.Second)
		direct.Close()
		if err != nil || string(want) != fmt.Sprintf("-REDIRECT %s:%d\r\n", host, primary.Port()) {
			t.Fatalf("the replica of %s itself answers %q, %v; want -REDIRECT %s:%d", host, want, err, host, primary.Port())
		}
		for _, mode := range []string{proxy.UpstreamPrivate, proxy.UpstreamShared} {
			p, _ := proxytest.StartProxy(t, replica.Addr(), func(c *proxy.Config) { c.UpstreamMode = mode })
			plain := redistest.Dial(t, p.Addr())
			plain.Send(t, respCmd("SET", "k", "v"))
			if got, err := plain.ReadFrame(5 * time.Second); err != nil || !bytes.HasPrefix(got, []byte("-READONLY")) {
				t.Errorf("%s, %s: SET without CLIENT CAPA redirect: %q, %v; want -READONLY", host, mode, got, err)
			}
			plain.Close()
			c := redistest.Dial(t, p.Addr())
			c.Roundtrip(t, respCmd("CLIENT", "CAPA", "redirect"), []byte("+OK\r\n"))
			for range 3 {
				c.Send(t, respCmd("SET", "k", "v"))
				if got, err := c.ReadFrame(5 * time.Second); err != nil || string(got) != string(want) {
					t.Errorf("%s, %s: SET after CLIENT CAPA redirect through respmeter: %q, %v; the replica answers %q", host, mode, got, err, want)
				}
			}
			c.Close()
		}
		if n := primary.Do("EXISTS", "k"); fmt.Sprint(n) != "0" {
			t.Errorf("%s: the primary holds k (%v): a redirected write was sent on", host, n)
		}
	}
}
