// Package configs holds respmeter's configuration: the Config tree, its
// defaults, a strict YAML loader whose errors carry file:line, per-key
// overrides from strings (environment variables, command-line flags) and the
// value and cross-field checks in Validate.
//
// Precedence, applied by the caller in this order: Default, the file (Load),
// the environment (ApplyEnv), explicit flags (Set). Validate runs last on the
// merged result.
//
// Nothing here is safe for concurrent mutation; a Config is built once at
// start-up and then only read.
package configs

import (
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/respmeter/respmeter/internal/tlsconf"
)

// Sentinel errors, wrapped by FieldError so callers can test with errors.Is.
var (
	// ErrUnknownKey marks a key that is not part of Config (a typo, usually).
	ErrUnknownKey = errors.New("configs: unknown key")
	// ErrInvalid marks a value that does not parse or fails a check.
	ErrInvalid = errors.New("configs: invalid value")
)

// AdminOff is the Config.Admin value that disables the admin HTTP server.
const AdminOff = "off"

// ListenOff is the Config.Listen value that serves no plaintext clients, only
// TLSListen's (as Redis's port 0 beside tls-port).
const ListenOff = "off"

// MaxLoops is the largest accepted Config.Loops; more event loops than this
// only cost memory (each loop carries its own histograms).
const MaxLoops = 1024

// MaxSlowlogLen is the largest accepted Config.SlowlogLen: the ring is
// allocated whole at start (about 200 bytes per entry before strings).
const MaxSlowlogLen = 1 << 20

// Lower bounds of the periodic work, so that a typo ("1us") cannot turn a
// background task into a busy loop. Each interval of the verdict and the
// HdrHistogram log takes a Snapshot, which copies every histogram.
const (
	// MinProbeInterval bounds Config.ProbeInterval when it is not 0.
	MinProbeInterval = time.Millisecond
	// MinEnginePoll bounds Config.EnginePoll when it is not 0.
	MinEnginePoll = 10 * time.Millisecond
	// MinHDRInterval bounds Config.HDRInterval.
	MinHDRInterval = 10 * time.Millisecond
)

// MinUpstreamTimeout bounds Config.UpstreamTimeout: an engine that takes
// longer to answer is slow, not gone, and the check looks at every engine
// connection a quarter of the timeout apart.
const MinUpstreamTimeout = 100 * time.Millisecond

// MinTopologyRefresh bounds Config.TopologyRefresh: every refresh dials a
// cluster node and reads its whole shard map.
const MinTopologyRefresh = time.Second

// MaxShards is the largest accepted number of Config.Shards: Redis Cluster
// is designed for up to 1000 masters.
const MaxShards = 1000

// Routing modes accepted by Config.Route; the same strings as proxy's
// RouteNone, RouteSlots and RoutePinned.
const (
	// RouteNone forwards every client connection to Config.Upstream.
	RouteNone = "none"
	// RouteSlots sends each command to the shard owning its keys' hash slot.
	RouteSlots = "slots"
	// RoutePinned binds each client connection to one shard.
	RoutePinned = "pinned"
	// RouteFacade presents the shards as a Redis Cluster of virtual nodes
	// (FacadeListen), Listen staying a slot-routed endpoint.
	RouteFacade = "facade"
)

// Pin policies accepted by Config.PinBy under RoutePinned; the same strings
// as proxy's PinConnection and PinFirstKey.
const (
	// PinConnection assigns shards to client connections round-robin (the
	// default).
	PinConnection = "connection"
	// PinFirstKey assigns a connection the shard of the first key it uses.
	PinFirstKey = "first-key"
)

// Upstream connection modes accepted by Config.UpstreamMode; the same
// strings as proxy's UpstreamPrivate and UpstreamShared.
const (
	// UpstreamPrivate gives every client connection upstream connections
	// of its own (the default).
	UpstreamPrivate = "private"
	// UpstreamShared pipelines the requests of the clients of one event
	// loop onto a few shared upstream connections.
	UpstreamShared = "shared"
)

// Log levels, log formats, routing modes, pin policies and upstream modes
// accepted by Config.LogLevel, Config.LogFormat, Config.Route, Config.PinBy
// and Config.UpstreamMode.
var (
	logLevels     = []string{"debug", "info", "warn", "error"}
	logFormats    = []string{"text", "json"}
	routes        = []string{RouteNone, RouteSlots, RoutePinned, RouteFacade}
	pinPolicies   = []string{PinConnection, PinFirstKey}
	upstreamModes = []string{UpstreamPrivate, UpstreamShared}
)

// Duration is a time.Duration written in configuration as a Go duration
// string such as "250ms", "5s" or "1m30s" (time.ParseDuration). Bare numbers
// are rejected: a unit is always required.
type Duration time.Duration

// String formats d like time.Duration.String ("5s").
func (d Duration) String() string { return time.Duration(d).String() }

// MarshalYAML writes d as a duration string ("5s").
func (d Duration) MarshalYAML() (any, error) { return d.String(), nil }

// UnmarshalYAML reads a duration string from a scalar node.
func (d *Duration) UnmarshalYAML(value *yaml.Node) error {
	if value.Kind != yaml.ScalarNode || value.Tag == "!!null" {
		return fmt.Errorf("must be a duration such as \"250ms\" or \"5s\", got %s", describeNode(value))
	}
	v, err := parseDuration(value.Value)
	if err != nil {
		return err
	}
	*d = v
	return nil
}

// parseDuration parses s with time.ParseDuration and rewords its errors.
func parseDuration(s string) (Duration, error) {
	v, err := time.ParseDuration(strings.TrimSpace(s))
	if err != nil {
		return 0, fmt.Errorf("must be a duration such as \"250ms\" or \"5s\", got %q", s)
	}
	return Duration(v), nil
}

