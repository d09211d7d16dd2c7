package proxy

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"time"
	"unsafe"

	"github.com/panjf2000/gnet/v2"
	"golang.org/x/sys/unix"

	"github.com/respmeter/respmeter/internal/capture"
	"github.com/respmeter/respmeter/internal/resp"
	"github.com/respmeter/respmeter/metrics/heat"
	"github.com/respmeter/respmeter/metrics/slowlog"
	"github.com/respmeter/respmeter/routing"
	"github.com/respmeter/respmeter/routing/command"
)

// A client is one client connection, in every upstream shape: its
// requests are framed, queued and sent to engine connections (links), and
// the replies go back in request order, each timed. The shape decides which
// engine connection a request goes to:
//
//   - one engine (Config.Route none, or RoutePinned to one shard): every
//     request goes to the client's home shard, over its own private link
//     (opened with the client, as a direct connection would be) or, with
//     Config.UpstreamMode shared, over the loop's shared links;
//   - slot routing (RouteSlots): each command goes to the shard that owns
//     its hash slot, over one link per shard opened on first use; keyless
//     commands follow the command tips (broadcast, merge: see merge.go).
//
// A reply that completes before the ones ahead of it is held (copied)
// until they are out, so a slow shard holds up later replies to that
// client, as it would for any cluster client that pipelines. Pub/sub,
// MONITOR (pubsub.go) and SYNC/PSYNC (raw) are modes of the same client on
// its own links.
//
// Every request is a request in the client's queue, answered by one or
// more parts: one part for a single-slot command, one per slot group for a
// multi-key fan-out (MGET, MSET, DEL, UNLINK, EXISTS, TOUCH), one per shard
// for a broadcast (DBSIZE, KEYS, FLUSHALL, ...). Each link keeps a FIFO of
// the parts it was sent, since an engine answers in order. Everything in a
// client is touched only by the event loop its connection lives on; its
// links live on the same loop.

// Reply aggregation of a request (request.agg).
const (
	aggRelay  uint8 = iota // one part: its reply as is
	aggLocal               // answered by the proxy (out holds the reply)
	aggSum                 // integer replies summed (DEL, EXISTS, TOUCH, UNLINK, DBSIZE)
	aggAllOK               // the first part's reply unless a part failed (MSET, FLUSHALL, SCRIPT LOAD)
	aggMGet                // MGET: elements put back in request order
	aggConcat              // arrays concatenated (KEYS)
	aggScan                // SCAN: the engine's cursor re-encoded with the shard
	aggSubs                // pub/sub confirmations from several connections, renumbered (see pubsub.go)
	aggHome                // the first part's (the home shard's) reply, once every part is answered (broadcastState)
	// Command tips response policies of a broadcast (Redis 7 COMMAND
	// DOCS/INFO tips; see merge.go): agg_logical_and (SCRIPT EXISTS),
	// agg_logical_or, agg_min (WAIT, WAITAOF), agg_max, one_succeeded
	// (SCRIPT KILL, FUNCTION KILL).
	aggAnd
	aggOr
	aggMin
	aggMax
	aggOneOK
)

// request.flags
const (
	eQuit       uint16 = 1 << iota // QUIT: close the client after this reply
	eInTx                          // queued inside MULTI: redirects are relayed, not followed
	eWritten                       // the reply went to the client's write buffer directly
	eExecAbort                     // EXEC of an aborted transaction: answer EXECABORT
	eSilent                        // sent under CLIENT REPLY OFF/SKIP: the reply is dropped
	eQuietQuit                     // QUIT whose reply is dropped: close after the next output, if any
	eSync                          // SYNC/PSYNC: its reply starts a replication stream (see link.onData)
	eExecCross                     // with eExecAbort: a transaction over several slots (facade): answer CROSSSLOT
	eNodeIDs                       // CLUSTER GETSLOTMIGRATIONS on a virtual node: the engine's node ids become virtual ones (facadeNodeIDs)
	eAuthChange                    // may change the engine's authentication (mayChangeAuth): an auth check once it is answered
)

// request is one request of a client.
type request struct {
	s                  *client
	tIn, tSent, tReply int64 // ns on the proxy's clock; tSent is the first part's
	svc                int64 // longest part service time (ns)
	penalty            int64 // extra time spent following redirects (ns)
	cmd                command.ID
	agg                uint8
	flags              uint16
	ready              bool
	left               int32          // parts not answered yet
	ps                 []part         // reused across requests
	out                []byte         // the reply, once ready (reused)
	scanPos, scanN     int            // aggScan: position in the live shard list, and its length
	argc               int32          // arguments including the name (slow log)
	key                slowlog.KeyBuf // first key, only with the slow log or heat on
	setName            string         // CLIENT SETNAME / HELLO SETNAME name, applied if it succeeds
	isErr              bool           // the reply relayed directly (eWritten) was an error
	seq                uint64         // the request's number in its client, from 1
	block              int64          // a blocking command's own wait (ns; -1: forever; see blockWait)
	heat               heat.Pending   // first key's slot and sizes for key and slot heat, only with heat on
	blocks             bool           // the command may block (routing.Call.Blocks)
	inj                int64          // injected time (ns): a delay rule's, or the wait behind one (inject.go)
	tls                int64          // a TLS client's crypto time booked to it (ns; bookTLS), part of total
	hold, holdDue      int64          // a reply delay (ns) and, once armed, when it ends (holdReply); holdWire: paced (injwire.go); 0: none
	rule               *injRule       // the fault injection rule that delayed it or its reply (slow log), or nil
}

// failed reports whether e's reply, once ready, is an error reply (a
// simple error or a RESP3 blob error: resp.IsErrorReply): counted as an
// error, and a CLIENT SETNAME or HELLO SETNAME that failed leaves the
// client's name as it was.
func (e *request) failed() bool {
	if e.flags&eWritten != 0 {
		return e.isErr
	}
	return resp.IsErrorReply(e.out)
}

// requestSize is the memory one queued request costs at least, counted
// against the client's query limit.
const requestSize = int(unsafe.Sizeof(request{}))

// part is the part of a request sent to one shard.
type part struct {
	link    *link
	req     []byte  // the request bytes, kept to re-send on MOVED/ASK or once a held request is released
	pos     []int32 // aggMGet: positions of this part's keys in the request
	reply   []byte  // the part's reply (multi-part requests, or one that waits behind others)
	tSent   int64   // when the part was last sent (to the shard that answered it)
	tFirst  int64   // when it was first sent: before tSent when a redirect or -TRYAGAIN re-sent it
	svcFrom int64
	tReply  int64
	redirAt int64 // when the first redirect (or -TRYAGAIN) arrived
	hops    int8
	tries   int8 // -TRYAGAIN retries so far (link.tryAgain)
	asked   bool // sent to an ASK target: a -TRYAGAIN retry sends ASKING again
	mshard  int
	// sub is the subscription family of a pub/sub request (0 for others),
	// answered by expect confirmations (0: until the link has none of the
	// family left; see link.confirmation).
	sub    uint8
	expect int32
}

// maxRedirects bounds the redirects followed for one request, as cluster
// clients do (go-redis: 3 by default; redis-cli -c: 5 ... ); past it the
// engine's redirect is relayed.
const maxRedirects = 5

// state commands replayed, in this order, on every shard connection a
// client opens after they were sent.
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
// -1. Clients keep their state by it (stateCmd).
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

// closeState says how far a client is on its way out. It only moves
// forward (closing): each state implies what the ones before it do.
type closeState uint8

const (
	csOpen     closeState = iota
	csStopRead            // input is ignored from here (QUIT, a protocol error); replies still go out
	// csOnOutput: a QUIT whose reply was dropped (CLIENT REPLY OFF/SKIP): the
	// client is closed after the next output it gets, if any, as
	// redis-server 7.0 closes a CLOSE_AFTER_REPLY client (see eQuietQuit).
	csOnOutput
	csAfterReplies // closed once every request in flight is answered (QUIT, engine gone, draining)
	csNow          // closed once what is ready is written (the engine's protocol error)
	csClosed       // gone: its links are closed, nothing more is written
)

// closing moves the client to state c, unless it is further already.
func (s *client) closing(c closeState) { s.cs = max(s.cs, c) }

// stopped reports whether the client's input is ignored (csStopRead on).
func (s *client) stopped() bool { return s.cs >= csStopRead }

// gone reports whether the client is closed.
func (s *client) gone() bool { return s.cs == csClosed }

// clientFlag is one bit of a client's connection state (client.flags).
type clientFlag uint8

const (
	// cfShared: requests go to the loop's shared upstream connections
	// (Config.UpstreamMode "shared") until a stateful command moves the
	// client to private ones.
	cfShared       clientFlag = 1 << iota
	cfResp3                   // HELLO 3 sent: the client speaks RESP3 (and uses the RESP3 shared connection)
	cfResuming                // clientData is processing the input held during a pause
	cfResumeQueued            // on the loop's resume list (maybeResume)
	cfDirty                   // on the loop's dirty list: flush at the end of the callback
)

