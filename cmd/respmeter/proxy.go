package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"gopkg.in/yaml.v3"

	"github.com/respmeter/respmeter/configs"
	"github.com/respmeter/respmeter/proxy"
)

// configEnv names the environment variable that gives --config's default.
const configEnv = configs.EnvPrefix + "CONFIG"

// stopGrace is added to the drain timeout to bound a whole stop: the proxy
// drains for at most DrainTimeout, then closing sockets and shutting the
// admin server down get this much more.
const stopGrace = time.Second

// proxyFlags holds the proxy subcommand's flags. The configuration flags
// only take effect when given explicitly (pflag's Changed); their defaults
// are shown in --help but the config file and environment come first.
type proxyFlags struct {
	config   string
	check    bool
	listen   string
	upstream string
	admin    string

	adminTokenFile string
	captureDir     string

	route           string
	shards          []string
	cluster         string
	facadeListen    []string
	topologyRefresh time.Duration
	pinBy           string
	upstreamMode    string
	upstreamConns   int

	loops        int
	measure      bool
	drainTimeout time.Duration
	dialTimeout  time.Duration
	upTimeout    time.Duration
	upstreamUser string
	upstreamPass string
	logLevel     string
	logFormat    string

	clientOutputLimit sizeFlag
	clientQueryLimit  sizeFlag
	maxClients        int
	probeInterval     time.Duration
	enginePoll        time.Duration
	slowlogThreshold  time.Duration
	slowlogLen        int
	hdrLog            string
	summary           string
	hdrInterval       time.Duration
	metricsPhases     []string
	metricsCommands   int

	capture         string
	captureDuration time.Duration
	captureSample   float64
	captureRedact   string
}

// sizeFlag is a pflag.Value holding a configs.Size: "64MiB", "1GiB",
// "512KiB", "100MB" or plain bytes.
type sizeFlag struct{ v configs.Size }

var _ pflag.Value = (*sizeFlag)(nil)

func (f *sizeFlag) String() string { return f.v.String() }
func (f *sizeFlag) Type() string   { return "size" }
func (f *sizeFlag) Set(s string) error {
	v, err := configs.ParseSize(s)
	if err != nil {
		return err
	}
	f.v = v
	return nil
}

