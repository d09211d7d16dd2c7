package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/respmeter/respmeter/internal/redistest"
)

// TestProxyTLSUpstreamCiphers: an engine left as Redis's own TLS test
// leaves one (--tls-ciphers AES128-SHA256 --tls-protocols TLSv1.2, with
// an RSA certificate) is unreachable through respmeter with Go's default
// suites: a command gets the handshake's error and the failed upstream
// handshakes are counted, by the engine's alert (handshake_failure). With RESPMETER_UPSTREAM_TLS_CIPHERS=AES128-SHA256
// (warned at start: Go lists the suite as insecure) go-redis gets through
// respmeter the replies it gets from the engine directly, every upstream
// handshake negotiated TLS 1.2 with that suite, and the side connections
// reach the engine too.
func TestProxyTLSUpstreamCiphers(t *testing.T) {
	ca := redistest.NewCA(t)
	srv := redistest.StartTLSRSA(t, ca, "--tls-auth-clients", "no", "--tls-ciphers", "AES128-SHA256", "--tls-protocols", "TLSv1.2")
	upArgs := []string{"--upstream-tls", "--upstream-tls-ca-cert-file", ca.CertFile, "--loops", "1"}

	t.Run("default suites", func(t *testing.T) {
		p, addr, admin := startProxy(t, srv.Addr(), upArgs...)
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Write(redistest.Cmd("SET", "k", "v")); err != nil {
			t.Fatal(err)
		}
		got, err := bufio.NewReader(c).ReadString('\n')
		if want := "-ERR upstream " + srv.Addr() + " unreachable: remote error: tls: handshake failure\r\n"; got != want || err != nil {
			t.Fatalf("SET through respmeter with Go's suites: %q, %v; want %q", got, err, want)
		}
		want := regexp.MustCompile(`(?m)^respmeter_tls_handshake_errors_total\{reason="handshake_failure",side="upstream"\} [1-9]`)
		redistest.Eventually(t, 5*time.Second, func() error {
			if body := httpGet(t, "http://"+admin+"/metrics"); !want.MatchString(body) {
				return fmt.Errorf("/metrics has no %s", want)
			}
			return nil
		})
		p.waitFor(t, p.stderr, `msg="TLS handshake failed" .*side=upstream .*reason=handshake_failure err="remote error: tls: handshake failure"`)
	})

	t.Run("AES128-SHA256", func(t *testing.T) {
		p := start(t, []string{"RESPMETER_UPSTREAM_TLS_CIPHERS=AES128-SHA256"}, append([]string{"proxy",
			"--listen", "127.0.0.1:0", "--upstream", srv.Addr(), "--admin", "127.0.0.1:0"}, upArgs...)...)
		p.waitFor(t, p.stderr, `level=WARN msg="a TLS cipher suite Go lists as insecure is allowed, as upstream_tls_ciphers names it" component=tls cipher=TLS_RSA_WITH_AES_128_CBC_SHA256`)
		addr := p.waitFor(t, p.stderr, logAddr("proxy listening"))[1]
		admin := p.waitFor(t, p.stderr, logAddr("admin listening"))[1]
		c := redis.NewClient(&redis.Options{Addr: addr, DisableIdentity: true})
		defer c.Close()
		via, direct := suitesWorkload(t, c, "via:"), suitesWorkload(t, srv.Client(), "direct:")
		if !reflect.DeepEqual(via, direct) {
			t.Errorf("replies through respmeter %v, from the engine %v", via, direct)
		}
		body := httpGet(t, "http://"+admin+"/metrics")
		negotiated := regexp.MustCompile(`(?m)^respmeter_tls_handshakes_total\{cipher="([A-Z0-9_]+)",side="upstream",version="([^"]+)"\} (\d+)`).FindAllStringSubmatch(body, -1)
		if len(negotiated) != 1 || negotiated[0][1] != "TLS_RSA_WITH_AES_128_CBC_SHA256" || negotiated[0][2] != "TLS 1.2" {
			t.Errorf("upstream handshakes negotiated %q, want TLS 1.2 TLS_RSA_WITH_AES_128_CBC_SHA256 only", negotiated)
		}
		if strings.Contains(body, `respmeter_tls_handshake_errors_total{reason="handshake_failure",side="upstream"}`) {
			t.Errorf("failed upstream handshakes counted:\n%s", body)
		}
		// The side connections (command table, probe, poller) dial with
		// the same suites: the engine's table is read, the engine answers.
		p.waitFor(t, p.stderr, `msg="engine answering" component=engine-probe`)
		p.waitFor(t, p.stderr, `msg="engine answering" component=engine-poller`)
		if strings.Contains(p.stderr.String(), "command table not read") {
			t.Errorf("the engine's command table was not read:\n%s", p.stderr)
		}
	})
}

// suitesWorkload runs a few commands of several types through c, its keys
// under prefix, and returns their replies with the prefix left out.
func suitesWorkload(t *testing.T, c *redis.Client, prefix string) []any {
	t.Helper()
	ctx := context.Background()
	var out []any
	for _, args := range [][]any{
		{"SET", prefix + "s", "v"}, {"GET", prefix + "s"}, {"INCRBY", prefix + "n", 5},
		{"HSET", prefix + "h", "a", "1", "b", "2"}, {"HGETALL", prefix + "h"},
		{"RPUSH", prefix + "l", "x", "y", "z"}, {"LRANGE", prefix + "l", 0, -1},
		{"GET", prefix + "missing"}, {"LPUSH", prefix + "s", "wrong type"},
	} {
		v, err := c.Do(ctx, args...).Result()
		if err != nil {
			v = "error: " + err.Error()
		}
		out = append(out, v)
	}
	return out
}

