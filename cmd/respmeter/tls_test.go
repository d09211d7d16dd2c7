package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/respmeter/respmeter/internal/redistest"
	"github.com/respmeter/respmeter/internal/resp"
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

	setGetTLS(t, tlsAddr, ca, srv)
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

// setGetTLS sets a key with a go-redis client over TLS (trusting ca) at
// addr, reads it back, and finds it in the engine srv.
func setGetTLS(t *testing.T, addr string, ca *redistest.CA, srv *redistest.Server) {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr, TLSConfig: ca.ClientConfig(), DisableIdentity: true})
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

// TestProxyTLSOnly runs "respmeter proxy" with listen off (from the
// environment, RESPMETER_LISTEN=off) and a TLS listener: a go-redis client
// over TLS is served, and the process listens on no TCP socket but the TLS
// one, so nothing is on the plaintext default 127.0.0.1:6380.
func TestProxyTLSOnly(t *testing.T) {
	ca := redistest.NewCA(t)
	srv := redistest.StartTLS(t, ca)
	pc, uc := ca.IssueValid("respmeter"), ca.IssueValid("respmeter-upstream")
	p := start(t, []string{"RESPMETER_LISTEN=off"}, "proxy", "--upstream", srv.Addr(), "--admin", "off", "--loops", "2",
		"--tls-listen", "127.0.0.1:0", "--tls-cert-file", pc.CertFile, "--tls-key-file", pc.KeyFile, "--tls-auth-clients", "no",
		"--upstream-tls", "--upstream-tls-ca-cert-file", ca.CertFile, "--upstream-tls-cert-file", uc.CertFile, "--upstream-tls-key-file", uc.KeyFile)
	m := p.waitFor(t, p.stderr, `msg="proxy listening".* addr=(\S+) .* tls_addr=(\S+)`)
	if m[1] != "off" {
		t.Errorf("proxy listening addr=%s, want off", m[1])
	}
	setGetTLS(t, m[2], ca, srv)
	if got := tcpListeners(t, p.cmd.Process.Pid); !slices.Equal(got, []string{m[2]}) {
		t.Errorf("the proxy listens on TCP %v, want only its TLS listener %s", got, m[2])
	}
	p.signal(t, syscall.SIGTERM)
	if code := p.wait(t); code != exitOK {
		t.Fatalf("exit %d after SIGTERM\nstderr:\n%s", code, p.stderr)
	}
}

// tcpListeners returns the addresses of the listening TCP sockets
// (IPv4 and IPv6) process pid holds: its descriptors' socket inodes
// matched against /proc/<pid>/net/tcp{,6} rows in state 0A (LISTEN).
func tcpListeners(t *testing.T, pid int) []string {
	t.Helper()
	fds, err := filepath.Glob(fmt.Sprintf("/proc/%d/fd/*", pid))
	if err != nil {
		t.Fatal(err)
	}
	inodes := map[string]bool{}
	for _, fd := range fds {
		if l, err := os.Readlink(fd); err == nil && strings.HasPrefix(l, "socket:[") {
			inodes[strings.TrimSuffix(strings.TrimPrefix(l, "socket:["), "]")] = true
		}
	}
	var out []string
	for _, table := range []string{"tcp", "tcp6"} {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/net/%s", pid, table))
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(b), "\n")[1:] {
			f := strings.Fields(line)
			if len(f) < 10 || f[3] != "0A" || !inodes[f[9]] {
				continue
			}
			out = append(out, procNetAddr(t, f[1]))
		}
	}
	slices.Sort(out)
	return out
}

// procNetAddr decodes a /proc/net/tcp address, "0100007F:18EB": the IP
// in host byte order (little-endian here) by 32-bit words, the port in
// hex.
func procNetAddr(t *testing.T, s string) string {
	t.Helper()
	hexIP, hexPort, _ := strings.Cut(s, ":")
	b, err := hex.DecodeString(hexIP)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+4 <= len(b); i += 4 {
		b[i], b[i+1], b[i+2], b[i+3] = b[i+3], b[i+2], b[i+1], b[i]
	}
	port, err := strconv.ParseUint(hexPort, 16, 16)
	if err != nil {
		t.Fatal(err)
	}
	return net.JoinHostPort(net.IP(b).String(), strconv.FormatUint(port, 10))
}

