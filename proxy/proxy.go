package proxy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/panjf2000/gnet/v2"

	"github.com/respmeter/respmeter/internal/resp"
	"github.com/respmeter/respmeter/internal/respconn"
	"github.com/respmeter/respmeter/routing"
	"github.com/respmeter/respmeter/routing/command"
)

// Errors returned by New, Start and Stop.
var (
	// ErrConfig wraps every configuration problem found by New.
	ErrConfig = errors.New("proxy: bad config")
	// ErrNotStarted is returned by Stop before Start.
	ErrNotStarted = errors.New("proxy: not started")
)

// Proxy is respmeter's measuring proxy, running or ready to run: it
// forwards every client's commands to the engines Config names, in the
// shape Config.Route picks, and times each. Create it with New, then Start
// it; Stop ends it. Its methods may be called from any
// goroutine.
type Proxy struct {
	gnet.BuiltinEventEngine

	cfg    Config
	log    *slog.Logger
	base   time.Time // zero of the monotonic clock the loops use
	dialer net.Dialer

	eng     gnet.Engine
	addr    string
	booted  chan struct{}
	runDone chan error

	mu    sync.Mutex
	loops map[gnet.EventLoop]*loop
	// unknownSubs are the unknown CLIENT subcommands logged so far (under
	// mu; see unknownSubcommand).
	unknownSubs map[string]bool

	// shape is cfg.Route's (fixedShape, pinnedShape, slotShape or
	// facadeShape); shared is cfg.UpstreamMode == UpstreamShared.
	shape  shape
	facade *facade // RouteFacade's virtual nodes (facade.go); nil otherwise
	shared bool
	inject atomic.Pointer[Injection] // the rules in force (inject.go); nil: none
	injMu  sync.Mutex                // serialises changes of inject (AddInjection)
	clock  injClock                  // fires injected delays (injclock.go)
	// annc is the layout the facade announces while a cluster event keeps
	// an old one announced (injtopo.go; nil: the routing map); topoMu
	// serialises the events.
	annc   atomic.Pointer[announce]
	topoMu sync.Mutex
	conns  atomic.Uint64 // client connections accepted (client.injConn)
	// keepNames: clients' names (CLIENT SETNAME, HELLO SETNAME) are kept,
	// for the slow log or for rules scoped by client name.
	keepNames bool

	// stallAfter is how long a shared connection may go without a reply
	// byte for its oldest request before it is taken out of use (loop.checkStalls);
	// 0 turns the check off (tests that drive one pass of a loop by hand).
	stallAfter time.Duration

	router     *router
	resolver   *routing.Resolver // the effective command table (set by Start; see Config.Commands)
	dialect    resp.Dialect      // the engine's request-parsing rules (set by Start: probeDialect)
	sharedNext atomic.Uint64

	// authRequired: some engine refuses connections without a password,
	// so no client without AUTH uses shared connections (auth.go).
	authRequired atomic.Bool
	authStop     context.CancelFunc
	authDone     chan struct{}

	// authNow asks for a check at once (a new shared client waits for it);
	// authStarted numbers the checks started, authPassed is the number of
	// the latest one completed, authWaiters counts the clients paused for
	// one (auth.go).
	authNow     chan struct{}
	authStarted atomic.Uint64
	authPassed  atomic.Uint64
	authWaiters atomic.Int64
	authConns   map[string]*respconn.Conn // by engine address (auth.go)
	authSilent  map[string]time.Time      // engines that did not answer an auth check, left out until then (auth.go)

	draining atomic.Bool
	closing  atomic.Bool  // Stop is closing every connection (drain over)
	clients  atomic.Int64 // open client connections
	lingers  sync.WaitGroup

	// capture is the running capture, nil when none (capture.go): the
	// loops load it once per client read.
	capture captureState

	tls *tlsServer // the client-facing TLS listener, nil without one (tls.go)
	// tlsNodes are the facade's virtual nodes' TLS listeners under
	// Config.FacadeTLS, in node order.
	tlsNodes []*tlsServer
	// offDir holds gnet's placeholder listener when cfg.Listen is ""
	// (run); removed by Stop.
	offDir string
	// loopsUp is closed by the first OnTick, once gnet has registered
	// every event loop; only with a TLS listener (tls.go).
	loopsUp     chan struct{}
	loopsUpOnce sync.Once
}

var _ gnet.EventHandler = (*Proxy)(nil)

