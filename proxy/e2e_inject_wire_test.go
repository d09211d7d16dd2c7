package proxy_test

// Fault injection's wire effects, bandwidth and slicer (proxy/injwire.go,
// docs/injection.md), against a real redis-server: raw clients that
// timestamp each read, and go-redis.

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/respmeter/respmeter/internal/redistest"
	"github.com/respmeter/respmeter/metrics"
	"github.com/respmeter/respmeter/metrics/slowlog"
	"github.com/respmeter/respmeter/proxy"
	"github.com/respmeter/respmeter/proxy/proxytest"
)

// timedRead is one read of a client: when it returned, from the request's
// write, and how many bytes it took.
type timedRead struct {
	at time.Duration
	n  int
}

// readTimed reads from c until it holds n bytes (or fails t after
// timeout), timing each read from t0.
func readTimed(t *testing.T, c net.Conn, n int, t0 time.Time, timeout time.Duration) ([]byte, []timedRead) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(timeout))
	buf := make([]byte, 0, n)
	var reads []timedRead
	tmp := make([]byte, 64<<10)
	for len(buf) < n {
		k, err := c.Read(tmp)
		if k > 0 {
			buf = append(buf, tmp[:k]...)
			reads = append(reads, timedRead{time.Since(t0), k})
		}
		if err != nil {
			t.Fatalf("read %d of %d bytes: %v", len(buf), n, err)
		}
	}
	return buf, reads
}

// wireValue returns n bytes of random printable text: a value whose reply
// a reordered or lost slice would change.
func wireValue(n int) string {
	r := rand.New(rand.NewPCG(uint64(n), 7))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte('a' + r.IntN(26))
	}
	return string(b)
}