// Config is the complete respmeter proxy configuration. Every field has a
// default (see Default); YAML keys are given in the tags, environment
// variables are RESPMETER_ plus the upper-cased key (RESPMETER_DRAIN_TIMEOUT)
// and command-line flags are the key with '-' for '_' (--drain-timeout).
type Config struct {
	// Listen is the client-facing address, host:port. Default
	// "127.0.0.1:6380". Port 0 picks a free port; an empty host listens on
	// every interface. "off" (ListenOff) serves clients on TLSListen only,
	// as Redis's port 0 beside tls-port; it needs TLSListen and is not
	// for Route "facade".
	Listen string `yaml:"listen"`
	// Upstream is the Redis-compatible engine's address, host:port, port
	// 1-65535. Default "127.0.0.1:6379". Used only with Route "none", and
	// then must differ from Listen.
	Upstream string `yaml:"upstream"`
	// Route is how commands find their engine: "none" (the default; every
	// connection goes to Upstream), "slots" (each command to the shard that
	// owns its keys' hash slot), "pinned" (each client connection to one
	// shard) or "facade" (a Redis Cluster of virtual nodes, FacadeListen,
	// for cluster-aware clients; Listen routes as "slots"). "slots" and
	// "pinned" need exactly one of Shards and Cluster, and so does
	// "facade".
	Route string `yaml:"route"`
	// Shards are standalone engines, host:port each, splitting the 16384
	// hash slots in contiguous ranges as "redis-cli --cluster create" would
	// (3 shards: 0-5460, 5461-10922, 10923-16383). At most MaxShards, no
	// duplicates, none equal to Listen. Only with Route "slots", "pinned"
	// or "facade". Default empty. In the environment and in --shards: a
	// comma-separated list.
	Shards []string `yaml:"shards"`
	// ShardZones are the availability zones of Shards, one per shard in
	// the same order (the availability-zone a Valkey 9.1 cluster node
	// reports): the facade's CLUSTER SHARDS gives each virtual node its
	// shard's zone, and the per-shard tables show it beside the shard's
	// address. Each a non-empty name of at most 128 printable characters
	// without spaces. Only with Shards. Default empty: no zone, or the
	// engine's own in the per-shard tables. In the environment and in
	// --shard-zones: a comma-separated list.
	ShardZones []string `yaml:"shard_zones"`
	// Cluster is host:port of one node of a Redis or Valkey Cluster, whose
	// shard map (CLUSTER SHARDS, or CLUSTER SLOTS) is read at start,
	// every TopologyRefresh and after a MOVED reply. Only with Route
	// "slots", "pinned" or "facade". Default "".
	Cluster string `yaml:"cluster"`
	// FacadeListen are the client-facing addresses of Route "facade"'s
	// virtual cluster nodes, host:port each (port 0 picks a free port), one
	// per shard in shard order (with Cluster: in the order the shard map
	// lists the masters; a master beyond them, one that joins later
	// included, takes a spare address, or if none is left every node
	// forwards its slots); more than the shards are allowed (spare nodes
	// own no slot). No duplicates, none equal to Listen. The host is
	// what CLUSTER SLOTS/SHARDS/NODES and MOVED name; a wildcard host
	// (0.0.0.0, ::) names the address the client reached. Only with Route
	// "facade". Default empty. In the environment and in --facade-listen: a
	// comma-separated list.
	FacadeListen []string `yaml:"facade_listen"`
	// TopologyRefresh is how often the Cluster's shard map is re-read.
	// Default 30s; at least MinTopologyRefresh. Unused without Cluster.
	TopologyRefresh Duration `yaml:"topology_refresh"`
	// PinBy picks the shard of a client connection under Route "pinned":
	// "connection" (round-robin at connect) or "first-key" (the shard of
	// the first key the connection uses). Default "", which means
	// "connection"; any other value needs Route "pinned".
	PinBy string `yaml:"pin_by"`
	// UpstreamMode is how client connections reach the engines: "private"
	// (the default; each client connection has upstream connections of
	// its own, one per shard it uses) or "shared" (the requests of the
	// clients of one event loop are pipelined onto UpstreamConns shared
	// connections per shard, replies demultiplexed in order; a client
	// that needs connection state, such as MULTI, a blocking command or
	// SELECT, moves to private connections). "shared" changes the
	// workload the engine sees (fewer, fuller reads) and is not allowed
	// with Route "pinned".
	UpstreamMode string `yaml:"upstream_mode"`
	// UpstreamConns is the number of shared upstream connections per event
	// loop, per shard and per protocol (RESP2, RESP3) with UpstreamMode
	// "shared". Default 1; 0 also means 1; must be >= 0. Unused with
	// "private".
	UpstreamConns int `yaml:"upstream_conns"`
	// Admin is the HTTP address serving /metrics and /stats, host:port, or
	// "off" to disable it. Default "127.0.0.1:9121". Port 0 picks a free
	// port. Must differ from Listen unless either uses port 0.
	Admin string `yaml:"admin"`
	// AdminTokenFile is the file holding the bearer token (its first line,
	// surrounding space trimmed) that the admin endpoints which change
	// something (capture start and stop, slow log reset) require, as
	// "Authorization: Bearer <token>" (RFC 6750); the read endpoints stay
	// open. "" (the default) requires none on a loopback Admin address and
	// refuses those endpoints (403) on any other; "off" refuses them
	// everywhere.
	AdminTokenFile string `yaml:"admin_token_file"`
	// CaptureDir is the directory that captures started through the admin
	// API (POST /capture/start?file=NAME) are written to: NAME is a plain
	// file name inside it (no path separator, not "." or ".."), created
	// new (an existing file or symlink of that name is refused). ""
	// (the default) refuses captures through the API; --capture is not
	// bound by it.
	CaptureDir string `yaml:"capture_dir"`
	// Loops is the number of event loops, 0..MaxLoops; 0 (the default)
	// means one per CPU.
	Loops int `yaml:"loops"`
	// Measure turns per-command timing on. Default true; false only frames
	// and forwards (the baseline for measuring the proxy's own cost).
	Measure bool `yaml:"measure"`
	// DrainTimeout bounds how long a graceful stop waits for pending
	// replies. Default 5s; must be > 0.
	DrainTimeout Duration `yaml:"drain_timeout"`
	// DialTimeout bounds one upstream dial. Default 2s; must be > 0.
	DialTimeout Duration `yaml:"dial_timeout"`
	// UpstreamTimeout is how long an engine connection with requests
	// pending may go without a reply byte before they fail with "-ERR
	// upstream <host:port> not answering" and the connection is closed (a
	// frozen engine sends no reset); a blocking command at the head waits
	// its own timeout more (BLPOP 0 never times out). Default 5s; 0
	// disables it; otherwise at least MinUpstreamTimeout.
	UpstreamTimeout Duration `yaml:"upstream_timeout"`
	// UpstreamUser and UpstreamPassword authenticate respmeter's own side
	// connections to the engines: the cluster's shard map (Cluster), the
	// command table, the engine probe and poller (AUTH [user] password, as
	// redis-cli's --user and -a do). Clients authenticate themselves; their
	// engine connections never get these. Default "": no AUTH. A user needs
	// a password. The password is never printed (--check shows
	// "<redacted>"), logged, exported nor written to a summary; prefer the
	// config file or RESPMETER_UPSTREAM_PASSWORD to --upstream-password,
	// which the process list shows.
	UpstreamUser     string `yaml:"upstream_user"`
	UpstreamPassword string `yaml:"upstream_password"`
	// LogLevel is the minimum level logged: debug, info, warn or error.
	// Default info.
	LogLevel string `yaml:"log_level"`
	// LogFormat is the log line format: text (logfmt) or json. Default text.
	LogFormat string `yaml:"log_format"`
	// ClientOutputLimit bounds the replies queued for one client that does
	// not read them; past it the client is disconnected (Redis's
	// client-output-buffer-limit). Default 64MiB; 0 means unlimited.
	ClientOutputLimit Size `yaml:"client_output_limit"`
	// ClientQueryLimit bounds one client's unprocessed input (Redis's
	// client-query-buffer-limit). Default 1GiB; 0 means unlimited.
	ClientQueryLimit Size `yaml:"client_query_limit"`
	// MaxClients bounds concurrent client connections; more are answered
	// "-ERR max number of clients reached". Default 10000; 0 means
	// unlimited.
	MaxClients int `yaml:"max_clients"`
	// ProbeInterval is how often a PING on a side connection measures the
	// round trip to the upstream. Default 100ms; 0 disables the probe;
	// otherwise at least MinProbeInterval.
	ProbeInterval Duration `yaml:"probe_interval"`
	// EnginePoll is how often the upstream's own statistics (LATENCY
	// HISTOGRAM, INFO commandstats, INFO latencystats) are polled on a side
	// connection. Default 1s, the default HDRInterval: the verdict of an
	// interval uses the polls that ended within it, so a poll slower than
	// the interval leaves intervals with the latest poll's figures (the
	// verdict counts and reports them). 0 disables polling; otherwise at
	// least MinEnginePoll.
	EnginePoll Duration `yaml:"engine_poll"`
	// SlowlogThreshold is the total time from which a command is kept in
	// the slow log (/slowlog). Default 10ms; 0 keeps every command; a
	// negative value disables the slow log.
	SlowlogThreshold Duration `yaml:"slowlog_threshold"`
	// SlowlogLen is the number of slow commands kept, 1..MaxSlowlogLen.
	// Default 128.
	SlowlogLen int `yaml:"slowlog_len"`
	// HDRLog is the file the HdrHistogram interval log is written to, one
	// interval every HDRInterval; "" (the default) writes none.
	HDRLog string `yaml:"hdr_log"`
	// HDRInterval is the interval of the HdrHistogram log and of the
	// verdict (where the time went). Default 1s; at least MinHDRInterval.
	HDRInterval Duration `yaml:"hdr_interval"`
	// MetricsPhases lists the phases (MetricsPhaseNames) whose per-command
	// and per-shard duration histograms /metrics exports: each (command,
	// phase) costs 28 series (injected only for commands a fault injection
	// rule delayed). Default: all six; at least one.
	MetricsPhases []string `yaml:"metrics_phases"`
	// MetricsCommands caps the command labels /metrics exports: the first
	// MetricsCommands commands seen keep their own label, later ones are
	// added to command="other". Default 100; 0 means no cap.
	MetricsCommands int `yaml:"metrics_commands"`
	// Heat turns key and slot heat on: exact per-hash-slot counters and
	// sampled top keys (/keys, /slots, the live page, /metrics). Default
	// false: it costs CPU per command (docs/heat.md).
	Heat bool `yaml:"heat"`
	// HeatSample is N of "one request in N" sampled into the top keys
	// (requests over the slow log's threshold always are). Default 64; at
	// least 1.
	HeatSample int `yaml:"heat_sample"`
	// HeatMetricsKeys is how many top keys of each ranking /metrics
	// exports as key labels; 0 exports none. Default 20; at most 100.
	HeatMetricsKeys int `yaml:"heat_metrics_keys"`
	// KeyNames is how keys are shown: "plain", "pattern" (digit runs and
	// UUIDs become #) or "hash" (a keyed hash, no name). Default plain.
	KeyNames string `yaml:"key_names"`
	// Summary is the file a JSON summary of the run is written to at exit
	// and on SIGUSR1 (the /stats document since start, the verdict since
	// start and the run's settings); "" (the default) writes none.
	Summary string `yaml:"summary"`
	// Inject is a fault injection rule file (YAML; docs/injection.md):
	// delays, error replies and timeouts applied to the requests in each
	// rule's scope, the delays reported as their own phase, injected. ""
	// (the default) injects nothing.
	Inject string `yaml:"inject"`

	// TLSListen is the client-facing TLS address, host:port, beside
	// Listen (as Redis's tls-port beside port); port 0 picks one. ""
	// (the default) serves no TLS. It needs TLSCertFile and TLSKeyFile.
	TLSListen string `yaml:"tls_listen"`
	// TLSCertFile and TLSKeyFile are the PEM certificate (chain) and
	// private key TLSListen presents. The key's content is never logged,
	// exported nor printed.
	TLSCertFile string `yaml:"tls_cert_file"`
	TLSKeyFile  string `yaml:"tls_key_file"`
	// TLSCACertFile holds the PEM CA certificates client certificates are
	// verified against (Redis's tls-ca-cert-file).
	TLSCACertFile string `yaml:"tls_ca_cert_file"`
	// TLSAuthClients is Redis's tls-auth-clients: "yes" (the default, as
	// Redis's) refuses a client without a certificate signed by
	// TLSCACertFile, "optional" verifies one a client sends, "no" asks
	// for none. "yes" and "optional" need TLSCACertFile.
	TLSAuthClients string `yaml:"tls_auth_clients"`
	// TLSHandshakeTimeout bounds each TLS handshake, either side: a
	// client that connects and sends nothing is closed after it. Default
	// 10s.
	TLSHandshakeTimeout Duration `yaml:"tls_handshake_timeout"`
	// TLSProtocols is Redis's tls-protocols for the TLS listener: the
	// versions allowed, "TLSv1.2" and "TLSv1.3" separated by spaces;
	// "" (the default) allows both. TLSCiphers is Redis's tls-ciphers:
	// the TLS 1.2 cipher suites allowed, OpenSSL's or IANA's names
	// separated by ':' ("ECDHE-RSA-AES128-GCM-SHA256"); "" (the default)
	// is Go's default list. Suites Go lists as insecure are allowed only
	// when named, and warned about at start. Go's crypto/tls cannot
	// restrict the TLS 1.3 suites (Redis's tls-ciphersuites) nor let the
	// server's order win (tls-prefer-server-ciphers): neither has a key.
	// The names are checked by internal/tlsconf.ParseSuites.
	TLSProtocols string `yaml:"tls_protocols"`
	TLSCiphers   string `yaml:"tls_ciphers"`
	// FacadeTLS makes Route "facade"'s virtual nodes serve TLS only, with
	// TLSCertFile and TLSKeyFile (and TLSCACertFile and TLSAuthClients for
	// client certificates), as the nodes of a Redis Cluster with
	// tls-cluster yes and port 0: the ports CLUSTER SLOTS, SHARDS and
	// NODES and MOVED name are then TLS ports. Listen stays plaintext.
	// Only with Route "facade". Default false.
	FacadeTLS bool `yaml:"facade_tls"`
	// UpstreamTLS makes every connection to the engines speak TLS (the
	// clients' engine connections and respmeter's side connections), the
	// engine's certificate verified against UpstreamTLSCACertFile (or the
	// system's roots) and UpstreamTLSServerName (or the host dialed).
	// Never a fallback to plaintext. Default false.
	UpstreamTLS bool `yaml:"upstream_tls"`
	// UpstreamTLSCACertFile holds the PEM CA certificates the engines'
	// certificates are verified against; "" uses the system's roots.
	UpstreamTLSCACertFile string `yaml:"upstream_tls_ca_cert_file"`
	// UpstreamTLSCertFile and UpstreamTLSKeyFile are the client
	// certificate and key respmeter presents to the engines (for an
	// engine with tls-auth-clients yes); both or neither.
	UpstreamTLSCertFile string `yaml:"upstream_tls_cert_file"`
	UpstreamTLSKeyFile  string `yaml:"upstream_tls_key_file"`
	// UpstreamTLSServerName is the name the engines' certificates are
	// verified for; "" uses the host of each address dialed.
	UpstreamTLSServerName string `yaml:"upstream_tls_server_name"`
	// UpstreamTLSInsecureSkipVerify accepts any engine certificate, with
	// a warning logged at start: for tests only. Default false.
	UpstreamTLSInsecureSkipVerify bool `yaml:"upstream_tls_insecure_skip_verify"`
	// UpstreamTLSProtocols and UpstreamTLSCiphers are TLSProtocols and
	// TLSCiphers for every connection to the engines, with the same
	// syntax and defaults.
	UpstreamTLSProtocols string `yaml:"upstream_tls_protocols"`
	UpstreamTLSCiphers   string `yaml:"upstream_tls_ciphers"`
}

