package redistest

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/respmeter/respmeter/internal/redisproc"
	"github.com/respmeter/respmeter/internal/tlsconf"
)

// CA is a certificate authority made for one test (tlsconf.CA): its
// certificate and the certificates it issues are written under a
// t.TempDir, never committed.
type CA struct {
	t   testing.TB
	dir string
	ca  *tlsconf.CA
	// CertFile is the CA certificate (PEM), for --tls-ca-cert-file.
	CertFile string
	// Pool holds the CA certificate, for a tls.Config's RootCAs or
	// ClientCAs.
	Pool *x509.CertPool
}

// NewCA makes a CA valid from an hour ago for a day (ECDSA P-256).
func NewCA(t testing.TB) *CA {
	t.Helper()
	c, err := tlsconf.NewCA("respmeter test CA", time.Now().Add(-time.Hour), time.Now().Add(24*time.Hour))
	if err != nil {
		t.Fatalf("redistest: %v", err)
	}
	ca := &CA{t: t, dir: t.TempDir(), ca: c, Pool: x509.NewCertPool()}
	ca.Pool.AddCert(c.Cert)
	ca.CertFile = filepath.Join(ca.dir, "ca.crt")
	if err := os.WriteFile(ca.CertFile, c.CertPEM, 0o600); err != nil {
		t.Fatalf("redistest: %v", err)
	}
	return ca
}

// Cert is a certificate issued by a CA and its key, as files and as a
// tls.Certificate.
type Cert struct {
	CertFile, KeyFile string
	TLS               tls.Certificate
}

// Issue issues a certificate for name (its CommonName) usable by servers
// and clients, valid for 127.0.0.1, ::1 and localhost, from notBefore to
// notAfter.
func (ca *CA) Issue(name string, notBefore, notAfter time.Time) Cert {
	t := ca.t
	t.Helper()
	c := Cert{CertFile: filepath.Join(ca.dir, name+".crt"), KeyFile: filepath.Join(ca.dir, name+".key")}
	if err := ca.ca.IssueFiles(name, notBefore, notAfter, c.CertFile, c.KeyFile); err != nil {
		t.Fatalf("redistest: %v", err)
	}
	var err error
	if c.TLS, err = tls.LoadX509KeyPair(c.CertFile, c.KeyFile); err != nil {
		t.Fatalf("redistest: %v", err)
	}
	return c
}

// CopyTo writes c's certificate and key over certFile and keyFile, each
// replaced whole (written beside, then renamed), as a certificate rotation
// does.
func (c Cert) CopyTo(t testing.TB, certFile, keyFile string) {
	t.Helper()
	ReplaceFile(t, c.CertFile, certFile)
	ReplaceFile(t, c.KeyFile, keyFile)
}

// ReplaceFile writes src's content over dst, replaced whole (written
// beside, then renamed), as a certificate rotation does.
func ReplaceFile(t testing.TB, src, dst string) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err == nil {
		err = os.WriteFile(dst+".new", b, 0o600)
	}
	if err == nil {
		err = os.Rename(dst+".new", dst)
	}
	if err != nil {
		t.Fatalf("redistest: %v", err)
	}
}

// IssueRSA is Issue with an RSA key (tlsconf.CA.IssueRSA), for the TLS
// 1.2 suites of RSA key exchange and RSA signatures.
func (ca *CA) IssueRSA(name string, notBefore, notAfter time.Time) Cert {
	t := ca.t
	t.Helper()
	c := Cert{CertFile: filepath.Join(ca.dir, name+".crt"), KeyFile: filepath.Join(ca.dir, name+".key")}
	if err := ca.ca.IssueRSAFiles(name, notBefore, notAfter, c.CertFile, c.KeyFile); err != nil {
		t.Fatalf("redistest: %v", err)
	}
	var err error
	if c.TLS, err = tls.LoadX509KeyPair(c.CertFile, c.KeyFile); err != nil {
		t.Fatalf("redistest: %v", err)
	}
	return c
}