// New checks cfg and returns a Proxy ready to Start.
func New(cfg Config) (*Proxy, error) {
	var errs []error
	switch {
	case cfg.Listen == "" && cfg.TLSListen == "":
		errs = append(errs, errors.New("no listener: give Listen, TLSListen or both"))
	case cfg.Listen == "" && cfg.Route == RouteFacade:
		errs = append(errs, errors.New("RouteFacade needs Listen: its slot-routed endpoint serves plaintext"))
	case cfg.Listen != "":
		if _, _, err := net.SplitHostPort(cfg.Listen); err != nil {
			errs = append(errs, fmt.Errorf("listen %q: %v", cfg.Listen, err))
		}
	}
	if cfg.TLSListen != "" {
		if _, _, err := net.SplitHostPort(cfg.TLSListen); err != nil {
			errs = append(errs, fmt.Errorf("TLS listen %q: %v", cfg.TLSListen, err))
		}
		if cfg.TLS == nil {
			errs = append(errs, errors.New("TLS listen needs a TLS configuration"))
		}
	}
	var topo *routing.Topology
	switch cfg.Route {
	case "", RouteNone:
		cfg.Route = RouteNone
		if _, _, err := net.SplitHostPort(cfg.Upstream); err != nil {
			errs = append(errs, fmt.Errorf("upstream %q: %v", cfg.Upstream, err))
		}
	case RouteSlots, RoutePinned, RouteFacade:
		switch {
		case len(cfg.Shards) > 0 && cfg.Cluster != "":
			errs = append(errs, fmt.Errorf("route %s: give shards or cluster, not both", cfg.Route))
		case len(cfg.Shards) > 0:
			for _, a := range cfg.Shards {
				if _, _, err := net.SplitHostPort(a); err != nil {
					errs = append(errs, fmt.Errorf("shard %q: %v", a, err))
				}
			}
			t, err := routing.EvenSplit(cfg.Shards)
			if err != nil {
				errs = append(errs, err)
			}
			switch {
			case len(cfg.ShardZones) == 0:
			case len(cfg.ShardZones) != len(cfg.Shards):
				errs = append(errs, fmt.Errorf("shard zones: %d for %d shards", len(cfg.ShardZones), len(cfg.Shards)))
			case t != nil:
				t.Zones = make(map[string]string, len(cfg.Shards))
				for i, a := range cfg.Shards {
					t.Zones[a] = cfg.ShardZones[i]
				}
			}
			topo = t
		case cfg.Cluster != "":
			if _, _, err := net.SplitHostPort(cfg.Cluster); err != nil {
				errs = append(errs, fmt.Errorf("cluster %q: %v", cfg.Cluster, err))
			}
		default:
			errs = append(errs, fmt.Errorf("route %s needs shards or a cluster seed", cfg.Route))
		}
	default:
		errs = append(errs, fmt.Errorf("route %q: want %s, %s, %s or %s", cfg.Route, RouteNone, RouteSlots, RoutePinned, RouteFacade))
	}
	errs = append(errs, checkFacade(cfg)...)
	switch cfg.UpstreamMode {
	case "":
		cfg.UpstreamMode = UpstreamPrivate
	case UpstreamPrivate:
	case UpstreamShared:
		if cfg.Route == RoutePinned {
			errs = append(errs, fmt.Errorf("upstream mode shared does not apply to route pinned"))
		}
	default:
		errs = append(errs, fmt.Errorf("upstream mode %q: want %s or %s", cfg.UpstreamMode, UpstreamPrivate, UpstreamShared))
	}
	if cfg.UpstreamConns < 0 {
		errs = append(errs, fmt.Errorf("upstream conns must be >= 0, got %d", cfg.UpstreamConns))
	}
	if cfg.UpstreamConns == 0 {
		cfg.UpstreamConns = 1
	}
	switch cfg.PinBy {
	case "":
		cfg.PinBy = PinConnection
	case PinConnection, PinFirstKey:
	default:
		errs = append(errs, fmt.Errorf("pin-by %q: want %s or %s", cfg.PinBy, PinConnection, PinFirstKey))
	}
	if cfg.Loops < 0 {
		errs = append(errs, fmt.Errorf("loops must be >= 0, got %d", cfg.Loops))
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("%w: %w", ErrConfig, errors.Join(errs...))
	}
	if cfg.DrainTimeout <= 0 {
		cfg.DrainTimeout = 5 * time.Second
	}
	if cfg.DialTimeout <= 0 {
		cfg.DialTimeout = 2 * time.Second
	}
	if cfg.ClientOutputLimit == 0 {
		cfg.ClientOutputLimit = DefaultClientOutputLimit
	}
	if cfg.ClientQueryLimit == 0 {
		cfg.ClientQueryLimit = DefaultClientQueryLimit
	}
	if cfg.TopologyRefresh <= 0 {
		cfg.TopologyRefresh = 30 * time.Second
	}
	if cfg.AuthCheck <= 0 {
		cfg.AuthCheck = time.Second
	}
	if cfg.TCPInfoInterval == 0 {
		cfg.TCPInfoInterval = time.Second
	}
	if cfg.SlowLog != nil && !cfg.SlowLog.Enabled() {
		cfg.SlowLog = nil
	}
	if cfg.MaxClients == 0 {
		cfg.MaxClients = DefaultMaxClients
	}
	if !cfg.Measure {
		cfg.Metrics = nil
	}
	lg := cfg.Logger
	if lg == nil {
		lg = slog.New(slog.DiscardHandler)
	}
	p := &Proxy{
		cfg:     cfg,
		log:     lg.With("component", "proxy"),
		base:    time.Now(),
		dialer:  net.Dialer{Timeout: cfg.DialTimeout},
		booted:  make(chan struct{}),
		runDone: make(chan error, 1),
		loops:   make(map[gnet.EventLoop]*loop),
	}
	p.shape = fixedShape{}
	switch cfg.Route {
	case RouteSlots:
		p.shape = slotShape{}
	case RoutePinned:
		p.shape = pinnedShape{firstKey: cfg.PinBy == PinFirstKey}
	case RouteFacade:
		// The plain endpoint routes by slot; virtual nodes' clients are
		// fixed to their shard (client.fixed).
		p.shape, p.facade = facadeShape{}, newFacade(cfg.FacadeListen, cfg.FacadeTLS)
	}
	p.shared = cfg.UpstreamMode == UpstreamShared
	if cfg.Inject != nil {
		cfg.Inject.apply(p.base, p.now()) // windows count from here
		p.inject.Store(cfg.Inject)
	}
	p.keepNames = cfg.SlowLog != nil || (cfg.Inject != nil && cfg.Inject.names)
	p.clock.now = p.now
	p.stallAfter = stallAfter
	p.router = &router{
		cluster: cfg.Cluster != "", log: p.log, metrics: cfg.Metrics, dialTimeout: cfg.DialTimeout, login: cfg.login(),
		nudge: make(chan struct{}, 1), done: make(chan struct{}),
	}
	if p.facade != nil {
		p.router.refreshed = func() { p.facade.warnUnnoded(p) }
	}
	if topo == nil && cfg.Route == RouteNone {
		topo, _ = routing.EvenSplit([]string{cfg.Upstream}) // one shard: the upstream
	}
	if topo != nil {
		p.router.view.Store(newTopoView(topo))
	}
	if cfg.Inject != nil {
		if err := p.checkRules(cfg.Inject); err != nil {
			return nil, fmt.Errorf("%w: inject: %w", ErrConfig, err)
		}
		p.armTopo(cfg.Inject)
	}
	return p, nil
}

