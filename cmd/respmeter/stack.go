package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/respmeter/respmeter/configs"
	"github.com/respmeter/respmeter/internal/respconn"
	"github.com/respmeter/respmeter/internal/tlsconf"
	"github.com/respmeter/respmeter/metrics"
	engstats "github.com/respmeter/respmeter/metrics/engine"
	"github.com/respmeter/respmeter/metrics/heat"
	"github.com/respmeter/respmeter/metrics/slowlog"
	"github.com/respmeter/respmeter/metrics/split"
	"github.com/respmeter/respmeter/metrics/verdict"
	"github.com/respmeter/respmeter/proxy"
	"github.com/respmeter/respmeter/routing"
)

// adminReadHeaderTimeout bounds how long the admin server waits for a
// request's headers (a slow-loris guard; scrapes send theirs at once).
const adminReadHeaderTimeout = 10 * time.Second

// windowInterval and windowIntervals shape the stack's metrics.Window:
// /stats?window=D and the live page at / see up to the last 30 seconds,
// one second at a time. Each interval costs memory for every (command,
// phase) busy in it (BenchmarkWindowMemory: 30 intervals with every
// command name busy hold about 14 MiB), so the ring is kept short.
const (
	windowInterval  = time.Second
	windowIntervals = 30
	// windowIdle: the window records only while the live page or
	// /stats?window= is read, and frees its intervals this long after the
	// last read (metrics.Window.Lazy).
	windowIdle = 5 * time.Minute
)

