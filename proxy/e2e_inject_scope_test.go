package proxy_test

// Fault injection's scopes by hash slot, shard, client, command flags and
// time window (proxy/inject.go, docs/injection.md), against real
// redis-servers with go-redis: what each rule touched is counted by the
// client and against the engines' commandstats.

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/respmeter/respmeter/internal/redistest"
	"github.com/respmeter/respmeter/metrics"
	"github.com/respmeter/respmeter/metrics/split"
	"github.com/respmeter/respmeter/proxy"
	"github.com/respmeter/respmeter/proxy/proxytest"
	"github.com/respmeter/respmeter/routing"
)

// injected reports whether err is the injected error reply want, and fails
// t on any other error.
func injected(t *testing.T, what string, err error, want string) bool {
	t.Helper()
	switch {
	case err == nil || err == redis.Nil:
		return false
	case err.Error() == want:
		return true
	}
	t.Fatalf("%s: %v", what, err)
	return false
}

// TestInjectSlotsAndShards: slot routing over three engines (slots 0-5460,
// 5461-10922, 10923-16383). A rule on slots 0-5000 answers exactly the SETs
// whose key hashes there (Redis Cluster CRC16 with hash tags, as routing
// computes it); a rule on the third shard's address answers exactly the
// GETs routed there. Each engine's commandstats count what reached it: the
// SETs of its keys outside 0-5000, and the GETs of its keys unless it is
// the third.
func TestInjectSlotsAndShards(t *testing.T) {
	srvs := []*redistest.Server{redistest.Start(t), redistest.Start(t), redistest.Start(t)}
	addrs := []string{srvs[0].Addr(), srvs[1].Addr(), srvs[2].Addr()}
	in, err := proxy.ParseInjection("rules.yaml", []byte(fmt.Sprintf(`rules:
- name: low-slots
  commands: [SET]
  slots: [0, 5000]
  error: "TRYAGAIN injected on a slot"
- name: third-shard
  commands: [GET]
  shards: [%q]
  error: "BUSY injected on a shard"
`, addrs[2])))
	if err != nil {
		t.Fatal(err)
	}
	p, _ := proxytest.StartProxy(t, "", func(c *proxy.Config) {
		c.Route, c.Shards, c.Inject = proxy.RouteSlots, addrs, in
	})
	c := injectClient(t, p.Addr(), 5*time.Second)
	ctx := context.Background()
	before := make([]map[string]int64, 3)
	for i, s := range srvs {
		before[i] = commandstats(t, s)
	}
	shardOf := func(slot uint16) int {
		switch {
		case slot <= 5460:
			return 0
		case slot <= 10922:
			return 1
		}
		return 2
	}
	var wantSet, wantGet [3]int64
	setErrs, getErrs, inRange := 0, 0, 0
	// Keys with and without hash tags: {user1}:a hashes as user1.
	for i := range 600 {
		k := fmt.Sprintf("k:%d", i)
		if i%3 == 0 {
			k = fmt.Sprintf("{u%d}:x", i)
		}
		slot := routing.Slot([]byte(k))
		sh := shardOf(slot)
		low := slot <= 5000
		if low {
			inRange++
		} else {
			wantSet[sh]++
		}
		if sh != 2 {
			wantGet[sh]++
		}
		if got := injected(t, "SET "+k, c.Set(ctx, k, "v", 0).Err(), "TRYAGAIN injected on a slot"); got != low {
			t.Errorf("SET %s (slot %d): injected %v, want %v", k, slot, got, low)
		} else if got {
			setErrs++
		}
		if got := injected(t, "GET "+k, c.Get(ctx, k).Err(), "BUSY injected on a shard"); got != (sh == 2) {
			t.Errorf("GET %s (slot %d, shard %d): injected %v, want %v", k, slot, sh, got, sh == 2)
		} else if got {
			getErrs++
		}
	}
	t.Logf("%d of 600 keys in slots 0-5000; %d SETs and %d GETs injected", inRange, setErrs, getErrs)
	if inRange < 100 || getErrs < 100 {
		t.Fatalf("the keys do not spread: %d in range, %d on the third shard", inRange, getErrs)
	}
	for i, s := range srvs {
		after := commandstats(t, s)
		if n := after["set"] - before[i]["set"]; n != wantSet[i] {
			t.Errorf("engine %d ran %d SETs, want %d (its keys outside slots 0-5000)", i, n, wantSet[i])
		}
		if n := after["get"] - before[i]["get"]; n != wantGet[i] {
			t.Errorf("engine %d ran %d GETs, want %d", i, n, wantGet[i])
		}
	}
	if got := in.Counts(); got[0].Count != uint64(inRange) || got[1].Count != uint64(getErrs) {
		t.Errorf("rule counts %+v, want %d and %d", got, inRange, getErrs)
	}
}

