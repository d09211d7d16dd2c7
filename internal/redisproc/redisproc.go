// Package redisproc runs one redis-server (or a compatible engine such as
// valkey-server) as a child process on a loopback port: the one launcher
// that `respmeter demo` and the test kit (internal/redistest) share.
//
// Start runs the binary with persistence off in a given directory, waits
// until it answers PING and returns a *Proc; the engine's stdout and
// stderr go to a log file in that directory whose last lines are quoted
// in every start-up error. The process is not tied to the context given to
// Start: it runs until Stop or Kill (or until it dies).
//
// Concurrency: every method of *Proc may be called from any goroutine.
package redisproc

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/respmeter/respmeter/internal/respconn"
	"github.com/respmeter/respmeter/internal/tlsconf"
)

// Launcher bounds.
const (
	// DefaultBin is the engine binary Start looks up in PATH when
	// Options.Bin is empty.
	DefaultBin = "redis-server"
	// DefaultStartTimeout bounds one start attempt's wait for PING when
	// Options.StartTimeout is zero.
	DefaultStartTimeout = 10 * time.Second
	// portAttempts is how many free ports Start tries when Options.Port
	// is 0: a port found free can be taken by someone else before the
	// engine binds it.
	portAttempts = 5
	// restartAttempts is how many times Restart tries the same port.
	restartAttempts = 3
	// killTimeout bounds the wait for the process to exit after SIGKILL.
	killTimeout = 10 * time.Second
	// pingTimeout bounds one readiness PING (dial, write, read).
	pingTimeout = 200 * time.Millisecond
	// pingInterval is the pause between readiness PINGs.
	pingInterval = 10 * time.Millisecond
	// logTailLines is how many lines of the engine's log an error quotes.
	logTailLines = 5
)

// ErrNotRunning is returned by Signal when the process has been stopped or
// killed (and not restarted).
var ErrNotRunning = errors.New("redisproc: no running process")

// Options says what Start runs.
type Options struct {
	// Bin is the engine binary: a path, or a name looked up in PATH.
	// Default DefaultBin ("redis-server").
	Bin string
	// Dir is the engine's working directory (--dir) and holds its log
	// files (redis-N.log, N counting starts from 1). Required; Start does
	// not create or remove it.
	Dir string
	// Port is the TCP port to bind on 127.0.0.1; 0 picks a free one (up to
	// 5 ports are tried, as one found free can be taken before the engine
	// binds it). A given port is tried once.
	Port int
	// Args follow the fixed arguments (`--save "" --appendonly no --bind
	// 127.0.0.1 --port N --dir Dir --daemonize no`), so they may override
	// them; for example "--enable-debug-command", "yes". An Args
	// "--logfile" moves the log away from the file errors quote.
	Args []string
	// StartTimeout bounds each start attempt's wait for the first answer
	// to PING. Default DefaultStartTimeout (10 s).
	StartTimeout time.Duration
	// TLS, when set, serves TLS only: Port becomes the engine's --tls-port
	// (with --port 0), Args must give its --tls-cert-file, --tls-key-file
	// and --tls-ca-cert-file, and the readiness PING speaks TLS with this
	// client configuration.
	TLS *tls.Config
}

// Proc is one engine process bound to 127.0.0.1. The port stays the same
// across Restart.
type Proc struct {
	bin  string
	opts Options

	mu      sync.Mutex
	port    int
	cmd     *exec.Cmd     // nil when not running
	done    chan struct{} // closed when cmd has been reaped
	gen     int           // counts starts; names the log file
	logPath string        // the current start's log
}

// Start launches the engine as opts says and waits until it answers PING
// (any reply line: -NOAUTH under --requirepass proves it is up too). It
// fails, leaving no process behind, when the binary cannot be found or
// run, the process exits during start-up, PING goes unanswered for
// StartTimeout, or ctx ends; the error quotes the last lines of the log.
func Start(ctx context.Context, opts Options) (*Proc, error) {
	if opts.Dir == "" {
		return nil, errors.New("redisproc: Options.Dir is required")
	}
	if opts.Bin == "" {
		opts.Bin = DefaultBin
	}
	if opts.StartTimeout <= 0 {
		opts.StartTimeout = DefaultStartTimeout
	}
	bin, err := exec.LookPath(opts.Bin)
	if err != nil {
		return nil, fmt.Errorf("redisproc: %w", err)
	}
	p := &Proc{bin: bin, opts: opts, port: opts.Port}
	attempts := 1
	if opts.Port == 0 {
		attempts = portAttempts
	}
	for i := 0; i < attempts; i++ {
		if opts.Port == 0 {
			if p.port, err = FreePort(); err != nil {
				return nil, err
			}
		}
		if err = p.launch(ctx); err == nil || ctx.Err() != nil {
			break
		}
	}
	if err != nil {
		return nil, err
	}
	return p, nil
}

