package proxy

import (
	"bytes"
	"context"
	"errors"
	"io"
	"slices"
	"strconv"
	"time"

	"github.com/panjf2000/gnet/v2"
	"golang.org/x/sys/unix"

	"github.com/respmeter/respmeter/internal/capture"
	"github.com/respmeter/respmeter/metrics/slowlog"
	"github.com/respmeter/respmeter/proxy/resp"
	"github.com/respmeter/respmeter/routing"
	"github.com/respmeter/respmeter/routing/command"
)

// A routed session (Config.Route = RouteSlots) is one client connection
// whose commands go to the shard that owns their hash slot, over one
// upstream connection per shard (an rlink, opened on first use on the
// client's event loop). Replies go back to the client in request order: a
// reply that completes before the ones ahead of it is held (copied) until
// they are out, so a slow shard holds up later replies to that client, as
// it would for any cluster client that pipelines.
//
// Every request is an rentry in the session's queue, answered by one or
// more parts: one part for a single-slot command, one per slot group for a
// multi-key fan-out (MGET, MSET, DEL, UNLINK, EXISTS, TOUCH), one per shard
// for a broadcast (DBSIZE, KEYS, FLUSHALL, ...). Each link keeps a FIFO of
// the parts it was sent, since an engine answers in order.

// Reply aggregation of a routed request (rentry.agg).
const (
	aggRelay  uint8 = iota // one part: its reply as is
	aggLocal               // answered by the proxy (out holds the reply)
	aggSum                 // integer replies summed (DEL, EXISTS, TOUCH, UNLINK, DBSIZE)
	aggAllOK               // the first part's reply unless a part failed (MSET, FLUSHALL, SCRIPT LOAD)
	aggMGet                // MGET: elements put back in request order
	aggConcat              // arrays concatenated (KEYS)
	aggScan                // SCAN: the engine's cursor re-encoded with the shard
	aggSubs                // pub/sub confirmations from several connections, renumbered (see pubsub.go)
)

// rentry.flags
const (
	eQuit      uint8 = 1 << iota // QUIT: close the client after this reply
	eInTx                        // queued inside MULTI: redirects are relayed, not followed
	eWritten                     // the reply went to the client's write buffer directly
	eExecAbort                   // EXEC of an aborted transaction: answer EXECABORT
	eSilent                      // sent under CLIENT REPLY OFF/SKIP: the reply is dropped
	eQuietQuit                   // QUIT whose reply is dropped: close after the next output, if any
)

// rentry is one client request of a routed session.
type rentry struct {
	s                  *rsession
	tIn, tSent, tReply int64 // ns on the proxy's clock; tSent is the first part's
	svc                int64 // longest part service time (ns)
	penalty            int64 // extra time spent following redirects (ns)
	cmd                command.ID
	agg                uint8
	flags              uint8
	ready              bool
	left               int32          // parts not answered yet
	ps                 []rpart        // reused across requests
	out                []byte         // the reply, once ready (reused)
	scanPos, scanN     int            // aggScan: position in the live shard list, and its length
	argc               int32          // arguments including the name (slow log)
	key                slowlog.KeyBuf // first key, only with the slow log on
	setName            string         // CLIENT SETNAME / HELLO SETNAME name, applied if it succeeds
	isErr              bool           // the reply relayed directly (eWritten) was an error
	seq                uint64         // the request's number in its session, from 1
}

// rpart is the part of a request sent to one shard.
type rpart struct {
	link    *rlink
	req     []byte  // the request bytes, kept to re-send on MOVED/ASK or once a held request is released
	pos     []int32 // aggMGet: positions of this part's keys in the request
	reply   []byte  // the part's reply (multi-part requests, or one that waits behind others)
	tSent   int64
	svcFrom int64
	tReply  int64
	redirAt int64 // when the first redirect arrived
	hops    int8
	mshard  int
	// sub is the subscription family of a pub/sub request (0 for others),
	// answered by expect confirmations (0: until the link has none of the
	// family left; see rlink.confirmation).
	sub    uint8
	expect int32
}

// maxRedirects bounds the redirects followed for one request, as cluster
// clients do (go-redis: 3 by default; redis-cli -c: 5 ... ); past it the
// engine's redirect is relayed.
const maxRedirects = 5

// state commands replayed, in this order, on every shard connection a
// routed session opens after they were sent.
const (
	stAuth = iota
	stHello
	stSelect
	stReadMode // READONLY / READWRITE
	stName     // CLIENT SETNAME
	stTracking // CLIENT TRACKING: each shard tracks the keys read from it
	numStates
)

// stateSlot returns the state slot a connection-state command sets (AUTH,
// HELLO, SELECT, READONLY/READWRITE, CLIENT SETNAME, CLIENT TRACKING), or
// -1. Routed sessions (stateCmd) and handed-over clients (handback.record)
// keep their state by it.
func stateSlot(id command.ID, args [][]byte) int {
	switch id {
	case command.Auth:
		return stAuth
	case command.Hello:
		return stHello
	case command.Select:
		return stSelect
	case command.Readonly, command.Readwrite:
		return stReadMode
	case command.Client:
		switch {
		case len(args) >= 3 && eqFold(args[1], "setname"):
			return stName
		case len(args) >= 3 && eqFold(args[1], "tracking"):
			return stTracking
		}
	}
	return -1
}

type rsession struct {
	p      *Proxy
	l      *loop
	client gnet.Conn

	scan    resp.RequestScanner
	partial []byte
	q       ring[*rentry]
	links   []*rlink // by topology shard index
	extra   []*rlink // links to nodes outside the map (ASK targets)
	home    int      // shard of keyless commands
	state   [numStates][]byte
	// cstate holds the other CLIENT subcommands that set connection state
	// by rule (command.ConnState: NO-TOUCH, NO-EVICT, SETINFO, Valkey's
	// CAPA, ...), the latest of each (by all arguments but the last),
	// replayed after state.
	cstate []namedState
	// held are requests waiting for the shard of the next command, which
	// they modify or begin (ASKING, MULTI, CLIENT CACHING, the keyless
	// commands at the start of a transaction), one after the other; heldE
	// has, per held request, the entry its reply answers, or nil when the
	// proxy answered it already (ASKING, MULTI) and the engine's reply is
	// dropped.
	held  []byte
	heldE []*rentry

	tx struct {
		on      bool
		slot    int // -1: not known yet
		shard   int // -1: not known yet
		aborted bool
	}

	// shared: requests go to the loop's shared upstream connections
	// (Config.UpstreamMode "shared") until a stateful command moves the
	// client to private ones; resp3 selects the RESP3 shared connection;
	// slot picks one of Config.UpstreamConns.
	shared bool
	resp3  bool
	slot   int
	// paused: a request needs the requests in flight answered first
	// (pauseWait, pausePrivate, pausePassthrough); it and everything
	// after it wait in hbuf.
	paused       uint8
	resuming     bool // clientData is processing hbuf itself
	resumeQueued bool // on the loop's resume list (maybeResume)
	pauseReason  string
	hbuf         []byte

	wbuf     []byte    // replies to write at the end of the callback
	done     []*rentry // requests whose replies are in wbuf, for timing
	dirty    bool      // on the loop's dirty list: flush at the end of the callback
	buffered int       // bytes of replies held behind slower ones
	// streaming is the link whose reply is going to the client part by
	// part (cut-through). Out-of-band frames (pushes, pub/sub messages,
	// MONITOR lines) wait in pushHold while it streams, or until the replies
	// their link delivered before them are written (see oob).
	streaming *rlink
	// streamAt is where in wbuf the streaming reply starts, -1 once part
	// of it was written (capture summarizes it from there).
	streamAt int
	pushHold []byte
	pushTags []pushTag
	// seq numbers the requests; written is the seq of the last one whose
	// reply went to the write buffer.
	seq, written uint64
	stopRead     bool
	closeAfter   bool
	// closeOnOutput: a QUIT whose reply was dropped; the client is closed
	// after the next output it gets (see eQuietQuit).
	closeOnOutput bool
	closeNow      bool // close once what is ready is written (engine protocol error)
	closed        bool
	linger        *linger // the client half-closed: replies go through it
	name          string  // client name set by CLIENT SETNAME / HELLO SETNAME, for the slow log
	lastOut       int64
	out           outputGuard
	// replyMode is the client's CLIENT REPLY mode (replyOn, replyOff,
	// replySkipNext): under slot routing the proxy applies it itself,
	// dropping replies, so that the requests still go to their shards.
	replyMode uint8
	downs     uint64 // router.downs when the home shard was last checked
	// subs is what the client subscribed to (nil before its first pub/sub
	// request), subShard the shard of its SUBSCRIBE/PSUBSCRIBE connection
	// (-1: none yet); see pubsub.go.
	subs     *subModel
	subShard int
	// sticky is, per shard, the shared connection the client's requests
	// went to last (see link).
	sticky []*rlink
	// capOf is the capture this session was last checked against, capBuf
	// its loop's buffer when the session is captured (nil: not sampled or
	// no capture), capID its id there (capture.go).
	capOf  *capture.Capture
	capBuf *capture.Buf
	capID  uint64
}