// stack is one running proxy with its metrics Set, slow log, background
// tasks (PING probe, engine poller, verdict, HdrHistogram log) and admin
// HTTP server, as both the proxy and the demo subcommands run it. Its
// methods are called from the goroutine that started it.
type stack struct {
	cfg     configs.Config
	set     *metrics.Set
	proxy   *proxy.Proxy
	slowlog *slowlog.Log
	// analyzer computes the verdict and owns the probe and poller (nil
	// when off).
	analyzer *analyzer
	// window keeps the last windowIntervals intervals for /stats?window=D
	// and the live page.
	window *metrics.Window
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
	// cancelBg ends the background goroutines, which bg tracks.
	cancelBg context.CancelFunc
	bg       sync.WaitGroup
	// stopHDRLog ends the HdrHistogram log; nil when --hdr-log is "".
	stopHDRLog func() error
	// tls is the proxy's TLS configuration and handshake metrics.
	tls tlsSides
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

// startStack builds the metrics registry and the slow log, opens the
// HdrHistogram log (cfg.HDRLog), starts the proxy on cfg.Listen, the PING
// probe, the engine poller and the verdict on goroutines of their own, and
// the admin server on cfg.Admin (unless "off"), and logs where each
// listens. Under hash-slot routing (cfg.Routed) each shard gets a probe, a
// poller and a verdict of its own (analyzer.syncShards). On error nothing
// is left running.
func startStack(cfg configs.Config, log *slog.Logger) (_ *stack, err error) {
	loops := cfg.Loops
	if loops == 0 {
		loops = runtime.NumCPU()
	}
	// The engine's command table first: it labels the metrics (the
	// commands only the engine knows get labels of their own).
	ts, err := newTLSSides(cfg, log)
	if err != nil {
		return nil, err
	}
	cmds := proxy.FetchCommands(proxy.Config{
		Upstream: cfg.Upstream, Route: cfg.Route, Shards: cfg.Shards, Cluster: cfg.Cluster,
		DialTimeout:  time.Duration(cfg.DialTimeout),
		UpstreamUser: cfg.UpstreamUser, UpstreamPassword: cfg.UpstreamPassword,
		UpstreamTLS: ts.upstream,
	}, log.With("component", "proxy"))
	names := cmds.Labels()
	st := &stack{
		cfg:      cfg,
		loops:    loops,
		set:      metrics.NewSet(loops, names),
		slowlog:  slowlog.New(cfg.SlowlogLen, time.Duration(cfg.SlowlogThreshold)),
		adminErr: make(chan error, 1),
		tls:      ts,
	}
	kn, err := heat.ParseNames(cfg.KeyNames)
	if err != nil {
		return nil, err
	}
	// --key-names reaches the slow log's keys (its own and the engines'),
	// hashed with the heat's seed when there is heat.
	keyShow := heat.KeyShowOf(kn)
	if cfg.Heat {
		h := newHeat(cfg, loops, names, kn)
		st.set.SetHeat(h)
		if keyShow != nil {
			keyShow = h.KeyShow()
		}
	}
	st.slowlog.SetKeyShow(keyShow)
	st.window = metrics.NewWindow(st.set, windowInterval, windowIntervals)
	st.window.Lazy(windowIdle)
	reg, err := st.registry()
	if err != nil {
		return nil, err
	}
	bgCtx, cancelBg := context.WithCancel(context.Background())
	st.cancelBg = cancelBg
	defer func() {
		if err != nil {
			cancelBg()
		}
	}()
	an, err := st.newAnalyzer(bgCtx, reg, names, log)
	if err != nil {
		return nil, err
	}
	st.analyzer = an

	// Open the files and bind the admin port first: a bad path or a port
	// in use then fails the start before anything has been announced as
	// listening.
	if cfg.HDRLog != "" {
		stop, herr := startHDRLog(bgCtx, st.set, cfg.HDRLog, time.Duration(cfg.HDRInterval), log)
		if herr != nil {
			return nil, herr
		}
		st.stopHDRLog = stop
		defer func() {
			if err != nil { // the named result: a later step failed
				_ = stop()
			}
		}()
	}
	if cfg.Summary != "" {
		if err := checkSummaryPath(cfg.Summary); err != nil {
			return nil, err
		}
	}
	var adminLn net.Listener
	guard, err := newAdminGuard(cfg)
	if err != nil {
		return nil, err
	}
	if cfg.Admin != configs.AdminOff {
		ln, err := net.Listen("tcp", cfg.Admin)
		if err != nil {
			return nil, fmt.Errorf("admin: %w", err)
		}
		adminLn = ln
	}
	if err := st.startProxy(reg, cmds, log); err != nil {
		if adminLn != nil {
			_ = adminLn.Close()
		}
		return nil, err
	}
	p := st.proxy
	st.slowlog.SetEngine(engineSlowlog(cfg, st.tls.upstream, cmds, p.ShardAddrs, keyShow))
	an.SetProxy(p.InFlightArea, p.LoopLag)
	startView(an.Engine(), bgCtx, &st.bg)
	st.tls.watch(bgCtx, &st.bg)
	if cfg.Routed() {
		an.SetShardAddrs(p.ShardAddrs)
		an.SyncShards() // the shards known at start: their probes' baselines begin now
	}
	st.bg.Go(func() { an.Run(bgCtx) })
	st.bg.Go(func() { st.window.Run(bgCtx) })
	st.bg.Go(func() { an.SampleLoops(bgCtx) })

	alog := log.With("component", "admin")
	if adminLn == nil {
		alog.Info("admin server off: no /metrics, /stats or /slowlog")
		return st, nil
	}
	st.startAdmin(adminLn, reg, guard, alog)
	return st, nil
}

// registry returns the Prometheus registry of the stack: the Go and
// process collectors and the stack's metrics Set, in the export cfg names.
func (st *stack) registry() (*prometheus.Registry, error) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	ex, err := metricsExport(st.cfg)
	if err != nil {
		return nil, err
	}
	if err := st.set.RegisterExport(reg, ex); err != nil {
		return nil, fmt.Errorf("register metrics: %w", err)
	}
	if err := st.tls.metrics.Register(reg); err != nil {
		return nil, fmt.Errorf("register TLS metrics: %w", err)
	}
	if h := st.set.Heat(); h != nil {
		if err := reg.Register(h.NewCollector(st.cfg.HeatMetricsKeys, st.set.ShardNames)); err != nil {
			return nil, fmt.Errorf("register heat metrics: %w", err)
		}
	}
	return reg, nil
}

