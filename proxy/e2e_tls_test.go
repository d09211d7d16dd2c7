package proxy_test

// TLS on both sides through real parts: Debian's redis-server serving TLS
// only (--port 0 --tls-port), certificates made at test time
// (redistest.CA), go-redis v9 and redis-cli --tls as clients.

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/respmeter/respmeter/internal/redistest"
	"github.com/respmeter/respmeter/internal/tlsconf"
	"github.com/respmeter/respmeter/metrics"
	"github.com/respmeter/respmeter/metrics/slowlog"
	"github.com/respmeter/respmeter/proxy"
	"github.com/respmeter/respmeter/proxy/proxytest"
)

// tlsEnv is a TLS-only engine and a proxy with a TLS listener in front of
// it, connecting to the engine over TLS with a client certificate (the
// engine's tls-auth-clients is yes by default).
type tlsEnv struct {
	ca  *redistest.CA
	srv *redistest.Server
	p   *proxy.Proxy
	set *metrics.Set
	tm  *metrics.TLS
	// upstream is the proxy's TLS towards the engine.
	upstream *tlsconf.Dialer
	addr     string // the proxy's TLS listener
}

// tlsSetup starts the engine and the proxy; authClients is the proxy's
// tls-auth-clients; mod, if not nil, changes the proxy's Config last.
func tlsSetup(t testing.TB, authClients string, mod func(*tlsEnv, *proxy.Config)) *tlsEnv {
	t.Helper()
	e := &tlsEnv{ca: redistest.NewCA(t), tm: metrics.NewTLS()}
	e.srv = redistest.StartTLS(t, e.ca)
	pc := e.ca.IssueValid("respmeter")
	uc := e.ca.IssueValid("respmeter-upstream")
	server, err := tlsconf.Server(pc.CertFile, pc.KeyFile, e.ca.CertFile, authClients, tlsconf.Suites{})
	if err != nil {
		t.Fatal(err)
	}
	upstream, err := tlsconf.Client(e.ca.CertFile, uc.CertFile, uc.KeyFile, "", false, tlsconf.Suites{})
	if err != nil {
		t.Fatal(err)
	}
	e.upstream = tlsconf.NewDialer(upstream)
	e.p, e.set = proxytest.StartProxy(t, e.srv.Addr(), func(c *proxy.Config) {
		c.TLSListen, c.TLS, c.UpstreamTLS, c.TLSMetrics = "127.0.0.1:0", server, e.upstream, e.tm
		if mod != nil {
			mod(e, c)
		}
	})
	e.addr = e.p.TLSAddr()
	return e
}

// client returns a go-redis client (RESP3) of the proxy's TLS listener
// with cfg.
func (e *tlsEnv) client(t testing.TB, cfg *tls.Config) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: e.addr, TLSConfig: cfg, DisableIdentity: true, MaxRetries: -1,
		DialTimeout: 2 * time.Second, ReadTimeout: 5 * time.Second})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// tlsWorkload runs the same commands on c and returns every reply (or
// error text) in order: strings, lists, a hash under RESP3, a pipeline of
// 16 and a 100 KiB value that spans many TLS records.
func tlsWorkload(ctx context.Context, c *redis.Client) []any {
	var out []any
	add := func(v any, err error) {
		if err != nil {
			v = "error: " + err.Error()
		}
		out = append(out, v)
	}
	add(c.Set(ctx, "tls:k", "v1", 0).Result())
	add(c.Get(ctx, "tls:k").Result())
	add(c.Incr(ctx, "tls:k").Result())
	add(c.RPush(ctx, "tls:l", "a", "b", "c").Result())
	add(c.LRange(ctx, "tls:l", 0, -1).Result())
	add(c.HSet(ctx, "tls:h", "f", "x").Result())
	add(c.HGetAll(ctx, "tls:h").Result())
	cmds, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
		for range 16 {
			p.Incr(ctx, "tls:n")
		}
		return nil
	})
	add(len(cmds), err)
	for _, cmd := range cmds {
		add(cmd.(*redis.IntCmd).Result())
	}
	big := strings.Repeat("0123456789abcdef", 100<<10/16)
	add(c.Set(ctx, "tls:big", big, 0).Result())
	v, err := c.Get(ctx, "tls:big").Result()
	add(v == big, err)
	return out
}

