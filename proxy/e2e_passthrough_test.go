package proxy_test

// Passthrough cases C-01 .. C-12 (see docs/cases.md):
// framing, replies that are not one per request, handshakes, blocking
// commands and pipelined timing, against a real redis-server through the
// proxy, with the engine as the oracle.

import (
	"bytes"
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/respmeter/respmeter/internal/redistest"
	"github.com/respmeter/respmeter/internal/resp"
	"github.com/respmeter/respmeter/metrics"
	"github.com/respmeter/respmeter/proxy"
	"github.com/respmeter/respmeter/proxy/proxytest"
)

// TestC01ZeroLengthBulk: empty bulk strings as values, hash fields and as
// the key itself are ordinary arguments.
func TestC01ZeroLengthBulk(t *testing.T) {
	t.Parallel()
	e := e2eSetup(t)
	req := respJoin(
		respCmd("SET", "k:empty", ""),
		respCmd("HSET", "h:1", "fa", ""),
		respCmd("HSET", "h:1", "fb", "xyz"),
		respCmd("GET", "k:empty"),
		respCmd("GET", ""),
		respCmd("HGET", "h:1", "fa"),
	)
	want := "+OK\r\n:1\r\n:1\r\n$0\r\n\r\n$-1\r\n$0\r\n\r\n"
	o := redistest.ExchangeOptions{Frames: 6, Linger: 20 * time.Millisecond}
	eqBytes(t, "one write", e.same(t, [][]byte{req}, o), want)
	o.Bytewise = true
	eqBytes(t, "byte by byte", e.same(t, [][]byte{req}, o), want)
	// The empty key is a key like any other.
	req = respJoin(respCmd("SET", "", "v0"), respCmd("GET", ""), respCmd("STRLEN", ""))
	eqBytes(t, "empty key", e.same(t, [][]byte{req}, redistest.ExchangeOptions{Frames: 3}), "+OK\r\n$2\r\nv0\r\n:2\r\n")
	e.healthy(t)
}

// TestC02NestedAggregates: replies nested deeper than any fixed stack, a
// status reply inside an array, and MULTI/EXEC with a nested EXEC reply.
func TestC02NestedAggregates(t *testing.T) {
	t.Parallel()
	e := e2eSetup(t)
	req := respJoin(
		respCmd("EVAL", "return {7,{8,{9,{10,{11,{12,{13}}}}}}}", "1", "n:1"),
		respCmd("EVAL", "return {5, redis.status_reply('FINE'), 'zz', {}}", "1", "n:1"),
		respCmd("MULTI"),
		respCmd("RPUSH", "n:list", "p", "q", "r"),
		respCmd("LRANGE", "n:list", "0", "-1"),
		respCmd("EXEC"),
		respCmd("PING"),
	)
	want := "*2\r\n:7\r\n*2\r\n:8\r\n*2\r\n:9\r\n*2\r\n:10\r\n*2\r\n:11\r\n*2\r\n:12\r\n*1\r\n:13\r\n" +
		"*4\r\n:5\r\n+FINE\r\n$2\r\nzz\r\n*0\r\n" +
		"+OK\r\n+QUEUED\r\n+QUEUED\r\n" +
		"*2\r\n:3\r\n*3\r\n$1\r\np\r\n$1\r\nq\r\n$1\r\nr\r\n" +
		"+PONG\r\n"
	o := redistest.ExchangeOptions{Until: []byte("+PONG\r\n"), Linger: 20 * time.Millisecond}
	eqBytes(t, "RESP2", e.same(t, [][]byte{req}, o), want)

	// RESP3: maps and sets inside the EXEC array.
	req = respJoin(
		respCmd("HELLO", "3"),
		respCmd("HSET", "{n}h", "a", "1"), // one hash tag: one slot, so routed modes run the same
		respCmd("SADD", "{n}s", "m"),
		respCmd("MULTI"),
		respCmd("HGETALL", "{n}h"),
		respCmd("SMEMBERS", "{n}s"),
		respCmd("EXEC"),
		respCmd("PING"),
	)
	got := e.same(t, [][]byte{req}, o, redistest.MaskHelloID)
	if !bytes.HasSuffix(got, []byte("*2\r\n%1\r\n$1\r\na\r\n$1\r\n1\r\n~1\r\n$1\r\nm\r\n+PONG\r\n")) {
		t.Errorf("RESP3 EXEC reply not as expected: %q", got)
	}
	e.healthy(t)
}

// e2eC03Payload is 20 bytes full of CR, LF, NUL and RESP type characters.
const e2eC03Payload = "\r\n\x00*3\r\n$\xfe+\x80-:\n\r\r\x7f_9\t"

// TestC03PipeEndMarker: the bytes redis-cli --pipe adds after the data (a
// bare CRLF, then ECHO of 20 random bytes). The redis-cli run itself is in
// TestRedisCliPipe.
func TestC03PipeEndMarker(t *testing.T) {
	t.Parallel()
	if len(e2eC03Payload) != 20 {
		t.Fatalf("payload is %d bytes", len(e2eC03Payload))
	}
	e := e2eSetup(t)
	req := respJoin(
		respCmd("SET", "pipe:k", "pipe-v"),
		[]byte("\r\n"),
		respCmd("ECHO", e2eC03Payload),
	)
	want := "+OK\r\n$20\r\n" + e2eC03Payload + "\r\n"
	o := redistest.ExchangeOptions{Frames: 2, Linger: 30 * time.Millisecond}
	eqBytes(t, "one write", e.same(t, [][]byte{req}, o), want)
	o.Bytewise = true
	eqBytes(t, "byte by byte", e.same(t, [][]byte{req}, o), want)
	e.healthy(t)
}

