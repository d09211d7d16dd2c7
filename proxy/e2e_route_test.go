package proxy_test

// Hash-slot routing (--route slots, --route pinned) over three standalone
// shards. The oracle is one standalone engine holding the same data: a
// routed client must see what a single engine would answer.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/respmeter/respmeter/internal/redistest"
	"github.com/respmeter/respmeter/metrics"
	"github.com/respmeter/respmeter/proxy"
	"github.com/respmeter/respmeter/proxy/proxytest"
	"github.com/respmeter/respmeter/routing"
)

// startShards starts n standalone engines.
func startShards(t *testing.T, n int) ([]*redistest.Server, []string) {
	t.Helper()
	var srvs []*redistest.Server
	var addrs []string
	for range n {
		s := redistest.Start(t)
		srvs = append(srvs, s)
		addrs = append(addrs, s.Addr())
	}
	return srvs, addrs
}

func startRouted(t *testing.T, route string, shards []string, mod func(*proxy.Config)) (*proxy.Proxy, *metrics.Set) {
	t.Helper()
	return proxytest.StartProxy(t, "", func(c *proxy.Config) {
		c.Route = route
		c.Shards = shards
		if mod != nil {
			mod(c)
		}
	})
}

func goRedis(t *testing.T, addr string) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DisableIdentity: true,
		ReadTimeout: 10 * time.Second, WriteTimeout: 10 * time.Second})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// routedWorkload runs the same commands on c and returns what each gave,
// as printable strings. keys spread over all three shards.
func routedWorkload(t *testing.T, c *redis.Client) []string {
	t.Helper()
	ctx := context.Background()
	var out []string
	rec := func(cmd redis.Cmder) {
		out = append(out, fmt.Sprintf("%v", cmd.Args())+" => "+cmdString(cmd))
	}
	for i := range 60 {
		rec(c.Set(ctx, fmt.Sprintf("key:%d", i), fmt.Sprintf("v%d", i), 0))
	}
	rec(c.Set(ctx, "key:a", "1", 0))
	rec(c.Set(ctx, "key:b", "2", 0))
	rec(c.Set(ctx, "key:c", "3", 0))
	rec(c.MGet(ctx, "{a}1", "{b}1"))
	rec(c.MGet(ctx, "key:c", "key:a", "key:c", "key:b", "missing:x"))
	rec(c.Exists(ctx, "key:a", "key:a", "key:b"))
	rec(c.Touch(ctx, "key:a", "key:b", "key:c", "nope"))
	rec(c.MSet(ctx, "m:1", "a", "m:2", "b", "m:3", "c", "{t}m4", "d"))
	rec(c.MGet(ctx, "m:1", "m:2", "m:3", "{t}m4"))
	rec(c.Del(ctx, "key:a", "key:a"))
	rec(c.Unlink(ctx, "m:1", "m:2", "zz"))
	rec(c.RPush(ctx, "{t}k1", "a", "b"))
	rec(c.LRange(ctx, "{t}k1", 0, -1))
	rec(c.LMPop(ctx, "left", 1, "{t}k1", "{t}k2"))
	rec(c.Eval(ctx, "return KEYS[1]", []string{"key:b"}, "arg-1"))
	rec(c.Eval(ctx, "return {KEYS[1],KEYS[2]}", []string{"{t}k1", "{t}k2"}))
	rec(c.Eval(ctx, "return 1", nil))
	rec(c.Eval(ctx, "return 1", []string{"key:b"}, "x", "y"))
	rec(c.Do(ctx, "EVAL", "return 1", "5", "key:a"))
	rec(c.Do(ctx, "EVAL", "return 1", "-1"))
	rec(c.Incr(ctx, "counter"))
	rec(c.IncrBy(ctx, "counter", 41))
	rec(c.HSet(ctx, "h:1", "f", "v", "g", "w"))
	rec(c.HGetAll(ctx, "h:1"))
	rec(c.Ping(ctx))
	rec(c.Echo(ctx, "hello"))
	rec(c.DBSize(ctx))
	// A pipeline spanning all shards, answered in order.
	cmds, _ := c.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i := range 40 {
			p.Get(ctx, fmt.Sprintf("key:%d", i))
			p.Incr(ctx, fmt.Sprintf("cnt:%d", i%7))
			if i%10 == 0 {
				p.MGet(ctx, fmt.Sprintf("key:%d", i), fmt.Sprintf("key:%d", i+1), "missing")
			}
		}
		return nil
	})
	for _, cmd := range cmds {
		rec(cmd)
	}
	// A transaction on one hash tag.
	tx, _ := c.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Set(ctx, "{user1}name", "ann", 0)
		p.Incr(ctx, "{user1}visits")
		p.Get(ctx, "{user1}name")
		return nil
	})
	for _, cmd := range tx {
		rec(cmd)
	}
	// KEYS and a full SCAN, sorted (order differs between engines).
	ks, err := c.Keys(ctx, "*").Result()
	sort.Strings(ks)
	out = append(out, fmt.Sprintf("KEYS * => %v %v", ks, err))
	var scanned []string
	var cur uint64
	for {
		page, next, err := c.Scan(ctx, cur, "*", 7).Result()
		if err != nil {
			t.Fatalf("SCAN %d: %v", cur, err)
		}
		scanned = append(scanned, page...)
		if cur = next; cur == 0 {
			break
		}
	}
	sort.Strings(scanned)
	out = append(out, fmt.Sprintf("SCAN => %v", scanned))
	rec(c.FlushDB(ctx))
	rec(c.DBSize(ctx))
	return out
}

func cmdString(cmd redis.Cmder) string {
	if err := cmd.Err(); err != nil {
		return "error: " + err.Error()
	}
	switch c := cmd.(type) {
	case *redis.MapStringStringCmd:
		m := c.Val()
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		s := ""
		for _, k := range keys {
			s += k + "=" + m[k] + " "
		}
		return s
	}
	return fmt.Sprintf("%v", cmd)
}