// startTLSProxy runs "respmeter proxy" with only a TLS listener (no client
// certificates asked) in front of the TLS engine srv of ca, connecting to
// it over TLS with a client certificate, and returns its TLS address.
func startTLSProxy(t *testing.T, ca *redistest.CA, srv *redistest.Server) (p *proc, tlsAddr string) {
	t.Helper()
	pc, uc := ca.IssueValid("respmeter"), ca.IssueValid("respmeter-upstream")
	p = start(t, nil, "proxy", "--listen", "off", "--upstream", srv.Addr(), "--admin", "off", "--loops", "2",
		"--tls-listen", "127.0.0.1:0", "--tls-cert-file", pc.CertFile, "--tls-key-file", pc.KeyFile, "--tls-auth-clients", "no",
		"--upstream-tls", "--upstream-tls-ca-cert-file", ca.CertFile, "--upstream-tls-cert-file", uc.CertFile, "--upstream-tls-key-file", uc.KeyFile)
	return p, p.waitFor(t, p.stderr, `msg="proxy listening".* tls_addr=(\S+)`)[1]
}

// keyShown reports whether out holds a line of the private key in keyFile.
func keyShown(t *testing.T, out, keyFile string) bool {
	t.Helper()
	b, err := os.ReadFile(keyFile)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if len(line) >= 20 && strings.Contains(out, line) { // not the PEM armour
			return true
		}
	}
	return false
}

// TestCheckTLS: respmeter check --tls finds every reply in place on a
// TLS-only engine (with a client certificate, --cert and --key) and
// through respmeter's TLS listener; against a CA it does not know it
// fails at once, saying why; TLS flags without --tls are usage errors;
// the key file's content is never printed.
func TestCheckTLS(t *testing.T) {
	ca := redistest.NewCA(t)
	srv := redistest.StartTLS(t, ca)
	_, proxyAddr := startTLSProxy(t, ca, srv)
	cc := ca.IssueValid("check-client")
	var outs strings.Builder
	for name, args := range map[string][]string{
		"engine": {"--target", srv.Addr(), "--cacert", ca.CertFile, "--cert", cc.CertFile, "--key", cc.KeyFile},
		"proxy":  {"--target", proxyAddr, "--cacert", ca.CertFile},
	} {
		stdout, stderr, code := execCheck(t, append(args, "--tls", "--conns", "8", "--commands", "4000", "--depth", "16", "--seed", "7")...)
		outs.WriteString(stdout + stderr)
		if code != exitOK {
			t.Errorf("%s: exit %d\nstdout:\n%s\nstderr:\n%s", name, code, stdout, stderr)
			continue
		}
		if m := checkSummaryRe.FindStringSubmatch(stdout); m == nil || m[1] != "4000" || !strings.Contains(stdout, " over TLS: ") {
			t.Errorf("%s: no clean summary of 4000 commands over TLS in:\n%s", name, stdout)
		}
	}

	// A CA that did not sign the engine's certificate: refused in the
	// handshake, well before --timeout.
	other := redistest.NewCA(t)
	begin := time.Now()
	stdout, stderr, code := execCheck(t, "--target", proxyAddr, "--tls", "--cacert", other.CertFile, "--conns", "4", "--commands", "100", "--timeout", "10s")
	took := time.Since(begin)
	outs.WriteString(stdout + stderr)
	if code != exitFailure || !strings.Contains(stderr, "unreachable") || !strings.Contains(stderr, "certificate signed by unknown authority") {
		t.Errorf("wrong CA: exit %d, want %d with the verification error\nstdout:\n%s\nstderr:\n%s", code, exitFailure, stdout, stderr)
	}
	if took > 5*time.Second {
		t.Errorf("wrong CA: check took %v, want it to fail at the handshake", took)
	}

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--cacert", ca.CertFile}, "--cacert needs --tls"},
		{[]string{"--insecure"}, "--insecure needs --tls"},
		{[]string{"--tls", "--cert", cc.CertFile}, "give --cert and --key together"},
	} {
		stdout, stderr, code := execCheck(t, append([]string{"--target", proxyAddr}, tc.args...)...)
		if code != exitUsage || !strings.Contains(stderr, tc.want) {
			t.Errorf("%q: exit %d, want %d with %q\nstdout:\n%s\nstderr:\n%s", tc.args, code, exitUsage, tc.want, stdout, stderr)
		}
	}
	// A key file that is not a key: the error names the files only.
	stdout, stderr, code = execCheck(t, "--target", proxyAddr, "--tls", "--cert", cc.CertFile, "--key", ca.CertFile)
	outs.WriteString(stdout + stderr)
	if code != exitFailure || !strings.Contains(stderr, ca.CertFile) {
		t.Errorf("bad key file: exit %d, want %d naming it\nstderr:\n%s", code, exitFailure, stderr)
	}
	if keyShown(t, outs.String(), cc.KeyFile) {
		t.Errorf("check printed the private key of %s:\n%s", cc.KeyFile, outs.String())
	}
}

