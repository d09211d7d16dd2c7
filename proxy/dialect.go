package proxy

import (
	"context"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/respmeter/respmeter/internal/resp"
	"github.com/respmeter/respmeter/internal/respconn"
)

// The requests that tell the engine's parsing rules apart (resp.Dialect),
// each answered with an error reply and running no command on any engine:
//
//   - dialectQuote, an inline `""x`: redis-server's sdssplitargs refuses a
//     closing quote followed by more of the argument ("unbalanced quotes in
//     request"); an engine whose closing quote ends only the quoted section
//     (Valkey 9.1) reads the argument x and answers "unknown command 'x'".
//   - dialectCRLF, an empty bulk followed by "xx" instead of CR LF:
//     redis-server skips the two bytes unchecked and answers that the
//     empty command name is unknown; Valkey 9.1.2 answers "invalid CRLF in
//     request".
const (
	dialectQuote = "\"\"x\r\n"
	dialectCRLF  = "*1\r\n$0\r\nxx"
)

// probeDialect asks the engine whose command table respmeter reads
// (tableEngine) how it parses the requests on which engines differ, so
// that a client's malformed or unusual request gets through respmeter the
// answer the engine itself gives (TestBadInput). Each probe goes on a
// connection of its own, authenticated as cfg says, since an engine closes
// a connection after a protocol error; a "Protocol error" reply to a probe
// means the engine refuses what it tests. An engine that does not answer
// leaves that rule at redis-server's, with a debug line to log.
func probeDialect(cfg Config, log *slog.Logger) resp.Dialect {
	addr, _ := tableEngine(cfg)
	refuses := func(req string) (bool, bool) {
		v, err := askTableEngine(cfg, func(c *respconn.Conn, timeout time.Duration) (respconn.Value, error) {
			return c.DoRaw(timeout, []byte(req))
		})
		if err != nil {
			log.Debug("engine's parsing rules not probed; redis-server's are used", "engine", addr, "err", err)
			return false, false
		}
		return v.IsError() && strings.HasPrefix(v.Str, "ERR Protocol error"), true
	}
	var d resp.Dialect
	if refused, ok := refuses(dialectQuote); ok {
		d.QuoteJoins = !refused
	}
	if refused, ok := refuses(dialectCRLF); ok {
		d.StrictCRLF = refused
	}
	if d != (resp.Dialect{}) {
		log.Info("the engine parses some requests otherwise than redis-server; respmeter follows its rules", "engine", addr,
			"quote_joins", d.QuoteJoins, "strict_crlf", d.StrictCRLF)
	}
	return d
}

// engineShardIDs reports whether a cluster of the engine whose command
// table respmeter reads (tableEngine) gives each shard an "id" in CLUSTER
// SHARDS: Valkey 9.0 on, by INFO server's valkey_version (a standalone
// engine behind the facade has no CLUSTER SHARDS to ask). An engine that
// does not answer gives false, Redis's shape.
func engineShardIDs(cfg Config) bool {
	v, err := askTableEngine(cfg, func(c *respconn.Conn, timeout time.Duration) (respconn.Value, error) {
		return c.Do(timeout, "INFO", "server")
	})
	if err != nil || v.IsError() {
		return false
	}
	for _, line := range strings.Split(v.Str, "\r\n") {
		if ver, ok := strings.CutPrefix(line, "valkey_version:"); ok {
			major, _, _ := strings.Cut(ver, ".")
			n, err := strconv.Atoi(major)
			return err == nil && n >= 9
		}
	}
	return false
}

// askTableEngine runs ask on a new connection to the engine of
// tableEngine, authenticated as cfg says, within its timeout, and closes
// it.
func askTableEngine(cfg Config, ask func(*respconn.Conn, time.Duration) (respconn.Value, error)) (respconn.Value, error) {
	addr, timeout := tableEngine(cfg)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	login := cfg.login()
	login.Timeout = timeout
	c, err := respconn.Dial(ctx, addr, login)
	if err != nil {
		return respconn.Value{}, err
	}
	defer c.Close()
	return ask(c, timeout)
}

// tableEngine returns the engine whose command table and parsing rules
// respmeter reads (FetchCommands, probeDialect): cfg.Upstream, or under
// RouteSlots and RoutePinned the cluster seed or the first shard; and the
// bound on each exchange with it, twice cfg.DialTimeout (4 s when 0).
func tableEngine(cfg Config) (addr string, timeout time.Duration) {
	addr = cfg.Upstream
	if cfg.Route != "" && cfg.Route != RouteNone {
		addr = cfg.Cluster
		if addr == "" && len(cfg.Shards) > 0 {
			addr = cfg.Shards[0]
		}
	}
	timeout = 2 * cfg.DialTimeout
	if timeout <= 0 {
		timeout = 4 * time.Second
	}
	return addr, timeout
}