// newAnalyzer returns the verdict's analyzer with its engine view: the
// upstream's, or under hash-slot routing one per shard, each started when
// the shard appears in the proxy's map (verdict.Analyzer.SyncShards: at
// start, and after a --cluster topology refresh), with the shard's own
// verdict. Nothing is started yet for the upstream's view (see startStack).
func (st *stack) newAnalyzer(bgCtx context.Context, reg prometheus.Registerer, names []string, log *slog.Logger) (*analyzer, error) {
	cfg := st.cfg
	vcfg := verdict.Config{
		Set:      st.set,
		Log:      log.With("component", "verdict"),
		Interval: time.Duration(cfg.HDRInterval),
		ProcSelf: "/proc/self",
	}
	var an *analyzer
	if !cfg.Routed() {
		v, err := newEngineView(cfg, st.tls.upstream, cfg.Upstream, names, reg, log)
		if err != nil {
			return nil, err
		}
		vcfg.Engine = v
	} else {
		vcfg.NewView = func(addr string) (*verdict.View, error) {
			v, err := newEngineView(cfg, st.tls.upstream, addr, names, reg, log)
			if err != nil {
				return nil, err
			}
			latest := func() (split.Verdict, bool) { return an.ShardLatest(v) }
			if err := engineRegisterer(reg, addr).Register(split.NewCollector(latest, v.EngineLabel)); err != nil {
				return nil, fmt.Errorf("register verdict metrics: %w", err)
			}
			startView(v, bgCtx, &st.bg)
			return v, nil
		}
	}
	an = newAnalyzer(vcfg, time.Duration(cfg.ProbeInterval), time.Duration(cfg.EnginePoll))
	if err := reg.Register(an.Collector()); err != nil {
		return nil, fmt.Errorf("register verdict account metrics: %w", err)
	}
	if v := vcfg.Engine; v != nil {
		if err := engineRegisterer(reg, v.Addr).Register(split.NewCollector(an.LatestVerdict, v.EngineLabel)); err != nil {
			return nil, fmt.Errorf("register verdict metrics: %w", err)
		}
	}
	return an, nil
}