func newRSession(p *Proxy, c gnet.Conn, l *loop) *rsession {
	s := &rsession{p: p, l: l, client: c, subShard: -1}
	s.downs = p.router.downs.Load()
	if h := p.router.pickHome(p.router.load(), -1); h >= 0 {
		s.home = h
	}
	s.tx.slot, s.tx.shard = -1, -1
	if p.shared {
		s.shared = true
		s.slot = int(p.sharedNext.Add(1) % uint64(p.cfg.UpstreamConns))
	}
	return s
}

// sharedMaxInflight bounds one client's requests in flight on shared
// upstream connections, so that one deep pipeline cannot queue more than
// that many commands ahead of another client's (redis-server itself runs
// a client's whole 16 KiB read, about 500 small commands, before turning
// to the next client). Reading resumes once half of them are answered
// (sharedResumeAt), so a deep pipeline keeps the connection busy instead
// of waiting a round trip per window.
const (
	sharedMaxInflight = 512
	sharedResumeAt    = sharedMaxInflight / 2
)

// Pause kinds (rsession.paused).
const (
	pauseWait        uint8 = iota + 1 // then go on as before
	pauseWindow                       // the shared window is full: go on once half is answered
	pausePrivate                      // then use private upstream connections
	pausePassthrough                  // then become a passthrough session on one private connection
)

// needsPause says whether a request must wait for the requests in flight
// before it is sent, and what happens then:
//
//   - SYNC/PSYNC turn the connection into a replication stream: the client
//     becomes a passthrough session on a private connection to its home
//     shard, connection state replayed first.
//   - With shared upstream connections, a command that changes the
//     connection's state, makes it a feed or may block it moves the client
//     to private connections for the rest of its life: MULTI, WATCH,
//     blocking commands (BLPOP, WAIT, ...), (P|S)(UN)SUBSCRIBE, MONITOR,
//     AUTH, HELLO with AUTH or SETNAME, SELECT of a non-zero db,
//     READONLY/READWRITE, RESET, REPLCONF, DEBUG, the commands that free a
//     busy engine (SCRIPT KILL, FUNCTION KILL, SHUTDOWN, CLIENT
//     PAUSE/UNPAUSE: see stall.go) and CLIENT subcommands that set or
//     report per-connection state, by rule from the engine's entry
//     (command.ConnState: SETNAME, TRACKING, CACHING, NO-EVICT, NO-TOUCH,
//     SETINFO, CAPA, ID, INFO, GETNAME, GETREDIR, TRACKINGINFO, ...: a
//     client id must stay the client's own; not REPLY, which the session
//     applies itself). HELLO 2/3 alone only switches the shared connection
//     used, after the requests in flight.
//
// Waiting first keeps the order of effects: nothing sent on the new
// connection can overtake what is still queued on the old one.
func (s *rsession) needsPause(id command.ID, args [][]byte) (uint8, string) {
	switch id {
	case command.Sync, command.Psync:
		return pausePassthrough, "other"
	}
	if !s.shared {
		return 0, ""
	}
	if s.p.authRequired.Load() {
		// The engine wants a password of new connections: a client
		// without AUTH must meet it on its own (see auth.go).
		return pausePrivate, "state"
	}
	switch id {
	case command.Subscribe, command.Psubscribe, command.Unsubscribe, command.Punsubscribe,
		command.Ssubscribe, command.Sunsubscribe:
		return pausePrivate, "pubsub"
	case command.Monitor:
		return pausePrivate, "monitor"
	case command.Multi, command.Watch:
		return pausePrivate, "transaction"
	case command.Auth, command.Select, command.Readonly, command.Readwrite, command.Reset, command.Replconf:
		if id == command.Select && len(args) == 2 && string(args[1]) == "0" {
			return 0, ""
		}
		// (REPLCONF: what it sets before SYNC/PSYNC belongs to the
		// connection the replication stream then uses.)
		return pausePrivate, "state"
	case command.Hello:
		if len(args) > 2 {
			return pausePrivate, "state"
		}
		if s.q.len() > 0 && len(args) == 2 && (args[1][0] == '3') != s.resp3 {
			return pauseWait, ""
		}
		return 0, ""
	case command.Shutdown:
		return pausePrivate, "state" // answered while the engine is busy (see stall.go)
	case command.Debug:
		// Some of its replies come with pushes (DEBUG PROTOCOL push),
		// which a shared connection could not tell whose they are.
		return pausePrivate, "state"
	case command.Script, command.Function:
		if len(args) >= 2 && eqFold(args[1], "kill") {
			return pausePrivate, "state"
		}
	case command.Client:
		// The subcommands that set or report this connection's state, by
		// rule from the engine's entry (command.ConnState): SETNAME,
		// TRACKING, CACHING, NO-EVICT, NO-TOUCH, SETINFO, CAPA, ID, INFO,
		// GETNAME, GETREDIR, TRACKINGINFO, ...; not REPLY, which the
		// session applies itself (route). A subcommand the table does not
		// know (CallInfo gives the parent: the engine's COMMAND INFO was
		// not read) moves the client too: the engine may know it. PAUSE
		// and UNPAUSE are answered at once on a connection of its own (see
		// stall.go).
		if len(args) >= 2 && (eqFold(args[1], "pause") || eqFold(args[1], "unpause")) {
			return pausePrivate, "state"
		}
		if len(args) >= 2 && !eqFold(args[1], "reply") {
			if in := s.p.resolver.CallInfo(id, args); in.Subcommands != nil || command.ConnState(in) != command.ConnNone {
				return pausePrivate, "state"
			}
		}
	}
	if s.p.resolver.Blocks(id) {
		return pausePrivate, "blocking"
	}
	return 0, ""
}

// holdRest keeps rest (the input from a paused request on) in hbuf. Input
// that is already the held buffer (being resumed) is kept in place: a
// million pipelined requests resumed in rounds must not be copied once per
// round.
func (s *rsession) holdRest(rest []byte) {
	if s.resuming {
		s.hbuf = rest
		return
	}
	s.hbuf = append(s.hbuf[:0], rest...)
}

// resume runs once the requests in flight before a pause are answered.
func (s *rsession) resume() {
	if s.closed || s.paused == 0 {
		return
	}
	kind, reason := s.paused, s.pauseReason
	if kind != pauseWait && kind != pauseWindow {
		if m := s.p.cfg.Metrics; m != nil {
			m.Handoff(reason)
		}
	}
	if kind == pausePassthrough {
		s.toPassthrough()
		return
	}
	if kind == pausePrivate {
		s.shared = false
	}
	s.paused = 0
	data := s.hbuf
	s.hbuf = nil
	s.resuming = true
	s.clientData(data)
	s.resuming = false
}