// checkTLSWorkload runs tlsWorkload directly against e's engine and through
// e's TLS listener: the same replies, each command counted once.
func checkTLSWorkload(t *testing.T, e *tlsEnv) {
	t.Helper()
	ctx := context.Background()
	e.srv.DoT(t, "FLUSHALL")
	direct := tlsWorkload(ctx, e.srv.Client())
	e.srv.DoT(t, "FLUSHALL")
	via := tlsWorkload(ctx, e.client(t, e.ca.ClientConfig()))
	if !reflect.DeepEqual(direct, via) {
		t.Errorf("replies differ\n direct %v\n proxy  %v", direct, via)
	}
	for name, want := range map[string]int64{"set": 2, "get": 2, "incr": 17, "rpush": 1, "lrange": 1, "hset": 1, "hgetall": 1} {
		if got := e2eWaitCount(t, e.set, name, int(want)).Count; got != want {
			t.Errorf("%s counted %d times through TLS, want %d", name, got, want)
		}
	}
}

// TestTLSBothSides: go-redis and redis-cli over TLS through respmeter to a
// TLS engine get the same replies as directly, every command counted once,
// the slow log names the TLS client's address, and both sides'
// handshakes are timed.
func TestTLSBothSides(t *testing.T) {
	t.Parallel()
	sl := slowlog.New(128, 0) // keeps every command
	e := tlsSetup(t, tlsconf.AuthClientsNo, func(_ *tlsEnv, c *proxy.Config) { c.SlowLog = sl })
	checkTLSWorkload(t, e)

	// The slow log names the TLS client's own address.
	if len(sl.Entries()) == 0 {
		t.Error("nothing in the slow log")
	}
	for _, en := range sl.Entries() {
		if host, port, err := net.SplitHostPort(en.Client); err != nil || host != "127.0.0.1" || port == "0" {
			t.Fatalf("slow log entry of %s has client %v; want the TLS client's 127.0.0.1:port", en.Command, en.Client)
		}
	}

	// redis-cli --tls: the proxy asks no client certificate; the engine
	// does, so the direct run gives one.
	engineClient := e.ca.IssueValid("cli")
	var outs [2][]string
	for i, target := range [][]string{
		{"--tls", "--cacert", e.ca.CertFile, "--cert", engineClient.CertFile, "--key", engineClient.KeyFile, "-p", e2ePort(t, e.srv.Addr())},
		{"--tls", "--cacert", e.ca.CertFile, "-p", e2ePort(t, e.addr)},
	} {
		e.srv.DoT(t, "FLUSHALL")
		for _, args := range [][]string{{"SET", "cli:k", "val"}, {"GET", "cli:k"}, {"-3", "HSET", "cli:h", "f", "v"}, {"-3", "--no-raw", "HGETALL", "cli:h"}} {
			outs[i] = append(outs[i], e2eRedisCli(t, "", append(target, args...)...))
		}
	}
	if want := []string{"OK\n", "val\n", "1\n", "1# \"f\" => \"v\"\n"}; !reflect.DeepEqual(outs[0], want) || !reflect.DeepEqual(outs[1], want) {
		t.Errorf("redis-cli --tls: direct %q, through respmeter %q, want %q", outs[0], outs[1], want)
	}

	if n := e.tm.Handshakes(metrics.TLSSideClient); n < 5 {
		t.Errorf("client-side handshakes counted %d, want at least 5 (one go-redis connection, four redis-cli)", n)
	}
	if n := e.tm.Handshakes(metrics.TLSSideUpstream); n < 1 {
		t.Errorf("upstream handshakes counted %d, want at least 1", n)
	}
}

// TestTLSOnly: with no plaintext listener (Listen "", as Redis's port 0
// beside tls-port) a go-redis client over TLS gets the same replies as
// directly, every command counted once, and the proxy reports no
// plaintext address. New refuses a proxy with no listener at all, and a
// facade without its plaintext endpoint.
func TestTLSOnly(t *testing.T) {
	t.Parallel()
	e := tlsSetup(t, tlsconf.AuthClientsNo, func(_ *tlsEnv, c *proxy.Config) { c.Listen = "" })
	if a := e.p.Addr(); a != "" {
		t.Errorf("Addr() = %q with no plaintext listener, want \"\"", a)
	}
	checkTLSWorkload(t, e)

	for want, cfg := range map[string]proxy.Config{
		"no listener": {Upstream: e.srv.Addr()},
		"RouteFacade needs Listen": {TLSListen: "127.0.0.1:0", TLS: &tls.Config{}, Route: proxy.RouteFacade,
			Shards: []string{e.srv.Addr()}, FacadeListen: []string{"127.0.0.1:0"}},
	} {
		if _, err := proxy.New(cfg); !errors.Is(err, proxy.ErrConfig) || !strings.Contains(err.Error(), want) {
			t.Errorf("New = %v, want an ErrConfig saying %q", err, want)
		}
	}
}