// e2eC04Pipeline is 20 commands of mixed reply types.
func e2eC04Pipeline() []byte {
	var b []byte
	for i := 0; i < 20; i++ {
		k := fmt.Sprintf("s:%d", i%4)
		switch i % 5 {
		case 0:
			b = append(b, respCmd("SET", k, strings.Repeat("v", i))...)
		case 1:
			b = append(b, respCmd("GET", k)...)
		case 2:
			b = append(b, respCmd("RPUSH", "s:l", k, "")...)
		case 3:
			b = append(b, respCmd("LRANGE", "s:l", "0", "-1")...)
		case 4:
			b = append(b, respCmd("INCRBY", "s:n", fmt.Sprint(i))...)
		}
	}
	return b
}

// TestC04SplitFrames: requests split across writes (with a pause, and one
// byte per segment), and replies split across reads (a slicing relay
// between the proxy and the engine, in place of a Toxiproxy slicer).
func TestC04SplitFrames(t *testing.T) {
	t.Parallel()
	e := e2eSetup(t)
	t.Run("request paused mid-frame", func(t *testing.T) {
		w := [][]byte{[]byte("*4\r\n$4\r\nHSET\r\n$6\r\nhash:z\r\n$2\r\ng1\r\n"), []byte("$10\r\n0123456789\r\n")}
		got := e.same(t, w, redistest.ExchangeOptions{Delay: 50 * time.Millisecond, Frames: 1, Linger: 20 * time.Millisecond})
		eqBytes(t, "HSET", got, ":1\r\n")
	})
	t.Run("pipeline byte by byte", func(t *testing.T) {
		req := e2eC04Pipeline()
		o := redistest.ExchangeOptions{Frames: 20, Linger: 20 * time.Millisecond}
		whole := e.same(t, [][]byte{req}, o)
		o.Bytewise = true
		split := e.same(t, [][]byte{req}, o)
		if !bytes.Equal(whole, split) {
			t.Errorf("byte-by-byte run differs from unsplit run:\n %q\n %q", whole, split)
		}
		if frames, _, _ := redistest.SplitFrames(whole); len(frames) != 20 {
			t.Errorf("got %d replies, want 20", len(frames))
		}
	})
	t.Run("reply sliced", func(t *testing.T) {
		// Slices of 32..96 bytes with 1 ms pauses, as the case's slicer
		// (64 B average, 32 B variation). The seed is fixed so a failure
		// replays the same cuts.
		relay := redistest.StartRelay(t, e.srv.Addr(), redistest.RelayOptions{MinChunk: 32, MaxChunk: 96, Delay: time.Millisecond, Seed: 404})
		p, _ := proxytest.StartProxy(t, relay.Addr(), nil)
		status := respCmd("EVAL", "return redis.status_reply(string.rep('s',400))", "0")
		errRep := respCmd("EVAL", "return redis.error_reply(string.rep('e',400))", "0")
		big := respCmd("EVAL", "return {string.rep('b',1000), redis.status_reply(string.rep('t',300)), 42}", "0")
		for _, tc := range []struct {
			name string
			req  []byte
		}{{"status 403 bytes", status}, {"error line", errRep}, {"mixed array", big}, {"pipelined", respJoin(status, errRep, big, status)}} {
			n := 1
			if tc.name == "pipelined" {
				n = 4
			}
			o := redistest.ExchangeOptions{Frames: n, Linger: 30 * time.Millisecond}
			direct, _ := redistest.Exchange(t, e.srv.Addr(), [][]byte{tc.req}, o)
			via, closed := redistest.Exchange(t, p.Addr(), [][]byte{tc.req}, o)
			if !bytes.Equal(direct, via) || closed {
				t.Errorf("%s: sliced reply differs (closed=%v)\n direct %q\n proxy  %q", tc.name, closed, redistest.Trunc(direct), redistest.Trunc(via))
			}
		}
		direct, _ := redistest.Exchange(t, e.srv.Addr(), [][]byte{status}, redistest.ExchangeOptions{Frames: 1})
		eqBytes(t, "status reply", direct, "+"+strings.Repeat("s", 400)+"\r\n")
	})
	e.healthy(t)
}