// startProxy starts the stack's proxy on cfg.Listen with the command table
// cmds, registers its capture counter in reg and logs where it listens. On
// error nothing is left running.
func (st *stack) startProxy(reg prometheus.Registerer, cmds *routing.Resolver, log *slog.Logger) error {
	cfg := st.cfg
	pcfg := proxy.Config{
		Listen:            cfg.Listen,
		Upstream:          cfg.Upstream,
		Route:             cfg.Route,
		Shards:            cfg.Shards,
		ShardZones:        cfg.ShardZones,
		Cluster:           cfg.Cluster,
		FacadeListen:      cfg.FacadeListen,
		TopologyRefresh:   time.Duration(cfg.TopologyRefresh),
		PinBy:             cfg.PinBy,
		UpstreamMode:      cfg.UpstreamMode,
		UpstreamConns:     cfg.UpstreamConns,
		Loops:             st.loops,
		Measure:           cfg.Measure,
		DrainTimeout:      time.Duration(cfg.DrainTimeout),
		DialTimeout:       time.Duration(cfg.DialTimeout),
		UpstreamTimeout:   time.Duration(cfg.UpstreamTimeout),
		UpstreamUser:      cfg.UpstreamUser,
		UpstreamPassword:  cfg.UpstreamPassword,
		ClientOutputLimit: proxyLimit(int64(cfg.ClientOutputLimit)),
		ClientQueryLimit:  proxyLimit(int64(cfg.ClientQueryLimit)),
		MaxClients:        proxyLimit(int64(cfg.MaxClients)),
		SlowLog:           st.slowlog,
		Metrics:           st.set,
		Commands:          cmds,
		Logger:            log,

		TLSListen:           cfg.TLSListen,
		FacadeTLS:           cfg.FacadeTLS,
		TLS:                 st.tls.server,
		UpstreamTLS:         st.tls.upstream,
		TLSHandshakeTimeout: time.Duration(cfg.TLSHandshakeTimeout),
		TLSMetrics:          st.tls.metrics,
	}
	if cfg.Routed() {
		pcfg.Upstream = "" // not used: the shards are
	}
	if cfg.Listen == configs.ListenOff {
		pcfg.Listen = "" // TLS clients only
	}
	if cfg.Inject != "" {
		in, err := proxy.LoadInjection(cfg.Inject)
		if err != nil {
			return configError(fmt.Errorf("--inject: %w", err))
		}
		pcfg.Inject = in
		if n := st.loops + 1; runtime.GOMAXPROCS(0) < n {
			// The delays' clock thread holds a P while it waits
			// (proxy.Config.Inject): one more than the event loops'.
			runtime.GOMAXPROCS(n)
		}
	}
	p, err := proxy.New(pcfg)
	if errors.Is(err, proxy.ErrConfig) {
		return configError(err)
	}
	if err == nil {
		err = p.Start()
	}
	if err != nil {
		return err
	}
	if err := errors.Join(
		reg.Register(prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "respmeter_capture_dropped_total",
			Help: "Capture records dropped because the capture writer fell behind (the clients are never slowed down).",
		}, func() float64 { return float64(p.CaptureDropped()) })),
		reg.Register(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "respmeter_requests_in_flight",
			Help: "Requests read from clients and not yet answered, at the scrape (0 when every client has its replies).",
		}, func() float64 { return float64(p.InFlight()) })),
		reg.Register(injectCollector{p}),
	); err != nil {
		_ = p.Stop(context.Background())
		return fmt.Errorf("register proxy metrics: %w", err)
	}
	st.proxy = p
	attrs := []any{"component", "proxy", "addr", cmp.Or(p.Addr(), configs.ListenOff), "route", cfg.Route}
	switch {
	case !cfg.Routed():
		attrs = append(attrs, "upstream", cfg.Upstream)
	case cfg.Cluster != "":
		attrs = append(attrs, "cluster", cfg.Cluster, "topology_refresh", cfg.TopologyRefresh.String())
	default:
		attrs = append(attrs, "shards", strings.Join(cfg.Shards, ","))
	}
	if a := p.FacadeAddrs(); len(a) > 0 {
		attrs = append(attrs, "facade", strings.Join(a, ","))
	}
	if a := p.TLSAddr(); a != "" {
		attrs = append(attrs, "tls_addr", a, "tls_auth_clients", cfg.TLSAuthClients)
	}
	if cfg.UpstreamTLS {
		attrs = append(attrs, "upstream_tls", true)
	}
	if cfg.Route == configs.RoutePinned {
		attrs = append(attrs, "pin_by", cmp.Or(cfg.PinBy, configs.PinConnection))
	}
	attrs = append(attrs, "upstream_mode", cfg.UpstreamMode)
	if cfg.UpstreamMode == configs.UpstreamShared {
		attrs = append(attrs, "upstream_conns", max(cfg.UpstreamConns, 1))
	}
	log.Info("proxy listening", append(attrs, "loops", st.loops, "measure", cfg.Measure)...)
	return nil
}