// TestReplayTLS: a capture replayed with --tls to a TLS-only engine
// (client certificate) and through respmeter's TLS listener gives the
// same report counts as replayed in plaintext; a wrong CA fails at once
// with the verification error; the key is never printed.
func TestReplayTLS(t *testing.T) {
	path := setGetCapture(t)
	ca := redistest.NewCA(t)
	tlsSrv := redistest.StartTLS(t, ca)
	_, proxyAddr := startTLSProxy(t, ca, tlsSrv)
	plain := redistest.Start(t)
	rc := ca.IssueValid("replay-client")

	type report struct {
		Commands, Mismatches, Batches int
		NewErrors                     int                                        `json:"new_errors"`
		PerCommand                    map[string]struct{ Count, Mismatches int } `json:"per_command"`
	}
	var outs strings.Builder
	replayCLI := func(args ...string) (rep report, stderr string, code int) {
		t.Helper()
		jsonPath := filepath.Join(t.TempDir(), "r.json")
		var out, errb bytes.Buffer
		code = run(context.Background(), append([]string{"replay", path, "--speed", "max", "--json", jsonPath}, args...), &out, &errb)
		outs.WriteString(out.String() + errb.String())
		if b, err := os.ReadFile(jsonPath); err == nil {
			outs.Write(b)
			if err := json.Unmarshal(b, &rep); err != nil {
				t.Fatal(err)
			}
		}
		return rep, errb.String(), code
	}
	want, stderr, code := replayCLI("--target", plain.Addr())
	if code != exitOK || want.Commands != 100 || want.Mismatches != 0 || want.PerCommand["set"].Count != 50 {
		t.Fatalf("plaintext: exit %d, report %+v\n%s", code, want, stderr)
	}
	for name, args := range map[string][]string{
		"engine": {"--target", tlsSrv.Addr(), "--cacert", ca.CertFile, "--cert", rc.CertFile, "--key", rc.KeyFile},
		"proxy":  {"--target", proxyAddr, "--cacert", ca.CertFile},
	} {
		got, stderr, code := replayCLI(append(args, "--tls")...)
		if code != exitOK || !reflect.DeepEqual(got, want) {
			t.Errorf("%s over TLS: exit %d, report %+v, want %+v as in plaintext\n%s", name, code, got, want, stderr)
		}
	}

	begin := time.Now()
	_, stderr, code = replayCLI("--target", proxyAddr, "--tls", "--cacert", redistest.NewCA(t).CertFile)
	if code != exitFailure || !strings.Contains(stderr, "certificate signed by unknown authority") || time.Since(begin) > 5*time.Second {
		t.Errorf("wrong CA: exit %d after %v, want %d at once with the verification error\n%s", code, time.Since(begin), exitFailure, stderr)
	}
	if keyShown(t, outs.String(), rc.KeyFile) {
		t.Errorf("replay printed the private key of %s", rc.KeyFile)
	}
}