// TestC05HelloAuthHandshake: HELLO with AUTH, CLIENT SETINFO (unknown to
// 7.0, so an error reply) and PING in one write, with the default user
// password-protected so that ignored credentials would show as NOAUTH.
func TestC05HelloAuthHandshake(t *testing.T) {
	t.Parallel()
	e := e2eSetup(t, "--requirepass", "default-pw",
		"--user", "user-q", "on", ">pass-q", "~*", "&*", "+@all")
	tail := respJoin(
		respCmd("CLIENT", "SETINFO", "LIB-NAME", "lib-q"),
		respCmd("PING"),
		respCmd("SET", "auth:k", "1"),
		respCmd("HSET", "auth:h", "f", "v"),
		respCmd("HGETALL", "auth:h"),
	)
	o := redistest.ExchangeOptions{Frames: 6, Linger: 20 * time.Millisecond}
	for _, tc := range []struct {
		proto, head, getall string
	}{
		{"3", "%7\r\n", "%1\r\n$1\r\nf\r\n$1\r\nv\r\n"},
		{"2", "*14\r\n", "*2\r\n$1\r\nf\r\n$1\r\nv\r\n"},
	} {
		req := respJoin(respCmd("HELLO", tc.proto, "AUTH", "user-q", "pass-q"), tail)
		got := e.same(t, [][]byte{req}, o, redistest.MaskHelloID)
		frames, _, _ := redistest.SplitFrames(got)
		if len(frames) != 6 {
			t.Errorf("HELLO %s: %d replies: %q", tc.proto, len(frames), got)
			continue
		}
		if !bytes.HasPrefix(frames[0], []byte(tc.head)) {
			t.Errorf("HELLO %s reply %q, want prefix %q", tc.proto, frames[0], tc.head)
		}
		for i, w := range map[int]string{2: "+PONG\r\n", 3: "+OK\r\n", 4: ":1\r\n", 5: tc.getall} {
			eqBytes(t, fmt.Sprintf("HELLO %s reply %d", tc.proto, i), frames[i], w)
		}
	}
	// Wrong credentials: HELLO fails and the connection stays
	// unauthenticated; a later AUTH works.
	req := respJoin(respCmd("HELLO", "3", "AUTH", "user-q", "wrong"), respCmd("GET", "auth:k"), respCmd("AUTH", "user-q", "pass-q"), respCmd("GET", "auth:k"))
	got := e.same(t, [][]byte{req}, redistest.ExchangeOptions{Frames: 4})
	if !bytes.HasPrefix(got, []byte("-WRONGPASS")) || !bytes.HasSuffix(got, []byte("+OK\r\n$-1\r\n")) {
		t.Errorf("wrong password sequence: %q", got)
	}
	// An unauthenticated client is refused, through the proxy as directly.
	got = e.same(t, [][]byte{respCmd("GET", "auth:k")}, redistest.ExchangeOptions{Frames: 1})
	if !bytes.HasPrefix(got, []byte("-NOAUTH")) {
		t.Errorf("unauthenticated GET: %q", got)
	}
}

// TestC06QuitHalfClose: QUIT answers then closes; replies before it are
// not lost; a half-closed client still gets its reply, then EOF.
func TestC06QuitHalfClose(t *testing.T) {
	t.Parallel()
	e := e2eSetup(t)
	get := respCmd("GET", "q:k")
	for _, tc := range []struct {
		name string
		req  []byte
		o    redistest.ExchangeOptions
		want string
	}{
		{"QUIT", respCmd("QUIT"), redistest.ExchangeOptions{}, "+OK\r\n"},
		{"inline QUIT", []byte("QUIT\r\n"), redistest.ExchangeOptions{}, "+OK\r\n"},
		{"GET then QUIT", respJoin(get, respCmd("QUIT")), redistest.ExchangeOptions{}, "$1\r\n1\r\n+OK\r\n"},
		{"GET then SHUT_WR", get, redistest.ExchangeOptions{CloseWrite: true}, "$1\r\n1\r\n"},
		{"pipeline then SHUT_WR", respJoin(get, get, respCmd("PING")), redistest.ExchangeOptions{CloseWrite: true}, "$1\r\n1\r\n$1\r\n1\r\n+PONG\r\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, tg := range e.targets() {
				e.srv.DoT(t, "SET", "q:k", "1")
				got, closed := redistest.Exchange(t, tg.addr, [][]byte{tc.req}, tc.o)
				eqBytes(t, tg.name, got, tc.want)
				if !closed {
					t.Errorf("%s: connection not closed after %s", tg.name, tc.name)
				}
			}
		})
	}
	e.healthy(t)
}

// TestC07BlockingCommands: blocking commands wait for their own deadline
// (or for the element) with no error and no disconnect. The case's 6-30 s
// waits are shortened to about a second; the property is the same.
func TestC07BlockingCommands(t *testing.T) {
	t.Parallel()
	e := e2eSetup(t)
	type row struct {
		name    string
		hello3  bool
		req     []byte
		other   []any         // run by another client after `after`
		after   time.Duration //
		want    string
		minWait time.Duration
	}
	rows := []row{
		{name: "BLPOP timeout", req: respCmd("BLPOP", "b:empty", "1"), want: "*-1\r\n", minWait: 900 * time.Millisecond},
		{name: "BLPOP timeout RESP3", hello3: true, req: respCmd("BLPOP", "b:empty3", "1"), want: "_\r\n", minWait: 900 * time.Millisecond},
		{name: "BLPOP forever then RPUSH", req: respCmd("BLPOP", "b:list", "0"), other: []any{"RPUSH", "b:list", "it-1"}, after: 1200 * time.Millisecond,
			want: "*2\r\n$6\r\nb:list\r\n$4\r\nit-1\r\n", minWait: 1100 * time.Millisecond},
		{name: "XREAD BLOCK then XADD", req: respCmd("XREAD", "BLOCK", "3000", "STREAMS", "b:stream", "$"), other: []any{"XADD", "b:stream", "7-1", "f", "v"}, after: time.Second,
			want: "*1\r\n*2\r\n$8\r\nb:stream\r\n*1\r\n*2\r\n$3\r\n7-1\r\n*2\r\n$1\r\nf\r\n$1\r\nv\r\n", minWait: 900 * time.Millisecond},
		{name: "WAIT no replicas", req: respCmd("WAIT", "1", "700"), want: ":0\r\n", minWait: 650 * time.Millisecond},
	}
	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			t.Parallel()
			for _, tg := range e.targets() {
				c := redistest.Dial(t, tg.addr)
				if r.hello3 {
					c.Send(t, respCmd("HELLO", "3"))
					if _, err := c.ReadFrame(0); err != nil {
						t.Fatalf("%s: HELLO: %v", tg.name, err)
					}
				}
				var wg sync.WaitGroup
				if r.other != nil {
					wg.Add(1)
					go func() {
						defer wg.Done()
						time.Sleep(r.after)
						if err := e.srv.Client().Do(context.Background(), r.other...).Err(); err != nil {
							t.Errorf("%s: %v: %v", tg.name, r.other, err)
						}
					}()
				}
				start := time.Now()
				c.Send(t, r.req)
				got, err := c.ReadFrame(r.minWait + 3*time.Second)
				elapsed := time.Since(start)
				wg.Wait()
				if err != nil {
					t.Errorf("%s: read: %v after %v (got %q, closed=%v)", tg.name, err, elapsed, got, c.Closed())
					continue
				}
				eqBytes(t, tg.name, got, r.want)
				if elapsed < r.minWait {
					t.Errorf("%s: answered after %v, before the command's deadline %v", tg.name, elapsed, r.minWait)
				}
				c.Roundtrip(t, respCmd("PING"), []byte("+PONG\r\n"))
				// Reset this row's keys for the next target.
				e.srv.DoT(t, "DEL", e2eBlockingKey(r.req))
			}
		})
	}
}

