package proxy_test

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/respmeter/respmeter/internal/redistest"
	"github.com/respmeter/respmeter/internal/respconn"
	"github.com/respmeter/respmeter/proxy"
	"github.com/respmeter/respmeter/routing/command"
)

// allShardsCase is one command of the built-in (Redis 7.0) table whose
// command tips say request_policy:all_shards or all_nodes: what it is sent
// with, how many of the three shards must run it under --route slots (3:
// broadcast and merged by its response policy; 1: the client's home shard,
// see proxy/shape.go keyless), and what the merged reply must be.
type allShardsCase struct {
	name  string   // command.Info.Name: "dbsize", "script|exists"
	args  []string // the request
	reach int      // shards that run it
	// setup prepares the shards (directly, not through the proxy) and
	// returns anything check needs.
	setup func(t *testing.T, srvs []*redistest.Server) any
	// check judges the reply (the raw RESP frame) and the shards after.
	check func(t *testing.T, srvs []*redistest.Server, reply string, env any)
}

// debugSleeps runs DEBUG SLEEP 0.25 i+1 times on shard i with a slow log
// threshold of 200 ms: 6 slow-log entries in all, and none from anything
// else however busy the machine is (a loaded host took 23 ms for an INFO).
func debugSleeps(t *testing.T, srvs []*redistest.Server) any {
	for i, s := range srvs {
		s.DoT(t, "CONFIG", "SET", "slowlog-log-slower-than", "200000")
		s.DoT(t, "SLOWLOG", "RESET")
		for range i + 1 {
			s.DoT(t, "DEBUG", "SLEEP", "0.25")
		}
	}
	return nil
}

// quietSlowLog empties every shard's slow log and turns it off.
func quietSlowLog(t *testing.T, srvs []*redistest.Server) any {
	for _, s := range srvs {
		s.DoT(t, "CONFIG", "SET", "slowlog-log-slower-than", "-1")
		s.DoT(t, "SLOWLOG", "RESET")
	}
	return nil
}

func wantReply(want string) func(*testing.T, []*redistest.Server, string, any) {
	return func(t *testing.T, _ []*redistest.Server, reply string, _ any) {
		t.Helper()
		if reply != want {
			t.Errorf("reply %q, want %q", reply, want)
		}
	}
}

func wantPrefix(pfx string) func(*testing.T, []*redistest.Server, string, any) {
	return func(t *testing.T, _ []*redistest.Server, reply string, _ any) {
		t.Helper()
		if !strings.HasPrefix(reply, pfx) {
			t.Errorf("reply %q, want it to start with %q", reply, pfx)
		}
	}
}

// eachShard checks f on every shard after the command.
func eachShard(want string, f func(s *redistest.Server, t *testing.T) any) func(*testing.T, []*redistest.Server, string, any) {
	return func(t *testing.T, srvs []*redistest.Server, reply string, _ any) {
		t.Helper()
		if reply != want {
			t.Errorf("reply %q, want %q", reply, want)
		}
		for i, s := range srvs {
			if got := fmt.Sprint(f(s, t)); got != "0" && got != "[]" {
				t.Errorf("shard %d after the command: %s, want none left", i, got)
			}
		}
	}
}

// fcallEverywhere checks the reply, then that every shard runs the
// library's function (loaded or restored through the proxy).
func fcallEverywhere(want string) func(*testing.T, []*redistest.Server, string, any) {
	return func(t *testing.T, srvs []*redistest.Server, reply string, _ any) {
		t.Helper()
		if reply != want {
			t.Errorf("reply %q, want %q", reply, want)
		}
		for i, s := range srvs {
			if got := fmt.Sprint(s.DoT(t, "FCALL", "allshards_f", "0")); got != "1" {
				t.Errorf("shard %d: FCALL after the command through the proxy = %s, want 1", i, got)
			}
		}
	}
}

const allShardsLib = "#!lua name=allshardslib\nredis.register_function('allshards_f', function() return 1 end)"