func TestRouteSlotsMatchesOneEngine(t *testing.T) {
	srvs, addrs := startShards(t, 3)
	oracle := redistest.Start(t)
	p, set := startRouted(t, proxy.RouteSlots, addrs, nil)

	want := routedWorkload(t, goRedis(t, oracle.Addr()))
	got := routedWorkload(t, goRedis(t, p.Addr()))
	if len(got) != len(want) {
		t.Fatalf("%d results through the proxy, %d direct", len(got), len(want))
	}
	for i := range want {
		if testing.Verbose() && i%9 == 0 {
			t.Logf("%s", got[i])
		}
		if got[i] != want[i] {
			t.Errorf("result %d differs\n one engine: %s\n routed:     %s", i, want[i], got[i])
		}
	}
	// The keys were spread: every shard served commands.
	snap := set.Snapshot()
	served := map[string]int64{}
	for _, sh := range snap.Shards {
		served[sh.Name] = sh.Count
	}
	for _, s := range srvs {
		if served[s.Addr()] == 0 {
			t.Errorf("shard %s served no command (%v)", s.Addr(), served)
		}
	}
}

// TestRouteSlotsKeysLandOnTheirShard checks placement: after writes through
// the proxy, each key is on the shard that owns its slot, and only there.
func TestRouteSlotsKeysLandOnTheirShard(t *testing.T) {
	srvs, addrs := startShards(t, 3)
	p, _ := startRouted(t, proxy.RouteSlots, addrs, nil)
	topo, err := routing.EvenSplit(addrs)
	if err != nil {
		t.Fatal(err)
	}
	c := goRedis(t, p.Addr())
	ctx := context.Background()
	keys := []string{"", "key:a", "key:b", "key:c", "{a}1", "{b}1", "foo{}{bar}", "foo{{bar}}zap", "abc{", "\x00\xff"}
	for i := range 200 {
		keys = append(keys, fmt.Sprintf("k%d", i))
	}
	for _, k := range keys {
		if err := c.Set(ctx, k, "x", 0).Err(); err != nil {
			t.Fatalf("SET %q: %v", k, err)
		}
	}
	for _, k := range keys {
		owner := topo.Shard(routing.Slot([]byte(k)))
		for i, s := range srvs {
			n, err := s.Client().Exists(ctx, k).Result()
			if err != nil {
				t.Fatal(err)
			}
			if want := int64(0); i == owner {
				want = 1
				if n != want {
					t.Errorf("key %q (slot %d) missing on its owner %d", k, routing.Slot([]byte(k)), i)
				}
			} else if n != want {
				t.Errorf("key %q (slot %d) on shard %d, owner is %d", k, routing.Slot([]byte(k)), i, owner)
			}
		}
	}
}

// TestRouteSlotsHeadOfLine: a slow command on one shard holds up the
// replies of the same client's later commands on other shards (replies go
// back in request order), and that wait is reported as reorder wait.
func TestRouteSlotsHeadOfLine(t *testing.T) {
	_, addrs := startShards(t, 3)
	p, set := startRouted(t, proxy.RouteSlots, addrs, nil)
	c := redistest.Dial(t, p.Addr())
	defer c.Close()
	c.Roundtrip(t, redistest.Cmd("SET", "key:b", "2"), []byte("+OK\r\n"))
	c.Roundtrip(t, redistest.Cmd("SET", "key:c", "3"), []byte("+OK\r\n"))
	start := time.Now()
	c.Send(t, append(append(redistest.Cmd("BLPOP", "key:a", "0.2"), redistest.Cmd("GET", "key:b")...), redistest.Cmd("GET", "key:c")...))
	c.Expect(t, []byte("*-1\r\n$1\r\n2\r\n$1\r\n3\r\n"), 5*time.Second)
	if d := time.Since(start); d < 190*time.Millisecond {
		t.Errorf("replies after %v, want them behind the 200 ms BLPOP", d)
	}
	// The proxy records a command just after writing its reply: wait for
	// all five (two SETs, BLPOP, two GETs) to be recorded. (Read at once,
	// under -race, only the SETs were there: max 23 µs.)
	var w metrics.Durations
	_ = redistest.Await(2*time.Second, 5*time.Millisecond, func() error {
		if w = set.Snapshot().ReorderWait; w.Count() < 5 {
			return errors.New("short") // asserted below
		}
		return nil
	})
	if w.Count() < 5 || w.Max() < 150*time.Millisecond {
		t.Errorf("reorder wait: count %d max %v, want 5 commands, 2 GETs of them waiting >= 150 ms", w.Count(), w.Max())
	}
}

