package redisproc

import (
	"bufio"
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// testBin returns the engine the tests run: RESPMETER_TEST_ENGINE when set
// (as internal/redistest reads it; a missing one fails the test), else
// redis-server from PATH; it skips without that or with -short.
func testBin(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("redisproc: integration test skipped with -short")
	}
	if bin := os.Getenv("RESPMETER_TEST_ENGINE"); bin != "" {
		path, err := exec.LookPath(bin)
		if err != nil {
			t.Fatalf("redisproc: RESPMETER_TEST_ENGINE=%s: %v", bin, err)
		}
		return path
	}
	path, err := exec.LookPath(DefaultBin)
	if err != nil {
		t.Skipf("redisproc: %s: %v", DefaultBin, err)
	}
	return path
}

// start runs the engine in a fresh t.TempDir and kills it at cleanup.
func start(t *testing.T, opts Options) *Proc {
	t.Helper()
	opts.Bin = testBin(t)
	opts.Dir = t.TempDir()
	p, err := Start(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Kill(); err != nil {
			t.Error(err)
		}
	})
	return p
}

// do sends one command on a fresh connection and returns the reply's
// first line.
func do(addr string, cmd string) (string, error) {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Write([]byte(cmd + "\r\n")); err != nil {
		return "", err
	}
	return bufio.NewReader(c).ReadString('\n')
}

// alive reports whether pid names a process (signal 0).
func alive(pid int) bool {
	return syscall.Kill(pid, 0) == nil
}

// TestServerStartPingRestartKill starts an engine, sees it answer, restarts it on
// the same port with an empty data set and a new pid, and kills it.
func TestServerStartPingRestartKill(t *testing.T) {
	p := start(t, Options{})
	if line, err := do(p.Addr(), "PING"); err != nil || line != "+PONG\r\n" {
		t.Fatalf("PING = %q, %v", line, err)
	}
	if line, err := do(p.Addr(), "SET k v"); err != nil || line != "+OK\r\n" {
		t.Fatalf("SET = %q, %v", line, err)
	}
	pid, port := p.Pid(), p.Port()
	if pid == 0 || !alive(pid) {
		t.Fatalf("Pid() = %d, not a live process", pid)
	}

	if err := p.Restart(context.Background()); err != nil {
		t.Fatal(err)
	}
	if p.Port() != port {
		t.Fatalf("port %d after Restart, was %d", p.Port(), port)
	}
	if p.Pid() == pid || alive(pid) {
		t.Fatalf("old pid %d still alive or reused after Restart (new %d)", pid, p.Pid())
	}
	if line, err := do(p.Addr(), "GET k"); err != nil || line != "$-1\r\n" {
		t.Fatalf("GET after Restart = %q, %v; want the empty data set's $-1", line, err)
	}

	pid = p.Pid()
	if err := p.Kill(); err != nil {
		t.Fatal(err)
	}
	if alive(pid) || p.Pid() != 0 {
		t.Fatalf("pid %d alive (Pid() = %d) after Kill", pid, p.Pid())
	}
	if _, err := do(p.Addr(), "PING"); err == nil {
		t.Fatal("PING answered after Kill")
	}
	if err := p.Signal(syscall.SIGCONT); !errors.Is(err, ErrNotRunning) {
		t.Fatalf("Signal after Kill = %v, want ErrNotRunning", err)
	}
	if err := p.Kill(); err != nil {
		t.Fatalf("second Kill = %v, want nil", err)
	}
}

// TestServerSignalStopCont freezes the engine with SIGSTOP (a PING goes
// unanswered) and resumes it with SIGCONT; Stop then ends a frozen engine
// by SIGTERM well within its timeout.
func TestServerSignalStopCont(t *testing.T) {
	p := start(t, Options{Args: []string{"--requirepass", "secret"}})
	// Readiness accepted -NOAUTH under --requirepass.
	if line, _ := do(p.Addr(), "PING"); !strings.HasPrefix(line, "-NOAUTH") {
		t.Fatalf("PING = %q, want -NOAUTH", line)
	}
	if err := p.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	if line, err := do(p.Addr(), "PING"); err == nil {
		t.Fatalf("frozen engine answered %q", line)
	}
	if err := p.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if line, err := do(p.Addr(), "PING"); err != nil || !strings.HasPrefix(line, "-NOAUTH") {
		t.Fatalf("PING after SIGCONT = %q, %v", line, err)
	}
	if err := p.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	pid := p.Pid()
	if err := p.Stop(time.Minute); err != nil {
		t.Fatalf("Stop of a frozen engine: %v", err)
	}
	if alive(pid) {
		t.Fatalf("pid %d alive after Stop", pid)
	}
}

