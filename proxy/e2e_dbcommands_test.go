package proxy_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/respmeter/respmeter/internal/redistest"
	"github.com/respmeter/respmeter/proxy"
	"github.com/respmeter/respmeter/proxy/proxytest"
)

// dbScript is the command sequence of TestClusterDatabaseCommands for a
// client on db and the keys of tag (a hash tag, so every key of one run
// is in one slot whatever the run's prefix): MOVE and COPY ... DB into
// other databases, their answers when the target holds the key, when the
// target is the client's own db or out of range, COPY's REPLACE, a COPY
// across slots and SWAPDB. to and copyTo are the databases it moves and
// copies into.
func dbScript(prefix, tag string, db, to, copyTo int) [][]any {
	k := fmt.Sprintf("%s:{%s}", prefix, tag)
	c := fmt.Sprintf("%s:{%s}:copy", prefix, tag)
	v := fmt.Sprintf("%d:%s", db, tag)
	return [][]any{
		{"SET", k, v},
		{"MOVE", k, to},                                // 1: moved into db to
		{"MOVE", k, to},                                // 0: no key left here
		{"SET", k, v + ":again"},                       //
		{"MOVE", k, to},                                // 0: db to holds k already
		{"COPY", k, c, "DB", copyTo},                   // 1
		{"COPY", k, c, "DB", copyTo},                   // 0: the copy exists
		{"COPY", k, c, "DB", copyTo, "REPLACE"},        // 1
		{"MOVE", k, db},                                // ERR source and destination objects are the same
		{"MOVE", k, 16},                                // ERR DB index is out of range
		{"COPY", k, c, "DB", 16},                       // ERR DB index is out of range
		{"COPY", k, prefix + ":{other}", "DB", copyTo}, // CROSSSLOT
		{"SWAPDB", db, copyTo},                         // ERR SWAPDB is not allowed in cluster mode
		{"GET", k},
	}
}

// TestClusterDatabaseCommands: MOVE, COPY ... DB and SWAPDB on a 3-master
// Valkey 9 cluster with 16 databases behave through --route slots
// --cluster (private and shared upstream connections) and the facade as
// the engine defines them, the engine answering directly being the oracle.
// Two clients, on db 0 and db 3, run the same script (dbScript) on keys of
// 12 hash tags spread over the nodes, first on the engines directly (a
// go-redis ClusterClient), then through each mode with keys of the mode's
// own prefix; each reply must equal the direct run's, and afterwards every
// db of every node must hold, for each mode, the same keys and values the
// direct run left there.
func TestClusterDatabaseCommands(t *testing.T) {
	skipWithoutClusterDatabases(t)
	cl := redistest.StartClusterWith(t, 3, "--cluster-databases", "16")
	ctx := context.Background()
	tags := make([]string, 12)
	for i := range tags {
		tags[i] = fmt.Sprintf("t%d", i)
	}
	clientDBs := []struct{ db, to, copyTo int }{{0, 5, 7}, {3, 6, 8}}
	run := func(name string, client func(db int) redis.UniversalClient) []string {
		var replies []string
		for _, d := range clientDBs {
			c := client(d.db)
			for _, tag := range tags {
				for _, args := range dbScript(name, tag, d.db, d.to, d.copyTo) {
					v, err := c.Do(ctx, args...).Result()
					replies = append(replies, fmt.Sprintf("db %d %v: %v %v", d.db, args[0], v, err))
				}
			}
			_ = c.Close()
		}
		return replies
	}
	want := run("direct", func(db int) redis.UniversalClient {
		return redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), DisableIdentity: true,
			OnConnect: func(ctx context.Context, cn *redis.Conn) error { return cn.Select(ctx, db).Err() }})
	})
	// The script must have reached what it is for: each answer below, as
	// Valkey 9.1 gives it, is in the direct run.
	for _, answer := range []string{"MOVE: 1 <nil>", "MOVE: 0 <nil>", "COPY: 1 <nil>", "COPY: 0 <nil>",
		"source and destination objects are the same", "DB index is out of range", "CROSSSLOT",
		"SWAPDB is not allowed in cluster mode"} {
		if !slices.ContainsFunc(want, func(r string) bool { return strings.Contains(r, answer) }) {
			t.Fatalf("no reply of the engine directly holds %q: %s", answer, strings.Join(want, "\n"))
		}
	}
	wantState := dbState(t, cl, "direct")
	for _, m := range clusterDBModes {
		p, _ := proxytest.StartProxy(t, "", func(c *proxy.Config) {
			c.Route, c.Cluster = proxy.RouteSlots, cl.Nodes[1].Addr()
			m.mod(c)
		})
		got := run(m.name, func(db int) redis.UniversalClient {
			if m.name == "facade" {
				return redis.NewClusterClient(&redis.ClusterOptions{Addrs: p.FacadeAddrs(), DisableIdentity: true,
					OnConnect: func(ctx context.Context, cn *redis.Conn) error { return cn.Select(ctx, db).Err() }})
			}
			return redis.NewClient(&redis.Options{Addr: p.Addr(), DB: db, DisableIdentity: true})
		})
		for i := range want {
			if i >= len(got) || strings.ReplaceAll(got[i], m.name+":", "direct:") != want[i] {
				t.Errorf("%s: reply %d: %q, the engine directly: %q", m.name, i, got[i], want[i])
			}
		}
		if state := dbState(t, cl, m.name); !slices.Equal(state, wantState) {
			t.Errorf("%s: the engines hold\n%s\nthe direct run left\n%s", m.name, strings.Join(state, "\n"), strings.Join(wantState, "\n"))
		}
	}
}

