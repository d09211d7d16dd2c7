// Package redistest runs real redis-server processes and raw RESP clients for
// respmeter's integration tests.
//
// The engine is the oracle: a test sends the same bytes to redis-server
// directly and through the proxy (Exchange, Dial) and compares what comes
// back. Start skips the calling test when redis-server is not installed or
// when -short is set, so integration tests need no guard of their own.
//
// Concurrency: a *Server may be used from several goroutines, but methods
// that take a testing.TB (Start, Restart, Do, Client) report failures with
// t.Fatalf and so must be called from the test's own goroutine. The Conn
// methods that return errors may be called from any goroutine.
//
// This package must not import respmeter's proxy: package proxy's own
// (internal) tests may import it. The in-process proxy helper lives in the
// sub-package proxytest.
package redistest

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/respmeter/respmeter/internal/redisproc"
)

// ServerBinary is the engine binary Start looks up in PATH when EngineEnv
// is unset.
const ServerBinary = redisproc.DefaultBin

// EngineEnv names the environment variable that points Start (and
// StartCluster) at another engine binary than redis-server from PATH: a
// path such as "$ENGINES/valkey-8.1.1/valkey-server" (.ci/build-engines.sh
// builds Redis 8.0 and Valkey 8.1 there). .ci/run sets it to run the
// end-to-end suites against each engine; unset, the tests use Debian's
// redis-server 7.0.15. A set but missing path fails the test rather than
// skipping it, so that an engine matrix cannot pass by testing nothing.
const EngineEnv = "RESPMETER_TEST_ENGINE"

// Server is one redis-server child process bound to 127.0.0.1.
// It is killed and reaped by a t.Cleanup registered in Start.
type Server struct {
	t        testing.TB
	proc     *redisproc.Proc
	password string      // from --requirepass, used by Client and Do
	tls      *tls.Config // StartTLS's client configuration, used by Client and Do

	mu     sync.Mutex
	client *redis.Client
}

// SkipIfUnavailable skips t when -short is set or redis-server is not in
// PATH (failing it under RequireToolsEnv, see SkipMissingTool), and returns the binary's path otherwise: the one EngineEnv names
// when it is set (t fails if that is not an executable file).
func SkipIfUnavailable(t testing.TB) string {
	t.Helper()
	if testing.Short() {
		t.Skip("redistest: integration test skipped with -short")
	}
	if bin := os.Getenv(EngineEnv); bin != "" {
		path, err := exec.LookPath(bin)
		if err != nil {
			t.Fatalf("redistest: %s=%s: %v", EngineEnv, bin, err)
		}
		return path
	}
	bin, err := exec.LookPath(ServerBinary)
	if err != nil {
		SkipMissingTool(t, fmt.Sprintf("redistest: %s not found in PATH: %v", ServerBinary, err))
	}
	return bin
}

// Start runs redis-server on a free loopback port in a fresh t.TempDir with
// persistence off (`--save ” --appendonly no --bind 127.0.0.1 --port N`)
// followed by args (for example "--enable-debug-command", "yes"), waits
// until it answers PING (at most 10 s) and registers a cleanup that kills
// it and waits for it to exit. It skips t when redis-server is missing or
// -short is set, and fails t when the server does not come up.
func Start(t testing.TB, args ...string) *Server {
	t.Helper()
	return StartBinary(t, SkipIfUnavailable(t), args...)
}

// StartBinary is Start with the engine binary bin (a path, or a name looked
// up in PATH), whatever EngineEnv says: for tests that need two engines at
// once. It fails t if bin cannot be started.
func StartBinary(t testing.TB, bin string, args ...string) *Server {
	t.Helper()
	s := &Server{t: t}
	for i := 0; i+1 < len(args); i++ {
		if args[i] == "--requirepass" {
			s.password = args[i+1]
		}
	}
	p, err := redisproc.Start(context.Background(), redisproc.Options{Bin: bin, Dir: t.TempDir(), Args: args})
	if err != nil {
		t.Fatalf("redistest: %v", err)
	}
	s.proc = p
	t.Cleanup(s.cleanup)
	return s
}

// FreePort returns a loopback TCP port that was free a moment ago.
func FreePort() (int, error) { return redisproc.FreePort() }

// ClosedAddr returns a loopback address on which nothing listens (a port
// that was free a moment ago), for pointing a proxy at a dead upstream.
func ClosedAddr(t testing.TB) string {
	t.Helper()
	p, err := FreePort()
	if err != nil {
		t.Fatalf("redistest: %v", err)
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(p))
}

// Addr returns the server's address, "127.0.0.1:port".
func (s *Server) Addr() string { return s.proc.Addr() }

// Port returns the server's TCP port; it stays the same across Restart.
func (s *Server) Port() int { return s.proc.Port() }

// Dir returns the server's working directory.
func (s *Server) Dir() string { return s.proc.Dir() }

// Pid returns the server's process id, or 0 after Kill.
func (s *Server) Pid() int { return s.proc.Pid() }