// startAdmin serves the admin endpoints on ln: /stats, /slowlog, /capture,
// /metrics (reg), the live page at / and Go's profiler, their mutations
// behind guard.
func (st *stack) startAdmin(ln net.Listener, reg *prometheus.Registry, guard adminGuard, alog *slog.Logger) {
	st.adminAddr = ln.Addr().String()
	mux := http.NewServeMux()
	mux.Handle("/stats", st.set.StatsHandlerWindowed(st.window, st.analyzer.statsExtraWindow))
	mux.Handle("/slowlog", st.slowlog.Handler())
	capture := captureHandler(st.proxy, st.cfg.CaptureDir)
	mux.Handle("/capture", capture)
	mux.Handle("/capture/", capture)
	inject := injectHandler(st.proxy)
	mux.Handle("/inject", inject)
	mux.Handle("/inject/", inject)
	mux.Handle("/", metrics.NewAdminMux(st.set, reg)) // /metrics
	// Go's profiler, as caddy's admin endpoint serves it: the admin address
	// is loopback unless told otherwise (and warned about then).
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	st.admin = &http.Server{
		Handler:           guard.wrap(mux),
		ReadHeaderTimeout: adminReadHeaderTimeout,
		ErrorLog:          slog.NewLogLogger(alog.Handler(), slog.LevelWarn),
	}
	go func() {
		if err := st.admin.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			st.adminErr <- err
		}
	}()
	alog.Info("admin listening", "addr", st.adminAddr, "live", "/", "metrics", "/metrics", "stats", "/stats", "slowlog", "/slowlog")
	if host, _, _ := net.SplitHostPort(st.cfg.Admin); !configs.IsLoopback(host) {
		alog.Warn("admin address is not loopback: /metrics, /stats and /slowlog are reachable from other hosts, without authentication",
			"addr", st.cfg.Admin)
	}
	guard.announce(alog)
}

// adminGuard is how the admin server treats requests that change
// something (metrics.MutationGuard): token required, open (loopback
// without a token) or refused, with the reason said at start.
type adminGuard struct {
	token  string
	open   bool
	reason string
}

// newAdminGuard reads cfg.AdminTokenFile (its first line, space trimmed;
// an empty token is an error) and decides: a token when given; with none,
// mutations open on a loopback admin address and refused on any other;
// "off" refuses them everywhere. It checks that cfg.CaptureDir, when set,
// is a directory.
func newAdminGuard(cfg configs.Config) (adminGuard, error) {
	if cfg.CaptureDir != "" {
		fi, err := os.Stat(cfg.CaptureDir)
		if err != nil {
			return adminGuard{}, fmt.Errorf("capture_dir: %w", err)
		}
		if !fi.IsDir() {
			return adminGuard{}, fmt.Errorf("capture_dir %s: not a directory", cfg.CaptureDir)
		}
	}
	host, _, _ := net.SplitHostPort(cfg.Admin)
	switch cfg.AdminTokenFile {
	case configs.AdminOff:
		return adminGuard{reason: "admin_token_file is off: capture start/stop and slow log reset are refused"}, nil
	case "":
		if configs.IsLoopback(host) {
			return adminGuard{open: true}, nil
		}
		return adminGuard{reason: "the admin address is not loopback and no admin_token_file is set: capture start/stop and slow log reset are refused"}, nil
	}
	b, err := os.ReadFile(cfg.AdminTokenFile)
	if err != nil {
		return adminGuard{}, fmt.Errorf("admin_token_file: %w", err)
	}
	line, _, _ := strings.Cut(string(b), "\n")
	tok := strings.TrimSpace(line)
	if tok == "" {
		return adminGuard{}, fmt.Errorf("admin_token_file %s: empty token", cfg.AdminTokenFile)
	}
	return adminGuard{token: tok}, nil
}

// wrap guards h's mutations.
func (g adminGuard) wrap(h http.Handler) http.Handler {
	return metrics.MutationGuard(h, g.token, g.open, g.reason)
}

// announce logs how mutations are treated (never the token).
func (g adminGuard) announce(log *slog.Logger) {
	switch {
	case g.token != "":
		log.Info("admin mutations need the bearer token of admin_token_file")
	case !g.open:
		log.Warn("admin mutations refused: " + g.reason)
	}
}