// proxyCmd is "respmeter proxy".
func (a *app) proxyCmd() *cobra.Command {
	var f proxyFlags
	cmd := &cobra.Command{
		Use:   "proxy [flags]",
		Short: "Run the measuring proxy in front of one Redis-compatible server or several shards",
		Long: `Run the measuring proxy: accept Redis clients on --listen, forward every
command to --upstream and time it. Metrics are served on --admin at /metrics
(Prometheus text), /stats (JSON, with the engine poller's and the PING
probe's stats and the latest verdict) and /slowlog (JSON, commands slower
than --slowlog-threshold with their phases).

Hash-slot routing (--route) spreads the commands over several engines
instead of --upstream, which is then not used:
  --route slots   each command goes to the shard that owns the hash slot of
                  its keys, as a cluster client would send it. MGET, MSET,
                  DEL, UNLINK, EXISTS and TOUCH over several slots are split
                  per slot and their replies merged; other multi-key
                  commands over several slots get -CROSSSLOT. CLIENT
                  REPLY is applied by the proxy (replies dropped, requests
                  still routed). Pub/sub and MONITOR are a mode of the
                  client's own shard connections (SSUBSCRIBE: the
                  channel's shard); SYNC/PSYNC make its home shard's
                  connection a replication stream.
  --route pinned  each client connection is bound to one shard, by
                  --pin-by: connection (round-robin at connect, the default)
                  or first-key (the shard of its first key).
  --route facade  a Redis Cluster of virtual nodes for cluster-aware clients
                  (go-redis ClusterClient, redis-cli -c, memtier
                  --cluster-mode): one listener of --facade-listen per
                  shard, in shard order, each forwarding to its own shard.
                  respmeter answers CLUSTER SLOTS, SHARDS, NODES, INFO, MYID,
                  KEYSLOT and COUNTKEYSINSLOT, -MOVED for a key of another
                  node's slot, -CROSSSLOT for keys of several slots, and
                  ASKING, READONLY and READWRITE; the client routes itself.
                  --listen stays a plain endpoint routed as --route slots.
                  Over --cluster the virtual nodes present its masters
                  (replicas are left out) and its redirects name them.
The shards are either --shards, standalone engines that split the 16384
slots in contiguous ranges in the order given (as "redis-cli --cluster
create" would: 3 shards own 0-5460, 5461-10922, 10923-16383), or --cluster,
one node of a Redis/Valkey Cluster whose shard map is read at start, every
--topology-refresh and after a MOVED reply (MOVED and ASK are followed).
/metrics, /stats and the table gain per-shard rows.

--upstream-mode shared pipelines the requests of all clients of one event
loop onto --upstream-conns shared connections per engine (per shard with
--route slots) and protocol, instead of giving each client connection
upstream connections of its own, and matches the replies back in order. The
engine then sees fewer, fuller reads: not the clients' own workload, hence
an explicit option. Timing works the same; respmeter_upstream_batch_commands
shows the batching. A client that needs connection state (MULTI, WATCH,
blocking commands, AUTH, SELECT of a non-zero db, READONLY, RESET, CLIENT
SETNAME or TRACKING, ...) moves to private connections for the rest of its
life, and pub/sub, MONITOR, SYNC and CLIENT REPLY to a private passthrough
connection; respmeter_handoffs_total{reason} counts the moves. Not with
--route pinned.

On side connections of their own, a PING every --probe-interval measures the
round trip to the upstream, and the engine's own statistics (LATENCY
HISTOGRAM, INFO commandstats, INFO latencystats) are polled every
--engine-poll. With --route slots or pinned every shard (every master of a
--cluster map) gets a PING probe and an engine poll of its own, and its
upstream time is split into engine and path by its own engine's figures.
Every --hdr-interval the verdict says where the request cycle went: client
(think time), path (upstream minus engine time), engine and proxy, with
Little's law checked, and when routing each shard's verdict too; --hdr-log
also writes every interval's histograms to an HdrHistogram log ("respmeter
report" reads it).

Settings come from, lowest precedence first: built-in defaults, the --config
file (YAML; see configs/passthrough.yaml and configs/cluster.yaml),
RESPMETER_* environment variables (RESPMETER_ plus the upper-cased YAML key:
RESPMETER_LISTEN, RESPMETER_UPSTREAM, RESPMETER_ROUTE, RESPMETER_SHARDS
(comma-separated), RESPMETER_CLUSTER, RESPMETER_FACADE_LISTEN
(comma-separated), RESPMETER_TOPOLOGY_REFRESH,
RESPMETER_PIN_BY, RESPMETER_UPSTREAM_MODE, RESPMETER_UPSTREAM_CONNS,
RESPMETER_ADMIN, RESPMETER_LOOPS, RESPMETER_MEASURE,
RESPMETER_DRAIN_TIMEOUT, RESPMETER_DIAL_TIMEOUT, RESPMETER_UPSTREAM_TIMEOUT,
RESPMETER_LOG_LEVEL, RESPMETER_LOG_FORMAT, RESPMETER_CLIENT_OUTPUT_LIMIT,
RESPMETER_CLIENT_QUERY_LIMIT, RESPMETER_MAX_CLIENTS,
RESPMETER_PROBE_INTERVAL, RESPMETER_ENGINE_POLL,
RESPMETER_SLOWLOG_THRESHOLD, RESPMETER_SLOWLOG_LEN, RESPMETER_HDR_LOG,
RESPMETER_HDR_INTERVAL, RESPMETER_SUMMARY;
RESPMETER_CONFIG names the file), then flags given on the command line.

Sizes are bytes or a number with a unit: 512KiB, 64MiB, 1GiB (powers of
1024) or KB, MB, GB (powers of 1000).

Signals: SIGUSR1 prints to stdout the latency table (with a per-shard table
when routing), the verdict since start and that of the latest interval with
requests (and each shard's, when routing), a table of mean times per
command (total, upstream, engine, path, proxy) and, when routing, one per
shard, and keeps running. SIGINT or SIGTERM stops accepting clients,
waits up to --drain-timeout for replies in flight, prints the same and exits
0; a second one cuts the wait short. With --summary FILE, both also write
FILE (replaced whole): the /stats document since start (per command and
phase count, mean, p50, p90, p99, p99.9, p99.99 and max in seconds; shards,
connections, engine, probe, shard_engines), "verdict" since start, "verdict_latest" (the
latest interval's, as /stats has it) and "run" (version, start, end,
addresses, settings; "final" is true at exit).`,
		Example: `  respmeter proxy --listen 127.0.0.1:6380 --upstream 127.0.0.1:6379
  respmeter proxy --config /etc/respmeter/passthrough.yaml --admin 0.0.0.0:9121
  respmeter proxy --config my.yaml --check
  respmeter proxy --route slots --shards 127.0.0.1:7000,127.0.0.1:7001,127.0.0.1:7002
  respmeter proxy --route slots --cluster 127.0.0.1:7000
  respmeter proxy --route pinned --pin-by first-key --shards 127.0.0.1:7000,127.0.0.1:7001
  respmeter proxy --route facade --shards 127.0.0.1:7000,127.0.0.1:7001 --facade-listen 127.0.0.1:7100,127.0.0.1:7101
  respmeter proxy --upstream 127.0.0.1:6379 --upstream-mode shared --upstream-conns 2`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return a.runProxy(cmd, &f) },
	}
	d := configs.Default()
	fs := cmd.Flags()
	fs.SortFlags = false
	fs.StringVar(&f.config, "config", "", "YAML configuration `file` (default $"+configEnv+")")
	fs.BoolVar(&f.check, "check", false, "validate the configuration, print the result and exit: 0 valid, 2 invalid")
	fs.StringVar(&f.listen, "listen", d.Listen, "client-facing `host:port`; port 0 picks a free port")
	fs.StringVar(&f.upstream, "upstream", d.Upstream, "`host:port` of the Redis-compatible server (--route none only)")
	fs.StringVar(&f.route, "route", d.Route, "routing `mode`: none (everything to --upstream), slots (each command to its hash slot's shard), pinned (each connection to one shard) or facade (a cluster of virtual nodes, --facade-listen)")
	fs.StringSliceVar(&f.shards, "shards", d.Shards, "comma-separated `host:port,...` of standalone engines that split the hash slots in this order (--route slots, pinned or facade)")
	fs.StringVar(&f.cluster, "cluster", d.Cluster, "`host:port` of one Redis/Valkey Cluster node to read the shard map from (--route slots, pinned or facade)")
	fs.StringSliceVar(&f.facadeListen, "facade-listen", d.FacadeListen, "comma-separated `host:port,...` of --route facade's virtual cluster nodes, one per shard in shard order (more are spare nodes); port 0 picks a free port")
	fs.DurationVar(&f.topologyRefresh, "topology-refresh", time.Duration(d.TopologyRefresh), "how often the --cluster shard map is re-read (also after MOVED)")
	fs.StringVar(&f.pinBy, "pin-by", d.PinBy, "`policy` of --route pinned: connection (round-robin; the default) or first-key")
	fs.StringVar(&f.upstreamMode, "upstream-mode", d.UpstreamMode, "upstream connection `mode`: private (each client connection its own) or shared (the clients of an event loop pipelined onto --upstream-conns connections; not with --route pinned)")
	fs.IntVar(&f.upstreamConns, "upstream-conns", d.UpstreamConns, "shared upstream connections per event loop, engine (shard) and protocol with --upstream-mode shared; 0 means 1")
	fs.StringVar(&f.admin, "admin", d.Admin, "`host:port` serving the live page /, /metrics, /stats and /slowlog, or \"off\"; port 0 picks a free port")
	fs.StringVar(&f.adminTokenFile, "admin-token-file", d.AdminTokenFile, "`file` holding the bearer token that the admin endpoints which change something (capture start/stop, slow log reset) require; \"\" requires none on a loopback --admin and refuses them elsewhere, \"off\" refuses them everywhere")
	fs.StringVar(&f.captureDir, "capture-dir", d.CaptureDir, "`directory` that captures started on the admin API (POST /capture/start?file=NAME) are created in; \"\" refuses them")
	fs.IntVar(&f.loops, "loops", d.Loops, "number of event loops; 0 means one per CPU")
	fs.BoolVar(&f.measure, "measure", d.Measure, "time commands; --measure=false only forwards (a cost baseline)")
	fs.DurationVar(&f.drainTimeout, "drain-timeout", time.Duration(d.DrainTimeout), "on SIGINT/SIGTERM, how long to wait for replies in flight")
	fs.DurationVar(&f.dialTimeout, "dial-timeout", time.Duration(d.DialTimeout), "timeout of one connection attempt to the upstream")
	fs.DurationVar(&f.upTimeout, "upstream-timeout", time.Duration(d.UpstreamTimeout), "fail the requests pending on an engine connection silent this long (-ERR upstream ... not answering) and close it; blocking commands add their own timeout; 0 disables")
	fs.StringVar(&f.upstreamUser, "upstream-user", d.UpstreamUser, "`user` of respmeter's own side connections to the engines (AUTH user password; needs --upstream-password)")
	fs.StringVar(&f.upstreamPass, "upstream-password", d.UpstreamPassword, "`password` of respmeter's own side connections to the engines (cluster map, command table, probe, poller); prefer RESPMETER_UPSTREAM_PASSWORD, the process list shows flags")
	fs.StringVar(&f.logLevel, "log-level", d.LogLevel, "minimum log `level`: debug, info, warn or error")
	fs.StringVar(&f.logFormat, "log-format", d.LogFormat, "log `format` on stderr: text or json")
	f.clientOutputLimit.v, f.clientQueryLimit.v = d.ClientOutputLimit, d.ClientQueryLimit
	fs.Var(&f.clientOutputLimit, "client-output-limit", "replies queued for a client that does not read before it is disconnected; 0 means unlimited")
	fs.Var(&f.clientQueryLimit, "client-query-limit", "unprocessed input of one client before it is disconnected; 0 means unlimited")
	fs.IntVar(&f.maxClients, "max-clients", d.MaxClients, "concurrent client connections; 0 means unlimited")
	fs.DurationVar(&f.probeInterval, "probe-interval", time.Duration(d.ProbeInterval), "interval of the PING probe of the upstream (of each shard when routing); 0 disables it")
	fs.DurationVar(&f.enginePoll, "engine-poll", time.Duration(d.EnginePoll), "interval of the poll of the engine's own statistics (of each shard when routing); 0 disables it")
	fs.DurationVar(&f.slowlogThreshold, "slowlog-threshold", time.Duration(d.SlowlogThreshold), "commands at least this slow go to /slowlog; 0 logs all, negative disables")
	fs.IntVar(&f.slowlogLen, "slowlog-len", d.SlowlogLen, "number of slow commands kept")
	fs.StringVar(&f.hdrLog, "hdr-log", d.HDRLog, "write an HdrHistogram interval log to `file`")
	fs.DurationVar(&f.hdrInterval, "hdr-interval", time.Duration(d.HDRInterval), "interval of the HdrHistogram log and of the verdict")
	fs.StringSliceVar(&f.metricsPhases, "metrics-phases", d.MetricsPhases, "comma-separated `phases` whose duration histograms /metrics exports per command and shard (total,upstream,proxy,service,queue)")
	fs.IntVar(&f.metricsCommands, "metrics-commands", d.MetricsCommands, "command labels /metrics exports; later commands are counted as command=\"other\"; 0 means no cap")
	fs.StringVar(&f.summary, "summary", d.Summary, "write a JSON summary of the run to `file` at exit and on SIGUSR1")
	fs.StringVar(&f.capture, "capture", "", "capture the clients' commands to `file` (created 0600; \"respmeter replay\" reads it)")
	fs.DurationVar(&f.captureDuration, "capture-duration", 0, "stop the --capture after this long; 0 runs it until exit")
	fs.Float64Var(&f.captureSample, "capture-sample", 1, "`fraction` (0,1] of client connections captured")
	fs.StringVar(&f.captureRedact, "capture-redact", "", "\"values\": replace request values by filler of the same length (credentials are always redacted)")
	return cmd
}