func (s *Server) signal(sig syscall.Signal) {
	s.t.Helper()
	if err := s.proc.Signal(sig); err != nil {
		s.t.Fatalf("redistest: %v", err)
	}
}

// Stop freezes the server with SIGSTOP: connections stay open and the
// kernel still accepts bytes, but nothing is answered until Cont.
func (s *Server) Stop() { s.signal(syscall.SIGSTOP) }

// Cont resumes a server frozen by Stop (SIGCONT).
func (s *Server) Cont() { s.signal(syscall.SIGCONT) }

// Kill sends SIGKILL and waits until the process is gone (at most 10 s).
// Its sockets are closed by the kernel (RST where unread data is pending).
// Kill on a server that is not running does nothing.
func (s *Server) Kill() {
	s.t.Helper()
	if err := s.proc.Kill(); err != nil {
		s.t.Fatalf("redistest: %v", err)
	}
}

// Restart kills the server (if running) and starts a new one with the same
// arguments on the same port, waiting for PING. The data set starts empty.
func (s *Server) Restart() {
	s.t.Helper()
	if err := s.proc.Restart(context.Background()); err != nil {
		s.t.Fatalf("redistest: restart: %v", err)
	}
}

func (s *Server) cleanup() {
	s.mu.Lock()
	c := s.client
	s.client = nil
	s.mu.Unlock()
	if c != nil {
		_ = c.Close()
	}
	if err := s.proc.Kill(); err != nil {
		s.t.Errorf("redistest: %v", err)
	}
}

// Client returns a go-redis client (RESP3, the library default) connected
// directly to the server, for set-up and checks. It is created on first use
// and closed by the cleanup. It authenticates with --requirepass if given.
func (s *Server) Client() *redis.Client {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.client == nil {
		s.client = redis.NewClient(&redis.Options{
			Addr:            s.Addr(),
			Password:        s.password,
			DisableIdentity: true, // keep CLIENT SETINFO out of MONITOR output
			MaxRetries:      -1,
			DialTimeout:     2 * time.Second,
			ReadTimeout:     5 * time.Second,
			WriteTimeout:    5 * time.Second,
			TLSConfig:       s.tls,
		})
	}
	return s.client
}

// Do runs one command on Client and returns its result; a nil reply gives
// nil. Any other error fails the test, so call Do from the test goroutine
// and use Client().Do where an error is an expected outcome.
func (s *Server) Do(args ...any) any {
	s.t.Helper()
	return s.DoT(s.t, args...)
}

// DoT is Do reporting failures to t, for use inside subtests.
func (s *Server) DoT(t testing.TB, args ...any) any {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	v, err := s.Client().Do(ctx, args...).Result()
	if errors.Is(err, redis.Nil) {
		return nil
	}
	if err != nil {
		t.Fatalf("redistest: %v: %v", args, err)
	}
	return v
}

// Flush empties every database (FLUSHALL) so that an exchange can be
// replayed against the same server with the same starting state.
func (s *Server) Flush() {
	s.t.Helper()
	s.Do("FLUSHALL")
}

// Version returns the engine's INFO server fields that name it: the
// redis_version (Valkey reports the Redis version it is compatible with,
// 7.2.4 for Valkey 8) and the engine's own name and version, e.g.
// ("8.0.2", "redis 8.0.2") or ("7.2.4", "valkey 8.1.1").
func (s *Server) Version() (compat, engine string) {
	s.t.Helper()
	info, _ := s.Do("INFO", "server").(string)
	fields := map[string]string{}
	for _, line := range strings.Split(info, "\r\n") {
		if k, v, ok := strings.Cut(line, ":"); ok {
			fields[k] = v
		}
	}
	compat = fields["redis_version"]
	engine = "redis " + compat
	if v := fields["valkey_version"]; v != "" {
		engine = "valkey " + v
	}
	return compat, engine
}

// SkipBelow skips t unless the engine's redis_version (see Version) is at
// least min ("7.2"), compared numerically part by part: for tests of
// commands and flags that newer engines have (ZRANK WITHSCORE, WAITAOF,
// CLIENT NO-TOUCH: Redis 7.2 and Valkey 7.2 on). Set EngineEnv to run them.
func (s *Server) SkipBelow(t testing.TB, min string) {
	t.Helper()
	compat, engine := s.Version()
	if versionLess(compat, min) {
		t.Skipf("redistest: needs an engine compatible with Redis %s or later, have %s (set %s)", min, engine, EngineEnv)
	}
}

// versionLess reports whether dotted version a is below b ("7.0.15" <
// "7.2"); a missing or non-numeric part counts as 0.
func versionLess(a, b string) bool {
	pa, pb := strings.Split(a, "."), strings.Split(b, ".")
	for i := 0; i < max(len(pa), len(pb)); i++ {
		var x, y int
		if i < len(pa) {
			x, _ = strconv.Atoi(pa[i])
		}
		if i < len(pb) {
			y, _ = strconv.Atoi(pb[i])
		}
		if x != y {
			return x < y
		}
	}
	return false
}
