package proxy_test

// An injected -TRYAGAIN that respmeter's routing retries (retry: true,
// proxy/inject.go tryAgain) as it retries an engine's (link.tryAgain: 10 ms
// doubling to 250 ms, at most 8 retries, then relayed), under --route slots
// over three engines. The client is go-redis with its own retries off, so
// that what it sees is what respmeter relays; the oracles are the engines'
// commandstats, the rule's count and the routing metrics.

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/respmeter/respmeter/internal/redistest"
	"github.com/respmeter/respmeter/metrics"
	"github.com/respmeter/respmeter/proxy"
	"github.com/respmeter/respmeter/proxy/proxytest"
)

const tryAgainText = "TRYAGAIN Multiple keys request during rehashing of slot"

// tryAgainBackoff is the sum of routing's back-offs before it relays a
// -TRYAGAIN retried maxTryAgain (8) times: 10, 20, 40, 80, 160, 250, 250,
// 250 ms.
const tryAgainBackoff = 1060 * time.Millisecond

// startRetry starts three engines and a proxy routing slots over them with
// the rule file rules, and returns them with the engines' SET counts so
// far.
func startRetry(t *testing.T, rules string) ([]*redistest.Server, *proxy.Proxy, *metrics.Set, *proxy.Injection) {
	t.Helper()
	in, err := proxy.ParseInjection("rules.yaml", []byte(rules))
	if err != nil {
		t.Fatal(err)
	}
	srvs, addrs := startShards(t, 3)
	p, set := startRouted(t, proxy.RouteSlots, addrs, func(c *proxy.Config) { c.Inject = in })
	return srvs, p, set, in
}

// setsRun returns the SETs the engines ran, all together.
func setsRun(t *testing.T, srvs []*redistest.Server) int64 {
	t.Helper()
	var n int64
	for _, s := range srvs {
		n += commandstats(t, s)["set"]
	}
	return n
}

// TestInjectTryAgainRetried: a rule answers half the SETs -TRYAGAIN
// (probability 0.5, drawn again at each retry) with retry: the client sees
// no error, each engine runs each of its SETs once, and the rule injected
// more -TRYAGAINs than the client saw (none): each was retried. The seed
// fixes the draws (one client, one event loop: the same sequence in every
// run), and with it no SET draws nine -TRYAGAINs in a row, which would
// exhaust the retries (1 in 512 per SET otherwise). The retries are booked
// as an engine's -TRYAGAIN's: each retried SET's wait from its first
// -TRYAGAIN is redirect penalty and in its upstream time, none of it in the
// injected phase or in respmeter's own (proxy).
func TestInjectTryAgainRetried(t *testing.T) {
	srvs, p, set, in := startRetry(t, `seed: 8
rules:
- name: rehashing
  commands: [SET]
  probability: 0.5
  error: "`+tryAgainText+`"
  retry: true
`)
	c := injectClient(t, p.Addr(), 5*time.Second)
	ctx := context.Background()
	const n = 100
	for i := range n {
		if err := c.Set(ctx, fmt.Sprintf("k:%d", i), "v", 0).Err(); err != nil {
			t.Fatalf("SET k:%d: %v, want OK (the -TRYAGAIN retried by respmeter)", i, err)
		}
	}
	if got := setsRun(t, srvs); got != n {
		t.Errorf("the engines ran %d SETs, want %d (each once)", got, n)
	}
	hits := in.Hits(0)
	r := set.Snapshot().Routing
	t.Logf("%d SETs, %d -TRYAGAIN injected, %d retried", n, hits, r.TryAgainRetries)
	if hits < n/4 {
		t.Fatalf("the rule injected %d -TRYAGAINs for %d SETs at probability 0.5", hits, n)
	}
	if r.TryAgainRetries != int64(hits) {
		t.Errorf("routing retried %d -TRYAGAINs, want every one injected: %d", r.TryAgainRetries, hits)
	}
	// Each SET is recorded once its reply is written: the last may be
	// recorded after the client read it.
	redistest.Eventually(t, 2*time.Second, func() error {
		if got := proxytest.Command(t, set, "set").Count; got != n {
			return fmt.Errorf("%d SETs recorded, want %d", got, n)
		}
		return nil
	})
	pen := set.Snapshot().RedirectPenalty
	cmd := proxytest.Command(t, set, "set")
	if pen.Count() == 0 || pen.Count() > n || pen.Percentile(0) < 9900*time.Microsecond {
		t.Fatalf("redirect penalty: %d, min %v; want one per retried SET, each at least the first back-off (10 ms)", pen.Count(), pen.Percentile(0))
	}
	penSum := time.Duration(pen.Count()) * pen.Mean()
	up := time.Duration(cmd.Phases[metrics.PhaseUpstream].Count()) * cmd.Phases[metrics.PhaseUpstream].Mean()
	own := time.Duration(cmd.Phases[metrics.PhaseProxy].Count()) * cmd.Phases[metrics.PhaseProxy].Mean()
	t.Logf("penalty: %d SETs, %v in all; upstream %v in all; proxy %v in all", pen.Count(), penSum, up, own)
	if up < penSum*99/100 {
		t.Errorf("the SETs' upstream time, %v in all, is less than their redirect penalty, %v: the retries' waits are not booked as upstream", up, penSum)
	}
	if own > penSum/10 {
		t.Errorf("the SETs' proxy time, %v in all, against %v of retries' waits: the waits are booked as respmeter's own", own, penSum)
	}
	if inj := cmd.Phases[metrics.PhaseInjected].Count(); inj != 0 {
		t.Errorf("%d SETs have an injected phase; the retries' waits are routing's", inj)
	}
}