// Start listens on cfg.Listen and serves in the background. It returns once
// the listener is up (or with the error that prevented it).
func (p *Proxy) Start() error {
	p.resolver = p.cfg.Commands
	if p.resolver == nil {
		p.resolver = FetchCommands(p.cfg, p.log)
	}
	if p.cfg.Metrics != nil {
		p.cfg.Metrics.ExcludeFromTotals(ExcludedFromTotals(p.resolver)...)
	}
	p.dialect = probeDialect(p.cfg, p.log)
	if p.facade != nil {
		p.facade.shardIDs = engineShardIDs(p.cfg)
	}
	if p.cfg.Cluster != "" {
		ctx, cancel := context.WithTimeout(context.Background(), 4*p.cfg.DialTimeout)
		t, err := routing.FetchCluster(ctx, p.cfg.Cluster, p.cfg.DialTimeout, p.cfg.login())
		cancel()
		if err != nil {
			return fmt.Errorf("proxy: cluster %s: %w", p.cfg.Cluster, err)
		}
		p.router.view.Store(newTopoView(t))
		rctx, stop := context.WithCancel(context.Background())
		p.router.stop = stop
		go p.router.run(rctx, p.cfg.Cluster, p.cfg.TopologyRefresh)
	}
	if p.shared {
		ctx, stop := context.WithCancel(context.Background())
		p.authStop, p.authDone = stop, make(chan struct{})
		p.authNow = make(chan struct{}, 1)
		p.setAuthRequired(p.authCheck(ctx))
		go p.watchAuth(ctx, p.cfg.AuthCheck)
	}
	opts := []gnet.Option{
		gnet.WithMulticore(true),
		gnet.WithReusePort(false),
		gnet.WithReuseAddr(true), // restart on the same port despite TIME-WAIT sockets
		gnet.WithTCPNoDelay(gnet.TCPNoDelay),
		gnet.WithLogger(gnetLogger{p.log}),
	}
	if p.cfg.Loops > 0 {
		opts = append(opts, gnet.WithNumEventLoop(p.cfg.Loops))
	}
	if p.servesTLS() {
		// TLS clients are handed to a loop from their own goroutines
		// (Engine.Register): the round-robin balancer is not safe for that,
		// and the loops must be registered first (OnTick, tls.go).
		opts = append(opts, gnet.WithLoadBalancing(gnet.LeastConnections), gnet.WithTicker(true))
		p.loopsUp = make(chan struct{})
	}
	var listen string
	var nodes []string
	if p.facade != nil && p.facade.tls {
		if err := p.listenTLSNodes(); err != nil {
			if p.authStop != nil {
				p.authStop()
				<-p.authDone
			}
			return err
		}
	}
	if p.facade != nil {
		listen, nodes = p.cfg.Listen, p.facade.addrs()
	}
	err := p.run(opts)
	// A port picked for a "host:0" address (facade.pickPorts) may be taken
	// by another process before gnet binds it: pick again, twice at most.
	for try := 1; try < 3 && p.facade != nil && p.facade.picked && errors.Is(err, syscall.EADDRINUSE); try++ {
		p.log.Debug("a picked port was taken before the bind; picking again", "err", err)
		p.cfg.Listen = listen
		p.facade.setAddrs(nodes)
		err = p.run(opts)
	}
	if err != nil {
		p.runDone <- err
		p.closeTLSNodes()
		p.removeOffDir()
		if p.authStop != nil {
			p.authStop()
			<-p.authDone
		}
		addr := p.cfg.Listen
		if p.facade != nil {
			addr = busyAddr(p.facade.listeners(p.cfg.Listen), addr)
		}
		return fmt.Errorf("proxy: listen %s: %w", addr, err)
	}
	if p.servesTLS() {
		if err := p.startTLS(); err != nil {
			_ = p.Stop(context.Background())
			return fmt.Errorf("proxy: TLS listen %s: %w", p.cfg.TLSListen, err)
		}
	}
	return nil
}

