package routing

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"
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
// one RESP2 connection it closes before returning. It does not
// authenticate and does not speak TLS.
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
// do. The port is "port", or "tls-port" when only that is given.
//
// Slots that no master owns in the seed's view (a cluster being set up, or
// without full coverage) are left unassigned (NoShard) without error; a
// node owning no slots at all gives a Topology with no Addrs. Callers that
// need full coverage check Topology.Unassigned.
//
// timeout bounds the whole exchange, dial included; 0 means no bound but
// ctx's. When ctx ends first the error wraps ctx.Err(). Other errors are
// the dial or I/O error (wrapped), ErrClusterDisabled, ErrClusterRefused or
// ErrBadClusterReply, all prefixed with the seed's address.
func FetchCluster(ctx context.Context, seed string, timeout time.Duration) (*Topology, error) {
	top, err := fetchCluster(ctx, seed, timeout)
	if err != nil {
		return nil, fmt.Errorf("routing: fetch cluster topology from %s: %w", seed, err)
	}
	return top, nil
}

func fetchCluster(ctx context.Context, seed string, timeout time.Duration) (*Topology, error) {
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
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", seed)
	if err != nil {
		return nil, fail(err)
	}
	defer c.Close()
	// Unblock reads and writes once ctx ends (ctx.Err() is set by then,
	// so fail sees it; a conn deadline at the same instant might not).
	stop := context.AfterFunc(ctx, func() { _ = c.SetDeadline(time.Unix(1, 0)) })
	defer stop()

	r := bufio.NewReaderSize(c, maxLineLen)
	ask := func(sub string) (respValue, error) {
		req := "*2\r\n$7\r\nCLUSTER\r\n$" + strconv.Itoa(len(sub)) + "\r\n" + sub + "\r\n"
		if _, err := io.WriteString(c, req); err != nil {
			return respValue{}, err
		}
		return readRESP(r, 0)
	}

	v, err := ask("SHARDS")
	if err != nil {
		return nil, fail(err)
	}
	if v.kind != '-' {
		return parseShards(v, seedHost)
	}
	if isClusterDisabled(v.str) {
		return nil, fmt.Errorf("%w: %q", ErrClusterDisabled, v.str)
	}
	shardsErr := v.str
	if v, err = ask("SLOTS"); err != nil {
		return nil, fail(err)
	}
	if v.kind != '-' {
		return parseSlots(v, seedHost)
	}
	if isClusterDisabled(v.str) {
		return nil, fmt.Errorf("%w: %q", ErrClusterDisabled, v.str)
	}
	return nil, fmt.Errorf("%w: %q, then %q", ErrClusterRefused, shardsErr, v.str)
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
func slotRange(lo, hi respValue) (int, int, error) {
	if lo.kind != ':' || hi.kind != ':' || lo.num < 0 || lo.num > hi.num || hi.num >= NumSlots {
		return 0, 0, fmt.Errorf("%w: bad slot range %v-%v", ErrBadClusterReply, lo, hi)
	}
	return int(lo.num), int(hi.num), nil
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
	return net.JoinHostPort(host, strconv.FormatInt(port, 10)), nil
}

// parseShards reads a CLUSTER SHARDS reply (Redis 7.0 docs, "CLUSTER
// SHARDS"): an array of shards, each a RESP2 array of key/value pairs with
// "slots" (a flat array of integers, start and end of each range) and
// "nodes" (an array of nodes, each an array of key/value pairs: id, port,
// tls-port, ip, endpoint, hostname, role, replication-offset, health). The
// node with role "master" owns the shard's slots; a shard without one
// leaves its slots unassigned.
func parseShards(v respValue, seedHost string) (*Topology, error) {
	if v.kind != '*' || v.null {
		return nil, fmt.Errorf("%w: CLUSTER SHARDS reply is not an array: %v", ErrBadClusterReply, v)
	}
	var claims []claim
	for _, shard := range v.arr {
		fields, err := pairs(shard)
		if err != nil {
			return nil, err
		}
		slotsV, nodesV := fields["slots"], fields["nodes"]
		if slotsV.kind != '*' || len(slotsV.arr)%2 != 0 || nodesV.kind != '*' {
			return nil, fmt.Errorf("%w: shard without slots or nodes array: %v", ErrBadClusterReply, shard)
		}
		if len(slotsV.arr) == 0 {
			continue
		}
		var addr string
		for _, node := range nodesV.arr {
			nf, err := pairs(node)
			if err != nil {
				return nil, err
			}
			if nf["role"].str != "master" {
				continue
			}
			port := nf["port"]
			if port.kind != ':' || port.num == 0 {
				port = nf["tls-port"]
			}
			if port.kind != ':' {
				return nil, fmt.Errorf("%w: master without port: %v", ErrBadClusterReply, node)
			}
			if addr, err = nodeAddr(nf["endpoint"].str, nf["ip"].str, seedHost, port.num); err != nil {
				return nil, err
			}
			break
		}
		if addr == "" {
			continue // no master (yet): the slots stay unassigned
		}
		for i := 0; i < len(slotsV.arr); i += 2 {
			lo, hi, err := slotRange(slotsV.arr[i], slotsV.arr[i+1])
			if err != nil {
				return nil, err
			}
			claims = append(claims, claim{addr, lo, hi})
		}
	}
	return buildTopology(claims)
}

// parseSlots reads a CLUSTER SLOTS reply (Redis docs, "CLUSTER SLOTS"): an
// array of ranges, each [start, end, master, replica...], where a node is
// [endpoint, port] followed, depending on the version, by the node id
// (3.0.6+) and a key/value array of metadata such as ip and hostname
// (7.0+). The endpoint is a bulk string, possibly empty or "?", or null
// under unknown-endpoint.
func parseSlots(v respValue, seedHost string) (*Topology, error) {
	if v.kind != '*' || v.null {
		return nil, fmt.Errorf("%w: CLUSTER SLOTS reply is not an array: %v", ErrBadClusterReply, v)
	}
	var claims []claim
	for _, e := range v.arr {
		if e.kind != '*' || len(e.arr) < 3 {
			return nil, fmt.Errorf("%w: CLUSTER SLOTS entry %v", ErrBadClusterReply, e)
		}
		lo, hi, err := slotRange(e.arr[0], e.arr[1])
		if err != nil {
			return nil, err
		}
		m := e.arr[2]
		if m.kind != '*' || len(m.arr) < 2 || (m.arr[0].kind != '$' && m.arr[0].kind != '+') || m.arr[1].kind != ':' {
			return nil, fmt.Errorf("%w: CLUSTER SLOTS master %v", ErrBadClusterReply, m)
		}
		var ip string
		if len(m.arr) >= 4 && m.arr[3].kind == '*' {
			meta, err := pairs(m.arr[3])
			if err != nil {
				return nil, err
			}
			ip = meta["ip"].str
		}
		addr, err := nodeAddr(m.arr[0].str, ip, seedHost, m.arr[1].num)
		if err != nil {
			return nil, err
		}
		claims = append(claims, claim{addr, lo, hi})
	}
	return buildTopology(claims)
}

// pairs reads a RESP2 array of alternating keys and values (a RESP3 map
// sent over RESP2) into a map; keys must be strings, and a later duplicate
// wins. Absent keys read as the zero respValue (kind 0, str "").
func pairs(v respValue) (map[string]respValue, error) {
	if v.kind != '*' || len(v.arr)%2 != 0 {
		return nil, fmt.Errorf("%w: want key/value array, got %v", ErrBadClusterReply, v)
	}
	m := make(map[string]respValue, len(v.arr)/2)
	for i := 0; i < len(v.arr); i += 2 {
		k := v.arr[i]
		if k.kind != '$' && k.kind != '+' {
			return nil, fmt.Errorf("%w: key %v is not a string", ErrBadClusterReply, k)
		}
		m[k.str] = v.arr[i+1]
	}
	return m, nil
}

// Bounds of readRESP: a topology reply is small, so anything beyond these
// is a broken or hostile peer, refused before allocating.
const (
	maxLineLen  = 16 << 10 // a type line, simple string or error, CRLF included
	maxBulkLen  = 1 << 20  // one bulk string
	maxArrayLen = 1 << 20  // elements of one array
	maxDepth    = 8        // CLUSTER SLOTS nests 4 deep
)

// respValue is one decoded RESP2 value.
type respValue struct {
	kind byte        // '+', '-', ':', '$' or '*'
	str  string      // simple string, error text or bulk string
	num  int64       // integer
	null bool        // null bulk string or null array ($-1, *-1)
	arr  []respValue // array elements
}

func (v respValue) String() string {
	switch {
	case v.kind == 0:
		return "(absent)"
	case v.null:
		return "(nil)"
	case v.kind == ':':
		return strconv.FormatInt(v.num, 10)
	case v.kind == '*':
		parts := make([]string, len(v.arr))
		for i, e := range v.arr {
			parts[i] = e.String()
		}
		s := "[" + strings.Join(parts, " ") + "]"
		if len(s) > 200 {
			s = s[:200] + "...]"
		}
		return s
	}
	return string(v.kind) + strconv.Quote(v.str)
}

// readRESP reads one RESP2 value from r: simple strings, errors, integers,
// bulk strings and arrays, nested at most maxDepth deep, with the bounds
// above. A malformed value gives an error wrapping ErrBadClusterReply; an
// I/O error is returned as is.
func readRESP(r *bufio.Reader, depth int) (respValue, error) {
	if depth > maxDepth {
		return respValue{}, fmt.Errorf("%w: nested deeper than %d", ErrBadClusterReply, maxDepth)
	}
	line, err := r.ReadSlice('\n')
	if err == bufio.ErrBufferFull {
		return respValue{}, fmt.Errorf("%w: line longer than %d bytes", ErrBadClusterReply, maxLineLen)
	}
	if err != nil {
		return respValue{}, err
	}
	if len(line) < 3 || line[len(line)-2] != '\r' {
		return respValue{}, fmt.Errorf("%w: bad line %q", ErrBadClusterReply, line)
	}
	v := respValue{kind: line[0]}
	body := line[1 : len(line)-2]
	switch v.kind {
	case '+', '-':
		v.str = string(body)
		return v, nil
	case ':':
		if v.num, err = strconv.ParseInt(string(body), 10, 64); err != nil {
			return respValue{}, fmt.Errorf("%w: bad integer %q", ErrBadClusterReply, body)
		}
		return v, nil
	case '$', '*':
	default:
		return respValue{}, fmt.Errorf("%w: unexpected type byte in %q", ErrBadClusterReply, line)
	}
	n, err := strconv.Atoi(string(body))
	switch {
	case err != nil || n < -1:
		return respValue{}, fmt.Errorf("%w: bad length in %q", ErrBadClusterReply, line)
	case n == -1:
		v.null = true
		return v, nil
	case v.kind == '$' && n > maxBulkLen, v.kind == '*' && n > maxArrayLen:
		return respValue{}, fmt.Errorf("%w: length %d too large", ErrBadClusterReply, n)
	}
	if v.kind == '$' {
		b := make([]byte, n+2)
		if _, err := io.ReadFull(r, b); err != nil {
			return respValue{}, err
		}
		if !bytes.HasSuffix(b, []byte("\r\n")) {
			return respValue{}, fmt.Errorf("%w: bulk string of %d not followed by CRLF", ErrBadClusterReply, n)
		}
		v.str = string(b[:n])
		return v, nil
	}
	// Grow by append: a huge announced length costs nothing until the
	// elements actually arrive.
	v.arr = make([]respValue, 0, min(n, 64))
	for range n {
		e, err := readRESP(r, depth+1)
		if err != nil {
			return respValue{}, err
		}
		v.arr = append(v.arr, e)
	}
	return v, nil
}