func allShardsCases() []allShardsCase {
	keysOn := func(t *testing.T, srvs []*redistest.Server) any {
		for i, s := range srvs {
			for j := range i + 1 {
				s.DoT(t, "SET", fmt.Sprintf("as:%d:%d", i, j), "v")
			}
		}
		return nil
	}
	dbsize := func(s *redistest.Server, t *testing.T) any { return s.DoT(t, "DBSIZE") }
	libs := func(s *redistest.Server, t *testing.T) any { return s.DoT(t, "FUNCTION", "LIST") }
	loadLib := func(t *testing.T, srvs []*redistest.Server) any {
		for _, s := range srvs {
			s.DoT(t, "FUNCTION", "LOAD", "REPLACE", allShardsLib)
		}
		return nil
	}
	scriptSHA := func(t *testing.T, srvs []*redistest.Server) any {
		sha := srvs[0].DoT(t, "SCRIPT", "LOAD", "return 'allshards'").(string)
		srvs[2].DoT(t, "SCRIPT", "LOAD", "return 'allshards'")
		return sha // shard 1 lacks it
	}
	return []allShardsCase{
		{name: "dbsize", args: []string{"DBSIZE"}, reach: 3, setup: keysOn, check: wantReply(":6\r\n")},
		{name: "keys", args: []string{"KEYS", "as:*"}, reach: 3, setup: keysOn,
			check: func(t *testing.T, _ []*redistest.Server, reply string, _ any) {
				// Six bulk strings, whatever their order (concatenated
				// shard by shard).
				lines := strings.Split(strings.TrimSuffix(reply, "\r\n"), "\r\n")
				var keys []string
				for i := 2; i < len(lines); i += 2 {
					keys = append(keys, lines[i])
				}
				sort.Strings(keys)
				want := []string{"as:0:0", "as:1:0", "as:1:1", "as:2:0", "as:2:1", "as:2:2"}
				if lines[0] != "*6" || !slices.Equal(keys, want) {
					t.Errorf("reply %q, want the six keys of the three shards", reply)
				}
			}},
		{name: "flushall", args: []string{"FLUSHALL"}, reach: 3, setup: keysOn, check: eachShard("+OK\r\n", dbsize)},
		{name: "flushdb", args: []string{"FLUSHDB"}, reach: 3, setup: keysOn, check: eachShard("+OK\r\n", dbsize)},
		// No engine tips it; routed as tipsFallback says: db 0 of every
		// shard swapped with the empty db 9.
		{name: "swapdb", args: []string{"SWAPDB", "0", "9"}, reach: 3, setup: keysOn, check: eachShard("+OK\r\n", dbsize)},
		{name: "function|load", args: []string{"FUNCTION", "LOAD", "REPLACE", allShardsLib}, reach: 3,
			check: fcallEverywhere("$12\r\nallshardslib\r\n")},
		{name: "function|delete", args: []string{"FUNCTION", "DELETE", "allshardslib"}, reach: 3, setup: loadLib, check: eachShard("+OK\r\n", libs)},
		{name: "function|flush", args: []string{"FUNCTION", "FLUSH"}, reach: 3, setup: loadLib, check: eachShard("+OK\r\n", libs)},
		{name: "function|restore", args: nil, reach: 3, // args: the dump, set by setup
			setup: func(t *testing.T, srvs []*redistest.Server) any {
				loadLib(t, srvs[:1])
				dump := srvs[0].DoT(t, "FUNCTION", "DUMP").(string)
				srvs[0].DoT(t, "FUNCTION", "FLUSH")
				return dump
			},
			check: fcallEverywhere("+OK\r\n")},
		{name: "function|kill", args: []string{"FUNCTION", "KILL"}, reach: 3, check: wantPrefix("-NOTBUSY")},
		{name: "script|kill", args: []string{"SCRIPT", "KILL"}, reach: 3, check: wantPrefix("-NOTBUSY")},
		{name: "script|load", args: []string{"SCRIPT", "LOAD", "return 'allshards'"}, reach: 3,
			check: func(t *testing.T, srvs []*redistest.Server, reply string, _ any) {
				sha := strings.Split(reply, "\r\n")[1]
				for i, s := range srvs {
					if got := fmt.Sprint(s.DoT(t, "SCRIPT", "EXISTS", sha)); got != "[1]" {
						t.Errorf("shard %d: SCRIPT EXISTS after SCRIPT LOAD through the proxy = %s, want [1]", i, got)
					}
				}
			}},
		{name: "script|exists", args: nil, reach: 3, setup: scriptSHA, check: wantReply("*2\r\n:0\r\n:0\r\n")},
		{name: "script|flush", args: []string{"SCRIPT", "FLUSH"}, reach: 3, setup: scriptSHA,
			check: func(t *testing.T, srvs []*redistest.Server, reply string, env any) {
				if reply != "+OK\r\n" {
					t.Errorf("reply %q, want +OK", reply)
				}
				for i, s := range srvs {
					if got := fmt.Sprint(s.DoT(t, "SCRIPT", "EXISTS", env.(string))); got != "[0]" {
						t.Errorf("shard %d still has the script after SCRIPT FLUSH through the proxy: %s", i, got)
					}
				}
			}},
		{name: "slowlog|len", args: []string{"SLOWLOG", "LEN"}, reach: 3, setup: debugSleeps, check: wantReply(":6\r\n")},
		{name: "slowlog|reset", args: []string{"SLOWLOG", "RESET"}, reach: 3, setup: debugSleeps,
			check: eachShard("+OK\r\n", func(s *redistest.Server, t *testing.T) any { return s.DoT(t, "SLOWLOG", "LEN") })},
		{name: "latency|reset", args: []string{"LATENCY", "RESET"}, reach: 3, check: wantPrefix(":")},
		{name: "memory|purge", args: []string{"MEMORY", "PURGE"}, reach: 3, check: wantReply("+OK\r\n")},
		{name: "wait", args: []string{"WAIT", "0", "100"}, reach: 3, check: wantReply(":0\r\n")},
		{name: "config|resetstat", args: []string{"CONFIG", "RESETSTAT"}, reach: 3, check: wantReply("+OK\r\n")},
		// No config file: every shard refuses, and that error is relayed.
		{name: "config|rewrite", args: []string{"CONFIG", "REWRITE"}, reach: 3, check: wantPrefix("-ERR")},
		// The home shard: a liveness check of the connection, a setting
		// an operator changes per node, and replies a cluster client shows
		// per node (response_policy:special) or that no policy merges.
		{name: "ping", args: []string{"PING"}, reach: 1, check: wantReply("+PONG\r\n")},
		{name: "config|set", args: []string{"CONFIG", "SET", "maxmemory-samples", "5"}, reach: 1, check: wantReply("+OK\r\n")},
		{name: "info", args: []string{"INFO", "server"}, reach: 1, check: wantPrefix("$")},
		{name: "randomkey", args: []string{"RANDOMKEY"}, reach: 1, check: wantReply("$-1\r\n")},
		{name: "function|stats", args: []string{"FUNCTION", "STATS"}, reach: 1, check: wantPrefix("*")},
		{name: "memory|doctor", args: []string{"MEMORY", "DOCTOR"}, reach: 1, check: wantPrefix("$")},
		{name: "memory|malloc-stats", args: []string{"MEMORY", "MALLOC-STATS"}, reach: 1, check: wantPrefix("$")},
		{name: "memory|stats", args: []string{"MEMORY", "STATS"}, reach: 1, check: wantPrefix("*")},
		{name: "latency|doctor", args: []string{"LATENCY", "DOCTOR"}, reach: 1, check: wantPrefix("$")},
		{name: "latency|graph", args: []string{"LATENCY", "GRAPH", "command"}, reach: 1, check: wantPrefix("-ERR")},
		{name: "latency|histogram", args: []string{"LATENCY", "HISTOGRAM", "set"}, reach: 1, check: wantPrefix("*")},
		{name: "latency|history", args: []string{"LATENCY", "HISTORY", "command"}, reach: 1, check: wantReply("*0\r\n")},
		{name: "latency|latest", args: []string{"LATENCY", "LATEST"}, reach: 1, check: wantReply("*0\r\n")},
		{name: "slowlog|get", args: []string{"SLOWLOG", "GET"}, reach: 1, setup: quietSlowLog, check: wantReply("*0\r\n")},
	}
}

