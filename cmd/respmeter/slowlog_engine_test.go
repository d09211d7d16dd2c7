package main

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/respmeter/respmeter/internal/redistest"
	"github.com/respmeter/respmeter/metrics/slowlog"
	"github.com/respmeter/respmeter/routing"
)

// TestProxySlowlogEngine: /slowlog?engine=1 of respmeter proxy --route
// slots --cluster over a 3-master cluster with a password holds the
// command log of every master, read with the upstream password: COMMANDLOG
// (slow, large-request, large-reply) where the engine has it (asked of
// the engine directly; Valkey 8.1 and later), else SLOWLOG. The SET of a
// key of each shard, sent through the proxy with a 2,000-byte value, is in
// its own master's log only, labelled by respmeter's command table with
// its key, and on a COMMANDLOG engine also as a large request. Neither the
// password nor a value shows; plain /slowlog has no engine part.
func TestProxySlowlogEngine(t *testing.T) {
	const pw = "s3cret-slowlog-pw"
	cl := redistest.StartClusterWith(t, 3, "--requirepass", pw)
	hasCommandLog := cl.Nodes[0].Client().Do(context.Background(), "COMMANDLOG", "LEN", "slow").Err() == nil
	for _, n := range cl.Nodes {
		if hasCommandLog {
			n.Do("CONFIG", "SET", "commandlog-execution-slower-than", "0")
			n.Do("CONFIG", "SET", "commandlog-request-larger-than", "1000")
		} else {
			n.Do("CONFIG", "SET", "slowlog-log-slower-than", "0")
		}
	}
	p := start(t, []string{"RESPMETER_UPSTREAM_PASSWORD=" + pw}, "proxy",
		"--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0", "--loops", "1",
		"--route", "slots", "--cluster", cl.Addrs()[0])
	m := p.waitFor(t, p.stderr, `msg="proxy listening" component=proxy addr=(\S+)`)
	admin := "http://" + p.waitFor(t, p.stderr, logAddr("admin listening"))[1]
	_, port, _ := strings.Cut(m[1], ":")
	keys := keyPerShard(t)
	value := "value-" + strings.Repeat("v", 2000)
	for _, k := range keys {
		if got := redisCLI(t, port, "--no-auth-warning", "-a", pw, "SET", k, value); got != "OK\n" {
			t.Fatalf("SET %s through the proxy: %q", k, got)
		}
	}
	if body := httpGet(t, admin+"/slowlog"); strings.Contains(body, `"engine"`) {
		t.Errorf("/slowlog without ?engine=1 holds the engine part:\n%s", body)
	}
	body := httpGet(t, admin+"/slowlog?engine=1")
	if strings.Contains(body, pw) || strings.Contains(body, "value-") {
		t.Errorf("/slowlog?engine=1 shows the password or a value:\n%s", body)
	}
	var doc struct {
		Engine []slowlog.EngineLog `json:"engine"`
	}
	if err := json.Unmarshal([]byte(body), &doc); err != nil {
		t.Fatal(err)
	}
	var addrs []string
	wantSource := map[bool]string{true: "commandlog", false: "slowlog"}[hasCommandLog]
	for _, l := range doc.Engine {
		addrs = append(addrs, l.Addr)
		if l.Source != wantSource || l.Error != "" {
			t.Errorf("%s: source %q (%s), want %s", l.Addr, l.Source, l.Error, wantSource)
		}
		for _, k := range keys {
			owner := cl.Nodes[cl.Owner(int(routing.Slot([]byte(k))))].Addr()
			for _, kind := range []string{slowlog.KindSlow, slowlog.KindLargeRequest} {
				has := slices.ContainsFunc(l.Entries, func(e slowlog.EngineEntry) bool {
					return e.Kind == kind && e.Command == "set" && e.FirstKey == k && e.Args == 3 && !e.Respmeter
				})
				if want := l.Addr == owner && (kind == slowlog.KindSlow || hasCommandLog); has != want {
					t.Errorf("%s: %s entry of SET %s: %v, want %v (its owner %s)", l.Addr, kind, k, has, want, owner)
				}
			}
		}
	}
	slices.Sort(addrs)
	want := cl.Addrs()
	slices.Sort(want)
	if !slices.Equal(addrs, want) {
		t.Errorf("/slowlog?engine=1 reads %v, the masters are %v", addrs, want)
	}
	if t.Failed() {
		t.Logf("/slowlog?engine=1:\n%s", body)
	}
	p.signal(t, syscall.SIGTERM)
	p.wait(t)
}
