package proxy

import (
	"bytes"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/panjf2000/gnet/v2"
	"golang.org/x/sys/unix"

	"github.com/respmeter/respmeter/routing"
	"github.com/respmeter/respmeter/routing/command"
)

// RouteFacade presents the shards as a Redis Cluster of virtual nodes, one
// listener of Config.FacadeListen per shard (in shard order), so that a
// cluster-aware client routes, pipelines per node and pools connections
// itself (see facade). Config.Listen keeps serving a plain endpoint routed
// by slot, as RouteSlots does.
const RouteFacade = "facade"

// facade is the emulated cluster of RouteFacade: virtual node i is the
// listener Config.FacadeListen[i] and forwards to shard i. Addresses beyond
// the shards are spare nodes: they own no slot, answer keyed commands with
// MOVED and keyless ones from a shard picked as --route slots picks a home
// shard. Read-only after OnBoot.
type facade struct {
	nodes  []facadeNode
	picked bool // pickPorts chose a port for a "host:0" address
	// tls: the nodes serve TLS (Config.FacadeTLS) on listeners of their
	// own (Proxy.tlsNodes), bound before gnet starts; gnet listens on the
	// plain endpoint only.
	tls bool
	// shardIDs: CLUSTER SHARDS gives each shard an "id", as the engine's
	// own cluster does (set by Start: engineShardIDs).
	shardIDs bool
	// afterPick, when set (tests), runs after pickPorts with the picked
	// addresses: it stands for another process taking one of them.
	afterPick func(listen string, nodes []string)

	mu     sync.Mutex
	warned map[string]bool // masters logged as having no virtual node (warnUnnoded)
}

// facadeNode is one virtual node.
type facadeNode struct {
	i    int
	addr string // the bound host:port (the port chosen when Config.FacadeListen had 0)
	host string // addr's host; "" when it is a wildcard (0.0.0.0, ::): then the client's own view
	port string
	id   string // 40 hex digits, as a Redis Cluster node id: SHA-1 of addr
	// shard is the id of the node's shard (CLUSTER SHARDS "id" under
	// facade.shardIDs): 40 hex digits, another SHA-1 of addr.
	shard string
}

func newFacade(listen []string, tls bool) *facade {
	f := &facade{nodes: make([]facadeNode, len(listen)), tls: tls}
	for i, a := range listen {
		f.nodes[i] = facadeNode{i: i, addr: a}
	}
	return f
}

// boot records each listener's bound address (gnet Engine.DupListener and
// getsockname), from which the nodes' ids and advertised endpoints follow.
func (f *facade) boot(eng gnet.Engine) {
	for i := range f.nodes {
		n := &f.nodes[i]
		if !f.tls { // else bound already, by listenTLSNodes
			n.addr = listenerAddr(eng, n.addr)
		}
		host, port, _ := net.SplitHostPort(n.addr)
		if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
			host = ""
		}
		sum := sha1.Sum([]byte("respmeter facade " + n.addr))
		shard := sha1.Sum([]byte("respmeter facade shard " + n.addr))
		n.host, n.port, n.id, n.shard = host, port, hex.EncodeToString(sum[:]), hex.EncodeToString(shard[:])
	}
}