// run starts the gnet engine in the background on cfg.Listen (and the
// facade's nodes, picking their ports first) and waits until it has
// booted (nil) or stopped (its error).
func (p *Proxy) run(opts []gnet.Option) error {
	if p.facade != nil {
		if err := p.facade.pickPorts(&p.cfg.Listen); err != nil {
			return err
		}
	}
	addr := "tcp://" + p.cfg.Listen
	if p.cfg.Listen == "" {
		// gnet v2.9.7 runs no engine without a listener (Engine.Validate
		// refuses one), so with no plaintext listener it listens on a
		// Unix socket in a directory of its own (0700: this user only),
		// and OnOpen closes whatever connects there.
		dir, err := os.MkdirTemp("", "respmeter-tls-only-")
		if err != nil {
			return err
		}
		p.offDir = dir
		addr = "unix://" + filepath.Join(dir, "closed.sock")
	}
	go func() {
		if p.facade != nil {
			p.runDone <- gnet.Rotate(p, p.facade.listeners(p.cfg.Listen), opts...)
			return
		}
		p.runDone <- gnet.Run(p, addr, opts...)
	}()
	select {
	case <-p.booted:
		return nil
	case err := <-p.runDone:
		if err == nil {
			err = errors.New("proxy: engine stopped during start")
		}
		return err
	}
}

// noauthHint is logged with an engine's NOAUTH refusal of respmeter's own
// connections: clients authenticate themselves, respmeter's side
// connections need the password in its configuration.
const noauthHint = "the engine wants a password: set upstream_password in the config file or RESPMETER_UPSTREAM_PASSWORD (and upstream_user for an ACL user)"