// TestTLSAuthClientsYes: under tls-auth-clients yes a client without a
// certificate is refused (counted as no_certificate) and one with a
// certificate of the CA is served.
func TestTLSAuthClientsYes(t *testing.T) {
	t.Parallel()
	e := tlsSetup(t, tlsconf.AuthClientsYes, nil)
	ctx := context.Background()

	if err := e.client(t, e.ca.ClientConfig()).Ping(ctx).Err(); err == nil {
		t.Fatal("a client without a certificate was served under tls-auth-clients yes")
	}
	if err := redistest.Await(2*time.Second, 5*time.Millisecond, func() error {
		if e.tm.HandshakeErrors(metrics.TLSSideClient, "no_certificate") == 0 {
			return errors.New("no no_certificate failure counted")
		}
		return nil
	}); err != nil {
		t.Error(err)
	}
	if got, err := e.client(t, e.ca.ClientConfig(e.ca.IssueValid("app"))).Ping(ctx).Result(); got != "PONG" || err != nil {
		t.Errorf("client with a certificate: PING = %q, %v", got, err)
	}
	// A certificate of another CA is refused too.
	other := redistest.NewCA(t).IssueValid("stranger")
	if err := e.client(t, e.ca.ClientConfig(other)).Ping(ctx).Err(); err == nil {
		t.Error("a client certificate of another CA was accepted")
	}
}