// runProxy resolves the configuration and either prints it (--check) or
// serves until a signal or the context ends.
func (a *app) runProxy(cmd *cobra.Command, f *proxyFlags) error {
	cfg, sources, err := a.proxyConfig(cmd.Flags(), f)
	if err != nil {
		return configError(err)
	}
	if f.check {
		shown := cfg
		if shown.UpstreamPassword != "" {
			shown.UpstreamPassword = "<redacted>"
		}
		out, err := yaml.Marshal(shown)
		if err != nil {
			return failure(err)
		}
		fmt.Fprintf(a.stdout, "# configuration valid; sources: %s\n%s", strings.Join(sources, ", "), out)
		return nil
	}
	cc, err := captureConfig(f)
	if err != nil {
		return usageError(cmd, err)
	}
	log := newLogger(a.stderr, cfg.LogLevel, cfg.LogFormat)
	a.warnUnknownEnv(log)
	return a.serve(cmd.Context(), cfg, cc, log)
}

// proxyConfig merges defaults, the config file, the environment and the
// flags given explicitly, validates the result and returns it with the list
// of sources used ("defaults", the file, variables, flags). Every error is a
// *configs.FieldError naming where the bad value came from.
func (a *app) proxyConfig(fs *pflag.FlagSet, f *proxyFlags) (configs.Config, []string, error) {
	cfg := configs.Default()
	sources := []string{"defaults"}
	origin := map[string]string{} // key -> where its value came from

	path := f.config
	if !fs.Changed("config") {
		path, _ = a.lookupEnv(configEnv)
	}
	if path != "" {
		var err error
		if cfg, err = configs.Load(path); err != nil {
			return cfg, nil, err
		}
		sources = append(sources, path)
		for _, k := range configs.Keys() {
			origin[k] = path
		}
	}

	keys, err := cfg.ApplyEnv(a.lookupEnv)
	if err != nil {
		return cfg, nil, err
	}
	for _, k := range keys {
		origin[k] = configs.EnvVar(k)
		sources = append(sources, configs.EnvVar(k))
	}

	var errs []error
	fs.Visit(func(fl *pflag.Flag) {
		key := strings.ReplaceAll(fl.Name, "-", "_")
		if !slices.Contains(configs.Keys(), key) {
			return // --config, --check
		}
		value := fl.Value.String()
		if sv, ok := fl.Value.(pflag.SliceValue); ok {
			value = strings.Join(sv.GetSlice(), ",") // String() is "[a,b]"
		}
		if err := cfg.Set(key, value); err != nil {
			var fe *configs.FieldError
			if errors.As(err, &fe) {
				fe.Source = "--" + fl.Name
			}
			errs = append(errs, err)
			return
		}
		origin[key] = "--" + fl.Name
		sources = append(sources, "--"+fl.Name)
	})
	if len(errs) > 0 {
		return cfg, nil, errors.Join(errs...)
	}

	if err := cfg.Validate(); err != nil {
		fes := configs.FieldErrors(err)
		out := make([]error, len(fes))
		for i, fe := range fes {
			fe.Source = origin[fe.Key] // "" for a default value
			out[i] = fe
		}
		return cfg, nil, errors.Join(out...)
	}
	return cfg, sources, nil
}

