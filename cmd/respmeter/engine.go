package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/alicebob/miniredis/v2"
)

// Engine start-up and shut-down bounds.
const (
	// engineStartTimeout bounds the wait for a started redis-server to
	// answer PING.
	engineStartTimeout = 10 * time.Second
	// engineStopTimeout bounds the wait for redis-server to exit after
	// SIGTERM before it is killed.
	engineStopTimeout = 5 * time.Second
	// engineStartAttempts is how many free ports are tried: a port found
	// free can be taken by someone else before redis-server binds it.
	engineStartAttempts = 3
)

// engine is the Redis-compatible server the demo measures: a redis-server
// child process or an embedded miniredis.
type engine struct {
	// addr is the engine's "127.0.0.1:port".
	addr string
	// desc says what it is, for the "engine:" line:
	// "redis-server 7.0.15 (/usr/bin/redis-server)".
	desc string
	// stop shuts it down and waits until it is gone; call it exactly once.
	stop func() error
	// embedded is true for miniredis, which has no INFO commandstats or
	// LATENCY HISTOGRAM to poll.
	embedded bool
}

// startEngine starts redis-server from PATH on a free loopback port, in a
// temporary directory and without persistence, or an embedded miniredis
// when redis-server is not in PATH or does not come up.
func startEngine(ctx context.Context) (*engine, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return startMiniredis("redis-server not found in PATH")
	}
	e, err := startRedisServer(ctx, bin)
	if err != nil {
		return startMiniredis(fmt.Sprintf("%s failed to start: %v", bin, err))
	}
	return e, nil
}

// startMiniredis starts an embedded miniredis on a free loopback port; why
// says why it is used instead of redis-server.
func startMiniredis(why string) (*engine, error) {
	m, err := miniredis.Run()
	if err != nil {
		return nil, fmt.Errorf("start embedded miniredis: %w", err)
	}
	return &engine{
		addr:     m.Addr(),
		desc:     fmt.Sprintf("embedded miniredis (%s)", why),
		stop:     func() error { m.Close(); return nil },
		embedded: true,
	}, nil
}

// redisVersionRE finds the version in `redis-server --version` output:
// "Redis server v=7.0.15 sha=00000000:0 malloc=jemalloc-5.3.0 bits=64 build=...".
var redisVersionRE = regexp.MustCompile(`\bv=(\S+)`)

// startRedisServer runs bin on a free loopback port in a fresh temporary
// directory with persistence off (--save "" --appendonly no) and waits
// until it answers PING. On error no process or directory is left behind.
func startRedisServer(ctx context.Context, bin string) (*engine, error) {
	version := "(unknown version)"
	vctx, cancel := context.WithTimeout(ctx, engineStartTimeout)
	out, err := exec.CommandContext(vctx, bin, "--version").Output()
	cancel()
	if err != nil {
		return nil, fmt.Errorf("%s --version: %w", bin, err)
	}
	if m := redisVersionRE.FindSubmatch(out); m != nil {
		version = string(m[1])
	}
	dir, err := os.MkdirTemp("", "respmeter-demo-")
	if err != nil {
		return nil, err
	}
	for attempt := 1; ; attempt++ {
		stop, addr, err := launchRedisServer(ctx, bin, dir)
		if err == nil {
			return &engine{
				addr: addr,
				desc: fmt.Sprintf("redis-server %s (%s)", version, bin),
				stop: func() error {
					err := stop()
					return errors.Join(err, os.RemoveAll(dir))
				},
			}, nil
		}
		if attempt == engineStartAttempts || ctx.Err() != nil {
			_ = os.RemoveAll(dir)
			return nil, err
		}
	}
}

// launchRedisServer makes one attempt at starting bin on a free port and
// returns a function that stops it.
func launchRedisServer(ctx context.Context, bin, dir string) (stop func() error, addr string, err error) {
	port, err := freePort()
	if err != nil {
		return nil, "", err
	}
	addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	logPath := filepath.Join(dir, "redis.log")
	cmd := exec.Command(bin,
		"--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no",
		"--dir", dir, "--daemonize", "no",
		"--loglevel", "warning", "--logfile", logPath,
	)
	cmd.Dir = dir
	if err := cmd.Start(); err != nil {
		return nil, "", fmt.Errorf("start %s: %w", bin, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	stop = func() error {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
			return nil
		case <-time.After(engineStopTimeout):
			_ = cmd.Process.Kill()
			<-exited
			return fmt.Errorf("redis-server did not exit within %v of SIGTERM; killed", engineStopTimeout)
		}
	}

	deadline := time.Now().Add(engineStartTimeout)
	for {
		if pingRaw(addr, 200*time.Millisecond) == nil {
			return stop, addr, nil
		}
		select {
		case <-exited:
			return nil, "", fmt.Errorf("redis-server exited during start-up: %s", logTail(logPath))
		case <-ctx.Done():
			_ = stop()
			return nil, "", ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			_ = stop()
			return nil, "", fmt.Errorf("redis-server did not answer PING within %v: %s", engineStartTimeout, logTail(logPath))
		}
	}
}

// freePort returns a loopback TCP port that was free a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// pingRaw sends PING on a fresh connection and expects +PONG.
func pingRaw(addr string, timeout time.Duration) error {
	c, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(timeout))
	if _, err := c.Write([]byte("*1\r\n$4\r\nPING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if line != "+PONG\r\n" {
		return fmt.Errorf("PING answered %q", line)
	}
	return nil
}

// logTail returns the last few lines of the file at path, joined by " | ".
func logTail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "(no log: " + err.Error() + ")"
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > 5 {
		lines = lines[len(lines)-5:]
	}
	return strings.Join(lines, " | ")
}