// TestInjectTryAgainRelayed: without retry:, an injected -TRYAGAIN is the
// client's (respmeter's routing retries none), and the engines never see
// the SETs it answered.
func TestInjectTryAgainRelayed(t *testing.T) {
	srvs, p, set, in := startRetry(t, `rules:
- name: rehashing
  commands: [SET]
  keys: "t:*"
  error: "`+tryAgainText+`"
`)
	c := injectClient(t, p.Addr(), 5*time.Second)
	ctx := context.Background()
	const n = 20
	for i := range n {
		if err := c.Set(ctx, fmt.Sprintf("t:%d", i), "v", 0).Err(); err == nil || err.Error() != tryAgainText {
			t.Fatalf("SET t:%d: %v, want the injected -%s", i, err, tryAgainText)
		}
		if err := c.Set(ctx, fmt.Sprintf("k:%d", i), "v", 0).Err(); err != nil {
			t.Fatalf("SET k:%d: %v", i, err)
		}
	}
	if got := setsRun(t, srvs); got != n {
		t.Errorf("the engines ran %d SETs, want the %d outside the rule", got, n)
	}
	if hits := in.Hits(0); hits != n {
		t.Errorf("the rule injected %d -TRYAGAINs, want %d", hits, n)
	}
	if r := set.Snapshot().Routing; r.TryAgainRetries != 0 {
		t.Errorf("routing retried %d -TRYAGAINs, want none", r.TryAgainRetries)
	}
}

// TestInjectTryAgainExhausted: a rule that answers every SET -TRYAGAIN,
// with retry: each SET is retried 8 times over routing's back-offs (1.06 s
// in all) and then the client gets the error: 9 -TRYAGAINs injected per
// SET, 8 retried, none reaching an engine.
func TestInjectTryAgainExhausted(t *testing.T) {
	srvs, p, set, in := startRetry(t, `rules:
- name: rehashing
  commands: [SET]
  error: "`+tryAgainText+`"
  retry: true
`)
	c := injectClient(t, p.Addr(), 5*time.Second)
	ctx := context.Background()
	const n = 3
	for i := range n {
		start := time.Now()
		err := c.Set(ctx, fmt.Sprintf("k:%d", i), "v", 0).Err()
		el := time.Since(start)
		if err == nil || err.Error() != tryAgainText {
			t.Fatalf("SET k:%d: %v, want the injected -%s once the retries are spent", i, err, tryAgainText)
		}
		if el < tryAgainBackoff {
			t.Errorf("SET k:%d answered after %v, before the 8 back-offs (%v)", i, el, tryAgainBackoff)
		}
	}
	if got := setsRun(t, srvs); got != 0 {
		t.Errorf("the engines ran %d SETs, want none", got)
	}
	if hits := in.Hits(0); hits != 9*n {
		t.Errorf("the rule injected %d -TRYAGAINs, want %d (1 + 8 retries per SET)", hits, 9*n)
	}
	sn := set.Snapshot()
	if r := sn.Routing; r.TryAgainRetries != 8*n {
		t.Errorf("routing retried %d -TRYAGAINs, want %d (8 per SET)", r.TryAgainRetries, 8*n)
	}
	if pen := sn.RedirectPenalty; pen.Count() != n || pen.Percentile(0) < tryAgainBackoff*999/1000 {
		t.Errorf("redirect penalty: %d, min %v; want %d, each at least %v", pen.Count(), pen.Percentile(0), n, tryAgainBackoff)
	}
}

