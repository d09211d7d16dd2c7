package proxy

import (
	"strconv"

	"github.com/respmeter/respmeter/routing"
	"github.com/respmeter/respmeter/routing/command"
)

// A shape maps a client's requests onto engine connections; the client
// (client.go) does everything else the same way in every shape: framing,
// limits, pub/sub and MONITOR, state replay, ordering, timing. New picks
// the shape from Config.Route: fixedShape, pinnedShape, slotShape or
// facadeShape (facade.go). A new shape (fault injection, a mirror) is a
// type with these methods; the client, its loop and its engine links ask
// it and test no route mode.
type shape interface {
	// start sets up a new client (its home shard is picked already).
	start(s *client)
	// bind sees every request first, before pub/sub, SYNC/PSYNC and
	// CLIENT REPLY are handled (client.route); it reports whether it kept
	// the request, to go once the client has a shard (flushHeld).
	bind(s *client, v *topoView, e *request, c *routing.Call, frame []byte) (held bool)
	// dispatch queues request e (its classification c, its arguments and
	// the frame they alias in the read buffer) on the connection(s) that
	// answer it, or answers it locally. Pub/sub, QUIT, CLIENT REPLY and
	// SYNC/PSYNC were handled before (client.route).
	dispatch(s *client, v *topoView, e *request, c *routing.Call, args [][]byte, frame []byte)
	// single reports whether every request of s goes to its home shard,
	// over one engine connection: then the client opens it at connect,
	// sends the start of an incomplete request early (forwardPartial) and
	// writes replies as they come (deferClient).
	single(s *client) bool
	// perShard reports whether the metrics time each request per shard
	// (metrics ShardObserve) rather than only count it per engine.
	perShard() bool
	// reorders reports whether replies of several shards wait for each
	// other (the metrics' reorder wait).
	reorders() bool
	// redials reports whether s stays open when the engine closes one of
	// its private connections (its idle timeout, CLIENT KILL, a restart)
	// carrying nothing a new connection cannot restore (link.redialable):
	// its next request for that shard then dials again and replays its
	// state, as a cluster client re-dials a node. busy: requests of s were
	// in flight on the connection (they fail either way). No: s is closed
	// once answered, as a direct client is by the same close.
	redials(s *client, busy bool) bool
	// spreads reports whether a client of the shape may send requests to
	// several shards (single false): its replies then come in pieces, a
	// shard's at a time, and the loops get ready to write them together
	// once per pass (loop.deferClient). No: every client of the shape is
	// single, and its replies are written as they come.
	spreads() bool
	// closesOnFailure reports whether a client is closed, once answered,
	// when an engine connection carrying its requests fails without the
	// engine closing it (a dial that fails, link.dialFailed; an engine
	// that stops answering, link.notAnswering), as a direct client whose
	// connection failed would reconnect. No: its requests there get the
	// error and it stays open, its next request for the shard dialling
	// again, as a cluster client's does when one node fails.
	closesOnFailure() bool
}

// fixedShape: one engine (Config.Route none): every request goes to the
// client's home shard, in order, as on a direct connection.
type fixedShape struct{}

// pinnedShape: Config.Route RoutePinned: each client is bound to one shard
// (round-robin at connect, or with firstKey the shard of the first key it
// uses) and every request goes there as in fixedShape; a keyed request of
// another shard is counted (the emulated client routes badly).
type pinnedShape struct{ firstKey bool }

// slotShape: Config.Route RouteSlots, the Redis Cluster specification's
// client side: each command goes to the shard that owns its hash slot,
// multi-key commands across slots are split (fanout), keyless ones follow
// the command tips (keyless), transactions stay on one slot, MOVED/ASK are
// followed (link.redirect).
type slotShape struct{}

func (fixedShape) start(*client) {}
func (fixedShape) bind(*client, *topoView, *request, *routing.Call, []byte) bool {
	return false
}
func (fixedShape) single(*client) bool { return true }
func (fixedShape) perShard() bool      { return false }
func (fixedShape) reorders() bool      { return false }

// spreads: no, and closesOnFailure: yes; the client's one engine is its
// only one.
func (fixedShape) spreads() bool         { return false }
func (fixedShape) closesOnFailure() bool { return true }

