package main

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/respmeter/respmeter/internal/redistest"
)

// TestProxyTLS runs "respmeter proxy" with a TLS listener (its key file
// given in the environment) in front of a TLS-only redis-server: a go-redis
// client with a tls.Config gets its replies, /metrics counts the handshakes
// of both sides, and neither the logs nor --check show the private keys.
func TestProxyTLS(t *testing.T) {
	ca := redistest.NewCA(t)
	srv := redistest.StartTLS(t, ca)
	pc, uc := ca.IssueValid("respmeter"), ca.IssueValid("respmeter-upstream")
	tlsArgs := []string{
		"--tls-listen", "127.0.0.1:0", "--tls-cert-file", pc.CertFile, "--tls-ca-cert-file", ca.CertFile, "--tls-auth-clients", "optional",
		"--upstream-tls", "--upstream-tls-ca-cert-file", ca.CertFile, "--upstream-tls-cert-file", uc.CertFile, "--upstream-tls-key-file", uc.KeyFile,
	}
	env := []string{"RESPMETER_TLS_KEY_FILE=" + pc.KeyFile}
	p := start(t, env, append([]string{"proxy", "--listen", "127.0.0.1:0", "--upstream", srv.Addr(), "--admin", "127.0.0.1:0",
		"--loops", "2", "--log-level", "debug"}, tlsArgs...)...)
	m := p.waitFor(t, p.stderr, `msg="proxy listening".* tls_addr=(\S+)`)
	tlsAddr := m[1]
	admin := p.waitFor(t, p.stderr, logAddr("admin listening"))[1]

	c := redis.NewClient(&redis.Options{Addr: tlsAddr, TLSConfig: ca.ClientConfig(), DisableIdentity: true})
	defer c.Close()
	ctx := context.Background()
	if err := c.Set(ctx, "tls:k", "v", 0).Err(); err != nil {
		t.Fatalf("SET through TLS: %v", err)
	}
	if got, err := c.Get(ctx, "tls:k").Result(); got != "v" || err != nil {
		t.Fatalf("GET through TLS: %q, %v", got, err)
	}
	if got := srv.Do("GET", "tls:k"); got != "v" {
		t.Errorf("the engine holds %v, want v", got)
	}
	for _, side := range []string{"client", "upstream"} {
		want := regexp.MustCompile(`(?m)^respmeter_tls_handshakes_total\{cipher="[A-Z0-9_]+",side="` + side + `",version="TLS 1.3"\} [1-9]`)
		redistest.Eventually(t, 5*time.Second, func() error {
			if body := httpGet(t, "http://"+admin+"/metrics"); !want.MatchString(body) {
				return fmt.Errorf("/metrics has no %s", want)
			}
			return nil
		})
	}

	p.signal(t, syscall.SIGTERM)
	if code := p.wait(t); code != exitOK {
		t.Fatalf("exit %d after SIGTERM\nstderr:\n%s", code, p.stderr)
	}
	check := start(t, env, append([]string{"proxy", "--check", "--upstream", srv.Addr()}, tlsArgs...)...)
	if code := check.wait(t); code != exitOK {
		t.Fatalf("--check exit %d\n%s", code, check.stderr)
	}
	for _, kf := range []string{pc.KeyFile, uc.KeyFile} {
		b, err := os.ReadFile(kf)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(b), "\n") {
			if len(line) < 20 {
				continue // the PEM armour and short lines
			}
			for name, out := range map[string]string{"proxy log": p.stderr.String(), "--check": check.stdout.String() + check.stderr.String()} {
				if strings.Contains(out, line) {
					t.Errorf("%s shows the private key of %s", name, kf)
				}
			}
		}
	}
	if !strings.Contains(check.stdout.String(), "tls_key_file: "+pc.KeyFile) {
		t.Errorf("--check does not show the key file's path:\n%s", check.stdout)
	}
}

// TestProxyTLSInsecureWarned: --upstream-tls-insecure-skip-verify is
// warned about at start, and reaches an engine whose CA respmeter does
// not know (a plaintext client on --listen).
func TestProxyTLSInsecureWarned(t *testing.T) {
	srv := redistest.StartTLS(t, redistest.NewCA(t), "--tls-auth-clients", "no")
	p, addr, _ := startProxy(t, srv.Addr(), "--upstream-tls", "--upstream-tls-insecure-skip-verify")
	p.waitFor(t, p.stderr, `level=WARN msg="upstream TLS certificates are not verified`)
	c := redis.NewClient(&redis.Options{Addr: addr, DisableIdentity: true})
	defer c.Close()
	if got, err := c.Ping(context.Background()).Result(); got != "PONG" || err != nil {
		t.Errorf("PING through an unverified TLS upstream: %q, %v", got, err)
	}
}