// TestInjectTryAgainNeedsRouting: retry: is refused, with the file and
// the rule's line, where respmeter does not route by hash slot (one
// engine: the client retries -TRYAGAIN itself), at start and at run time;
// under --route slots a JSON body (as POST /inject takes) with it is
// accepted.
func TestInjectTryAgainNeedsRouting(t *testing.T) {
	const body = `{"rules": [{"name": "slow", "delay": "1ms"}, {"name": "rehashing", "commands": ["SET"], "error": "TRYAGAIN x", "retry": true}]}`
	refusedOverOneEngine(t, "body", body, `body:1: rules[1]: rule "rehashing": retry needs route slots or facade`, "retry")
	p, err := proxy.New(proxy.Config{Listen: "127.0.0.1:0", Route: proxy.RouteSlots, Shards: []string{"127.0.0.1:6379", "127.0.0.1:6380"}})
	if err != nil {
		t.Fatal(err)
	}
	in, _ := proxy.ParseInjection("body", []byte(body))
	if err := p.AddInjection(in); err != nil {
		t.Errorf("AddInjection of a retry rule under route slots: %v", err)
	}
}

// refusedOverOneEngine checks that the rules of data (a file or body
// named name), of which a rule of effect what needs a slot map respmeter
// routes by, are refused whole over one engine: by New, with want in its
// error, and by AddInjection, which leaves no rule in force.
func refusedOverOneEngine(t *testing.T, name, data, want, what string) {
	t.Helper()
	in, err := proxy.ParseInjection(name, []byte(data))
	if err != nil {
		t.Fatal(err)
	}
	_, err = proxy.New(proxy.Config{Listen: "127.0.0.1:0", Upstream: "127.0.0.1:6379", Inject: in})
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("New with a %s rule over one engine: %v, want %s", what, err, want)
	}
	p, err := proxy.New(proxy.Config{Listen: "127.0.0.1:0", Upstream: "127.0.0.1:6379"})
	if err != nil {
		t.Fatal(err)
	}
	in, _ = proxy.ParseInjection(name, []byte(data))
	if err := p.AddInjection(in); err == nil {
		t.Errorf("AddInjection of a %s rule over one engine: no error", what)
	}
	if p.Injection() != nil {
		t.Errorf("rules in force after a refused %s: %+v", name, p.Injection().Counts())
	}
}