// blockingKey returns the key a C-07 request blocks on (or a placeholder
// for WAIT, which has none).
func e2eBlockingKey(req []byte) string {
	frames := bytes.Split(req, []byte("\r\n"))
	for _, f := range frames {
		if s := string(f); strings.HasPrefix(s, "b:") {
			return s
		}
	}
	return "b:none"
}

type e2eRoundStats struct{ p50, p99, max time.Duration }

// pipelineRounds sends rounds pipelines of depth GETs on one connection
// and returns client-side round-trip stats.
func e2ePipelineRounds(t *testing.T, addr string, depth, rounds int) e2eRoundStats {
	t.Helper()
	c := redistest.Dial(t, addr)
	req := bytes.Repeat(respCmd("GET", "lat:k"), depth)
	n := depth * len("$1\r\n1\r\n")
	ds := make([]time.Duration, rounds)
	for i := range ds {
		start := time.Now()
		c.Send(t, req)
		if _, err := c.ReadN(n, 5*time.Second); err != nil {
			t.Fatalf("%s depth %d round %d: %v", addr, depth, i, err)
		}
		ds[i] = time.Since(start)
	}
	slices.Sort(ds)
	return e2eRoundStats{p50: ds[len(ds)/2], p99: ds[len(ds)*99/100], max: ds[len(ds)-1]}
}

// TestC08PipelinedLatency: through the proxy, pipelined latency does not
// grow like depth x round trip (a proxy forwarding one request at a time
// would); the proxy's own per-command numbers split upstream turnaround
// from total, stay within what the client observed, and keep blocking and
// pub/sub time out of GET. Not parallel: it measures latency. Part (d) of
// the case, open-loop load generation, concerns the load generator, not
// the proxy, and is not covered here.
func TestC08PipelinedLatency(t *testing.T) {
	e := e2eSetup(t)
	e.srv.Do("SET", "lat:k", "1")
	const rounds = 1000
	depths := []int{1, 10, 50}
	direct := map[int]e2eRoundStats{}
	via := map[int]e2eRoundStats{}
	var clientMax time.Duration
	for _, d := range depths {
		direct[d] = e2ePipelineRounds(t, e.srv.Addr(), d, rounds)
		via[d] = e2ePipelineRounds(t, e.paddr, d, rounds)
		clientMax = max(clientMax, via[d].max)
		t.Logf("depth %2d: direct p50 %v p99 %v | proxy p50 %v p99 %v | overhead p50 %v",
			d, direct[d].p50, direct[d].p99, via[d].p50, via[d].p99, via[d].p50-direct[d].p50)
	}
	// Forwarding one request at a time costs about depth x (proxy round
	// trip); pipelining keeps depth 50 far below half of that.
	if lim := 25 * via[1].p50; via[50].p50 > lim {
		t.Errorf("depth 50 p50 through the proxy %v > 25 x depth-1 p50 (%v): requests are not pipelined", via[50].p50, lim)
	}

	get := e2eWaitCount(t, e.set, "get", rounds*(1+10+50))
	if want := int64(rounds * (1 + 10 + 50)); get.Count != want {
		t.Errorf("get count %d, want %d", get.Count, want)
	}
	tot, up := get.Phases[metrics.PhaseTotal], get.Phases[metrics.PhaseUpstream]
	if tot.Count() != get.Count || up.Count() != get.Count {
		t.Errorf("get timed %d total / %d upstream, want %d each", tot.Count(), up.Count(), get.Count)
	}
	for _, pct := range []float64{50, 90, 99, 100} {
		if u, tt := up.Percentile(pct), tot.Percentile(pct); u > tt {
			t.Errorf("get p%v: upstream %v > total %v", pct, u, tt)
		}
	}
	if up.Sum > tot.Sum {
		t.Errorf("get: upstream sum %v > total sum %v", up.Sum, tot.Sum)
	}
	// The proxy's total runs from reading the request to writing the reply,
	// inside the client's round trip (0.1% histogram rounding allowed).
	if m := tot.Max(); m > clientMax+clientMax/500+2*time.Microsecond {
		t.Errorf("get total max %v exceeds the slowest round the client saw (%v)", m, clientMax)
	}
	t.Logf("proxy get: total p50 %v p99 %v max %v | upstream p50 %v p99 %v", tot.Percentile(50), tot.Percentile(99), tot.Max(), up.Percentile(50), up.Percentile(99))

	// (c) Blocking and pub/sub time is not GET time.
	getMaxBefore := tot.Max()
	b := redistest.Dial(t, e.paddr)
	for i := 0; i < 5; i++ {
		b.Send(t, respCmd("BLPOP", "lat:empty", "0.2"))
		if _, err := b.ReadFrame(3 * time.Second); err != nil {
			t.Fatalf("BLPOP %d: %v", i, err)
		}
	}
	s := redistest.Dial(t, e.paddr)
	s.Send(t, respCmd("SUBSCRIBE", "lat:chan"))
	if _, err := s.ReadFrame(0); err != nil {
		t.Fatalf("SUBSCRIBE: %v", err)
	}
	g := redistest.Dial(t, e.paddr)
	for i := 0; i < 10; i++ { // GETs while the subscription is held
		g.Roundtrip(t, respCmd("GET", "lat:k"), []byte("$1\r\n1\r\n"))
		time.Sleep(30 * time.Millisecond)
	}
	e.srv.Do("PUBLISH", "lat:chan", "m")
	if f, err := s.ReadFrame(0); err != nil || !bytes.Contains(f, []byte("message")) {
		t.Fatalf("subscriber: %q %v", f, err)
	}
	time.Sleep(200 * time.Millisecond)
	s.Send(t, respCmd("UNSUBSCRIBE"))
	if _, err := s.ReadFrame(0); err != nil {
		t.Fatalf("UNSUBSCRIBE: %v", err)
	}
	s.Roundtrip(t, respCmd("PING"), []byte("+PONG\r\n"))

	blpop := e2eWaitCount(t, e.set, "blpop", 5)
	if bt := blpop.Phases[metrics.PhaseTotal]; blpop.Count != 5 || bt.Percentile(50) < 190*time.Millisecond {
		t.Errorf("blpop: count %d, total p50 %v; want 5 and >= 190ms", blpop.Count, bt.Percentile(50))
	}
	get = proxytest.Command(t, e.set, "get")
	if m := get.Phases[metrics.PhaseTotal].Max(); m > max(getMaxBefore, 100*time.Millisecond) {
		t.Errorf("get total max grew to %v (was %v) while blocking/pub-sub ran", m, getMaxBefore)
	}
	for _, c := range e.set.Snapshot().Commands {
		if c.Name == "blpop" || !c.Observed() {
			continue
		}
		if m := c.Phases[metrics.PhaseTotal].Max(); m > 150*time.Millisecond {
			t.Errorf("%s: total max %v: blocking or subscription time leaked into it", c.Name, m)
		}
	}
}