// MetricsPhaseNames are the phases Config.MetricsPhases may list, in the
// order of the phase label of respmeter_command_duration_seconds.
func MetricsPhaseNames() []string {
	return []string{"total", "upstream", "proxy", "service", "queue", "injected"}
}

// Default returns the configuration used when nothing overrides it.
func Default() Config {
	return Config{
		Listen:       "127.0.0.1:6380",
		Upstream:     "127.0.0.1:6379",
		Route:        RouteNone,
		UpstreamMode: UpstreamPrivate,
		Admin:        "127.0.0.1:9121",
		Loops:        0,
		Measure:      true,
		DrainTimeout: Duration(5 * time.Second),
		DialTimeout:  Duration(2 * time.Second),
		LogLevel:     "info",
		LogFormat:    "text",

		ClientOutputLimit: 64 * MiB,
		ClientQueryLimit:  GiB,
		MaxClients:        10000,
		ProbeInterval:     Duration(100 * time.Millisecond),
		EnginePoll:        Duration(time.Second),
		SlowlogThreshold:  Duration(10 * time.Millisecond),
		SlowlogLen:        128,
		HDRLog:            "",
		HDRInterval:       Duration(time.Second),
		MetricsPhases:     MetricsPhaseNames(),
		MetricsCommands:   100,
		Heat:              false,
		HeatSample:        64,
		HeatMetricsKeys:   20,
		KeyNames:          "plain",
		Summary:           "",

		TLSAuthClients:      "yes",
		TLSHandshakeTimeout: Duration(10 * time.Second),

		TopologyRefresh: Duration(30 * time.Second),
		UpstreamConns:   1,
		UpstreamTimeout: Duration(5 * time.Second),
	}
}

