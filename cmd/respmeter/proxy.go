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
	shardZones      []string
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
	inject            string
	hdrInterval       time.Duration
	metricsPhases     []string
	metricsCommands   int
	heat              bool
	heatSample        int
	heatMetricsKeys   int
	keyNames          string

	capture         string
	captureDuration time.Duration
	captureSample   float64
	captureRedact   string

	tlsListen           string
	tlsCertFile         string
	tlsKeyFile          string
	tlsCACertFile       string
	tlsAuthClients      string
	tlsHandshakeTimeout time.Duration
	tlsProtocols        string
	tlsCiphers          string
	upstreamTLS         bool
	facadeTLS           bool
	upTLSCACertFile     string
	upTLSCertFile       string
	upTLSKeyFile        string
	upTLSServerName     string
	upTLSInsecure       bool
	upTLSProtocols      string
	upTLSCiphers        string
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
		Long: `Run the measuring proxy: accept Redis clients on --listen, forward each command unchanged to
--upstream (or, with --route, to its shard) and time it. --admin serves the live page /, /metrics
(Prometheus), /stats (JSON) and /slowlog. Every --hdr-interval the verdict says where the request
cycle went: client, path, engine, engine wait or proxy. SIGUSR1 prints the latency table and the
verdict; SIGINT/SIGTERM stops accepting, waits up to --drain-timeout for replies, prints, exits 0.

Settings, lowest first: defaults, --config (YAML; configs/passthrough.yaml has every key),
RESPMETER_<KEY> (RESPMETER_DRAIN_TIMEOUT; lists comma-separated; RESPMETER_CONFIG names the file),
flags (--drain-timeout). Sizes: bytes, 64MiB, 1GiB, 100MB, 1GB. Every flag: docs/configuration.md.`,
		Example: `  respmeter proxy --listen 127.0.0.1:6380 --upstream 127.0.0.1:6379
  respmeter proxy --route facade --shards 127.0.0.1:7000,127.0.0.1:7001 \
      --facade-listen 127.0.0.1:7100,127.0.0.1:7101`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return a.runProxy(cmd, &f) },
	}
	cmd.SetUsageFunc(func(c *cobra.Command) error { return groupedUsage(c, proxyGroups, proxyFlagGroup) })
	d := configs.Default()
	fs := cmd.Flags()
	fs.SortFlags = false
	fs.StringVar(&f.config, "config", "", "YAML configuration `file` (default $"+configEnv+")")
	fs.BoolVar(&f.check, "check", false, "print the merged configuration and exit: 0 valid, 2 invalid")
	fs.StringVar(&f.listen, "listen", d.Listen, "`host:port` for clients; \"off\": none")
	fs.StringVar(&f.upstream, "upstream", d.Upstream, "`host:port` of the engine")
	fs.StringVar(&f.route, "route", d.Route, "`mode`: none, slots, pinned or facade")
	fs.StringSliceVar(&f.shards, "shards", d.Shards, "`host:port,...` of standalone engines, slots split in order")
	fs.StringVar(&f.cluster, "cluster", d.Cluster, "`host:port` of a Cluster node to read the shard map from")
	fs.StringSliceVar(&f.shardZones, "shard-zones", d.ShardZones, "`zone,...`: the availability zone of each of --shards, in order")
	fs.StringSliceVar(&f.facadeListen, "facade-listen", d.FacadeListen, "`host:port,...` of the virtual nodes, one per shard")
	fs.DurationVar(&f.topologyRefresh, "topology-refresh", time.Duration(d.TopologyRefresh), "re-read of the --cluster shard map")
	fs.StringVar(&f.pinBy, "pin-by", d.PinBy, "`policy`: connection (round-robin) or first-key")
	fs.StringVar(&f.upstreamMode, "upstream-mode", d.UpstreamMode, "`mode`: private or shared")
	fs.IntVar(&f.upstreamConns, "upstream-conns", d.UpstreamConns, "shared connections per loop, engine and protocol")
	fs.StringVar(&f.admin, "admin", d.Admin, "`host:port` of the admin HTTP, or \"off\"")
	fs.StringVar(&f.adminTokenFile, "admin-token-file", d.AdminTokenFile, "`file` with the bearer token changes on the admin API need")
	fs.StringVar(&f.captureDir, "capture-dir", d.CaptureDir, "`directory` for captures started on the admin API")
	fs.IntVar(&f.loops, "loops", d.Loops, "event loops; 0 means one per CPU")
	fs.BoolVar(&f.measure, "measure", d.Measure, "false: only forward, the cost baseline")
	fs.DurationVar(&f.drainTimeout, "drain-timeout", time.Duration(d.DrainTimeout), "wait for replies in flight on SIGINT/SIGTERM")
	fs.DurationVar(&f.dialTimeout, "dial-timeout", time.Duration(d.DialTimeout), "one connection attempt to an engine")
	fs.DurationVar(&f.upTimeout, "upstream-timeout", time.Duration(d.UpstreamTimeout), "fail requests after this engine silence; 0: off")
	fs.StringVar(&f.upstreamUser, "upstream-user", d.UpstreamUser, "`user` of respmeter's own side connections to the engines")
	fs.StringVar(&f.upstreamPass, "upstream-password", d.UpstreamPassword, "`password` of them; prefer RESPMETER_UPSTREAM_PASSWORD")
	fs.StringVar(&f.tlsListen, "tls-listen", d.TLSListen, "`host:port` for TLS clients, beside --listen; port 0: any")
	fs.StringVar(&f.tlsCertFile, "tls-cert-file", d.TLSCertFile, "PEM certificate `file` of --tls-listen")
	fs.StringVar(&f.tlsKeyFile, "tls-key-file", d.TLSKeyFile, "PEM private key `file` of --tls-listen")
	fs.StringVar(&f.tlsCACertFile, "tls-ca-cert-file", d.TLSCACertFile, "PEM CA `file` client certificates are verified against")
	fs.StringVar(&f.tlsAuthClients, "tls-auth-clients", d.TLSAuthClients, "client certs `policy`: no, optional, yes")
	fs.DurationVar(&f.tlsHandshakeTimeout, "tls-handshake-timeout", time.Duration(d.TLSHandshakeTimeout), "bound of each TLS handshake, either side")
	fs.StringVar(&f.tlsProtocols, "tls-protocols", d.TLSProtocols, "TLS `versions` allowed, \"TLSv1.2 TLSv1.3\"; default: both")
	fs.StringVar(&f.tlsCiphers, "tls-ciphers", d.TLSCiphers, "TLS 1.2 cipher `suites`, OpenSSL names a:b; default: Go's")
	fs.BoolVar(&f.facadeTLS, "facade-tls", d.FacadeTLS, "--route facade: virtual nodes serve TLS only")
	fs.BoolVar(&f.upstreamTLS, "upstream-tls", d.UpstreamTLS, "TLS to the engines, certificates verified")
	fs.StringVar(&f.upTLSCACertFile, "upstream-tls-ca-cert-file", d.UpstreamTLSCACertFile, "engines' PEM CA `file`; default: the system's roots")
	fs.StringVar(&f.upTLSCertFile, "upstream-tls-cert-file", d.UpstreamTLSCertFile, "PEM client certificate `file` for the engines")
	fs.StringVar(&f.upTLSKeyFile, "upstream-tls-key-file", d.UpstreamTLSKeyFile, "PEM private key `file` of it")
	fs.StringVar(&f.upTLSServerName, "upstream-tls-server-name", d.UpstreamTLSServerName, "engines' certificate `name`; default: the host dialed")
	fs.BoolVar(&f.upTLSInsecure, "upstream-tls-insecure-skip-verify", d.UpstreamTLSInsecureSkipVerify, "accept any engine certificate (tests only; warned)")
	fs.StringVar(&f.upTLSProtocols, "upstream-tls-protocols", d.UpstreamTLSProtocols, "TLS `versions` towards the engines; default: both")
	fs.StringVar(&f.upTLSCiphers, "upstream-tls-ciphers", d.UpstreamTLSCiphers, "TLS 1.2 `suites` towards the engines; default: Go's")
	fs.StringVar(&f.logLevel, "log-level", d.LogLevel, "`level`: debug, info, warn or error")
	fs.StringVar(&f.logFormat, "log-format", d.LogFormat, "`format` on stderr: text or json")
	f.clientOutputLimit.v, f.clientQueryLimit.v = d.ClientOutputLimit, d.ClientQueryLimit
	fs.Var(&f.clientOutputLimit, "client-output-limit", "replies queued for a non-reading client; 0: none")
	fs.Var(&f.clientQueryLimit, "client-query-limit", "unprocessed input of one client; 0: none")
	fs.IntVar(&f.maxClients, "max-clients", d.MaxClients, "client connections; 0: unlimited")
	fs.DurationVar(&f.probeInterval, "probe-interval", time.Duration(d.ProbeInterval), "PING probe of each engine; 0 disables")
	fs.DurationVar(&f.enginePoll, "engine-poll", time.Duration(d.EnginePoll), "poll of each engine's own statistics; 0 disables")
	fs.DurationVar(&f.slowlogThreshold, "slowlog-threshold", time.Duration(d.SlowlogThreshold), "to /slowlog from this; 0: all, negative: off")
	fs.IntVar(&f.slowlogLen, "slowlog-len", d.SlowlogLen, "slow commands kept")
	fs.StringVar(&f.hdrLog, "hdr-log", d.HDRLog, "`file`: HdrHistogram interval log (\"respmeter report\" reads it)")
	fs.DurationVar(&f.hdrInterval, "hdr-interval", time.Duration(d.HDRInterval), "interval of the verdict and the HdrHistogram log")
	fs.StringSliceVar(&f.metricsPhases, "metrics-phases", d.MetricsPhases, "`phases` in /metrics")
	fs.IntVar(&f.metricsCommands, "metrics-commands", d.MetricsCommands, "command labels; later ones \"other\"; 0: no cap")
	fs.BoolVar(&f.heat, "heat", d.Heat, "key and slot heat (/keys, /slots, /metrics, live page)")
	fs.IntVar(&f.heatSample, "heat-sample", d.HeatSample, "sample one request in `N` into the top keys")
	fs.IntVar(&f.heatMetricsKeys, "heat-metrics-keys", d.HeatMetricsKeys, "top keys per ranking as /metrics labels; 0: none")
	fs.StringVar(&f.keyNames, "key-names", d.KeyNames, "keys shown `as`: plain, pattern or hash")
	fs.StringVar(&f.summary, "summary", d.Summary, "`file`: JSON summary of the run, at exit and on SIGUSR1")
	fs.StringVar(&f.capture, "capture", "", "`file` to capture client commands to (0600)")
	fs.DurationVar(&f.captureDuration, "capture-duration", 0, "stop the capture after this long; 0: at exit")
	fs.Float64Var(&f.captureSample, "capture-sample", 1, "`fraction` (0,1] of client connections captured")
	fs.StringVar(&f.captureRedact, "capture-redact", "", "`what`: \"values\" replaces request values by filler")
	fs.StringVar(&f.inject, "inject", d.Inject, "fault injection rule `file` (YAML: delays, errors, pacing)")
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
// the stop, and reading the TLS certificate files again on SIGHUP.
func (a *app) serve(ctx context.Context, cfg configs.Config, cc proxy.CaptureConfig, log *slog.Logger) error {
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGUSR1, syscall.SIGHUP, syscall.SIGINT, syscall.SIGTERM)
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
			if sig == syscall.SIGHUP {
				st.tls.reload(mlog)
				continue
			}
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
				if sig != syscall.SIGUSR1 && sig != syscall.SIGHUP {
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