// TestProxyTLSClientProtocols: respmeter's TLS listener with
// --tls-protocols TLSv1.3 refuses a go-redis client whose tls.Config
// stops at TLS 1.2 (counted as reason protocol_version) and serves one
// with TLS 1.3; with --tls-protocols TLSv1.2 and --tls-ciphers
// ECDHE-ECDSA-AES128-GCM-SHA256 it refuses a client offering only
// another suite (counted as reason cipher) and serves one offering that
// one, which the client-side handshakes then show.
func TestProxyTLSClientProtocols(t *testing.T) {
	ca := redistest.NewCA(t)
	srv := redistest.Start(t)
	pc := ca.IssueValid("respmeter")
	ping := func(addr string, c *tls.Config) error {
		cl := redis.NewClient(&redis.Options{Addr: addr, TLSConfig: c, DisableIdentity: true, MaxRetries: -1})
		defer cl.Close()
		return cl.Ping(context.Background()).Err()
	}
	listener := func(t *testing.T, args ...string) (addr, admin string) {
		p, _, admin := startProxy(t, srv.Addr(), append([]string{"--tls-listen", "127.0.0.1:0", "--tls-cert-file", pc.CertFile,
			"--tls-key-file", pc.KeyFile, "--tls-auth-clients", "no", "--loops", "1"}, args...)...)
		return p.waitFor(t, p.stderr, `msg="proxy listening".* tls_addr=(\S+)`)[1], admin
	}
	metric := func(t *testing.T, admin string, re string) {
		t.Helper()
		want := regexp.MustCompile(re)
		redistest.Eventually(t, 5*time.Second, func() error {
			if body := httpGet(t, "http://"+admin+"/metrics"); !want.MatchString(body) {
				return fmt.Errorf("/metrics has no %s", want)
			}
			return nil
		})
	}

	t.Run("TLSv1.3", func(t *testing.T) {
		addr, admin := listener(t, "--tls-protocols", "TLSv1.3")
		old := ca.ClientConfig()
		old.MaxVersion = tls.VersionTLS12
		if err := ping(addr, old); err == nil || !strings.Contains(err.Error(), "protocol version") {
			t.Errorf("PING from a TLS 1.2 client: %v, want a protocol version alert", err)
		}
		metric(t, admin, `(?m)^respmeter_tls_handshake_errors_total\{reason="protocol_version",side="client"\} [1-9]\d*$`)
		cur := ca.ClientConfig()
		cur.MinVersion = tls.VersionTLS13
		if err := ping(addr, cur); err != nil {
			t.Errorf("PING from a TLS 1.3 client: %v", err)
		}
		metric(t, admin, `(?m)^respmeter_tls_handshakes_total\{cipher="TLS_[A-Z0-9_]+",side="client",version="TLS 1.3"\} [1-9]\d*$`)
	})

	t.Run("TLSv1.2 one suite", func(t *testing.T) {
		addr, admin := listener(t, "--tls-protocols", "TLSv1.2", "--tls-ciphers", "ECDHE-ECDSA-AES128-GCM-SHA256")
		other := ca.ClientConfig()
		other.CipherSuites = []uint16{tls.TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384}
		if err := ping(addr, other); err == nil || !strings.Contains(err.Error(), "handshake failure") {
			t.Errorf("PING from a client offering another suite: %v, want a handshake failure alert", err)
		}
		metric(t, admin, `(?m)^respmeter_tls_handshake_errors_total\{reason="cipher",side="client"\} [1-9]\d*$`)
		same := ca.ClientConfig()
		same.CipherSuites = []uint16{tls.TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384, tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256}
		if err := ping(addr, same); err != nil {
			t.Errorf("PING from a client offering the suite: %v", err)
		}
		metric(t, admin, `(?m)^respmeter_tls_handshakes_total\{cipher="TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",side="client",version="TLS 1.2"\} [1-9]\d*$`)
	})
}

// TestCheckTLSCiphers: respmeter check, as redis-cli does, reaches an
// engine restricted to AES128-SHA256 with --tls-ciphers AES128-SHA256
// (warned on stderr: Go lists the suite as insecure), and without it fails
// at the handshake, saying so.
func TestCheckTLSCiphers(t *testing.T) {
	ca := redistest.NewCA(t)
	srv := redistest.StartTLSRSA(t, ca, "--tls-auth-clients", "no", "--tls-ciphers", "AES128-SHA256", "--tls-protocols", "TLSv1.2")
	args := []string{"--target", srv.Addr(), "--tls", "--cacert", ca.CertFile, "--conns", "2", "--commands", "500", "--seed", "7"}
	stdout, stderr, code := execCheck(t, append(args, "--tls-ciphers", "AES128-SHA256")...)
	if m := checkSummaryRe.FindStringSubmatch(stdout); code != exitOK || m == nil || m[1] != "500" {
		t.Errorf("--tls-ciphers AES128-SHA256: exit %d, want a clean summary of 500 commands\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	if !strings.Contains(stderr, "respmeter: warning: --tls-ciphers offers TLS_RSA_WITH_AES_128_CBC_SHA256, which Go lists as insecure") {
		t.Errorf("no warning of the insecure suite on stderr:\n%s", stderr)
	}
	stdout, stderr, code = execCheck(t, args...)
	if code != exitFailure || !strings.Contains(stderr, "unreachable") || !strings.Contains(stderr, "remote error: tls: handshake failure") {
		t.Errorf("Go's suites: exit %d, want %d with the handshake failure\nstdout:\n%s\nstderr:\n%s", code, exitFailure, stdout, stderr)
	}
}
