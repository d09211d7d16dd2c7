package proxy_test

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/respmeter/respmeter/internal/redistest"
	"github.com/respmeter/respmeter/internal/tlsconf"
	"github.com/respmeter/respmeter/metrics"
	"github.com/respmeter/respmeter/proxy"
)

// tlsConn is a raw TLS client connection of the proxy: the serial of the
// certificate the proxy presented, and PING on it.
type tlsConn struct {
	c *tls.Conn
	r *bufio.Reader
}

func dialTLSConn(t *testing.T, addr string, cfg *tls.Config) tlsConn {
	t.Helper()
	c, err := tls.Dial("tcp", addr, cfg)
	if err != nil {
		t.Fatalf("TLS dial %s: %v", addr, err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return tlsConn{c, bufio.NewReader(c)}
}

func (c tlsConn) serial() *big.Int { return c.c.ConnectionState().PeerCertificates[0].SerialNumber }

// ping sends PING and returns the reply's line ("+PONG\r\n", an error
// line), or the read's error.
func (c tlsConn) ping() (string, error) {
	_ = c.c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.c.Write(redistest.Cmd("PING")); err != nil {
		return "", err
	}
	return c.r.ReadString('\n')
}

// TestTLSReload rotates the certificates of both sides of a running proxy
// (tlsconf.Reloader, as respmeter proxy does on SIGHUP and when the files
// change), with Debian's redis-server serving TLS only and verifying
// client certificates. The client-facing side: a client connected before
// the rotation keeps being served, a new client gets the new certificate
// (told by its serial), a broken file keeps it. Towards the engine: once
// the proxy's client certificate is replaced by an expired one, the
// engine refuses the proxy's new connections; once replaced by a valid one
// they are served again, with no restart.
func TestTLSReload(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "respmeter.crt"), filepath.Join(dir, "respmeter.key")
	upCert, upKey := filepath.Join(dir, "upstream.crt"), filepath.Join(dir, "upstream.key")
	var server, upstream *tlsconf.Reloader
	var first redistest.Cert
	e := tlsSetup(t, tlsconf.AuthClientsNo, func(e *tlsEnv, c *proxy.Config) {
		first = e.ca.IssueValid("first")
		first.CopyTo(t, certFile, keyFile)
		e.ca.IssueValid("upstream-first").CopyTo(t, upCert, upKey)
		var err error
		if server, err = tlsconf.NewServerReloader(certFile, keyFile, "", tlsconf.AuthClientsNo, tlsconf.Suites{}, c.Logger); err != nil {
			t.Fatal(err)
		}
		if upstream, err = tlsconf.NewClientReloader(e.ca.CertFile, upCert, upKey, "", false, tlsconf.Suites{}, c.Logger); err != nil {
			t.Fatal(err)
		}
		c.TLS, c.UpstreamTLS = server.Config(), upstream.Dialer()
	})
	cfg := e.ca.ClientConfig()

	before := dialTLSConn(t, e.addr, cfg)
	if got := before.serial(); got.Cmp(first.TLS.Leaf.SerialNumber) != 0 {
		t.Fatalf("serial %v before the rotation, want %v", got, first.TLS.Leaf.SerialNumber)
	}
	if got, err := before.ping(); got != "+PONG\r\n" || err != nil {
		t.Fatalf("PING before the rotation: %q, %v", got, err)
	}

	second := e.ca.IssueValid("second")
	second.CopyTo(t, certFile, keyFile)
	if err := server.Reload(); err != nil {
		t.Fatal(err)
	}
	if got, err := before.ping(); got != "+PONG\r\n" || err != nil {
		t.Errorf("PING on the connection made before the rotation: %q, %v", got, err)
	}
	after := dialTLSConn(t, e.addr, cfg)
	if got := after.serial(); got.Cmp(second.TLS.Leaf.SerialNumber) != 0 {
		t.Errorf("a new client got serial %v after the rotation, want %v", got, second.TLS.Leaf.SerialNumber)
	}
	if got, err := after.ping(); got != "+PONG\r\n" || err != nil {
		t.Errorf("PING of a new client after the rotation: %q, %v", got, err)
	}

	if err := os.WriteFile(certFile, []byte("not a certificate\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := server.Reload(); err == nil || !strings.Contains(err.Error(), certFile) {
		t.Errorf("Reload of a broken certificate file: %v, want an error naming it", err)
	}
	if got := dialTLSConn(t, e.addr, cfg).serial(); got.Cmp(second.TLS.Leaf.SerialNumber) != 0 {
		t.Errorf("after a failed reload a new client got serial %v, want the kept %v", got, second.TLS.Leaf.SerialNumber)
	}

	// Towards the engine. Every new connection of the proxy presents the
	// client certificate read last; the engine's connections from the
	// proxy are killed so that each mode (shared links included) dials
	// again.
	served := func() error {
		got, err := dialTLSConn(t, e.addr, cfg).ping()
		if got != "+PONG\r\n" {
			return fmt.Errorf("PING through the proxy: %q, %v", got, err)
		}
		return nil
	}
	killProxyLinks := func() {
		t.Helper()
		e.srv.DoT(t, "CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes")
	}
	killProxyLinks() // the control: with a valid certificate the proxy dials again and is served
	redistest.Eventually(t, 10*time.Second, served)

	e.ca.Issue("upstream-expired", time.Now().Add(-48*time.Hour), time.Now().Add(-24*time.Hour)).CopyTo(t, upCert, upKey)
	if err := upstream.Reload(); err != nil {
		t.Fatal(err)
	}
	killProxyLinks()
	for i := range 5 {
		if got, err := dialTLSConn(t, e.addr, cfg).ping(); got == "+PONG\r\n" {
			t.Errorf("client %d was served through the proxy with an expired client certificate (%v)", i, err)
		}
	}

	e.ca.IssueValid("upstream-renewed").CopyTo(t, upCert, upKey)
	if err := upstream.Reload(); err != nil {
		t.Fatal(err)
	}
	redistest.Eventually(t, 10*time.Second, served)
}

// TestTLSReloadUpstreamCA rotates the CA the engines are verified
// against (--upstream-tls-ca-cert-file, tlsconf.Reloader), with Debian's
// redis-server serving TLS and respmeter logging in as an ACL user. The
// engine starts with a certificate of CA A, trusted; it is switched to
// one of CA B (CONFIG SET tls-cert-file, as an engine's own rotation
// does): respmeter's new engine connections then fail at once with an
// error reply naming the failed verification, never the password; once
// the CA file holds B and is read again, new connections are served, with
// no restart. Each engine connection of the proxy is dialed again after
// a change (CLIENT KILL), so every mode, shared links included, shows it.
func TestTLSReloadUpstreamCA(t *testing.T) {
	t.Parallel()
	const user, password = "app", "up-secret-5e0c1f"
	caFile := filepath.Join(t.TempDir(), "upstream-ca.crt")
	var upstream *tlsconf.Reloader
	e := tlsSetup(t, tlsconf.AuthClientsNo, func(e *tlsEnv, c *proxy.Config) {
		redistest.ReplaceFile(t, e.ca.CertFile, caFile)
		uc := e.ca.IssueValid("respmeter-upstream")
		var err error
		if upstream, err = tlsconf.NewClientReloader(caFile, uc.CertFile, uc.KeyFile, "", false, tlsconf.Suites{}, c.Logger); err != nil {
			t.Fatal(err)
		}
		e.srv.DoT(t, "ACL", "SETUSER", user, "on", ">"+password, "~*", "&*", "+@all")
		c.UpstreamUser, c.UpstreamPassword, c.UpstreamTLS = user, password, upstream.Dialer()
	})
	b := redistest.NewCA(t)
	// The test's own engine connection, made now and kept: after the
	// engine's rotation it could verify neither way alone.
	adm, err := redistest.DialConnTLS(e.srv.Addr(), 5*time.Second, e.ca.ClientConfig(e.ca.IssueValid("admin")))
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	admin := func(want string, args ...string) {
		t.Helper()
		adm.Send(t, redistest.Cmd(args...))
		if f, err := adm.ReadFrame(5 * time.Second); err != nil || !strings.HasPrefix(string(f), want) {
			t.Fatalf("%v on the engine: %q, %v; want %q", args, f, err, want)
		}
	}
	ping := func() (string, error) { return dialTLSConn(t, e.addr, e.ca.ClientConfig()).ping() }
	served := func() error {
		if got, err := ping(); got != "+PONG\r\n" {
			return fmt.Errorf("PING through the proxy: %q, %v", got, err)
		}
		return nil
	}
	if err := served(); err != nil {
		t.Fatalf("engine of CA A, CA A trusted: %v", err)
	}

	engB := b.IssueValid("engine-b")
	admin("+OK", "CONFIG", "SET", "tls-cert-file", engB.CertFile, "tls-key-file", engB.KeyFile)
	admin(":", "CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes")
	start := time.Now()
	got, err := ping()
	want := "-ERR upstream " + e.srv.Addr() + " unreachable: tls: failed to verify certificate: x509: certificate signed by unknown authority"
	if !strings.HasPrefix(got, want) {
		t.Errorf("PING with the engine on CA B, CA A trusted: %q, %v; want %q", got, err, want)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("the error took %v", d)
	}
	if strings.Contains(got, password) {
		t.Errorf("the error reply holds the password: %q", got)
	}
	if n := e.tm.HandshakeErrors(metrics.TLSSideUpstream, "unknown_ca"); n == 0 {
		t.Error("no upstream unknown_ca failure counted")
	}

	redistest.ReplaceFile(t, b.CertFile, caFile)
	if err := upstream.Reload(); err != nil {
		t.Fatal(err)
	}
	redistest.Eventually(t, 10*time.Second, served)
}
