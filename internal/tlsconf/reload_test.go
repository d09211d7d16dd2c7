package tlsconf_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/respmeter/respmeter/internal/redistest"
	"github.com/respmeter/respmeter/internal/tlsconf"
)

// logBuf is a slog destination the test reads while a Watch goroutine
// writes.
type logBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// serverSetup makes a CA and two certificates of it, installs the first
// at certFile and keyFile and returns a client-facing Reloader of them
// logging to logs.
func serverSetup(t *testing.T) (ca *redistest.CA, certFile, keyFile string, first, second redistest.Cert, r *tlsconf.Reloader, logs *logBuf) {
	ca = redistest.NewCA(t)
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "server.crt"), filepath.Join(dir, "server.key")
	first, second = ca.IssueValid("first"), ca.IssueValid("second")
	first.CopyTo(t, certFile, keyFile)
	logs = new(logBuf)
	r, err := tlsconf.NewServerReloader(certFile, keyFile, "", tlsconf.AuthClientsNo, tlsconf.Suites{}, slog.New(slog.NewTextHandler(logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	return ca, certFile, keyFile, first, second, r, logs
}

func serial(c redistest.Cert) *big.Int { return c.TLS.Leaf.SerialNumber }

// echoServer serves cfg on a loopback listener: each connection echoes
// lines back, and the serial of the client certificate it saw (or "none")
// is sent on peers once its handshake is done.
func echoServer(t *testing.T, cfg *tls.Config) (addr string, peers <-chan string) {
	t.Helper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	ch := make(chan string, 16)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				tc := c.(*tls.Conn)
				if err := tc.Handshake(); err != nil {
					ch <- "handshake: " + err.Error()
					return
				}
				if pc := tc.ConnectionState().PeerCertificates; len(pc) > 0 {
					ch <- pc[0].SerialNumber.String()
				} else {
					ch <- "none"
				}
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	return ln.Addr().String(), ch
}

// echo writes a line on c and reads it back.
func echo(c net.Conn, r *bufio.Reader, line string) error {
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, line+"\n"); err != nil {
		return err
	}
	got, err := r.ReadString('\n')
	if err != nil {
		return err
	}
	if got != line+"\n" {
		return fmt.Errorf("echo %q, want %q", got, line)
	}
	return nil
}

// TestServerReload: the client-facing side's certificate is replaced on
// Reload; a connection made before keeps working, a new one gets the new
// certificate (told by its serial), and a broken file keeps the pair in
// use, logged with the file's name and never the key.
func TestServerReload(t *testing.T) {
	ca, certFile, keyFile, first, second, r, logs := serverSetup(t)
	addr, _ := echoServer(t, r.Config())
	dial := func() (*tls.Conn, *bufio.Reader) {
		t.Helper()
		c, err := tls.Dial("tcp", addr, ca.ClientConfig())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c, bufio.NewReader(c)
	}
	peerSerial := func(c *tls.Conn) *big.Int { return c.ConnectionState().PeerCertificates[0].SerialNumber }

	before, beforeR := dial()
	if got := peerSerial(before); got.Cmp(serial(first)) != 0 {
		t.Fatalf("serial %v before the rotation, want %v", got, serial(first))
	}
	if err := echo(before, beforeR, "one"); err != nil {
		t.Fatal(err)
	}

	second.CopyTo(t, certFile, keyFile)
	if err := r.Reload(); err != nil {
		t.Fatalf("Reload: %v", err)
	}
	if !strings.Contains(logs.String(), "TLS certificates reloaded") || !strings.Contains(logs.String(), "serial="+serial(second).Text(16)) {
		t.Errorf("no reload logged with the new serial:\n%s", logs.String())
	}
	after, _ := dial()
	if got := peerSerial(after); got.Cmp(serial(second)) != 0 {
		t.Errorf("a new client got serial %v after the rotation, want %v", got, serial(second))
	}
	if err := echo(before, beforeR, "two"); err != nil {
		t.Errorf("the connection made before the rotation: %v", err)
	}

	// A key that does not match the certificate (a rotation half done),
	// then a key file that is not PEM: each keeps the pair in use.
	keyText := strings.Split(mustRead(t, second.KeyFile), "\n")[1]
	redistest.Cert{CertFile: first.CertFile, KeyFile: second.KeyFile}.CopyTo(t, certFile, keyFile)
	if err := r.Reload(); err == nil {
		t.Error("Reload took a certificate with another certificate's key")
	}
	if err := os.WriteFile(keyFile, []byte("not a key\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := r.Reload(); err == nil {
		t.Error("Reload took a key file that holds no key")
	}
	kept, _ := dial()
	if got := peerSerial(kept); got.Cmp(serial(second)) != 0 {
		t.Errorf("after failed reloads a new client got serial %v, want the kept %v", got, serial(second))
	}
	out := logs.String()
	if n := strings.Count(out, "TLS certificates not reloaded: the ones in use are kept"); n != 2 {
		t.Errorf("%d failed reloads logged, want 2:\n%s", n, out)
	}
	if !strings.Contains(out, keyFile) {
		t.Errorf("the failure does not name %s:\n%s", keyFile, out)
	}
	if strings.Contains(out, keyText) {
		t.Errorf("the log shows the private key:\n%s", out)
	}
}

// TestServerReloadCA: under tls-auth-clients yes, the CA file is read
// again too: after it names another CA, that CA's clients are served and
// the old CA's refused.
func TestServerReloadCA(t *testing.T) {
	oldCA, newCA := redistest.NewCA(t), redistest.NewCA(t)
	dir := t.TempDir()
	caFile := filepath.Join(dir, "ca.crt")
	if err := os.WriteFile(caFile, []byte(mustRead(t, oldCA.CertFile)), 0o600); err != nil {
		t.Fatal(err)
	}
	srv := oldCA.IssueValid("server")
	r, err := tlsconf.NewServerReloader(srv.CertFile, srv.KeyFile, caFile, tlsconf.AuthClientsYes, tlsconf.Suites{}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	addr, peers := echoServer(t, r.Config())
	try := func(client redistest.Cert) string {
		t.Helper()
		c, err := tls.Dial("tcp", addr, oldCA.ClientConfig(client))
		if err == nil {
			_ = c.Close()
		}
		select {
		case p := <-peers:
			return p
		case <-time.After(5 * time.Second):
			t.Fatal("no handshake seen by the server")
			return ""
		}
	}
	oldClient, newClient := oldCA.IssueValid("old-client"), newCA.IssueValid("new-client")
	if got := try(oldClient); got != serial(oldClient).String() {
		t.Errorf("old CA's client before the reload: %s", got)
	}
	if err := os.WriteFile(caFile, []byte(mustRead(t, newCA.CertFile)), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := r.Reload(); err != nil {
		t.Fatal(err)
	}
	if got := try(newClient); got != serial(newClient).String() {
		t.Errorf("new CA's client after the reload: %s", got)
	}
	if got := try(oldClient); !strings.HasPrefix(got, "handshake: ") {
		t.Errorf("old CA's client after the reload: %s, want a refused handshake", got)
	}
}

// TestClientReloadCertificate: towards the engines, the client certificate
// read last is the one a new connection presents.
func TestClientReloadCertificate(t *testing.T) {
	ca := redistest.NewCA(t)
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "client.crt"), filepath.Join(dir, "client.key")
	first, second := ca.IssueValid("first"), ca.IssueValid("second")
	first.CopyTo(t, certFile, keyFile)
	r, err := tlsconf.NewClientReloader(ca.CertFile, certFile, keyFile, "", false, tlsconf.Suites{}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	srv := ca.IssueValid("engine")
	addr, peers := echoServer(t, &tls.Config{Certificates: []tls.Certificate{srv.TLS}, ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: ca.Pool})
	connect := func() string {
		t.Helper()
		c, err := dialWith(r.Dialer(), addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		// TLS 1.3: the server checks the client's certificate after the
		// client's handshake is done; a round trip waits for it.
		if err := echo(c, bufio.NewReader(c), "x"); err != nil {
			t.Fatal(err)
		}
		return <-peers
	}
	if got := connect(); got != serial(first).String() {
		t.Errorf("client certificate %s, want %v", got, serial(first))
	}
	second.CopyTo(t, certFile, keyFile)
	if err := r.Reload(); err != nil {
		t.Fatal(err)
	}
	if got := connect(); got != serial(second).String() {
		t.Errorf("client certificate %s after the rotation, want %v", got, serial(second))
	}
	if err := os.Remove(certFile); err != nil {
		t.Fatal(err)
	}
	if err := r.Reload(); err == nil {
		t.Error("Reload without a certificate file did not fail")
	}
	if got := connect(); got != serial(second).String() {
		t.Errorf("client certificate %s after a failed reload, want the kept %v", got, serial(second))
	}
}

// dialWith connects to addr and runs d's handshake, within 5 seconds.
func dialWith(d *tlsconf.Dialer, addr string) (*tls.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	nc, err := new(net.Dialer).DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	return d.Handshake(ctx, nc, addr)
}

// TestClientReloadCA: towards the engines, the CA certificates read last
// are the ones a new connection verifies the engine against, for the IP
// address dialed (no server name configured): after the CA file is
// rotated from A to B, an engine serving a certificate of B is accepted
// and one serving a certificate of A is refused at the handshake, naming
// the verification failure; a connection made before the rotation is not
// touched, and a CA file that does not read keeps the CA in use.
func TestClientReloadCA(t *testing.T) {
	a, b := redistest.NewCA(t), redistest.NewCA(t)
	caFile := filepath.Join(t.TempDir(), "ca.crt")
	redistest.ReplaceFile(t, a.CertFile, caFile)
	r, err := tlsconf.NewClientReloader(caFile, "", "", "", false, tlsconf.Suites{}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	d := r.Dialer() // one Dialer for the test, as respmeter proxy has
	serve := func(ca *redistest.CA) string {
		addr, _ := echoServer(t, &tls.Config{Certificates: []tls.Certificate{ca.IssueValid("engine").TLS}})
		return addr
	}
	onA, onB := serve(a), serve(b)
	before, err := dialWith(d, onA)
	if err != nil {
		t.Fatalf("engine of CA A with CA A: %v", err)
	}
	defer before.Close()
	if _, err := dialWith(d, onB); err == nil || !strings.Contains(err.Error(), "certificate signed by unknown authority") {
		t.Errorf("engine of CA B with CA A: %v, want an unknown authority", err)
	}

	redistest.ReplaceFile(t, b.CertFile, caFile)
	if err := r.Reload(); err != nil {
		t.Fatal(err)
	}
	if c, err := dialWith(d, onB); err != nil {
		t.Errorf("engine of CA B after the rotation to B: %v", err)
	} else {
		_ = c.Close()
	}
	_, err = dialWith(d, onA)
	if err == nil || !strings.Contains(err.Error(), "tls: failed to verify certificate: x509: certificate signed by unknown authority") {
		t.Errorf("engine of CA A after the rotation to B: %v, want a failed verification", err)
	}
	if err := echo(before, bufio.NewReader(before), "kept"); err != nil {
		t.Errorf("the connection made before the rotation: %v", err)
	}
	// A CA file caught halfway through a copy keeps the CA in use.
	if err := os.WriteFile(caFile, []byte("-----BEGIN CERT"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := r.Reload(); err == nil || !strings.Contains(err.Error(), caFile) {
		t.Errorf("Reload of a broken CA file: %v, want an error naming it", err)
	}
	if c, err := dialWith(d, onB); err != nil {
		t.Errorf("engine of CA B after a failed reload: %v, want B kept", err)
	} else {
		_ = c.Close()
	}
	redistest.ReplaceFile(t, b.CertFile, caFile)
	// A verified name: the IP address dialed, which is among the
	// certificate's IP SANs; another name fails.
	if got := d.Config(onB).ServerName; got != "127.0.0.1" {
		t.Errorf("server name for %s: %q, want the host dialed", onB, got)
	}
	named, err := tlsconf.NewClientReloader(caFile, "", "", "engine.example", false, tlsconf.Suites{}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := dialWith(named.Dialer(), onB); err == nil || !strings.Contains(err.Error(), "engine.example") {
		t.Errorf("engine of CA B for a name its certificate lacks: %v, want a failure naming it", err)
	}
}

// TestWatch: a change of the files' content is picked up without a call
// to Reload; a broken file is reported once, however long it stays.
func TestWatch(t *testing.T) {
	_, certFile, keyFile, _, second, r, logs := serverSetup(t)
	const every = 20 * time.Millisecond
	done := make(chan struct{})
	ctx, cancel := context.WithCancel(t.Context())
	go func() { defer close(done); r.Watch(ctx, every) }()
	defer func() { cancel(); <-done }()

	second.CopyTo(t, certFile, keyFile)
	redistest.Eventually(t, 5*time.Second, func() error {
		if got := r.Leaf().SerialNumber; got.Cmp(serial(second)) != 0 {
			return fmt.Errorf("serial %v, want %v", got, serial(second))
		}
		return nil
	})
	if err := os.WriteFile(certFile, []byte("garbage\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	const failed = "TLS certificates not reloaded"
	redistest.Eventually(t, 5*time.Second, func() error {
		if !strings.Contains(logs.String(), failed) {
			return errors.New("no failed reload logged")
		}
		return nil
	})
	time.Sleep(20 * every) // twenty more looks at the same broken file
	if n := strings.Count(logs.String(), failed); n != 1 {
		t.Errorf("a broken file logged %d times, want once:\n%s", n, logs.String())
	}
	if got := r.Leaf().SerialNumber; got.Cmp(serial(second)) != 0 {
		t.Errorf("serial %v after a broken file, want the kept %v", got, serial(second))
	}
}

func mustRead(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