func (s *client) has(f clientFlag) bool { return s.flags&f != 0 }

// set turns flag f on or off.
func (s *client) set(f clientFlag, on bool) {
	if on {
		s.flags |= f
	} else {
		s.flags &^= f
	}
}

type client struct {
	p    *Proxy
	l    *loop
	conn gnet.Conn
	// peer is the client's address: its socket's peer, or for a client
	// of the TLS listener the TLS connection's (tls.go).
	peer net.Addr

	scan    resp.RequestScanner
	partial []byte
	q       ring[*request]
	links   []*link // by topology shard index
	extra   []*link // links to nodes outside the map (ASK targets)
	home    int     // shard of keyless commands
	state   [numStates][]byte
	// stateFailed: the engine refused the client's own latest AUTH, HELLO,
	// SELECT or READONLY/READWRITE (by slot), so the same refusal of its
	// replay is no reason to close the client (link.replayed).
	stateFailed [numStates]bool
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
	heldE []*request

	tx struct {
		on      bool
		slot    int // -1: not known yet
		shard   int // -1: not known yet
		aborted bool
		auth    bool // a queued command may change the engine's authentication (eAuthChange at EXEC)
	}

	flags clientFlag
	// slot picks one of Config.UpstreamConns for a shared client.
	slot int
	// authAfter: a new shared client is served on shared connections once
	// the auth check numbered authAfter (the first to start after it
	// connected) or a later one has passed; 0 once one has (auth.go).
	authAfter uint64
	// paused: a request needs the requests in flight answered first
	// (pauseWait, pauseWindow, pausePrivate); it and everything
	// after it wait in hbuf.
	paused      uint8
	pauseReason string
	hbuf        []byte

	wbuf     []byte     // replies to write at the end of the callback
	done     []*request // requests whose replies are in wbuf, for timing
	buffered int        // bytes of replies held behind slower ones
	// streaming is the link whose reply is going to the client part by
	// part (cut-through). Out-of-band frames (pushes, pub/sub messages,
	// MONITOR lines) wait in pushHold while it streams, or until the replies
	// their link delivered before them are written (see oob).
	streaming *link
	// streamAt is where in wbuf the streaming reply starts, -1 once part
	// of it was written (capture summarizes it from there).
	streamAt int
	pushHold []byte
	pushTags []pushTag
	// seq numbers the requests; written is the seq of the last one whose
	// reply went to the write buffer.
	seq, written uint64
	cs           closeState
	linger       *linger // the client half-closed: replies go through it
	name         string  // client name set by CLIENT SETNAME / HELLO SETNAME, for the slow log
	lastOut      int64
	out          outputGuard
	// tio is a TLS client's record layer (nil: plaintext), and tlsPend
	// the crypto time (ns) it measured that no request has taken yet
	// (bookTLS).
	tio     *tlsIO
	tlsPend int64
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
	sticky []*link
	// raw is the link a SYNC/PSYNC went to: the connection is a
	// replication stream from then on, relayed unframed both ways.
	raw *link
	// capOf is the capture this client was last checked against, capBuf
	// its loop's buffer when the client is captured (nil: not sampled or
	// no capture), capID its id there (captureBatch).
	capOf  *capture.Capture
	capBuf *capture.Buf
	capID  uint64
	// capRep gathers the replies finished since the last flush, written
	// to capBuf as one record by flush (captureReply).
	capRep capture.Replies
	// vnode is the virtual node whose listener the client connected to
	// under RouteFacade (nil: the plain endpoint, or another route), vhost
	// the host it reached respmeter on, vcross whether its transaction
	// queued keys of several slots (facade.go).
	vnode  *facadeNode
	vhost  string
	vcross bool
	// vasking: the client's last command was ASKING (facadeShape.dispatch).
	vasking bool
	// capSecret: a request of the current read may carry a credential
	// (mayHoldSecret, or inline); the capture's writer redacts its batch.
	capSecret bool
	// Fault injection (inject.go): injFrom is the read of the request a
	// delay holds (0: none), injDue when it is due, injPass that the next
	// request routed is that one (not matched again), injGen numbers the
	// delays (a timer of an earlier one is ignored).
	injFrom, injDue int64
	injGen          uint64
	injPass         bool
	// For rules scoped by client (inClients): injPeer and injPeerIP are
	// the client's address, set on first use (injPeerSet); injName its
	// name, kept while a rule is scoped by name (Injection.names).
	injPeer    []byte
	injPeerIP  netip.Addr
	injPeerSet bool
	injName    []byte
	// injConn numbers the client's connection in the order the proxy
	// accepted it, from 1 (a per-connection probability, connDraw).
	injConn uint64
	// injRule is the rule that touched the request inject last let
	// through (a delay or a reply delay; nil: none), and injDelayed the
	// rule of the request a delay holds, until it passes.
	injRule, injDelayed *injRule
	// A -TRYAGAIN retried by routing (a rule with retry:, inject.go's
	// tryAgain): injTry[0] is the rule that answered the request held,
	// injTryAt when it first did, injTries the retries so far, injRetry
	// that the next request routed is that one (matched against the rule
	// again). injBook is the number of a retried request that went on to
	// its shard, whose retries are booked at the end of the batch from
	// injBookAt (bookRetried); 0: none.
	injTry              [1]*injRule
	injTryAt, injBookAt int64
	injBook             uint64
	injTries            uint8
	injRetry            bool
	// wire is the reply a bandwidth or slicer rule paces (injwire.go),
	// nil until the client's first; injUpEnd when the last request such a
	// rule paced upstream was due (paceRequest).
	wire     *wirePace
	injUpEnd int64
}

func newClient(p *Proxy, c gnet.Conn, l *loop) *client {
	s := &client{p: p, l: l, conn: c, peer: c.RemoteAddr(), subShard: -1}
	if tp, ok := c.Context().(tlsPeer); ok {
		s.peer, s.tio = tp.addr, tp.tio
	}
	s.scan.Dialect = p.dialect
	s.downs = p.router.downs.Load()
	if h := p.router.pickHome(p.router.load(), -1); h >= 0 {
		s.home = h
	}
	s.tx.slot, s.tx.shard = -1, -1
	if p.shared {
		s.set(cfShared, true)
		s.slot = int(p.sharedNext.Add(1) % uint64(p.cfg.UpstreamConns))
		if p.authNow != nil {
			s.authAfter = p.authStarted.Load() + 1 // a check that starts from now on
		}
	}
	p.shape.start(s)
	return s
}

// open starts the client's private engine connection when it has one
// engine (no route, or --route pinned to a shard known at connect): opened
// with the client's, as a direct connection would be (the engine counts
// it, and the dial overlaps the client's first request).
func (s *client) open() {
	if !s.has(cfShared) && s.fixed() && s.home >= 0 {
		s.linkTo(s.home)
	}
}

// fixed reports whether the client talks to one engine only (no route,
// --route pinned, or a virtual node of --route facade): every request goes
// to its home shard (shape.single).
func (s *client) fixed() bool { return s.p.shape.single(s) }