// FetchCommands reads the engine's COMMAND INFO (command.FetchInfo) and
// returns the effective command table built from it (routing.NewResolver:
// the engine's entries decide arity, flags, key specs and tips; commands
// only the engine knows get metric IDs and labels up to
// routing.MaxEngineLabels). The engine is cfg.Upstream, or under
// RouteSlots and RoutePinned the cluster seed or the first shard. The
// exchange is bounded by twice cfg.DialTimeout (4 s when 0). With
// several --shards, or a --cluster of several masters, each shard's or
// master's table is read too and the tables are joined (command.Union): the
// first shard's (the seed's) entries route the commands it knows, and a
// command or subcommand only another engine knows (a newer engine beside
// an older one, during an upgrade) is routed by that engine's own entry.
// The shards whose table differs are named in an info line.
// When the
// engine cannot answer (down, NOAUTH, no COMMAND) it logs a warning to log
// (nil: discarded) and returns the built-in table (an empty Resolver).
func FetchCommands(cfg Config, log *slog.Logger) *routing.Resolver {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	addr, timeout := tableEngine(cfg)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	infos, err := command.FetchInfo(ctx, addr, timeout, cfg.login())
	if err != nil {
		attrs := []any{"engine", addr, "err", err}
		if strings.Contains(err.Error(), "NOAUTH") {
			attrs = append(attrs, "hint", noauthHint)
		}
		log.Warn("engine command table not read; the built-in one (redis-server "+command.ServerVersion+") is used", attrs...)
		return routing.NewResolver(nil)
	}
	if others, differ := otherTables(cfg, infos, timeout); len(differ) > 0 {
		infos = command.Union(append([]map[string]*command.Info{infos}, others...)...)
		log.Info("shards whose engines report another command table than the first shard's (the seed's): "+
			"the commands only they know are routed by their own tables", "engine", addr, "shards", strings.Join(differ, ","))
	}
	r := routing.NewResolver(infos)
	if names := r.Names(); len(names) > 0 {
		log.Info("engine commands the built-in table lacks, taken from the engine", "engine", addr,
			"commands", len(names), "labelled", r.NumIDs()-command.NumIDs())
	}
	return r
}

// otherTables reads the command table of every shard after the first
// (RouteSlots, RoutePinned and RouteFacade over cfg.Shards) or of every
// master of the cluster other than the seed (cfg.Cluster: the masters of the
// seed's CLUSTER SHARDS or SLOTS, routing.FetchCluster) and returns the
// tables that differ from first, the first shard's or the seed's (another
// engine or version, or a rename-command), and those engines' addresses,
// in shard order. Each read is bounded by timeout; an engine that does not
// answer is left out (its connections will say why), and so is a cluster
// whose map cannot be read.
func otherTables(cfg Config, first map[string]*command.Info, timeout time.Duration) (tables []map[string]*command.Info, differ []string) {
	if cfg.Route == "" || cfg.Route == RouteNone {
		return nil, nil
	}
	addrs := cfg.Shards
	if cfg.Cluster != "" {
		top, err := routing.FetchCluster(context.Background(), cfg.Cluster, timeout, cfg.login())
		if err != nil {
			return nil, nil
		}
		addrs = slices.DeleteFunc(slices.Clone(top.Addrs), func(a string) bool { return a == cfg.Cluster })
	} else if len(addrs) > 0 {
		addrs = addrs[1:]
	}
	for _, a := range addrs {
		if infos, err := command.FetchInfo(context.Background(), a, timeout, cfg.login()); err == nil && !reflect.DeepEqual(infos, first) {
			tables = append(tables, infos)
			differ = append(differ, a)
		}
	}
	return tables, differ
}

// unknownSubcommand logs, once per name and for at most 64 names, a CLIENT
// subcommand that the engine's command table does not know: under
// --route slots it goes to the home shard only, and if it sets connection
// state, the client's other shard connections do not get it.
func (p *Proxy) unknownSubcommand(sub []byte) {
	name := string(bytes.ToLower(sub))
	p.mu.Lock()
	_, seen := p.unknownSubs[name]
	if !seen && len(p.unknownSubs) < 64 {
		if p.unknownSubs == nil {
			p.unknownSubs = map[string]bool{}
		}
		p.unknownSubs[name] = true
	} else {
		seen = true
	}
	p.mu.Unlock()
	if !seen {
		p.log.Warn("CLIENT subcommand unknown to the engine's command table: under --route slots it goes to the home shard only; "+
			"if it sets connection state, the client's other shard connections do not get it (--route pinned keeps a client on one connection)",
			"subcommand", name)
	}
}