// redials: no. The client's one engine connection stands for its own, and
// idles only when the client does: the engine's close reaches the client
// as it would directly (docs/sessions-housekeeping.md).
func (fixedShape) redials(*client, bool) bool { return false }

func (fixedShape) dispatch(s *client, v *topoView, e *request, c *routing.Call, args [][]byte, frame []byte) {
	// CLIENT TRACKING is kept where the connection may be dialled again:
	// its "on" forbids that (link.redialable).
	if s.keepState(e, c, args, frame, s.p.shape.redials(s, false)) {
		return
	}
	switch c.ID {
	case command.Multi:
		s.tx.on = true
	case command.Watch:
		// A WATCH binds the connection as MULTI does: a new one would run
		// the EXEC unwatched (link.redialable).
		s.tx.shard = s.home
	case command.Unwatch:
		if !s.tx.on {
			s.tx.shard = -1
		}
	case command.Exec, command.Discard, command.Reset:
		frame = s.endTx(e, c.ID, frame)
	}
	s.send(e, s.home, frame)
}

func (sh pinnedShape) start(s *client) {
	if sh.firstKey {
		s.home = -1 // chosen by the first keyed command (see bind)
	}
}

// bind pins the client: under firstKey its first key picks the shard, and
// requests before it wait (flushHeld); a keyed request of another shard
// than the client's is counted.
func (pinnedShape) bind(s *client, v *topoView, e *request, c *routing.Call, frame []byte) bool {
	if k, ok := c.FirstKey(); ok {
		switch sh := v.t.Shard(routing.Slot(k)); {
		case s.home < 0:
			s.pinHome(sh)
		case sh != s.home:
			if m := s.p.cfg.Metrics; m != nil {
				m.PinnedMisroute()
			}
		}
	}
	if s.home < 0 {
		s.holdFor(e, frame)
		return true
	}
	return false
}

func (pinnedShape) dispatch(s *client, v *topoView, e *request, c *routing.Call, args [][]byte, frame []byte) {
	fixedShape{}.dispatch(s, v, e, c, args, frame)
}
func (pinnedShape) single(*client) bool { return true }
func (pinnedShape) perShard() bool      { return true }
func (pinnedShape) reorders() bool      { return false }

// spreads: no, and closesOnFailure: yes, as fixedShape: a pinned client
// sends everything to its one shard.
func (pinnedShape) spreads() bool         { return false }
func (pinnedShape) closesOnFailure() bool { return true }

// redials: when nothing was in flight. A pinned client stands for a
// cluster client bound to one node, which dials the node again when it
// finds its connection closed; one whose requests were lost with the
// connection is closed once answered, as its own connection would be.
func (pinnedShape) redials(_ *client, busy bool) bool { return !busy }

func (slotShape) start(*client) {}
func (slotShape) bind(*client, *topoView, *request, *routing.Call, []byte) bool {
	return false
}
func (slotShape) single(*client) bool { return false }
func (slotShape) perShard() bool      { return true }
func (slotShape) reorders() bool      { return true }

// spreads: yes, and closesOnFailure: no; the client's requests go to
// the shards that own their slots, and one shard failing leaves the others.
func (slotShape) spreads() bool         { return true }
func (slotShape) closesOnFailure() bool { return false }

// redials: yes. The client holds a connection per shard, as a cluster
// client does: a close of one, even with requests in flight (they fail),
// leaves the others and the client.
func (slotShape) redials(*client, bool) bool { return true }