// engineRegisterer returns reg with the label shard = addr on every
// series: the engine's own figures (probe, poll, verdict) carry the
// engine's address in shard, the one label that names a backend in every
// series, so that several proxies in front of one engine export series
// that max by (shard) deduplicates (configs/prometheus/), and that the
// shards of a routed proxy each have theirs.
func engineRegisterer(reg prometheus.Registerer, addr string) prometheus.Registerer {
	return prometheus.WrapRegistererWith(prometheus.Labels{"shard": addr}, reg)
}

// newEngineView returns the view of the engine at addr: its PING probe
// (cfg.ProbeInterval, nil when 0) and engine poller (cfg.EnginePoll, nil
// when 0), each logging in with the side connections' credentials, their
// metrics registered on reg under shard = addr (engineRegisterer), names
// being the command labels. Nothing runs until start. Registering fails
// only for an addr whose metrics are registered already.
func newEngineView(cfg configs.Config, upTLS *tlsconf.Dialer, addr string, names []string, reg prometheus.Registerer, log *slog.Logger) (*verdict.View, error) {
	v := &verdict.View{Addr: addr}
	if i := slices.Index(cfg.Shards, addr); i >= 0 && i < len(cfg.ShardZones) {
		v.Zone = cfg.ShardZones[i]
	}
	engReg := engineRegisterer(reg, addr)
	if cfg.ProbeInterval > 0 {
		v.Probe = engstats.NewProbe(addr, time.Duration(cfg.ProbeInterval), log)
		v.Probe.SetLogin(cfg.UpstreamUser, cfg.UpstreamPassword)
		v.Probe.SetTLS(upTLS)
		if err := v.Probe.Register(engReg); err != nil {
			return nil, fmt.Errorf("register probe metrics of %s: %w", addr, err)
		}
	}
	if cfg.EnginePoll > 0 {
		v.Poller = engstats.NewPoller(addr, time.Duration(cfg.EnginePoll), names, log)
		v.Poller.SetLogin(cfg.UpstreamUser, cfg.UpstreamPassword)
		v.Poller.SetTLS(upTLS)
		if err := v.Poller.Register(engReg); err != nil {
			return nil, fmt.Errorf("register engine metrics of %s: %w", addr, err)
		}
	}
	return v, nil
}

// startView runs v's probe and poller on goroutines of wg until ctx is
// done (nothing for a nil v).
func startView(v *verdict.View, ctx context.Context, wg *sync.WaitGroup) {
	if v == nil {
		return
	}
	if v.Probe != nil {
		wg.Go(func() { v.Probe.Run(ctx) })
	}
	if v.Poller != nil {
		wg.Go(func() { v.Poller.Run(ctx) })
	}
}

// newHeat returns the key and slot heat of cfg (heat_sample) with key names kn,
// with the slow log's threshold: slow requests always enter the top keys.
func newHeat(cfg configs.Config, loops int, names []string, kn heat.Names) *heat.Set {
	slow := time.Duration(cfg.SlowlogThreshold)
	if slow < 0 {
		slow = 0 // slow log off: sampling only
	}
	return heat.NewSet(loops, heat.Config{Sample: cfg.HeatSample, SlowThreshold: slow, Names: kn, Commands: names})
}

// metricsExport returns the /metrics cardinality budget of cfg
// (metrics_phases, metrics_commands).
func metricsExport(cfg configs.Config) (metrics.Export, error) {
	ex := metrics.Export{MaxCommands: cfg.MetricsCommands}
	for _, name := range cfg.MetricsPhases {
		p, ok := metrics.ParsePhase(name)
		if !ok {
			return ex, fmt.Errorf("metrics_phases: unknown phase %q", name)
		}
		ex.Phases = append(ex.Phases, p)
	}
	return ex, nil
}

// proxyLimit maps a configured limit, where 0 means unlimited, to
// proxy.Config's convention, where 0 means the default and -1 unlimited.
// Values beyond int saturate.
func proxyLimit(v int64) int {
	if v == 0 {
		return -1
	}
	return int(min(v, int64(^uint(0)>>1)))
}