// toPassthrough hands the client connection to a passthrough session on a
// private upstream connection to its home shard, for SYNC/PSYNC (the
// connection turns into a replication stream for good), with the
// connection state replayed first (its replies dropped), then the held
// input.
func (s *rsession) toPassthrough() {
	v := s.p.router.load()
	shard := s.home
	ns := newSession(s.p, s.client, s.l)
	ns.upAddr = v.t.Addrs[shard]
	if m := s.p.cfg.Metrics; m != nil {
		ns.mshard = m.Shard(ns.upAddr)
	}
	ns.lastOut = s.lastOut
	ns.wantResp3, ns.resp3 = s.resp3, s.resp3
	// Keep the client's own connection to that shard when it has one
	// idle: its id (CLIENT ID) stays the same.
	var keep *rlink
	if !s.shared && shard < len(s.links) {
		if ln := s.links[shard]; ln != nil && ln.c != nil && !ln.dead && ln.q.len() == 0 && !ln.rf.InFrame() && len(ln.wb) == 0 {
			keep = ln
			s.links[shard] = nil
		}
	}
	if keep == nil {
		for st := range s.states() {
			ns.outq = append(ns.outq, st...)
			ns.q.push(pending{kind: kindDiscard})
			s.l.inflight.Add(1)
		}
	}
	data := s.hbuf
	s.hbuf = nil
	// The routed session ends here; its other private links close, the
	// client connection stays.
	s.closed = true
	for _, ln := range s.links {
		if ln != nil {
			ln.shutdown()
		}
	}
	for _, ln := range s.extra {
		ln.shutdown()
	}
	s.client.SetContext(ns)
	if keep != nil {
		keep.dead = true // the rlink is done; the connection lives on
		keep.c.SetContext(&ns.link)
		ns.up = keep.c
	} else {
		go s.p.dial(ns, s.client.EventLoop())
	}
	if req := replyModeReq(s.replyMode); req != nil {
		// The engine connection takes over the client's CLIENT REPLY
		// mode, after the replayed state (whose replies are awaited).
		ns.replyMode = s.replyMode
		ns.toUpstream(req)
	}
	ns.clientData(data)
}

// replyModeArg parses CLIENT REPLY ON|OFF|SKIP (args[0] is CLIENT); ok is
// false for anything else, which the engine answers (a syntax error).
func replyModeArg(args [][]byte) (mode uint8, ok bool) {
	if len(args) != 3 || !eqFold(args[1], "reply") {
		return 0, false
	}
	switch {
	case eqFold(args[2], "on"):
		return replyOn, true
	case eqFold(args[2], "off"):
		return replyOff, true
	case eqFold(args[2], "skip"):
		return replySkipNext, true
	}
	return 0, false
}

// applyReplyMode marks e, a request sent under CLIENT REPLY OFF or SKIP,
// silent (its reply is dropped; redis-server drops errors too), and ends a
// SKIP. RESET ends both modes; under OFF its own reply is sent (the engine
// clears the mode first), under SKIP it is dropped. CLIENT REPLY itself is
// handled in route.
func (s *rsession) applyReplyMode(e *rentry, id command.ID, args [][]byte) {
	if fam, _ := subFamily(id); fam != 0 && !s.tx.on {
		// Confirmations are sent even under CLIENT REPLY OFF/SKIP
		// (redis-server 7.0 pubsub.c writes them as pushes); a SKIP is
		// consumed all the same.
		if s.replyMode == replySkipNext {
			s.replyMode = replyOn
		}
		return
	}
	if id == command.Reset {
		if s.replyMode == replySkipNext {
			e.flags |= eSilent
		}
		s.replyMode = replyOn
		return
	}
	if _, ok := replyModeArg(args); ok && id == command.Client && !s.tx.on {
		return
	}
	e.flags |= eSilent
	if s.replyMode == replySkipNext {
		s.replyMode = replyOn
	}
}

// replyModeReq is the CLIENT REPLY request that puts an engine connection
// in mode (nil for replyOn).
func replyModeReq(mode uint8) []byte {
	switch mode {
	case replyOff:
		return []byte("*3\r\n$6\r\nCLIENT\r\n$5\r\nREPLY\r\n$3\r\nOFF\r\n")
	case replySkipNext:
		return []byte("*3\r\n$6\r\nCLIENT\r\n$5\r\nREPLY\r\n$4\r\nSKIP\r\n")
	}
	return nil
}

// newEntry takes an entry from the loop's pool.
func (s *rsession) newEntry(id command.ID, now int64) *rentry {
	var e *rentry
	if n := len(s.l.rpool); n > 0 {
		e = s.l.rpool[n-1]
		s.l.rpool = s.l.rpool[:n-1]
	} else {
		e = new(rentry)
	}
	s.seq++
	e.s, e.tIn, e.cmd, e.seq = s, now, id, s.seq
	s.q.push(e)
	s.l.inflight.Add(1)
	return e
}

// recycle returns e to the loop's pool, keeping its buffers unless large.
func (l *loop) recycle(e *rentry) {
	ps := e.ps[:0]
	for i := range e.ps[:cap(e.ps)] {
		p := &e.ps[:cap(e.ps)][i]
		p.link = nil
		if cap(p.req) > 64<<10 {
			p.req = nil
		}
		if cap(p.reply) > 64<<10 {
			p.reply = nil
		}
	}
	out := e.out[:0]
	if cap(out) > 64<<10 {
		out = nil
	}
	*e = rentry{ps: ps, out: out}
	l.rpool = append(l.rpool, e)
}

// part adds a part to e and returns it.
func (e *rentry) part() *rpart {
	if len(e.ps) < cap(e.ps) {
		e.ps = e.ps[:len(e.ps)+1]
	} else {
		e.ps = append(e.ps, rpart{})
	}
	p := &e.ps[len(e.ps)-1]
	p.req, p.pos, p.reply = p.req[:0], p.pos[:0], p.reply[:0]
	p.tSent, p.svcFrom, p.tReply, p.redirAt, p.hops, p.mshard = 0, 0, 0, 0, 0, -1
	p.sub, p.expect = 0, 0
	e.left++
	return p
}

// local answers e with reply, from the proxy.
func (s *rsession) local(e *rentry, reply []byte) {
	e.agg = aggLocal
	e.out = append(e.out[:0], reply...)
	e.ready = true
}

// clientTraffic frames the client's requests and routes each one.
func (s *rsession) clientTraffic(c gnet.Conn) {
	data, _ := c.Next(-1)
	s.clientData(data)
}

// clientData processes bytes from the client.
func (s *rsession) clientData(data []byte) {
	if s.closed || s.stopRead {
		return
	}
	p := s.p
	if s.paused != 0 {
		// Waiting for the requests in flight before a handoff: hold the
		// input (bounded by the query limit).
		var over bool
		if s.hbuf, over = s.l.holdInput(s.hbuf, data); over {
			s.evict("query_limit")
		}
		return
	}
	if p.draining.Load() {
		s.stopRead, s.closeAfter = true, true
		s.markDirty()
		s.l.flushAll()
		return
	}
	// Held input (resuming) was counted when it was read, and its think
	// time is not now minus the last reply.
	if m := s.l.m; m != nil && !s.resuming {
		m.AddClientBytes(len(data), 0)
	}
	now := p.now()
	if m := s.l.m; m != nil && !s.resuming && s.q.len() == 0 && s.lastOut != 0 && len(s.partial) == 0 {
		m.Lock()
		m.ThinkLocked(time.Duration(now - s.lastOut))
		m.Unlock()
	}
	fromPartial := false
	if len(s.partial) > 0 {
		s.partial = append(s.partial, data...)
		data, fromPartial = s.partial, true
	}
	v := p.router.load()
	off, routed, first := 0, 0, s.seq+1
	for off < len(data) && !s.stopRead {
		if s.shared && s.q.len() >= sharedMaxInflight {
			// On a shared connection one client's deep pipeline would hold
			// up every other client's replies: its next requests wait for
			// these to be answered.
			s.paused = pauseWindow
			s.holdRest(data[off:])
			off = len(data)
			break
		}
		n, kind, err := s.scan.Scan(data[off:])
		if err != nil {
			var pe resp.ProtocolError
			if !errors.As(err, &pe) {
				pe = resp.ProtocolError(err.Error())
			}
			s.local(s.newEntry(command.Other, now), pe.Reply())
			s.stopRead, s.closeAfter = true, true
			if m := p.cfg.Metrics; m != nil {
				m.ProtocolError()
			}
			p.log.Debug("client protocol error", "client", s.client.RemoteAddr().String(), "err", pe.Error())
			break
		}
		if n == 0 {
			break
		}
		frame := data[off : off+n]
		off += n
		if kind == resp.KindEmpty {
			continue
		}
		s.l.args = resp.Args(frame, kind, s.l.args[:0])
		if len(s.l.args) > 0 && s.route(v, s.l.args, frame, now) {
			// This request and all after it wait (see needsPause).
			s.holdRest(data[off-n:])
			off = len(data)
			break
		}
		routed = off
	}
	if c := p.capture.cur.Load(); c != nil || s.capOf != nil {
		s.captureBatch(c, data[:routed], first, now)
	}
	s.flushHeld()
	tail := data[off:]
	if lim := p.cfg.ClientQueryLimit; lim > 0 && len(tail)+s.q.len()*pendingSize > lim {
		s.evict("query_limit")
		return
	}
	switch {
	case s.stopRead || len(tail) == 0 || s.paused != 0:
		s.partial = s.partial[:0]
		s.scan.Reset()
	case fromPartial:
		s.partial = s.partial[:copy(s.partial, tail)]
	default:
		s.partial = append(s.partial[:0], tail...)
	}
	s.markDirty()
	s.l.flushAll()
}

