package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"time"

	"github.com/alicebob/miniredis/v2"

	"github.com/respmeter/respmeter/internal/redisproc"
)

// Engine start-up and shut-down bounds.
const (
	// engineStartTimeout bounds the wait for a started redis-server to
	// answer PING.
	engineStartTimeout = 10 * time.Second
	// engineStopTimeout bounds the wait for redis-server to exit after
	// SIGTERM before it is killed.
	engineStopTimeout = 5 * time.Second
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
// directory with persistence off (redisproc.Start) and waits until it
// answers PING. On error no process or directory is left behind.
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
	p, err := redisproc.Start(ctx, redisproc.Options{
		Bin: bin, Dir: dir, StartTimeout: engineStartTimeout,
		Args: []string{"--loglevel", "warning"},
	})
	if err != nil {
		return nil, errors.Join(err, os.RemoveAll(dir))
	}
	return &engine{
		addr: p.Addr(),
		desc: fmt.Sprintf("redis-server %s (%s)", version, bin),
		stop: func() error {
			return errors.Join(p.Stop(engineStopTimeout), os.RemoveAll(dir))
		},
	}, nil
}
