package proxy_test

// Fault injection's reply delays, connection resets and per-connection
// probability (proxy/inject.go, docs/injection.md) against a real
// redis-server, with go-redis as the client.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/respmeter/respmeter/internal/redistest"
	"github.com/respmeter/respmeter/metrics"
	"github.com/respmeter/respmeter/metrics/slowlog"
	"github.com/respmeter/respmeter/proxy"
	"github.com/respmeter/respmeter/proxy/proxytest"
)

// TestInjectReplyDelayForwardsFirst: a reply delay holds the reply, not the
// request. With a 1 s reply delay on INCR, another client sees the
// increment in the engine while the INCR's own caller is still waiting;
// the caller gets its reply after the hold. In a pipeline the held reply
// keeps its place: the GETs sent behind it are answered after it, in
// order, and their wait behind it is injected time, not proxy time.
func TestInjectReplyDelayForwardsFirst(t *testing.T) {
	redistest.MoreProcs(t) // the delays' clock holds a thread (Config.Inject)
	srv := redistest.Start(t)
	srv.DoT(t, "SET", "n", "0")
	p, set, in := injectSetup(t, srv, "rules:\n- name: slow-incr\n  commands: [INCR]\n  reply_delay: 1s\n")
	ctx := context.Background()
	caller, other := injectClient(t, p.Addr(), 5*time.Second), injectClient(t, p.Addr(), 5*time.Second)
	type res struct {
		n   int64
		err error
		at  time.Duration
	}
	done := make(chan res, 1)
	t0 := time.Now()
	go func() {
		n, err := caller.Incr(ctx, "n").Result()
		done <- res{n, err, time.Since(t0)}
	}()
	redistest.Eventually(t, 5*time.Second, func() error {
		v, err := other.Get(ctx, "n").Result()
		if err != nil || v != "1" {
			return fmt.Errorf("the engine holds n = %q (%v), want 1: the INCR was not forwarded", v, err)
		}
		return nil
	})
	select {
	case r := <-done:
		t.Fatalf("the INCR's reply (%d, %v) came %v after it was sent, before the engine's increment was seen elsewhere: not held", r.n, r.err, r.at)
	default:
	}
	r := <-done
	if r.err != nil || r.n != 1 {
		t.Fatalf("INCR: %d, %v", r.n, r.err)
	}
	if r.at < time.Second {
		t.Errorf("INCR answered after %v, want at least the 1s hold", r.at)
	}

	// A pipeline: GET a, INCR n (held), GET b, GET c. The GETs behind the
	// INCR are answered after it, in order.
	srv.DoT(t, "MSET", "a", "A", "b", "B", "c", "C")
	cmds, err := caller.Pipelined(ctx, func(pl redis.Pipeliner) error {
		pl.Get(ctx, "a")
		pl.Incr(ctx, "n")
		pl.Get(ctx, "b")
		pl.Get(ctx, "c")
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	got := fmt.Sprintln(cmds[0].(*redis.StringCmd).Val(), cmds[1].(*redis.IntCmd).Val(), cmds[2].(*redis.StringCmd).Val(), cmds[3].(*redis.StringCmd).Val())
	if got != "A 2 B C\n" {
		t.Errorf("pipeline replies %q, want \"A 2 B C\"", got)
	}
	if got := in.Hits(0); got != 2 {
		t.Errorf("rule counted %d, want 2", got)
	}
	// Metrics: each INCR's injected time is its 1 s hold; the pipeline's
	// GET b and GET c waited behind it (injected, most of 1 s), GET a and
	// the other client's GETs did not.
	if c := e2eWaitCount(t, set, "incr", 2); c.Count != 2 {
		t.Fatalf("%d INCRs timed, want 2", c.Count)
	}
	incr := proxytest.Command(t, set, "incr")
	if h := incr.Phases[metrics.PhaseInjected]; h.Count() != 2 || h.Percentile(0) < 950*time.Millisecond || h.Max() > 1050*time.Millisecond {
		t.Errorf("INCR injected: %d timings, %v to %v, want 2 of 1s", h.Count(), h.Percentile(0), h.Max())
	}
	if p := incr.Phases[metrics.PhaseUpstream].Max(); p > 500*time.Millisecond {
		t.Errorf("INCR upstream max %v: the hold leaked into the engine's time", p)
	}
	if p := incr.Phases[metrics.PhaseProxy].Max(); p > 500*time.Millisecond {
		t.Errorf("INCR proxy max %v: the hold leaked into respmeter's own time", p)
	}
	get := proxytest.Command(t, set, "get")
	if h := get.Phases[metrics.PhaseInjected]; h.Count() != 2 || h.Percentile(0) < 500*time.Millisecond {
		t.Errorf("GET injected: %d timings, min %v; want 2 (b and c, behind the held INCR), each most of 1s", h.Count(), h.Percentile(0))
	}
	if p := get.Phases[metrics.PhaseProxy].Max(); p > 500*time.Millisecond {
		t.Errorf("GET proxy max %v: the wait behind a held reply leaked into respmeter's own time", p)
	}
}

// TestInjectReset: a reset rule on keys boom:* closes the client's
// connection with a TCP RST when such a request comes (go-redis reads
// ECONNRESET), before the engine sees it; the same connection served
// other keys before, another client is untouched, and the rule counts it.
func TestInjectReset(t *testing.T) {
	srv := redistest.Start(t)
	p, set, in := injectSetup(t, srv, "rules:\n- name: boom\n  keys: \"boom:*\"\n  reset: true\n")
	ctx := context.Background()
	victim, other := injectClient(t, p.Addr(), 5*time.Second), injectClient(t, p.Addr(), 5*time.Second)
	for _, c := range []*redis.Client{victim, other} {
		if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	before := commandstats(t, srv)
	// go-redis reports the reset as the connection's end (EOF).
	if err := victim.Set(ctx, "boom:1", "x", 0).Err(); !errors.Is(err, io.EOF) && !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("SET boom:1: %v, want the connection closed", err)
	}
	// On a plain socket the reset is seen as such: a read fails with
	// ECONNRESET (a RST), not an orderly end (a FIN).
	raw, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	if _, err := raw.Write([]byte("*3\r\n$3\r\nSET\r\n$6\r\nboom:2\r\n$1\r\nx\r\n")); err != nil {
		t.Fatal(err)
	}
	_ = raw.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := raw.Read(make([]byte, 64)); !errors.Is(err, syscall.ECONNRESET) {
		t.Errorf("plain socket: read %d bytes, %v; want ECONNRESET", n, err)
	}
	if v, err := other.Get(ctx, "k").Result(); err != nil || v != "v" {
		t.Errorf("other client after the reset: %q, %v", v, err)
	}
	if n := commandstats(t, srv)["set"] - before["set"]; n != 0 {
		t.Errorf("the engine ran %d SETs, want 0: a reset request is not forwarded", n)
	}
	if v := srv.DoT(t, "EXISTS", "boom:1", "boom:2"); v != int64(0) {
		t.Errorf("%v of boom:1, boom:2 exist in the engine", v)
	}
	if got := in.Counts()[0]; got.Count != 2 || got.Effect != "reset" {
		t.Errorf("rule counts %+v, want 2 resets", got)
	}
	servedAgain(t, victim, set) // go-redis dials again
}

// TestInjectPerConnection: probability 0.3 per connection. 300
// connections, opened one after another, send 5 GETs each: every
// connection has all 5 refused or none, 30 % ± 5 % of them are chosen, a
// second proxy with the same seed chooses the very same connections (by
// their order), and one with another seed does not.
func TestInjectPerConnection(t *testing.T) {
	srv := redistest.Start(t)
	srv.DoT(t, "SET", "k", "v")
	ctx := context.Background()
	const conns, per = 300, 5
	chosen := func(seed int) []bool {
		p, _, in := injectSetup(t, srv, "seed: "+strconv.Itoa(seed)+"\nrules:\n- name: some-conns\n  commands: [GET]\n  probability: 0.3\n  per: connection\n  error: ERR chosen\n")
		out := make([]bool, conns)
		refused := 0
		for i := range out {
			c := injectClient(t, p.Addr(), 5*time.Second)
			errs := 0
			for range per {
				switch v, err := c.Get(ctx, "k").Result(); {
				case err != nil && err.Error() == "ERR chosen":
					errs++
				case err != nil || v != "v":
					t.Fatalf("connection %d: GET: %q, %v", i, v, err)
				}
			}
			if errs != 0 && errs != per {
				t.Errorf("connection %d: %d of %d GETs refused, want all or none", i, errs, per)
			}
			out[i] = errs == per
			if out[i] {
				refused += per
			}
			_ = c.Close()
		}
		if got := in.Hits(0); got != uint64(refused) {
			t.Errorf("rule counted %d, the clients saw %d", got, refused)
		}
		return out
	}
	count := func(bs []bool) (n int) {
		for _, b := range bs {
			if b {
				n++
			}
		}
		return n
	}
	a, b, c := chosen(11), chosen(11), chosen(12)
	t.Logf("seed 11: %d of %d connections chosen; seed 12: %d", count(a), conns, count(c))
	for _, x := range [][]bool{a, c} {
		if n := count(x); n < conns*25/100 || n > conns*35/100 {
			t.Errorf("%d of %d connections chosen, want 30 %% ± 5 %%", n, conns)
		}
	}
	same := 0
	for i := range a {
		if a[i] != b[i] {
			t.Errorf("connection %d: chosen %v with seed 11, then %v with seed 11 again", i, a[i], b[i])
		}
		if a[i] == c[i] {
			same++
		}
	}
	if same == conns {
		t.Error("seeds 11 and 12 chose the same connections")
	}
}

// TestInjectSlowLog: the slow log names the rule that delayed a command
// (before forwarding, or its reply) and gives its injected time as the
// "injected" phase (the rule's 200 ms exactly), out of "proxy"; a command no
// rule touched has neither. The delay is long against a busy machine's
// noise: a timer that fires late books its lateness to "proxy" (seen 49 ms
// at load 10), and a leak would put all 200 ms there.
func TestInjectSlowLog(t *testing.T) {
	redistest.MoreProcs(t) // the delays' clock holds a thread (Config.Inject)
	srv := redistest.Start(t)
	srv.DoT(t, "MSET", "d", "1", "r", "2", "k", "3")
	in, err := proxy.ParseInjection("rules.yaml", []byte("rules:\n- name: slow-d\n  commands: [GET]\n  keys: d\n  delay: 200ms\n- name: slow-reply-r\n  commands: [GET]\n  keys: r\n  reply_delay: 200ms\n"))
	if err != nil {
		t.Fatal(err)
	}
	sl := slowlog.New(128, 0)
	p, _ := proxytest.StartProxy(t, srv.Addr(), func(c *proxy.Config) { c.Inject, c.SlowLog = in, sl })
	c := injectClient(t, p.Addr(), 5*time.Second)
	ctx := context.Background()
	for _, k := range []string{"d", "r", "k"} {
		if err := c.Get(ctx, k).Err(); err != nil {
			t.Fatal(err)
		}
	}
	byKey := map[string]slowlog.Entry{}
	redistest.Eventually(t, 2*time.Second, func() error {
		for _, e := range sl.Entries() {
			if e.Command == "get" {
				byKey[e.FirstKey] = e
			}
		}
		if len(byKey) != 3 {
			return fmt.Errorf("slow log GETs of %d keys, want 3", len(byKey))
		}
		return nil
	})
	for k, rule := range map[string]string{"d": "slow-d", "r": "slow-reply-r"} {
		e := byKey[k]
		if e.Rule != rule {
			t.Errorf("GET %s: slow log rule %q, want %q", k, e.Rule, rule)
		}
		if inj := e.Phases["injected"]; inj < 0.1995 || inj > 0.2005 {
			t.Errorf("GET %s: injected %v s, want the rule's 0.2", k, inj)
		}
		if px := e.Phases["proxy"]; px > 0.1 {
			t.Errorf("GET %s: proxy %v s: the injected time leaked into it", k, px)
		}
		if tot := e.Phases["total"]; tot < 0.2 {
			t.Errorf("GET %s: total %v s, less than its 200 ms of injected time", k, tot)
		}
	}
	if e := byKey["k"]; e.Rule != "" || e.Phases["injected"] != 0 {
		t.Errorf("GET k (no rule): rule %q, injected %v", e.Rule, e.Phases["injected"])
	}
	if _, ok := byKey["k"].Phases["injected"]; ok {
		t.Errorf("GET k (no rule) has an injected phase")
	}
}

// TestInjectAtRunTime: a proxy started without rules takes rules added at
// run time (AddInjection) on its next request, on a connection opened
// before; a set with a name in force, or a client-name scope the proxy
// keeps no names for, is refused whole; a removed rule (RemoveInjection)
// touches nothing more, and the engine ran exactly the requests no rule
// answered.
func TestInjectAtRunTime(t *testing.T) {
	srv := redistest.Start(t)
	srv.DoT(t, "SET", "k", "v")
	p, _ := proxytest.StartProxy(t, srv.Addr(), nil)
	c := injectClient(t, p.Addr(), 5*time.Second)
	ctx := context.Background()
	get := func() error {
		v, err := c.Get(ctx, "k").Result()
		if err == nil && v != "v" {
			err = fmt.Errorf("GET k = %q", v)
		}
		return err
	}
	parse := func(rules string) *proxy.Injection {
		in, err := proxy.ParseInjection("rules.yaml", []byte(rules))
		if err != nil {
			t.Fatal(err)
		}
		return in
	}
	before := commandstats(t, srv)["get"]
	if err := get(); err != nil {
		t.Fatal(err)
	}
	if p.Injection() != nil {
		t.Fatal("rules in force at start")
	}
	if err := p.AddInjection(parse("rules:\n- name: no-get\n  commands: [GET]\n  error: ERR refused\n")); err != nil {
		t.Fatal(err)
	}
	if err := get(); err == nil || err.Error() != "ERR refused" {
		t.Errorf("GET after the rule was added: %v, want ERR refused", err)
	}
	for _, bad := range []string{
		"rules:\n- name: other\n  commands: [SET]\n  error: ERR x\n- name: no-get\n  error: ERR y\n",
		"rules:\n- name: by-name\n  clients: [{name: \"w-*\"}]\n  error: ERR x\n",
	} {
		if err := p.AddInjection(parse(bad)); err == nil {
			t.Errorf("AddInjection(%q) took it", bad)
		}
	}
	if got := p.Injection().Counts(); len(got) != 1 || got[0].Rule != "no-get" || got[0].Count != 1 {
		t.Errorf("rules in force after refused adds: %+v, want no-get alone, 1 touched", got)
	}
	if !p.RemoveInjection("no-get") || p.RemoveInjection("no-get") {
		t.Error("RemoveInjection: want true, then false")
	}
	if err := get(); err != nil {
		t.Errorf("GET after the rule was removed: %v", err)
	}
	if p.Injection() != nil {
		t.Error("rules in force after the last was removed")
	}
	if n := commandstats(t, srv)["get"] - before; n != 2 {
		t.Errorf("the engine ran %d GETs, want 2 (before and after the rule)", n)
	}
}