// builtinAllShards lists the names of the built-in table's commands and
// subcommands whose tips send them to all shards or all nodes.
func builtinAllShards() []string {
	var out []string
	add := func(i *command.Info) {
		for _, tip := range i.Tips {
			if tip == "request_policy:all_shards" || tip == "request_policy:all_nodes" {
				out = append(out, i.Name)
				return
			}
		}
	}
	for _, n := range command.Names() {
		info := command.Lookup([]byte(n)).Info()
		add(info)
		for _, sub := range info.Subcommands {
			add(sub)
		}
	}
	// Listed by 7.0 with no tips, and routed by those of 7.2, or for SWAPDB
	// as FLUSHDB (proxy/shape.go tipsFallback).
	out = append(out, "config|resetstat", "config|rewrite", "swapdb")
	sort.Strings(out)
	return out
}

// tips72 are the tips Redis 7.2 gives the commands 7.0 lists with none.
var tips72 = []string{"request_policy:all_nodes", "response_policy:all_succeeded"}

// callsOf returns the calls of every command the shard counted
// (INFO commandstats: "cmdstat_script|exists:calls=3,...").
func callsOf(t *testing.T, s *redistest.Server) map[string]int {
	t.Helper()
	out := map[string]int{}
	for _, line := range strings.Split(s.DoT(t, "INFO", "commandstats").(string), "\r\n") {
		name, rest, ok := strings.Cut(strings.TrimPrefix(line, "cmdstat_"), ":calls=")
		if !ok {
			continue
		}
		n, _ := strconv.Atoi(rest[:strings.IndexByte(rest, ',')])
		out[name] = n
	}
	return out
}