// TestC09ZeroOrManyReplies: requests answered silently (empty arrays, empty
// inline lines, CLIENT REPLY OFF/SKIP) and requests answered several times
// (SUBSCRIBE to three channels).
func TestC09ZeroOrManyReplies(t *testing.T) {
	t.Parallel()
	// A long drain timeout: a Stop that waits for it shows requests left
	// pending.
	e := e2eSetupWith(t, func(c *proxy.Config) { c.DrainTimeout = 3 * time.Second })
	req := respJoin(
		[]byte("*0\r\n"),
		[]byte("*-1\r\n"),
		[]byte("\r\n"),
		respCmd("PING"),
		respCmd("CLIENT", "REPLY", "SKIP"),
		respCmd("SET", "z:k", "one"),
		respCmd("GET", "z:k"),
		respCmd("CLIENT", "REPLY", "OFF"),
		respCmd("SET", "z:k", "two"),
		respCmd("INCR", "z:n"),
		respCmd("CLIENT", "REPLY", "ON"),
		respCmd("GET", "z:k"),
		respCmd("GET", "z:n"),
	)
	want := "+PONG\r\n$3\r\none\r\n+OK\r\n$3\r\ntwo\r\n$1\r\n1\r\n"
	o := redistest.ExchangeOptions{Frames: 5, Linger: 30 * time.Millisecond}
	eqBytes(t, "one write", e.same(t, [][]byte{req}, o), want)
	o.Bytewise = true
	eqBytes(t, "byte by byte", e.same(t, [][]byte{req}, o), want)

	sub := respJoin(respCmd("SUBSCRIBE", "z:a", "z:b", "z:c"), respCmd("UNSUBSCRIBE"), respCmd("PING"))
	got := e.same(t, [][]byte{sub}, redistest.ExchangeOptions{Frames: 7, Linger: 30 * time.Millisecond})
	if frames, _, _ := redistest.SplitFrames(got); len(frames) != 7 ||
		string(frames[0]) != "*3\r\n$9\r\nsubscribe\r\n$3\r\nz:a\r\n:1\r\n" ||
		string(frames[2]) != "*3\r\n$9\r\nsubscribe\r\n$3\r\nz:c\r\n:3\r\n" ||
		!bytes.HasSuffix(frames[5], []byte(":0\r\n")) || string(frames[6]) != "+PONG\r\n" {
		t.Errorf("SUBSCRIBE/UNSUBSCRIBE replies: %q", got)
	}
	// No dangling timers: with every connection closed, the proxy has
	// nothing pending and stops without waiting for its drain timeout.
	e.healthy(t)
	start := time.Now()
	proxytest.Stop(t, e.p)
	if el := time.Since(start); el >= 2*time.Second {
		t.Errorf("Stop took %v (drain timeout 3s): requests the engine never answers are still counted as pending", el)
	}
}