// TestRouteSlotsPubSub: under --route slots a subscriber (go-redis, RESP3)
// gets what is published on any shard (PUBLISH goes to every standalone
// shard, the receivers summed), with no hand-over to another connection;
// MONITOR through the proxy is a feed of the connection it was sent on.
func TestRouteSlotsPubSub(t *testing.T) {
	_, addrs := startShards(t, 3)
	p, set := startRouted(t, proxy.RouteSlots, addrs, nil)
	ctx := context.Background()
	sub := goRedis(t, p.Addr())
	pub := goRedis(t, p.Addr())
	// Three channels, each on another shard.
	chans := []string{"chan:a", "key:b", "key:c"}
	for _, ch := range chans {
		ps := sub.Subscribe(ctx, ch)
		if _, err := ps.Receive(ctx); err != nil {
			t.Fatalf("SUBSCRIBE %s: %v", ch, err)
		}
		if n, err := pub.Publish(ctx, ch, "hello "+ch).Result(); err != nil || n != 1 {
			t.Fatalf("PUBLISH %s: %d receivers, %v", ch, n, err)
		}
		msg, err := ps.ReceiveMessage(ctx)
		if err != nil || msg.Channel != ch || msg.Payload != "hello "+ch {
			t.Fatalf("message on %s: %+v %v", ch, msg, err)
		}
		_ = ps.Close()
	}
	// With shared connections each new subscriber connection moves to
	// private ones once (go-redis may reuse a closed PubSub's connection,
	// already private, for the next); without, none moves.
	r := set.Snapshot().Routing
	if sharedMode() && (r.HandoffsPubSub < 1 || r.HandoffsPubSub > int64(len(chans))) ||
		!sharedMode() && r.HandoffsPubSub != 0 {
		t.Errorf("pub/sub handoffs: %d (shared=%v), want 0 with private connections, 1..%d with shared ones",
			r.HandoffsPubSub, sharedMode(), len(chans))
	}
	// The publisher kept routing normally meanwhile.
	if err := pub.Set(ctx, "key:b", "x", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if v, err := pub.Get(ctx, "key:b").Result(); err != nil || v != "x" {
		t.Fatalf("GET after pub/sub: %q %v", v, err)
	}
	// MONITOR through the proxy sees a command sent on the same shard.
	mon := redistest.Dial(t, p.Addr())
	defer mon.Close()
	mon.Roundtrip(t, redistest.Cmd("MONITOR"), []byte("+OK\r\n"))
	for _, k := range []string{"key:a", "key:b", "key:c"} { // one of them is on the monitor's home shard
		if err := pub.Get(ctx, k).Err(); err != nil && err != redis.Nil {
			t.Fatal(err)
		}
	}
	var lines []string
	for len(lines) < 20 { // connection set-up (a replayed HELLO) may come first
		line, err := mon.ReadFrame(5 * time.Second)
		if err != nil {
			t.Fatalf("MONITOR after %q: %v", lines, err)
		}
		lines = append(lines, string(line))
		if strings.Contains(string(line), `"get"`) {
			break
		}
	}
	if !strings.Contains(lines[len(lines)-1], `"get"`) {
		t.Errorf("MONITOR lines %q, want a GET", lines)
	}
}

// TestRouteSlotsShardKilled: one shard dies with requests pending on it:
// those get -ERR upstream ... and their client keeps its connection and its
// other shards, as a cluster client keeps its other node connections
// (docs/sessions-housekeeping.md); a client with nothing on that shard
// carries on, its requests for that
// shard answered -ERR upstream ... unreachable; new clients still get
// answers to keyless commands; after the restart, the
// proxy serves the shard again without a restart of its own.
func TestRouteSlotsShardKilled(t *testing.T) {
	redistest.VerifyNoLeaks(t)
	srvs, addrs := startShards(t, 3)
	p, _ := startRouted(t, proxy.RouteSlots, addrs, nil)
	topo, _ := routing.EvenSplit(addrs)
	var victimKey, safeKey string
	for i := 0; victimKey == "" || safeKey == ""; i++ {
		k := fmt.Sprintf("k%d", i)
		switch topo.Shard(routing.Slot([]byte(k))) {
		case 2:
			victimKey = k
		case 0:
			safeKey = k
		}
	}
	c := redistest.Dial(t, p.Addr())
	defer c.Close()
	other := redistest.Dial(t, p.Addr())
	defer other.Close()
	c.Roundtrip(t, redistest.Cmd("SET", victimKey, "v"), []byte("+OK\r\n"))
	other.Roundtrip(t, redistest.Cmd("SET", safeKey, "s"), []byte("+OK\r\n"))
	srvs[2].Stop() // SIGSTOP: requests stay pending
	c.Send(t, append(redistest.Cmd("GET", safeKey), redistest.Cmd("GET", victimKey)...))
	time.Sleep(100 * time.Millisecond)
	srvs[2].Kill()
	want := "$1\r\ns\r\n-ERR upstream " + addrs[2] + " connection lost"
	if sharedMode() {
		// On a shared upstream connection the lost requests were in
		// flight on a connection the client does not own: it is closed
		// once answered, as under --upstream-mode shared without routing
		// (docs/sessions-housekeeping.md).
		got, closed := c.ReadToClose(5 * time.Second)
		if !closed || !strings.HasPrefix(string(got), want) {
			t.Errorf("client with a request on the dead shard (shared): %q closed=%v, want %q... and the close", got, closed, want)
		}
	} else {
		got, err := c.ReadWhile(func(b []byte) bool { return bytes.Count(b, []byte("\r\n")) >= 3 }, 5*time.Second)
		if err != nil || !strings.HasPrefix(string(got), want) {
			t.Errorf("client with a request on the dead shard: %q %v, want %q...", got, err, want)
		}
		c.Consume(len(got))
		c.Roundtrip(t, redistest.Cmd("GET", safeKey), []byte("$1\r\ns\r\n"))
	}
	other.Roundtrip(t, redistest.Cmd("GET", safeKey), []byte("$1\r\ns\r\n"))
	other.Send(t, redistest.Cmd("GET", victimKey))
	if b, err := other.ReadFrame(5 * time.Second); err != nil || !strings.HasPrefix(string(b), "-ERR upstream "+addrs[2]+" unreachable") {
		t.Errorf("GET on the dead shard: %q %v", b, err)
	}
	// The engine never got that request: the client keeps its connection
	// and its other shards (docs/cases.md R-05), and a request over all
	// three fails as a whole.
	other.Send(t, redistest.Cmd("MSET", victimKey, "1", safeKey, "2"))
	if b, err := other.ReadFrame(5 * time.Second); err != nil || !strings.HasPrefix(string(b), "-ERR upstream "+addrs[2]+" unreachable") {
		t.Errorf("MSET with a part on the dead shard: %q %v", b, err)
	}
	other.Roundtrip(t, redistest.Cmd("PING"), []byte("+PONG\r\n"))
	other.Roundtrip(t, redistest.Cmd("GET", safeKey), []byte("$1\r\n2\r\n"))
	// New clients get a home shard (for keyless commands) that answers,
	// whichever would have been next in turn, and not only for a while
	// after the failed dial (it was 2 s: a pool's health-check PING kept
	// failing).
	time.Sleep(2500 * time.Millisecond)
	for i := range 4 {
		f := redistest.Dial(t, p.Addr())
		f.Roundtrip(t, redistest.Cmd("PING"), []byte("+PONG\r\n"))
		f.Roundtrip(t, redistest.Cmd("ECHO", strconv.Itoa(i)), []byte("$1\r\n"+strconv.Itoa(i)+"\r\n"))
		_ = f.Close()
	}
	srvs[2].Restart()
	n := redistest.Dial(t, p.Addr())
	defer n.Close()
	n.Roundtrip(t, redistest.Cmd("SET", victimKey, "again"), []byte("+OK\r\n"))
	// (the failed MSET's part on a live shard was written, as on a cluster)
	n.Roundtrip(t, redistest.Cmd("MGET", victimKey, safeKey), []byte("*2\r\n$5\r\nagain\r\n$1\r\n2\r\n"))
}

// TestRouteSlotsHandBack: a client handed over to one shard (SUBSCRIBE) is
// routed by slot again once it is back to plain requests: its writes land
// on their owners and fan-out works.
func TestRouteSlotsHandBack(t *testing.T) {
	srvs, addrs := startShards(t, 3)
	for _, shared := range []bool{false, true} {
		t.Run(fmt.Sprintf("shared=%v", shared), func(t *testing.T) {
			for _, s := range srvs {
				s.Flush()
			}
			p, set := startRouted(t, proxy.RouteSlots, addrs, func(c *proxy.Config) {
				c.UpstreamMode = proxy.UpstreamPrivate
				if shared {
					c.UpstreamMode = proxy.UpstreamShared
				}
			})
			c := redistest.Dial(t, p.Addr())
			defer c.Close()
			c.Roundtrip(t, redistest.Cmd("CLIENT", "REPLY", "ON"), []byte("+OK\r\n"))
			c.Roundtrip(t, redistest.Cmd("SET", "key:a", "1"), []byte("+OK\r\n"))
			c.Roundtrip(t, redistest.Cmd("SUBSCRIBE", "ch"), []byte("*3\r\n$9\r\nsubscribe\r\n$2\r\nch\r\n:1\r\n"))
			c.Roundtrip(t, redistest.Cmd("UNSUBSCRIBE"), []byte("*3\r\n$11\r\nunsubscribe\r\n$2\r\nch\r\n:0\r\n"))
			c.Roundtrip(t, redistest.Cmd("SET", "key:b", "2"), []byte("+OK\r\n"))
			c.Roundtrip(t, redistest.Cmd("SET", "key:c", "3"), []byte("+OK\r\n"))
			c.Roundtrip(t, redistest.Cmd("MGET", "key:a", "key:b", "key:c"), []byte("*3\r\n$1\r\n1\r\n$1\r\n2\r\n$1\r\n3\r\n"))
			topo, _ := routing.EvenSplit(addrs)
			for _, k := range []string{"key:a", "key:b", "key:c"} {
				owner := srvs[topo.Shard(routing.Slot([]byte(k)))]
				if owner.Do("EXISTS", k).(int64) != 1 {
					t.Errorf("%s is not on its owner %s", k, owner.Addr())
				}
			}
			// CLIENT REPLY and pub/sub are modes of the routed session: no
			// hand-over (with shared connections, SUBSCRIBE moves the client
			// to private ones: one pubsub move).
			wantPubSub := int64(0)
			if shared {
				wantPubSub = 1
			}
			if r := set.Snapshot().Routing; r.HandoffsPubSub != wantPubSub || r.HandoffsState != 0 {
				t.Errorf("handoffs %+v, want %d pubsub and no state", r, wantPubSub)
			}
		})
	}
}

// TestRouteClientResetWithRepliesPending: clients that reset their
// connection (RST) while replies are on their way must not take the proxy
// down (a write to such a client closes it inside the flush that walks its
// replies). Regression test: this crashed routed and shared sessions.
func TestRouteClientResetWithRepliesPending(t *testing.T) {
	_, addrs := startShards(t, 3)
	for _, shared := range []bool{false, true} {
		t.Run(fmt.Sprintf("shared=%v", shared), func(t *testing.T) {
			p, _ := startRouted(t, proxy.RouteSlots, addrs, func(c *proxy.Config) {
				if shared {
					c.UpstreamMode = proxy.UpstreamShared
				}
			})
			var batch []byte
			for i := range 200 {
				batch = append(batch, redistest.Cmd("GET", fmt.Sprintf("ch:%d", i))...)
			}
			for range 60 {
				c := redistest.Dial(t, p.Addr())
				c.Send(t, batch)
				_ = c.TCP().SetLinger(0)
				_ = c.Close()
			}
			f := redistest.Dial(t, p.Addr())
			defer f.Close()
			f.Roundtrip(t, redistest.Cmd("PING"), []byte("+PONG\r\n"))
		})
	}
}

// TestRoutePinnedFirstKey: --pin-by first-key pins a client whose first
// batch names a key to that key's shard, and pins a client that waits for
// its handshake reply (go-redis: HELLO 3 alone) round-robin instead of
// keeping it waiting.
func TestRoutePinnedFirstKey(t *testing.T) {
	srvs, addrs := startShards(t, 3)
	p, set := startRouted(t, proxy.RoutePinned, addrs, func(c *proxy.Config) { c.PinBy = proxy.PinFirstKey })
	topo, _ := routing.EvenSplit(addrs)
	c := redistest.Dial(t, p.Addr())
	defer c.Close()
	c.Send(t, append(redistest.Cmd("HELLO", "2"), redistest.Cmd("SET", "key:b", "v")...))
	if _, err := c.ReadFrame(5 * time.Second); err != nil { // HELLO's map
		t.Fatal(err)
	}
	c.Expect(t, []byte("+OK\r\n"), 5*time.Second)
	owner := srvs[topo.Shard(routing.Slot([]byte("key:b")))]
	if owner.Do("EXISTS", "key:b").(int64) != 1 {
		t.Errorf("key:b not on its owner: the connection was not pinned by its first key")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	g := goRedis(t, p.Addr())
	if err := g.Ping(ctx).Err(); err != nil {
		t.Fatalf("go-redis PING through first-key pinning: %v", err)
	}
	if r := set.Snapshot().Routing; r.PinnedMisroutes != 0 {
		t.Errorf("misroutes %d, want 0", r.PinnedMisroutes)
	}
}

// TestRouteSlotsTracking: a RESP3 client with CLIENT TRACKING on gets the
// invalidation of every key it read, whichever shard holds it (the
// command is replayed on every shard connection, as a cluster client
// turns tracking on for each node it talks to). Before, only the home
// shard tracked: a client-side cache of the other keys went stale without
// a word.
func TestRouteSlotsTracking(t *testing.T) {
	srvs, addrs := startShards(t, 3)
	p, _ := startRouted(t, proxy.RouteSlots, addrs, nil)
	topo, _ := routing.EvenSplit(addrs)
	keys := make([]string, 3) // one key per shard
	for i, found := 0, 0; found < 3; i++ {
		k := fmt.Sprintf("trk:%d", i)
		if sh := topo.Shard(routing.Slot([]byte(k))); keys[sh] == "" {
			keys[sh] = k
			found++
		}
	}
	c := redistest.Dial(t, p.Addr())
	defer c.Close()
	c.Send(t, redistest.Cmd("HELLO", "3"))
	if _, err := c.ReadFrame(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	c.Roundtrip(t, redistest.Cmd("CLIENT", "TRACKING", "on"), []byte("+OK\r\n"))
	for _, k := range keys {
		c.Roundtrip(t, redistest.Cmd("GET", k), []byte("_\r\n"))
	}
	for i, k := range keys {
		srvs[i].Do("SET", k, "v") // on its owner, behind the proxy's back
	}
	got := map[string]bool{}
	for range keys {
		f, err := c.ReadFrame(5 * time.Second)
		if err != nil {
			t.Fatalf("invalidations so far %v, then: %v", got, err)
		}
		if !bytes.HasPrefix(f, []byte(">2\r\n$10\r\ninvalidate\r\n*1\r\n")) {
			t.Fatalf("want an invalidate push, got %q", f)
		}
		for _, k := range keys {
			if bytes.HasSuffix(f, []byte("$"+strconv.Itoa(len(k))+"\r\n"+k+"\r\n")) {
				got[k] = true
			}
		}
	}
	for _, k := range keys {
		if !got[k] {
			t.Errorf("no invalidation for %s (its shard: %s); got %v", k, addrs[topo.Shard(routing.Slot([]byte(k)))], got)
		}
	}
	// The connection still answers in order after the pushes.
	c.Roundtrip(t, redistest.Cmd("GET", keys[2]), []byte("$1\r\nv\r\n"))
}

// TestDrainTimeoutReply: a request still pending when Stop's drain timeout
// expires gets an error that says the proxy shut down, not that the engine
// was lost (the engine was fine), in passthrough and under --route slots;
// and the engine loss is not counted.
func TestDrainTimeoutReply(t *testing.T) {
	_, addrs := startShards(t, 3)
	for _, route := range []string{proxy.RouteNone, proxy.RouteSlots} {
		t.Run(route, func(t *testing.T) {
			mod := func(c *proxy.Config) { c.DrainTimeout = 300 * time.Millisecond }
			var p *proxy.Proxy
			var set *metrics.Set
			if route == proxy.RouteNone {
				p, set = proxytest.StartProxy(t, addrs[0], mod)
			} else {
				p, set = startRouted(t, route, addrs, mod)
			}
			c := redistest.Dial(t, p.Addr())
			defer c.Close()
			c.Roundtrip(t, redistest.Cmd("PING"), []byte("+PONG\r\n"))
			c.Send(t, redistest.Cmd("BLPOP", "drain:none", "30"))
			time.Sleep(100 * time.Millisecond) // the BLPOP reaches its shard
			proxytest.Stop(t, p)
			f, err := c.ReadFrame(5 * time.Second)
			if err != nil || !bytes.HasPrefix(f, []byte("-ERR upstream ")) || !bytes.Contains(f, []byte("not answered: respmeter shut down (drain timeout)")) {
				t.Errorf("pending BLPOP at shutdown got %q (%v), want the shutdown error", f, err)
			}
			if n := set.Counters().UpstreamLost; n != 0 {
				t.Errorf("upstream losses counted: %d, want 0 (the proxy closed them)", n)
			}
		})
	}
}

// monitorLineRe matches the head of a MONITOR line: "+<unix time> [<db> <client>]".
var monitorLineRe = regexp.MustCompile(`\+\d+\.\d+ \[(\d+) [^\]]+\]`)

// TestRouteSlotsPipelinedHandBack: requests pipelined behind the ones that
// end a hand-over (CLIENT REPLY SKIP's skipped command, CLIENT REPLY ON,
// UNSUBSCRIBE, RESET) go to their own shards, in the same write or in the
// next one sent before the replies came back (keyed commands sent while
// handed over still go to the hand-over shard: a documented limit). Each
// case runs once per home
// shard (homes are round-robin); its replies are compared with one engine's
// and its key must be on its owner and nowhere else. Regression test: they
// went to the hand-over shard.
func TestRouteSlotsPipelinedHandBack(t *testing.T) {
	srvs, addrs := startShards(t, 3)
	oracle := redistest.Start(t)
	topo, _ := routing.EvenSplit(addrs)
	// a key and a channel with different owners
	key, ch := "", ""
	for i := 0; key == "" || ch == ""; i++ {
		k := fmt.Sprintf("hb:%d", i)
		switch sh := topo.Shard(routing.Slot([]byte(k))); {
		case key == "":
			key = k
		case ch == "" && sh != topo.Shard(routing.Slot([]byte(key))):
			ch = k
		}
	}
	cmd := redistest.Cmd
	cases := []struct {
		name   string
		writes [][]byte
	}{
		{"CLIENT REPLY SKIP", [][]byte{respJoin(cmd("CLIENT", "REPLY", "SKIP"), cmd("PING"), cmd("INCR", key), cmd("GET", key))}},
		{"CLIENT REPLY OFF then ON", [][]byte{respJoin(cmd("CLIENT", "REPLY", "OFF"), cmd("PING"),
			cmd("CLIENT", "REPLY", "ON"), cmd("INCR", key), cmd("GET", key))}},
		{"SUBSCRIBE then UNSUBSCRIBE", [][]byte{respJoin(cmd("SUBSCRIBE", ch), cmd("UNSUBSCRIBE", ch), cmd("INCR", key), cmd("GET", key))}},
		{"UNSUBSCRIBE, then the next write at once", [][]byte{respJoin(cmd("SUBSCRIBE", ch), cmd("UNSUBSCRIBE")),
			respJoin(cmd("INCR", key), cmd("GET", key))}},
		{"PSUBSCRIBE then RESET", [][]byte{respJoin(cmd("PSUBSCRIBE", ch+"*"), cmd("RESET"), cmd("INCR", key), cmd("GET", key))}},
		{"RESP3 subscriber", [][]byte{respJoin(cmd("HELLO", "3"), cmd("SUBSCRIBE", ch), cmd("PING"),
			cmd("UNSUBSCRIBE", ch), cmd("INCR", key), cmd("GET", key))}},
		{"still subscribed after UNSUBSCRIBE", [][]byte{respJoin(cmd("SUBSCRIBE", ch, ch+"x"), cmd("UNSUBSCRIBE", ch),
			cmd("PING"), cmd("UNSUBSCRIBE"), cmd("INCR", key), cmd("GET", key))}},
		// CLIENT REPLY is the proxy's own under slot routing: what is
		// sent under OFF or SKIP goes to its shard, its reply dropped
		// (docs/cases.md C-09 over three shards).
		{"writes under CLIENT REPLY SKIP and OFF", [][]byte{respJoin([]byte("*0\r\n*-1\r\n\r\n"), cmd("PING"),
			cmd("CLIENT", "REPLY", "SKIP"), cmd("SET", key, "1"), cmd("GET", key), cmd("CLIENT", "REPLY", "OFF"),
			cmd("SET", key, "2"), cmd("NOSUCHCMD"), cmd("CLIENT", "REPLY", "SKIP"), cmd("CLIENT", "REPLY", "ON"), cmd("GET", key))}},
		{"CLIENT REPLY ON while on", [][]byte{respJoin(cmd("CLIENT", "REPLY", "ON"), cmd("INCR", key), cmd("GET", key))}},
		{"CLIENT REPLY SKIP consumed by UNSUBSCRIBE", [][]byte{respJoin(cmd("SET", key, "v"), cmd("CLIENT", "REPLY", "SKIP"),
			cmd("UNSUBSCRIBE"), cmd("GET", key), cmd("PING"))}},
		{"CLIENT REPLY SKIP consumed by SUBSCRIBE", [][]byte{respJoin(cmd("SET", key, "v"), cmd("CLIENT", "REPLY", "SKIP"),
			cmd("SUBSCRIBE", ch), cmd("PING"), cmd("UNSUBSCRIBE"), cmd("GET", key))}},
		{"RESET under CLIENT REPLY SKIP", [][]byte{respJoin(cmd("SET", key, "v"), cmd("CLIENT", "REPLY", "SKIP"),
			cmd("RESET"), cmd("PING"), cmd("GET", key))}},
		{"RESET under CLIENT REPLY SKIP while subscribed", [][]byte{respJoin(cmd("SET", key, "v"), cmd("SUBSCRIBE", ch),
			cmd("CLIENT", "REPLY", "SKIP"), cmd("RESET"), cmd("PING"), cmd("GET", key))}},
		{"MONITOR under CLIENT REPLY SKIP", [][]byte{respJoin(cmd("SET", key, "v"), cmd("CLIENT", "REPLY", "SKIP"),
			cmd("MONITOR"), cmd("PING"), cmd("RESET"), cmd("GET", key))}},
		{"CLIENT REPLY OFF, then SUBSCRIBE", [][]byte{respJoin(cmd("CLIENT", "REPLY", "OFF"), cmd("SUBSCRIBE", ch),
			cmd("UNSUBSCRIBE"), cmd("CLIENT", "REPLY", "ON"), cmd("INCR", key), cmd("GET", key))}},

		// A subscriber's keyed requests go to their own shard (RESP3), or
		// to the subscribed connection, which refuses them (RESP2): they
		// went to the hand-over shard and got "_" there.
		{"RESP3 GET after UNSUBSCRIBE while a pattern is subscribed", [][]byte{respJoin(cmd("HELLO", "3"),
			cmd("SET", key, "va"), cmd("SUBSCRIBE", ch), cmd("PSUBSCRIBE", "pat*"), cmd("UNSUBSCRIBE"), cmd("GET", key),
			cmd("PUNSUBSCRIBE"), cmd("INCR", key+"n"), cmd("PING"))}},
		{"RESP2 GET while a pattern is subscribed", [][]byte{respJoin(cmd("SET", key, "va"), cmd("SUBSCRIBE", ch),
			cmd("PSUBSCRIBE", "pat*"), cmd("UNSUBSCRIBE"), cmd("GET", key), cmd("PING"), cmd("HELLO", "3"),
			cmd("PUNSUBSCRIBE"), cmd("GET", key))}},
		{"RESP3 keyed commands between subscribes", [][]byte{respJoin(cmd("HELLO", "3"), cmd("SUBSCRIBE", ch),
			cmd("INCR", key), cmd("SUBSCRIBE", ch+"x"), cmd("GET", key), cmd("UNSUBSCRIBE", ch), cmd("INCR", key),
			cmd("UNSUBSCRIBE"), cmd("GET", key))}},
	}
	owner := srvs[topo.Shard(routing.Slot([]byte(key)))]
	o := redistest.ExchangeOptions{Timeout: 5 * time.Second}
	for _, shared := range []bool{false, true} {
		p, _ := startRouted(t, proxy.RouteSlots, addrs, func(c *proxy.Config) {
			if shared {
				c.UpstreamMode = proxy.UpstreamShared
			}
		})
		for _, tc := range cases {
			t.Run(fmt.Sprintf("shared=%v/%s", shared, tc.name), func(t *testing.T) {
				writes := append(append([][]byte(nil), tc.writes...), cmd("QUIT"))
				oracle.Flush()
				want, _ := redistest.Exchange(t, oracle.Addr(), writes, o)
				for home := range 3 {
					for _, s := range srvs {
						s.Flush()
					}
					got, _ := redistest.Exchange(t, p.Addr(), writes, o)
					mask := func(b []byte) []byte { // HELLO's id; MONITOR lines' time and client
						return redistest.Mask(redistest.MaskHelloID(b), monitorLineRe, "+<ts> [$1 <client>]")
					}
					if w, g := mask(want), mask(got); !bytes.Equal(w, g) {
						t.Errorf("connection %d: replies differ from one engine's\n engine: %q\n proxy:  %q", home, w, g)
					}
					for _, s := range srvs {
						if n := s.Do("EXISTS", key).(int64); (n == 1) != (s == owner) {
							t.Errorf("connection %d: EXISTS %s on %s = %d (its owner is %s)", home, key, s.Addr(), n, owner.Addr())
						}
					}
				}
			})
		}
	}
}

// TestRouteSlotsClientReplyInMulti: CLIENT REPLY inside MULTI under slot
// routing is refused when queued, and EXEC then fails as after any queuing
// error (Redis would run it inside EXEC and leave the shard's connection
// with its replies off, which the proxy, waiting for replies, cannot
// follow). The connection goes on answering.
func TestRouteSlotsClientReplyInMulti(t *testing.T) {
	_, addrs := startShards(t, 3)
	p, _ := startRouted(t, proxy.RouteSlots, addrs, nil)
	c := redistest.Dial(t, p.Addr())
	defer c.Close()
	c.Send(t, respJoin(redistest.Cmd("MULTI"), redistest.Cmd("SET", "k2", "1"), redistest.Cmd("CLIENT", "REPLY", "OFF"),
		redistest.Cmd("GET", "k2"), redistest.Cmd("EXEC"), redistest.Cmd("PING"), redistest.Cmd("GET", "k2")))
	c.Expect(t, []byte("+OK\r\n+QUEUED\r\n-ERR CLIENT REPLY inside MULTI is not supported by respmeter\r\n+QUEUED\r\n"+
		"-EXECABORT Transaction discarded because of previous errors.\r\n+PONG\r\n$-1\r\n"), 5*time.Second)
}

// TestRouteSlotsShardedPubSub: shard channels live on the shard of their
// slot (Redis Cluster specification): one connection's SSUBSCRIBEs to
// channels of two shards both take, SPUBLISH to each reaches it, the
// confirmations count the client's shard channels over both, a
// multi-slot SSUBSCRIBE gets -CROSSSLOT, and SUNSUBSCRIBE of everything
// answers for both, counting down. The second SSUBSCRIBE went to the first
// one's shard, where SPUBLISH never reached it.
func TestRouteSlotsShardedPubSub(t *testing.T) {
	srvs, addrs := startShards(t, 3)
	topo, _ := routing.EvenSplit(addrs)
	var a, b, c string // a and b on different shards, c on a's shard but another slot
	for i := 0; a == "" || b == "" || c == ""; i++ {
		k := fmt.Sprintf("sch:%d", i)
		switch sh := topo.Shard(routing.Slot([]byte(k))); {
		case a == "":
			a = k
		case b == "" && sh != topo.Shard(routing.Slot([]byte(a))):
			b = k
		case c == "" && sh == topo.Shard(routing.Slot([]byte(a))) && routing.Slot([]byte(k)) != routing.Slot([]byte(a)):
			c = k
		}
	}
	p, _ := startRouted(t, proxy.RouteSlots, addrs, nil)
	sub := redistest.Dial(t, p.Addr())
	defer sub.Close()
	conf := func(kind, ch string, n int) string {
		return fmt.Sprintf("*3\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n:%d\r\n", len(kind), kind, len(ch), ch, n)
	}
	sub.Roundtrip(t, redistest.Cmd("SSUBSCRIBE", a), []byte(conf("ssubscribe", a, 1)))
	sub.Roundtrip(t, redistest.Cmd("SSUBSCRIBE", b), []byte(conf("ssubscribe", b, 2)))
	sub.Roundtrip(t, redistest.Cmd("SSUBSCRIBE", a, c), []byte("-CROSSSLOT Keys in request don't hash to the same slot\r\n"))
	pub := redistest.Dial(t, p.Addr())
	defer pub.Close()
	for _, ch := range []string{a, b} {
		pub.Roundtrip(t, redistest.Cmd("SPUBLISH", ch, "hi "+ch), []byte(":1\r\n"))
		msg := fmt.Sprintf("*3\r\n$8\r\nsmessage\r\n$%d\r\n%s\r\n$%d\r\nhi %s\r\n", len(ch), ch, len(ch)+3, ch)
		sub.Expect(t, []byte(msg), 5*time.Second)
	}
	// Each subscription is on its own shard's connection.
	for _, ch := range []string{a, b} {
		owner := srvs[topo.Shard(routing.Slot([]byte(ch)))]
		if n := owner.Do("PUBSUB", "SHARDNUMSUB", ch).([]any)[1].(int64); n != 1 {
			t.Errorf("PUBSUB SHARDNUMSUB %s on its owner: %d, want 1", ch, n)
		}
	}
	sub.Send(t, redistest.Cmd("SUNSUBSCRIBE"))
	got, err := sub.ReadN(len(conf("sunsubscribe", a, 1))+len(conf("sunsubscribe", b, 0)), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{conf("sunsubscribe", a, 1) + conf("sunsubscribe", b, 0), conf("sunsubscribe", b, 1) + conf("sunsubscribe", a, 0)} {
		if string(got) == want {
			got = nil
		}
	}
	if got != nil {
		t.Errorf("SUNSUBSCRIBE of both: %q", got)
	}
	// Out of subscribe mode: keyed commands are routed again.
	sub.Roundtrip(t, redistest.Cmd("SET", a, "1"), []byte("+OK\r\n"))
	sub.Roundtrip(t, redistest.Cmd("GET", a), []byte("$1\r\n1\r\n"))
}

// TestRouteSlotsClientCachingOptin: with client-side caching in OPTIN mode
// (rueidis's default), CLIENT CACHING YES modifies the next command: it
// goes with it to that command's shard, so the key read next is tracked
// and its invalidation arrives, whatever the connection's home shard. It
// went to the home shard, and 23 of 30 cached keys stayed stale.
func TestRouteSlotsClientCachingOptin(t *testing.T) {
	srvs, addrs := startShards(t, 3)
	p, _ := startRouted(t, proxy.RouteSlots, addrs, nil)
	topo, _ := routing.EvenSplit(addrs)
	for conn := range 3 { // homes are round-robin: every home meets every shard
		keys := make([]string, 3) // one key per shard
		for i, found := 0, 0; found < 3; i++ {
			k := fmt.Sprintf("optin:%d:%d", conn, i)
			if sh := topo.Shard(routing.Slot([]byte(k))); keys[sh] == "" {
				keys[sh] = k
				found++
			}
		}
		c := redistest.Dial(t, p.Addr())
		c.Send(t, redistest.Cmd("HELLO", "3"))
		if _, err := c.ReadFrame(5 * time.Second); err != nil {
			t.Fatal(err)
		}
		c.Roundtrip(t, redistest.Cmd("CLIENT", "TRACKING", "on", "OPTIN"), []byte("+OK\r\n"))
		for _, k := range keys {
			// Pipelined, as rueidis sends them.
			c.Roundtrip(t, respJoin(redistest.Cmd("CLIENT", "CACHING", "YES"), redistest.Cmd("GET", k)), []byte("+OK\r\n_\r\n"))
		}
		// Alone and waited for, it still gets its reply (from the home
		// shard, as before).
		c.Roundtrip(t, redistest.Cmd("CLIENT", "CACHING", "YES"), []byte("+OK\r\n"))
		c.Roundtrip(t, redistest.Cmd("PING"), []byte("+PONG\r\n"))
		for i, k := range keys {
			srvs[i].Do("SET", k, "v")
		}
		got := map[string]bool{}
		for range keys {
			f, err := c.ReadFrame(5 * time.Second)
			if err != nil {
				t.Fatalf("connection %d: invalidations so far %v, then: %v", conn, got, err)
			}
			for _, k := range keys {
				if bytes.HasSuffix(f, []byte("$"+strconv.Itoa(len(k))+"\r\n"+k+"\r\n")) {
					got[k] = true
				}
			}
		}
		for _, k := range keys {
			if !got[k] {
				t.Errorf("connection %d: no invalidation for %s; got %v", conn, k, got)
			}
		}
		_ = c.Close()
	}
}

// TestRouteSlotsKeylessFirstTransaction: a transaction whose first command
// names no key (PING) runs on the shard of its first keyed command; its
// keyless commands wait with MULTI until a key decides (one slot involved,
// so no CROSSSLOT). It was bound to the connection's home shard and failed
// with -CROSSSLOT and -EXECABORT on 6 of 9 connections.
func TestRouteSlotsKeylessFirstTransaction(t *testing.T) {
	srvs, addrs := startShards(t, 3)
	p, _ := startRouted(t, proxy.RouteSlots, addrs, nil)
	topo, _ := routing.EvenSplit(addrs)
	owner := srvs[topo.Shard(routing.Slot([]byte("key:a")))]
	for i := range 9 {
		c := redistest.Dial(t, p.Addr())
		c.Roundtrip(t, respJoin(redistest.Cmd("MULTI"), redistest.Cmd("PING"), redistest.Cmd("SET", "key:a", strconv.Itoa(i)),
			redistest.Cmd("PUBLISH", "chan:a", "hello"), redistest.Cmd("EXEC")),
			[]byte("+OK\r\n+QUEUED\r\n+QUEUED\r\n+QUEUED\r\n*3\r\n+PONG\r\n+OK\r\n:0\r\n"))
		// A transaction with no key at all runs on the home shard.
		c.Roundtrip(t, respJoin(redistest.Cmd("MULTI"), redistest.Cmd("PING"), redistest.Cmd("EXEC")),
			[]byte("+OK\r\n+QUEUED\r\n*1\r\n+PONG\r\n"))
		_ = c.Close()
		if v := owner.Do("GET", "key:a"); v != strconv.Itoa(i) {
			t.Errorf("connection %d: key:a on its owner is %v", i, v)
		}
	}
}

// TestRouteSlotsCommandTips: keyless commands whose Redis 7 command tips say
// request_policy:all_shards reach every shard and their replies are merged
// by the tip's response policy, whichever shard is the client's home:
// SCRIPT EXISTS (agg_logical_and) answers 0 when one shard lost the script
// (an EVALSHA there would fail with NOSCRIPT), and SCRIPT KILL
// (one_succeeded) kills a busy script on any shard. Before, both went to the
// client's home shard only (1 and -NOTBUSY on two connections of three).
func TestRouteSlotsCommandTips(t *testing.T) {
	srvs, addrs := startShards(t, 3)
	p, _ := startRouted(t, proxy.RouteSlots, addrs, nil)
	topo, err := routing.EvenSplit(addrs)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	const script = "return 1"
	for lost := range srvs {
		c := goRedis(t, p.Addr())
		sha, err := c.ScriptLoad(ctx, script).Result() // every shard (all_succeeded)
		if err != nil {
			t.Fatal(err)
		}
		srvs[lost].Do("SCRIPT", "FLUSH")
		for i := range 3 { // three connections: three home shards
			got, err := goRedis(t, p.Addr()).ScriptExists(ctx, sha).Result()
			if err != nil || len(got) != 1 || got[0] {
				t.Errorf("shard %d lost the script; SCRIPT EXISTS on connection %d = %v, %v; want [false]", lost, i, got, err)
			}
		}
	}
	// A key on each shard in turn: a busy script there, killed through a
	// new connection.
	keyOn := func(shard int) string {
		for i := 0; ; i++ {
			if k := fmt.Sprintf("busy:%d", i); topo.Shard(routing.Slot([]byte(k))) == shard {
				return k
			}
		}
	}
	for _, s := range srvs {
		s.Do("CONFIG", "SET", "busy-reply-threshold", "50")
	}
	for shard, s := range srvs {
		done := make(chan error, 1)
		go func() {
			done <- goRedis(t, p.Addr()).Eval(ctx, "while true do end", []string{keyOn(shard)}).Err()
		}()
		redistest.Eventually(t, 10*time.Second, func() error {
			if err := s.Client().Ping(ctx).Err(); err == nil || !strings.HasPrefix(err.Error(), "BUSY") {
				return fmt.Errorf("shard %d not busy yet (PING: %v)", shard, err)
			}
			return nil
		})
		if err := goRedis(t, p.Addr()).ScriptKill(ctx).Err(); err != nil {
			t.Errorf("SCRIPT KILL with a script busy on shard %d: %v; want OK", shard, err)
			_ = s.Client().Do(ctx, "SCRIPT", "KILL").Err()
		}
		if err := <-done; err == nil || !strings.Contains(err.Error(), "killed") {
			t.Errorf("the busy script on shard %d ended with %v; want killed by SCRIPT KILL", shard, err)
		}
	}
	// No script anywhere: every shard's -NOTBUSY, one of them relayed.
	if err := goRedis(t, p.Addr()).ScriptKill(ctx).Err(); err == nil || !strings.HasPrefix(err.Error(), "NOTBUSY") {
		t.Errorf("SCRIPT KILL with no script running: %v; want NOTBUSY", err)
	}
}