// removeOffDir removes the placeholder listener's directory (run), if any.
func (p *Proxy) removeOffDir() {
	if p.offDir != "" {
		_ = os.RemoveAll(p.offDir)
		p.offDir = ""
	}
}

// Addr returns the address the proxy listens on, with the port it chose
// when cfg.Listen had port 0. Empty before Start and without a plaintext
// listener (cfg.Listen "").
func (p *Proxy) Addr() string {
	select {
	case <-p.booted:
		return p.addr
	default:
		return ""
	}
}

// ShardAddrs returns the engines the proxy routes to, in shard order: the
// upstream without routing, the --shards under --route slots or pinned, or
// the masters of the latest --cluster shard map (which a topology refresh
// may change). The slice is new: the caller owns it. Safe for concurrent
// use; nil before the proxy has a map.
func (p *Proxy) ShardAddrs() []string {
	v := p.router.load()
	if v == nil {
		return nil
	}
	return slices.Clone(v.t.Addrs)
}

// waitIdle waits until no request is in flight, for at most d or until ctx
// ends; it reports whether none is.
func (p *Proxy) waitIdle(ctx context.Context, d time.Duration) bool {
	return waitUntil(ctx, d, func() bool { return p.InFlight() == 0 })
}

// waitUntil polls done every 5 ms until it holds, for at most d or until
// ctx ends; it reports whether done holds.
func waitUntil(ctx context.Context, d time.Duration, done func() bool) bool {
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !done() {
		select {
		case <-ctx.Done():
			return false
		case <-deadline.C:
			return done()
		case <-tick.C:
		}
	}
	return true
}

// Stop stops accepting (new connections are closed at once), waits until
// every pending request has been answered or cfg.DrainTimeout (or ctx)
// expires, closes each client connection once the replies queued for it are
// written (within what is left of cfg.DrainTimeout, at least 200 ms), then
// closes all other connections and the event loops.
func (p *Proxy) Stop(ctx context.Context) error {
	select {
	case <-p.booted:
	default:
		return ErrNotStarted
	}
	start := time.Now()
	p.draining.Store(true)
	if in := p.inject.Load(); in != nil {
		disarmTopo(in.rules) // no cluster event after Stop
	}
	p.stopTLS()
	if !p.waitIdle(ctx, p.cfg.DrainTimeout) && ctx.Err() == nil {
		p.log.Warn("drain timeout; closing with requests pending", "pending", p.InFlight())
	}
	// Requests still pending get an error that says so: each loop closes
	// its upstream connections first (their clients answer what is
	// pending, then close their clients), and gets a moment to do it.
	p.closing.Store(true)
	if p.InFlight() > 0 {
		p.mu.Lock()
		for _, l := range p.loops {
			if l.el == nil {
				continue
			}
			_ = l.el.Execute(ctx, gnet.RunnableFunc(func(context.Context) error {
				for c := range l.ups {
					_ = c.Close()
				}
				return nil
			}))
		}
		p.mu.Unlock()
		p.waitIdle(ctx, 200*time.Millisecond)
	}
	// Replies already queued for clients are written before their
	// connections close (gnet's own close would drop what the socket does
	// not take at once), within what is left of the drain timeout.
	p.closeClients(ctx, max(p.cfg.DrainTimeout-time.Since(start), minFlushWait))
	// gnet's Engine.Stop polls for the shutdown every 500 ms; Run returns
	// as soon as the loops are down, so wait for that instead.
	go func() { _ = p.eng.Stop(ctx) }()
	var err error
	select {
	case err = <-p.runDone:
		p.runDone <- err
	case <-ctx.Done():
		err = ctx.Err()
	}
	p.lingers.Wait()
	p.removeOffDir()
	p.clock.close()
	if p.router.stop != nil {
		p.router.stop()
		<-p.router.done
	}
	if p.authStop != nil {
		p.authStop()
		<-p.authDone
	}
	if c := p.capture.cur.Load(); c != nil {
		if _, cerr := p.stopCapture(c); cerr != nil {
			err = errors.Join(err, cerr)
		}
	}
	return err
}