func (slotShape) dispatch(s *client, v *topoView, e *request, c *routing.Call, args [][]byte, frame []byte) {
	id := c.ID
	if s.keepState(e, c, args, frame, true) {
		return
	}
	switch id {
	case command.Asking:
		// Answered now (a client waits for it), sent with the next
		// command, on its connection.
		s.hold(frame)
		s.local(e, okReply)
		return
	case command.Multi:
		if s.tx.on {
			// Redis's answer, without letting it pick the transaction's
			// shard.
			s.local(e, []byte("-ERR MULTI calls can not be nested\r\n"))
			return
		}
		s.tx.on = true
		e.flags |= eInTx
		if s.tx.shard < 0 {
			// The shard is the one of the transaction's first command:
			// MULTI is answered now and sent ahead of that command.
			s.hold(frame)
			s.local(e, okReply)
			return
		}
		s.send(e, s.tx.shard, frame)
		return
	case command.Exec, command.Discard:
		if !s.tx.on {
			break
		}
		shard := s.tx.shard
		if shard < 0 {
			shard = s.home
		}
		s.send(e, shard, s.endTx(e, id, frame))
		return
	case command.Unwatch:
		if !s.tx.on {
			shard := s.tx.shard
			if shard < 0 {
				shard = s.home
			}
			s.tx.slot, s.tx.shard = -1, -1
			s.send(e, shard, frame)
			return
		}
	case command.Client:
		if len(args) >= 3 && !eqFold(args[1], "reply") && !eqFold(args[1], "caching") {
			switch in := c.Info; {
			case command.ConnState(in) == command.ConnSets:
				s.clientStateCmd(e, c, args, frame)
				return
			case in.Subcommands != nil:
				s.p.unknownSubcommand(args[1])
			}
		}
		if len(args) == 3 && eqFold(args[1], "caching") && !s.tx.on {
			// It modifies the next command (client-side caching, OPTIN
			// and OPTOUT modes): it goes with it, on its connection.
			s.holdFor(e, frame)
			return
		}
	case command.Reset:
		s.state, s.cstate = [numStates][]byte{}, s.cstate[:0]
		s.endTx(e, id, frame)
		s.broadcastState(e, frame)
		return
	}
	keys, err := c.Keys()
	if err != nil || len(keys) == 0 {
		s.keyless(v, e, c, args, frame)
		return
	}
	slot := routing.Slot(keys[0])
	for _, k := range keys[1:] {
		if routing.Slot(k) != slot {
			if !s.tx.on && s.fanout(v, e, id, args, frame) {
				return
			}
			s.crossSlot(e)
			return
		}
	}
	shard := v.t.Shard(slot)
	if shard < 0 {
		s.local(e, []byte("-CLUSTERDOWN Hash slot not served\r\n"))
		return
	}
	if s.tx.on || id == command.Watch {
		// A transaction (and WATCH before it) stays on one slot, as in
		// Redis Cluster: a key of another slot gets CROSSSLOT and the
		// EXEC then fails.
		switch {
		case s.tx.shard < 0:
			s.tx.slot, s.tx.shard = int(slot), shard
		case s.tx.slot < 0 && shard == s.tx.shard:
			s.tx.slot = int(slot) // the transaction began with keyless commands on this shard
		case int(slot) != s.tx.slot:
			s.crossSlot(e)
			return
		default:
			shard = s.tx.shard
		}
	}
	s.send(e, shard, frame)
}

