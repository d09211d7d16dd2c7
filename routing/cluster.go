package routing

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/respmeter/respmeter/internal/resp"
	"github.com/respmeter/respmeter/internal/respconn"
)

// Errors of FetchCluster, besides the dial and I/O errors it wraps.
var (
	// ErrClusterDisabled means the seed is not a cluster node: it answered
	// "ERR This instance has cluster support disabled" (redis-server and
	// Valkey started without cluster-enabled yes) or a reply saying
	// "cluster is disabled".
	ErrClusterDisabled = errors.New("routing: cluster support disabled on the seed")

	// ErrClusterRefused means the seed answered both CLUSTER SHARDS and
	// CLUSTER SLOTS with another error reply (NOAUTH, for one: FetchCluster
	// does not authenticate). The wrapping error quotes the reply.
	ErrClusterRefused = errors.New("routing: seed refused CLUSTER SHARDS and CLUSTER SLOTS")

	// ErrBadClusterReply means the seed's reply is not RESP2 or not shaped
	// as the Redis documentation of CLUSTER SHARDS or CLUSTER SLOTS says
	// (slot numbers out of range, a missing port, two masters claiming one
	// slot, ...). The wrapping error says what was wrong.
	ErrBadClusterReply = errors.New("routing: malformed cluster topology reply")
)

// FetchCluster connects to seed ("host:port" of any cluster node), asks it
// for the slot map and returns it as a Topology of the masters. It sends
// CLUSTER SHARDS (Redis 7.0+) and, when that is answered with an error
// (older servers: "ERR unknown subcommand"), CLUSTER SLOTS (Redis 3.0+), on
// one RESP2 connection it closes before returning. It
// authenticates and speaks TLS as login says.
//
// Addrs holds the masters that own at least one slot, in the order of the
// lowest slot each owns; replicas and slot-less masters are left out, so a
// refresh is usually followed by Rebase. A master's host is the endpoint
// the node reports (CLUSTER SHARDS "endpoint", CLUSTER SLOTS first node
// field: an IP, or a hostname under cluster-preferred-endpoint-type
// hostname, kept as a name). When the endpoint is empty, null or "?"
// (unknown-endpoint, or hostname preferred but none announced) the host is
// the node's "ip" field (CLUSTER SHARDS, or the CLUSTER SLOTS metadata of
// Redis 7), and when that is missing or empty too (a single node that has
// never met a peer does not know its own IP) the host of seed, as the
// Redis documentation of cluster-preferred-endpoint-type tells clients to
// do. The port is "port", or "tls-port" when only that is given; with
// login.TLS (the engines spoken to in TLS) "tls-port" when given. CLUSTER
// SLOTS names the port of the connection's kind (Redis 7's "preferred"
// port under tls-cluster yes), so a TLS connection reads TLS ports there.
//
// Slots that no master owns in the seed's view (a cluster being set up, or
// without full coverage) are left unassigned (NoShard) without error; a
// node owning no slots at all gives a Topology with no Addrs. Callers that
// need full coverage check Topology.Unassigned.
//
// timeout bounds the whole exchange, dial included; 0 means no bound but
// ctx's. login's User and Password, when set, authenticate the connection
// first (AUTH), for a cluster that requires a password (never part of an
// error). When ctx ends first the error wraps ctx.Err(). Other errors are
// the dial or I/O error (wrapped), ErrClusterDisabled, ErrClusterRefused or
// ErrBadClusterReply, all prefixed with the seed's address.
func FetchCluster(ctx context.Context, seed string, timeout time.Duration, login respconn.Options) (*Topology, error) {
	top, err := fetchCluster(ctx, seed, timeout, login)
	if err != nil {
		return nil, fmt.Errorf("routing: fetch cluster topology from %s: %w", seed, err)
	}
	return top, nil
}