// TestInjectShardOneEngine: with one engine (and in every route shape with
// it as the only shard) a rule on its address touches every request, a
// rule on another address none.
func TestInjectShardOneEngine(t *testing.T) {
	srv := redistest.Start(t)
	p, _, in := injectSetup(t, srv, fmt.Sprintf(`rules:
- name: elsewhere
  shards: ["127.0.0.1:1"]
  error: "ERR elsewhere"
- name: here
  commands: [GET]
  shards: [%q]
  error: "ERR here"
`, srv.Addr()))
	c := injectClient(t, p.Addr(), 5*time.Second)
	ctx := context.Background()
	before := commandstats(t, srv)
	for i := range 20 {
		k := fmt.Sprintf("k%d", i)
		if err := c.Set(ctx, k, "v", 0).Err(); err != nil {
			t.Fatalf("SET %s: %v", k, err)
		}
		if !injected(t, "GET", c.Get(ctx, k).Err(), "ERR here") {
			t.Errorf("GET %s: not injected", k)
		}
	}
	after := commandstats(t, srv)
	if n, m := after["set"]-before["set"], after["get"]-before["get"]; n != 20 || m != 0 {
		t.Errorf("engine ran %d SETs and %d GETs, want 20 and 0", n, m)
	}
	if got := in.Counts(); got[0].Count != 0 || got[1].Count != 20 {
		t.Errorf("rule counts %+v, want 0 and 20", got)
	}
}