// Routed reports whether c routes over shards (Route "slots", "pinned" or
// "facade") rather than forwarding to Upstream.
func (c *Config) Routed() bool {
	return c.Route == RouteSlots || c.Route == RoutePinned || c.Route == RouteFacade
}

// FieldError is one problem with one configuration key. Load, ApplyEnv, Set
// and Validate return these, several at once through errors.Join; walk them
// with errors.As or by unwrapping the join.
type FieldError struct {
	// Source says where the value came from: a file name, an environment
	// variable ("RESPMETER_LOOPS"), a flag ("--loops"); "" when unknown.
	Source string
	// Line is the 1-based line in Source, 0 when not from a file.
	Line int
	// Key is the YAML key, e.g. "drain_timeout".
	Key string
	// Reason is the human-readable problem, e.g. "must be >= 0, got -1".
	Reason string
	// Err is ErrUnknownKey or ErrInvalid.
	Err error

	// entry is the 1-based entry of a list key (shards) at fault, 0 for
	// the whole key; Parse then reports that entry's line.
	entry int
	// about lists the other keys a cross-field check read: Parse drops the
	// error when one of them failed to decode (it then held its default,
	// and the error would be about a value nobody wrote).
	about []string
}

// Error formats e as "source:line: key "k": reason", leaving out the parts
// that are unknown; unknown keys read "source:line: unknown key "k"".
func (e *FieldError) Error() string {
	var b strings.Builder
	if e.Source != "" {
		b.WriteString(e.Source)
		if e.Line > 0 {
			b.WriteString(":")
			b.WriteString(strconv.Itoa(e.Line))
		}
		b.WriteString(": ")
	}
	if errors.Is(e.Err, ErrUnknownKey) {
		fmt.Fprintf(&b, "unknown key %q", e.Key)
		if e.Reason != "" {
			b.WriteString(" (" + e.Reason + ")")
		}
		return b.String()
	}
	if e.Key != "" {
		fmt.Fprintf(&b, "key %q: ", e.Key)
	}
	b.WriteString(e.Reason)
	return b.String()
}