// TestRouteAllShardsCommands: every command of the built-in (Redis 7.0)
// table whose command tips say request_policy:all_shards or all_nodes has
// a case here (the test fails on one without), and under --route slots
// over three redis-servers each one reaches the shards its policy says
// (counted by the shards' own commandstats) with the reply its response
// policy gives: agg_sum summed, agg_logical_and and'ed, agg_min the least,
// all_succeeded the first unless an error, one_succeeded OK if any shard
// succeeded else an error, KEYS concatenated; response_policy:special and
// the rest answered by the home shard. A case is skipped, saying so, where
// the engine under test tips the command otherwise than 7.0 does.
func TestRouteAllShardsCommands(t *testing.T) {
	cases := allShardsCases()
	var have []string
	for _, c := range cases {
		have = append(have, c.name)
	}
	sort.Strings(have)
	if want := builtinAllShards(); !slices.Equal(have, want) {
		t.Fatalf("cases cover %q,\nthe 7.0 table's all-shards commands are %q", have, want)
	}
	var srvs []*redistest.Server
	var addrs []string
	for range 3 {
		s := redistest.Start(t, "--enable-debug-command", "yes")
		srvs, addrs = append(srvs, s), append(addrs, s.Addr())
	}
	engineTips, err := command.FetchInfo(context.Background(), addrs[0], 5*time.Second, respconn.Options{})
	if err != nil {
		t.Fatal(err)
	}
	p, _ := startRouted(t, proxy.RouteSlots, addrs, nil)
	for _, tc := range cases {
		t.Run(strings.ReplaceAll(tc.name, "|", "_"), func(t *testing.T) {
			parent, sub, _ := strings.Cut(tc.name, "|")
			var ei *command.Info
			if e := engineTips[parent]; e != nil {
				ei = e
				if sub != "" {
					ei = e.Subcommand([]byte(sub))
				}
			}
			bi := command.Lookup([]byte(parent)).Info()
			if sub != "" {
				bi = bi.Subcommand([]byte(sub))
			}
			want := bi.Tips
			if parent == "config" && (sub == "resetstat" || sub == "rewrite") && len(ei.Tips) > 0 {
				want = tips72
			}
			if ei == nil || !slices.Equal(ei.Tips, want) {
				t.Skipf("the engine tips %s otherwise than Redis 7.0 (%v)", tc.name, ei)
			}
			for _, s := range srvs {
				s.Flush()
				s.DoT(t, "SCRIPT", "FLUSH")
				s.DoT(t, "FUNCTION", "FLUSH")
			}
			var env any
			if tc.setup != nil {
				env = tc.setup(t, srvs)
			}
			args := tc.args
			switch tc.name {
			case "function|restore":
				args = []string{"FUNCTION", "RESTORE", env.(string)}
			case "script|exists":
				args = []string{"SCRIPT", "EXISTS", env.(string), env.(string)}
			}
			var before []map[string]int
			for _, s := range srvs {
				before = append(before, callsOf(t, s))
			}
			c := redistest.Dial(t, p.Addr())
			defer c.Close()
			c.Send(t, respCmd(args...))
			reply, err := c.ReadFrame(10 * time.Second)
			if err != nil {
				t.Fatalf("%s: %v", tc.name, err)
			}
			tc.check(t, srvs, string(reply), env)
			if tc.name == "config|resetstat" {
				// It resets the counters it would be counted by: a shard
				// it reached no longer counts the INFO read before it.
				for i, s := range srvs {
					if n := callsOf(t, s)["info"]; n != 0 {
						t.Errorf("shard %d still counts %d INFO from before CONFIG RESETSTAT: the reset did not reach it", i, n)
					}
				}
				return
			}
			reached := 0
			for i, s := range srvs {
				after := callsOf(t, s)
				n := after[tc.name] - before[i][tc.name]
				if tc.name == "info" {
					n-- // callsOf's own INFO before
				}
				if n > 0 {
					reached++
				}
			}
			if reached != tc.reach {
				t.Errorf("%s ran on %d shards, want %d", tc.name, reached, tc.reach)
			}
		})
	}
}