// FreePort returns a loopback TCP port that was free a moment ago.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("redisproc: find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// launch makes one attempt at starting the process on p.port and waits
// for PING. It leaves no process behind when it fails.
func (p *Proc) launch(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("redisproc: %w", err)
	}
	p.mu.Lock()
	p.gen++
	logPath := filepath.Join(p.opts.Dir, fmt.Sprintf("redis-%d.log", p.gen))
	port := p.port
	p.mu.Unlock()
	logf, err := os.Create(logPath)
	if err != nil {
		return fmt.Errorf("redisproc: %w", err)
	}
	defer logf.Close() // the child keeps its own copy of the descriptor
	argv := []string{
		"--save", "", "--appendonly", "no",
		"--bind", "127.0.0.1", "--port", strconv.Itoa(port),
		"--dir", p.opts.Dir, "--daemonize", "no",
	}
	if p.opts.TLS != nil {
		argv = append(argv, "--port", "0", "--tls-port", strconv.Itoa(port))
	}
	argv = append(argv, p.opts.Args...)
	cmd := exec.Command(p.bin, argv...)
	cmd.Dir = p.opts.Dir
	// *os.File outputs make exec start no copying goroutines.
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("redisproc: start %s: %w", p.bin, err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(done)
	}()
	p.mu.Lock()
	p.cmd, p.done, p.logPath = cmd, done, logPath
	p.mu.Unlock()

	addr := p.Addr()
	deadline := time.NewTimer(p.opts.StartTimeout)
	defer deadline.Stop()
	for {
		if pid, err := ping(addr, pingTimeout, p.opts.TLS); err == nil {
			// An answer, but is it this process's? Another engine may hold
			// the port (taken between FreePort and this bind, by a test
			// process running beside this one) while this one exits on
			// its bind error; using that engine would mix two tests'
			// commands. INFO's process_id says whose it is; without it
			// (a password, or INFO denied), the log: an engine logs that
			// it is ready before it answers anything.
			if pid == cmd.Process.Pid || pid <= 0 && ready(logPath) {
				return nil
			}
			_ = p.Kill()
			return fmt.Errorf("redisproc: port %d answers, but not %s started on it: %s",
				port, filepath.Base(p.bin), tail(logPath, logTailLines))
		}
		select {
		case <-done:
			p.forget(cmd)
			return fmt.Errorf("redisproc: %s on port %d exited during start-up: %s",
				filepath.Base(p.bin), port, tail(logPath, logTailLines))
		case <-ctx.Done():
			_ = p.Kill()
			return fmt.Errorf("redisproc: %s on port %d: %w", filepath.Base(p.bin), port, ctx.Err())
		case <-deadline.C:
			_ = p.Kill()
			return fmt.Errorf("redisproc: %s on port %d did not answer PING within %v: %s",
				filepath.Base(p.bin), port, p.opts.StartTimeout, tail(logPath, logTailLines))
		case <-time.After(pingInterval):
		}
	}
}

// ready reports whether the log at path has the line Redis and Valkey
// write at notice level once they listen, before they answer a command:
// "Ready to accept connections" (Redis 7.0), followed by " tcp" or " tls"
// (7.2 and later, Valkey). An engine that wants a password and logs only
// warnings (--loglevel warning) so never counts as started.
func ready(path string) bool {
	b, err := os.ReadFile(path)
	return err == nil && bytes.Contains(b, []byte("Ready to accept connections"))
}

// forget clears p.cmd if it is still cmd (a process that exited by itself).
func (p *Proc) forget(cmd *exec.Cmd) {
	p.mu.Lock()
	if p.cmd == cmd {
		p.cmd, p.done = nil, nil
	}
	p.mu.Unlock()
}