func fetchCluster(ctx context.Context, seed string, timeout time.Duration, login respconn.Options) (*Topology, error) {
	seedHost, _, err := net.SplitHostPort(seed)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadAddr, err)
	}
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	// fail reports an I/O error as the end of ctx when that caused it.
	fail := func(err error) error {
		if ctx.Err() != nil && !errors.Is(err, ctx.Err()) {
			return fmt.Errorf("%w (%v)", ctx.Err(), err)
		}
		return err
	}
	c, err := respconn.Dial(ctx, seed, respconn.Options{User: login.User, Password: login.Password, TLS: login.TLS})
	if err != nil {
		return nil, fail(err)
	}
	defer c.Close() // Dial closes it as soon as ctx ends, so fail sees ctx.Err()
	ask := func(sub string) (respconn.Value, error) {
		v, err := c.Do(0, "CLUSTER", sub)
		if errors.Is(err, respconn.ErrProtocol) {
			err = fmt.Errorf("%w: %w", ErrBadClusterReply, err)
		}
		return v, err
	}

	v, err := ask("SHARDS")
	if err != nil {
		return nil, fail(err)
	}
	if !v.IsError() {
		return parseShards(v, seedHost, login.TLS != nil)
	}
	if isClusterDisabled(v.Str) {
		return nil, fmt.Errorf("%w: %q", ErrClusterDisabled, v.Str)
	}
	shardsErr := v.Str
	if v, err = ask("SLOTS"); err != nil {
		return nil, fail(err)
	}
	if !v.IsError() {
		return parseSlots(v, seedHost)
	}
	if isClusterDisabled(v.Str) {
		return nil, fmt.Errorf("%w: %q", ErrClusterDisabled, v.Str)
	}
	return nil, fmt.Errorf("%w: %q, then %q", ErrClusterRefused, shardsErr, v.Str)
}

// isClusterDisabled reports whether an error reply says the node runs
// without cluster mode: Redis and Valkey "ERR This instance has cluster
// support disabled", Dragonfly "... Cluster is disabled ...".
func isClusterDisabled(msg string) bool {
	m := strings.ToLower(msg)
	return strings.Contains(m, "cluster support disabled") || strings.Contains(m, "cluster is disabled")
}

// claim is one master's contiguous slot range from a topology reply.
type claim struct {
	addr   string
	lo, hi int
}

// buildTopology turns claims into a Topology whose Addrs are ordered by the
// lowest slot each address owns. Two claims on one slot are an error.
func buildTopology(claims []claim) (*Topology, error) {
	slices.SortFunc(claims, func(a, b claim) int { return cmp.Compare(a.lo, b.lo) })
	t := newTopology(nil)
	index := map[string]uint16{}
	for _, c := range claims {
		i, ok := index[c.addr]
		if !ok {
			if len(t.Addrs) >= MaxShards {
				return nil, fmt.Errorf("%w: more than %d masters", ErrBadClusterReply, MaxShards)
			}
			i = uint16(len(t.Addrs))
			index[c.addr] = i
			t.Addrs = append(t.Addrs, c.addr)
		}
		for s := c.lo; s <= c.hi; s++ {
			if t.slots[s] != noShard {
				return nil, fmt.Errorf("%w: slot %d claimed by %s and %s",
					ErrBadClusterReply, s, t.Addrs[t.slots[s]], c.addr)
			}
			t.slots[s] = i
		}
	}
	t.Addrs = slices.Clip(t.Addrs)
	return t, nil
}

// slotRange checks an inclusive slot range from a reply.
func slotRange(lo, hi respconn.Value) (int, int, error) {
	if lo.Type != resp.TypeInteger || hi.Type != resp.TypeInteger || lo.Int < 0 || lo.Int > hi.Int || hi.Int >= NumSlots {
		return 0, 0, fmt.Errorf("%w: bad slot range %v-%v", ErrBadClusterReply, lo, hi)
	}
	return int(lo.Int), int(hi.Int), nil
}