// Unwrap returns ErrUnknownKey or ErrInvalid.
func (e *FieldError) Unwrap() error { return e.Err }

// invalid returns an ErrInvalid FieldError for key with no position.
func invalid(key, format string, args ...any) *FieldError {
	return &FieldError{Key: key, Reason: fmt.Sprintf(format, args...), Err: ErrInvalid}
}

// reads records the other keys the check behind e read (see about).
func (e *FieldError) reads(keys ...string) *FieldError {
	e.about = append(e.about, keys...)
	return e
}

// FieldErrors flattens err (as returned by this package, possibly joined)
// into its FieldErrors. Errors of other types are returned as FieldErrors
// with only Reason set.
func FieldErrors(err error) []*FieldError {
	if err == nil {
		return nil
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var out []*FieldError
		for _, e := range j.Unwrap() {
			out = append(out, FieldErrors(e)...)
		}
		return out
	}
	var fe *FieldError
	if errors.As(err, &fe) {
		return []*FieldError{fe}
	}
	return []*FieldError{{Reason: err.Error(), Err: err}}
}

// Validate checks every value and the combinations between them. It returns
// nil or the errors.Join of one *FieldError (without Source) per problem.
func (c *Config) Validate() error {
	var errs []error
	add := func(e *FieldError) {
		if e != nil {
			errs = append(errs, e)
		}
	}
	switch {
	case c.Listen != ListenOff:
		add(checkHostPort("listen", c.Listen, 0, "host:port or \"off\""))
	case c.TLSListen == "":
		add(invalid("listen", "off needs tls_listen: with both listeners off no client could connect").reads("tls_listen"))
	case c.Route == RouteFacade:
		add(invalid("listen", "off is not for route facade: its virtual nodes serve plaintext, beside listen").reads("route"))
	}
	for _, e := range c.checkTLS() {
		add(e)
	}
	add(checkHostPort("upstream", c.Upstream, 1, "host:port"))
	add(checkEnum("route", c.Route, routes))
	add(checkPeriod("topology_refresh", c.TopologyRefresh, MinTopologyRefresh, false))
	for _, e := range c.checkRouting() {
		add(e)
	}
	add(c.checkUpstreamMode())
	if c.UpstreamConns < 0 {
		add(invalid("upstream_conns", "must be >= 0 (0 means 1), got %d", c.UpstreamConns))
	}
	if c.Admin != AdminOff {
		add(checkHostPort("admin", c.Admin, 0, `host:port or "off"`))
	}
	switch {
	case c.Loops < 0:
		add(invalid("loops", "must be >= 0, got %d", c.Loops))
	case c.Loops > MaxLoops:
		add(invalid("loops", "must be <= %d, got %d", MaxLoops, c.Loops))
	}
	if c.DrainTimeout <= 0 {
		add(invalid("drain_timeout", "must be > 0, got %s", c.DrainTimeout))
	}
	if c.UpstreamUser != "" && c.UpstreamPassword == "" {
		add(invalid("upstream_user", "needs upstream_password (AUTH user password)"))
	}
	if c.DialTimeout <= 0 {
		add(invalid("dial_timeout", "must be > 0, got %s", c.DialTimeout))
	}
	add(checkPeriod("upstream_timeout", c.UpstreamTimeout, MinUpstreamTimeout, true))
	add(checkEnum("log_level", c.LogLevel, logLevels))
	add(checkEnum("log_format", c.LogFormat, logFormats))
	if c.ClientOutputLimit < 0 {
		add(invalid("client_output_limit", "must be >= 0 (0 means unlimited), got %d", c.ClientOutputLimit))
	}
	if c.ClientQueryLimit < 0 {
		add(invalid("client_query_limit", "must be >= 0 (0 means unlimited), got %d", c.ClientQueryLimit))
	}
	if c.MaxClients < 0 {
		add(invalid("max_clients", "must be >= 0 (0 means unlimited), got %d", c.MaxClients))
	}
	add(checkPeriod("probe_interval", c.ProbeInterval, MinProbeInterval, true))
	add(checkPeriod("engine_poll", c.EnginePoll, MinEnginePoll, true))
	add(checkPeriod("hdr_interval", c.HDRInterval, MinHDRInterval, false))
	if len(c.MetricsPhases) == 0 {
		add(invalid("metrics_phases", "must list at least one of %s", strings.Join(MetricsPhaseNames(), ",")))
	}
	for i, ph := range c.MetricsPhases {
		if e := checkEnum("metrics_phases", ph, MetricsPhaseNames()); e != nil {
			e.entry = i + 1
			add(e)
		}
	}
	if c.HeatSample < 1 {
		add(invalid("heat_sample", "must be >= 1, got %d", c.HeatSample))
	}
	if c.HeatMetricsKeys < 0 || c.HeatMetricsKeys > 100 {
		add(invalid("heat_metrics_keys", "must be in 0..100, got %d", c.HeatMetricsKeys))
	}
	add(checkEnum("key_names", c.KeyNames, []string{"plain", "pattern", "hash"}))
	if c.MetricsCommands < 0 {
		add(invalid("metrics_commands", "must be >= 0 (0 means no cap), got %d", c.MetricsCommands))
	}
	switch {
	case c.SlowlogLen <= 0:
		add(invalid("slowlog_len", "must be > 0, got %d", c.SlowlogLen))
	case c.SlowlogLen > MaxSlowlogLen:
		add(invalid("slowlog_len", "must be <= %d, got %d", MaxSlowlogLen, c.SlowlogLen))
	}

	// Cross-field checks run only on addresses that parsed.
	if len(errs) == 0 {
		if !c.Routed() && sameAddr(c.Listen, c.Upstream) {
			add(invalid("upstream", "must differ from listen (%q): the proxy would connect to itself", c.Listen).reads("listen", "route"))
		}
		if c.Admin != AdminOff && !hasPortZero(c.Admin) && !hasPortZero(c.Listen) && sameAddr(c.Listen, c.Admin) {
			add(invalid("admin", "must differ from listen (%q)", c.Listen).reads("listen"))
		}
	}
	return errors.Join(errs...)
}

