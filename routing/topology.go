package routing

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"net"
	"slices"
	"strconv"
	"strings"
)

// NoShard is what Topology.Shard returns for a slot no master owns.
const NoShard = -1

// noShard marks an unassigned slot in Topology's slot table.
const noShard = math.MaxUint16

// MaxShards is the most addresses a Topology can index (0 to MaxShards-1):
// shard indices are stored as uint16 and 0xFFFF marks an unassigned slot.
const MaxShards = 1<<16 - 1

// Errors of EvenSplit.
var (
	// ErrNoShards means EvenSplit was given no addresses.
	ErrNoShards = errors.New("routing: no shard addresses")

	// ErrDuplicateAddr means an address appears twice in EvenSplit's list
	// (compared as strings: "localhost:7000" and "127.0.0.1:7000" differ).
	ErrDuplicateAddr = errors.New("routing: duplicate shard address")

	// ErrTooManyShards means EvenSplit was given so many addresses that
	// redis-cli's arithmetic runs past slot 16383 (7542 or more; Redis
	// Cluster is designed for up to 1000 masters).
	ErrTooManyShards = errors.New("routing: more shards than hash slots")

	// ErrBadAddr means an address is not "host:port" with a non-empty
	// host and port (net.SplitHostPort).
	ErrBadAddr = errors.New("routing: address is not host:port")
)

// Topology maps each of the NumSlots hash slots of a Redis Cluster to the
// master (shard) that serves it (Redis Cluster specification, "Key
// distribution model" and "Redirection and resharding").
//
// Addrs holds the "host:port" of every shard; a shard's index in Addrs is
// stable for the life of the Topology, and Rebase carries it over to a
// refreshed one, so callers may index per-shard state (connections,
// counters) by it. An address may own no slot (Rebase keeps vanished
// masters that way). Slots no master owns map to NoShard.
//
// A Topology is immutable once built: WithSlot and Rebase return copies,
// and callers must not modify Addrs. It is therefore safe for concurrent
// use; swap whole Topologies (atomic.Pointer) to update a shared one. Its
// slot table is 32 KiB, so pass it by pointer.
type Topology struct {
	// Addrs lists "host:port" of each shard, indexed by shard index.
	// Read-only.
	Addrs []string

	// Zones maps a master's "host:port" to its availability zone, as the
	// cluster's CLUSTER SHARDS gives it ("availability-zone", Valkey 9.1
	// on; FetchCluster); nil or missing where none. Read-only; WithSlot and
	// Rebase keep it.
	Zones map[string]string

	// IDs maps a master's "host:port" to its cluster node id (40 hex
	// digits), as the cluster's CLUSTER SHARDS ("id") or CLUSTER SLOTS
	// (the node's third element, Redis 3.0.6 on) gives it (FetchCluster);
	// nil or missing where none. Read-only; WithSlot and Rebase keep it.
	IDs map[string]string

	// slots[s] is the index in Addrs of the owner of slot s, or noShard.
	slots [NumSlots]uint16
}

// newTopology returns a Topology with the given addresses (not copied) and
// every slot unassigned.
func newTopology(addrs []string) *Topology {
	t := &Topology{Addrs: addrs}
	for i := range t.slots {
		t.slots[i] = noShard
	}
	return t
}