// nodeAddr resolves a node's "host:port" as FetchCluster documents.
func nodeAddr(endpoint, ip, seedHost string, port int64) (string, error) {
	if port <= 0 || port > 65535 {
		return "", fmt.Errorf("%w: bad port %d", ErrBadClusterReply, port)
	}
	host := endpoint
	if host == "" || host == "?" {
		host = ip
	}
	if host == "" || host == "?" {
		host = seedHost
	}
	addr := net.JoinHostPort(host, strconv.FormatInt(port, 10))
	if _, _, err := net.SplitHostPort(addr); err != nil {
		// A host no dialer could use ("a]b", found by FuzzClusterReply).
		return "", fmt.Errorf("%w: bad node address: %v", ErrBadClusterReply, err)
	}
	return addr, nil
}

// parseShards reads a CLUSTER SHARDS reply (Redis 7.0 docs, "CLUSTER
// SHARDS"): an array of shards, each a RESP2 array of key/value pairs with
// "slots" (a flat array of integers, start and end of each range) and
// "nodes" (an array of nodes, each an array of key/value pairs: id, port,
// tls-port, ip, endpoint, hostname, role, replication-offset, health, and
// availability-zone on Valkey 9.1 with one set). The node shardMaster
// picks owns the shard's slots, and its zone goes to Topology.Zones; a
// shard without a master leaves its slots unassigned. A master's port is
// its "port", or its "tls-port" when that is the only one; under tls (the
// shard map read over TLS, for engine connections in TLS) its "tls-port"
// when it has one.
func parseShards(v respconn.Value, seedHost string, tls bool) (*Topology, error) {
	if v.Type != resp.TypeArray || v.Null {
		return nil, fmt.Errorf("%w: CLUSTER SHARDS reply is not an array: %v", ErrBadClusterReply, v)
	}
	var claims []claim
	var zones, ids map[string]string
	for _, shard := range v.Elems {
		fields, err := pairs(shard)
		if err != nil {
			return nil, err
		}
		slotsV, nodesV := fields["slots"], fields["nodes"]
		if slotsV.Type != resp.TypeArray || len(slotsV.Elems)%2 != 0 || nodesV.Type != resp.TypeArray {
			return nil, fmt.Errorf("%w: shard without slots or nodes array: %v", ErrBadClusterReply, shard)
		}
		if len(slotsV.Elems) == 0 {
			continue
		}
		owner, err := shardMaster(nodesV)
		if err != nil {
			return nil, err
		}
		if owner == nil {
			continue // no master (yet): the slots stay unassigned
		}
		first, second := "port", "tls-port"
		if tls {
			first, second = second, first
		}
		port := owner[first]
		if port.Type != resp.TypeInteger || port.Int == 0 {
			port = owner[second]
		}
		if port.Type != resp.TypeInteger {
			return nil, fmt.Errorf("%w: master without port: %v", ErrBadClusterReply, owner)
		}
		addr, err := nodeAddr(owner["endpoint"].Str, owner["ip"].Str, seedHost, port.Int)
		if err != nil {
			return nil, err
		}
		if z := owner["availability-zone"]; z.IsString() && z.Str != "" {
			if zones == nil {
				zones = map[string]string{}
			}
			zones[addr] = z.Str
		}
		if id := owner["id"]; id.IsString() && id.Str != "" {
			if ids == nil {
				ids = map[string]string{}
			}
			ids[addr] = id.Str
		}
		for i := 0; i < len(slotsV.Elems); i += 2 {
			lo, hi, err := slotRange(slotsV.Elems[i], slotsV.Elems[i+1])
			if err != nil {
				return nil, err
			}
			claims = append(claims, claim{addr, lo, hi})
		}
	}
	t, err := buildTopology(claims)
	if t != nil {
		t.Zones, t.IDs = zones, ids
	}
	return t, err
}