// TestRouteWaitReplicas: WAIT (request_policy:all_shards,
// response_policy:agg_min) under --route slots answers how many replicas
// acknowledged the client's writes on every shard. Three shards, each
// with a replica: after writes on all three, WAIT 1 answers 1 at once
// (well before its 10 s timeout). Take the replica of one shard away:
// the client's write there is acknowledged by none, and WAIT 1 500 gives
// 0 after its timeout (the fewest over the shards; a replicated shard
// alone would have said 1).
func TestRouteWaitReplicas(t *testing.T) {
	srvs, addrs := startShards(t, 3)
	var replicas []*redistest.Server
	for _, m := range srvs {
		replicas = append(replicas, redistest.Start(t, "--replicaof", "127.0.0.1", strconv.Itoa(m.Port())))
	}
	for i, r := range replicas {
		redistest.Eventually(t, 20*time.Second, func() error {
			if info := r.DoT(t, "INFO", "replication").(string); !strings.Contains(info, "master_link_status:up") {
				return fmt.Errorf("replica of shard %d not in sync yet", i)
			}
			return nil
		})
	}
	p, _ := startRouted(t, proxy.RouteSlots, addrs, nil)
	ctx := context.Background()
	c := goRedis(t, p.Addr())
	write := func() {
		t.Helper()
		for i := range 30 { // keys on every shard
			if err := c.Set(ctx, fmt.Sprintf("wait:%d", i), "v", 0).Err(); err != nil {
				t.Fatal(err)
			}
		}
	}
	write()
	t0 := time.Now()
	n, err := c.Wait(ctx, 1, 10*time.Second).Result()
	if took := time.Since(t0); err != nil || n != 1 || took > 5*time.Second {
		t.Fatalf("WAIT 1 10000 with every shard replicated = %d, %v after %v; want 1 at once", n, err, took)
	}
	replicas[2].DoT(t, "REPLICAOF", "NO", "ONE")
	redistest.Eventually(t, 20*time.Second, func() error {
		if info := srvs[2].DoT(t, "INFO", "replication").(string); !strings.Contains(info, "connected_slaves:0") {
			return fmt.Errorf("shard 2 still has its replica")
		}
		return nil
	})
	write()
	if n, err := c.Wait(ctx, 1, 500*time.Millisecond).Result(); err != nil || n != 0 {
		t.Fatalf("WAIT 1 500 with shard 2 unreplicated = %d, %v; want 0 (the fewest over the shards)", n, err)
	}
}