// TestC10UnsolicitedPushes: RESP3 invalidation pushes arrive with no
// request outstanding and do not shift the request/reply matching;
// subscribed connections answer PING as an array; tracking redirection
// by connection id works because client connections map 1:1 upstream.
func TestC10UnsolicitedPushes(t *testing.T) {
	t.Parallel()
	e := e2eSetup(t)
	readFrame := func(t *testing.T, c *redistest.Conn) []byte {
		t.Helper()
		f, err := c.ReadFrame(0)
		if err != nil {
			t.Fatalf("read: %v (closed=%v, got %q)", err, c.Closed(), f)
		}
		return f
	}
	hello3 := func(t *testing.T, c *redistest.Conn) {
		t.Helper()
		c.Send(t, respCmd("HELLO", "3"))
		if f := readFrame(t, c); !bytes.HasPrefix(f, []byte("%7\r\n")) {
			t.Fatalf("HELLO 3: %q", f)
		}
	}

	t.Run("tracking invalidation", func(t *testing.T) {
		transcripts := map[string]string{}
		for _, tg := range e.targets() {
			e.srv.DoT(t, "FLUSHALL")
			e.srv.DoT(t, "SET", "trk:k", "1")
			a, b := redistest.Dial(t, tg.addr), redistest.Dial(t, tg.addr)
			hello3(t, a)
			var tr bytes.Buffer
			step := func(c *redistest.Conn, req []byte, want string) {
				if req != nil {
					c.Send(t, req)
				}
				f := readFrame(t, c)
				tr.Write(f)
				eqBytes(t, tg.name+" after "+string(req), f, want)
			}
			step(a, respCmd("CLIENT", "TRACKING", "ON"), "+OK\r\n")
			step(a, respCmd("GET", "trk:k"), "$1\r\n1\r\n")
			step(b, respCmd("SET", "trk:k", "2"), "+OK\r\n")
			step(a, nil, ">2\r\n$10\r\ninvalidate\r\n*1\r\n$5\r\ntrk:k\r\n")
			step(a, respCmd("PING"), "+PONG\r\n")
			step(a, respCmd("GET", "trk:k"), "$1\r\n2\r\n")
			step(b, respCmd("FLUSHALL"), "+OK\r\n")
			step(a, nil, ">2\r\n$10\r\ninvalidate\r\n_\r\n")
			step(a, respCmd("PING"), "+PONG\r\n")
			transcripts[tg.name] = tr.String()
		}
		if transcripts["direct"] != transcripts["proxy"] {
			t.Errorf("transcripts differ:\n direct %q\n proxy  %q", transcripts["direct"], transcripts["proxy"])
		}
	})

	t.Run("push and reply racing", func(t *testing.T) {
		for _, tg := range e.targets() {
			a, b := redistest.Dial(t, tg.addr), redistest.Dial(t, tg.addr)
			hello3(t, a)
			a.Roundtrip(t, respCmd("CLIENT", "TRACKING", "ON"), []byte("+OK\r\n"))
			// reply reads A's next frame that is not an invalidation push
			// (pushes for race:k may come at any point: every GET tracks
			// the key again and every SET of B invalidates it).
			reply := func() string {
				for {
					f := readFrame(t, a)
					if f[0] != resp.TypePush {
						return string(f)
					}
					eqBytes(t, tg.name+" push", f, ">2\r\n$10\r\ninvalidate\r\n*1\r\n$6\r\nrace:k\r\n")
				}
			}
			for i := 0; i < 30; i++ {
				b.Roundtrip(t, respCmd("SET", "race:k", "old"), []byte("+OK\r\n"))
				a.Send(t, respCmd("GET", "race:k"))
				if r := reply(); r != "$3\r\nold\r\n" {
					t.Fatalf("%s round %d: GET = %q", tg.name, i, r)
				}
				// GET and a concurrent write: push and reply may come in
				// either order, in one segment or two.
				var wg sync.WaitGroup
				wg.Add(1)
				go func() {
					defer wg.Done()
					if err := b.Write(respCmd("SET", "race:k", "new")); err != nil {
						t.Errorf("B write: %v", err)
					}
				}()
				a.Send(t, respJoin(respCmd("GET", "race:k"), respCmd("PING")))
				wg.Wait()
				if _, err := b.ReadN(5, 0); err != nil {
					t.Fatalf("B reply: %v", err)
				}
				r1, r2 := reply(), reply()
				if (r1 != "$3\r\nold\r\n" && r1 != "$3\r\nnew\r\n") || r2 != "+PONG\r\n" {
					t.Fatalf("%s round %d: replies %q %q, want GET value then +PONG", tg.name, i, r1, r2)
				}
			}
			// Whatever follows the last PONG may only be pushes.
			for _, f := range e2eSplitQuiet(t, a, 20*time.Millisecond) {
				if f[0] != resp.TypePush {
					t.Fatalf("%s: unexpected frame %q", tg.name, f)
				}
			}
		}
	})

	t.Run("RESP3 messages between replies", func(t *testing.T) {
		for _, tg := range e.targets() {
			e.srv.DoT(t, "SET", "msg:k", "v")
			a := redistest.Dial(t, tg.addr)
			hello3(t, a)
			a.Roundtrip(t, respCmd("SUBSCRIBE", "msg:chan"), []byte(">3\r\n$9\r\nsubscribe\r\n$8\r\nmsg:chan\r\n:1\r\n"))
			var wg sync.WaitGroup
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < 10; i++ {
					if err := e.srv.Client().Publish(context.Background(), "msg:chan", fmt.Sprint("m", i)).Err(); err != nil {
						t.Errorf("publish: %v", err)
					}
				}
			}()
			const gets = 10
			for i := 0; i < gets; i++ {
				a.Send(t, respCmd("GET", "msg:k"))
			}
			wg.Wait()
			var replies, msgs int
			for replies < gets || msgs < 10 {
				f := readFrame(t, a)
				switch {
				case f[0] == resp.TypePush:
					want := fmt.Sprintf(">3\r\n$7\r\nmessage\r\n$8\r\nmsg:chan\r\n$2\r\nm%d\r\n", msgs)
					eqBytes(t, tg.name+" message", f, want)
					msgs++
				default:
					eqBytes(t, tg.name+" GET reply", f, "$1\r\nv\r\n")
					replies++
				}
			}
			a.Roundtrip(t, respCmd("UNSUBSCRIBE"), []byte(">3\r\n$11\r\nunsubscribe\r\n$8\r\nmsg:chan\r\n:0\r\n"))
			a.Roundtrip(t, respCmd("PING"), []byte("+PONG\r\n"))
		}
	})

	t.Run("RESP2 subscribed PING", func(t *testing.T) {
		req := respJoin(respCmd("SUBSCRIBE", "p:chan"), respCmd("PING"), respCmd("PING", "hi"), respCmd("UNSUBSCRIBE", "p:chan"), respCmd("PING"))
		got := e.same(t, [][]byte{req}, redistest.ExchangeOptions{Frames: 5, Linger: 20 * time.Millisecond})
		eqBytes(t, "subscribed PING", got, "*3\r\n$9\r\nsubscribe\r\n$6\r\np:chan\r\n:1\r\n"+
			"*2\r\n$4\r\npong\r\n$0\r\n\r\n*2\r\n$4\r\npong\r\n$2\r\nhi\r\n"+
			"*3\r\n$11\r\nunsubscribe\r\n$6\r\np:chan\r\n:0\r\n+PONG\r\n")
	})

	t.Run("tracking REDIRECT by client id", func(t *testing.T) {
		for _, tg := range e.targets() {
			c := redistest.Dial(t, tg.addr)
			c.Send(t, respCmd("CLIENT", "ID"))
			idf := readFrame(t, c)
			id := strings.TrimSuffix(strings.TrimPrefix(string(idf), ":"), "\r\n")
			c.Roundtrip(t, respCmd("SUBSCRIBE", "__redis__:invalidate"), []byte("*3\r\n$9\r\nsubscribe\r\n$20\r\n__redis__:invalidate\r\n:1\r\n"))
			a := redistest.Dial(t, tg.addr)
			a.Roundtrip(t, respCmd("CLIENT", "TRACKING", "ON", "REDIRECT", id), []byte("+OK\r\n"))
			a.Roundtrip(t, respCmd("GET", "redir:k"), []byte("$-1\r\n"))
			e.srv.DoT(t, "SET", "redir:k", "x")
			c.Expect(t, []byte("*3\r\n$7\r\nmessage\r\n$20\r\n__redis__:invalidate\r\n*1\r\n$7\r\nredir:k\r\n"), 0)
			e.srv.DoT(t, "DEL", "redir:k")
		}
	})
	e.healthy(t)
}