// TestInjectTryAgainWindowFacade: through the facade, a rule answering
// every SET -TRYAGAIN for 500 ms, with retry. A client of a virtual node
// (a cluster client, bound to the node's shard) gets the -TRYAGAIN at once,
// to retry itself; a client of the slot-routed endpoint is retried by
// respmeter until the window closes (its retries at 10, 30, 70, 150, 310
// and 560 ms), and its SET then goes on: OK, the window's end ending the
// retries, each engine-bound SET run once.
func TestInjectTryAgainWindowFacade(t *testing.T) {
	srvs, p, set := startFacade(t, 3, nil)
	k := keysInSlots("k:", 0, 99, 1)[0] // shard 0's, and its node's
	node := injectClient(t, p.FacadeAddrs()[0], 5*time.Second)
	plain := injectClient(t, p.Addr(), 5*time.Second)
	ctx := context.Background()
	for _, c := range []*redis.Client{node, plain} {
		if err := c.Ping(ctx).Err(); err != nil { // connected before the window opens
			t.Fatal(err)
		}
	}
	addRules(t, p, `rules:
- name: rehashing
  commands: [SET]
  for: 500ms
  error: "`+tryAgainText+`"
  retry: true
`)
	start := time.Now()
	if err := node.Set(ctx, k, "v", 0).Err(); err == nil || err.Error() != tryAgainText {
		t.Fatalf("SET %s on the virtual node: %v, want the injected -%s at once", k, err, tryAgainText)
	}
	if err := plain.Set(ctx, k, "v", 0).Err(); err != nil {
		t.Fatalf("SET %s on the slot-routed endpoint: %v, want OK once the window closed", k, err)
	}
	el := time.Since(start)
	if el > 400*time.Millisecond && p.Injection().Hits(0) < 3 {
		t.Skipf("the SETs took %v: too slow a machine to see the retries inside the window", el)
	}
	if el < 500*time.Millisecond {
		t.Errorf("the retried SET answered %v after the window opened, before it closed (500 ms)", el)
	}
	hits := p.Injection().Hits(0)
	r := set.Snapshot().Routing
	t.Logf("SET OK after %v; %d -TRYAGAIN injected, %d retried", el, hits, r.TryAgainRetries)
	if hits < 3 || r.TryAgainRetries != int64(hits)-1 {
		t.Errorf("%d -TRYAGAIN injected, %d retried; want the slot-routed SET's all retried, the virtual node's none", hits, r.TryAgainRetries)
	}
	if got := setsRun(t, srvs); got != 1 {
		t.Errorf("the engines ran %d SETs, want 1 (the slot-routed one, once)", got)
	}
}

// TestInjectTryAgainPipelined: a pipeline of a SET that a retry rule
// answers -TRYAGAIN for 300 ms and a GET behind it. The GET waits behind
// the retried SET (the client's input is held, as behind a delay): both
// are answered once the window closes, in order; the SET's wait is routing's
// (upstream, redirect penalty), the GET's injected.
func TestInjectTryAgainPipelined(t *testing.T) {
	_, p, set, in := startRetry(t, `rules:
- name: rehashing
  commands: [SET]
  keys: "t:*"
  for: 300ms
  error: "`+tryAgainText+`"
  retry: true
`)
	c := injectClient(t, p.Addr(), 5*time.Second)
	ctx := context.Background()
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	var get *redis.StringCmd
	start := time.Now()
	if _, err := c.Pipelined(ctx, func(pl redis.Pipeliner) error {
		pl.Set(ctx, "t:1", "v", 0)
		get = pl.Get(ctx, "t:1")
		return nil
	}); err != nil {
		t.Fatalf("pipeline: %v", err)
	}
	el := time.Since(start)
	if get.Val() != "v" {
		t.Errorf("GET behind the retried SET: %q, want v (run after it)", get.Val())
	}
	if in.Hits(0) < 2 {
		t.Skipf("the pipeline was read %v after the window opened: too slow a machine to see the retries", el)
	}
	redistest.Eventually(t, 2*time.Second, func() error {
		if s, g := proxytest.Command(t, set, "set").Count, proxytest.Command(t, set, "get").Count; s != 1 || g != 1 {
			return fmt.Errorf("%d SETs and %d GETs recorded, want 1 each", s, g)
		}
		return nil
	})
	setCmd, getCmd := proxytest.Command(t, set, "set"), proxytest.Command(t, set, "get")
	if up := setCmd.Phases[metrics.PhaseUpstream].Max(); up < 290*time.Millisecond {
		t.Errorf("the SET's upstream: %v, want the retries' waits (the window, 300 ms)", up)
	}
	if n := setCmd.Phases[metrics.PhaseInjected].Count(); n != 0 {
		t.Errorf("the SET has an injected phase (%d): its waits are routing's", n)
	}
	if inj := getCmd.Phases[metrics.PhaseInjected]; inj.Count() != 1 || inj.Max() < 290*time.Millisecond {
		t.Errorf("the GET's injected phase: %d, max %v; want its wait behind the SET (the window, 300 ms)", inj.Count(), inj.Max())
	}
	if own := getCmd.Phases[metrics.PhaseProxy].Max(); own > 50*time.Millisecond {
		t.Errorf("the GET's proxy time: %v: its wait behind the SET is booked as respmeter's own", own)
	}
}