// TestTLSBadInput: a plaintext client on the TLS port, and a client that
// connects and never starts its handshake, are closed with a counted
// reason while another TLS client is served throughout.
func TestTLSBadInput(t *testing.T) {
	t.Parallel()
	const timeout = 300 * time.Millisecond
	e := tlsSetup(t, tlsconf.AuthClientsNo, func(_ *tlsEnv, c *proxy.Config) { c.TLSHandshakeTimeout = timeout })
	ctx := context.Background()
	good := e.client(t, e.ca.ClientConfig())

	t.Run("plaintext", func(t *testing.T) {
		c := redistest.Dial(t, e.addr)
		defer c.Close()
		if err := c.Write(redistest.Cmd("PING")); err != nil {
			t.Fatal(err)
		}
		got, _ := c.ReadN(1, 2*time.Second)
		if len(got) > 0 || !c.Closed() {
			t.Errorf("plaintext PING on the TLS port: got %q, closed %v; want no reply and a close", got, c.Closed())
		}
		if n := e.tm.HandshakeErrors(metrics.TLSSideClient, "plaintext"); n != 1 {
			t.Errorf("plaintext failures counted %d, want 1", n)
		}
	})

	t.Run("silent", func(t *testing.T) {
		// The handshake timer starts when the proxy accepts, after the
		// dial began: the close can come no sooner than timeout after
		// dialStart (not after the dials returned: that read 296 ms for
		// a 300 ms timeout once).
		dialStart := time.Now()
		silent := make([]net.Conn, 4)
		for i := range silent {
			c, err := net.Dial("tcp", e.addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			silent[i] = c
		}
		start := time.Now()
		// Served at once while the silent ones wait out their timeout.
		for range 20 {
			if err := good.Ping(ctx).Err(); err != nil {
				t.Fatalf("another TLS client while silent ones wait: %v", err)
			}
		}
		if d := time.Since(start); d >= timeout {
			t.Logf("20 PINGs took %v (the machine is slow); not a failure of the timeout", d)
		}
		for i, c := range silent {
			_ = c.SetReadDeadline(time.Now().Add(10 * timeout))
			n, err := c.Read(make([]byte, 1))
			if n != 0 || err == nil || isTimeout(err) {
				t.Errorf("silent client %d: read %d bytes, %v; want closed by the handshake timeout", i, n, err)
			}
		}
		if d := time.Since(dialStart); d < timeout {
			t.Errorf("silent clients closed %v after they dialled, before the %v handshake timeout", d, timeout)
		}
		if err := redistest.Await(2*time.Second, 5*time.Millisecond, func() error {
			if n := e.tm.HandshakeErrors(metrics.TLSSideClient, "timeout"); n != uint64(len(silent)) {
				return fmt.Errorf("%d handshake timeouts counted, want %d", n, len(silent))
			}
			return nil
		}); err != nil {
			t.Error(err)
		}
	})
	t.Run("truncated", func(t *testing.T) {
		hello := clientHello(t)
		c := redistest.Dial(t, e.addr)
		if err := c.Write(hello[:len(hello)/2]); err != nil {
			t.Fatal(err)
		}
		_ = c.Close()
		if err := redistest.Await(2*time.Second, 5*time.Millisecond, func() error {
			if n := e.tm.HandshakeErrors(metrics.TLSSideClient, "eof"); n != 1 {
				return fmt.Errorf("%d cut handshakes counted, want 1", n)
			}
			return nil
		}); err != nil {
			t.Error(err)
		}
	})
	if err := good.Ping(ctx).Err(); err != nil {
		t.Errorf("TLS client after the bad ones: %v", err)
	}
}

// clientHello returns the first bytes a TLS client sends: its ClientHello
// record.
func clientHello(t testing.TB) []byte {
	t.Helper()
	a, b := net.Pipe()
	defer a.Close()
	go func() { _ = tls.Client(b, &tls.Config{ServerName: "localhost"}).Handshake(); _ = b.Close() }()
	buf := make([]byte, 16<<10)
	n, err := a.Read(buf)
	if err != nil {
		t.Fatal(err)
	}
	return buf[:n]
}

// TestTLSClientOnPlaintextPort: a TLS client's ClientHello on --listen is
// answered as the engine answers it on its plaintext port.
func TestTLSClientOnPlaintextPort(t *testing.T) {
	t.Parallel()
	e := e2eSetup(t)
	e.same(t, [][]byte{clientHello(t)}, redistest.ExchangeOptions{Timeout: time.Second})
	e.healthy(t)
}

// TestTLSExpiredCertificate: an expired client certificate (under
// tls-auth-clients yes) is refused and counted as expired; the proxy
// serves on. (A client refusing the proxy's own expired certificate is
// counted by the alert it sends: Go's says "bad certificate", OpenSSL's
// TLS 1.3 alert reaches Go as a record it cannot decrypt, "other".)
func TestTLSExpiredCertificate(t *testing.T) {
	t.Parallel()
	e := tlsSetup(t, tlsconf.AuthClientsYes, nil)
	old := e.ca.Issue("expired", time.Now().Add(-48*time.Hour), time.Now().Add(-24*time.Hour))
	ctx := context.Background()

	if err := e.client(t, e.ca.ClientConfig(old)).Ping(ctx).Err(); err == nil {
		t.Error("a client with an expired certificate was served")
	}
	if err := redistest.Await(2*time.Second, 5*time.Millisecond, func() error {
		if n := e.tm.HandshakeErrors(metrics.TLSSideClient, "expired"); n == 0 {
			return errors.New("no expired failure counted")
		}
		return nil
	}); err != nil {
		t.Error(err)
	}
	if got, err := e.client(t, e.ca.ClientConfig(e.ca.IssueValid("app"))).Ping(ctx).Result(); got != "PONG" || err != nil {
		t.Errorf("a valid client after the expired ones: %q, %v", got, err)
	}
}

// TestTLSUpstreamWrongCA: an engine whose certificate the proxy cannot
// verify is never used, in plaintext or otherwise: the client gets a
// prompt error reply naming the engine (then the close, as when the engine
// is unreachable), the failure is counted as unknown_ca.
func TestTLSUpstreamWrongCA(t *testing.T) {
	t.Parallel()
	e := tlsSetup(t, tlsconf.AuthClientsNo, func(e *tlsEnv, c *proxy.Config) {
		other := redistest.NewCA(t)
		uc := e.ca.IssueValid("respmeter-upstream")
		up, err := tlsconf.Client(other.CertFile, uc.CertFile, uc.KeyFile, "", false, tlsconf.Suites{})
		if err != nil {
			t.Fatal(err)
		}
		c.UpstreamTLS = tlsconf.NewDialer(up)
	})
	start := time.Now()
	r, got, err := tlsPing(t, e)
	if !strings.HasPrefix(got, "-ERR upstream "+e.srv.Addr()+" unreachable: tls: failed to verify certificate") || err != nil {
		t.Errorf("PING through a proxy that cannot verify the engine: %q, %v; want an -ERR upstream ... certificate line", got, err)
	}
	// With one engine the client is closed once answered; under slot
	// routing it keeps its connection (TestUpstreamUnreachable).
	if !routedMode() {
		if rest, err := io.ReadAll(r); len(rest) != 0 || err != nil {
			t.Errorf("after the error: %q, %v; want the close", rest, err)
		}
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("the error took %v", d)
	}
	if n := e.tm.HandshakeErrors(metrics.TLSSideUpstream, "unknown_ca"); n == 0 {
		t.Error("no upstream unknown_ca failure counted")
	}
}

// tlsPing sends PING on a new TLS connection to the proxy (closed at the
// test's end; reads and writes within 5 s) and returns the connection's
// reader and the first line read.
func tlsPing(t *testing.T, e *tlsEnv) (*bufio.Reader, string, error) {
	t.Helper()
	c, err := tls.Dial("tcp", e.addr, e.ca.ClientConfig())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write(redistest.Cmd("PING")); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(c)
	line, err := r.ReadString('\n')
	return r, line, err
}

// TestTLSUpstreamNoClientCert: an engine that wants a client certificate
// (tls-auth-clients yes) and a proxy with none. Over TLS 1.3 the engine
// refuses after the proxy's side of the handshake ended, with a
// certificate_required alert: the client gets a prompt error naming the
// engine and the alert, and the refusal is counted as no_certificate.
func TestTLSUpstreamNoClientCert(t *testing.T) {
	t.Parallel()
	e := tlsSetup(t, tlsconf.AuthClientsNo, func(e *tlsEnv, c *proxy.Config) {
		up, err := tlsconf.Client(e.ca.CertFile, "", "", "", false, tlsconf.Suites{})
		if err != nil {
			t.Fatal(err)
		}
		c.UpstreamTLS = tlsconf.NewDialer(up)
	})
	_, got, err := tlsPing(t, e)
	if want := "-ERR upstream " + e.srv.Addr() + " "; !strings.HasPrefix(got, want) || !strings.Contains(got, "certificate required") || err != nil {
		t.Errorf("PING through a proxy without the client certificate the engine wants: %q, %v; want %q... naming the certificate_required alert", got, err, want)
	}
	if err := redistest.Await(2*time.Second, 5*time.Millisecond, func() error {
		if n := e.tm.HandshakeErrors(metrics.TLSSideUpstream, "no_certificate"); n == 0 {
			return errors.New("no upstream no_certificate failure counted")
		}
		return nil
	}); err != nil {
		t.Error(err)
	}
}

// TestTLSRedisBenchmark: redis-benchmark --tls (50 clients, pipelines of
// 16) through the TLS listener to the TLS engine: no error, and every SET
// and GET counted exactly once, as the engine's own commandstats count
// them.
func TestTLSRedisBenchmark(t *testing.T) {
	t.Parallel()
	e := tlsSetup(t, tlsconf.AuthClientsNo, nil)
	const n = 20000
	out := e2eRedisBenchmark(t, "--tls", "--cacert", e.ca.CertFile, "-p", e2ePort(t, e.addr),
		"-t", "get,set", "-P", "16", "-n", strconv.Itoa(n), "-c", "50", "-q")
	t.Logf("redis-benchmark --tls through the proxy:\n%s", out)
	if m := e2eBenchLineRe.FindAllStringSubmatch(out, -1); len(m) != 2 || strings.Contains(strings.ToLower(out), "error") {
		t.Errorf("want a SET and a GET result line and no error, got %q", out)
	}
	info, _ := e.srv.DoT(t, "INFO", "commandstats").(string)
	for _, name := range []string{"get", "set"} {
		if got := e2eWaitCount(t, e.set, name, n).Count; got != n {
			t.Errorf("%s counted %d times, want exactly %d", name, got, n)
		}
		if want := fmt.Sprintf("cmdstat_%s:calls=%d,", name, n); !strings.Contains(info, want) {
			t.Errorf("the engine's commandstats have no %q:\n%s", want, info)
		}
	}
}

// TestTLSStopDuringHandshake: a client that never sends its handshake does
// not hold the proxy's Stop for the handshake timeout.
func TestTLSStopDuringHandshake(t *testing.T) {
	t.Parallel()
	e := tlsSetup(t, tlsconf.AuthClientsNo, func(_ *tlsEnv, c *proxy.Config) { c.TLSHandshakeTimeout = time.Minute })
	c, err := net.Dial("tcp", e.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// Accepted and waiting for its ClientHello: a served client proves
	// the accept loop has taken the silent one before it.
	if err := e.client(t, e.ca.ClientConfig()).Ping(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	proxytest.Stop(t, e.p)
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("Stop took %v with a silent TLS client (handshake timeout 1m)", d)
	}
	if n := e.tm.HandshakeErrors(metrics.TLSSideClient, "shutdown"); n != 1 {
		t.Errorf("%d handshakes counted as cut by the stop, want 1", n)
	}
}

// TestTLSMemtier: memtier_benchmark --tls (OpenSSL, a client of its own)
// through the proxy's TLS listener: the SETs and GETs memtier reports it
// sent are what the engine ran (INFO commandstats) and what respmeter
// counted, with no error.
func TestTLSMemtier(t *testing.T) {
	t.Parallel()
	bin := redistest.Memtier(t)
	e := tlsSetup(t, tlsconf.AuthClientsNo, nil)
	host, port, _ := net.SplitHostPort(e.addr)
	jsonOut := filepath.Join(t.TempDir(), "memtier.json")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, "--tls", "--cacert", e.ca.CertFile, "-s", host, "-p", port, "--protocol", "redis",
		"-t", "2", "-c", "4", "--pipeline", "8", "--ratio", "1:1", "-n", "1000", "-d", "32",
		"--key-prefix", "mtls:", "--key-maximum", "1000", "--hide-histogram", "--json-out-file", jsonOut).CombinedOutput()
	if err != nil {
		t.Fatalf("memtier --tls through the proxy: %v\n%s", err, out)
	}
	b, err := os.ReadFile(jsonOut)
	if err != nil {
		t.Fatal(err)
	}
	var res struct {
		All map[string]struct {
			Count int64 `json:"Count"`
		} `json:"ALL STATS"`
	}
	if err := json.Unmarshal(b, &res); err != nil {
		t.Fatalf("memtier's JSON: %v\n%s", err, b)
	}
	sent := map[string]int64{"set": res.All["Sets"].Count, "get": res.All["Gets"].Count}
	if sent["set"]+sent["get"] != 2*4*1000 {
		t.Fatalf("memtier reports %d SETs and %d GETs, want %d commands in all\n%s", sent["set"], sent["get"], 2*4*1000, b)
	}
	if strings.Contains(strings.ToLower(string(out)), "error") {
		t.Errorf("memtier printed an error:\n%s", out)
	}
	ran := commandstats(t, e.srv)
	for name, n := range sent {
		if ran[name] != n {
			t.Errorf("memtier sent %d %s, the engine ran %d", n, name, ran[name])
		}
		if got := e2eWaitCount(t, e.set, name, int(n)).Count; got != n {
			t.Errorf("respmeter counted %d %s, memtier sent %d", got, name, n)
		}
	}
	t.Logf("memtier --tls through respmeter: %d SETs, %d GETs; the engine ran %d and %d", sent["set"], sent["get"], ran["set"], ran["get"])
}

// TestTLSNagleClient: a client with Nagle's algorithm on (TCP_NODELAY off,
// as Python's sockets) gets its first reply as soon as one with it off.
// crypto/tls answers nothing to the client's Finished (its session tickets
// went in its first flight), so unless the proxy acknowledges it at once
// (quickAck) the kernel delays that ACK by 40 ms or more, and the client
// holds its first request until then. Interleaved connections of both
// kinds, the time from the end of the handshake to the first reply; the
// medians must differ by under 20 ms (without quickAck: 40 ms and more;
// not under -race).
func TestTLSNagleClient(t *testing.T) {
	t.Parallel()
	e := tlsSetup(t, tlsconf.AuthClientsNo, nil)
	cfg := e.ca.ClientConfig()
	cfg.ServerName = "127.0.0.1"
	first := func(noDelay bool) time.Duration {
		nc, err := net.Dial("tcp", e.addr)
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		if err := nc.(*net.TCPConn).SetNoDelay(noDelay); err != nil {
			t.Fatal(err)
		}
		tc := tls.Client(nc, cfg)
		_ = tc.SetDeadline(time.Now().Add(redistest.DefaultTimeout))
		if err := tc.Handshake(); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		if _, err := tc.Write([]byte("*1\r\n$4\r\nPING\r\n")); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 16)
		if n, err := io.ReadAtLeast(tc, buf, len("+PONG\r\n")); err != nil || string(buf[:n]) != "+PONG\r\n" {
			t.Fatalf("PING: %q, %v", buf[:n], err)
		}
		return time.Since(start)
	}
	var nagle, noDelay []time.Duration
	for range 7 {
		nagle, noDelay = append(nagle, first(false)), append(noDelay, first(true))
	}
	slices.Sort(nagle)
	slices.Sort(noDelay)
	t.Logf("first reply after the handshake, medians: Nagle on %v, off %v", nagle[3], noDelay[3])
	// Under -race every first reply takes tens of milliseconds: logged only.
	if d := nagle[3] - noDelay[3]; d >= 20*time.Millisecond && !redistest.RaceEnabled() {
		t.Errorf("a client with Nagle's algorithm on waited %v more for its first reply (%v against %v)", d, nagle[3], noDelay[3])
	}
}