// keyless routes a command that names no keys (or whose keys the engine
// will refuse: it answers those itself). The policy follows the command
// tips of Redis 7 (COMMAND DOCS "request_policy"/"response_policy"):
//
//   - DBSIZE, and all_shards/all_nodes commands whose response policy is
//     agg_sum: sent to every shard, integer replies summed;
//   - FLUSHALL, FLUSHDB, SCRIPT LOAD/FLUSH, FUNCTION LOAD/DELETE/FLUSH/
//     RESTORE, LATENCY RESET, SLOWLOG RESET, MEMORY PURGE (all_succeeded):
//     sent to every shard, the first reply unless one is an error;
//   - SCRIPT EXISTS (agg_logical_and): every shard, 1 only where every
//     shard has the script (an EVALSHA after a 1 then works on any shard);
//   - WAIT, WAITAOF (agg_min): every shard, the fewest acknowledgements;
//   - SCRIPT KILL, FUNCTION KILL (one_succeeded): every shard, OK if the
//     shard running the script killed it, else the first error (NOTBUSY);
//   - KEYS: sent to every shard, arrays concatenated;
//   - SCAN: one shard at a time, the cursor encoding the shard;
//   - PUBLISH: the shard of the channel's slot, where SUBSCRIBE to that
//     channel (its first one) takes a subscriber (standalone shards do not
//     forward messages to each other as a cluster bus does; PSUBSCRIBE
//     stays on the home shard and sees only what is published there);
//   - everything else, including response_policy:special (PING, ECHO, INFO,
//     CONFIG GET/SET, RANDOMKEY, CLIENT, LATENCY, MEMORY STATS, EVAL with 0
//     keys, a request with a bad numkeys, ...): the client's home shard,
//     chosen round-robin at connect. Inside a transaction they go to the
//     transaction's shard.
func (s *client) keyless(v *topoView, e *request, c *routing.Call, args [][]byte, frame []byte) {
	id := c.ID
	if g := s.p.router.downs.Load(); g != s.downs {
		// A shard was found unreachable since this client last looked:
		// keyless commands leave a home shard that is down, as a cluster
		// client sends them to any node it can reach.
		s.downs = g
		s.home = s.p.router.rehome(v, s.home)
	}
	if s.tx.on {
		if s.tx.shard < 0 {
			// The transaction goes to the shard of its first keyed
			// command: keyless ones before it wait with MULTI (flushHeld
			// sends them to the home shard if the batch names no key).
			s.holdFor(e, frame)
			return
		}
		s.send(e, s.tx.shard, frame)
		return
	}
	info := c.Info
	tips := info.Tips
	if len(tips) == 0 {
		tips = tipsFallback[info.Name]
	}
	reqAll, policy := false, aggRelay
	for _, t := range tips {
		switch t {
		case "request_policy:all_shards", "request_policy:all_nodes":
			reqAll = true
		default:
			if a, ok := responsePolicies[t]; ok {
				policy = a
			}
		}
	}
	switch {
	case id == command.Publish && len(args) == 3:
		if !s.p.router.cluster {
			// Standalone shards do not forward messages to each other as a
			// cluster's bus does: every shard gets it, and the reply is the
			// receivers over all of them (see pubsub.go).
			s.broadcast(v, e, aggSum, frame)
			return
		}
		if sh := v.t.Shard(routing.Slot(args[1])); sh >= 0 {
			s.send(e, sh, frame)
			return
		}
	case id == command.Scan:
		if s.scanRoute(v, e, args) {
			return
		}
	case id == command.Keys && len(args) == 2:
		s.broadcast(v, e, aggConcat, frame)
		return
	case reqAll && policy != aggRelay && id != command.Ping && (id != command.Config || len(args) < 2 || !eqFold(args[1], "set")):
		// (PING is answered by the home shard, as a liveness check of the
		// client's connection; CONFIG RESETSTAT and REWRITE reach every
		// shard as their tips say, but CONFIG SET stays on the home shard:
		// a setting changed on every shard by one client is a change an
		// operator makes per node.)
		s.broadcast(v, e, policy, frame)
		return
	}
	s.send(e, s.home, frame)
}

// responsePolicies maps the command tips' response policies respmeter
// merges to their aggregation (merge.go). response_policy:special (INFO,
// LATENCY, MEMORY STATS, FUNCTION STATS, ...: a reply per node that a
// cluster client shows per node) and commands with no request policy stay
// on the home shard.
var responsePolicies = map[string]uint8{
	"response_policy:agg_sum":         aggSum,
	"response_policy:all_succeeded":   aggAllOK,
	"response_policy:one_succeeded":   aggOneOK,
	"response_policy:agg_logical_and": aggAnd,
	"response_policy:agg_logical_or":  aggOr,
	"response_policy:agg_min":         aggMin,
	"response_policy:agg_max":         aggMax,
}

// tipsFallback gives the command tips of commands that redis-server 7.0
// lists with none, as Redis 7.2 and later list them, so that routing does
// not depend on the engine's version. SWAPDB, which no engine tips (a
// cluster node refuses it), goes to every shard as FLUSHDB does: the
// databases of the whole data set swap, not those of the home shard only.
var tipsFallback = map[string][]string{
	"config|resetstat": {"request_policy:all_nodes", "response_policy:all_succeeded"},
	"config|rewrite":   {"request_policy:all_nodes", "response_policy:all_succeeded"},
	"swapdb":           {"request_policy:all_shards", "response_policy:all_succeeded"},
}