// TestInjectClients: rules scoped by client name (CLIENT SETNAME, a glob)
// and by client address (a prefix, a host:port glob) touch only the
// clients they name: the named client's GETs are all answered with the
// error, the other client's all reach the engine (its commandstats).
func TestInjectClients(t *testing.T) {
	srv := redistest.Start(t)
	// A local port of our choosing for the address glob.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	p, _, in := injectSetup(t, srv, fmt.Sprintf(`rules:
- name: nowhere
  clients: [{addr: 10.0.0.0/8}, {addr: "192.168.*"}]
  error: "ERR nowhere"
- name: by-name
  commands: [GET]
  clients: [{name: "victim-*"}]
  error: "ERR by name"
- name: by-port
  commands: [GET]
  clients: [{addr: "127.0.0.1:%d"}]
  error: "ERR by port"
- name: loopback
  commands: [SET]
  clients: [{addr: 127.0.0.1/32}]
  error: "ERR loopback"
`, port))
	ctx := context.Background()
	victim := injectClient(t, p.Addr(), 5*time.Second)
	other := injectClient(t, p.Addr(), 5*time.Second)
	byPort := redis.NewClient(&redis.Options{Addr: p.Addr(), MaxRetries: -1, PoolSize: 1, DisableIdentity: true,
		Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
			d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: port}}
			return d.DialContext(ctx, network, addr)
		}})
	defer byPort.Close()
	// Named before the GETs: a name applies from its SETNAME's reply on.
	if err := victim.Do(ctx, "CLIENT", "SETNAME", "victim-1").Err(); err != nil {
		t.Fatal(err)
	}
	if err := other.Do(ctx, "CLIENT", "SETNAME", "bystander").Err(); err != nil {
		t.Fatal(err)
	}
	before := commandstats(t, srv)
	const n = 50
	for i := range n {
		k := fmt.Sprintf("k%d", i)
		if !injected(t, "victim GET", victim.Get(ctx, k).Err(), "ERR by name") {
			t.Errorf("victim's GET %s: not injected", k)
		}
		if injected(t, "other GET", other.Get(ctx, k).Err(), "") {
			t.Errorf("other's GET %s: injected", k)
		}
		if !injected(t, "by-port GET", byPort.Get(ctx, k).Err(), "ERR by port") {
			t.Errorf("by-port client's GET %s: not injected", k)
		}
		if !injected(t, "other SET", other.Set(ctx, k, "v", 0).Err(), "ERR loopback") {
			t.Errorf("other's SET %s: not injected by the loopback prefix", k)
		}
	}
	after := commandstats(t, srv)
	if g, s := after["get"]-before["get"], after["set"]-before["set"]; g != n || s != 0 {
		t.Errorf("engine ran %d GETs and %d SETs, want %d (the other client's GETs) and 0", g, s, n)
	}
	got := in.Counts()
	if got[0].Count != 0 || got[1].Count != n || got[2].Count != n || got[3].Count != n {
		t.Errorf("rule counts %+v, want 0, %d, %d, %d", got, n, n, n)
	}
	// Renamed out of the glob: untouched from then on.
	if err := victim.Do(ctx, "CLIENT", "SETNAME", "spared").Err(); err != nil {
		t.Fatal(err)
	}
	if err := victim.Get(ctx, "k0").Err(); err != nil && err != redis.Nil {
		t.Errorf("renamed client's GET: %v", err)
	}
}

// TestInjectReadWrite: read_only scopes the commands the engine flags
// readonly, write those it flags write; a command with neither flag
// (PING, ECHO) is in neither scope.
func TestInjectReadWrite(t *testing.T) {
	srv := redistest.Start(t)
	p, _, in := injectSetup(t, srv, `rules:
- name: reads
  read_only: true
  keys: "r:*"
  error: "ERR read refused"
- name: writes
  write: true
  keys: "w:*"
  error: "ERR write refused"
`)
	c := injectClient(t, p.Addr(), 5*time.Second)
	ctx := context.Background()
	srv.DoT(t, "SET", "r:1", "v")
	before := commandstats(t, srv)
	for _, tc := range []struct {
		what string
		err  error
		want string
	}{
		{"GET r:1", c.Get(ctx, "r:1").Err(), "ERR read refused"},
		{"STRLEN r:1", c.StrLen(ctx, "r:1").Err(), "ERR read refused"},
		{"SET r:1", c.Set(ctx, "r:1", "v", 0).Err(), ""},
		{"SET w:1", c.Set(ctx, "w:1", "v", 0).Err(), "ERR write refused"},
		{"INCR w:2", c.Incr(ctx, "w:2").Err(), "ERR write refused"},
		{"GET w:1", c.Get(ctx, "w:1").Err(), ""},
		{"PING", c.Ping(ctx).Err(), ""},
	} {
		if got := injected(t, tc.what, tc.err, tc.want); got != (tc.want != "") {
			t.Errorf("%s: injected %v, want %v", tc.what, got, tc.want != "")
		}
	}
	after := commandstats(t, srv)
	for cmd, want := range map[string]int64{"get": 1, "strlen": 0, "set": 1, "incr": 0, "ping": 1} {
		if n := after[cmd] - before[cmd]; n != want {
			t.Errorf("engine ran %s %d times, want %d", cmd, n, want)
		}
	}
	if got := in.Counts(); got[0].Count != 2 || got[1].Count != 2 {
		t.Errorf("rule counts %+v, want 2 and 2", got)
	}
}

// TestInjectWindow: a rule with at: 1s and for: 1s answers GETs with
// its error only while the proxy has run between 1 and 2 s. A client sends
// GETs for 3 s and sorts them by what its own clock proves: answered
// before 1 s from just before the proxy's start, so read before the
// window; sent after 1 s from just after the start and answered before
// 2 s from just before it, so read inside; sent after 2 s from just after
// the start, so read after. No timing margin is needed: each class is
// bounded by the client's own send and reply times. Every GET inside must
// be injected, none outside, and each class must hold enough GETs to mean
// something.
func TestInjectWindow(t *testing.T) {
	srv := redistest.Start(t)
	t0 := time.Now() // at or before the proxy's clock zero
	p, _, in := injectSetup(t, srv, "rules:\n- name: window\n  commands: [GET]\n  at: 1s\n  for: 1s\n  error: \"ERR in the window\"\n")
	t1 := time.Now() // at or after it
	c := injectClient(t, p.Addr(), 5*time.Second)
	ctx := context.Background()
	var pre, inside, post, pending, errs int
	for time.Since(t0) < 3*time.Second+t1.Sub(t0) {
		sent := time.Now()
		hit := injected(t, "GET", c.Get(ctx, "k").Err(), "ERR in the window")
		done := time.Now()
		if hit {
			errs++
		}
		switch {
		case done.Before(t0.Add(time.Second)):
			pre++
			if hit {
				t.Errorf("GET answered %v after the start, before the window: injected", done.Sub(t0))
			}
		case sent.After(t1.Add(time.Second)) && done.Before(t0.Add(2*time.Second)):
			inside++
			if !hit {
				t.Errorf("GET sent %v after the start, answered inside the window: not injected", sent.Sub(t1))
			}
		case sent.After(t1.Add(2 * time.Second)):
			post++
			if hit {
				t.Errorf("GET sent %v after the start, after the window: injected", sent.Sub(t1))
			}
		default:
			pending++ // at an edge: either
		}
		time.Sleep(time.Millisecond)
	}
	t.Logf("GETs before the window %d, inside %d, after %d, at an edge %d; %d injected (start known within %v)",
		pre, inside, post, pending, errs, t1.Sub(t0))
	if pre < 50 || inside < 50 || post < 50 {
		t.Errorf("too few GETs to judge: %d before, %d inside, %d after", pre, inside, post)
	}
	if got := in.Hits(0); got != uint64(errs) {
		t.Errorf("rule counted %d, the client saw %d", got, errs)
	}
}

// TestInjectShardPinned: under --route pinned (by first key) a client's
// requests all go to the shard its first key picked, whatever their keys:
// a rule on the second shard touches every GET of the client pinned there,
// and none of the client pinned to the first shard, even those of keys
// that hash to the second.
func TestInjectShardPinned(t *testing.T) {
	srvs := []*redistest.Server{redistest.Start(t), redistest.Start(t)}
	addrs := []string{srvs[0].Addr(), srvs[1].Addr()} // slots 0-8191 and 8192-16383
	in, err := proxy.ParseInjection("rules.yaml", []byte(fmt.Sprintf(
		"rules:\n- name: second\n  commands: [GET]\n  shards: [%q]\n  error: \"ERR second shard\"\n", addrs[1])))
	if err != nil {
		t.Fatal(err)
	}
	p, _ := proxytest.StartProxy(t, "", func(c *proxy.Config) {
		c.Route, c.Shards, c.PinBy, c.Inject = proxy.RoutePinned, addrs, proxy.PinFirstKey, in
	})
	// A key of each shard, to pin a client by.
	var pin [2]string
	for i := 0; pin[0] == "" || pin[1] == ""; i++ {
		k := fmt.Sprintf("pin:%d", i)
		pin[min(int(routing.Slot([]byte(k))/8192), 1)] = k
	}
	const n = 40
	for sh, key := range pin {
		// A raw RESP2 client whose first request names a key (go-redis
		// sends HELLO alone first, and is pinned round-robin).
		c := redistest.Dial(t, p.Addr())
		c.Roundtrip(t, redistest.Cmd("SET", key, "v"), []byte("+OK\r\n")) // pins c to shard sh
		before := commandstats(t, srvs[sh])["get"]
		want := []byte("$-1\r\n")
		if sh == 1 {
			want = []byte("-ERR second shard\r\n")
		}
		for i := range n {
			c.Roundtrip(t, redistest.Cmd("GET", fmt.Sprintf("k%d", i)), want) // keys of both shards
		}
		_ = c.Close()
		if got := commandstats(t, srvs[sh])["get"] - before; got != int64(n-n*sh) {
			t.Errorf("shard %d ran %d GETs of its pinned client, want %d", sh, got, n-n*sh)
		}
	}
	if got := in.Hits(0); got != n {
		t.Errorf("rule counted %d, want %d", got, n)
	}
}

// TestInjectShardFacade: go-redis ClusterClient through the facade (three
// engines, a virtual node each): a rule on the third engine's address
// touches exactly the GETs of keys that engine's slots hold, each sent by
// the client to that engine's virtual node.
func TestInjectShardFacade(t *testing.T) {
	var in *proxy.Injection
	srvs, p, _ := startFacade(t, 3, func(c *proxy.Config) {
		var err error
		in, err = proxy.ParseInjection("rules.yaml", []byte(fmt.Sprintf(
			"rules:\n- name: third\n  commands: [GET]\n  shards: [%q]\n  error: \"ERR third shard\"\n", c.Shards[2])))
		if err != nil {
			t.Fatal(err)
		}
		c.Inject = in
	})
	c, _ := tappedCluster(t, p.FacadeAddrs()[0])
	ctx := context.Background()
	before := make([]int64, 3)
	for i, s := range srvs {
		before[i] = commandstats(t, s)["get"]
	}
	var want [3]int64
	hits := 0
	for i := range 300 {
		k := fmt.Sprintf("f:%d", i)
		slot := routing.Slot([]byte(k))
		sh := 0
		switch {
		case slot > 10922:
			sh = 2
		case slot > 5460:
			sh = 1
		}
		got := injected(t, "GET "+k, c.Get(ctx, k).Err(), "ERR third shard")
		if got != (sh == 2) {
			t.Errorf("GET %s (slot %d, shard %d): injected %v", k, slot, sh, got)
		}
		if got {
			hits++
		} else {
			want[sh]++
		}
	}
	if hits < 50 {
		t.Fatalf("only %d of 300 keys on the third shard", hits)
	}
	for i, s := range srvs {
		if n := commandstats(t, s)["get"] - before[i]; n != want[i] {
			t.Errorf("engine %d ran %d GETs, want %d", i, n, want[i])
		}
	}
	if got := in.Hits(0); got != uint64(hits) {
		t.Errorf("rule counted %d, the client saw %d", got, hits)
	}
}

// TestInjectShardPhase: under slot routing over two engines, a 20 ms delay
// on the second engine's GETs is that shard's injected phase, as it is the
// GETs': its injected observations are the rule's hits and sum at least
// 20 ms each (less 5 %), the first shard's are none, and the second shard's verdict
// names the injected share.
func TestInjectShardPhase(t *testing.T) {
	srvs := []*redistest.Server{redistest.Start(t), redistest.Start(t)}
	addrs := []string{srvs[0].Addr(), srvs[1].Addr()}
	const delay = 20 * time.Millisecond
	in, err := proxy.ParseInjection("rules.yaml", []byte(fmt.Sprintf(`rules:
- name: far-shard
  commands: [GET]
  shards: [%q]
  delay: %s
`, addrs[1], delay)))
	if err != nil {
		t.Fatal(err)
	}
	p, set := proxytest.StartProxy(t, "", func(c *proxy.Config) {
		c.Route, c.Shards, c.Inject = proxy.RouteSlots, addrs, in
	})
	c := injectClient(t, p.Addr(), 5*time.Second)
	ctx := context.Background()
	for i := range 60 {
		if err := c.Get(ctx, "shardphase:"+strconv.Itoa(i)).Err(); err != nil && err != redis.Nil {
			t.Fatal(err)
		}
	}
	hits := int64(in.Counts()[0].Count)
	if hits < 10 || hits > 50 {
		t.Fatalf("the rule delayed %d of 60 GETs: the keys do not spread over the two shards", hits)
	}
	sn := set.Snapshot()
	redistest.Eventually(t, 2*time.Second, func() error {
		sn = set.Snapshot()
		if n := proxytest.Command(t, set, "get").Phases[metrics.PhaseTotal].Count(); n < 60 {
			return fmt.Errorf("%d GETs timed", n)
		}
		return nil
	})
	for i, addr := range addrs {
		var sh *metrics.ShardStats
		for j := range sn.Shards {
			if sn.Shards[j].Name == addr {
				sh = &sn.Shards[j]
			}
		}
		if sh == nil {
			t.Fatalf("no shard %s", addr)
		}
		inj := sh.Phases[metrics.PhaseInjected]
		switch {
		case i == 0 && inj.Count() != 0:
			t.Errorf("shard 0 has %d injected observations (%v), want none", inj.Count(), inj.Sum)
		case i == 1 && (inj.Count() != hits || inj.Sum < time.Duration(hits)*delay*95/100):
			// The delays' clock fires a delay within microseconds of its
			// due time, either side.
			t.Errorf("shard 1: %d injected observations, %v; want the rule's %d hits, at least %v", inj.Count(), inj.Sum, hits, time.Duration(hits)*delay*95/100)
		}
	}
	v := split.FromShard(nil, sn, addrs[1]).Verdict()
	if v.Injected < 0.5 {
		t.Errorf("shard 1's verdict: injected share %.3f, want most of its time (20 ms of each GET)", v.Injected)
	}
	if txt := v.String(); !strings.Contains(txt, "injected") {
		t.Errorf("shard 1's verdict does not name injected: %q", txt)
	}
}
