package tlsconf_test

import (
	"crypto/tls"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/respmeter/respmeter/internal/redistest"
	"github.com/respmeter/respmeter/internal/tlsconf"
)

func TestServer(t *testing.T) {
	ca := redistest.NewCA(t)
	c := ca.IssueValid("server")
	for _, tc := range []struct {
		auth, caFile string
		want         tls.ClientAuthType
		err          string
	}{
		{"no", "", tls.NoClientCert, ""},
		{"optional", ca.CertFile, tls.VerifyClientCertIfGiven, ""},
		{"yes", ca.CertFile, tls.RequireAndVerifyClientCert, ""},
		{"yes", "", 0, "needs a CA certificate file"},
		{"maybe", ca.CertFile, 0, `auth-clients "maybe"`},
	} {
		cfg, err := tlsconf.Server(c.CertFile, c.KeyFile, tc.caFile, tc.auth, tlsconf.Suites{})
		switch {
		case tc.err != "":
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s: err %v, want %q", tc.auth, err, tc.err)
			}
		case err != nil:
			t.Errorf("%s: %v", tc.auth, err)
		case cfg.ClientAuth != tc.want || cfg.MinVersion != tls.VersionTLS12 || len(cfg.Certificates) != 1:
			t.Errorf("%s: ClientAuth %v MinVersion %x certificates %d", tc.auth, cfg.ClientAuth, cfg.MinVersion, len(cfg.Certificates))
		case tc.want != tls.NoClientCert && cfg.ClientCAs == nil:
			t.Errorf("%s: no ClientCAs", tc.auth)
		}
	}
}

// TestKeyNotInErrors: a key file that does not match its certificate, or
// is not a key at all, gives an error naming the files, never their
// content.
func TestKeyNotInErrors(t *testing.T) {
	ca := redistest.NewCA(t)
	a, b := ca.IssueValid("a"), ca.IssueValid("b")
	garbage := filepath.Join(t.TempDir(), "garbage.key")
	const secret = "sUpErSeCrEtKeyMaTeRiAl0123456789"
	if err := os.WriteFile(garbage, []byte("-----BEGIN PRIVATE KEY-----\n"+secret+"\n-----END PRIVATE KEY-----\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	keyOf := func(path string) string {
		raw, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		return strings.Split(string(raw), "\n")[1]
	}
	for _, keyFile := range []string{b.KeyFile, garbage} {
		_, err1 := tlsconf.Server(a.CertFile, keyFile, "", "no", tlsconf.Suites{})
		_, err2 := tlsconf.Client("", a.CertFile, keyFile, "", false, tlsconf.Suites{})
		for _, err := range []error{err1, err2} {
			if err == nil {
				t.Fatalf("%s: no error for a key that does not match", keyFile)
			}
			if !strings.Contains(err.Error(), keyFile) {
				t.Errorf("error %q does not name %s", err, keyFile)
			}
			if strings.Contains(err.Error(), secret) || strings.Contains(err.Error(), keyOf(keyFile)) {
				t.Errorf("error %q shows the key's content", err)
			}
		}
	}
}

func TestClient(t *testing.T) {
	ca := redistest.NewCA(t)
	c := ca.IssueValid("client")
	cfg, err := tlsconf.Client(ca.CertFile, c.CertFile, c.KeyFile, "redis.internal", false, tlsconf.Suites{})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.RootCAs == nil || cfg.ServerName != "redis.internal" || len(cfg.Certificates) != 1 || cfg.InsecureSkipVerify || cfg.MinVersion != tls.VersionTLS12 {
		t.Errorf("config %+v", cfg)
	}
	if _, err := tlsconf.Client("", c.CertFile, "", "", false, tlsconf.Suites{}); err == nil {
		t.Error("a certificate without its key accepted")
	}
	if _, err := tlsconf.Client(c.KeyFile, "", "", "", false, tlsconf.Suites{}); err == nil {
		t.Error("a key file accepted as CA certificates")
	}
}