// IssueValid issues a certificate for name valid from an hour ago for a
// day.
func (ca *CA) IssueValid(name string) Cert {
	ca.t.Helper()
	return ca.Issue(name, time.Now().Add(-time.Hour), time.Now().Add(24*time.Hour))
}

// ClientConfig returns a TLS 1.2+ client configuration trusting ca, with
// cert as the client certificate when given.
func (ca *CA) ClientConfig(cert ...Cert) *tls.Config {
	c := &tls.Config{RootCAs: ca.Pool, MinVersion: tls.VersionTLS12}
	for _, x := range cert {
		c.Certificates = append(c.Certificates, x.TLS)
	}
	return c
}

// StartTLS starts the engine (as Start does) serving TLS only: --port 0
// and --tls-port, its certificate issued by ca, clients' certificates
// verified against ca as --tls-auth-clients says (args may set it; the
// engine's default is yes). Addr is then the TLS port, and Client and Do
// speak TLS with the certificate "engine-client" of ca. It skips t when the
// engine was built without TLS.
func StartTLS(t testing.TB, ca *CA, args ...string) *Server {
	t.Helper()
	return startTLS(t, ca, ca.IssueValid("engine"), false, args)
}

// StartTLSRSA is StartTLS with an RSA certificate for the engine
// (CA.IssueRSA), which an engine restricted to TLS 1.2 suites of RSA key
// exchange or RSA signatures (--tls-ciphers AES128-SHA256) needs. Client
// and Do offer every TLS 1.2 suite Go implements, insecure ones included,
// so that they reach the engine whatever suites args leave it.
func StartTLSRSA(t testing.TB, ca *CA, args ...string) *Server {
	t.Helper()
	return startTLS(t, ca, ca.IssueRSA("engine-rsa", time.Now().Add(-time.Hour), time.Now().Add(24*time.Hour)), true, args)
}

// startTLS starts the engine of StartTLS presenting srvCert; allSuites
// makes its own client offer every suite Go implements.
func startTLS(t testing.TB, ca *CA, srvCert Cert, allSuites bool, args []string) *Server {
	t.Helper()
	bin := SkipIfUnavailable(t)
	clientCert := ca.IssueValid("engine-client")
	s := &Server{t: t, tls: ca.ClientConfig(clientCert)}
	if allSuites {
		for _, list := range [][]*tls.CipherSuite{tls.CipherSuites(), tls.InsecureCipherSuites()} {
			for _, cs := range list {
				s.tls.CipherSuites = append(s.tls.CipherSuites, cs.ID)
			}
		}
	}
	argv := append([]string{
		"--tls-cert-file", srvCert.CertFile, "--tls-key-file", srvCert.KeyFile,
		"--tls-ca-cert-file", ca.CertFile,
	}, args...)
	p, err := redisproc.Start(context.Background(), redisproc.Options{Bin: bin, Dir: t.TempDir(), Args: argv, TLS: s.tls})
	if err != nil && noTLS(err) {
		// An engine built without TLS (.ci/build-engines.sh builds the
		// engine matrix's with BUILD_TLS=no; Debian's redis-server has it):
		// a capability of the engine, as a version is.
		t.Skipf("redistest: %s was built without TLS support: %v", bin, err)
	}
	if err != nil {
		t.Fatalf("redistest: TLS engine: %v", err)
	}
	s.proc = p
	t.Cleanup(s.cleanup)
	return s
}

// noTLS reports whether err is an engine's start-up refusal for want of
// TLS support ("Failed finding TLS support", "Missing implement of
// connection type tls": Redis 7+ and Valkey built without BUILD_TLS).
func noTLS(err error) bool {
	m := err.Error()
	return strings.Contains(m, "Failed finding TLS support") || strings.Contains(m, "connection type tls")
}
