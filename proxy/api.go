// Package proxy is respmeter's data path: a gnet event-loop server that accepts
// Redis-protocol clients, frames their requests and the engines' replies,
// sends each request to the engine connection its shape picks (one engine
// over a private or a shared connection, a shard pinned per client, the
// shard of its hash slot, or the virtual nodes of a facade cluster), gives
// the replies back in request order and records per-command timings into a
// metrics.Set.
//
// Concurrency: every connection, its upstream and its in-flight FIFO belong to
// one event loop and are touched only by that loop's goroutine. Start, Addr and
// Stop may be called from any goroutine.
package proxy

import (
	"crypto/tls"
	"log/slog"
	"time"

	"github.com/respmeter/respmeter/internal/respconn"
	"github.com/respmeter/respmeter/internal/tlsconf"
	"github.com/respmeter/respmeter/metrics"
	"github.com/respmeter/respmeter/metrics/slowlog"
	"github.com/respmeter/respmeter/routing"
)

// Config configures a Proxy. The zero value is not usable: Listen (or
// TLSListen) and Upstream are required.
type Config struct {
	// Listen is the client-facing address, host:port. Port 0 picks a free
	// port; Addr reports the one chosen. "" serves no plaintext clients
	// (as Redis's port 0 beside tls-port): only with TLSListen, and not
	// with RouteFacade.
	Listen string
	// Upstream is the engine's address, host:port (Route "" or RouteNone).
	Upstream string
	// Route is RouteNone (the default when empty: every connection goes
	// to Upstream), RouteSlots, RoutePinned or RouteFacade; the last three
	// need Shards or Cluster.
	Route string
	// Shards are standalone engines, host:port, that split the 16384 hash
	// slots in contiguous ranges as "redis-cli --cluster create" assigns
	// them (3 shards: 0-5460, 5461-10922, 10923-16383).
	Shards []string
	// ShardZones are the availability zones of Shards, one per shard in
	// the same order, or empty: RouteFacade's CLUSTER SHARDS gives each
	// virtual node its shard's zone (availability-zone, as a Valkey 9.1
	// cluster node; with Cluster the cluster's own are given instead).
	ShardZones []string
	// Cluster is the address of one node of a Redis/Valkey Cluster, whose
	// shard map (CLUSTER SHARDS, or CLUSTER SLOTS) is read at Start and
	// refreshed every TopologyRefresh and after a MOVED reply.
	Cluster string
	// FacadeListen are the listeners of RouteFacade's virtual nodes,
	// host:port each (port 0 picks a free port), one per shard in shard
	// order (with Cluster, the masters in the order of the shard map, one
	// that joins later taking the next address); addresses beyond the
	// shards are spare nodes that own no slot, and masters beyond the
	// addresses have their slots forwarded by every node. Only with
	// RouteFacade, which needs at least one per shard of Shards.
	FacadeListen []string
	// FacadeTLS makes RouteFacade's virtual nodes serve TLS only, with
	// TLS, as the nodes of a Redis Cluster with tls-cluster yes and port
	// 0: the ports they name in CLUSTER SLOTS, SHARDS and NODES and in
	// MOVED and ASK are TLS ports, which a cluster client then connects to
	// with TLS. Listen stays a plaintext endpoint. Needs TLS.
	FacadeTLS bool
	// TopologyRefresh is how often the cluster's shard map is re-read.
	// 0 means 30 s.
	TopologyRefresh time.Duration
	// UpstreamMode is UpstreamPrivate (the default: one upstream
	// connection per client connection, per shard) or UpstreamShared:
	// requests of the clients of one event loop are pipelined onto
	// UpstreamConns shared connections per shard (per protocol), replies
	// demultiplexed in order; a client that needs connection state moves to
	// private connections (see client.needsPause). Not with RoutePinned.
	UpstreamMode string
	// AuthCheck is how often, with UpstreamMode shared, respmeter checks
	// whether the engines accept a new connection without a password (see
	// auth.go); 0 means 1 s.
	AuthCheck time.Duration
	// UpstreamConns is the number of shared upstream connections per event
	// loop, per shard and protocol (RESP2, RESP3); 0 means 1.
	UpstreamConns int
	// PinBy picks the shard of a client connection under RoutePinned:
	// PinConnection (round-robin at connect; the default) or PinFirstKey.
	PinBy string
	// Loops is the number of gnet event loops; 0 means one per CPU.
	Loops int
	// Measure turns timing and histograms on. With false the proxy only
	// frames and forwards (the cost baseline for --measure=false).
	Measure bool
	// DrainTimeout bounds how long Stop waits for pending replies before
	// closing connections. 0 means 5 s.
	DrainTimeout time.Duration
	// DialTimeout bounds an upstream dial. 0 means 2 s.
	DialTimeout time.Duration
	// UpstreamTimeout is how long an engine connection with requests
	// pending may go without a reply byte: then they fail, in order, with
	// "-ERR upstream <host:port> not answering", the connection is closed
	// and (with Cluster) the shard map is re-read at once, so that a
	// master frozen without a reset (SIGSTOP, a partition) is noticed and
	// a failover picked up. A blocking command at the head of the
	// connection adds its own timeout (BLPOP 5: UpstreamTimeout + 5 s;
	// BLPOP 0, WAIT n 0: never). Checked by each event loop every quarter
	// of it, so a timeout fires between UpstreamTimeout and 1.5 times it
	// after the last reply byte. 0 (the default here; respmeter proxy's is
	// 5 s), or a negative value, turns it off.
	UpstreamTimeout time.Duration
	// UpstreamUser and UpstreamPassword authenticate respmeter's own side
	// connections to the engines (AUTH [user] password first): the
	// cluster's shard map (Cluster) and the command table (Commands nil).
	// Clients' connections never get them: clients authenticate
	// themselves. Empty: no AUTH. Never logged nor part of an error.
	UpstreamUser, UpstreamPassword string
	// ClientOutputLimit bounds, in bytes, the replies queued for one client
	// that does not read them (Redis's client-output-buffer-limit): past it
	// the client is disconnected. 0 means DefaultClientOutputLimit; -1
	// means unlimited.
	ClientOutputLimit int
	// ClientQueryLimit bounds, in bytes, one client's unprocessed input:
	// an incomplete request, or complete ones the upstream has not taken
	// yet (Redis's client-query-buffer-limit). 0 means
	// DefaultClientQueryLimit; -1 means unlimited.
	ClientQueryLimit int
	// MaxClients bounds concurrent client connections; one more is answered
	// "-ERR max number of clients reached" and closed, as Redis does. 0
	// means DefaultMaxClients; -1 means unlimited.
	MaxClients int
	// SlowLog, when not nil, receives every command whose total time is at
	// least its threshold, with its phases, command name, first key (never
	// a value or a credential) and client identity.
	SlowLog *slowlog.Log
	// Inject, when not nil, is a fault injection rule file (LoadInjection;
	// see inject.go and docs/injection.md): delays before forwarding or
	// before the reply, error replies, timeouts and connection resets
	// applied to the requests in each rule's scope; AddInjection and
	// RemoveInjection change the rules at run time. Rules' windows (at:,
	// for:) count from New, which applies them (New keeps and changes
	// the Injection: do not give one to two proxies). No rules cost one
	// branch per request. Delays are timed by a thread of their own
	// (injclock.go), which keeps its P while it waits in ppoll: give the
	// process a P more than Loops (GOMAXPROCS), as respmeter proxy does,
	// or a loop woken while every P is held waits for the runtime to take
	// one back (up to 10 ms).
	Inject *Injection
	// TCPInfoInterval is how often each event loop samples the kernel's RTT
	// estimate (TCP_INFO tcpi_rtt) of one client socket and its upstream
	// socket. 0 means 1 s; negative disables sampling.
	TCPInfoInterval time.Duration
	// Metrics receives the timings; it must have been created with at
	// least Loops loops (metrics.NewSet), labelled with Commands.Labels()
	// (commands whose ID has no label count as "other"). Nil disables
	// recording.
	Metrics *metrics.Set
	// Commands is the engine's effective command table (FetchCommands):
	// each command's metric ID, arity, flags, key specs and tips. Nil:
	// Start reads it with FetchCommands.
	Commands *routing.Resolver
	// Logger receives the proxy's own log lines; nil discards them.
	Logger *slog.Logger

	// TLSListen is the client-facing TLS address, host:port (port 0 picks
	// one; Proxy.TLSAddr tells which), served with TLS (internal/tlsconf.
	// Server builds it): as Redis's tls-port beside port. "" serves no TLS.
	TLSListen string
	TLS       *tls.Config
	// UpstreamTLS, when set, makes every connection to the engines speak
	// TLS with it, side connections included: each handshake with the
	// configuration it has at that moment (a tlsconf.Reloader's Dialer
	// follows its files; tlsconf.NewDialer of internal/tlsconf.Client's
	// stays). nil speaks plaintext.
	UpstreamTLS *tlsconf.Dialer
	// TLSHandshakeTimeout bounds each TLS handshake, either side; 0 means
	// DefaultTLSHandshakeTimeout.
	TLSHandshakeTimeout time.Duration
	// TLSMetrics receives the handshake times and failures; nil records
	// nothing.
	TLSMetrics *metrics.TLS
}