// ping sends PING and accepts +PONG or -NOAUTH (the engine is up but wants
// a password). After +PONG it returns the engine's process id from INFO
// server (0 when INFO is denied or lacks it); after -NOAUTH, -1.
func ping(addr string, timeout time.Duration, tc *tls.Config) (int, error) {
	var td *tlsconf.Dialer
	if tc != nil {
		td = tlsconf.NewDialer(tc)
	}
	c, err := respconn.Dial(context.Background(), addr, respconn.Options{Timeout: timeout, TLS: td})
	if err != nil {
		return 0, err
	}
	defer c.Close()
	v, err := c.Do(timeout, "PING")
	if err != nil {
		return 0, err
	}
	if v.IsError() && strings.HasPrefix(v.Str, "NOAUTH") {
		return -1, nil
	}
	if v.Str != "PONG" {
		return 0, fmt.Errorf("unexpected PING reply %v", v)
	}
	v, err = c.Do(timeout, "INFO", "server")
	if err != nil {
		return 0, err
	}
	if v.IsError() {
		return 0, nil
	}
	_, rest, _ := strings.Cut(v.Str, "process_id:")
	line, _, _ := strings.Cut(rest, "\n")
	pid, _ := strconv.Atoi(strings.TrimSpace(line))
	return pid, nil
}

// tail returns the last n lines of the file at path joined by " | ".
func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "(no log: " + err.Error() + ")"
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}

// Addr returns the engine's address, "127.0.0.1:port".
func (p *Proc) Addr() string {
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(p.Port()))
}

// Port returns the engine's TCP port; it stays the same across Restart.
func (p *Proc) Port() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.port
}

// Dir returns the engine's working directory (Options.Dir).
func (p *Proc) Dir() string { return p.opts.Dir }

// Bin returns the path of the engine binary that runs.
func (p *Proc) Bin() string { return p.bin }

// LogPath returns the file the current (or last) start's stdout and
// stderr go to.
func (p *Proc) LogPath() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.logPath
}

// Pid returns the process id, or 0 when no process runs (after Stop or
// Kill, or once it has been seen to exit during start-up).
func (p *Proc) Pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

// Signal sends sig to the process: SIGSTOP freezes it (connections stay
// open, the kernel still accepts bytes, nothing is answered) until
// SIGCONT. It returns ErrNotRunning after Stop or Kill.
func (p *Proc) Signal(sig syscall.Signal) error {
	p.mu.Lock()
	cmd := p.cmd
	p.mu.Unlock()
	if cmd == nil {
		return ErrNotRunning
	}
	if err := cmd.Process.Signal(sig); err != nil {
		return fmt.Errorf("redisproc: signal %v: %w", sig, err)
	}
	return nil
}

// Kill sends SIGKILL and waits until the process is gone (at most 10 s);
// the kernel closes its sockets (RST where unread data is pending). Kill
// when no process runs does nothing.
func (p *Proc) Kill() error {
	cmd, done := p.take()
	if cmd == nil {
		return nil
	}
	_ = cmd.Process.Kill()
	select {
	case <-done:
		return nil
	case <-time.After(killTimeout):
		return fmt.Errorf("redisproc: pid %d did not exit within %v of SIGKILL", cmd.Process.Pid, killTimeout)
	}
}

// Stop asks the process to shut down (SIGTERM, and SIGCONT in case it is
// frozen) and waits up to timeout for it to exit; then it kills it and
// says so in the error. Stop when no process runs does nothing.
func (p *Proc) Stop(timeout time.Duration) error {
	cmd, done := p.take()
	if cmd == nil {
		return nil
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	_ = cmd.Process.Signal(syscall.SIGCONT)
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-done:
		return nil
	case <-t.C:
	}
	_ = cmd.Process.Kill()
	select {
	case <-done:
		return fmt.Errorf("redisproc: pid %d did not exit within %v of SIGTERM; killed", cmd.Process.Pid, timeout)
	case <-time.After(killTimeout):
		return fmt.Errorf("redisproc: pid %d did not exit within %v of SIGTERM nor %v of SIGKILL", cmd.Process.Pid, timeout, killTimeout)
	}
}

// take detaches the running process from p, so that exactly one caller
// stops it.
func (p *Proc) take() (*exec.Cmd, chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	cmd, done := p.cmd, p.done
	p.cmd, p.done = nil, nil
	return cmd, done
}

// Restart kills the process (if running) and starts a new one with the
// same options on the same port, waiting for PING as Start does; the data
// set starts empty. A port still held a moment after the kill is tried up
// to 3 times, 100 ms apart.
func (p *Proc) Restart(ctx context.Context) error {
	if err := p.Kill(); err != nil {
		return err
	}
	// The old listener is gone with the process; redis-server sets
	// SO_REUSEADDR, so TIME_WAIT connections on the port do not block it.
	var err error
	for i := 0; i < restartAttempts; i++ {
		if i > 0 {
			select {
			case <-ctx.Done():
				return err
			case <-time.After(100 * time.Millisecond):
			}
		}
		if err = p.launch(ctx); err == nil {
			return nil
		}
	}
	return err
}