// EvenSplit returns a Topology in which addrs[i] is shard i and owns one
// contiguous range of slots, the ranges in the order of addrs, sized exactly
// as `redis-cli --cluster create` sizes them (Redis 7.0 src/redis-cli.c,
// clusterManagerCommandCreate): with the C float (IEEE single precision)
// slots_per_node = 16384/n and cursor starting at 0, shard i owns first to
// lround(cursor + slots_per_node - 1), the last shard up to 16383, and the
// next shard starts one after; cursor grows by slots_per_node per shard.
// For 3 shards that is 0-5460, 5461-10922 and 10923-16383; for 2, 0-8191
// and 8192-16383.
//
// Every shard owns at least one slot, and up to 1000 shards each owns
// floor or ceil of 16384/n slots.
//
// addrs is copied. The error is ErrNoShards for an empty list, wraps
// ErrTooManyShards (7542 addresses or more), or wraps ErrBadAddr or
// ErrDuplicateAddr naming the offending address.
func EvenSplit(addrs []string) (*Topology, error) {
	n := len(addrs)
	if n == 0 {
		return nil, ErrNoShards
	}
	ranges, ok := evenRanges(n)
	if !ok {
		return nil, fmt.Errorf("%w: %d addresses", ErrTooManyShards, n)
	}
	seen := make(map[string]bool, n)
	for _, a := range addrs {
		if host, port, err := net.SplitHostPort(a); err != nil || host == "" || port == "" {
			return nil, fmt.Errorf("%w: %q", ErrBadAddr, a)
		}
		if seen[a] {
			return nil, fmt.Errorf("%w: %q", ErrDuplicateAddr, a)
		}
		seen[a] = true
	}
	t := newTopology(slices.Clone(addrs))
	for i, r := range ranges {
		for s := r[0]; s <= r[1]; s++ {
			t.slots[s] = uint16(i)
		}
	}
	return t, nil
}

// evenRanges returns the inclusive slot ranges redis-cli --cluster create
// gives n >= 1 masters, and false if one of them reaches past slot 16383
// (single-precision drift does that from n = 7542 on; redis-cli would then
// fail to add slot 16384). The float32 conversions reproduce the C code's
// single-precision arithmetic step by step; lround rounds halves away from
// zero, as math.Round does.
func evenRanges(n int) ([][2]int, bool) {
	if n < 1 || n > NumSlots {
		return nil, false
	}
	out := make([][2]int, n)
	per := float32(NumSlots) / float32(n)
	var cursor float32
	first := 0
	for i := range n {
		end := float32(float32(cursor+per) - 1)
		last := int(math.Round(float64(end)))
		if last > NumSlots || i == n-1 {
			last = NumSlots - 1
		}
		if last < first {
			last = first
		}
		if last >= NumSlots {
			return nil, false
		}
		out[i] = [2]int{first, last}
		first = last + 1
		cursor = float32(cursor + per)
	}
	return out, true
}

// Shard returns the index in Addrs of the master owning slot, or NoShard
// (-1) when no master owns it or slot >= NumSlots.
func (t *Topology) Shard(slot uint16) int {
	if slot >= NumSlots {
		return NoShard
	}
	if i := t.slots[slot]; i != noShard {
		return int(i)
	}
	return NoShard
}

// Addr returns the "host:port" of the master owning slot, or "" when
// Shard(slot) is NoShard.
func (t *Topology) Addr(slot uint16) string {
	if i := t.Shard(slot); i >= 0 {
		return t.Addrs[i]
	}
	return ""
}

// Index returns the shard index of addr (exact string match), or -1 if addr
// is not in Addrs.
func (t *Topology) Index(addr string) int {
	return slices.Index(t.Addrs, addr)
}

// Ranges returns the slots owned by shard as inclusive [first, last]
// ranges in ascending order, for logs and docs; nil if it owns none or is
// out of range. Pass NoShard for the unassigned slots.
func (t *Topology) Ranges(shard int) [][2]uint16 {
	var want uint16
	switch {
	case shard == NoShard:
		want = noShard
	case shard < 0 || shard >= len(t.Addrs):
		return nil
	default:
		want = uint16(shard)
	}
	var out [][2]uint16
	for s := 0; s < NumSlots; s++ {
		if t.slots[s] != want {
			continue
		}
		if k := len(out); k > 0 && int(out[k-1][1]) == s-1 {
			out[k-1][1] = uint16(s)
		} else {
			out = append(out, [2]uint16{uint16(s), uint16(s)})
		}
	}
	return out
}

// Unassigned returns how many slots no master owns: 0 for a fully covered
// cluster, whose every slot can be served.
func (t *Topology) Unassigned() int {
	n := 0
	for _, i := range t.slots {
		if i == noShard {
			n++
		}
	}
	return n
}

// Equal reports whether t and u have the same Addrs in the same order and
// the same owner for every slot. Topologies with the same slot owners under
// other indices are not Equal; Rebase one on the other first to compare
// owners only.
func (t *Topology) Equal(u *Topology) bool {
	return slices.Equal(t.Addrs, u.Addrs) && t.slots == u.slots
}