// Routing modes (Config.Route).
const (
	// RouteNone forwards every client connection to Config.Upstream.
	RouteNone = "none"
	// RouteSlots routes every command by the hash slot of its keys (Redis
	// Cluster specification, "Key distribution model") to the shard that
	// owns the slot, as a cluster client does.
	RouteSlots = "slots"
	// RoutePinned binds each client connection to one shard and sends all
	// of its commands there, pipelines intact: the perfectly routed ceiling.
	RoutePinned = "pinned"
)

// Upstream connection modes (Config.UpstreamMode).
const (
	UpstreamPrivate = "private"
	UpstreamShared  = "shared"
)

// Pin policies (Config.PinBy) for RoutePinned.
const (
	// PinConnection assigns shards to client connections round-robin at
	// connect.
	PinConnection = "connection"
	// PinFirstKey assigns a client connection the shard of the first key
	// it uses (requests before it are held).
	PinFirstKey = "first-key"
)

// Defaults, as in redis-server 7.0 (client-output-buffer-limit for normal
// clients is unlimited there; a proxy needs a bound, so 64 MiB).
const (
	DefaultClientOutputLimit = 64 << 20
	DefaultClientQueryLimit  = 1 << 30
	DefaultMaxClients        = 10000
)

// login is the credentials of respmeter's side connections (UpstreamUser,
// UpstreamPassword) as respconn.Dial takes them.
func (c Config) login() respconn.Options {
	return respconn.Options{User: c.UpstreamUser, Password: c.UpstreamPassword, TLS: c.UpstreamTLS}
}
