package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
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
	// tls is true when the engine serves TLS only (demo --tls with a
	// redis-server built with TLS).
	tls bool
}

// engineTLS is the TLS an engine is asked to serve: its certificate, key
// and CA certificate, and the configuration its readiness PING verifies it
// with.
type engineTLS struct {
	certFile, keyFile, caFile string
	client                    *tls.Config
}

// startEngine starts redis-server from PATH on a free loopback port, in a
// temporary directory and without persistence, or an embedded miniredis
// when redis-server is not in PATH or does not come up. With et it first
// tries redis-server serving TLS only (--port 0 --tls-port), and says in
// desc why it serves plaintext when it does not (built without TLS).
func startEngine(ctx context.Context, et *engineTLS) (*engine, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return startMiniredis("redis-server not found in PATH")
	}
	if et != nil {
		e, terr := startRedisServer(ctx, bin, et)
		if terr == nil {
			return e, nil
		}
		e, err = startRedisServer(ctx, bin, nil)
		if err == nil {
			e.desc += fmt.Sprintf(", plaintext: with --tls-port it failed to start (%v)", firstLine(terr.Error()))
			return e, nil
		}
	}
	e, err := startRedisServer(ctx, bin, nil)
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
// answers PING; with et, serving TLS only with et's certificate, client
// certificates not asked for. On error no process or directory is left
// behind.
func startRedisServer(ctx context.Context, bin string, et *engineTLS) (*engine, error) {
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
	opts := redisproc.Options{
		Bin: bin, Dir: dir, StartTimeout: engineStartTimeout,
		Args: []string{"--loglevel", "warning"},
	}
	desc := fmt.Sprintf("redis-server %s (%s)", version, bin)
	if et != nil {
		opts.TLS = et.client
		opts.Args = append(opts.Args, "--tls-cert-file", et.certFile, "--tls-key-file", et.keyFile,
			"--tls-ca-cert-file", et.caFile, "--tls-auth-clients", "no")
		desc += ", TLS only (--port 0 --tls-port)"
	}
	p, err := redisproc.Start(ctx, opts)
	if err != nil {
		return nil, errors.Join(err, os.RemoveAll(dir))
	}
	return &engine{
		addr: p.Addr(),
		desc: desc,
		tls:  et != nil,
		stop: func() error {
			return errors.Join(p.Stop(engineStopTimeout), os.RemoveAll(dir))
		},
	}, nil
}

// firstLine is s up to its first newline.
func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}