// pinHome binds a --pin-by first-key client to shard, or to the next live
// shard round-robin when shard < 0 (a first batch that names no key: a
// client that waits for the reply to its handshake, as go-redis does for
// HELLO, must get it).
func (s *client) pinHome(shard int) {
	if shard < 0 {
		shard = max(s.p.router.pickHome(s.p.router.load(), -1), 0)
	}
	s.home = shard
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

// Pause kinds (client.paused).
const (
	pauseWait    uint8 = iota + 1 // then go on as before
	pauseWindow                   // the shared window is full: go on once half is answered
	pausePrivate                  // then use private upstream connections
	pauseAuth                     // a new shared client: until an auth check started after it connected has passed (auth.go)
	pauseInject                   // a delay rule holds a request: until its timer (inject.go)
	pauseHung                     // a timeout rule holds a request: for ever (inject.go)
)

// needsPause says whether a request must wait for the requests in flight
// before it is sent, and what happens then:
//
//   - SYNC/PSYNC turn the connection into a replication stream (client.raw)
//     on a private connection to the home shard: the replies in flight
//     come first.
//   - With shared upstream connections, a command that changes the
//     connection's state, makes it a feed or may block it moves the client
//     to private connections for the rest of its life: MULTI, WATCH,
//     blocking commands (BLPOP, WAIT, ...), (P|S)(UN)SUBSCRIBE, MONITOR,
//     AUTH, HELLO with AUTH or SETNAME, SELECT of a non-zero db,
//     READONLY/READWRITE, RESET, REPLCONF, DEBUG, the commands that free a
//     busy engine (SCRIPT KILL, FUNCTION KILL, SHUTDOWN, CLIENT
//     PAUSE/UNPAUSE: see "Stalled shared connections" in loop.go) and CLIENT subcommands that set or
//     report per-connection state, by rule from the engine's entry
//     (command.ConnState: SETNAME, TRACKING, CACHING, NO-EVICT, NO-TOUCH,
//     SETINFO, CAPA, ID, INFO, GETNAME, GETREDIR, TRACKINGINFO, ...: a
//     client id must stay the client's own; not REPLY, which the client
//     applies itself). HELLO 2/3 alone only switches the shared connection
//     used, after the requests in flight.
//
// Waiting first keeps the order of effects: nothing sent on the new
// connection can overtake what is still queued on the old one.
func (s *client) needsPause(c *routing.Call, args [][]byte) (uint8, string) {
	id := c.ID
	switch id {
	case command.Sync, command.Psync:
		// The connection becomes a replication stream: first every reply
		// in flight, and a private connection.
		switch {
		case s.has(cfShared):
			return pausePrivate, "other"
		case s.q.len() > 0:
			return pauseWait, "other"
		}
		return 0, ""
	}
	if !s.has(cfShared) {
		return 0, ""
	}
	if s.p.authRequired.Load() {
		// The engine wants a password of new connections: a client
		// without AUTH must meet it on its own (see auth.go).
		return pausePrivate, "state"
	}
	if s.authAfter != 0 {
		if !s.p.authChecked(s.authAfter) {
			s.awaitAuth()
			return pauseAuth, ""
		}
		s.authAfter = 0
		if s.p.authRequired.Load() {
			return pausePrivate, "state" // the check found a password wanted
		}
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
		if s.q.len() > 0 && len(args) == 2 && (args[1][0] == '3') != s.has(cfResp3) {
			return pauseWait, ""
		}
		return 0, ""
	case command.Shutdown:
		return pausePrivate, "state" // answered while the engine is busy (see loop.checkStalls)
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
		// client applies itself (route). A subcommand the table does not
		// know (CallInfo gives the parent: the engine's COMMAND INFO was
		// not read) moves the client too: the engine may know it. PAUSE
		// and UNPAUSE are answered at once on a connection of its own (see
		// loop.checkStalls), and KILL runs there, so that SKIPME and the
		// filters (ID, ADDR, USER, ...) meet the sender's own connection:
		// the engine's rules decide whom it kills (SKIPME no: the sender
		// too).
		if len(args) >= 2 && (eqFold(args[1], "pause") || eqFold(args[1], "unpause") || eqFold(args[1], "kill")) {
			return pausePrivate, "state"
		}
		if len(args) >= 2 && !eqFold(args[1], "reply") {
			if in := c.Info; in.Subcommands != nil || command.ConnState(in) != command.ConnNone {
				return pausePrivate, "state"
			}
		}
	}
	if c.Blocks {
		return pausePrivate, "blocking"
	}
	return 0, ""
}

// holdRest keeps rest (the input from a paused request on) in hbuf. Input
// that is already the held buffer (being resumed) is kept in place: a
// million pipelined requests resumed in rounds must not be copied once per
// round.
func (s *client) holdRest(rest []byte) {
	if s.has(cfResuming) {
		s.hbuf = rest
		return
	}
	s.hbuf = append(s.hbuf[:0], rest...)
}

// resume runs once the requests in flight before a pause are answered.
func (s *client) resume() {
	if s.gone() || s.paused == 0 {
		return
	}
	kind, reason := s.paused, s.pauseReason
	if kind != pauseWait && kind != pauseWindow && kind != pauseAuth && kind != pauseInject {
		if m := s.p.cfg.Metrics; m != nil {
			m.Handoff(reason)
		}
	}
	if kind == pausePrivate {
		s.set(cfShared, false)
	}
	s.paused = 0
	data := s.hbuf
	s.hbuf = nil
	s.set(cfResuming, true)
	s.clientData(data)
	s.set(cfResuming, false)
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
func (s *client) applyReplyMode(e *request, id command.ID, args [][]byte) {
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

// newEntry takes an entry from the loop's pool.
func (s *client) newEntry(id command.ID, now int64) *request {
	var e *request
	if n := len(s.l.rpool); n > 0 {
		e = s.l.rpool[n-1]
		s.l.rpool = s.l.rpool[:n-1]
	} else {
		e = new(request)
	}
	s.seq++
	e.s, e.tIn, e.cmd, e.seq = s, now, id, s.seq
	s.q.push(e)
	s.l.takeIn(now)
	return e
}

// part adds a part to e and returns it.
func (e *request) part() *part {
	if len(e.ps) < cap(e.ps) {
		e.ps = e.ps[:len(e.ps)+1]
	} else {
		e.ps = append(e.ps, part{})
	}
	p := &e.ps[len(e.ps)-1]
	p.req, p.pos, p.reply = p.req[:0], p.pos[:0], p.reply[:0]
	p.tSent, p.tFirst, p.svcFrom, p.tReply, p.redirAt, p.hops, p.mshard = 0, 0, 0, 0, 0, 0, -1
	p.tries, p.asked = 0, false
	p.sub, p.expect = 0, 0
	e.left++
	return p
}

// local answers e with reply, from the proxy.
func (s *client) local(e *request, reply []byte) {
	e.agg = aggLocal
	e.out = append(e.out[:0], reply...)
	e.ready = true
}

// clientTraffic frames the client's requests and routes each one.
func (s *client) clientTraffic(c gnet.Conn) {
	data, _ := c.Next(-1)
	if s.tio != nil {
		var err error
		data, err = s.tio.read(c, data, &s.l.tlsPlain)
		if len(data) > 0 {
			s.clientData(data)
		}
		if err != nil {
			s.tlsFailed(c, err)
		}
		return
	}
	s.clientData(data)
}

// tlsFailed ends a TLS client's input: after its close_notify (io.EOF) the
// client is served until its connection closes, as a plaintext client
// that half-closed is; after a failure of the record layer (a forged or
// corrupted record, a fatal alert) the connection is closed, after the
// alert crypto/tls wrote (tlsIO.read sent it).
func (s *client) tlsFailed(c gnet.Conn, err error) {
	if errors.Is(err, io.EOF) {
		return
	}
	s.p.log.Debug("TLS client's records refused", "client", s.peer.String(), "err", err)
	_ = c.Close()
}

// clientData processes bytes from the client.
func (s *client) clientData(data []byte) {
	if s.gone() || s.stopped() {
		return
	}
	p := s.p
	if s.paused != 0 {
		// Waiting for the requests in flight before a pause ends: hold the
		// input (bounded by the query limit).
		var over bool
		if s.hbuf, over = s.l.holdInput(s.hbuf, data); over {
			s.evict("query_limit")
		}
		return
	}
	if p.draining.Load() {
		s.closing(csAfterReplies)
		s.markDirty()
		s.l.flushAll()
		return
	}
	// Held input (resuming) was counted when it was read, and its think
	// time is not now minus the last reply.
	if m := s.l.m; m != nil && !s.has(cfResuming) {
		m.AddClientBytes(len(data), 0)
	}
	if s.raw != nil {
		s.raw.queueRaw(data)
		s.l.flushAll()
		return
	}
	now := p.now()
	var crypto int64
	if s.tio != nil {
		// A TLS client: the decryption of this input and the encryption
		// of the replies written since the last input are the proxy's
		// time (bookTLS), not the client's.
		crypto = s.tio.take()
		s.tlsPend += crypto
	}
	if m := s.l.m; m != nil && !s.has(cfResuming) && s.q.len() == 0 && s.lastOut != 0 && len(s.partial) == 0 {
		m.Lock()
		m.ThinkLocked(time.Duration(max(now-s.lastOut-crypto, 0)))
		m.Unlock()
	}
	fromPartial := false
	if len(s.partial) > 0 {
		s.partial = append(s.partial, data...)
		data, fromPartial = s.partial, true
	}
	v := p.router.load()
	off, routed, first := 0, 0, s.seq+1
	s.capSecret = false
	// A capture that redacts values keeps the keys: where they are comes
	// from each request's classification (capture.KeyedBatch).
	capc := p.capture.cur.Load()
	keyed := capc != nil && capc.RedactsValues()
	s.l.capKeys = s.l.capKeys[:0]
	for off < len(data) && !s.stopped() {
		if s.has(cfShared) && s.q.len() >= sharedMaxInflight {
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
			s.closing(csAfterReplies)
			if m := p.cfg.Metrics; m != nil {
				m.ProtocolError()
			}
			p.log.Debug("client protocol error", "client", s.peer.String(), "err", pe.Error())
			break
		}
		if n == 0 {
			break
		}
		frame := data[off : off+n]
		off += n
		if kind == resp.KindEmpty {
			s.endPartial(frame) // the engine ignores it as well
			continue
		}
		if kind != resp.KindMultibulk {
			s.capSecret = true // inline: the capture's writer reads it again
		}
		s.l.args = s.scan.ArgsOf(frame, kind, s.l.args[:0])
		if len(s.l.args) > 0 && s.route(v, s.l.args, frame, now) {
			// This request and all after it wait (see needsPause).
			s.holdRest(data[off-n:])
			off = len(data)
			break
		}
		if keyed && len(s.l.args) > 0 {
			keys, _ := s.l.call.Keys() // found once for this request (routing.Call)
			s.l.capKeys = capture.AppendKeyPos(s.l.capKeys, s.l.args, keys)
		}
		s.endPartial(frame)
		routed = off
		if s.raw != nil {
			// SYNC/PSYNC: what follows is the replica's, unframed.
			s.raw.queueRaw(data[off:])
			off = len(data)
			break
		}
	}
	if s.tio != nil {
		s.bookTLS(first)
	}
	if capc != nil || s.capOf != nil {
		s.captureBatch(capc, data[:routed], first, now)
	}
	s.flushHeld()
	if s.injFrom != 0 {
		s.injectEnd()
	}
	tail := data[off:]
	if len(tail) > 0 {
		s.forwardPartial(tail)
	}
	// Unprocessed input: the incomplete tail, the bookkeeping of requests
	// in flight, and the requests waiting in the client's own engine
	// connections (a client pipelining into a stalled engine grows all
	// three; Redis would hold them in its query buffer).
	if lim := p.cfg.ClientQueryLimit; lim > 0 && len(tail)+s.q.len()*requestSize+s.backlog() > lim {
		s.evict("query_limit")
		return
	}
	switch {
	case s.stopped() || len(tail) == 0 || s.paused != 0:
		s.partial = s.partial[:0]
		s.scan.Reset()
	case fromPartial:
		s.partial = s.partial[:copy(s.partial, tail)]
	default:
		s.partial = append(s.partial[:0], tail...)
	}
	// One large request (up to proto-max-bulk-len, 512 MiB) grew the
	// buffer: let it go once it is mostly free, as the write buffers do,
	// with the loop's argument scratch and routed call, which point into
	// it.
	if cap(s.partial) > 1<<20 && len(s.partial) < cap(s.partial)/4 {
		s.partial = append([]byte(nil), s.partial...)
		clear(s.l.args[:cap(s.l.args)])
		s.l.call.Forget()
	}
	s.markDirty()
	s.l.flushAll()
}

// bookTLS books a TLS client's pending crypto time (tlsPend) to the
// requests this input made (numbered from first on), in equal shares, the
// remainder to the first: a read's decryption is shared by the requests it
// carried, the encryption of the replies written since the last read with
// them (the reply's own encryption is done after the loop wrote it, when
// its timing is already recorded). Input that completes no request leaves
// it pending for the next that does.
func (s *client) bookTLS(first uint64) {
	if s.tlsPend == 0 || s.seq < first {
		return
	}
	k := 0
	for i := s.q.len() - 1; i >= 0 && s.q.at(i).seq >= first; i-- {
		k++
	}
	if k == 0 {
		return
	}
	share := s.tlsPend / int64(k)
	for i := s.q.len() - k; i < s.q.len(); i++ {
		s.q.at(i).tls = share
	}
	s.q.at(s.q.len() - k).tls += s.tlsPend - share*int64(k)
	s.tlsPend = 0
}

// backlog returns the bytes of the client's requests that its own engine
// connections hold, not yet taken by the engine (while dialing, or stalled).
func (s *client) backlog() int {
	n := 0
	for _, ln := range s.links {
		if ln != nil {
			n += len(ln.wb)
			if ln.c != nil {
				n += ln.c.OutboundBuffered()
			}
		}
	}
	return n
}

// forwardPartial sends the part of an incomplete request that the scanner
// has validated (tail starts with it) to the engine at once, when the
// client has one private engine connection and nothing waits before it:
// the engine's own limits (requirepass: 10 elements and 16 KiB bulks
// before AUTH; a lowered proto-max-bulk-len) then cut the client off as
// early as on a direct connection, instead of the proxy holding up to
// ClientQueryLimit. The link trims those bytes off the request once it is
// complete (link.pre). Not for a request that may be one the proxy
// answers itself (CLIENT REPLY: three elements, a first of six bytes).
func (s *client) forwardPartial(tail []byte) {
	if !s.fixed() || s.has(cfShared) || s.home < 0 || s.paused != 0 || s.stopped() || len(s.held) > 0 {
		return
	}
	cut := s.scan.Pending()
	if cut == 0 || mayBeClientReply(tail[:cut]) {
		return
	}
	ln := s.linkTo(s.home)
	if cut > ln.pre {
		ln.queueRaw(tail[ln.pre:cut])
		ln.pre = cut
	}
}

// endPartial sends the rest of frame when its start went to the engine
// early (forwardPartial) and routing it sent nothing: an empty request, or
// a QUIT the proxy answers. A request that waits (held, paused) is sent,
// trimmed, when it goes.
func (s *client) endPartial(frame []byte) {
	if s.home < 0 || s.home >= len(s.links) || len(s.held) > 0 || s.paused != 0 {
		return
	}
	if ln := s.links[s.home]; ln != nil && ln.pre > 0 {
		ln.queueRaw(frame[ln.pre:])
		ln.pre = 0
	}
}

// mayBeClientReply reports whether the start of a multibulk request may
// become CLIENT REPLY: three elements whose first is six bytes long and,
// as far as it has arrived, "client" (any case).
func mayBeClientReply(b []byte) bool {
	const head = "*3\r\n$6\r\nclient"
	n := min(len(b), len(head))
	return eqFold(b[:n], head[:n])
}

// route classifies one request and queues it on the shard(s) that answer
// it. args and frame alias the read buffer: what must outlive the call is
// copied.
func (s *client) route(v *topoView, args [][]byte, frame []byte, now int64) (paused bool) {
	id := s.l.lookup(args[0])
	c := &s.l.call
	s.p.resolver.Classify(c, id, args)
	if mayHoldSecret(id) {
		s.capSecret = true
	}
	if kind, reason := s.needsPause(c, args); kind != 0 {
		s.paused, s.pauseReason = kind, reason
		return true
	}
	tIn, inj, hold := now, int64(0), int64(0)
	var rule *injRule
	if in := s.p.inject.Load(); in != nil {
		// Fault injection (inject.go); without rules, this branch only.
		var pause, answered bool
		if pause, answered, tIn, inj, hold = s.inject(in, v, c, len(frame), now); pause || answered {
			return pause
		}
		rule = s.injRule
	}
	e := s.newEntry(id, now)
	e.tIn, e.inj, e.hold, e.rule = tIn, inj, hold, rule
	e.argc = int32(len(args))
	e.blocks = c.Blocks
	if s.p.cfg.UpstreamTimeout > 0 && c.Blocks {
		e.block = blockWait(id, args)
	}
	if h := s.l.m.Heat(); s.p.cfg.SlowLog != nil || h != nil {
		// The slow log and heat keep the same key, by the same rules,
		// in one copy.
		k, ok := slowlog.SafeFirstKey(c.Name(), args, c.KeyPos())
		if ok {
			e.key.Set(k)
		}
		if h != nil {
			h.BeginKey(&e.heat, k, ok, len(frame))
		}
	}
	if s.p.keepNames {
		if name, ok := setNameArg(id, args); ok {
			e.setName = string(name)
		}
	}
	if s.tx.on {
		e.flags |= eInTx
	}
	if s.p.authNow != nil {
		// A change of the engine's authentication is checked once the
		// engine has answered it: for a queued one, once EXEC is.
		switch {
		case id == command.Exec || id == command.Discard:
			if s.tx.auth && id == command.Exec {
				e.flags |= eAuthChange
			}
			s.tx.auth = false
		case mayChangeAuth(id, args) && s.tx.on:
			s.tx.auth = true
		case mayChangeAuth(id, args):
			e.flags |= eAuthChange
		}
	}
	if s.replyMode != replyOn || id == command.Reset {
		s.applyReplyMode(e, id, args)
	}
	switch id {
	case command.Quit:
		if e.flags&(eSilent|eInTx) == 0 && !s.has(cfShared) && s.home >= 0 && (s.fixed() || s.hasLinks()) {
			// The client's one private engine connection stands for its
			// own: the engine answers QUIT and closes it, so what the
			// engine does on that close (a tracking redirect broken, its
			// subscriptions ended, its CLIENT LIST) is done before the
			// client reads +OK, as on a direct connection (a subscribed
			// RESP2 connection takes QUIT too). Under --route slots its
			// connections stand for a cluster client's, one per shard:
			// each engine answers and closes its own, and the client gets
			// +OK once all have (broadcastState). Elsewhere (a shared
			// connection, or none open) the proxy answers it below.
			e.flags |= eQuit
			s.closing(csStopRead)
			if s.fixed() {
				s.send(e, s.home, frame)
			} else {
				s.broadcastState(e, frame)
			}
			return
		}
		s.local(e, okReply)
		if e.flags&eSilent == 0 {
			e.flags |= eQuit
		} else {
			// redis-server 7.0 flags the client CLOSE_AFTER_REPLY with no
			// reply queued: it is closed once output queued for it (a
			// pub/sub confirmation, say) is written, and not before.
			e.flags |= eQuietQuit
		}
		s.closing(csStopRead)
		return
	case command.Hello:
		if s.has(cfShared) {
			// HELLO [2|3] without AUTH or SETNAME: the shared connection
			// of that protocol answers it (see needsPause).
			if len(args) >= 2 {
				s.set(cfResp3, args[1][0] == '3')
			}
			s.state[stHello] = append(s.state[stHello][:0], frame...)
			s.send(e, 0, frame)
			return
		}
	}
	if s.p.shape.bind(s, v, e, c, frame) {
		return
	}
	if id == command.Sync || id == command.Psync {
		// From its reply on, the connection carries an RDB payload (with
		// no trailing CRLF) and then the replication stream: bytes are
		// relayed both ways unframed (needsPause made this the only
		// request in flight, on a private connection).
		e.flags |= eSync
		s.raw = s.linkTo(s.home)
		s.send(e, s.home, frame)
		return
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
	s.p.shape.dispatch(s, v, e, c, args, frame)
	return false
}

var (
	okReply      = []byte("+OK\r\n")
	hello3Req    = []byte("*2\r\n$5\r\nHELLO\r\n$1\r\n3\r\n")
	discardReq   = []byte("*1\r\n$7\r\nDISCARD\r\n")
	askingReq    = []byte("*1\r\n$6\r\nASKING\r\n")
	crossSlotErr = []byte("-CROSSSLOT Keys in request don't hash to the same slot\r\n")
	execAbortErr = []byte("-EXECABORT Transaction discarded because of previous errors.\r\n")
	// replyInMultiErr answers CLIENT REPLY inside MULTI, which the proxy
	// applies itself (see clientReply).
	replyInMultiErr = []byte("-ERR CLIENT REPLY inside MULTI is not supported by respmeter\r\n")
	redirectMoved   = []byte("MOVED ")
	redirectAsk     = []byte("ASK ")
	tryAgainErr     = []byte("TRYAGAIN ")
)

// clientReply applies CLIENT REPLY ON|OFF|SKIP: the proxy drops the
// replies (applyReplyMode) and never sends it, so the engine connections
// keep answering everything and requests still go to their shards.
func (s *client) clientReply(e *request, m uint8) {
	if s.tx.on {
		// Executed inside EXEC, it would leave the connection with its
		// replies off while the proxy waits for them: refused when queued,
		// which makes EXEC fail as a queuing error does in Redis
		// (EXECABORT).
		s.tx.aborted = true
		s.local(e, replyInMultiErr)
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

func (s *client) crossSlot(e *request) {
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
func (s *client) hold(frame []byte) { s.holdFor(nil, frame) }

// holdFor keeps a request whose reply answers e (nil: dropped) to send
// ahead of the next routed command, on its connection (see flushHeld).
func (s *client) holdFor(e *request, frame []byte) {
	s.held = append(s.held, frame...)
	s.heldE = append(s.heldE, e)
}

// flushHeld ends a batch of requests: held requests that the client waits
// for (CLIENT CACHING, keyless commands in a transaction) go to the home
// shard, or bind the transaction to it, when no later command of the batch
// took them to its own. A client may send one alone and wait for its reply.
func (s *client) flushHeld() {
	if !slices.ContainsFunc(s.heldE, func(e *request) bool { return e != nil }) || s.gone() {
		return
	}
	if s.home < 0 {
		s.pinHome(-1)
	}
	shard := s.home
	if s.tx.on {
		if s.tx.shard < 0 {
			s.tx.shard = s.home
		}
		shard = s.tx.shard
	}
	s.release(s.linkTo(shard))
}

// send queues e's request on shard, after any held requests (which go to
// the same shard, in order).
func (s *client) send(e *request, shard int, frame []byte) {
	ln := s.linkTo(shard)
	s.release(ln)
	s.sendPart(e, ln, frame)
}

// release sends the held requests to ln.
func (s *client) release(ln *link) {
	held := s.held
	for i := 0; len(held) > 0 && i < len(s.heldE); i++ {
		n, _, _ := s.l.hscan.Scan(held)
		s.l.hscan.Reset()
		if n <= 0 {
			break
		}
		if e := s.heldE[i]; e == nil {
			ln.queueDrop(held[:n])
		} else {
			s.sendPart(e, ln, held[:n])
		}
		held = held[n:]
	}
	clear(s.heldE)
	s.held, s.heldE = s.held[:0], s.heldE[:0]
}

// stateCmd handles a connection-state command (AUTH, HELLO, SELECT,
// READONLY/READWRITE, CLIENT SETNAME, CLIENT TRACKING): the home shard
// answers it, every shard connection already open gets it too (its reply
// dropped), and it is replayed first on every shard connection opened
// later. So with CLIENT TRACKING (RESP3) each shard tracks the keys the
// client reads from it and its invalidation pushes reach the client, as a
// cluster client tracking on every node connection gets them. (With
// REDIRECT id only the home shard knows the id: the others refuse it.)
func (s *client) stateCmd(e *request, c *routing.Call, args [][]byte, frame []byte) {
	id := c.ID
	if s.tx.on {
		s.keyless(s.p.router.load(), e, c, args, frame)
		return
	}
	k := stateSlot(id, args) // >= 0: the callers route only state commands here
	if id == command.Hello && len(args) >= 2 {
		s.set(cfResp3, args[1][0] == '3')
	}
	// The home connection first: opened now, it replays the state saved
	// so far, not this command too (which it gets below, once).
	s.linkTo(s.home)
	s.state[k] = append(s.state[k][:0], frame...)
	s.broadcastState(e, frame)
}

// keepState handles a connection-state command (stateSlot: AUTH, HELLO,
// SELECT, READONLY/READWRITE, CLIENT SETNAME and, with tracking, CLIENT
// TRACKING) with stateCmd, in every shape alike, and reports whether it
// did. (On one engine CLIENT TRACKING stays that connection's own: it is
// not replayed.)
func (s *client) keepState(e *request, c *routing.Call, args [][]byte, frame []byte, tracking bool) bool {
	k := stateSlot(c.ID, args)
	if k < 0 || k == stTracking && !tracking {
		return false
	}
	s.stateCmd(e, c, args, frame)
	return true
}

// endTx ends the client's transaction at EXEC, DISCARD or RESET, in every
// shape alike, and returns the frame to send: an EXEC of a transaction
// that failed while queued (tx.aborted) becomes DISCARD, answered
// EXECABORT (finish).
func (s *client) endTx(e *request, id command.ID, frame []byte) []byte {
	if id == command.Exec && s.tx.aborted {
		e.flags |= eExecAbort
		frame = discardReq
	}
	s.tx.on, s.tx.aborted, s.tx.slot, s.tx.shard = false, false, -1, -1
	return frame
}

// namedState is a connection-state command kept for replay, by key.
type namedState struct {
	key   string
	frame []byte
}

// states yields the connection state to replay on a new connection, in
// order: AUTH, HELLO, SELECT, READONLY/READWRITE, CLIENT SETNAME, CLIENT
// TRACKING, then the other CLIENT setters in the order first sent; each
// with its state slot (stAuth ...), numStates for the other setters.
func (s *client) states() func(yield func(int, []byte) bool) {
	return func(yield func(int, []byte) bool) {
		for k, st := range s.state {
			if len(st) > 0 && !yield(k, st) {
				return
			}
		}
		for _, st := range s.cstate {
			if !yield(numStates, st.frame) {
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
func (s *client) clientStateCmd(e *request, c *routing.Call, args [][]byte, frame []byte) {
	if s.tx.on {
		s.keyless(s.p.router.load(), e, c, args, frame)
		return
	}
	s.linkTo(s.home) // opened now, it replays the state so far, not this command too
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
// gets) and to every other open shard connection, whose replies are
// dropped but waited for: the client gets its reply once every engine of
// its session has run the command, as from one engine. So after RESET,
// CLIENT TRACKING off or SELECT, anything another connection does on any
// of those engines (a PUBLISH, a write to a tracked key) finds the
// session changed: no message or invalidation follows the reply.
func (s *client) broadcastState(e *request, frame []byte) {
	s.send(e, s.home, frame) // part 0: the reply
	home := e.ps[0].link
	for _, ln := range s.links {
		if ln != nil && ln != home {
			s.sendPart(e, ln, frame)
		}
	}
	for _, ln := range s.extra {
		s.sendPart(e, ln, frame)
	}
	if len(e.ps) > 1 {
		e.agg = aggHome
	}
}

// sendPart queues one more part of e on ln.
func (s *client) sendPart(e *request, ln *link, frame []byte) {
	p := e.part()
	if s.p.router.cluster {
		p.req = append(p.req, frame...)
	}
	ln.queue(e, len(e.ps)-1, frame)
}

// hasLinks reports whether the client has an engine connection of its own
// open.
func (s *client) hasLinks() bool {
	return len(s.extra) > 0 || slices.ContainsFunc(s.links, func(ln *link) bool { return ln != nil })
}

// linkTo returns the client's connection to shard, opening it if needed.
func (s *client) linkTo(shard int) *link {
	if s.has(cfShared) {
		// While requests are in flight (other than the one being
		// routed, already queued), more go where they went (a shared
		// connection taken out of use as stalled still is), so that the
		// client's effects keep their order.
		if s.q.len() > 1 && shard < len(s.sticky) && s.sticky[shard] != nil && !s.sticky[shard].dead {
			return s.sticky[shard]
		}
		ln := s.l.sharedLink(shard, s.has(cfResp3), s.slot)
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

// linkAddr returns the client's connection to addr (a node that may be
// outside the map: an ASK target).
func (s *client) linkAddr(addr string) *link {
	v := s.p.router.load()
	if i := v.t.Index(addr); i >= 0 {
		return s.linkTo(i)
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

func (s *client) newLink(shard int, addr string) *link {
	ln := &link{p: s.p, l: s.l, owner: s, idx: shard, addr: addr, rf: resp.NewReplyFramer(), mshard: -1}
	if m := s.p.cfg.Metrics; m != nil {
		ln.mshard = m.Shard(addr)
	}
	// The connection state comes first: AUTH, HELLO, SELECT, ...; the
	// requests after it wait for the engine to accept it.
	ln.replayState(s)
	go s.p.dialLink(ln, s.conn.EventLoop())
	return ln
}

// dropLink forgets a failed link, so that the next command opens a new one.
func (s *client) dropLink(ln *link) {
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

// slow adds a command to the slow log.
func (s *client) slow(sl *slowlog.Log, e *request, tOut int64) {
	slowRec(sl, s.p.resolver.Name(e.cmd), e.argc, s.name, s.peer, &e.key, e.tIn, e.tSent, e.tReply, tOut, e.svc, e.inj, e.rule.String())
}

// endStream ends a cut-through reply: pushes held meanwhile follow it.
func (s *client) endStream() {
	s.streaming = nil
	s.releasePushes()
}

// markDirty puts s on its loop's list of clients to flush at the end of
// the callback.
func (s *client) markDirty() {
	if !s.has(cfDirty) {
		s.set(cfDirty, true)
		s.l.dirty = append(s.l.dirty, s)
	}
}

// flush writes the replies that are ready at the head of the queue and
// records their timings.
func (s *client) flush() {
	if s.capBuf != nil {
		s.flushCapture()
	}
	if s.gone() {
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
	if written > 0 && s.cs == csOnOutput {
		s.closing(csAfterReplies)
	}
	if len(s.wbuf) > 0 {
		out := s.wbuf
		if s.tio != nil {
			out = s.tio.encrypt(out)
		}
		if s.linger != nil {
			s.linger.write(out)
		} else {
			_, _ = s.conn.Write(out)
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
	s.l.commitIn()
	if tOut != 0 {
		s.l.inflight.AddAt(-int64(len(done)), tOut) // t_out: answered
	} else {
		s.l.inflight.Add(-int64(len(done)))
	}
	if m := s.l.m; m != nil {
		m.Lock()
		for _, e := range done {
			isErr := e.failed()
			if e.tSent == 0 || e.tReply == 0 {
				if e.inj > 0 && e.agg == aggLocal && tOut != 0 {
					// Held by a rule (a delay, a frozen shard), then
					// answered by respmeter itself (the facade's -MOVED
					// after a failover): its wait is injected time, and
					// nothing of it went upstream.
					m.ObserveInjectedLocked(int(e.cmd), time.Duration(tOut-e.tIn+e.tls), 0, 0, time.Duration(e.inj), isErr)
					continue
				}
				m.CountLocked(int(e.cmd), isErr)
				continue
			}
			total := time.Duration(tOut - e.tIn + e.tls)
			if e.inj == 0 {
				m.ObserveLocked(int(e.cmd), total, time.Duration(e.tReply-e.tSent), time.Duration(e.svc), isErr)
			} else {
				m.ObserveInjectedLocked(int(e.cmd), total, time.Duration(e.tReply-e.tSent), time.Duration(e.svc), time.Duration(e.inj), isErr)
			}
			if s.tio != nil {
				m.TLSLocked(int(e.cmd), time.Duration(e.tls))
			}
			if h := m.Heat(); h != nil && len(e.ps) > 0 {
				h.EndLocked(&e.heat, e.key.Bytes(), int(e.cmd), e.ps[0].mshard, total, time.Duration(e.svc))
			}
			for i := range e.ps {
				p := &e.ps[i]
				switch {
				case p.mshard < 0 || p.tReply == 0:
				case s.p.shape.perShard():
					// A part re-sent after a redirect or -TRYAGAIN counts on
					// the shard that answered it from its last send on: the
					// hops before went to their own shards (link.hop), so a
					// migration's write pause on the source shows there.
					// An injected delay is the shard's injected phase, as
					// it is the command's.
					shTotal, up, svc := total-time.Duration(p.tSent-p.tFirst), time.Duration(p.tReply-p.tSent), time.Duration(p.tReply-p.svcFrom)
					if e.inj == 0 {
						m.ShardObserveLocked(p.mshard, shTotal, up, svc, isErr)
					} else {
						m.ShardObserveInjectedLocked(p.mshard, shTotal, up, svc, time.Duration(e.inj), isErr)
					}
					if s.tio != nil {
						// Each part's total is its command's, crypto included.
						m.ShardTLSLocked(p.mshard, time.Duration(e.tls))
					}
				default:
					m.ShardCountLocked(p.mshard, isErr)
				}
			}
			if e.penalty > 0 {
				m.RedirectPenaltyLocked(time.Duration(e.penalty))
			}
			if s.p.shape.reorders() {
				m.ReorderWaitLocked(time.Duration(tOut - e.tReply))
			}
		}
		if tOut >= s.l.nextRTT && s.p.cfg.TCPInfoInterval > 0 {
			s.l.nextRTT = tOut + int64(s.p.cfg.TCPInfoInterval)
			s.l.sampleRTT(s)
		}
		m.Unlock()
		if s.q.len() == 0 {
			s.lastOut = tOut
		}
	}
	if s.p.keepNames {
		// The name as each request leaves: a slow one's entry names the
		// client as it was then.
		sl := s.p.cfg.SlowLog
		for _, e := range done {
			if e.setName != "" && !e.failed() {
				s.name = e.setName
				if in := s.p.inject.Load(); in != nil && in.names {
					s.injName = append(s.injName[:0], e.setName...)
				}
			}
			if sl != nil && tOut != 0 && e.tSent > 0 && e.tReply > 0 && time.Duration(tOut-e.tIn) >= sl.Threshold() {
				s.slow(sl, e, tOut)
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
func (s *client) closeIfDone() {
	if s.gone() {
		return
	}
	if s.cs == csNow || s.cs == csAfterReplies && s.q.len() == 0 ||
		s.linger != nil && (s.q.len() == 0 && s.paused == 0 || s.blockedAtHead()) {
		if s.linger != nil {
			s.linger.close()
			s.linger = nil
		} else {
			s.l.closeFlushed(s.conn)
		}
		s.shutdown()
	}
}

// maybeResume queues s for resume once its requests in flight are answered.
func (s *client) maybeResume() {
	if s.paused == 0 || s.paused >= pauseInject || s.gone() || s.has(cfResumeQueued) {
		return
	}
	// A pause waits for every reply; the shared window only for half.
	// (A pauseWait, such as HELLO switching protocol, needs every reply in:
	// resumed earlier, it would pause again at once, for ever.)
	ready := s.q.len() == 0 || s.paused == pauseWindow && s.q.len() <= sharedResumeAt
	if s.paused == pauseAuth {
		ready = s.p.authChecked(s.authAfter)
	}
	if ready {
		s.set(cfResumeQueued, true)
		s.l.resume = append(s.l.resume, s)
	}
}

// checkOutput applies the client output limit (outputGuard) to the
// replies gnet holds for the client plus those held behind a slower shard.
func (s *client) checkOutput(lim, added int) {
	if s.out.exceeded(s.conn.OutboundBuffered(), s.buffered+len(s.pushHold), added, lim) {
		s.evict("output_limit")
	}
}

func (s *client) evict(reason string) {
	if s.gone() {
		return
	}
	if m := s.p.cfg.Metrics; m != nil {
		m.ClientEvicted(reason)
	}
	s.p.log.Warn("client evicted", "reason", reason, "client", s.peer.String())
	if s.linger != nil {
		s.linger.close()
		s.linger = nil
	} else {
		s.l.closeNow(s.conn)
	}
	s.shutdown()
}

// clientClosed ends the client: its shard connections are closed at once
// (a blocked BLPOP must not pop an element for a client that left).
func (s *client) clientClosed(c gnet.Conn, err error) {
	if m := s.p.cfg.Metrics; m != nil {
		m.ClientClosed()
	}
	s.p.clients.Add(-1)
	// A client that half-closed after sending requests still gets their
	// replies, as from Redis, up to a request
	// that may block (Redis frees a blocked client on EOF).
	if !s.gone() && errors.Is(err, io.EOF) && (s.q.len() > 0 || s.paused != 0) && s.paused != pauseHung && !s.blockedAtHead() && !s.p.draining.Load() {
		if fd, derr := unix.Dup(c.Fd()); derr == nil {
			s.linger = newLinger(s.p, fd, s.p.cfg.ClientOutputLimit)
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
func (s *client) blockedAtHead() bool {
	return s.raw != nil || s.q.len() > 0 && s.q.front().blocks
}

func (s *client) shutdown() {
	if s.gone() {
		return
	}
	s.cs = csClosed
	if s.linger != nil {
		s.linger.close()
		s.linger = nil
	}
	// s.done is left alone: shutdown may run inside flush (a write to a
	// client that reset its connection closes it at once), which still
	// walks it; those entries are complete and flush recycles them.
	s.l.commitIn()
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
// arrived (link.onData): e was next in line.
func (s *client) complete(e *request, i int, reply []byte, now int64, streamed bool) {
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
	if e.left == 0 && e.flags&eAuthChange != 0 {
		s.p.requestAuthCheck()
	}
	e.heat.Reply(reply) // nil when streamed: link.onData adds the pieces
	s.markDirty()
	if streamed || e.agg == aggRelay && e.left == 0 && s.q.len() > 0 && s.q.front() == e && e.flags&(eExecAbort|eSilent) == 0 && e.hold == 0 {
		// The common case: the reply is next in line; no copy beyond the
		// write buffer.
		s.wbuf = append(s.wbuf, reply...)
		e.flags |= eWritten
		e.isErr = resp.IsErrorReply(reply)
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
func (s *client) advance() {
	for s.q.len() > 0 && s.q.front().ready {
		if e := s.q.front(); e.hold != 0 && s.holdReply(e) {
			break // a reply delay holds it (inject.go)
		}
		e := s.q.pop()
		if e.flags&eWritten == 0 {
			if e.flags&eSilent == 0 {
				s.wbuf = append(s.wbuf, e.out...)
			}
			s.buffered -= len(e.out)
		}
		s.done = append(s.done, e)
		if e.flags&eQuit != 0 || e.flags&eQuietQuit != 0 && len(s.wbuf) > 0 {
			s.closing(csAfterReplies)
		} else if e.flags&eQuietQuit != 0 {
			s.closing(csOnOutput)
		}
		s.written = e.seq
		s.releasePushes()
	}
}

// finish merges the parts' replies of e into e.out (see merge.go) and
// returns the bytes the parts held.
func (s *client) finish(e *request) (held int) {
	for i := range e.ps {
		held += len(e.ps[i].reply)
	}
	e.ready = true
	if e.flags&eExecAbort != 0 {
		if e.flags&eExecCross != 0 {
			e.out = append(e.out[:0], crossSlotErr...)
			return held
		}
		e.out = append(e.out[:0], execAbortErr...)
		return held
	}
	if e.agg == aggRelay || e.agg == aggAllOK || e.agg == aggHome {
		if e.agg == aggAllOK {
			if i := firstError(s.l.partReplies(e)); i >= 0 {
				e.out = append(e.out[:0], e.ps[i].reply...)
				return held
			}
		}
		// Swap buffers instead of copying: the part's buffer becomes the
		// reply.
		e.out, e.ps[0].reply = e.ps[0].reply, e.out[:0]
		return held
	}
	rs := s.l.partReplies(e)
	i := firstError(rs)
	if e.agg == aggOneOK {
		i = oneSucceeded(rs)
	}
	if i >= 0 {
		e.out = append(e.out[:0], rs[i]...)
		clear(rs)
		s.l.replies = rs[:0]
		return held
	}
	m := s.l.mg
	bad := -1
	switch e.agg {
	case aggSum:
		e.out, bad = m.sum(e.out[:0], rs)
	case aggMGet:
		pos := s.l.pos[:0]
		for i := range e.ps {
			pos = append(pos, e.ps[i].pos)
		}
		e.out, bad = m.mget(e.out[:0], rs, pos)
		clear(pos)
		s.l.pos = pos[:0]
	case aggConcat:
		e.out, bad = m.concat(e.out[:0], rs)
	case aggAnd, aggOr, aggMin, aggMax:
		e.out, bad = m.ints(e.out[:0], rs, e.agg)
	case aggSubs:
		e.out = e.out[:0]
		for _, r := range rs {
			e.out = append(e.out, r...)
		}
		e.out = s.l.renumber(e.out, s.shardSubs())
	case aggScan:
		var ok bool
		if e.out, ok = m.scan(e.out[:0], rs[0], e.scanPos, e.scanN); !ok {
			bad = 0
		}
	}
	if bad >= 0 {
		e.out = append(e.out[:0], rs[bad]...)
	}
	clear(rs)
	s.l.replies = rs[:0]
	return held
}

// ring is a FIFO queue that grows by doubling and never shrinks, so the
// steady state allocates nothing.
type ring[T any] struct {
	buf  []T
	head int
	n    int
}

func (r *ring[T]) len() int { return r.n }

func (r *ring[T]) push(v T) {
	if r.n == len(r.buf) {
		nb := make([]T, max(8, 2*len(r.buf)))
		for i := 0; i < r.n; i++ {
			nb[i] = r.buf[(r.head+i)%len(r.buf)]
		}
		r.buf, r.head = nb, 0
	}
	r.buf[(r.head+r.n)%len(r.buf)] = v
	r.n++
}

// front returns the oldest element; r must not be empty.
func (r *ring[T]) front() T { return r.buf[r.head] }

// at returns the i-th oldest element.
func (r *ring[T]) at(i int) T { return r.buf[(r.head+i)%len(r.buf)] }

func (r *ring[T]) pop() T {
	var zero T
	v := r.buf[r.head]
	r.buf[r.head] = zero // drop the reference for the GC
	r.head = (r.head + 1) % len(r.buf)
	r.n--
	return v
}

// linger delivers the remaining replies of a client that half-closed its
// connection. gnet closes a socket as soon as a read returns EOF, so the
// client keeps a duplicate descriptor of it (see client.clientClosed) and
// hands reply bytes to a goroutine that writes them through the Go runtime's
// poller. Used only in that rare case: the fast path never sees it.
type linger struct {
	ch     chan []byte
	queued int  // bytes handed to the writer (loop side only)
	limit  int  // ClientOutputLimit; <= 0 unlimited
	broken bool // stopped taking bytes: the client gets a prefix of its stream
}

// lingerQueue bounds the reply chunks queued for a half-closed client.
const lingerQueue = 4096

func newLinger(p *Proxy, fd int, limit int) *linger {
	l := &linger{ch: make(chan []byte, lingerQueue), limit: limit}
	f := os.NewFile(uintptr(fd), "client")
	conn, err := net.FileConn(f) // dups fd again
	_ = f.Close()
	p.lingers.Add(1)
	go func() {
		defer p.lingers.Done()
		for b := range l.ch {
			if err != nil {
				continue
			}
			_ = conn.SetWriteDeadline(time.Now().Add(p.cfg.DrainTimeout))
			if _, werr := conn.Write(b); werr != nil {
				err = werr
			}
		}
		if conn != nil {
			_ = conn.Close()
		}
	}()
	return l
}

// write queues a copy of b (b aliases the loop's read buffer). When the
// client does not read fast enough (the queue or the output limit is full)
// it stops taking bytes for good, so the client sees a prefix of its reply
// stream and then EOF, never a stream with a gap.
func (l *linger) write(b []byte) {
	if l.broken {
		return
	}
	l.queued += len(b)
	if l.limit > 0 && l.queued > l.limit {
		l.broken = true
		return
	}
	select {
	case l.ch <- append([]byte(nil), b...):
	default:
		l.broken = true
	}
}

// close flushes what was queued, then closes the connection.
func (l *linger) close() { close(l.ch) }

// lingerTimeout bounds how long a half-closed client's replies are waited
// for.
const lingerTimeout = 60 * time.Second

// captureBatch records the requests of one read (reqs: whole frames,
// routed, the first numbered first). c is the running capture (nil: none);
// a session first seen by c gets an id, and a connection record with its
// state when it is sampled.
func (s *client) captureBatch(c *capture.Capture, reqs []byte, first uint64, now int64) {
	if c != s.capOf {
		s.flushCapture() // the replies gathered belong to the capture before
		s.capOf, s.capBuf = c, nil
		if c == nil {
			return
		}
		id, sampled := c.NewConn()
		if !sampled {
			return
		}
		s.capID, s.capBuf = id, c.Loop(s.l.idx)
		var state []byte // once per connection and capture
		for _, st := range s.states() {
			state = append(state, st...)
		}
		s.capBuf.Conn(id, now, state)
	}
	switch {
	case s.capBuf == nil || len(reqs) == 0:
	case c.RedactsValues():
		s.capBuf.KeyedBatch(s.capID, now, first, reqs, s.l.capKeys)
	default:
		s.capBuf.Batch(s.capID, now, first, reqs, !s.capSecret)
	}
}

// mayHoldSecret reports whether requests of command id can carry a
// credential the capture redacts (internal/capture's redactor: AUTH,
// HELLO ... AUTH, MIGRATE ... AUTH/AUTH2, CONFIG SET requirepass, ACL
// SETUSER); batches without one are written without a second scan.
func mayHoldSecret(id command.ID) bool {
	switch id {
	case command.Auth, command.Hello, command.Migrate, command.Config, command.Acl:
		return true
	}
	return false
}

// captureReply gathers the reply of e, ready at now (reply nil when
// streamed), for flushCapture: the replies the loop finishes for this
// client in one pass (a pipeline's) become one record.
func (s *client) captureReply(e *request, reply []byte, now int64, streamed bool) {
	var up int64
	if e.tSent > 0 {
		up = max(e.tReply, now) - e.tSent
	}
	if e.rule != nil {
		s.markInjected(e.seq, e.tIn, e.rule, e.inj)
	}
	s.capRep.Add(e.seq, now, reply, streamed, now-e.tIn, up)
	if s.capRep.Len() >= maxCaptureGroup {
		s.flushCapture()
	}
}

// maxCaptureGroup bounds the bytes of replies gathered before they are
// written (about 500 replies): a long pipeline is recorded in pieces.
const maxCaptureGroup = 16 << 10

// flushCapture writes the replies gathered by captureReply as one record;
// flush calls it at the end of every pass of the loop that finished a
// reply of s (complete marks s dirty).
func (s *client) flushCapture() {
	if s.capBuf != nil {
		s.capBuf.Replies(s.capID, &s.capRep)
	} else {
		s.capRep.Reset()
	}
}

// awaitAuth pauses s (pauseAuth) until an auth check numbered s.authAfter
// or later has completed, asking for one at once.
func (s *client) awaitAuth() {
	s.l.authWait = append(s.l.authWait, s)
	s.p.authWaiters.Add(1)
	// A check numbered s.authAfter or later that has started and not yet
	// passed wakes s when it passes: it stores authPassed, then reads
	// authWaiters, which counts s already (sequentially consistent atomics:
	// it saw s's Add, or s saw its Store). Asking for another check then
	// would only make a burst of new clients cost one check more for each
	// check that ran while the burst arrived. Otherwise (none started, or
	// one passed since the caller looked) one is asked for at once.
	if s.p.authStarted.Load() >= s.authAfter && !s.p.authChecked(s.authAfter) {
		return
	}
	select {
	case s.p.authNow <- struct{}{}:
	default: // one is asked for already
	}
}

// outputGuard applies the client output limit the way Redis's
// client-output-buffer-limit does with a hard and a soft limit: replies
// queued beyond the hard limit (limit + outputSlack, at most 2 x limit)
// evict at once; beyond the limit they evict when the client has taken
// none of its queued bytes for outputStall (it is not reading) or when
// they stay there for 1 s. A client that reads a large reply as fast as it
// can passes over the limit briefly (the engine writes faster than a
// client reads, and gnet cannot pause reading the engine) but keeps taking
// bytes. The hard limit is what bounds memory: a client that stops reading
// while the engine streams it large replies can receive far more than
// outputSlack during outputStall (gnet holds queued bytes in power-of-two
// chunks: up to twice their size in memory).
type outputGuard struct {
	overSince time.Time // when the queued replies went over the limit
	moved     time.Time // when the client was last seen taking queued replies
	prev      int       // gnet's queued bytes after the last write
}

// outputStall is how long a client over the output limit may go without
// taking any of its queued replies before it is evicted.
const outputStall = 100 * time.Millisecond

// outputSlack is how far beyond the output limit a client's queued replies
// may go before it is evicted at once: a fixed overhead over the limit, not
// a multiple of it (docs/cases.md F-02: memory stays under the limit plus
// a small fixed overhead). A single reply larger than limit + outputSlack
// evicts its client, as it would under Redis's hard limit.
const outputSlack = 16 << 20

// exceeded is called after added bytes were written to a client: queued is
// what gnet holds for it, held what the proxy holds besides (replies
// waiting behind slower shards). It reports whether the client must be
// evicted. Under the limit it reads no clock.
func (g *outputGuard) exceeded(queued, held, added, lim int) bool {
	moved := queued < g.prev+added // the socket took queued bytes since the last write
	g.prev = queued
	n := queued + held
	if n <= lim {
		g.overSince, g.moved = time.Time{}, time.Time{}
		return false
	}
	now := time.Now()
	if moved || g.moved.IsZero() {
		g.moved = now
	}
	switch {
	case n > lim+min(lim, outputSlack), now.Sub(g.moved) > outputStall:
		return true
	case g.overSince.IsZero():
		g.overSince = now
	}
	return now.Sub(g.overSince) > time.Second
}

// slowRec records one command, labelled name (its metric label,
// routing.Resolver.Name), in the slow log from its stamps (ns on the
// proxy's clock): t_in, t_sent, t_reply and t_out, and its service time
// (ns). It allocates nothing: under load every command may be slow.
func slowRec(sl *slowlog.Log, name string, argc int32, clientName string, peer net.Addr, key *slowlog.KeyBuf,
	tIn, tSent, tReply, tOut, svc, inj int64, rule string) {
	r := slowlog.Rec{
		Command:    name,
		Args:       int(argc),
		ClientName: clientName,
		Key:        *key,
		Total:      time.Duration(tOut - tIn),
		Upstream:   time.Duration(tReply - tSent),
		Service:    time.Duration(svc),
		Injected:   time.Duration(inj),
		Rule:       rule,
	}
	if a, ok := peer.(*net.TCPAddr); ok {
		ap := a.AddrPort() // an IPv4 peer comes as ::ffff:a.b.c.d
		r.Client = netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
	}
	sl.Record(&r)
}

// setNameArg returns the client name a CLIENT SETNAME or HELLO ... SETNAME
// request sets, and true. HELLO's options are parsed in order as Redis
// does (HELLO [protover [AUTH username password] [SETNAME clientname]]),
// so AUTH's arguments are never mistaken for a name; the last SETNAME wins.
func setNameArg(id command.ID, args [][]byte) ([]byte, bool) {
	switch {
	case id == command.Client && len(args) == 3 && eqFold(args[1], "setname"):
		return args[2], true
	case id == command.Hello:
		var name []byte
		found := false
		for i := 2; i < len(args); {
			switch {
			case eqFold(args[i], "auth") && i+2 < len(args):
				i += 3
			case eqFold(args[i], "setname") && i+1 < len(args):
				name, found = args[i+1], true
				i += 2
			default:
				i = len(args)
			}
		}
		return name, found
	}
	return nil, false
}

// blockWait returns how long the engine may keep blocking command id with
// arguments args waiting on purpose, in nanoseconds: its timeout argument
// (seconds for BLPOP, BRPOP, BRPOPLPUSH, BLMOVE, BZPOPMIN, BZPOPMAX (last
// argument), BLMPOP and BZMPOP (first); milliseconds for XREAD and
// XREADGROUP BLOCK, WAIT (last)), -1 when it may wait forever
// (a timeout of 0, one it cannot read, or a blocking command not listed here, such as WAITAOF, which the built-in table lacks), 0 when it does not block (XREAD
// without BLOCK). The rules are the commands' own, from the Redis 7.0
// command reference.
func blockWait(id command.ID, args [][]byte) int64 {
	if len(args) < 2 {
		return -1
	}
	var arg []byte
	unit := float64(time.Second)
	switch id {
	case command.Blpop, command.Brpop, command.Brpoplpush, command.Blmove, command.Bzpopmin, command.Bzpopmax:
		arg = args[len(args)-1]
	case command.Blmpop, command.Bzmpop:
		arg = args[1]
	case command.Wait:
		arg, unit = args[len(args)-1], float64(time.Millisecond)
	case command.Xread, command.Xreadgroup:
		for i := 1; i+1 < len(args); i++ {
			if eqFold(args[i], "streams") {
				return 0
			}
			if eqFold(args[i], "block") {
				arg, unit = args[i+1], float64(time.Millisecond)
				break
			}
		}
		if arg == nil {
			return 0
		}
	default:
		return -1
	}
	v, err := strconv.ParseFloat(string(arg), 64)
	if err != nil || v <= 0 {
		return -1 // 0 waits forever; a bad one is refused by the engine at once
	}
	return int64(v * unit)
}

// Reply modes set by CLIENT REPLY (https://redis.io/commands/client-reply).
const (
	replyOn uint8 = iota
	replyOff
	replySkipNext
)

// eqFold reports whether b equals the lower-case ASCII word w, ignoring case.
func eqFold(b []byte, w string) bool {
	if len(b) != len(w) {
		return false
	}
	for i := 0; i < len(b); i++ {
		c := b[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != w[i] {
			return false
		}
	}
	return true
}