// TestTLSShardPhase: under hash-slot routing, a TLS client's crypto time
// is booked on the shard each command went to as it is on the command, so
// that the shard's verdict can name it: after 300 SETs and GETs through
// the TLS listener, every command the shard timed has a tls observation,
// and the shard's tls sum lies between the SETs' and GETs' and all the
// commands'; a plaintext client's commands then add to the shard's
// commands and not to its tls.
func TestTLSShardPhase(t *testing.T) {
	t.Parallel()
	e := tlsSetup(t, tlsconf.AuthClientsNo, func(e *tlsEnv, c *proxy.Config) {
		c.Listen, c.Route, c.Shards = "127.0.0.1:0", proxy.RouteSlots, []string{e.srv.Addr()}
	})
	ctx := context.Background()
	c := e.client(t, e.ca.ClientConfig())
	for i := range 150 {
		k := "shardtls:" + strconv.Itoa(i)
		if err := c.Set(ctx, k, "v", 0).Err(); err != nil {
			t.Fatal(err)
		}
		if err := c.Get(ctx, k).Err(); err != nil {
			t.Fatal(err)
		}
	}
	e2eWaitCount(t, e.set, "get", 150)
	shard := func(sn *metrics.Snapshot) *metrics.ShardStats {
		for i := range sn.Shards {
			if sn.Shards[i].Name == e.srv.Addr() {
				return &sn.Shards[i]
			}
		}
		t.Fatalf("no shard %s in %d shards", e.srv.Addr(), len(sn.Shards))
		return nil
	}
	sn := e.set.Snapshot()
	sh := shard(sn)
	var all, setGet time.Duration
	for _, cs := range sn.Commands {
		all += cs.Phases[metrics.PhaseTLS].Sum
		if cs.Name == "set" || cs.Name == "get" {
			setGet += cs.Phases[metrics.PhaseTLS].Sum
		}
	}
	timed, tlsN, tlsSum := sh.Phases[metrics.PhaseTotal].Count(), sh.Phases[metrics.PhaseTLS].Count(), sh.Phases[metrics.PhaseTLS].Sum
	if timed < 300 || tlsN != timed {
		t.Errorf("shard timed %d commands, %d with a tls phase; want at least 300, all of them", timed, tlsN)
	}
	if setGet <= 0 || tlsSum < setGet || tlsSum > all {
		t.Errorf("shard's tls sum %v; want between the SETs' and GETs' %v and all commands' %v", tlsSum, setGet, all)
	}

	// A plaintext client: the shard's commands grow, its tls does not.
	pc := redis.NewClient(&redis.Options{Addr: e.p.Addr(), DisableIdentity: true, MaxRetries: -1})
	t.Cleanup(func() { _ = pc.Close() })
	for i := range 50 {
		if err := pc.Get(ctx, "shardtls:"+strconv.Itoa(i)).Err(); err != nil {
			t.Fatal(err)
		}
	}
	e2eWaitCount(t, e.set, "get", 200)
	sh = shard(e.set.Snapshot())
	if n := sh.Phases[metrics.PhaseTotal].Count(); n < timed+50 {
		t.Errorf("shard timed %d commands after the plaintext client's 50 GETs, want at least %d", n, timed+50)
	}
	if n, s := sh.Phases[metrics.PhaseTLS].Count(), sh.Phases[metrics.PhaseTLS].Sum; n != tlsN || s != tlsSum {
		t.Errorf("plaintext GETs changed the shard's tls phase: %d observations, %v (was %d, %v)", n, s, tlsN, tlsSum)
	}
}