// InFlight returns the number of requests sent by clients and not yet
// answered, over all loops (for Little's law: L = λW).
func (p *Proxy) InFlight() int64 { return p.sumLoops(func(l *loop) int64 { return l.inflight.Load() }) }

// InFlightArea returns the area under InFlight over time since the proxy
// was made, in request·nanoseconds (metrics.InFlight.Area; wrapping, so
// only differences mean anything): the difference of two reads divided by
// the time between them is the exact mean in flight, Little's law's L.
func (p *Proxy) InFlightArea() int64 {
	return p.sumLoops(func(l *loop) int64 { return l.inflight.Area() })
}

// LoopLag hands each event loop that has connections a task (gnet
// EventLoop.Execute) that calls record with how long it waited, from being
// handed over to being run, and returns how many it handed. The wait is
// what anything that becomes ready for a loop waits while the loop is busy
// with other work or its thread waits for a CPU: the time a request or a
// reply sits unread in its socket, which the proxy's own clock reads, taken
// when it reads, book as think time or path. record runs on the loops'
// goroutines, once per task, possibly after LoopLag returns; it must be
// safe for that. LoopLag does not wait for the tasks.
func (p *Proxy) LoopLag(record func(time.Duration)) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for el := range p.loops {
		if el == nil {
			continue
		}
		t0 := p.now()
		if el.Execute(context.Background(), gnet.RunnableFunc(func(context.Context) error {
			record(time.Duration(p.now() - t0))
			return nil
		})) == nil {
			n++
		}
	}
	return n
}

// sumLoops returns the sum of f over the loops (f reads a loop's atomics).
func (p *Proxy) sumLoops(f func(*loop) int64) int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	var n int64
	for _, l := range p.loops {
		n += f(l)
	}
	return n
}

// OnBoot records the engine and the bound address.
func (p *Proxy) OnBoot(eng gnet.Engine) gnet.Action {
	p.eng = eng
	if p.cfg.Listen != "" {
		p.addr = listenerAddr(eng, p.cfg.Listen)
	}
	if p.facade != nil {
		p.facade.boot(eng)
		p.facade.warnUnnoded(p)
	}
	close(p.booted)
	return gnet.None
}

// now reads the monotonic clock, in nanoseconds since the proxy was made.
func (p *Proxy) now() int64 { return int64(time.Since(p.base)) }

// OnOpen starts a client (dialing its engine connection) or completes a
// link's dial.
func (p *Proxy) OnOpen(c gnet.Conn) ([]byte, gnet.Action) {
	switch u := c.Context().(type) {
	case *link:
		p.loopFor(c.EventLoop()).ups[c] = struct{}{}
		if u.tio != nil {
			// Records that came with the handshake's end are decrypted
			// now, not when more bytes arrive.
			_ = c.Wake(nil)
		}
		return nil, u.opened(c)
	}
	if p.draining.Load() {
		return nil, gnet.Close
	}
	if _, tls := c.Context().(tlsPeer); !tls && p.cfg.Listen == "" {
		return nil, gnet.Close // accepted on the placeholder of run: no plaintext clients
	}
	if n := p.clients.Add(1); p.cfg.MaxClients > 0 && n > int64(p.cfg.MaxClients) {
		p.clients.Add(-1)
		if m := p.cfg.Metrics; m != nil {
			m.ClientRejected()
		}
		msg := []byte("-ERR max number of clients reached\r\n")
		if tp, ok := c.Context().(tlsPeer); ok {
			msg = tp.tio.encrypt(msg)
		}
		return msg, gnet.Close
	}
	if m := p.cfg.Metrics; m != nil {
		m.ClientOpened()
	}
	l := p.loopFor(c.EventLoop())
	l.clients[c] = struct{}{}
	s := newClient(p, c, l)
	s.injConn = p.conns.Add(1)
	if p.facade != nil {
		p.facade.attach(s, c)
	}
	c.SetContext(s)
	s.open()
	if s.tio != nil {
		// A request that came with the handshake's end is already in
		// crypto/tls's buffer: no more bytes may arrive to start its read.
		_ = c.Wake(nil)
	}
	return nil, gnet.None
}

