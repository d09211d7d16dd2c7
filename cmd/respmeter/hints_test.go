package main

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/respmeter/respmeter/internal/redistest"
)

// TestProxyNoauthHint: in front of a redis-server with requirepass and no
// upstream password, the proxy's NOAUTH warning tells the user to set
// one; given RESPMETER_UPSTREAM_PASSWORD, no NOAUTH and no hint.
func TestProxyNoauthHint(t *testing.T) {
	const pw = "hint-s3cret"
	srv := redistest.Start(t, "--requirepass", pw)
	for _, env := range [][]string{nil, {"RESPMETER_UPSTREAM_PASSWORD=" + pw}} {
		p := start(t, env, "proxy", "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0", "--upstream", srv.Addr())
		p.waitFor(t, p.stderr, `msg="proxy listening"`)
		p.signal(t, syscall.SIGTERM)
		if code := p.wait(t); code != exitOK {
			t.Fatalf("exit %d\n%s", code, p.stderr)
		}
		log := p.stderr.String()
		hint := strings.Contains(log, `hint="the engine wants a password: set upstream_password in the config file or RESPMETER_UPSTREAM_PASSWORD`)
		if env == nil && (!hint || !strings.Contains(log, "NOAUTH")) {
			t.Errorf("no password: want NOAUTH and the hint to set the upstream password:\n%s", log)
		}
		if env != nil && (hint || strings.Contains(log, "NOAUTH")) {
			t.Errorf("with RESPMETER_UPSTREAM_PASSWORD: NOAUTH or the hint logged:\n%s", log)
		}
		if strings.Contains(log, pw) {
			t.Errorf("the password is logged")
		}
	}
}

// TestProxyCaptureExists: --capture onto an existing file (or into a
// missing directory) is a usage error (exit 2) before anything listens:
// no "proxy listening" is logged and the file is left as it was.
func TestProxyCaptureExists(t *testing.T) {
	srv := redistest.Start(t)
	dir := t.TempDir()
	existing := filepath.Join(dir, "app.respcap")
	if err := os.WriteFile(existing, []byte("keep me"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ path, want string }{
		{existing, "the file exists"},
		{filepath.Join(dir, "nodir", "app.respcap"), "no directory"},
	} {
		p := start(t, nil, "proxy", "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0", "--upstream", srv.Addr(), "--capture", tc.path)
		code := p.wait(t)
		log := p.stderr.String()
		if code != exitUsage || !strings.Contains(log, "--capture "+tc.path+": "+tc.want) || strings.Contains(log, "listening") {
			t.Errorf("--capture %s: exit %d, want %d with %q before anything listens:\n%s", tc.path, code, exitUsage, tc.want, log)
		}
	}
	if b, _ := os.ReadFile(existing); string(b) != "keep me" {
		t.Errorf("the existing file was changed: %q", b)
	}
}