// validZone reports whether z is an acceptable ShardZones entry: 1 to 128
// printable ASCII characters, no space.
func validZone(z string) bool {
	if z == "" || len(z) > 128 {
		return false
	}
	for i := range len(z) {
		if z[i] <= ' ' || z[i] > '~' {
			return false
		}
	}
	return true
}

// checkRouting checks Shards, Cluster and PinBy: each address a dialable
// host:port that is not the listen address, no shard twice; and against
// Route: with "none" none of them may be set; with "slots" or "pinned"
// exactly one of Shards and Cluster must be; PinBy only with "pinned". An
// unknown Route is left to Validate's enum check.
func (c *Config) checkRouting() []*FieldError {
	var errs []*FieldError
	if len(c.Shards) > MaxShards {
		errs = append(errs, invalid("shards", "must list at most %d addresses, got %d", MaxShards, len(c.Shards)))
	}
	seen := make(map[string]int, len(c.Shards))
	for i, a := range c.Shards {
		if e := checkDialAddr("shards", a, c.Listen); e != nil {
			errs = append(errs, entryError(e, i))
			continue
		}
		if j, dup := seen[a]; dup {
			errs = append(errs, repeatsEntry("shards", i, j, a))
			continue
		}
		seen[a] = i
	}
	if c.Cluster != "" {
		if e := checkDialAddr("cluster", c.Cluster, c.Listen); e != nil {
			errs = append(errs, e)
		}
	}
	if len(c.ShardZones) > 0 && len(c.ShardZones) != len(c.Shards) {
		errs = append(errs, invalid("shard_zones", "needs one zone per shard, in shard order: %d for %d shards",
			len(c.ShardZones), len(c.Shards)).reads("shards"))
	}
	for i, z := range c.ShardZones {
		if !validZone(z) {
			errs = append(errs, entryError(invalid("shard_zones", "must be 1 to 128 printable characters without spaces, got %q", z), i))
		}
	}
	switch c.Route {
	case RouteNone:
		if len(c.Shards) > 0 {
			errs = append(errs, invalid("shards", "needs route slots, pinned or facade, got route %q", c.Route).reads("route"))
		}
		if c.Cluster != "" {
			errs = append(errs, invalid("cluster", "needs route slots, pinned or facade, got route %q", c.Route).reads("route"))
		}
	case RouteSlots, RoutePinned, RouteFacade:
		switch {
		case len(c.Shards) > 0 && c.Cluster != "":
			errs = append(errs, invalid("cluster", "give shards or cluster, not both (route %s)", c.Route).reads("shards"))
		case len(c.Shards) == 0 && c.Cluster == "":
			errs = append(errs, invalid("route", "route %s needs shards (standalone engines) or cluster (a cluster node)", c.Route).
				reads("shards", "cluster"))
		}
	default:
		return errs // the route itself is reported by the enum check
	}
	errs = append(errs, c.checkFacadeListen()...)
	switch {
	case c.PinBy == "":
	case c.Route != RoutePinned:
		errs = append(errs, invalid("pin_by", "needs route pinned, got route %q", c.Route).reads("route"))
	default:
		if e := checkEnum("pin_by", c.PinBy, pinPolicies); e != nil {
			errs = append(errs, e)
		}
	}
	return errs
}