// TestProxyTLSReload rotates the TLS listener's certificate of a running
// "respmeter proxy": on SIGHUP, then by replacing the files alone (read
// again within tlsconf.WatchInterval). A client connected before keeps
// being served, each new client gets the certificate installed last (told
// by its serial), and a certificate with another certificate's key is
// refused: the one in use stays, and the log says why, naming the files
// and never showing a key. The client certificate towards the engine
// reloads too: an expired one is refused by the engine, a renewed one
// served.
func TestProxyTLSReload(t *testing.T) {
	ca := redistest.NewCA(t)
	srv := redistest.StartTLS(t, ca)
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "respmeter.crt"), filepath.Join(dir, "respmeter.key")
	first, second, third := ca.IssueValid("first"), ca.IssueValid("second"), ca.IssueValid("third")
	first.CopyTo(t, certFile, keyFile)
	uc := ca.IssueValid("respmeter-upstream")
	upCert, upKey := filepath.Join(dir, "upstream.crt"), filepath.Join(dir, "upstream.key")
	uc.CopyTo(t, upCert, upKey)
	p := start(t, nil, "proxy", "--listen", "off", "--upstream", srv.Addr(), "--admin", "off", "--loops", "2",
		"--tls-listen", "127.0.0.1:0", "--tls-cert-file", certFile, "--tls-key-file", keyFile, "--tls-auth-clients", "no",
		"--upstream-tls", "--upstream-tls-ca-cert-file", ca.CertFile, "--upstream-tls-cert-file", upCert, "--upstream-tls-key-file", upKey)
	addr := p.waitFor(t, p.stderr, `msg="proxy listening".* tls_addr=(\S+)`)[1]

	type conn struct {
		serial string
		ping   func() string
	}
	dial := func() conn {
		t.Helper()
		c, err := tls.Dial("tcp", addr, ca.ClientConfig())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		r := bufio.NewReader(c)
		return conn{c.ConnectionState().PeerCertificates[0].SerialNumber.Text(16), func() string {
			_ = c.SetDeadline(time.Now().Add(5 * time.Second))
			if _, err := c.Write(redistest.Cmd("PING")); err != nil {
				return err.Error()
			}
			line, err := r.ReadString('\n')
			if err != nil {
				return err.Error()
			}
			return line
		}}
	}
	serialOf := func(c redistest.Cert) string { return c.TLS.Leaf.SerialNumber.Text(16) }

	before := dial()
	if before.serial != serialOf(first) || before.ping() != "+PONG\r\n" {
		t.Fatalf("before any rotation: serial %s, want %s", before.serial, serialOf(first))
	}

	second.CopyTo(t, certFile, keyFile)
	p.signal(t, syscall.SIGHUP)
	p.waitFor(t, p.stderr, `msg="TLS certificates reloaded" component=tls side=client .*serial=`+serialOf(second))
	if got := dial().serial; got != serialOf(second) {
		t.Errorf("after SIGHUP a new client got serial %s, want %s", got, serialOf(second))
	}
	if got := before.ping(); got != "+PONG\r\n" {
		t.Errorf("PING on the connection made before the rotation: %q", got)
	}

	third.CopyTo(t, certFile, keyFile) // no signal: the files alone
	p.waitFor(t, p.stderr, `msg="TLS certificates reloaded" component=tls side=client .*serial=`+serialOf(third))
	if got := dial().serial; got != serialOf(third) {
		t.Errorf("after the files changed a new client got serial %s, want %s", got, serialOf(third))
	}

	redistest.Cert{CertFile: first.CertFile, KeyFile: second.KeyFile}.CopyTo(t, certFile, keyFile) // a certificate with another's key
	m := p.waitFor(t, p.stderr, `level=WARN msg="TLS certificates not reloaded: the ones in use are kept" component=tls side=client err="([^"]*)"`)
	if !strings.Contains(m[1], keyFile) || !strings.Contains(m[1], "private key does not match public key") {
		t.Errorf("the failed reload's reason %q does not name %s and the mismatch", m[1], keyFile)
	}
	if got := dial().serial; got != serialOf(third) {
		t.Errorf("after a failed reload a new client got serial %s, want the kept %s", got, serialOf(third))
	}
	if got := before.ping(); got != "+PONG\r\n" {
		t.Errorf("PING on the connection made before every rotation: %q", got)
	}

	// The client certificate towards the engine (which verifies it):
	// replaced on SIGHUP by an expired one, the engine refuses the proxy's
	// new connections (its connections killed, so that it dials again);
	// replaced by a valid one (the files alone), they are served again.
	expired := ca.Issue("upstream-expired", time.Now().Add(-48*time.Hour), time.Now().Add(-24*time.Hour))
	expired.CopyTo(t, upCert, upKey)
	p.signal(t, syscall.SIGHUP)
	p.waitFor(t, p.stderr, `msg="TLS certificates reloaded" component=tls side=upstream .*serial=`+serialOf(expired))
	srv.DoT(t, "CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes")
	for i := range 3 {
		if got := dial().ping(); got == "+PONG\r\n" {
			t.Errorf("client %d served with the proxy's client certificate expired", i)
		}
	}
	renewed := ca.IssueValid("upstream-renewed")
	renewed.CopyTo(t, upCert, upKey)
	p.waitFor(t, p.stderr, `msg="TLS certificates reloaded" component=tls side=upstream .*serial=`+serialOf(renewed))
	redistest.Eventually(t, 10*time.Second, func() error {
		if got := dial().ping(); got != "+PONG\r\n" {
			return fmt.Errorf("PING with the renewed client certificate: %q", got)
		}
		return nil
	})

	p.signal(t, syscall.SIGTERM)
	if code := p.wait(t); code != exitOK {
		t.Fatalf("exit %d after SIGTERM\nstderr:\n%s", code, p.stderr)
	}
	for _, c := range []redistest.Cert{first, second, third, uc, expired, renewed} {
		if keyShown(t, p.stderr.String(), c.KeyFile) {
			t.Errorf("the log shows the private key of %s", c.KeyFile)
		}
	}
}