// String describes t for logs: each shard's address with its slot ranges,
// e.g. "127.0.0.1:7000[0-5460] 127.0.0.1:7001[5461-10922]", and
// "unassigned[...]" last if some slots have no owner.
func (t *Topology) String() string {
	var b strings.Builder
	write := func(name string, rs [][2]uint16) {
		if b.Len() > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(name)
		b.WriteByte('[')
		for i, r := range rs {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(strconv.Itoa(int(r[0])))
			if r[1] != r[0] {
				b.WriteByte('-')
				b.WriteString(strconv.Itoa(int(r[1])))
			}
		}
		b.WriteByte(']')
	}
	for i, a := range t.Addrs {
		write(a, t.Ranges(i))
	}
	if rs := t.Ranges(NoShard); rs != nil {
		write("unassigned", rs)
	}
	return b.String()
}

// WithSlot returns a Topology in which slot is owned by addr and all else
// is as in t: what a -MOVED redirect tells a client (Redis Cluster
// specification, "MOVED Redirection"). An addr not yet in Addrs is
// appended, so existing shard indices stay valid. It returns t itself when
// addr already owns slot. WithSlot panics if slot >= NumSlots or if a new
// address would exceed MaxShards.
func (t *Topology) WithSlot(slot uint16, addr string) *Topology {
	return t.WithSlots(slot, slot, addr)
}

// WithSlots returns a Topology in which every slot from lo to hi
// (inclusive) is owned by addr and all else is as in t, as WithSlot does
// for one slot; t itself when addr owns them all already. It panics if
// lo > hi, hi >= NumSlots or a new address would exceed MaxShards.
func (t *Topology) WithSlots(lo, hi uint16, addr string) *Topology {
	if hi >= NumSlots || lo > hi {
		panic(fmt.Sprintf("routing: WithSlots: slots %d-%d out of range", lo, hi))
	}
	i := t.Index(addr)
	if i >= 0 && !slices.ContainsFunc(t.slots[lo:hi+1], func(o uint16) bool { return o != uint16(i) }) {
		return t
	}
	u := &Topology{slots: t.slots, Zones: t.Zones, IDs: t.IDs}
	if i < 0 {
		if len(t.Addrs) >= MaxShards {
			panic("routing: WithSlot: too many shard addresses")
		}
		i = len(t.Addrs)
		u.Addrs = append(slices.Clip(slices.Clone(t.Addrs)), addr)
	} else {
		u.Addrs = t.Addrs // immutable, so shared
	}
	for s := int(lo); s <= int(hi); s++ {
		u.slots[s] = uint16(i)
	}
	return u
}

// Rebase returns t re-indexed against prev, the Topology it replaces: every
// address of prev keeps its index in prev.Addrs (those t no longer lists
// stay there owning no slots), addresses new in t are appended in t's
// order, and each slot has the owner it has in t. So state indexed by shard
// (connections, counters) survives a refresh. It returns t itself when prev
// is nil or the indices already agree (prev.Addrs is a prefix of t.Addrs).
//
// Addresses never leave a chain of Rebases; a caller that sees Addrs grow
// without bound (constant churn) can start over from a fresh Topology.
// Rebase panics if the union of addresses exceeds MaxShards.
func (t *Topology) Rebase(prev *Topology) *Topology {
	if prev == nil {
		return t
	}
	if len(prev.Addrs) <= len(t.Addrs) && slices.Equal(prev.Addrs, t.Addrs[:len(prev.Addrs)]) {
		return t
	}
	addrs := slices.Clone(prev.Addrs)
	index := make(map[string]int, len(addrs)+len(t.Addrs))
	for i, a := range addrs {
		index[a] = i
	}
	remap := make([]uint16, len(t.Addrs))
	for i, a := range t.Addrs {
		j, ok := index[a]
		if !ok {
			j = len(addrs)
			if j >= MaxShards {
				panic("routing: Rebase: too many shard addresses")
			}
			addrs = append(addrs, a)
			index[a] = j
		}
		remap[i] = uint16(j)
	}
	u := &Topology{Addrs: slices.Clip(addrs), Zones: t.Zones, IDs: t.IDs}
	for s, i := range t.slots {
		if i == noShard {
			u.slots[s] = noShard
		} else {
			u.slots[s] = remap[i]
		}
	}
	return u
}

