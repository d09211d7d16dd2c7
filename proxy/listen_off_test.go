package proxy

import (
	"context"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/respmeter/respmeter/internal/redistest"
	"github.com/respmeter/respmeter/internal/tlsconf"
)

// TestListenOffPlaceholder: with Listen "" gnet's only listener is the
// Unix socket of run, in a directory of mode 0700; a connection made there
// is closed at once, without a reply, and Stop removes the directory.
func TestListenOffPlaceholder(t *testing.T) {
	srv := redistest.Start(t)
	ca := redistest.NewCA(t)
	pc := ca.IssueValid("respmeter")
	server, err := tlsconf.Server(pc.CertFile, pc.KeyFile, "", tlsconf.AuthClientsNo, tlsconf.Suites{})
	if err != nil {
		t.Fatal(err)
	}
	p, err := New(Config{Upstream: srv.Addr(), TLSListen: "127.0.0.1:0", TLS: server, Loops: 1,
		DialTimeout: time.Second, DrainTimeout: 200 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	dir := p.offDir
	fi, err := os.Stat(dir)
	if err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("placeholder directory %q: %v, %v; want mode 0700", dir, fi, err)
	}
	c, err := net.DialTimeout("unix", filepath.Join(dir, "closed.sock"), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if b, err := io.ReadAll(c); len(b) != 0 || err != nil {
		t.Errorf("the placeholder answered %q (%v), want a close without a reply", b, err)
	}
	_ = c.Close()
	if got := p.clients.Load(); got != 0 {
		t.Errorf("%d clients after the placeholder's connection, want 0", got)
	}
	if err := p.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("placeholder directory left after Stop: %v", err)
	}
}