// TestProxyTLSReloadUpstreamCA: "respmeter proxy" with only
// --upstream-tls-ca-cert-file towards the engine (no client certificate)
// reads that file again on SIGHUP. The engine, serving a certificate of CA
// A, is switched to one of CA B (CONFIG SET tls-cert-file): the proxy's
// new engine connections fail verification; once the file holds B and
// SIGHUP is sent, they are served, with no restart.
func TestProxyTLSReloadUpstreamCA(t *testing.T) {
	a, b := redistest.NewCA(t), redistest.NewCA(t)
	srv := redistest.StartTLS(t, a, "--tls-auth-clients", "no")
	caFile := filepath.Join(t.TempDir(), "upstream-ca.crt")
	redistest.ReplaceFile(t, a.CertFile, caFile)
	pc := a.IssueValid("respmeter")
	p := start(t, nil, "proxy", "--listen", "off", "--upstream", srv.Addr(), "--admin", "off", "--loops", "1",
		"--tls-listen", "127.0.0.1:0", "--tls-cert-file", pc.CertFile, "--tls-key-file", pc.KeyFile, "--tls-auth-clients", "no",
		"--upstream-tls", "--upstream-tls-ca-cert-file", caFile)
	addr := p.waitFor(t, p.stderr, `msg="proxy listening".* tls_addr=(\S+)`)[1]
	ping := func() string {
		t.Helper()
		c, err := redistest.DialConnTLS(addr, 5*time.Second, a.ClientConfig())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.Send(t, redistest.Cmd("PING"))
		f, err := c.ReadFrame(5 * time.Second)
		if err != nil {
			return err.Error()
		}
		return string(f)
	}
	if got := ping(); got != "+PONG\r\n" {
		t.Fatalf("PING with the engine on CA A, A trusted: %q", got)
	}
	adm, err := redistest.DialConnTLS(srv.Addr(), 5*time.Second, a.ClientConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	eb := b.IssueValid("engine-b")
	for _, args := range [][]string{
		{"CONFIG", "SET", "tls-cert-file", eb.CertFile, "tls-key-file", eb.KeyFile},
		{"CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes"},
	} {
		adm.Send(t, redistest.Cmd(args...))
		if f, err := adm.ReadFrame(5 * time.Second); err != nil || resp.IsErrorReply(f) {
			t.Fatalf("%v on the engine: %q, %v", args, f, err)
		}
	}
	if got := ping(); !strings.Contains(got, "tls: failed to verify certificate: x509: certificate signed by unknown authority") {
		t.Errorf("PING with the engine on CA B, A trusted: %q, want the failed verification", got)
	}
	redistest.ReplaceFile(t, b.CertFile, caFile)
	p.signal(t, syscall.SIGHUP)
	p.waitFor(t, p.stderr, `msg="TLS certificates reloaded" component=tls side=upstream`)
	redistest.Eventually(t, 10*time.Second, func() error {
		if got := ping(); got != "+PONG\r\n" {
			return fmt.Errorf("PING with the engine on CA B, B trusted: %q", got)
		}
		return nil
	})
	p.signal(t, syscall.SIGTERM)
	if code := p.wait(t); code != exitOK {
		t.Fatalf("exit %d after SIGTERM\nstderr:\n%s", code, p.stderr)
	}
}

// TestDemoTLS runs "respmeter demo --tls": the load connects to
// respmeter's TLS listener and respmeter to redis-server over TLS (Debian's
// is built with it), every command is answered (0 errors, the table's
// rows), each side's handshakes are shown (at least one per load
// connection on the client side), and the throwaway certificates' directory
// is gone at exit, no key printed. With no redis-server (the embedded
// miniredis) the engine side says it is plaintext.
func TestDemoTLS(t *testing.T) {
	for _, tc := range []struct {
		name     string
		env      []string
		upstream string
	}{
		{"redis-server", nil, `(?m)^tls upstream \(respmeter -> engine\): [1-9]\d* handshakes, mean \d+\.\d{3} ms, TLS 1\.[23] TLS_\w+ x\d+; no failed handshakes$`},
		{"miniredis", []string{"PATH="}, `(?m)^tls upstream \(respmeter -> engine\): plaintext, the engine serves no TLS$`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if tc.env == nil {
				if testing.Short() {
					t.Skip("demo with redis-server skipped with -short")
				}
				redistest.Tool(t, "redis-server")
			}
			const conns = 4
			p := start(t, tc.env, "demo", "--tls", "--duration", "700ms", "--conns", strconv.Itoa(conns))
			code := p.wait(t)
			stdout, stderr := p.stdout.String(), p.stderr.String()
			if code != exitOK {
				t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
			}
			checkDemoOutput(t, stdout, p.cmd.Process.Pid)
			if tc.env == nil && !strings.Contains(stdout, "engine: redis-server 7.0.15 (/usr/bin/redis-server), TLS only (--port 0 --tls-port)\n") {
				t.Errorf("the engine line does not say TLS only:\n%s", stdout)
			}
			m := regexp.MustCompile(`(?m)^proxy TLS listener: 127\.0\.0\.1:\d+ \(throwaway certificates in (\S+), removed at exit\)$`).FindStringSubmatch(stdout)
			if m == nil {
				t.Fatalf("no TLS listener line:\n%s", stdout)
			}
			if _, err := os.Stat(m[1]); !os.IsNotExist(err) {
				t.Errorf("the certificates' directory %s is still there after exit (%v)", m[1], err)
			}
			client := regexp.MustCompile(`(?m)^tls client \(load -> respmeter\): (\d+) handshakes, mean \d+\.\d{3} ms, TLS 1\.[23] TLS_\w+ x\d+; no failed handshakes$`).FindStringSubmatch(stdout)
			if client == nil {
				t.Fatalf("no client-side TLS line:\n%s", stdout)
			}
			if n, _ := strconv.Atoi(client[1]); n < conns {
				t.Errorf("%d client handshakes for %d load connections", n, conns)
			}
			if !regexp.MustCompile(tc.upstream).MatchString(stdout) {
				t.Errorf("no upstream TLS line matching %s:\n%s", tc.upstream, stdout)
			}
			for _, want := range []string{" 0 errors\n", tableHeader} {
				if !strings.Contains(stdout, want) {
					t.Errorf("stdout does not contain %q:\n%s", want, stdout)
				}
			}
			for _, cmd := range []string{"get", "set", "incr", "hset", "hgetall", "lpush", "lrange"} {
				if !regexp.MustCompile(`(?m)^` + cmd + ` +[1-9]\d* `).MatchString(stdout) {
					t.Errorf("table has no %s row:\n%s", cmd, stdout)
				}
			}
			if strings.Contains(stdout+stderr, "PRIVATE KEY") {
				t.Error("the demo printed a private key")
			}
		})
	}
}