// directGet returns the engine's own reply to GET key, as bytes.
func directGet(t *testing.T, srv *redistest.Server, key string) []byte {
	t.Helper()
	c := redistest.Dial(t, srv.Addr())
	defer c.Close()
	c.Send(t, redistest.Cmd("GET", key))
	b, err := c.ReadFrame(5 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestInjectBandwidth: bandwidth: 100KB/s on the key big. A raw client's
// GET of its 200,000-byte value gets the engine's reply intact, paced:
// its last byte about 2 s after the request (200,011 bytes at 100,000
// bytes/s), about half of it by 1 s. Another client, out of scope, gets
// the same size meanwhile at once. respmeter books the 2 s as the GET's
// injected phase (the client's own clock in the same run is the oracle),
// none of it as upstream or proxy, and the slow log names the rule.
func TestInjectBandwidth(t *testing.T) {
	redistest.MoreProcs(t) // the delays' clock holds a thread (Config.Inject)
	srv := redistest.Start(t)
	val := wireValue(200_000)
	srv.DoT(t, "MSET", "big", val, "other", val)
	want := directGet(t, srv, "big")
	in, err := proxy.ParseInjection("rules.yaml", []byte("rules:\n- name: thin-pipe\n  keys: big\n  bandwidth: 100KB/s\n"))
	if err != nil {
		t.Fatal(err)
	}
	sl := slowlog.New(128, 0)
	p, set := proxytest.StartProxy(t, srv.Addr(), func(c *proxy.Config) { c.Inject, c.SlowLog = in, sl })
	other := injectClient(t, p.Addr(), 5*time.Second)
	c := redistest.Dial(t, p.Addr()).TCP()

	t0 := time.Now()
	if _, err := c.Write(redistest.Cmd("GET", "big")); err != nil {
		t.Fatal(err)
	}
	// The other client, out of scope, while the rule paces the first.
	otherDone := make(chan time.Duration, 1)
	go func() {
		o0 := time.Now()
		if v, err := other.Get(context.Background(), "other").Result(); err != nil || v != val {
			t.Errorf("the other client's GET: %d bytes, %v", len(v), err)
		}
		otherDone <- time.Since(o0)
	}()
	got, reads := readTimed(t, c, len(want), t0, 10*time.Second)
	if !bytes.Equal(got, want) {
		t.Fatalf("the paced reply (%d bytes) differs from the engine's (%d bytes)", len(got), len(want))
	}
	seen := reads[len(reads)-1].at
	truth := time.Duration(float64(len(want)) / 100_000 * float64(time.Second))
	if seen < truth-100*time.Millisecond || seen > truth+600*time.Millisecond {
		t.Errorf("the reply's last byte came %v after the request, want about %v (200,011 bytes at 100 KB/s)", seen, truth)
	}
	by1s := 0
	for _, r := range reads {
		if r.at <= time.Second {
			by1s += r.n
		}
	}
	if by1s < len(want)*3/10 || by1s > len(want)*7/10 {
		t.Errorf("%d of %d bytes by 1 s, want about half: not paced", by1s, len(want))
	}
	otherTook := <-otherDone
	if otherTook > 500*time.Millisecond {
		t.Errorf("the other client's GET took %v, want it unaffected", otherTook)
	}
	if n := in.Hits(0); n != 1 {
		t.Errorf("rule counted %d, want 1", n)
	}
	if c := e2eWaitCount(t, set, "get", 2); c.Count != 2 {
		t.Fatalf("%d GETs timed, want 2", c.Count)
	}
	get := proxytest.Command(t, set, "get")
	h := get.Phases[metrics.PhaseInjected]
	if inj := h.Max(); h.Count() != 1 || inj < truth*95/100 || inj > truth*105/100 || inj > seen {
		t.Errorf("GET injected: %d timings, %v; want 1 of about %v, the client saw %v", h.Count(), inj, truth, seen)
	}
	if d := get.Phases[metrics.PhaseUpstream].Max(); d > 300*time.Millisecond {
		t.Errorf("GET upstream max %v: the pacing leaked into the engine's time", d)
	}
	if d := get.Phases[metrics.PhaseProxy].Max(); d > 300*time.Millisecond {
		t.Errorf("GET proxy max %v: the pacing leaked into respmeter's own time", d)
	}
	t.Logf("last byte after %v (truth %v), %d of %d bytes by 1 s, in %d reads; injected %v; the other client's GET %v", seen, truth, by1s, len(want), len(reads), h.Max(), otherTook)
	var ent *slowlog.Entry
	redistest.Eventually(t, 2*time.Second, func() error {
		for _, e := range sl.Entries() {
			if e.FirstKey == "big" {
				ent = &e
				return nil
			}
		}
		return fmt.Errorf("no slow log entry of GET big")
	})
	if ent.Rule != "thin-pipe" || ent.Phases["injected"] < truth.Seconds()*0.95 {
		t.Errorf("slow log: rule %q, injected %v s; want thin-pipe, about %v", ent.Rule, ent.Phases["injected"], truth)
	}
}

// TestInjectSlicer: slicer: {average_size: 1000, size_variation: 500,
// delay: 20ms} on the keys sliced*. A raw client's GET of a 20,000-byte
// value gets the engine's reply intact in many reads, 20 ms apart, of
// 500 to 1500 bytes; respmeter's injected phase is the slices' delays,
// as the client's reads span them. A go-redis pipeline of GETs in and out
// of scope and a SET gets every reply, in order.
func TestInjectSlicer(t *testing.T) {
	redistest.MoreProcs(t) // the delays' clock holds a thread (Config.Inject)
	srv := redistest.Start(t)
	val, small := wireValue(20_000), wireValue(3_000)
	srv.DoT(t, "MSET", "sliced1", val, "sliced2", small, "plain", small)
	want := directGet(t, srv, "sliced1")
	p, set, in := injectSetup(t, srv, "rules:\n- name: chop\n  keys: \"sliced*\"\n  slicer: {average_size: 1000, size_variation: 500, delay: 20ms}\n")
	c := redistest.Dial(t, p.Addr()).TCP()
	t0 := time.Now()
	if _, err := c.Write(redistest.Cmd("GET", "sliced1")); err != nil {
		t.Fatal(err)
	}
	got, reads := readTimed(t, c, len(want), t0, 10*time.Second)
	if !bytes.Equal(got, want) {
		t.Fatalf("the sliced reply (%d bytes) differs from the engine's (%d bytes)", len(got), len(want))
	}
	// 20,011 bytes in slices of 500 to 1500: 14 to 41 of them. A read
	// late by a delay takes two slices; a few may.
	big, gaps := 0, make([]time.Duration, 0, len(reads))
	for i, r := range reads {
		if r.n > 1500 {
			big++
		}
		if i > 0 {
			gaps = append(gaps, r.at-reads[i-1].at)
		}
	}
	if len(reads) < 10 || big > len(reads)/5 {
		t.Errorf("%d reads, %d of them over 1500 bytes: want at least 10, nearly all of one slice", len(reads), big)
	}
	slices.Sort(gaps)
	if g := gaps[len(gaps)/2]; g < 15*time.Millisecond || g > 60*time.Millisecond {
		t.Errorf("median gap between reads %v, want about the 20 ms delay", g)
	}
	span := reads[len(reads)-1].at - reads[0].at
	if c := e2eWaitCount(t, set, "get", 1); c.Count != 1 {
		t.Fatalf("%d GETs timed, want 1", c.Count)
	}
	inj := proxytest.Command(t, set, "get").Phases[metrics.PhaseInjected].Max()
	if inj < 13*20*time.Millisecond || inj%(20*time.Millisecond) > time.Millisecond && inj%(20*time.Millisecond) < 19*time.Millisecond {
		t.Errorf("GET injected %v, want a multiple of the 20 ms delay, at least 13 of them", inj)
	}
	t.Logf("%d reads (%d over 1500 bytes), median gap %v, span %v; injected %v", len(reads), big, gaps[len(gaps)/2], span, inj)
	if d := span - inj; d < -60*time.Millisecond || d > 60*time.Millisecond {
		t.Errorf("the client's reads spanned %v, respmeter's injected time is %v", span, inj)
	}

	// A pipeline: the sliced replies keep their place among the others.
	ctx := context.Background()
	gc := injectClient(t, p.Addr(), 10*time.Second)
	cmds, err := gc.Pipelined(ctx, func(pl redis.Pipeliner) error {
		pl.Get(ctx, "sliced2")
		pl.Get(ctx, "plain")
		pl.Set(ctx, "k", "v", 0)
		pl.Get(ctx, "sliced1")
		pl.Get(ctx, "sliced2")
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for i, w := range []string{small, small, "OK", val, small} {
		var v string
		switch c := cmds[i].(type) {
		case *redis.StringCmd:
			v = c.Val()
		case *redis.StatusCmd:
			v = c.Val()
		}
		if v != w {
			t.Errorf("pipeline reply %d: %d bytes, want %d", i, len(v), len(w))
		}
	}
	if n := in.Hits(0); n != 4 {
		t.Errorf("rule counted %d, want 4", n)
	}
}

// TestInjectWireLeave: a client whose reply a bandwidth rule holds
// (100,000 bytes at 100 KB/s: 1 s) gets it whole before the reply to a
// QUIT sent behind it, then the end of the connection; a client that
// half-closes after its GET gets it whole too, then the end; a client that
// closes while its reply is paced is forgotten (no request in flight, its
// connection gone) and leaves nothing behind (goroutines, descriptors).
// With a client output limit of 64 KiB, a held reply of 150,000 bytes
// counts against it, as any reply held: over twice the limit, the client
// is evicted at once.
func TestInjectWireLeave(t *testing.T) {
	redistest.VerifyNoLeaks(t)
	redistest.MoreProcs(t) // the delays' clock holds a thread (Config.Inject)
	srv := redistest.Start(t)
	val := wireValue(100_000)
	srv.DoT(t, "MSET", "big", val, "big2", wireValue(150_000), "k", "v")
	want := directGet(t, srv, "big")
	rules := "rules:\n- name: thin-pipe\n  keys: big*\n  bandwidth: 100KB/s\n"
	p, set, _ := injectSetup(t, srv, rules)

	// GET, then QUIT behind it.
	c := redistest.Dial(t, p.Addr())
	c.Send(t, append(redistest.Cmd("GET", "big"), redistest.Cmd("QUIT")...))
	got, closed := c.ReadToClose(10 * time.Second)
	if !closed || !bytes.Equal(got, append(want, "+OK\r\n"...)) {
		t.Errorf("GET then QUIT: closed %v, %d bytes (%q...), want the reply, +OK and the end", closed, len(got), redistest.Trunc(got))
	}

	// GET, then half-close: the reply still comes whole.
	c = redistest.Dial(t, p.Addr())
	c.Send(t, redistest.Cmd("GET", "big"))
	if err := c.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	got, closed = c.ReadToClose(10 * time.Second)
	if !closed || !bytes.Equal(got, want) {
		t.Errorf("GET then half-close: closed %v, %d bytes, want the reply (%d bytes) and the end", closed, len(got), len(want))
	}

	// GET, then gone while it is paced.
	c = redistest.Dial(t, p.Addr())
	c.Send(t, redistest.Cmd("GET", "big"))
	if _, err := c.ReadN(5_000, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	_ = c.Close()
	redistest.Eventually(t, 3*time.Second, func() error {
		if n, conns := p.InFlight(), set.Counters().ClientConns; n != 0 || conns != 0 {
			return fmt.Errorf("%d requests in flight, %d client connections: the client that left is not forgotten", n, conns)
		}
		return nil
	})
	// Its timers fire for a client that is gone: the proxy serves on.
	time.Sleep(1100 * time.Millisecond)
	if v, err := injectClient(t, p.Addr(), 5*time.Second).Get(context.Background(), "k").Result(); err != nil || v != "v" {
		t.Errorf("GET k after: %q, %v", v, err)
	}

	// The output limit counts the held reply.
	in, err := proxy.ParseInjection("rules.yaml", []byte(rules))
	if err != nil {
		t.Fatal(err)
	}
	lp, _ := proxytest.StartProxy(t, srv.Addr(), func(c *proxy.Config) { c.Inject, c.ClientOutputLimit = in, 64<<10 })
	c = redistest.Dial(t, lp.Addr())
	c.Send(t, redistest.Cmd("GET", "big2"))
	got, closed = c.ReadToClose(10 * time.Second)
	if !closed || len(got) >= 150_000 {
		t.Errorf("over the output limit: closed %v after %d bytes, want evicted before the whole reply (150,011 bytes)", closed, len(got))
	}
}

// TestInjectWireUpstream: direction: upstream paces the requests, which
// go to the engine whole when their last byte, or slice, would have
// passed. Two SETs of 100,000-byte values, pipelined, under bandwidth:
// 100KB/s: the engine has neither after 300 ms, the raw client reads the
// first +OK about 1 s after it wrote them and the second about 2 s (one
// stream: the second is paced after the first), the values arrive
// intact, and respmeter books those waits as the SETs' injected phase.
// A SET of 20,000 bytes under slicer (1000 ± 500 bytes, 20 ms apart) is
// answered after its slices' delays, at least 13 of them, as respmeter's
// injected phase reads.
func TestInjectWireUpstream(t *testing.T) {
	redistest.MoreProcs(t) // the delays' clock holds a thread (Config.Inject)
	srv := redistest.Start(t)
	val, cut := wireValue(100_000), wireValue(20_000)
	p, set, in := injectSetup(t, srv, "rules:\n- name: thin-up\n  keys: \"up*\"\n  bandwidth: 100KB/s\n  direction: upstream\n"+
		"- name: chop-up\n  keys: \"cut*\"\n  slicer: {average_size: 1000, size_variation: 500, delay: 20ms}\n  direction: upstream\n")
	c := redistest.Dial(t, p.Addr())
	req := redistest.Cmd("SET", "up1", val)
	t0 := time.Now()
	c.Send(t, append(req, redistest.Cmd("SET", "up2", val)...))
	time.Sleep(300 * time.Millisecond)
	if n := srv.DoT(t, "EXISTS", "up1", "up2"); n != int64(0) {
		t.Errorf("after 300 ms the engine has %v of the two keys, want none (the first is due at 1 s)", n)
	}
	var at [2]time.Duration
	for i := range at {
		if b, err := c.ReadFrame(10 * time.Second); err != nil || string(b) != "+OK\r\n" {
			t.Fatalf("SET %d: %q, %v", i+1, b, err)
		}
		at[i] = time.Since(t0)
	}
	truth := time.Duration(float64(len(req)) / 100_000 * float64(time.Second))
	for i, d := range at {
		if w := truth * time.Duration(i+1); d < w-50*time.Millisecond || d > w+600*time.Millisecond {
			t.Errorf("SET %d answered after %v, want about %v", i+1, d, w)
		}
	}
	for _, k := range []string{"up1", "up2"} {
		if v := srv.DoT(t, "GET", k); v != val {
			t.Errorf("the engine's %s differs from the value sent", k)
		}
	}
	c.Send(t, redistest.Cmd("SET", "cut1", cut))
	t1 := time.Now()
	if b, err := c.ReadFrame(10 * time.Second); err != nil || string(b) != "+OK\r\n" {
		t.Fatalf("SET cut1: %q, %v", b, err)
	}
	cutTook := time.Since(t1)
	if v := srv.DoT(t, "GET", "cut1"); v != cut {
		t.Errorf("the engine's cut1 differs from the value sent")
	}
	if c := e2eWaitCount(t, set, "set", 3); c.Count != 3 {
		t.Fatalf("%d SETs timed, want 3", c.Count)
	}
	st := proxytest.Command(t, set, "set")
	h := st.Phases[metrics.PhaseInjected]
	t.Logf("SETs answered after %v and %v (truth %v each), the sliced one after %v; injected %v, %v, %v", at[0], at[1], truth, cutTook, h.Percentile(0), h.Percentile(50), h.Max())
	if lo, mid := h.Percentile(0), h.Percentile(50); h.Count() != 3 || lo < 13*20*time.Millisecond || lo > cutTook ||
		mid < truth*95/100 || mid > truth*105/100 || h.Max() < 2*truth*95/100 || h.Max() > 2*truth*105/100 {
		t.Errorf("SET injected: %d timings, %v, %v, %v; want the sliced one's delays (%v seen), then %v and %v", h.Count(), lo, mid, h.Max(), cutTook, truth, 2*truth)
	}
	if d := cutTook - h.Percentile(0); d < -60*time.Millisecond || d > 60*time.Millisecond {
		t.Errorf("the sliced SET took %v, respmeter's injected time is %v", cutTook, h.Percentile(0))
	}
	if d := st.Phases[metrics.PhaseProxy].Max(); d > 300*time.Millisecond {
		t.Errorf("SET proxy max %v: the pacing leaked into respmeter's own time", d)
	}
	if a, b := in.Hits(0), in.Hits(1); a != 2 || b != 1 {
		t.Errorf("rules counted %d and %d, want 2 and 1", a, b)
	}
}