// Redirect is a -MOVED or -ASK error reply of a cluster node (Redis Cluster
// specification, "MOVED Redirection" and "ASK redirection").
type Redirect struct {
	// Ask is true for ASK: send this one command to Addr, preceded by
	// ASKING, and keep the slot map. False for MOVED: Addr now owns Slot
	// for good (Topology.WithSlot).
	Ask bool
	// Slot is the hash slot of the command's keys, < NumSlots.
	Slot uint16
	// Addr is "host:port" of the node to ask, as net.JoinHostPort writes
	// it (an IPv6 host in brackets).
	Addr string
}

// ParseRedirect parses msg, the text of an error reply without the leading
// '-' and the CRLF, as a redirect: exactly "MOVED <slot> <endpoint>:<port>"
// or "ASK <slot> <endpoint>:<port>", single spaces, slot a decimal below
// NumSlots, port a decimal 1-65535. from is the "host:port" of the node
// that sent the reply.
//
// The endpoint is what cluster-preferred-endpoint-type selects (Redis 7.0
// redis.conf; src/cluster.c clusterRedirectClient): an IP, a hostname (kept
// as a name: "node-b.example:7001"), "?" when hostname is preferred but the
// node has none, or empty ("unknown-endpoint"); for the last two the
// redirect means "same host, this port", and Addr takes the host of from.
// Redis writes IPv6 addresses bare ("MOVED 1 ::1:7001"), so the port is
// whatever follows the last ':'; a bracketed "[::1]:7001" is accepted too.
// Either way Addr is "[::1]:7001".
//
// It returns false, and a zero Redirect, for any other error text, a host
// with spaces, control bytes or stray brackets, or (for an empty or "?"
// endpoint) a from that is not such a host:port. It does not retain msg.
func ParseRedirect(msg []byte, from string) (Redirect, bool) {
	var r Redirect
	switch {
	case bytes.HasPrefix(msg, []byte("MOVED ")):
		msg = msg[len("MOVED "):]
	case bytes.HasPrefix(msg, []byte("ASK ")):
		r.Ask = true
		msg = msg[len("ASK "):]
	default:
		return Redirect{}, false
	}
	sp := bytes.IndexByte(msg, ' ')
	if sp < 0 {
		return Redirect{}, false
	}
	slot, ok := parseDecimal(msg[:sp], NumSlots-1)
	if !ok {
		return Redirect{}, false
	}
	r.Slot = uint16(slot)
	ep := msg[sp+1:]
	c := bytes.LastIndexByte(ep, ':')
	if c < 0 {
		return Redirect{}, false
	}
	port, ok := parseDecimal(ep[c+1:], math.MaxUint16)
	if !ok || port == 0 {
		return Redirect{}, false
	}
	host := ep[:c]
	if len(host) >= 2 && host[0] == '[' && host[len(host)-1] == ']' {
		host = host[1 : len(host)-1]
	}
	if !validHost(host) {
		return Redirect{}, false
	}
	h := string(host)
	if h == "" || h == "?" {
		fh, _, err := net.SplitHostPort(from)
		if err != nil || fh == "" || fh == "?" || !validHost([]byte(fh)) {
			return Redirect{}, false
		}
		h = fh
	}
	r.Addr = net.JoinHostPort(h, strconv.Itoa(port))
	return r, true
}

// validHost reports whether host (brackets removed) has no spaces, control
// bytes or brackets.
func validHost(host []byte) bool {
	for _, b := range host {
		if b <= ' ' || b == 0x7f || b == '[' || b == ']' {
			return false
		}
	}
	return true
}

// parseDecimal parses b as ASCII digits only (no sign, at most 5 digits)
// with a value of at most max.
func parseDecimal(b []byte, max int) (int, bool) {
	if len(b) == 0 || len(b) > 5 {
		return 0, false
	}
	n := 0
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	return n, n <= max
}
