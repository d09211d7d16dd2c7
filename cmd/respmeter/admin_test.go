package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/respmeter/respmeter/internal/redistest"
)

// adminDo sends method to the admin address's path with query q and, when
// token is not "", "Authorization: Bearer token"; it returns the status
// and body.
func adminDo(t *testing.T, method, admin, path string, q url.Values, token string) (int, string) {
	t.Helper()
	u := "http://" + admin + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	req, err := http.NewRequest(method, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// dirNames returns the names in dir.
func dirNames(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out
}

// TestAdminToken: "respmeter proxy --admin-token-file F --capture-dir D"
// in front of a real redis-server. Capture start, capture stop and slow
// log reset without the token (or with a wrong one) get 401 and change
// nothing; with it, a capture NAME that is a path (../x, an absolute
// path, a/b) gets 400 and writes nothing anywhere, a NAME that is a
// symlink in D is refused and the symlink's target is not created, and a
// plain NAME is created in D. The read endpoints answer without a token,
// and the live page, in a real headless Chromium, shows the GET load.
func TestAdminToken(t *testing.T) {
	srv := redistest.Start(t)
	tmp := t.TempDir()
	const token = "t0ken-of-the-test"
	tokenFile := filepath.Join(tmp, "token")
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	capDir := filepath.Join(tmp, "captures")
	if err := os.Mkdir(capDir, 0o700); err != nil {
		t.Fatal(err)
	}
	outside := filepath.Join(tmp, "outside.respcap")
	if err := os.Symlink(outside, filepath.Join(capDir, "link.respcap")); err != nil {
		t.Fatal(err)
	}
	p, addr, admin := startProxy(t, srv.Addr(), "--admin-token-file", tokenFile, "--capture-dir", capDir)
	p.waitFor(t, p.stderr, `msg="admin mutations need the bearer token of admin_token_file"`)
	if strings.Contains(p.stderr.String(), token) {
		t.Errorf("the token is in the log:\n%s", p.stderr)
	}

	start := func(name, tok string) (int, string) {
		return adminDo(t, http.MethodPost, admin, "/capture/start", url.Values{"file": {name}}, tok)
	}
	for _, tok := range []string{"", "wrong", token + "x"} {
		if code, body := start("a.respcap", tok); code != http.StatusUnauthorized {
			t.Errorf("capture start with token %q: %d %s, want 401", tok, code, body)
		}
	}
	if names := dirNames(t, capDir); len(names) != 1 {
		t.Errorf("capture dir after refused starts: %v, want only link.respcap", names)
	}
	abs := filepath.Join(tmp, "abs.respcap")
	for _, name := range []string{"../x.respcap", abs, "sub/x.respcap", "..", "."} {
		if code, body := start(name, token); code != http.StatusBadRequest {
			t.Errorf("capture start file=%q: %d %s, want 400", name, code, body)
		}
	}
	if code, body := start("link.respcap", token); code != http.StatusConflict {
		t.Errorf("capture start on a symlink: %d %s, want 409", code, body)
	}
	for _, f := range []string{filepath.Join(tmp, "x.respcap"), abs, outside} {
		if _, err := os.Lstat(f); err == nil {
			t.Errorf("%s was created", f)
		}
	}

	// A real capture: the token starts and stops it, inside the directory.
	if code, body := start("ok.respcap", token); code != http.StatusOK {
		t.Fatalf("capture start with the token: %d %s", code, body)
	}
	c := goRedis(addr, 3)
	if err := c.Set(context.Background(), "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	_ = c.Close()
	if code, _ := adminDo(t, http.MethodPost, admin, "/capture/stop", nil, ""); code != http.StatusUnauthorized {
		t.Errorf("capture stop without the token: %d, want 401", code)
	}
	if code, body := adminDo(t, http.MethodPost, admin, "/capture/stop", nil, token); code != http.StatusOK {
		t.Errorf("capture stop with the token: %d %s", code, body)
	}
	if fi, err := os.Lstat(filepath.Join(capDir, "ok.respcap")); err != nil || !fi.Mode().IsRegular() || fi.Size() == 0 {
		t.Errorf("ok.respcap: %v %v", fi, err)
	}

	// Slow log reset needs the token; reading it does not.
	for _, m := range []struct {
		method string
		q      url.Values
	}{{http.MethodDelete, nil}, {http.MethodPost, url.Values{"reset": {"1"}}}} {
		if code, _ := adminDo(t, m.method, admin, "/slowlog", m.q, ""); code != http.StatusUnauthorized {
			t.Errorf("%s /slowlog without the token: %d, want 401", m.method, code)
		}
		if code, _ := adminDo(t, m.method, admin, "/slowlog", m.q, token); code != http.StatusNoContent {
			t.Errorf("%s /slowlog with the token: %d, want 204", m.method, code)
		}
	}
	for _, path := range []string{"/", "/metrics", "/stats", "/slowlog", "/capture"} {
		if code, body := adminDo(t, http.MethodGet, admin, path, nil, ""); code != http.StatusOK {
			t.Errorf("GET %s without a token: %d %s", path, code, body)
		}
	}

	// The live page, which only reads, works on the guarded server.
	browser := chromiumPath(t)
	gets := startGets(t, addr)
	ctx := openLivePage(t, browser, admin)
	const getRate = `(() => { const c = document.querySelector('#commands tr[data-command="get"] td.rate'); return c ? c.textContent : ""; })()`
	redistest.Eventually(t, 60*time.Second, func() error {
		got, err := chromedp.Run(ctx, chromedp.Evaluate[string](getRate))
		if f, perr := strconv.ParseFloat(got, 64); err != nil || perr != nil || f <= 0 {
			return fmt.Errorf("GET rate: page shows %q (err %v)", got, err)
		}
		return nil
	})
	gets.stop()
	p.signal(t, syscall.SIGTERM)
	if code := p.wait(t); code != exitOK {
		t.Fatalf("exit %d after SIGTERM\nstderr:\n%s", code, p.stderr)
	}
}

// TestAdminMutationsRefused: without a token, an admin address that is
// not loopback refuses the mutating endpoints (403) and says so at start,
// and admin_token_file "off" refuses them on loopback too; reads answer.
func TestAdminMutationsRefused(t *testing.T) {
	srv := redistest.Start(t)
	capDir := t.TempDir()
	for _, tc := range []struct {
		name string
		args []string
		log  string
	}{
		{"not loopback", []string{"--admin", "0.0.0.0:0"}, "the admin address is not loopback and no admin_token_file is set"},
		{"off", []string{"--admin-token-file", "off"}, "admin_token_file is off"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, _, admin := startProxy(t, srv.Addr(), append([]string{"--capture-dir", capDir}, tc.args...)...)
			p.waitFor(t, p.stderr, `msg="admin mutations refused: `+tc.log)
			_, port, err := net.SplitHostPort(admin)
			if err != nil {
				t.Fatal(err)
			}
			admin = net.JoinHostPort("127.0.0.1", port)
			if code, body := adminDo(t, http.MethodPost, admin, "/capture/start", url.Values{"file": {"x.respcap"}}, ""); code != http.StatusForbidden {
				t.Errorf("capture start: %d %s, want 403", code, body)
			}
			if code, _ := adminDo(t, http.MethodDelete, admin, "/slowlog", nil, "anything"); code != http.StatusForbidden {
				t.Errorf("DELETE /slowlog: %d, want 403", code)
			}
			if names := dirNames(t, capDir); len(names) != 0 {
				t.Errorf("capture dir: %v, want empty", names)
			}
			if code, _ := adminDo(t, http.MethodGet, admin, "/metrics", nil, ""); code != http.StatusOK {
				t.Errorf("GET /metrics: %d", code)
			}
			p.signal(t, syscall.SIGTERM)
			p.wait(t)
		})
	}
}