// broadcast sends frame to every live shard.
func (s *client) broadcast(v *topoView, e *request, agg uint8, frame []byte) {
	if len(v.live) == 0 {
		s.local(e, []byte("-CLUSTERDOWN no shard serves any slot\r\n"))
		return
	}
	e.agg = agg
	for _, shard := range v.live {
		ln := s.linkTo(shard)
		s.release(ln)
		e.part()
		ln.queue(e, len(e.ps)-1, frame)
	}
}

// scanRoute sends SCAN to the shard its cursor names. The client's cursor
// is engineCursor*N + k, where k is the position of the shard in the list
// of live shards (N of them): cursor 0 starts on the first shard with
// cursor 0, and when a shard's iteration ends the next one starts, so one
// full iteration returns every key of every shard exactly once (under the
// guarantees of SCAN, as long as the shard map does not change). A cursor
// that is not a number goes to the home shard, which refuses it.
func (s *client) scanRoute(v *topoView, e *request, args [][]byte) bool {
	n := len(v.live)
	c, err := strconv.ParseUint(string(args[1]), 10, 64)
	if err != nil || n == 0 {
		return false
	}
	engine, k := scanCursor(c, n)
	e.agg, e.scanPos, e.scanN = aggScan, k, n
	b := s.l.scratch[:0]
	b = append(b, '*')
	b = strconv.AppendInt(b, int64(len(args)), 10)
	b = append(b, "\r\n"...)
	b = appendBulk(b, args[0])
	b = appendBulk(b, strconv.AppendUint(s.l.num[:0], engine, 10))
	for _, a := range args[2:] {
		b = appendBulk(b, a)
	}
	s.l.scratch = b
	s.send(e, v.live[k], b)
	return true
}

// fanout splits a multi-key MGET, MSET, DEL, UNLINK, EXISTS or TOUCH whose
// keys hash to several slots into one request per slot (as a cluster client
// does; a cluster node refuses keys of two slots even when it owns both),
// and reports whether it did. The replies are merged in finish.
func (s *client) fanout(v *topoView, e *request, id command.ID, args [][]byte, frame []byte) bool {
	step := 1
	switch id {
	case command.Mget:
		e.agg = aggMGet
	case command.Mset:
		e.agg, step = aggAllOK, 2
		if len(args)%2 != 1 {
			// The engine checks the arity before the slots: let it answer.
			e.agg = aggRelay
			s.send(e, s.home, frame)
			return true
		}
	case command.Del, command.Unlink, command.Exists, command.Touch:
		e.agg = aggSum
	default:
		return false
	}
	// Group the keys by slot: part i of e serves slot slots[i].
	slots := s.l.slots[:0]
	group := s.l.group[:0]
	for i := 1; i < len(args); i += step {
		slot := routing.Slot(args[i])
		g := -1
		for j, sl := range slots {
			if sl == slot {
				g = j
				break
			}
		}
		if g < 0 {
			if v.t.Shard(slot) < 0 {
				s.l.slots, s.l.group = slots, group
				e.agg = aggRelay
				s.local(e, []byte("-CLUSTERDOWN Hash slot not served\r\n"))
				return true
			}
			g = len(slots)
			slots = append(slots, slot)
		}
		group = append(group, int32(g))
	}
	s.l.slots, s.l.group = slots, group
	for g, slot := range slots {
		n := 0
		for _, x := range group {
			if int(x) == g {
				n++
			}
		}
		p := e.part()
		b := append(p.req, '*')
		b = strconv.AppendInt(b, int64(n*step+1), 10)
		b = append(b, "\r\n"...)
		b = appendBulk(b, args[0])
		for ki, x := range group {
			if int(x) != g {
				continue
			}
			a := 1 + ki*step
			b = appendBulk(b, args[a])
			if step == 2 {
				b = appendBulk(b, args[a+1])
			}
			p.pos = append(p.pos, int32(ki))
		}
		p.req = b
		ln := s.linkTo(v.t.Shard(slot))
		s.release(ln)
		ln.queue(e, len(e.ps)-1, b)
	}
	return true
}