// TestServerBadFlag: an engine that rejects its arguments exits during
// start-up, and the error quotes its log (which names the bad value); no
// process is left.
func TestServerBadFlag(t *testing.T) {
	bin := testBin(t)
	dir := t.TempDir()
	_, err := Start(context.Background(), Options{Bin: bin, Dir: dir, Args: []string{"--maxmemory-policy", "no-such-policy"}})
	if err == nil {
		t.Fatal("Start with a bad flag succeeded")
	}
	t.Logf("error: %v", err)
	// redis-server 7.0 and 8.0 and Valkey 8 all quote the offending
	// configuration line (">>> 'maxmemory-policy \"no-such-policy\"'").
	for _, want := range []string{"exited during start-up", "maxmemory-policy", "no-such-policy"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not contain %q: %v", want, err)
		}
	}
}

// TestServerPortTaken: a given port that another listener holds is tried
// once and fails with the engine's bind error; with Port 0 Start picks
// another.
func TestServerPortTaken(t *testing.T) {
	bin := testBin(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	port := l.Addr().(*net.TCPAddr).Port
	_, err = Start(context.Background(), Options{Bin: bin, Dir: t.TempDir(), Port: port})
	if err == nil || !strings.Contains(err.Error(), "exited during start-up") {
		t.Fatalf("Start on a held port = %v, want an exit during start-up", err)
	}
	p := start(t, Options{})
	if p.Port() == port {
		t.Fatalf("Port 0 gave the held port %d", port)
	}
}

// TestServerPortTakenByEngine: a port another engine holds answers PING
// while the engine started on it exits on its bind error; Start must not
// take that answer for its own (two test processes side by side that
// drew the same free port each used the other's engine): a given port
// held so fails, as one held by any listener does, and with Port 0 Start
// would try another.
func TestServerPortTakenByEngine(t *testing.T) {
	bin := testBin(t)
	other := start(t, Options{})
	p, err := Start(context.Background(), Options{Bin: bin, Dir: t.TempDir(), Port: other.Port()})
	if err == nil {
		_ = p.Kill()
		t.Fatalf("Start on port %d, which another engine holds, succeeded", other.Port())
	}
	if !strings.Contains(err.Error(), "answers, but not") && !strings.Contains(err.Error(), "exited during start-up") {
		t.Fatalf("Start on a port another engine holds = %v, want an error saying so", err)
	}
}

// TestServerQuietLog: an engine that logs only warnings (as `respmeter
// demo` starts one) writes no "Ready to accept connections"; Start knows
// it for its own by INFO's process_id.
func TestServerQuietLog(t *testing.T) {
	p := start(t, Options{Args: []string{"--loglevel", "warning"}})
	if pid, err := ping(p.Addr(), time.Second, nil); err != nil || pid != p.Pid() {
		t.Fatalf("the engine on %s has pid %d (%v), want %d", p.Addr(), pid, err, p.Pid())
	}
}

// TestServerOptionsErrors: no Dir, a missing binary and an ended context
// fail without starting anything.
func TestServerOptionsErrors(t *testing.T) {
	if _, err := Start(context.Background(), Options{}); err == nil || !strings.Contains(err.Error(), "Dir is required") {
		t.Errorf("Start without Dir = %v", err)
	}
	if _, err := Start(context.Background(), Options{Bin: "no-such-engine-binary", Dir: t.TempDir()}); !errors.Is(err, exec.ErrNotFound) {
		t.Errorf("Start with a missing binary = %v, want exec.ErrNotFound", err)
	}
	bin := testBin(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Start(ctx, Options{Bin: bin, Dir: t.TempDir()}); !errors.Is(err, context.Canceled) {
		t.Errorf("Start with an ended context = %v, want context.Canceled", err)
	}
}