// splitQuiet collects the frames that arrive within d.
func e2eSplitQuiet(t *testing.T, c *redistest.Conn, d time.Duration) [][]byte {
	t.Helper()
	b := c.Quiet(d)
	frames, rest, err := redistest.SplitFrames(b)
	if err != nil || len(rest) > 0 {
		t.Fatalf("bad frames %q (rest %q): %v", b, rest, err)
	}
	return frames
}

var e2eFullResyncRe = regexp.MustCompile(`^\+FULLRESYNC [0-9a-f]{40} [0-9]+\r\n`)

// readSnapshot reads `$<len>\r\n` and len bytes of RDB (no CRLF after
// them), skipping the newlines the engine may send while it prepares the
// snapshot, and returns the RDB.
func e2eReadSnapshot(t *testing.T, c *redistest.Conn) []byte {
	t.Helper()
	var n int
	hdr, err := c.ReadWhile(func(b []byte) bool {
		b = bytes.TrimLeft(b, "\n")
		i := bytes.Index(b, []byte("\r\n"))
		return i > 0 && b[0] == resp.TypeBlobString
	}, 5*time.Second)
	if err != nil {
		t.Fatalf("snapshot header: %v (got %q)", err, redistest.Trunc(hdr))
	}
	lead := len(hdr) - len(bytes.TrimLeft(hdr, "\n"))
	i := bytes.Index(hdr, []byte("\r\n"))
	if _, err := fmt.Sscanf(string(hdr[lead+1:i]), "%d", &n); err != nil {
		t.Fatalf("snapshot length %q: %v", hdr[:i], err)
	}
	c.Consume(i + 2)
	rdb, err := c.ReadN(n, 5*time.Second)
	if err != nil {
		t.Fatalf("snapshot body: %v (%d of %d bytes)", err, len(rdb), n)
	}
	return rdb
}