// stop stops the proxy (no new clients, pending replies drained within the
// proxy's drain timeout), then the background tasks (probe, poller,
// verdict), the HdrHistogram log (which writes its last interval) and the
// admin server, all bounded by ctx. It returns their errors, joined.
func (st *stack) stop(ctx context.Context) error {
	var errs []error
	if err := st.proxy.Stop(ctx); err != nil {
		errs = append(errs, fmt.Errorf("stop proxy: %w", err))
	}
	st.cancelBg()
	done := make(chan struct{})
	go func() { st.bg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		errs = append(errs, fmt.Errorf("stop probe, poller and verdict: %w", ctx.Err()))
	}
	if st.stopHDRLog != nil {
		if err := st.stopHDRLog(); err != nil {
			errs = append(errs, fmt.Errorf("stop hdr log: %w", err))
		}
	}
	if st.admin != nil {
		if err := st.admin.Shutdown(ctx); err != nil {
			errs = append(errs, fmt.Errorf("stop admin server: %w", err))
			_ = st.admin.Close()
		}
	}
	return errors.Join(errs...)
}

// writeTables writes the latency table, the verdict and the "where the time
// went" table to w.
func (st *stack) writeTables(w io.Writer) error {
	if err := st.set.WriteTable(w); err != nil {
		return err
	}
	return st.analyzer.writeVerdict(w)
}

// injectCollector exports respmeter_inject_total{rule,effect}: the
// requests each fault injection rule in force touched (--inject, or added
// on /inject), and respmeter_inject_active{rule}: 1 while the rule's
// window (at:, for:) holds, else 0; both read at the scrape.
type injectCollector struct{ p *proxy.Proxy }

var injectDesc = prometheus.NewDesc("respmeter_inject_total",
	"Requests a fault injection rule in force (--inject, /inject) touched: delayed, answered with its error, held, reset.",
	[]string{"rule", "effect"}, nil)

var injectActiveDesc = prometheus.NewDesc("respmeter_inject_active",
	"1 while a fault injection rule in force applies (its window, at: and for:, holds the time now), else 0.",
	[]string{"rule"}, nil)

func (c injectCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- injectDesc
	ch <- injectActiveDesc
}

func (c injectCollector) Collect(ch chan<- prometheus.Metric) {
	in := c.p.Injection()
	if in == nil {
		return
	}
	for _, r := range in.Counts() {
		ch <- prometheus.MustNewConstMetric(injectDesc, prometheus.CounterValue, float64(r.Count), r.Rule, r.Effect)
		active := 0.0
		if r.Active {
			active = 1
		}
		ch <- prometheus.MustNewConstMetric(injectActiveDesc, prometheus.GaugeValue, active, r.Rule)
	}
}

// engineSlowlog returns what /slowlog?engine=1 reads: the command log
// (COMMANDLOG or SLOWLOG) of each engine addrs names, all at once, each
// entry labelled and keyed by respmeter's command table cmds.
func engineSlowlog(cfg configs.Config, upTLS *tlsconf.Dialer, cmds *routing.Resolver, addrs func() []string,
	show func([]byte, bool) (string, bool)) func(context.Context) []slowlog.EngineLog {
	r := slowlog.EngineReader{
		Login: respconn.Options{User: cfg.UpstreamUser, Password: cfg.UpstreamPassword, TLS: upTLS},
		Count: cfg.SlowlogLen, Timeout: time.Duration(cfg.DialTimeout),
		Label: func(args [][]byte) (string, int) {
			var c routing.Call
			cmds.Classify(&c, cmds.Lookup(args[0]), args)
			return c.Name(), c.KeyPos()
		},
		Show: show,
	}
	return func(ctx context.Context) []slowlog.EngineLog {
		as := addrs()
		out := make([]slowlog.EngineLog, len(as))
		var wg sync.WaitGroup
		for i, a := range as {
			wg.Go(func() { out[i] = r.Read(ctx, a) })
		}
		wg.Wait()
		return out
	}
}