// entryError marks e as about entry i (0-based) of a list key, its reason
// prefixed "entry N: ".
func entryError(e *FieldError, i int) *FieldError {
	e.Reason = fmt.Sprintf("entry %d: %s", i+1, e.Reason)
	e.entry = i + 1
	return e
}

// repeatsEntry is the error of entry i of list key repeating entry j
// (both 0-based), whose value is a.
func repeatsEntry(key string, i, j int, a string) *FieldError {
	e := invalid(key, "entry %d repeats entry %d (%q)", i+1, j+1, a)
	e.entry = i + 1
	return e
}

// checkFacadeListen checks FacadeListen: only with Route "facade", which
// needs at least one address per shard; each a host:port (port 0 allowed),
// none twice (but port 0), none equal to Listen.
func (c *Config) checkFacadeListen() []*FieldError {
	var errs []*FieldError
	if c.Route != RouteFacade {
		if len(c.FacadeListen) > 0 {
			errs = append(errs, invalid("facade_listen", "needs route facade, got route %q", c.Route).reads("route"))
		}
		return errs
	}
	seen := map[string]int{}
	for i, a := range c.FacadeListen {
		if e := checkHostPort("facade_listen", a, 0, "host:port"); e != nil {
			errs = append(errs, entryError(e, i))
			continue
		}
		if !hasPortZero(a) {
			if j, dup := seen[a]; dup {
				errs = append(errs, repeatsEntry("facade_listen", i, j, a))
				continue
			}
			seen[a] = i
			if !hasPortZero(c.Listen) && sameAddr(c.Listen, a) {
				e := invalid("facade_listen", "entry %d must differ from listen (%q)", i+1, c.Listen).reads("listen")
				e.entry = i + 1
				errs = append(errs, e)
			}
		}
	}
	if len(c.FacadeListen) == 0 {
		errs = append(errs, invalid("facade_listen", "route facade needs at least one address").reads("route"))
	} else if n := len(c.Shards); len(c.FacadeListen) < n {
		errs = append(errs, invalid("facade_listen", "route facade needs one address per shard, in shard order: %d for %d shards",
			len(c.FacadeListen), n).reads("route", "shards"))
	}
	return errs
}

// checkUpstreamMode checks UpstreamMode: one of upstreamModes, and
// "shared" only with Route "none" or "slots" (a pinned connection already
// has exactly one upstream connection, its shard's). An unknown Route is
// left to Validate's enum check.
func (c *Config) checkUpstreamMode() *FieldError {
	if e := checkEnum("upstream_mode", c.UpstreamMode, upstreamModes); e != nil {
		return e
	}
	if c.UpstreamMode == UpstreamShared && c.Route == RoutePinned {
		return invalid("upstream_mode", "shared needs route none or slots, got route %q", c.Route).reads("route")
	}
	return nil
}

// checkDialAddr checks that v is an address to connect to, host:port with
// a non-empty host and a port in 1..65535, that is not the listen address.
func checkDialAddr(key, v, listen string) *FieldError {
	if e := checkHostPort(key, v, 1, "host:port"); e != nil {
		return e
	}
	if host, _, _ := net.SplitHostPort(v); host == "" {
		return invalid(key, "must be host:port with a host, got %q", v)
	}
	if sameAddr(listen, v) {
		return invalid(key, "%q is the listen address: the proxy would connect to itself", v).reads("listen")
	}
	return nil
}

// checkHostPort checks that v is host:port with a numeric port in
// minPort..65535; want describes the accepted forms for the message.
func checkHostPort(key, v string, minPort int, want string) *FieldError {
	if v == "" {
		return invalid(key, "must be %s, got an empty string", want)
	}
	_, port, err := net.SplitHostPort(v)
	if err != nil {
		return invalid(key, "must be %s, got %q", want, v)
	}
	n, err := strconv.Atoi(port)
	if err != nil || n < minPort || n > 65535 {
		return invalid(key, "port must be a number in %d..65535, got %q", minPort, v)
	}
	return nil
}

// checkPeriod checks that d is at least lowest, or 0 when zeroOff (0 then
// turns the task off).
func checkPeriod(key string, d Duration, lowest time.Duration, zeroOff bool) *FieldError {
	switch {
	case zeroOff && d == 0:
		return nil
	case d < 0 && zeroOff:
		return invalid(key, "must be >= 0 (0 disables), got %s", d)
	case d <= 0:
		return invalid(key, "must be > 0, got %s", d)
	case time.Duration(d) < lowest:
		if zeroOff {
			return invalid(key, "must be 0 (off) or at least %s, got %s", lowest, d)
		}
		return invalid(key, "must be at least %s, got %s", lowest, d)
	}
	return nil
}