// warnUnnoded logs, once each, the masters of the map that have no virtual
// node (more masters than Config.FacadeListen addresses, at start or after
// a topology refresh): every virtual node forwards their slots, and
// presents them as its own. Safe for concurrent use.
func (f *facade) warnUnnoded(p *Proxy) {
	v := p.router.load()
	if v == nil {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, sh := range v.live {
		if a := v.t.Addrs[sh]; sh >= len(f.nodes) && !f.warned[a] {
			if f.warned == nil {
				f.warned = map[string]bool{}
			}
			f.warned[a] = true
			p.log.Warn("no facade listen address left for a master: each virtual node forwards its slots and presents them as its own",
				"master", a, "facade_nodes", len(f.nodes))
		}
	}
}

// listenerAddr returns the bound address of the engine's listener on addr
// (as given to gnet), or addr when it cannot be read.
func listenerAddr(eng gnet.Engine, addr string) string {
	fd, err := eng.DupListener("tcp", addr)
	if err != nil {
		return addr
	}
	defer unix.Close(fd)
	if sa, err := unix.Getsockname(fd); err == nil {
		if s := sockaddrString(sa); s != "" {
			return s
		}
	}
	return addr
}

func sockaddrString(sa unix.Sockaddr) string {
	switch a := sa.(type) {
	case *unix.SockaddrInet4:
		return net.JoinHostPort(net.IP(a.Addr[:]).String(), strconv.Itoa(a.Port))
	case *unix.SockaddrInet6:
		return net.JoinHostPort(net.IP(a.Addr[:]).String(), strconv.Itoa(a.Port))
	}
	return ""
}

// attach makes s a client of the virtual node whose listener accepted c
// (none: the plain endpoint). Called once, at connect.
func (f *facade) attach(s *client, c gnet.Conn) {
	var local string
	if tp, ok := c.Context().(tlsPeer); ok {
		if tp.node < 0 {
			return // TLSListen's client: the plain endpoint's
		}
		local = tp.local.String()
	} else {
		sa, err := unix.Getsockname(c.Fd())
		if err != nil {
			return
		}
		local = sockaddrString(sa)
	}
	host, port, _ := net.SplitHostPort(local)
	for i := range f.nodes {
		n := &f.nodes[i]
		if n.port == port && (n.host == "" || n.addr == local) {
			s.vnode, s.vhost = n, host
			if n.i < len(s.p.router.load().t.Addrs) {
				s.home = n.i
			}
			return
		}
	}
}

// facadeShape is the shape of RouteFacade: a client of the plain endpoint
// is slot-routed (slotShape); a client of a virtual node is a client of
// that node of a Redis Cluster (its shard's connection, as fixedShape),
// answered by respmeter where a cluster node differs from a standalone
// engine.
type facadeShape struct{}

func (facadeShape) start(*client) {}
func (facadeShape) bind(*client, *topoView, *request, *routing.Call, []byte) bool {
	return false
}
func (facadeShape) single(s *client) bool { return s.vnode != nil }
func (facadeShape) perShard() bool        { return true }
func (facadeShape) reorders() bool        { return true }

// spreads: yes, for the clients of the plain endpoint (slotShape's).
// closesOnFailure: no, as slotShape; a virtual node's client stands for a
// cluster client, which keeps its connection when one node fails.
func (facadeShape) spreads() bool         { return true }
func (facadeShape) closesOnFailure() bool { return false }

// redials: for a client of the plain endpoint as slotShape; for a client
// of a virtual node as pinnedShape (a cluster client's connection to one
// node).
func (facadeShape) redials(s *client, busy bool) bool { return s.vnode == nil || !busy }

func (facadeShape) dispatch(s *client, v *topoView, e *request, c *routing.Call, args [][]byte, frame []byte) {
	id := c.ID
	n := s.vnode
	if n == nil {
		slotShape{}.dispatch(s, v, e, c, args, frame)
		return
	}
	// asking: the command follows ASKING (Redis clears the flag after
	// one command, outside a transaction).
	asking := s.vasking
	if !s.tx.on {
		s.vasking = false
	}
	switch id {
	case command.Cluster:
		s.clusterCmd(v, e, args, frame)
		return
	case command.Asking:
		if s.p.router.cluster {
			// Answered now, sent with the next command, on its connection
			// (as slotShape does).
			s.hold(frame)
		}
		// A standalone engine refuses it (cluster support disabled).
		s.vasking = true
		s.local(e, okReply)
		return
	case command.Swapdb:
		if !s.p.router.cluster {
			// A cluster node refuses it (swapdbCommand), Valkey 9's with
			// several databases too; a standalone shard would swap its own
			// databases only. Refused when queued in a transaction, which
			// then aborts (a cluster node fails it at EXEC).
			if s.tx.on {
				s.tx.aborted = true
			}
			s.local(e, swapdbClusterErr)
			return
		}
	case command.Readonly, command.Readwrite:
		// The facade presents masters only: READONLY changes nothing (a
		// standalone engine would refuse it).
		s.local(e, okReply)
		return
	case command.Exec:
		if s.tx.on && s.vcross && !s.tx.aborted {
			// Keys of several slots were queued: Redis Cluster refuses
			// the EXEC (getNodeByQuery) and discards the transaction. The
			// engine gets DISCARD; the client CROSSSLOT.
			if m := s.p.cfg.Metrics; m != nil {
				m.CrossSlot()
			}
			e.flags |= eExecAbort | eExecCross
			frame = discardReq
			s.tx.on, s.tx.slot, s.vcross = false, -1, false
			s.send(e, s.home, frame)
			return
		}
		s.tx.slot, s.vcross = -1, false
	case command.Multi:
		if !s.tx.on { // (a nested MULTI is refused by the engine and changes nothing)
			s.tx.slot, s.vcross = -1, false
		}
	case command.Discard, command.Reset:
		s.tx.slot, s.vcross = -1, false
	}
	keys, err := c.Keys()
	if err == nil && len(keys) > 0 {
		// Redis Cluster's getNodeByQuery: one slot for all keys (and for
		// all keyed commands of a transaction), owned by this node.
		slot := routing.Slot(keys[0])
		for _, k := range keys[1:] {
			if routing.Slot(k) != slot {
				s.crossSlot(e)
				return
			}
		}
		owner := v.t.Shard(slot)
		if a := s.p.annc.Load(); a != nil {
			// A slot a migrate rule moves (injtopo.go): its announced
			// owner answers -ASK to the new owner, which serves it after
			// ASKING; without ASKING, or elsewhere, -MOVED to the
			// announced owner, as a Redis Cluster mid-resharding does.
			if ru := a.asking(slot); ru != nil && s.p.now() < a.until {
				src := a.v.t.Shard(slot)
				switch {
				case n.i == owner && asking:
				case n.i == src && owner < len(s.p.facade.nodes):
					ru.hits.Add(1)
					if s.tx.on {
						s.tx.aborted = true
					}
					s.markInjected(e.seq, e.tIn, ru, 0)
					s.local(e, s.redirectReply("-ASK ", slot, owner))
					return
				case n.i != src:
					owner = src
				}
			}
		}
		switch {
		case owner == n.i:
		case owner >= len(s.p.facade.nodes):
			// A master with no virtual node (more masters than
			// --facade-listen addresses): every node forwards its slots.
			s.send(e, owner, frame)
			return
		default:
			if s.tx.on {
				s.tx.aborted = true
			}
			s.local(e, s.redirectReply("-MOVED ", slot, owner))
			return
		}
		if s.tx.on {
			// Each queued command is checked alone; keys of several
			// slots in one transaction fail its EXEC (above).
			switch {
			case s.tx.slot < 0:
				s.tx.slot = int(slot)
			case s.tx.slot != int(slot):
				s.vcross = true
			}
		}
	}
	fixedShape{}.dispatch(s, v, e, c, args, frame)
}

// redirectReply is "-MOVED <slot> <host>:<port>" (kind "-MOVED ") or
// "-ASK ..." naming the virtual node of shard owner, as Redis Cluster
// formats it (cluster.c clusterRedirectClient); a slot no shard serves
// gets CLUSTERDOWN.
func (s *client) redirectReply(kind string, slot uint16, owner int) []byte {
	f := s.p.facade
	if owner < 0 || owner >= len(f.nodes) {
		return []byte("-CLUSTERDOWN Hash slot not served\r\n")
	}
	b := append(s.l.scratch[:0], kind...)
	b = strconv.AppendUint(b, uint64(slot), 10)
	b = append(b, ' ')
	b = append(b, s.nodeHost(&f.nodes[owner])...)
	b = append(b, ':')
	b = append(b, f.nodes[owner].port...)
	b = append(b, "\r\n"...)
	s.l.scratch = b
	return b
}

// nodeHost is the host a client is told for node n: its listener's host,
// or for a wildcard listener the address the client reached respmeter on.
func (s *client) nodeHost(n *facadeNode) string {
	if n.host != "" {
		return n.host
	}
	return s.vhost
}

// servingNodes lists the virtual nodes that serve slots, by index: those
// whose shard owns slots, and the client's own node when a master with no
// virtual node owns some (see nodeRanges).
func (s *client) servingNodes(v *topoView) []*facadeNode {
	f := s.p.facade
	var out []*facadeNode
	mine := false
	for _, sh := range v.live {
		switch {
		case sh < len(f.nodes):
			out = append(out, &f.nodes[sh])
			mine = mine || sh == s.vnode.i
		case !mine:
			mine = true
			out = append(out, s.vnode)
		}
	}
	slices.SortFunc(out, func(a, b *facadeNode) int { return a.i - b.i })
	return slices.Compact(out)
}

// nodeRanges returns the slot ranges node n presents: its shard's, and for
// the client's own node also those of masters with no virtual node, which
// every node forwards.
func (s *client) nodeRanges(v *topoView, n *facadeNode) [][2]uint16 {
	var rs [][2]uint16
	if n.i < len(v.t.Addrs) {
		rs = v.t.Ranges(n.i)
	}
	if n == s.vnode {
		for _, sh := range v.live {
			if sh >= len(s.p.facade.nodes) {
				rs = append(rs, v.t.Ranges(sh)...)
			}
		}
		slices.SortFunc(rs, func(a, b [2]uint16) int { return int(a[0]) - int(b[0]) })
	}
	return rs
}

// facadeRedirect rewrites a -MOVED or -ASK reply of an engine that reaches
// a virtual node's client (one respmeter did not follow: inside MULTI, or
// after too many hops) so that it names the virtual node of the target
// master, or the client's own node when the target has none. Any other
// reply is returned as it is.
func (s *client) facadeRedirect(frame []byte, from string) []byte {
	if len(frame) < 3 {
		return frame
	}
	rd, ok := routing.ParseRedirect(frame[1:len(frame)-2], from)
	if !ok {
		return frame
	}
	n := s.nodeOf(rd.Addr)
	kind := "-MOVED "
	if rd.Ask {
		kind = "-ASK "
	}
	b := append(s.l.scratch[:0], kind...)
	b = strconv.AppendUint(b, uint64(rd.Slot), 10)
	b = append(b, ' ')
	b = append(b, s.nodeHost(n)...)
	b = append(b, ':')
	b = append(b, n.port...)
	b = append(b, "\r\n"...)
	s.l.scratch = b
	return b
}

// infoClusterOff is the line of an INFO reply of an engine without
// cluster support ("# Cluster" section).
var infoClusterOff = []byte("\ncluster_enabled:0\r")

// facadeInfo returns a standalone engine's INFO reply to a virtual node's
// client with "cluster_enabled:0" turned into "cluster_enabled:1", as a
// Redis Cluster node reports it (redis-py's RedisCluster reads INFO before
// CLUSTER SLOTS and refuses a node that says 0). Same length, so the
// frame's header stays valid; any other reply is returned as it is.
func (s *client) facadeInfo(frame []byte) []byte {
	i := bytes.Index(frame, infoClusterOff)
	if i < 0 {
		return frame
	}
	b := append(s.l.scratch[:0], frame...)
	b[i+len(infoClusterOff)-2] = '1'
	s.l.scratch = b
	return b
}

// nodeOf is the virtual node that presents the master at addr (an engine's
// host:port as in respmeter's shard map), or the client's own node when
// that master has none (it left the map, or no address was left for it).
func (s *client) nodeOf(addr string) *facadeNode {
	if i := s.p.router.load().t.Index(addr); i >= 0 && i < len(s.p.facade.nodes) {
		return &s.p.facade.nodes[i]
	}
	return s.vnode
}

// upstreamReply is reply, one of respmeter's own error replies about the
// engine at addr ("-ERR upstream <addr> not answering", "... connection
// lost: <error>", "... unreachable: dial tcp <addr>: ..."), as the client
// may see it: for a virtual node's client every mention of addr names the
// virtual node of that master instead (nodeOf), so that no engine address
// reaches it through the facade; for any other client reply itself. Error
// path only: the rewrite allocates.
func (s *client) upstreamReply(reply []byte, addr string) []byte {
	if s.vnode == nil || addr == "" {
		return reply
	}
	n := s.nodeOf(addr)
	return bytes.ReplaceAll(reply, []byte(addr), []byte(s.nodeHost(n)+":"+n.port))
}

// clusterCmd answers the CLUSTER subcommands a cluster client uses, as a
// Redis 7.0 cluster node with the virtual nodes as its masters (no
// replicas) would: SLOTS, SHARDS, NODES, INFO, MYID, KEYSLOT,
// COUNTKEYSINSLOT, and GETSLOTMIGRATIONS (Valkey 9.0 on): over a cluster
// the node's own engine lists its atomic slot migrations, with the node
// ids the client knows (facadeNodeIDs); over standalone shards, whose
// slots never move, none (an empty array). Other subcommands get Redis's
// "unknown subcommand" error (they manage a real cluster's bus, which the
// facade does not have; CLUSTER MIGRATESLOTS among them).
func (s *client) clusterCmd(v *topoView, e *request, args [][]byte, frame []byte) {
	if len(args) < 2 {
		s.local(e, []byte("-ERR wrong number of arguments for 'cluster' command\r\n"))
		return
	}
	sub := args[1]
	arity := func(want int) bool {
		if len(args) == want {
			return true
		}
		s.local(e, []byte(fmt.Sprintf("-ERR wrong number of arguments for 'cluster|%s' command\r\n", strings.ToLower(safeArg(sub)))))
		return false
	}
	resp3 := s.has(cfResp3)
	v = s.p.announced(v) // an old layout, while a cluster event keeps it announced (injtopo.go)
	switch {
	case eqFold(sub, "slots"):
		if arity(2) {
			s.local(e, s.clusterSlots(v, resp3))
		}
	case eqFold(sub, "shards"):
		if arity(2) {
			s.local(e, s.clusterShards(v, resp3))
		}
	case eqFold(sub, "nodes"):
		if arity(2) {
			s.local(e, verbatim(s.clusterNodes(v), resp3))
		}
	case eqFold(sub, "info"):
		if arity(2) {
			s.local(e, verbatim(s.clusterInfo(v), resp3))
		}
	case eqFold(sub, "myid"):
		if arity(2) {
			s.local(e, appendBulk(nil, []byte(s.vnode.id)))
		}
	case eqFold(sub, "keyslot"):
		if arity(3) {
			s.local(e, []byte(":"+strconv.Itoa(int(routing.Slot(args[2])))+"\r\n"))
		}
	case eqFold(sub, "countkeysinslot"):
		if !arity(3) {
			return
		}
		slot, err := strconv.ParseInt(string(args[2]), 10, 64)
		switch {
		case err != nil:
			s.local(e, []byte("-ERR value is not an integer or out of range\r\n"))
		case slot < 0 || slot >= routing.NumSlots:
			s.local(e, []byte("-ERR Invalid slot\r\n"))
		case v.t.Shard(uint16(slot)) != s.vnode.i:
			// A node holds no keys of slots it does not own. (Slots of a
			// master with no virtual node answer 0 too.)
			s.local(e, []byte(":0\r\n"))
		case s.p.router.cluster:
			s.send(e, s.home, frame) // the cluster node counts its own keys
		default:
			// The standalone engine has no slot index: a script counts
			// its keys of that slot (O(N) in the keyspace, where Redis
			// Cluster's is O(1)).
			b := append(s.l.scratch[:0], "*4\r\n$4\r\nEVAL\r\n"...)
			b = appendBulk(b, []byte(countKeysScript))
			b = append(b, "$1\r\n0\r\n"...)
			b = appendBulk(b, args[2])
			s.l.scratch = b
			s.send(e, s.home, b)
		}
	case eqFold(sub, "getslotmigrations"):
		switch {
		case !arity(2):
		case s.p.router.cluster:
			e.flags |= eNodeIDs
			s.send(e, s.home, frame)
		default:
			s.local(e, []byte("*0\r\n"))
		}
	default:
		s.local(e, []byte(fmt.Sprintf("-ERR unknown subcommand '%s'. Try CLUSTER HELP.\r\n", safeArg(sub))))
	}
}

// facadeNodeIDs returns an engine's CLUSTER GETSLOTMIGRATIONS reply (each
// job's source_node and target_node: engine node ids) to a virtual node's
// client with the id of every master in v's map (Topology.IDs) replaced by
// the id of the virtual node that presents it (nodeOf), so that the jobs
// name the nodes of the client's CLUSTER NODES and MYID. Both ids are 40
// hex digits, so the frame's lengths stay valid. An engine node without a
// virtual node (a target that owned no slot when the map was read) keeps
// its engine id.
// Rare command: the rewrite allocates.
func (s *client) facadeNodeIDs(v *topoView, frame []byte) []byte {
	for addr, id := range v.t.IDs {
		if i := v.t.Index(addr); i >= 0 && i < len(s.p.facade.nodes) && len(s.p.facade.nodes[i].id) == len(id) {
			frame = bytes.ReplaceAll(frame, []byte(id), []byte(s.p.facade.nodes[i].id))
		}
	}
	return frame
}

// clusterSlots is the CLUSTER SLOTS reply (Redis 7.0): per slot range, in
// slot order, [start, end, [host, port, id, {}]], the networking metadata
// an empty map (RESP2: an empty array).
func (s *client) clusterSlots(v *topoView, resp3 bool) []byte {
	type rng struct {
		r [2]uint16
		n *facadeNode
	}
	var rs []rng
	for _, n := range s.servingNodes(v) {
		for _, r := range s.nodeRanges(v, n) {
			rs = append(rs, rng{r, n})
		}
	}
	for i := 1; i < len(rs); i++ { // insertion sort by start slot: few ranges
		for j := i; j > 0 && rs[j].r[0] < rs[j-1].r[0]; j-- {
			rs[j], rs[j-1] = rs[j-1], rs[j]
		}
	}
	b := []byte("*" + strconv.Itoa(len(rs)) + "\r\n")
	for _, x := range rs {
		b = append(b, "*3\r\n"...)
		b = appendInt(b, int64(x.r[0]))
		b = appendInt(b, int64(x.r[1]))
		b = append(b, "*4\r\n"...)
		b = appendBulk(b, []byte(s.nodeHost(x.n)))
		port, _ := strconv.Atoi(x.n.port)
		b = appendInt(b, int64(port))
		b = appendBulk(b, []byte(x.n.id))
		if resp3 {
			b = append(b, "%0\r\n"...)
		} else {
			b = append(b, "*0\r\n"...)
		}
	}
	return b
}

// clusterShards is the CLUSTER SHARDS reply (Redis 7.0): per shard a map
// {slots: [start, end, ...], nodes: [{id, port, ip, endpoint, role,
// replication-offset, health}]}, the node's availability-zone after health
// where it has one (Topology.Zones: the cluster's own, Valkey 9.1, or
// Config.ShardZones over Shards), and the shard's id after nodes where the
// engine's cluster gives one (facade.shardIDs: Valkey 9); RESP2 gives the
// maps as flat arrays.
func (s *client) clusterShards(v *topoView, resp3 bool) []byte {
	nodes := s.servingNodes(v)
	mapHead := func(b []byte, n int) []byte {
		if resp3 {
			return append(b, "%"+strconv.Itoa(n)+"\r\n"...)
		}
		return append(b, "*"+strconv.Itoa(2*n)+"\r\n"...)
	}
	str := func(b []byte, x string) []byte { return appendBulk(b, []byte(x)) }
	b := []byte("*" + strconv.Itoa(len(nodes)) + "\r\n")
	for _, n := range nodes {
		ranges := s.nodeRanges(v, n)
		if s.p.facade.shardIDs {
			b = mapHead(b, 3)
		} else {
			b = mapHead(b, 2)
		}
		b = str(b, "slots")
		b = append(b, "*"+strconv.Itoa(2*len(ranges))+"\r\n"...)
		for _, r := range ranges {
			b = appendInt(b, int64(r[0]))
			b = appendInt(b, int64(r[1]))
		}
		b = str(b, "nodes")
		b = append(b, "*1\r\n"...)
		zone := ""
		if n.i < len(v.t.Addrs) {
			zone = v.t.Zones[v.t.Addrs[n.i]]
		}
		if zone != "" {
			b = mapHead(b, 8)
		} else {
			b = mapHead(b, 7)
		}
		b = str(b, "id")
		b = str(b, n.id)
		if s.p.facade.tls {
			// As a node of a cluster with tls-cluster yes and port 0.
			b = str(b, "tls-port")
		} else {
			b = str(b, "port")
		}
		port, _ := strconv.Atoi(n.port)
		b = appendInt(b, int64(port))
		host := s.nodeHost(n)
		b = str(b, "ip")
		b = str(b, host)
		b = str(b, "endpoint")
		b = str(b, host)
		b = str(b, "role")
		b = str(b, "master")
		b = str(b, "replication-offset")
		b = appendInt(b, 0)
		b = str(b, "health")
		b = str(b, "online")
		if zone != "" {
			b = str(b, "availability-zone")
			b = str(b, zone)
		}
		if s.p.facade.shardIDs {
			b = str(b, "id")
			b = str(b, n.shard)
		}
	}
	return b
}

// clusterNodes is the CLUSTER NODES text (Redis 7.0): one line per node,
// "<id> <ip:port@cport> <flags> - <ping-sent> <pong-recv> <epoch>
// connected <ranges...>", the client's own node flagged myself. cport is
// port+10000 as in Redis, 0 where that is no port.
func (s *client) clusterNodes(v *topoView) []byte {
	var b []byte
	now := strconv.FormatInt(time.Now().UnixMilli(), 10)
	for _, n := range s.servingNodes(v) {
		port, _ := strconv.Atoi(n.port)
		cport := port + 10000
		if cport > 65535 {
			cport = 0
		}
		b = append(b, n.id...)
		b = append(b, ' ')
		b = append(b, net.JoinHostPort(s.nodeHost(n), n.port)...)
		b = append(b, '@')
		b = strconv.AppendInt(b, int64(cport), 10)
		if n == s.vnode {
			b = append(b, " myself,master - 0 0 "...)
		} else {
			b = append(b, " master - 0 "+now+" "...)
		}
		b = strconv.AppendInt(b, int64(n.i+1), 10)
		b = append(b, " connected"...)
		for _, r := range s.nodeRanges(v, n) {
			b = append(b, ' ')
			b = strconv.AppendInt(b, int64(r[0]), 10)
			if r[1] != r[0] {
				b = append(b, '-')
				b = strconv.AppendInt(b, int64(r[1]), 10)
			}
		}
		b = append(b, '\n')
	}
	return b
}

// clusterInfo is the CLUSTER INFO text (Redis 7.0 fields; the bus message
// counters are 0: there is no bus).
func (s *client) clusterInfo(v *topoView) []byte {
	assigned := routing.NumSlots - v.t.Unassigned()
	state := "ok"
	if assigned < routing.NumSlots {
		state = "fail"
	}
	n := len(s.servingNodes(v))
	my := s.vnode.i + 1
	lines := []string{
		"cluster_state:" + state,
		"cluster_slots_assigned:" + strconv.Itoa(assigned),
		"cluster_slots_ok:" + strconv.Itoa(assigned),
		"cluster_slots_pfail:0",
		"cluster_slots_fail:0",
		"cluster_known_nodes:" + strconv.Itoa(n),
		"cluster_size:" + strconv.Itoa(n),
		"cluster_current_epoch:" + strconv.Itoa(max(n, my)),
		"cluster_my_epoch:" + strconv.Itoa(my),
		"cluster_stats_messages_sent:0",
		"cluster_stats_messages_received:0",
		"total_cluster_links_buffer_limit_exceeded:0",
	}
	var b []byte
	for _, l := range lines {
		b = append(b, l...)
		b = append(b, "\r\n"...)
	}
	return b
}

// verbatim is text as Redis's addReplyVerbatim sends it: a RESP3 verbatim
// string of format txt, or a RESP2 bulk string.
func verbatim(text []byte, resp3 bool) []byte {
	if !resp3 {
		return appendBulk(nil, text)
	}
	b := []byte("=" + strconv.Itoa(len(text)+4) + "\r\ntxt:")
	b = append(b, text...)
	return append(b, "\r\n"...)
}

func appendInt(b []byte, n int64) []byte {
	b = append(b, ':')
	b = strconv.AppendInt(b, n, 10)
	return append(b, "\r\n"...)
}

// safeArg is a client's argument as it may appear in an error line: at
// most 128 bytes, CR and LF replaced.
func safeArg(b []byte) string {
	if len(b) > 128 {
		b = b[:128]
	}
	out := make([]byte, len(b))
	for i, c := range b {
		if c == '\r' || c == '\n' {
			c = ' '
		}
		out[i] = c
	}
	return string(out)
}

// countKeysScript counts the keys of slot ARGV[1] in the database: KEYS *
// (each key once; the script runs atomically) and CRC16/XMODEM of each
// key's hash tag or whole name, as routing.Slot (Redis Cluster
// specification, "Key distribution model").
const countKeysScript = `local slot = tonumber(ARGV[1])
local t = {}
for i = 0, 255 do
  local c = bit.lshift(i, 8)
  for _ = 1, 8 do
    if bit.band(c, 0x8000) ~= 0 then c = bit.bxor(bit.lshift(c, 1), 0x1021) else c = bit.lshift(c, 1) end
  end
  t[i] = bit.band(c, 0xffff)
end
local n = 0
for _, k in ipairs(redis.call('KEYS', '*')) do
  local h = k
  local a = string.find(k, '{', 1, true)
  if a then
    local z = string.find(k, '}', a + 1, true)
    if z and z > a + 1 then h = string.sub(k, a + 1, z - 1) end
  end
  local c = 0
  for i = 1, #h do
    c = bit.band(bit.bxor(bit.lshift(c, 8), t[bit.bxor(bit.rshift(c, 8), string.byte(h, i))]), 0xffff)
  end
  if bit.band(c, 16383) == slot then n = n + 1 end
end
return n`

// listeners lists gnet's listen addresses: the plain endpoint, then the
// virtual nodes.
// addrs returns the nodes' addresses; setAddrs sets them back (Start's
// retry of pickPorts).
func (f *facade) addrs() []string {
	out := make([]string, len(f.nodes))
	for i, n := range f.nodes {
		out[i] = n.addr
	}
	return out
}

func (f *facade) setAddrs(addrs []string) {
	for i := range f.nodes {
		f.nodes[i].addr = addrs[i]
	}
}

func (f *facade) listeners(listen string) []string {
	out := []string{"tcp://" + listen}
	if f.tls {
		return out
	}
	for _, n := range f.nodes {
		out = append(out, "tcp://"+n.addr)
	}
	return out
}

// busyAddr returns the last of listeners ("tcp://host:port", as
// listeners gives them) that cannot be bound now, or else: gnet's bind
// error does not say which of the addresses failed. Last: gnet binds them
// in order and may still hold those before the one that failed.
func busyAddr(listeners []string, or string) string {
	for i := len(listeners) - 1; i >= 0; i-- {
		a := strings.TrimPrefix(listeners[i], "tcp://")
		ln, err := net.Listen("tcp", a)
		if err != nil {
			return a
		}
		_ = ln.Close()
	}
	return or
}

// checkFacade checks the combination of Route and FacadeListen.
func checkFacade(cfg Config) []error {
	var errs []error
	if cfg.Route != RouteFacade {
		if len(cfg.FacadeListen) > 0 {
			errs = append(errs, fmt.Errorf("facade listen needs route %s", RouteFacade))
		}
		if cfg.FacadeTLS {
			errs = append(errs, fmt.Errorf("facade TLS needs route %s", RouteFacade))
		}
		return errs
	}
	if cfg.FacadeTLS && cfg.TLS == nil {
		errs = append(errs, errors.New("facade TLS needs a TLS configuration"))
	}
	for _, a := range cfg.FacadeListen {
		if _, _, err := net.SplitHostPort(a); err != nil {
			errs = append(errs, fmt.Errorf("facade listen %q: %v", a, err))
		}
	}
	if len(cfg.FacadeListen) == 0 {
		errs = append(errs, fmt.Errorf("route %s needs facade listen addresses", RouteFacade))
	} else if len(cfg.Shards) > 0 && len(cfg.FacadeListen) < len(cfg.Shards) {
		errs = append(errs, fmt.Errorf("route %s: %d facade listen addresses for %d shards (one per shard, in shard order)",
			RouteFacade, len(cfg.FacadeListen), len(cfg.Shards)))
	}
	return errs
}

// FacadeAddrs returns the bound addresses of RouteFacade's virtual nodes,
// host:port, in shard order (the ports chosen where Config.FacadeListen
// had port 0); nil under other routes or before Start.
func (p *Proxy) FacadeAddrs() []string {
	if p.facade == nil || p.Addr() == "" {
		return nil
	}
	out := make([]string, len(p.facade.nodes))
	for i, n := range p.facade.nodes {
		out[i] = n.addr
	}
	return out
}

// pickPorts replaces port 0 in *listen and in the nodes' addresses by a
// free port, found by binding it and closing it again: gnet's listeners
// are told apart by the address they were given (Engine.DupListener), so
// two "host:0" would be one. It sets f.picked when it picked one. Another
// process may take the port between the two binds (an outgoing connection
// gets its ephemeral port from the same range): Start then picks again
// (gnet v2.9.7 leaves the listeners it opened before the failed one open).
func (f *facade) pickPorts(listen *string) error {
	f.picked = false
	pick := func(a *string) error {
		host, port, err := net.SplitHostPort(*a)
		if err != nil || port != "0" {
			return nil
		}
		ln, err := net.Listen("tcp", *a)
		if err != nil {
			return err
		}
		_, port, _ = net.SplitHostPort(ln.Addr().String())
		*a = net.JoinHostPort(host, port)
		f.picked = true
		return ln.Close()
	}
	if err := pick(listen); err != nil {
		return err
	}
	for i := range f.nodes {
		if f.tls {
			break // bound already (listenTLSNodes)
		}
		if err := pick(&f.nodes[i].addr); err != nil {
			return err
		}
	}
	if f.afterPick != nil {
		f.afterPick(*listen, f.addrs())
	}
	return nil
}

// swapdbClusterErr is a cluster node's answer to SWAPDB (Redis and Valkey).
var swapdbClusterErr = []byte("-ERR SWAPDB is not allowed in cluster mode\r\n")