// dialOn connects ln to its engine off the loop, then hands the socket to
// event loop el (gnet Enroll) with ln as its context, so its callbacks run
// on the same goroutine as its client's. A TLS link's record layer is set
// before the Enroll, and the loop uses it from the link's OnOpen on. A
// failure comes back to the loop through Execute, as ln.dialFailed(err).
func (p *Proxy) dialOn(el gnet.EventLoop, ln *link) {
	fail := func(err error) {
		_ = el.Execute(context.Background(), gnet.RunnableFunc(func(context.Context) error {
			ln.dialFailed(err)
			return nil
		}))
	}
	conn, tio, err := p.dialUpstream(ln.addr)
	if err != nil {
		fail(err)
		return
	}
	ln.tio = tio
	ch, err := el.Enroll(gnet.NewContext(context.Background(), ln), conn)
	if err != nil {
		_ = conn.Close()
		fail(err)
		return
	}
	if r := <-ch; r.Err != nil {
		fail(r.Err)
	}
}

// OnTraffic dispatches to a client or one of its links.
func (p *Proxy) OnTraffic(c gnet.Conn) gnet.Action {
	switch x := c.Context().(type) {
	case *client:
		x.clientTraffic(c)
	case *link:
		x.traffic(c)
	default:
		_, _ = c.Discard(-1)
	}
	return gnet.None
}

// OnClose ends the client or link that closed.
func (p *Proxy) OnClose(c gnet.Conn, err error) gnet.Action {
	switch x := c.Context().(type) {
	case *client:
		x.l.clientGone(c)
		x.clientClosed(c, err)
	case *link:
		delete(p.loopFor(c.EventLoop()).ups, c)
		if err != nil {
			x.drain(c)
		}
		x.closed(err)
	}
	return gnet.None
}

// ExcludedFromTotals lists the IDs of the commands of the table r (nil:
// the built-in one) whose durations measure waiting for something else,
// not the engine's service: commands the engine may block (COMMAND INFO
// flag "blocking": BLPOP, BRPOP, BLMOVE, BZPOPMIN, XREAD, XREADGROUP,
// WAITAOF, ..., and WAIT; see routing.Resolver.Blocks), pub/sub commands
// (flag "pubsub"), MONITOR, SYNC and PSYNC. They are recorded under their
// own names but left out of the all-commands totals, so that a BLPOP 30
// never drags a p99. XREAD and XREADGROUP are left out even without BLOCK
// (the table flags the command, not the call).
func ExcludedFromTotals(r *routing.Resolver) []int {
	var ids []int
	for id := command.ID(0); int(id) < r.NumIDs(); id++ {
		f := r.Info(id).Flags
		if r.Blocks(id) || f.Has(command.FlagPubsub) ||
			id == command.Monitor || id == command.Sync || id == command.Psync {
			ids = append(ids, int(id))
		}
	}
	return ids
}

// upstreamError is the reply a pending request gets when its upstream is
// unreachable or lost: "-ERR upstream <addr> <what>: <cause>", one line.
// lostUpstream is the error reply of requests pending on an upstream
// connection that closed: the engine's loss, or the proxy's own shutdown
// once the drain timeout expired (Stop), which must not be blamed on the
// engine.
func (p *Proxy) lostUpstream(addr string, err error) []byte {
	if p.closing.Load() {
		return upstreamError(addr, "not answered: respmeter shut down (drain timeout)", nil)
	}
	return upstreamError(addr, "connection lost", err)
}

func upstreamError(addr, what string, err error) []byte {
	msg := "ERR upstream " + addr + " " + what
	if err != nil && !errors.Is(err, io.EOF) {
		msg += ": " + err.Error()
	}
	msg = strings.Map(func(r rune) rune {
		if r == '\r' || r == '\n' {
			return ' '
		}
		return r
	}, msg)
	return []byte("-" + msg + "\r\n")
}

// gnetLogger sends gnet's own log lines to slog.
type gnetLogger struct{ l *slog.Logger }

func (g gnetLogger) Debugf(f string, a ...any) { g.l.Debug(fmt.Sprintf(f, a...), "source", "gnet") }
func (g gnetLogger) Infof(f string, a ...any)  { g.l.Debug(fmt.Sprintf(f, a...), "source", "gnet") }
func (g gnetLogger) Warnf(f string, a ...any)  { g.l.Warn(fmt.Sprintf(f, a...), "source", "gnet") }
func (g gnetLogger) Errorf(f string, a ...any) { g.l.Error(fmt.Sprintf(f, a...), "source", "gnet") }
func (g gnetLogger) Fatalf(f string, a ...any) { g.l.Error(fmt.Sprintf(f, a...), "source", "gnet") }