// TestC11ReplicationStream: SYNC / PSYNC turn the connection into a
// snapshot (a bulk without trailing CRLF) followed by the replication
// stream; none of it answers a request, and all of it must be relayed.
func TestC11ReplicationStream(t *testing.T) {
	t.Parallel()
	e := e2eSetup(t, "--repl-diskless-sync-delay", "0")
	// The snapshot's 9-byte header: "REDIS" and a 4-digit RDB version
	// (10 from Redis 7.0, 11 from Valkey 8, 12 from Redis 8), or from
	// Valkey 9 on "VALKEY" and a 3-digit one (VALKEY080).
	magic := []byte("REDIS00")
	if _, engine := e.srv.Version(); strings.HasPrefix(engine, "valkey ") && !strings.HasPrefix(engine, "valkey 7.") && !strings.HasPrefix(engine, "valkey 8.") {
		magic = []byte("VALKEY")
	}
	for _, psync := range []bool{false, true} {
		name := "SYNC"
		if psync {
			name = "PSYNC"
		}
		t.Run(name, func(t *testing.T) {
			rdbs := map[string][]byte{}
			for i, tg := range e.targets() {
				e.srv.DoT(t, "FLUSHALL")
				e.srv.DoT(t, "SET", "repl:a", "1")
				e.srv.DoT(t, "HSET", "repl:h", "f", "v")
				c := redistest.Dial(t, tg.addr)
				if psync {
					c.Send(t, respCmd("PSYNC", "?", "-1"))
					line, err := c.ReadWhile(func(b []byte) bool { return bytes.Contains(b, []byte("\r\n")) }, 5*time.Second)
					if err != nil || !e2eFullResyncRe.Match(line) {
						t.Fatalf("%s: PSYNC reply %q: %v", tg.name, redistest.Trunc(line), err)
					}
					c.Consume(bytes.Index(line, []byte("\r\n")) + 2)
				} else {
					c.Send(t, respCmd("SYNC"))
				}
				rdb := e2eReadSnapshot(t, c)
				if !bytes.HasPrefix(rdb, magic) || len(rdb) < 9+9 || rdb[len(rdb)-9] != 0xff {
					t.Fatalf("%s: not a complete RDB snapshot: %q", tg.name, redistest.Trunc(rdb))
				}
				rdbs[tg.name] = rdb
				// The stream: SELECT first, then the write. The key name
				// differs per run so the two runs' streams are alike.
				key := fmt.Sprintf("key:r%d", i)
				e.srv.DoT(t, "SET", key, "1")
				e2eExpectStream(t, c, respJoin(respCmd("SELECT", "0"), respCmd("SET", key, "1")))
				e.srv.DoT(t, "INCR", "repl:n")
				e2eExpectStream(t, c, respCmd("INCR", "repl:n"))
			}
			// The snapshots hold the same keys; their aux fields (ctime,
			// used-mem, repl offsets) differ, so only the sizes are close.
			d, p := rdbs["direct"], rdbs["proxy"]
			if !bytes.Equal(d[:9], p[:9]) {
				t.Errorf("snapshot headers differ: direct %q, proxy %q", d[:9], p[:9])
			}
			if diff := len(d) - len(p); diff < -16 || diff > 16 {
				t.Errorf("snapshot sizes differ: direct %d, proxy %d", len(d), len(p))
			}
			for _, k := range []string{"repl:a", "repl:h"} {
				if !bytes.Contains(p, []byte(k)) {
					t.Errorf("proxy snapshot lacks key %s", k)
				}
			}
		})
	}
	e.healthy(t)
}

// e2eExpectStream reads replication-stream frames from c until they make
// want, within 5 s, leaving out the primary's PINGs (sent every
// repl-ping-replica-period seconds, and by Valkey 9 also as the stream's
// first command).
func e2eExpectStream(t *testing.T, c *redistest.Conn, want []byte) {
	t.Helper()
	ping := respCmd("ping")
	var got []byte
	deadline := time.Now().Add(5 * time.Second)
	for len(got) < len(want) {
		f, err := c.ReadFrame(time.Until(deadline))
		if err != nil {
			t.Fatalf("replication stream: want %q, got %q then %v", redistest.Trunc(want), redistest.Trunc(got), err)
		}
		if !bytes.Equal(f, ping) {
			got = append(got, f...)
		}
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("replication stream: want %q, got %q", redistest.Trunc(want), redistest.Trunc(got))
	}
}

var e2eMonitorRe = regexp.MustCompile(`(?m)^\+[0-9]+\.[0-9]+ \[0 127\.0\.0\.1:[0-9]+\]`)

// TestC12Monitor: MONITOR lines answer no request; QUIT afterwards gets
// +OK and a close.
func TestC12Monitor(t *testing.T) {
	t.Parallel()
	e := e2eSetup(t)
	out := map[string][]byte{}
	for _, tg := range e.targets() {
		a, b := redistest.Dial(t, tg.addr), redistest.Dial(t, tg.addr)
		a.Roundtrip(t, respCmd("MONITOR"), []byte("+OK\r\n"))
		b.Roundtrip(t, respCmd("SET", "key:m", "1"), []byte("+OK\r\n"))
		b.Roundtrip(t, respCmd("GET", "key:m"), []byte("$1\r\n1\r\n"))
		var lines []byte
		for i := 0; i < 2; i++ {
			f, err := a.ReadFrame(0)
			if err != nil {
				t.Fatalf("%s: monitor line %d: %v (%q)", tg.name, i, err, f)
			}
			lines = append(lines, f...)
		}
		// Nothing else: the proxy sends no probes of its own on this engine.
		lines = append(lines, a.Quiet(100*time.Millisecond)...)
		a.Send(t, respCmd("QUIT"))
		rest, closed := a.ReadToClose(3 * time.Second)
		if !closed {
			t.Errorf("%s: monitor connection not closed after QUIT", tg.name)
		}
		out[tg.name] = append(e2eMonitorRe.ReplaceAll(lines, []byte("+<ts> [0 <addr>]")), rest...)
	}
	want := "+<ts> [0 <addr>] \"SET\" \"key:m\" \"1\"\r\n+<ts> [0 <addr>] \"GET\" \"key:m\"\r\n+OK\r\n"
	eqBytes(t, "direct", out["direct"], want)
	eqBytes(t, "proxy", out["proxy"], want)
	e.healthy(t)
}
