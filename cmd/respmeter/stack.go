package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"runtime"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/respmeter/respmeter/configs"
	"github.com/respmeter/respmeter/metrics"
	"github.com/respmeter/respmeter/proxy"
	"github.com/respmeter/respmeter/routing/command"
)

// adminReadHeaderTimeout bounds how long the admin server waits for a
// request's headers (a slow-loris guard; scrapes send theirs at once).
const adminReadHeaderTimeout = 10 * time.Second

// stack is one running proxy with its metrics Set and admin HTTP server,
// as both the proxy and the demo subcommands run it. Its methods are called
// from the goroutine that started it.
type stack struct {
	set   *metrics.Set
	proxy *proxy.Proxy
	// loops is the number of event loops actually used (cfg.Loops, or one
	// per CPU when that is 0).
	loops int
	// admin is nil when the admin server is off.
	admin *http.Server
	// adminAddr is the admin server's bound address, "" when off.
	adminAddr string
	// adminErr receives the error that ended the admin server's Serve, if
	// it ends before stop.
	adminErr chan error
}

// newLogger returns a slog logger writing level-and-above lines to w as
// text (logfmt) or json. level and format are assumed valid
// (configs.Config.Validate).
func newLogger(w io.Writer, level, format string) *slog.Logger {
	var lvl slog.Level
	_ = lvl.UnmarshalText([]byte(level)) // validated; unknown stays info
	opts := &slog.HandlerOptions{Level: lvl}
	if format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// startStack builds the metrics registry, starts the proxy on cfg.Listen and
// the admin server on cfg.Admin (unless "off"), and logs where each
// listens. On error nothing is left running.
func startStack(cfg configs.Config, log *slog.Logger) (*stack, error) {
	loops := cfg.Loops
	if loops == 0 {
		loops = runtime.NumCPU()
	}
	st := &stack{loops: loops, set: metrics.NewSet(loops, command.Names()), adminErr: make(chan error, 1)}
	reg := prometheus.NewRegistry()
	reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	if err := st.set.Register(reg); err != nil {
		return nil, fmt.Errorf("register metrics: %w", err)
	}

	// Bind the admin port first: a port in use then fails the start before
	// anything has been announced as listening.
	var adminLn net.Listener
	if cfg.Admin != configs.AdminOff {
		ln, err := net.Listen("tcp", cfg.Admin)
		if err != nil {
			return nil, fmt.Errorf("admin: %w", err)
		}
		adminLn = ln
	}
	p, err := proxy.New(proxy.Config{
		Listen:       cfg.Listen,
		Upstream:     cfg.Upstream,
		Loops:        loops,
		Measure:      cfg.Measure,
		DrainTimeout: time.Duration(cfg.DrainTimeout),
		DialTimeout:  time.Duration(cfg.DialTimeout),
		Metrics:      st.set,
		Logger:       log,
	})
	if err == nil {
		err = p.Start()
	}
	if err != nil {
		if adminLn != nil {
			_ = adminLn.Close()
		}
		return nil, err
	}
	st.proxy = p
	log.Info("proxy listening", "component", "proxy", "addr", p.Addr(), "upstream", cfg.Upstream,
		"loops", loops, "measure", cfg.Measure)

	alog := log.With("component", "admin")
	if adminLn == nil {
		alog.Info("admin server off: no /metrics or /stats")
		return st, nil
	}
	st.adminAddr = adminLn.Addr().String()
	st.admin = &http.Server{
		Handler:           metrics.NewAdminMux(st.set, reg),
		ReadHeaderTimeout: adminReadHeaderTimeout,
		ErrorLog:          slog.NewLogLogger(alog.Handler(), slog.LevelWarn),
	}
	go func() {
		if err := st.admin.Serve(adminLn); !errors.Is(err, http.ErrServerClosed) {
			st.adminErr <- err
		}
	}()
	alog.Info("admin listening", "addr", st.adminAddr, "metrics", "/metrics", "stats", "/stats")
	if host, _, _ := net.SplitHostPort(cfg.Admin); !configs.IsLoopback(host) {
		alog.Warn("admin address is not loopback: /metrics and /stats are reachable from other hosts, without authentication",
			"addr", cfg.Admin)
	}
	return st, nil
}

// stop stops the proxy (no new clients, pending replies drained within the
// proxy's drain timeout) and then the admin server, both bounded by ctx. It
// returns the errors of both, joined.
func (st *stack) stop(ctx context.Context) error {
	var errs []error
	if err := st.proxy.Stop(ctx); err != nil {
		errs = append(errs, fmt.Errorf("stop proxy: %w", err))
	}
	if st.admin != nil {
		if err := st.admin.Shutdown(ctx); err != nil {
			errs = append(errs, fmt.Errorf("stop admin server: %w", err))
			_ = st.admin.Close()
		}
	}
	return errors.Join(errs...)
}