// checkEnum checks that v is one of allowed.
func checkEnum(key, v string, allowed []string) *FieldError {
	for _, a := range allowed {
		if v == a {
			return nil
		}
	}
	return invalid(key, "must be one of %s, got %q", strings.Join(allowed, "|"), v)
}

// hasPortZero reports whether the host:port addr asks for a free port.
func hasPortZero(addr string) bool {
	_, port, err := net.SplitHostPort(addr)
	return err == nil && port == "0"
}

// sameAddr reports whether the listen address and other (host:port) surely
// name the same socket: same port and the same host, or a wildcard listen
// host with a loopback or wildcard other host. A remote host on the same
// port (a drop-in proxy on :6379 in front of redis.internal:6379) is fine.
func sameAddr(listen, other string) bool {
	hl, pl, errL := net.SplitHostPort(listen)
	ho, po, errO := net.SplitHostPort(other)
	if errL != nil || errO != nil || pl != po {
		return false
	}
	nl, no := normHost(hl), normHost(ho)
	switch {
	case nl == no:
		return true
	case nl == "":
		return IsLoopback(no)
	case no == "":
		return IsLoopback(nl)
	}
	return false
}

// normHost maps the wildcard spellings to "" and "localhost" to
// "127.0.0.1"; other hosts are returned unchanged.
func normHost(h string) string {
	switch h {
	case "", "0.0.0.0", "::":
		return ""
	case "localhost":
		return "127.0.0.1"
	}
	return h
}

// IsLoopback reports whether host (no port) is "localhost" or a loopback IP.
// The wildcard hosts ("", "0.0.0.0", "::") are not loopback.
func IsLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// checkTLS checks the TLS keys: a TLS listener needs its certificate and
// key, a client certificate policy other than "no" needs the CA, upstream
// TLS files only with upstream_tls. The files are read by the proxy at
// start (internal/tlsconf), which reports what is wrong in them.
func (c *Config) checkTLS() []*FieldError {
	var errs []*FieldError
	add := func(e *FieldError) {
		if e != nil {
			errs = append(errs, e)
		}
	}
	add(checkEnum("tls_auth_clients", c.TLSAuthClients, []string{"no", "optional", "yes"}))
	if c.TLSHandshakeTimeout <= 0 {
		add(invalid("tls_handshake_timeout", "must be > 0, got %s", c.TLSHandshakeTimeout))
	}
	if c.FacadeTLS {
		if c.Route != RouteFacade {
			add(invalid("facade_tls", "needs route facade, got route %q", c.Route).reads("route"))
		} else if c.TLSCertFile == "" || c.TLSKeyFile == "" {
			add(invalid("facade_tls", "needs tls_cert_file and tls_key_file").reads("tls_cert_file", "tls_key_file"))
		}
	}
	for _, side := range []struct{ prefix, protocols, ciphers string }{
		{"tls", c.TLSProtocols, c.TLSCiphers},
		{"upstream_tls", c.UpstreamTLSProtocols, c.UpstreamTLSCiphers},
	} {
		if _, err := tlsconf.ParseSuites(side.protocols, ""); err != nil {
			add(invalid(side.prefix+"_protocols", "%v", err))
		} else if _, err := tlsconf.ParseSuites(side.protocols, side.ciphers); err != nil {
			add(invalid(side.prefix+"_ciphers", "%v", err).reads(side.prefix + "_protocols"))
		}
	}
	if c.TLSListen == "" && !c.FacadeTLS {
		for key, v := range map[string]string{"tls_protocols": c.TLSProtocols, "tls_ciphers": c.TLSCiphers} {
			if v != "" {
				add(invalid(key, "only with tls_listen or facade_tls").reads("tls_listen"))
			}
		}
	}
	if c.TLSListen != "" || c.FacadeTLS {
		if (c.TLSAuthClients == "yes" || c.TLSAuthClients == "optional") && c.TLSCACertFile == "" {
			add(invalid("tls_auth_clients", "%s needs tls_ca_cert_file (or tls_auth_clients no)", c.TLSAuthClients).reads("tls_ca_cert_file"))
		}
	}
	if c.TLSListen != "" {
		add(checkHostPort("tls_listen", c.TLSListen, 0, "host:port"))
		if c.TLSCertFile == "" || c.TLSKeyFile == "" {
			add(invalid("tls_listen", "needs tls_cert_file and tls_key_file").reads("tls_cert_file", "tls_key_file"))
		}
		if sameAddr(c.Listen, c.TLSListen) && !hasPortZero(c.TLSListen) {
			add(invalid("tls_listen", "must differ from listen %s", c.Listen).reads("listen"))
		}
	}
	if !c.UpstreamTLS {
		for key, v := range map[string]bool{
			"upstream_tls_ca_cert_file":         c.UpstreamTLSCACertFile != "",
			"upstream_tls_cert_file":            c.UpstreamTLSCertFile != "",
			"upstream_tls_key_file":             c.UpstreamTLSKeyFile != "",
			"upstream_tls_server_name":          c.UpstreamTLSServerName != "",
			"upstream_tls_insecure_skip_verify": c.UpstreamTLSInsecureSkipVerify,
			"upstream_tls_protocols":            c.UpstreamTLSProtocols != "",
			"upstream_tls_ciphers":              c.UpstreamTLSCiphers != "",
		} {
			if v {
				add(invalid(key, "only with upstream_tls true").reads("upstream_tls"))
			}
		}
	} else if (c.UpstreamTLSCertFile == "") != (c.UpstreamTLSKeyFile == "") {
		add(invalid("upstream_tls_cert_file", "give upstream_tls_cert_file and upstream_tls_key_file together").reads("upstream_tls_key_file"))
	}
	slices.SortFunc(errs, func(a, b *FieldError) int { return strings.Compare(a.Key, b.Key) })
	return errs
}