// parseSlots reads a CLUSTER SLOTS reply (Redis docs, "CLUSTER SLOTS"): an
// array of ranges, each [start, end, master, replica...], where a node is
// [endpoint, port] followed, depending on the version, by the node id
// (3.0.6+) and a key/value array of metadata such as ip and hostname
// (7.0+). The endpoint is a bulk string, possibly empty or "?", or null
// under unknown-endpoint.
func parseSlots(v respconn.Value, seedHost string) (*Topology, error) {
	if v.Type != resp.TypeArray || v.Null {
		return nil, fmt.Errorf("%w: CLUSTER SLOTS reply is not an array: %v", ErrBadClusterReply, v)
	}
	var claims []claim
	var ids map[string]string
	for _, e := range v.Elems {
		if e.Type != resp.TypeArray || len(e.Elems) < 3 {
			return nil, fmt.Errorf("%w: CLUSTER SLOTS entry %v", ErrBadClusterReply, e)
		}
		lo, hi, err := slotRange(e.Elems[0], e.Elems[1])
		if err != nil {
			return nil, err
		}
		m := e.Elems[2]
		if m.Type != resp.TypeArray || len(m.Elems) < 2 || (m.Elems[0].Type != resp.TypeBlobString && m.Elems[0].Type != resp.TypeSimpleString) || m.Elems[1].Type != resp.TypeInteger {
			return nil, fmt.Errorf("%w: CLUSTER SLOTS master %v", ErrBadClusterReply, m)
		}
		var ip string
		if len(m.Elems) >= 4 && m.Elems[3].Type == resp.TypeArray {
			meta, err := pairs(m.Elems[3])
			if err != nil {
				return nil, err
			}
			ip = meta["ip"].Str
		}
		addr, err := nodeAddr(m.Elems[0].Str, ip, seedHost, m.Elems[1].Int)
		if err != nil {
			return nil, err
		}
		if len(m.Elems) >= 3 && m.Elems[2].IsString() && m.Elems[2].Str != "" {
			if ids == nil {
				ids = map[string]string{}
			}
			ids[addr] = m.Elems[2].Str
		}
		claims = append(claims, claim{addr, lo, hi})
	}
	t, err := buildTopology(claims)
	if t != nil {
		t.IDs = ids
	}
	return t, err
}

// shardMaster returns the fields of the node that serves a CLUSTER SHARDS
// shard's slots, or nil when the shard lists no master. Since Redis 7.2
// (shard ids; Redis 8.0, Valkey 8.1) a master that a replica replaced stays
// in its shard with role "master" and health "fail", and may be listed
// before the replica that took over (role "master", health "online");
// Redis 7.0 moves it to a shard of its own without slots. So the first
// master whose health is "online" wins, and the first master of any health
// only when none is online (a master that failed with no replica to take
// over still owns its slots).
func shardMaster(nodes respconn.Value) (map[string]respconn.Value, error) {
	var owner map[string]respconn.Value
	for _, node := range nodes.Elems {
		nf, err := pairs(node)
		if err != nil {
			return nil, err
		}
		if nf["role"].Str != "master" {
			continue
		}
		if nf["health"].Str == "online" {
			return nf, nil
		}
		if owner == nil {
			owner = nf
		}
	}
	return owner, nil
}

// pairs reads a RESP2 array of alternating keys and values (a RESP3 map
// sent over RESP2) into a map; keys must be strings, and a later duplicate
// wins. Absent keys read as the zero respconn.Value (Type 0, Str "").
func pairs(v respconn.Value) (map[string]respconn.Value, error) {
	if v.Type != resp.TypeArray || len(v.Elems)%2 != 0 {
		return nil, fmt.Errorf("%w: want key/value array, got %v", ErrBadClusterReply, v)
	}
	m := make(map[string]respconn.Value, len(v.Elems)/2)
	for i := 0; i < len(v.Elems); i += 2 {
		k := v.Elems[i]
		if k.Type != resp.TypeBlobString && k.Type != resp.TypeSimpleString {
			return nil, fmt.Errorf("%w: key %v is not a string", ErrBadClusterReply, k)
		}
		m[k.Str] = v.Elems[i+1]
	}
	return m, nil
}