// warnUnknownEnv logs every RESPMETER_* variable that is not a known
// setting: most likely a typo that would otherwise go unnoticed.
func (a *app) warnUnknownEnv(log *slog.Logger) {
	known := map[string]bool{configEnv: true}
	for _, k := range configs.Keys() {
		known[configs.EnvVar(k)] = true
	}
	for _, kv := range a.environ() {
		name, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(name, configs.EnvPrefix) && !known[name] {
			log.Warn("unknown environment variable ignored", "component", "config", "name", name)
		}
	}
}

// serve runs the proxy until SIGINT, SIGTERM or ctx ends, printing the
// latency table and the verdict to stdout on SIGUSR1 and once more after
// the stop.
func (a *app) serve(ctx context.Context, cfg configs.Config, cc proxy.CaptureConfig, log *slog.Logger) error {
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGUSR1, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)

	st, err := startStack(cfg, log)
	if err != nil {
		return failure(err)
	}
	mlog := log.With("component", "main")
	probeUpstreams(cfg, log.With("component", "proxy"))
	if cc.File != "" {
		if err := startCapture(st.proxy, cc); err != nil {
			_ = st.stop(context.WithoutCancel(ctx))
			return failure(err)
		}
	}

	code := exitOK
	reason := ""
wait:
	for {
		select {
		case <-ctx.Done():
			reason = "context done"
			break wait
		case err := <-st.adminErr:
			mlog.Error("admin server failed", "err", err)
			code, reason = exitFailure, "admin server failed"
			break wait
		case sig := <-sigs:
			if sig == syscall.SIGUSR1 {
				if err := st.writeTables(a.stdout); err != nil {
					mlog.Warn("write table", "err", err)
				}
				if err := st.writeSummary(false); err != nil {
					mlog.Warn("write summary", "err", err)
				}
				continue
			}
			reason = sig.String()
			break wait
		}
	}

	mlog.Info("stopping", "reason", reason, "drain_timeout", cfg.DrainTimeout.String())
	stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Duration(cfg.DrainTimeout)+stopGrace)
	defer cancel()
	// A second SIGINT/SIGTERM cuts the drain short; that is what the user
	// asked for, not a failure, so the exit code stays 0.
	stopped := make(chan struct{})
	defer close(stopped)
	var cut atomic.Bool
	go func() {
		for {
			select {
			case sig := <-sigs:
				if sig != syscall.SIGUSR1 {
					mlog.Warn("second signal: closing without waiting for replies", "signal", sig.String())
					cut.Store(true)
					cancel()
				}
			case <-stopped:
				return
			}
		}
	}()
	if err := st.stop(stopCtx); err != nil {
		if cut.Load() {
			mlog.Warn("stop cut short by a second signal", "err", err)
		} else {
			mlog.Error("unclean stop", "err", err)
			code = exitFailure
		}
	}
	if err := st.writeTables(a.stdout); err != nil {
		mlog.Warn("write table", "err", err)
	}
	if err := st.writeSummary(true); err != nil {
		mlog.Error("write summary", "err", err)
		code = exitFailure
	}
	mlog.Info("stopped")
	if code != exitOK {
		return failure(nil)
	}
	return nil
}

// probeUpstreams dials the upstream, or each of --shards, once so that a
// wrong address shows up in the log at start rather than on the first
// client. It never fails the start: an engine may simply come up later. A
// --cluster node needs no probe: the proxy read the shard map from it.
func probeUpstreams(cfg configs.Config, log *slog.Logger) {
	addrs := []string{cfg.Upstream}
	if cfg.Routed() {
		addrs = cfg.Shards
	}
	for _, addr := range addrs {
		c, err := net.DialTimeout("tcp", addr, time.Duration(cfg.DialTimeout))
		if err != nil {
			log.Warn("upstream not reachable (yet); clients will get errors until it is", "upstream", addr, "err", err)
			continue
		}
		_ = c.Close()
	}
}