// route classifies one request and queues it on the shard(s) that answer
// it. args and frame alias the read buffer: what must outlive the call is
// copied.
func (s *rsession) route(v *topoView, args [][]byte, frame []byte, now int64) (paused bool) {
	id := s.p.resolver.Lookup(args[0])
	if mayChangeAuth(id) {
		s.p.requestAuthCheck()
	}
	if kind, reason := s.needsPause(id, args); kind != 0 {
		s.paused, s.pauseReason = kind, reason
		return true
	}
	e := s.newEntry(id, now)
	e.argc = int32(len(args))
	if s.p.cfg.SlowLog != nil {
		if k, ok := slowlog.SafeFirstKey(s.p.resolver.Name(id), args, s.p.keyPos(id, args)); ok {
			e.key.Set(k)
		}
		if name, ok := setNameArg(id, args); ok {
			e.setName = string(name)
		}
	}
	if s.tx.on {
		e.flags |= eInTx
	}
	if s.replyMode != replyOn || id == command.Reset {
		s.applyReplyMode(e, id, args)
	}
	switch id {
	case command.Quit:
		s.local(e, okReply)
		if e.flags&eSilent == 0 {
			e.flags |= eQuit
		} else {
			// redis-server 7.0 flags the client CLOSE_AFTER_REPLY with no
			// reply queued: it is closed once output queued for it (a
			// pub/sub confirmation, say) is written, and not before.
			e.flags |= eQuietQuit
		}
		s.stopRead = true
		return
	case command.Hello:
		if s.shared {
			// HELLO [2|3] without AUTH or SETNAME: the shared connection
			// of that protocol answers it (see needsPause).
			if len(args) >= 2 {
				s.resp3 = args[1][0] == '3'
			}
			s.state[stHello] = append(s.state[stHello][:0], frame...)
			s.send(e, 0, frame)
			return
		}
	}
	fam, _ := subFamily(id)
	if fam == 0 && id != command.Reset && s.resp2Subscribed() {
		// A RESP2 connection in subscribe mode: a subscribed connection
		// answers as the engine would (an error, or PING's subscribe-mode
		// reply); see pubsub.go. The engine refuses CLIENT REPLY there, an
		// error dropped like any reply under OFF or SKIP.
		if _, ok := replyModeArg(args); ok && id == command.Client && s.replyMode != replyOn {
			e.flags |= eSilent
			if s.replyMode == replySkipNext {
				s.replyMode = replyOn
			}
		}
		s.send(e, s.feedShard(), frame)
		return
	}
	switch {
	case fam != 0 && !s.tx.on:
		s.pubsub(v, e, id, args, frame)
		return
	case id == command.Reset:
		s.subs, s.subShard = nil, -1
	case id == command.Client:
		if m, ok := replyModeArg(args); ok {
			s.clientReply(e, m)
			return
		}
	}
	if s.p.route == routeNone {
		switch id {
		case command.Auth, command.Hello, command.Select, command.Readonly, command.Readwrite:
			s.stateCmd(e, id, args, frame)
			return
		case command.Client:
			if len(args) >= 3 && eqFold(args[1], "setname") {
				s.stateCmd(e, id, args, frame)
				return
			}
		case command.Multi:
			s.tx.on = true
		case command.Exec, command.Discard:
			if id == command.Exec && s.tx.aborted {
				e.flags |= eExecAbort
				frame = discardReq
			}
			s.tx.on, s.tx.aborted = false, false
		case command.Reset:
			s.tx.on, s.tx.aborted = false, false
		}
		s.send(e, 0, frame)
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
		if id == command.Exec && s.tx.aborted {
			e.flags |= eExecAbort
			frame = discardReq
		}
		s.tx.on, s.tx.aborted, s.tx.slot, s.tx.shard = false, false, -1, -1
		s.send(e, shard, frame)
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
	case command.Auth, command.Hello, command.Select, command.Readonly, command.Readwrite:
		s.stateCmd(e, id, args, frame)
		return
	case command.Client:
		if len(args) >= 3 && (eqFold(args[1], "setname") || eqFold(args[1], "tracking")) {
			s.stateCmd(e, id, args, frame)
			return
		}
		if len(args) >= 3 && !eqFold(args[1], "reply") && !eqFold(args[1], "caching") {
			switch in := s.p.resolver.CallInfo(id, args); {
			case command.ConnState(in) == command.ConnSets:
				s.clientStateCmd(e, id, args, frame)
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
		s.tx.on, s.tx.aborted, s.tx.slot, s.tx.shard = false, false, -1, -1
		s.broadcastState(e, frame)
		return
	}
	keys, err := s.p.resolver.Keys(args, s.l.keys[:0])
	s.l.keys = keys[:0]
	if err != nil || len(keys) == 0 {
		s.keyless(v, e, id, args, frame)
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
	return
}

var (
	okReply      = []byte("+OK\r\n")
	hello3Req    = []byte("*2\r\n$5\r\nHELLO\r\n$1\r\n3\r\n")
	discardReq   = []byte("*1\r\n$7\r\nDISCARD\r\n")
	askingReq    = []byte("*1\r\n$6\r\nASKING\r\n")
	crossSlotErr = []byte("-CROSSSLOT Keys in request don't hash to the same slot\r\n")
	execAbortErr = []byte("-EXECABORT Transaction discarded because of previous errors.\r\n")
	// replyInMultiErr answers CLIENT REPLY inside MULTI under slot routing.
	replyInMultiErr = []byte("-ERR CLIENT REPLY inside MULTI is not supported by respmeter --route slots\r\n")
	// replyInMultiSharedErr answers it with shared upstream connections.
	replyInMultiSharedErr = []byte("-ERR CLIENT REPLY inside MULTI is not supported by respmeter --upstream-mode shared\r\n")
	redirectMoved         = []byte("MOVED ")
	redirectAsk           = []byte("ASK ")
)

// clientReply applies CLIENT REPLY ON|OFF|SKIP: the proxy drops the
// replies (applyReplyMode) and never sends it, so the engine connections
// keep answering everything and requests still go to their shards.
func (s *rsession) clientReply(e *rentry, m uint8) {
	if s.tx.on {
		// Executed inside EXEC, it would leave the connection with its
		// replies off while the proxy waits for them: refused when queued,
		// which makes EXEC fail as a queuing error does in Redis
		// (EXECABORT).
		s.tx.aborted = true
		if s.p.route == routeNone {
			s.local(e, replyInMultiSharedErr)
		} else {
			s.local(e, replyInMultiErr)
		}
		return
	}
	if m == replySkipNext && s.replyMode == replyOff {
		m = replyOff // SKIP does not turn OFF back on
	}
	s.replyMode = m
	if m == replyOn {
		s.local(e, okReply)
	} else {
		e.flags |= eSilent
		s.local(e, nil)
	}
}

func (s *rsession) crossSlot(e *rentry) {
	if s.tx.on {
		s.tx.aborted = true
	}
	if m := s.p.cfg.Metrics; m != nil {
		m.CrossSlot()
	}
	s.local(e, crossSlotErr)
}

// hold keeps a request already answered by the proxy (MULTI, ASKING) to
// send ahead of the next routed command, on its connection; the engine's
// reply to it is dropped.
func (s *rsession) hold(frame []byte) { s.holdFor(nil, frame) }

// holdFor keeps a request whose reply answers e (nil: dropped) to send
// ahead of the next routed command, on its connection (see flushHeld).
func (s *rsession) holdFor(e *rentry, frame []byte) {
	s.held = append(s.held, frame...)
	s.heldE = append(s.heldE, e)
}

// flushHeld ends a batch of requests: held requests that the client waits
// for (CLIENT CACHING, keyless commands in a transaction) go to the home
// shard, or bind the transaction to it, when no later command of the batch
// took them to its own. A client may send one alone and wait for its reply.
func (s *rsession) flushHeld() {
	if !slices.ContainsFunc(s.heldE, func(e *rentry) bool { return e != nil }) || s.closed {
		return
	}
	shard := s.home
	if s.tx.on {
		if s.tx.shard < 0 {
			s.tx.shard = s.home
		}
		shard = s.tx.shard
	}
	s.release(s.link(shard))
}

// send queues e's request on shard, after any held requests (which go to
// the same shard, in order).
func (s *rsession) send(e *rentry, shard int, frame []byte) {
	ln := s.link(shard)
	s.release(ln)
	p := e.part()
	if s.p.router.cluster {
		p.req = append(p.req, frame...)
	}
	ln.queue(e, len(e.ps)-1, frame)
}

// release sends the held requests to ln.
func (s *rsession) release(ln *rlink) {
	held := s.held
	for i := 0; len(held) > 0 && i < len(s.heldE); i++ {
		n, _, _ := s.l.hscan.Scan(held)
		s.l.hscan.Reset()
		if n <= 0 {
			break
		}
		if e := s.heldE[i]; e == nil {
			ln.queueDrop(held[:n], false)
		} else {
			p := e.part()
			if s.p.router.cluster {
				p.req = append(p.req, held[:n]...)
			}
			ln.queue(e, len(e.ps)-1, held[:n])
		}
		held = held[n:]
	}
	clear(s.heldE)
	s.held, s.heldE = s.held[:0], s.heldE[:0]
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
//   - KEYS: sent to every shard, arrays concatenated;
//   - SCAN: one shard at a time, the cursor encoding the shard;
//   - PUBLISH: the shard of the channel's slot, where SUBSCRIBE to that
//     channel (its first one) takes a subscriber (standalone shards do not
//     forward messages to each other as a cluster bus does; PSUBSCRIBE
//     stays on the home shard and sees only what is published there);
//   - everything else (PING, ECHO, INFO, CONFIG, RANDOMKEY, CLIENT, WAIT,
//     EVAL with 0 keys, a request with a bad numkeys, ...): the session's
//     home shard, chosen round-robin at connect. Inside a transaction they
//     go to the transaction's shard.
func (s *rsession) keyless(v *topoView, e *rentry, id command.ID, args [][]byte, frame []byte) {
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
	info := s.p.resolver.CallInfo(id, args)
	tips := info.Tips
	if len(tips) == 0 {
		tips = tipsFallback[info.Name]
	}
	var reqAll, sum, allOK bool
	for _, t := range tips {
		switch t {
		case "request_policy:all_shards", "request_policy:all_nodes":
			reqAll = true
		case "response_policy:agg_sum":
			sum = true
		case "response_policy:all_succeeded":
			allOK = true
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
	case reqAll && sum && id != command.Ping:
		s.broadcast(v, e, aggSum, frame)
		return
	case reqAll && allOK && id != command.Ping && (id != command.Config || len(args) < 2 || !eqFold(args[1], "set")):
		// (CONFIG RESETSTAT and REWRITE reach every shard as their tips
		// say; CONFIG SET stays on the home shard: a setting changed on
		// every shard by one client is a change an operator makes per
		// node.)
		s.broadcast(v, e, aggAllOK, frame)
		return
	}
	s.send(e, s.home, frame)
}

// tipsFallback gives the command tips of commands that redis-server 7.0
// lists with none, as Redis 7.2 and later list them, so that routing does
// not depend on the engine's version.
var tipsFallback = map[string][]string{
	"config|resetstat": {"request_policy:all_nodes", "response_policy:all_succeeded"},
	"config|rewrite":   {"request_policy:all_nodes", "response_policy:all_succeeded"},
}

// broadcast sends frame to every live shard.
func (s *rsession) broadcast(v *topoView, e *rentry, agg uint8, frame []byte) {
	if len(v.live) == 0 {
		s.local(e, []byte("-CLUSTERDOWN no shard serves any slot\r\n"))
		return
	}
	e.agg = agg
	for _, shard := range v.live {
		ln := s.link(shard)
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
func (s *rsession) scanRoute(v *topoView, e *rentry, args [][]byte) bool {
	n := len(v.live)
	c, err := strconv.ParseUint(string(args[1]), 10, 64)
	if err != nil || n == 0 {
		return false
	}
	k := int(c % uint64(n))
	e.agg, e.scanPos, e.scanN = aggScan, k, n
	b := s.l.scratch[:0]
	b = append(b, '*')
	b = strconv.AppendInt(b, int64(len(args)), 10)
	b = append(b, "\r\n"...)
	b = appendBulk(b, args[0])
	b = appendBulk(b, strconv.AppendUint(s.l.num[:0], c/uint64(n), 10))
	for _, a := range args[2:] {
		b = appendBulk(b, a)
	}
	s.l.scratch = b
	s.send(e, v.live[k], b)
	return true
}

func appendBulk(b, a []byte) []byte {
	b = append(b, '$')
	b = strconv.AppendInt(b, int64(len(a)), 10)
	b = append(b, "\r\n"...)
	b = append(b, a...)
	return append(b, "\r\n"...)
}

// stateCmd handles a connection-state command (AUTH, HELLO, SELECT,
// READONLY/READWRITE, CLIENT SETNAME, CLIENT TRACKING): the home shard
// answers it, every shard connection already open gets it too (its reply
// dropped), and it is replayed first on every shard connection opened
// later. So with CLIENT TRACKING (RESP3) each shard tracks the keys the
// client reads from it and its invalidation pushes reach the client, as a
// cluster client tracking on every node connection gets them. (With
// REDIRECT id only the home shard knows the id: the others refuse it.)
func (s *rsession) stateCmd(e *rentry, id command.ID, args [][]byte, frame []byte) {
	if s.tx.on {
		s.keyless(s.p.router.load(), e, id, args, frame)
		return
	}
	k := stateSlot(id, args) // >= 0: the callers route only state commands here
	if id == command.Hello && len(args) >= 2 {
		s.resp3 = args[1][0] == '3'
	}
	// The home connection first: opened now, it replays the state saved
	// so far, not this command too (which it gets below, once).
	s.link(s.home)
	s.state[k] = append(s.state[k][:0], frame...)
	s.broadcastState(e, frame)
}

// namedState is a connection-state command kept for replay, by key.
type namedState struct {
	key   string
	frame []byte
}

// states yields the connection state to replay on a new connection, in
// order: AUTH, HELLO, SELECT, READONLY/READWRITE, CLIENT SETNAME, CLIENT
// TRACKING, then the other CLIENT setters in the order first sent.
func (s *rsession) states() func(yield func([]byte) bool) {
	return func(yield func([]byte) bool) {
		for _, st := range s.state {
			if len(st) > 0 && !yield(st) {
				return
			}
		}
		for _, st := range s.cstate {
			if !yield(st.frame) {
				return
			}
		}
	}
}

// clientStateCmd handles a CLIENT subcommand that sets connection state by
// rule (command.ConnState) other than SETNAME and TRACKING, as stateCmd
// does: the home shard answers, every open shard connection gets it, and
// it is replayed on every one opened later (the latest for each key: all
// arguments but the last, so SETINFO LIB-NAME and LIB-VER are two).
func (s *rsession) clientStateCmd(e *rentry, id command.ID, args [][]byte, frame []byte) {
	if s.tx.on {
		s.keyless(s.p.router.load(), e, id, args, frame)
		return
	}
	s.link(s.home) // opened now, it replays the state so far, not this command too
	var kb []byte
	for _, a := range args[1 : len(args)-1] {
		kb = append(append(kb, bytes.ToLower(a)...), ' ')
	}
	key := string(kb)
	i := slices.IndexFunc(s.cstate, func(st namedState) bool { return st.key == key })
	if i < 0 {
		s.cstate = append(s.cstate, namedState{key: key})
		i = len(s.cstate) - 1
	}
	s.cstate[i].frame = append(s.cstate[i].frame[:0], frame...)
	s.broadcastState(e, frame)
}

// broadcastState sends frame to the home shard (whose reply the client
// gets) and to every other open shard connection (replies dropped).
func (s *rsession) broadcastState(e *rentry, frame []byte) {
	home := s.link(s.home)
	reset := e.cmd == command.Reset
	for _, ln := range s.links {
		if ln != nil && ln != home {
			ln.queueDrop(frame, reset)
		}
	}
	for _, ln := range s.extra {
		ln.queueDrop(frame, reset)
	}
	s.send(e, s.home, frame)
}

// link returns the session's connection to shard, opening it if needed.
func (s *rsession) link(shard int) *rlink {
	if s.shared {
		// While requests are in flight (other than the one being
		// routed, already queued), more go where they went (a shared
		// connection taken out of use as stalled still is), so that the
		// client's effects keep their order.
		if s.q.len() > 1 && shard < len(s.sticky) && s.sticky[shard] != nil && !s.sticky[shard].dead {
			return s.sticky[shard]
		}
		ln := s.l.sharedLink(shard, s.resp3, s.slot)
		for shard >= len(s.sticky) {
			s.sticky = append(s.sticky, nil)
		}
		s.sticky[shard] = ln
		return ln
	}
	if shard < len(s.links) && s.links[shard] != nil {
		return s.links[shard]
	}
	for shard >= len(s.links) {
		s.links = append(s.links, nil)
	}
	ln := s.newLink(shard, s.p.router.load().t.Addrs[shard])
	s.links[shard] = ln
	return ln
}

// linkAddr returns the session's connection to addr (a node that may be
// outside the map: an ASK target).
func (s *rsession) linkAddr(addr string) *rlink {
	v := s.p.router.load()
	if i := v.t.Index(addr); i >= 0 {
		return s.link(i)
	}
	for _, ln := range s.extra {
		if ln.addr == addr {
			return ln
		}
	}
	ln := s.newLink(-1, addr)
	s.extra = append(s.extra, ln)
	return ln
}

func (s *rsession) newLink(shard int, addr string) *rlink {
	ln := &rlink{p: s.p, l: s.l, owner: s, idx: shard, addr: addr, rf: resp.NewReplyFramer(), mshard: -1}
	if m := s.p.cfg.Metrics; m != nil {
		ln.mshard = m.Shard(addr)
	}
	// The connection state comes first: AUTH, HELLO, SELECT, ...
	for st := range s.states() {
		ln.queueDrop(st, false)
	}
	go s.p.dialLink(ln, s.client.EventLoop())
	return ln
}

// dropLink forgets a failed link, so that the next command opens a new one.
func (s *rsession) dropLink(ln *rlink) {
	if ln.idx >= 0 && ln.idx < len(s.links) && s.links[ln.idx] == ln {
		s.links[ln.idx] = nil
	}
	for i, x := range s.extra {
		if x == ln {
			s.extra = append(s.extra[:i], s.extra[i+1:]...)
			break
		}
	}
}

// fanout splits a multi-key MGET, MSET, DEL, UNLINK, EXISTS or TOUCH whose
// keys hash to several slots into one request per slot (as a cluster client
// does; a cluster node refuses keys of two slots even when it owns both),
// and reports whether it did. The replies are merged in finish.
func (s *rsession) fanout(v *topoView, e *rentry, id command.ID, args [][]byte, frame []byte) bool {
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
		ln := s.link(v.t.Shard(slot))
		s.release(ln)
		ln.queue(e, len(e.ps)-1, b)
	}
	return true
}

// slow adds a command to the slow log.
func (s *rsession) slow(sl *slowlog.Log, e *rentry, tOut int64) {
	slowRec(sl, s.p.resolver.Name(e.cmd), e.argc, s.name, s.client.RemoteAddr(), &e.key, e.tIn, e.tSent, e.tReply, tOut, e.svc)
}

// endStream ends a cut-through reply: pushes held meanwhile follow it.
func (s *rsession) endStream() {
	s.streaming = nil
	s.releasePushes()
}

// markDirty puts s on its loop's list of sessions to flush at the end of
// the callback.
func (s *rsession) markDirty() {
	if !s.dirty {
		s.dirty = true
		s.l.dirty = append(s.l.dirty, s)
	}
}

// flushAll ends a callback: it writes what the links have queued (one write
// per link), then each touched session's ready replies (one write per
// client). A shared link is written once per pass of the event loop
// instead (see deferShared).
func (l *loop) flushAll() {
	if len(l.touched) > 0 {
		var t int64
		if l.m != nil {
			t = l.p.now()
		}
		deferring := l.deferShared()
		for i, ln := range l.touched {
			l.touched[i] = nil
			if ln.owner == nil && deferring && !ln.dead {
				l.deferred = append(l.deferred, ln) // stays touched until written
				continue
			}
			if !ln.dead {
				ln.write(t)
			}
			ln.touched = false
		}
		l.touched = l.touched[:0]
		if len(l.deferred) > 0 && !l.flushQueued {
			l.flushQueued = true
			if l.el.Execute(context.Background(), l.runDeferred) != nil {
				l.writeDeferred() // the loop is shutting down
			}
		}
	}
	for i := 0; i < len(l.dirty); i++ { // flush may dirty more (a handoff)
		s := l.dirty[i]
		s.dirty = false
		s.flush()
		l.dirty[i] = nil
	}
	l.dirty = l.dirty[:0]
	// Handoffs last: resume processes held input, which flushes again.
	for len(l.resume) > 0 {
		s := l.resume[0]
		l.resume = append(l.resume[:0], l.resume[1:]...)
		s.resumeQueued = false
		s.resume()
	}
}

// deferShared reports whether this loop gathers the requests of several
// clients into one write per shared connection. gnet v2.9.7 calls the
// handler once per ready connection and has no hook for the end of a pass
// over epoll's ready list, so the write is queued as a task with
// EventLoop.Execute: gnet runs tasks after the ready connections of its
// next pass (an epoll_wait that does not block, since the task's eventfd
// is ready). So the requests of every client read in between go out in
// one write, as twemproxy and predixy batch, at the cost of one eventfd
// write and one allocation (gnet's closure) per pass instead of one
// write(2) per client. Private links are written at once.
func (l *loop) deferShared() bool {
	return l.el != nil && l.runDeferred != nil && !l.p.closing.Load()
}

// writeDeferred writes the shared links deferred by flushAll.
func (l *loop) writeDeferred() {
	l.flushQueued = false
	if len(l.deferred) == 0 {
		return
	}
	var t int64
	if l.m != nil {
		t = l.p.now()
	}
	for i, ln := range l.deferred {
		if !ln.dead {
			ln.write(t)
		}
		ln.touched = false
		l.deferred[i] = nil
	}
	l.deferred = l.deferred[:0]
}

// sharedLink returns the loop's shared connection number k (of
// Config.UpstreamConns) to shard for the given protocol, opening it if
// needed.
func (l *loop) sharedLink(shard int, resp3 bool, k int) *rlink {
	n := l.p.cfg.UpstreamConns
	i := shard*2*n + k
	if resp3 {
		i += n
	}
	for i >= len(l.shared) {
		l.shared = append(l.shared, nil)
	}
	if ln := l.shared[i]; ln != nil {
		return ln
	}
	addr := l.p.router.load().t.Addrs[shard]
	ln := &rlink{p: l.p, l: l, idx: shard, addr: addr, rf: resp.NewReplyFramer(), mshard: -1, resp3: resp3}
	if m := l.p.cfg.Metrics; m != nil {
		ln.mshard = m.Shard(addr)
	}
	if resp3 {
		ln.queueDrop(hello3Req, false)
	}
	l.shared[i] = ln
	go l.p.dialLink(ln, l.el)
	return ln
}

// dropShared forgets a failed shared link.
func (l *loop) dropShared(ln *rlink) {
	for i, x := range l.shared {
		if x == ln {
			l.shared[i] = nil
		}
	}
}

// flush writes the replies that are ready at the head of the queue and
// records their timings.
func (s *rsession) flush() {
	if s.closed {
		return
	}
	s.advance()
	done := s.done
	if len(done) == 0 && len(s.wbuf) == 0 {
		s.closeIfDone()
		s.maybeResume()
		return
	}
	var tOut int64
	if s.l.m != nil {
		tOut = s.p.now()
	}
	written := len(s.wbuf)
	if written > 0 && s.closeOnOutput {
		s.closeAfter = true
	}
	if len(s.wbuf) > 0 {
		if s.linger != nil {
			s.linger.write(s.wbuf)
		} else {
			_, _ = s.client.Write(s.wbuf)
		}
		if m := s.l.m; m != nil {
			m.AddClientBytes(0, len(s.wbuf))
		}
		if cap(s.wbuf) > 1<<20 {
			s.wbuf = nil
		} else {
			s.wbuf = s.wbuf[:0]
		}
		s.streamAt = -1 // a reply streaming now is no longer whole in wbuf
	}
	s.l.inflight.Add(-int64(len(done)))
	if m := s.l.m; m != nil {
		m.Lock()
		for _, e := range done {
			isErr := e.isErr || e.flags&eWritten == 0 && len(e.out) > 0 && (e.out[0] == '-' || e.out[0] == '!')
			if e.tSent == 0 || e.tReply == 0 {
				m.CountLocked(int(e.cmd), isErr)
				continue
			}
			total := time.Duration(tOut - e.tIn)
			m.ObserveLocked(int(e.cmd), total, time.Duration(e.tReply-e.tSent), time.Duration(e.svc), isErr)
			for i := range e.ps {
				p := &e.ps[i]
				switch {
				case p.mshard < 0 || p.tReply == 0:
				case s.p.route != routeNone:
					m.ShardObserveLocked(p.mshard, total, time.Duration(p.tReply-p.tSent),
						time.Duration(p.tReply-p.svcFrom), isErr)
				default:
					m.ShardCountLocked(p.mshard, isErr)
				}
			}
			if e.penalty > 0 {
				m.RedirectPenaltyLocked(time.Duration(e.penalty))
			}
			if s.p.route == routeSlots {
				m.ReorderWaitLocked(time.Duration(tOut - e.tReply))
			}
		}
		m.Unlock()
		if s.q.len() == 0 {
			s.lastOut = tOut
		}
		if sl := s.p.cfg.SlowLog; sl != nil {
			for _, e := range done {
				if e.setName != "" && !e.isErr && !(e.flags&eWritten == 0 && len(e.out) > 0 && e.out[0] == '-') {
					s.name = e.setName
				}
				if e.tSent > 0 && e.tReply > 0 && time.Duration(tOut-e.tIn) >= sl.Threshold() {
					s.slow(sl, e, tOut)
				}
			}
		}
	}
	for i, e := range done {
		s.l.recycle(e)
		done[i] = nil
	}
	s.done = done[:0]
	if lim := s.p.cfg.ClientOutputLimit; lim > 0 && s.linger == nil {
		s.checkOutput(lim, written)
	}
	s.closeIfDone()
	s.maybeResume()
}

// closeIfDone closes the client when it asked for it (QUIT), when its
// replies were all that was left (a broken upstream, a half-closed
// client), or at once after an engine protocol error.
func (s *rsession) closeIfDone() {
	if s.closed {
		return
	}
	if s.closeNow || s.closeAfter && s.q.len() == 0 ||
		s.linger != nil && (s.q.len() == 0 && s.paused == 0 || s.blockedAtHead()) {
		if s.linger != nil {
			s.linger.close()
			s.linger = nil
		} else {
			s.l.closeFlushed(s.client)
		}
		s.shutdown()
	}
}

// maybeResume queues s for resume once its requests in flight are answered.
func (s *rsession) maybeResume() {
	if s.paused == 0 || s.closed || s.resumeQueued {
		return
	}
	// A handoff waits for every reply; the shared window only for half.
	// (A pauseWait, such as HELLO switching protocol, needs every reply in:
	// resumed earlier, it would pause again at once, for ever.)
	if s.q.len() == 0 || s.paused == pauseWindow && s.q.len() <= sharedResumeAt {
		s.resumeQueued = true
		s.l.resume = append(s.l.resume, s)
	}
}

// checkOutput applies the client output limit (outputGuard) to the
// replies gnet holds for the client plus those held behind a slower shard.
func (s *rsession) checkOutput(lim, added int) {
	if s.out.exceeded(s.client.OutboundBuffered(), s.buffered+len(s.pushHold), added, lim) {
		s.evict("output_limit")
	}
}

func (s *rsession) evict(reason string) {
	if s.closed {
		return
	}
	if m := s.p.cfg.Metrics; m != nil {
		m.ClientEvicted(reason)
	}
	s.p.log.Warn("client evicted", "reason", reason, "client", s.client.RemoteAddr().String())
	if s.linger != nil {
		s.linger.close()
		s.linger = nil
	} else {
		s.l.closeNow(s.client)
	}
	s.shutdown()
}

// clientClosed ends the session: its shard connections are closed at once
// (a blocked BLPOP must not pop an element for a client that left).
func (s *rsession) clientClosed(c gnet.Conn, err error) {
	if m := s.p.cfg.Metrics; m != nil {
		m.ClientClosed()
	}
	s.p.clients.Add(-1)
	// A client that half-closed after sending requests still gets their
	// replies, as from Redis (see session.clientClosed), up to a request
	// that may block (Redis frees a blocked client on EOF).
	if !s.closed && errors.Is(err, io.EOF) && (s.q.len() > 0 || s.paused != 0) && !s.blockedAtHead() && !s.p.draining.Load() {
		if fd, derr := unix.Dup(c.Fd()); derr == nil {
			s.linger = newLinger(s.p, fd, s.p.cfg.ClientOutputLimit)
			if s.paused == pausePassthrough {
				// It would turn into a subscriber or a feed that nobody
				// reads: Redis drops such a client on EOF.
				s.paused, s.hbuf = 0, nil
			}
			el := c.EventLoop()
			time.AfterFunc(lingerTimeout, func() {
				_ = el.Execute(context.Background(), gnet.RunnableFunc(func(context.Context) error {
					if s.linger != nil {
						s.linger.close()
						s.linger = nil
						s.shutdown()
					}
					return nil
				}))
			})
			s.markDirty()
			s.l.flushAll()
			return
		}
	}
	s.shutdown()
}

// blockedAtHead reports whether the oldest request in flight may block in
// the engine.
func (s *rsession) blockedAtHead() bool {
	return s.q.len() > 0 && s.p.resolver.Blocks(s.q.front().cmd)
}

func (s *rsession) shutdown() {
	if s.closed {
		return
	}
	s.closed = true
	if s.linger != nil {
		s.linger.close()
		s.linger = nil
	}
	// s.done is left alone: shutdown may run inside flush (a write to a
	// client that reset its connection closes it at once), which still
	// walks it; those entries are complete and flush recycles them.
	s.l.inflight.Add(-int64(s.q.len()))
	for s.q.len() > 0 {
		s.q.pop() // not recycled: a link may still point at it
	}
	for _, ln := range s.links {
		if ln != nil {
			ln.shutdown()
		}
	}
	for _, ln := range s.extra {
		ln.shutdown()
	}
}

// complete records the reply of part i of e, and finishes e when it was
// the last part.
//
// With streamed, the reply's bytes went to the write buffer as they
// arrived (rlink.onData): e was next in line.
func (s *rsession) complete(e *rentry, i int, reply []byte, now int64, streamed bool) {
	p := &e.ps[i]
	p.tReply = now
	if ln := p.link; ln != nil && ln.owner == s {
		ln.lastSeq = e.seq // out-of-band frames it sends next follow this reply
	}
	if p.redirAt > 0 {
		e.penalty = max(e.penalty, now-p.redirAt)
	}
	if svc := now - p.svcFrom; svc > e.svc {
		e.svc = svc
	}
	e.tReply = max(e.tReply, now)
	e.left--
	s.markDirty()
	if streamed || e.agg == aggRelay && e.left == 0 && s.q.len() > 0 && s.q.front() == e && e.flags&(eExecAbort|eSilent) == 0 {
		// The common case: the reply is next in line; no copy beyond the
		// write buffer.
		s.wbuf = append(s.wbuf, reply...)
		e.flags |= eWritten
		e.isErr = len(reply) > 0 && (reply[0] == '-' || reply[0] == '!')
		e.ready = true
		if s.capBuf != nil {
			if streamed && s.streamAt >= 0 && s.streamAt <= len(s.wbuf) {
				reply, streamed = s.wbuf[s.streamAt:], false
			}
			s.captureReply(e, reply, now, streamed)
		}
		s.advance()
		return
	}
	p.reply = append(p.reply[:0], reply...)
	s.buffered += len(reply)
	if e.left > 0 {
		return
	}
	s.buffered -= s.finish(e)
	s.buffered += len(e.out)
	if s.capBuf != nil {
		s.captureReply(e, e.out, now, false)
	}
	s.advance()
}

// advance moves the replies that are ready at the head of the queue to the
// write buffer, oldest first, and onto s.done for timing.
func (s *rsession) advance() {
	for s.q.len() > 0 && s.q.front().ready {
		e := s.q.pop()
		if e.flags&eWritten == 0 {
			if e.flags&eSilent == 0 {
				s.wbuf = append(s.wbuf, e.out...)
			}
			s.buffered -= len(e.out)
		}
		s.done = append(s.done, e)
		if e.flags&eQuit != 0 || e.flags&eQuietQuit != 0 && len(s.wbuf) > 0 {
			s.closeAfter = true
		} else if e.flags&eQuietQuit != 0 {
			s.closeOnOutput = true
		}
		s.written = e.seq
		s.releasePushes()
	}
}

// finish merges the parts' replies of e into e.out and returns the bytes
// the parts held.
func (s *rsession) finish(e *rentry) (held int) {
	for i := range e.ps {
		held += len(e.ps[i].reply)
	}
	e.ready = true
	if e.flags&eExecAbort != 0 {
		e.out = append(e.out[:0], execAbortErr...)
		return held
	}
	// A part that failed fails the whole request, as a cluster client
	// reports it (the first error in part order).
	if e.agg != aggRelay {
		for i := range e.ps {
			if r := e.ps[i].reply; len(r) > 0 && (r[0] == '-' || r[0] == '!') {
				e.out = append(e.out[:0], r...)
				return held
			}
		}
	}
	switch e.agg {
	case aggRelay, aggAllOK:
		// Swap buffers instead of copying: the part's buffer becomes the
		// reply.
		e.out, e.ps[0].reply = e.ps[0].reply, e.out[:0]
	case aggSum:
		var sum int64
		for i := range e.ps {
			r := e.ps[i].reply
			n, ok := parseIntReply(r)
			if !ok {
				e.out = append(e.out[:0], r...)
				return held
			}
			sum += n
		}
		e.out = append(e.out[:0], ':')
		e.out = strconv.AppendInt(e.out, sum, 10)
		e.out = append(e.out, "\r\n"...)
	case aggMGet:
		n := 0
		for i := range e.ps {
			n += len(e.ps[i].pos)
		}
		elems := s.l.elems[:0]
		for range n {
			elems = append(elems, nil)
		}
		for i := range e.ps {
			p := &e.ps[i]
			got, ok := splitArray(s.l.sf, p.reply, s.l.elems2[:0])
			s.l.elems2 = got[:0]
			if !ok || len(got) != len(p.pos) {
				e.out = append(e.out[:0], p.reply...)
				return held
			}
			for j, pos := range p.pos {
				elems[pos] = got[j]
			}
		}
		e.out = append(e.out[:0], '*')
		e.out = strconv.AppendInt(e.out, int64(n), 10)
		e.out = append(e.out, "\r\n"...)
		for _, el := range elems {
			e.out = append(e.out, el...)
		}
		clear(elems)
		s.l.elems = elems[:0]
	case aggConcat:
		n := 0
		e.out = e.out[:0]
		for i := range e.ps {
			r := e.ps[i].reply
			cnt, body, ok := arrayBody(r)
			if !ok {
				e.out = append(e.out[:0], r...)
				return held
			}
			n += cnt
			e.out = append(e.out, body...)
		}
		hdr := strconv.AppendInt(append(s.l.num[:0], '*'), int64(n), 10)
		hdr = append(hdr, "\r\n"...)
		e.out = append(e.out, hdr...)
		copy(e.out[len(hdr):], e.out[:len(e.out)-len(hdr)])
		copy(e.out, hdr)
	case aggSubs:
		e.out = e.out[:0]
		for i := range e.ps {
			e.out = append(e.out, e.ps[i].reply...)
		}
		e.out = s.l.renumber(e.out, s.shardSubs())
	case aggScan:
		r := e.ps[0].reply
		got, ok := splitArray(s.l.sf, r, s.l.elems2[:0])
		s.l.elems2 = got[:0]
		var c uint64
		var err error
		if ok && len(got) == 2 && len(got[0]) > 0 && got[0][0] == '$' {
			line := got[0][bytes.IndexByte(got[0], '\n')+1:]
			c, err = strconv.ParseUint(string(bytes.TrimSuffix(line, []byte("\r\n"))), 10, 64)
		}
		if !ok || len(got) != 2 || err != nil {
			e.out = append(e.out[:0], r...)
			return held
		}
		var next uint64
		switch {
		case c != 0:
			next = c*uint64(e.scanN) + uint64(e.scanPos)
		case e.scanPos+1 < e.scanN:
			next = uint64(e.scanPos + 1)
		}
		cur := strconv.AppendUint(s.l.num[:0], next, 10)
		e.out = append(e.out[:0], "*2\r\n"...)
		e.out = appendBulk(e.out, cur)
		e.out = append(e.out, got[1]...)
	}
	return held
}

// parseIntReply reads an integer reply ":n\r\n".
func parseIntReply(r []byte) (int64, bool) {
	if len(r) < 4 || r[0] != ':' {
		return 0, false
	}
	n, err := strconv.ParseInt(string(r[1:len(r)-2]), 10, 64)
	return n, err == nil
}

// arrayBody splits an array reply "*n\r\n<elements>" into n and the
// elements' bytes.
func arrayBody(r []byte) (int, []byte, bool) {
	if len(r) < 4 || r[0] != '*' {
		return 0, nil, false
	}
	i := bytes.IndexByte(r, '\n')
	n, err := strconv.Atoi(string(r[1 : i-1]))
	if err != nil || n < 0 {
		return 0, nil, false
	}
	return n, r[i+1:], true
}

// splitArray appends to dst the complete elements of the array reply r,
// each as its bytes.
func splitArray(f *resp.ReplyFramer, r []byte, dst [][]byte) ([][]byte, bool) {
	n, body, ok := arrayBody(r)
	if !ok {
		return dst, false
	}
	for i := 0; i < n; i++ {
		f.Reset()
		k, fin, err := f.Feed(body)
		if err != nil || !fin {
			return dst, false
		}
		dst = append(dst, body[:k])
		body = body[k:]
	}
	return dst, len(body) == 0
}