// dbState lists what every db (0-15) of every node of cl holds under
// prefix: "node N db D key=value", the prefix cut off, sorted.
func dbState(t *testing.T, cl *redistest.Cluster, prefix string) []string {
	t.Helper()
	ctx := context.Background()
	var state []string
	for n, node := range cl.Nodes {
		for db := range 16 {
			c := redis.NewClient(&redis.Options{Addr: node.Addr(), DB: db, DisableIdentity: true})
			keys, err := c.Keys(ctx, prefix+":*").Result()
			if err != nil {
				t.Fatalf("node %d db %d: KEYS: %v", n, db, err)
			}
			for _, k := range keys {
				v, err := c.Get(ctx, k).Result()
				if err != nil {
					t.Fatalf("node %d db %d: GET %s: %v", n, db, k, err)
				}
				state = append(state, fmt.Sprintf("node %d db %d %s=%s", n, db, strings.TrimPrefix(k, prefix+":"), v))
			}
			_ = c.Close()
		}
	}
	slices.Sort(state)
	if len(state) == 0 {
		t.Fatalf("no node holds a key of %s", prefix)
	}
	return state
}

// TestFacadeSwapdb: the facade over three standalone engines answers
// SWAPDB on a virtual node as a node of a real cluster of the same engine
// does (refused; compared with a one-master cluster's answer), swapping no
// shard's databases; queued in a transaction it is refused and the EXEC
// aborts. On the plain endpoint, slot-routed, SWAPDB swaps the databases
// of every shard (TestRouteAllShardsCommands checks --route slots).
func TestFacadeSwapdb(t *testing.T) {
	ctx := context.Background()
	cl := redistest.StartCluster(t, 1)
	node := redis.NewClient(&redis.Options{Addr: cl.Nodes[0].Addr(), DisableIdentity: true})
	t.Cleanup(func() { _ = node.Close() })
	want := node.Do(ctx, "SWAPDB", 0, 1).Err()
	if want == nil {
		t.Fatalf("a cluster node of this engine ran SWAPDB")
	}
	srvs, p, _ := startFacade(t, 3, nil)
	for i, s := range srvs {
		s.DoT(t, "SET", fmt.Sprintf("swap:%d", i), "v")
	}
	c := redis.NewClient(&redis.Options{Addr: p.FacadeAddrs()[1], DisableIdentity: true, MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	if err := c.Do(ctx, "SWAPDB", 0, 1).Err(); err == nil || err.Error() != want.Error() {
		t.Errorf("SWAPDB on a virtual node: %v, a cluster node: %v", err, want)
	}
	_, err := c.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Do(ctx, "SWAPDB", 0, 1)
		p.Incr(ctx, "swap:tx")
		return nil
	})
	if err == nil || !strings.HasPrefix(err.Error(), "EXECABORT") {
		t.Errorf("a transaction with SWAPDB on a virtual node: %v, want EXECABORT", err)
	}
	for i, s := range srvs {
		if n := s.DoT(t, "DBSIZE"); fmt.Sprint(n) != "1" {
			t.Errorf("shard %d: db 0 holds %v keys after SWAPDB was refused, want its 1", i, n)
		}
	}
}
