package proxy

import (
	"bytes"
	"context"
	"errors"
	"io"
	"time"

	"github.com/panjf2000/gnet/v2"
	"golang.org/x/sys/unix"

	"github.com/respmeter/respmeter/metrics/slowlog"
	"github.com/respmeter/respmeter/proxy/resp"
	"github.com/respmeter/respmeter/routing"
	"github.com/respmeter/respmeter/routing/command"
)

// Reply modes set by CLIENT REPLY (https://redis.io/commands/client-reply).
const (
	replyOn uint8 = iota
	replyOff
	replySkipNext
)

// Subscription families; a confirmation's count is per family set as in
// redis-server 7.0 pubsub.c: channels and patterns share one count
// (clientSubscriptionsCount), shard channels have their own.
const (
	famChan uint8 = iota + 1
	famPat
	famShard
)

// session is one client connection and its private upstream connection.
// Everything in it is touched only by the event loop both connections live
// on.
type session struct {
	p      *Proxy
	l      *loop
	client gnet.Conn
	link   upLink
	up     gnet.Conn // nil until the upstream is open

	scan    resp.RequestScanner
	partial []byte // an incomplete request (or all input while the upstream dials), copied out of gnet's buffer
	// partialSent is how many leading bytes of partial have been forwarded
	// already: the part of an incomplete request the scanner has validated
	// goes to the engine at once, so that the engine's own limits
	// (requirepass: 10 elements and 16 KiB bulks before AUTH; a lowered
	// proto-max-bulk-len) cut the client off as early as on a direct
	// connection, instead of the proxy holding up to ClientQueryLimit.
	partialSent int
	outq        []byte // complete requests waiting for the upstream to open
	rf          *resp.ReplyFramer
	q           fifo

	replyMode  uint8
	inMulti    bool
	resp3      bool      // HELLO 3 answered: pub/sub messages come as pushes, never as arrays
	wantResp3  bool      // HELLO 3 sent (the request side's view, ahead of the reply)
	monitor    bool      // MONITOR answered: '+<timestamp> ...' lines are a feed
	raw        bool      // SYNC/PSYNC answered: relay bytes unframed
	subs       subCounts // from the engine's confirmations
	stopRead   bool      // QUIT or a protocol error seen: ignore further input
	closeAfter bool      // close the client once the fifo is empty
	closed     bool      // client gone (or being closed); upstream closed by us
	upFailed   []byte
	localErr   []byte   // the protocol error reply held in the fifo
	lastOut    int64    // when the last reply went out with nothing pending (think-time start)
	lastReply  int64    // t_reply of the previous reply (service-time start under pipelining)
	name       string   // CLIENT SETNAME / HELLO SETNAME that succeeded, for the slow log
	names      []string // names of SETNAME requests in flight, oldest first
	linger     *linger
	out        outputGuard
	// engineProtoErr: the last reply was the engine's "-ERR Protocol error"
	// (it closes the connection after it).
	engineProtoErr bool

	discarding bool // inside the reply to a kindDiscard request

	// holding: a RESET whose reply CLIENT REPLY SKIP drops was sent,
	// followed by a barrier (see clientData). The input after it waits in
	// partial (partialSent 0) until the barrier is answered (releaseHold).
	holding bool
	// noHold: the client is gone; what it sent runs unheld.
	noHold bool
	// resetSkipped: the request just queued was a RESET whose reply CLIENT
	// REPLY SKIP drops.
	resetSkipped bool

	upAddr string // the engine (or, under RoutePinned, the shard) this client's upstream goes to
	// pinShard is the shard index under RoutePinned (-1 otherwise);
	// pinDeferred: PinFirstKey and no keyed command seen yet, so the
	// upstream is not dialed (requests wait in outq).
	pinShard    int
	pinDeferred bool
	mshard      int // metrics shard index of upAddr; -1 when not measuring
}

// upLink is the gnet context of a session's upstream connection.
type upLink struct{ s *session }

func newSession(p *Proxy, c gnet.Conn, l *loop) *session {
	s := &session{p: p, l: l, client: c, rf: resp.NewReplyFramer(), upAddr: p.cfg.Upstream, pinShard: -1, mshard: -1}
	s.link.s = s
	if p.route == routePinned {
		if p.pinFirstKey {
			s.pinDeferred = true
		} else {
			s.pin(-1)
		}
	}
	if m := p.cfg.Metrics; m != nil && !s.pinDeferred {
		s.mshard = m.Shard(s.upAddr)
	}
	return s
}

// pin binds the session to shard (under RoutePinned), or to the next live
// shard round-robin when shard < 0.
func (s *session) pin(shard int) {
	v := s.p.router.load()
	if shard < 0 && len(v.live) > 0 {
		shard = v.live[int(s.p.router.pinNext.Add(1)%uint64(len(v.live)))]
	}
	if shard < 0 {
		shard = 0
	}
	s.pinShard, s.upAddr, s.pinDeferred = shard, v.t.Addrs[shard], false
	if m := s.p.cfg.Metrics; m != nil {
		s.mshard = m.Shard(s.upAddr)
	}
}

// pinCheck, under RoutePinned, binds a deferred session to the shard of
// the first key it uses, and counts commands whose key's slot belongs to
// another shard than the session's. A deferred session whose first batch
// of requests names no key is pinned round-robin at the end of that batch
// (see clientData): a client that waits for the reply to its handshake
// (go-redis sends HELLO alone) must get it.
func (s *session) pinCheck(id command.ID, args [][]byte) {
	k, ok := s.p.resolver.FirstKey(args)
	if !ok {
		return
	}
	v := s.p.router.load()
	shard := v.t.Shard(routing.Slot(k))
	if s.pinDeferred {
		s.pin(shard)
		go s.p.dial(s, s.client.EventLoop())
		return
	}
	if shard != s.pinShard {
		if m := s.p.cfg.Metrics; m != nil {
			m.PinnedMisroute()
		}
	}
}

func (s *session) subscribed() bool { return s.subs.any() }

// clientTraffic frames the client's requests, queues one fifo entry per
// request that will be answered, and forwards the complete requests to the
// upstream in one write.
func (s *session) clientTraffic(c gnet.Conn) {
	data, _ := c.Next(-1)
	s.clientData(data)
}

// clientData processes bytes from the client (read now, or held by a
// routed session that handed the client over).
func (s *session) clientData(data []byte) {
	if s.closed || s.stopRead {
		return
	}
	p := s.p
	if s.holding {
		// Waiting for a barrier: keep the input, unprocessed (bounded by
		// the query limit).
		var over bool
		if s.partial, over = s.l.holdInput(s.partial, data); over {
			s.evict("query_limit")
		}
		return
	}
	if p.draining.Load() {
		// Shutting down: no new requests; the client is closed once the
		// ones it already sent are answered.
		s.stopRead, s.closeAfter = true, true
		if s.q.len() == 0 {
			s.closeClient()
		}
		return
	}
	if m := s.l.m; m != nil {
		m.AddClientBytes(len(data), 0)
	}
	if s.raw {
		s.toUpstream(data)
		return
	}
	var now int64
	measure := s.l.m != nil
	if measure {
		now = p.now()
		if s.q.len() == 0 && s.lastOut != 0 && len(s.partial) == 0 {
			s.l.m.Lock()
			s.l.m.ThinkLocked(time.Duration(now - s.lastOut))
			s.l.m.Unlock()
		}
	}
	fromPartial := false
	if len(s.partial) > 0 {
		s.partial = append(s.partial, data...)
		data, fromPartial = s.partial, true
	}
	first := s.q.len()
	off := 0
	barrier, barrierFlags := false, uint8(0)
	for off < len(data) && !s.stopRead {
		n, kind, err := s.scan.Scan(data[off:])
		if err != nil {
			s.protocolError(err)
			break
		}
		if n == 0 {
			break
		}
		frame := data[off : off+n]
		off += n
		if kind == resp.KindEmpty {
			continue // forwarded too; the engine ignores it as well
		}
		s.l.args = resp.Args(frame, kind, s.l.args[:0])
		if len(s.l.args) == 0 {
			continue
		}
		s.request(s.l.args, frame, now)
		if s.resetSkipped {
			// No reply tells when the RESET has run, nor which replies
			// come before it: a barrier follows it, and the input after it
			// waits for the barrier's reply (as a hold does).
			s.resetSkipped = false
			if !s.noHold {
				barrier, barrierFlags, s.holding = true, flagReset, true
				break
			}
			continue
		}
	}
	if s.pinDeferred && off > 0 {
		// No key in the client's first batch: pin round-robin now rather
		// than keep it waiting (see pinCheck).
		s.pin(-1)
		go s.p.dial(s, s.client.EventLoop())
	}
	added := s.q.len() - first
	// Count the new requests as in flight before the write: from t_in on
	// they are (Little's law uses this count).
	s.l.inflight.Add(int64(added))
	// sent..cut goes to the engine now: the complete requests and the
	// validated part of an incomplete one, less what went before.
	sent, cut := 0, off
	if fromPartial {
		sent = s.partialSent
	}
	if !s.stopRead && !s.holding && off < len(data) {
		cut = off + s.scan.Pending()
	}
	if cut > sent {
		if s.upFailed != nil {
			// nothing to forward to: answer what was queued
		} else if s.up != nil {
			// t_sent is read just before the write: once the bytes are in
			// the socket the engine may answer (and, on a busy machine,
			// run) before a clock read that follows the write.
			if measure {
				t := p.now()
				for i := first; i < s.q.len(); i++ {
					s.q.at(i).tSent = t
				}
			}
			_, _ = s.up.Write(data[sent:cut])
			if m := s.l.m; m != nil {
				m.AddUpstreamBytes(0, cut-sent)
				if measure && added > 0 && s.mshard >= 0 {
					s.l.m.Lock()
					s.l.m.ShardBatchLocked(s.mshard, added)
					s.l.m.Unlock()
				}
			}
		} else {
			s.outq = append(s.outq, data[sent:cut]...)
		}
	}
	if barrier && s.holding && s.upFailed == nil {
		s.pushBarrier(barrierFlags)
	}
	// Unprocessed input: the incomplete tail, requests waiting for the
	// upstream to open or to take them, and the bookkeeping of requests in
	// flight (a client pipelining into a stalled engine grows all three).
	if lim := p.cfg.ClientQueryLimit; lim > 0 && len(data)-off+len(s.outq)+s.q.len()*pendingSize > lim ||
		lim > 0 && s.up != nil && s.up.OutboundBuffered() > lim {
		s.evict("query_limit")
		return
	}
	// Keep the incomplete tail for the next read.
	tail := data[off:]
	s.partialSent = max(cut, sent) - off
	switch {
	case s.stopRead || len(tail) == 0:
		s.partial = s.partial[:0]
		s.partialSent = 0
		s.scan.Reset()
	case s.holding: // tail starts at a request boundary
		s.partial = append(s.partial[:0:0], tail...)
		s.partialSent = 0
		s.scan.Reset()
	case fromPartial:
		s.partial = s.partial[:copy(s.partial, tail)]
	default:
		s.partial = append(s.partial[:0], tail...)
	}
	if s.upFailed != nil {
		s.failPending(s.upFailed)
		return
	}
	s.answerLocal()
}

// request classifies one complete request and queues what it will be
// answered with. args alias the read buffer: nothing here may keep them.
func (s *session) request(args [][]byte, frame []byte, now int64) {
	id := s.p.resolver.Lookup(args[0])
	e := pending{tIn: now, cmd: id, argc: int32(len(args))}
	if s.pinShard >= 0 || s.pinDeferred {
		s.pinCheck(id, args)
	}
	if name, ok := setNameArg(id, args); ok {
		s.setName(&e, name)
	}
	if s.p.cfg.SlowLog != nil {
		if k, ok := slowlog.SafeFirstKey(s.p.resolver.Name(id), args, s.p.keyPos(id, args)); ok {
			e.key.Set(k)
		}
	}
	isClientReply := false
	switch id {
	case command.Client:
		if len(args) == 3 && !s.inMulti && !s.resp2Subscribed() && eqFold(args[1], "reply") {
			isClientReply = true
			switch {
			case eqFold(args[2], "on"):
				s.replyMode = replyOn
			case eqFold(args[2], "off"):
				s.replyMode = replyOff
				s.count(id)
				return
			case eqFold(args[2], "skip"):
				if s.replyMode != replyOff {
					s.replyMode = replySkipNext
				}
				s.count(id)
				return
			default:
				isClientReply = false // an error reply
			}
		}
	case command.Hello:
		if len(args) >= 2 {
			switch string(args[1]) {
			case "3":
				s.wantResp3 = true
			case "2":
				s.wantResp3 = false
			}
		}
	case command.Quit:
		e.flags |= flagQuit
		s.stopRead = true
	case command.Monitor:
		e.flags |= flagMonitor
		if s.replyMode != replyOn && !s.inMulti && !s.resp2Subscribed() {
			// Its +OK will not come (CLIENT REPLY OFF/SKIP): the feed
			// starts once the engine runs it, with nothing else to wait for.
			s.monitor = true
		}
	case command.Reset:
		e.flags |= flagReset
		skipped := s.replyMode == replySkipNext
		s.replyMode, s.inMulti, s.wantResp3 = replyOn, false, false
		if skipped {
			// CLIENT REPLY SKIP drops RESET's own reply (OFF does not:
			// RESET turns it off first): a barrier tells when it has run
			// (see clientData).
			s.count(id)
			s.resetSkipped = true
			return
		}
	case command.Multi:
		if !s.resp2Subscribed() { // rejected in a RESP2 subscribed context
			s.inMulti = true
		}
	case command.Exec, command.Discard:
		s.inMulti = false
	case command.Sync, command.Psync:
		e.flags |= flagSync
	case command.Subscribe, command.Unsubscribe:
		s.subRequest(&e, famChan, len(args)-1)
	case command.Psubscribe, command.Punsubscribe:
		s.subRequest(&e, famPat, len(args)-1)
	case command.Ssubscribe, command.Sunsubscribe:
		s.subRequest(&e, famShard, len(args)-1)
	}
	if s.p.resolver.Blocks(id) {
		e.flags |= flagBlocking
	}
	if e.kind == kindSub && s.replyMode == replySkipNext {
		s.replyMode = replyOn // it consumes the skip all the same
	}
	if !isClientReply && e.kind != kindSub {
		// (P|S)(UN)SUBSCRIBE confirmations are sent even under CLIENT
		// REPLY OFF/SKIP (redis-server 7.0 pubsub.c writes them as pushes).
		switch s.replyMode {
		case replyOff:
			s.count(id)
			return
		case replySkipNext:
			s.replyMode = replyOn
			s.count(id)
			return
		}
	}
	s.q.push(e)
}

// resp2Subscribed reports whether requests now being sent reach a RESP2
// connection in subscribe mode, where Redis accepts only
// (P|S)(UN)SUBSCRIBE, PING, QUIT and RESET: per family (channels,
// patterns, shard channels), the newest request in flight decides if it
// is a SUBSCRIBE (yes) or an UNSUBSCRIBE of everything (no); otherwise
// the count the last confirmation gave does.
func (s *session) resp2Subscribed() bool {
	if s.wantResp3 {
		return false
	}
	var known [famShard + 1]int8 // 1 subscribed, -1 not, 0 not known from the requests in flight
	for i := s.q.len() - 1; i >= 0; i-- {
		e := s.q.at(i)
		if e.kind != kindSub || known[e.subFamily] != 0 {
			continue
		}
		switch e.cmd {
		case command.Unsubscribe, command.Punsubscribe, command.Sunsubscribe:
			if e.expect == 0 {
				known[e.subFamily] = -1
			}
		default:
			known[e.subFamily] = 1
		}
	}
	for fam, n := range [...]int64{famChan: s.subs.chans, famPat: s.subs.pats, famShard: s.subs.shards} {
		if fam > 0 && (known[fam] == 1 || known[fam] == 0 && n > 0) {
			return true
		}
	}
	return false
}

// setName remembers a client name a request sets (CLIENT SETNAME, HELLO
// SETNAME) until its reply says whether it took effect. Only used by the
// slow log; names are not credentials.
func (s *session) setName(e *pending, name []byte) {
	if s.p.cfg.SlowLog == nil {
		return
	}
	e.flags |= flagSetName
	s.names = append(s.names, string(name))
}

func (s *session) subRequest(e *pending, fam uint8, nargs int) {
	if s.inMulti {
		return // answered +QUEUED now, confirmations inside EXEC's reply
	}
	e.kind = kindSub
	e.subFamily = fam
	e.expect = int32(nargs)
}

// count records a request that gets no reply (CLIENT REPLY OFF/SKIP).
func (s *session) count(id command.ID) {
	if m := s.l.m; m != nil {
		m.Lock()
		m.CountLocked(int(id), false)
		m.Unlock()
	}
}

// protocolError queues Redis's error reply behind the requests already
// sent, and stops reading: the client is closed once it has been answered.
func (s *session) protocolError(err error) {
	var pe resp.ProtocolError
	if !errors.As(err, &pe) {
		pe = resp.ProtocolError(err.Error())
	}
	s.localErr = pe.Reply()
	s.q.push(pending{kind: kindLocal})
	s.stopRead = true
	if m := s.p.cfg.Metrics; m != nil {
		m.ProtocolError()
	}
	s.p.log.Debug("client protocol error", "client", s.client.RemoteAddr().String(), "err", pe.Error())
}

// answerLocal writes proxy-made replies that have reached the head of the
// fifo (only a protocol error, then the client is closed).
func (s *session) answerLocal() {
	for s.q.len() > 0 && s.q.front().kind == kindLocal {
		s.q.pop()
		s.l.inflight.Add(-1)
		s.writeClient(s.localErr)
		s.closeClient()
	}
}

func (s *session) upstreamOpened(c gnet.Conn) {
	s.up = c
	if s.l.m != nil { // t_sent before the write, as in clientTraffic
		t := s.p.now()
		for i := 0; i < s.q.len(); i++ {
			if e := s.q.at(i); e.tSent == 0 {
				e.tSent = t
			}
		}
	}
	if len(s.outq) > 0 {
		_, _ = c.Write(s.outq)
		if m := s.l.m; m != nil {
			m.AddUpstreamBytes(0, len(s.outq))
			if s.q.len() > 0 && s.mshard >= 0 {
				m.Lock()
				m.ShardBatchLocked(s.mshard, s.q.len())
				m.Unlock()
			}
		}
		s.outq = nil
	}
}

// upstreamTraffic relays the engine's bytes to the client as they arrive
// (cut-through: a large reply is never held whole), framing them on the way
// to match each complete reply with the oldest pending request.
func (s *session) upstreamTraffic(c gnet.Conn) {
	data, _ := c.Next(-1)
	s.upstreamData(data)
}

// drainUpstream reads, without blocking, what the engine sent before its
// connection failed and relays it as upstreamTraffic would. gnet closes a
// connection as soon as a write to it fails, without reading it first: an
// engine that rejects a long request ("-ERR Protocol error: ...") and
// closes while the proxy is still writing it resets the connection, and
// its error reply is still in the socket. Called from OnClose, before gnet
// closes the descriptor.
func (s *session) drainUpstream(c gnet.Conn) {
	if s.closed && s.linger == nil {
		return
	}
	var buf [16 << 10]byte
	for {
		n, err := unix.Read(c.Fd(), buf[:])
		if n <= 0 || err != nil {
			return
		}
		s.upstreamData(buf[:n])
	}
}

// upstreamData relays bytes read from the engine (see upstreamTraffic).
func (s *session) upstreamData(data []byte) {
	if s.closed && s.linger == nil {
		return
	}
	p := s.p
	if m := s.l.m; m != nil {
		m.AddUpstreamBytes(len(data), 0)
	}
	var now int64
	measure := s.l.m != nil
	if measure {
		now = p.now()
	}
	done := s.l.done[:0]
	off, flushed := 0, 0
	popped := 0
	for off < len(data) && !s.raw {
		// SYNC/PSYNC: from its reply on, the connection carries an RDB
		// payload (no trailing CRLF) and then the replication stream.
		if s.q.len() > 0 && s.q.front().flags&flagSync != 0 && !s.rf.InFrame() && data[off] != '-' {
			e := s.q.pop()
			popped++
			done = append(done, doneRec{tIn: e.tIn, tSent: e.tSent, tReply: now, svcFrom: e.tSent, cmd: int(e.cmd)})
			s.raw = true
			break
		}
		if !s.rf.InFrame() && s.q.len() > 0 && (s.q.front().kind == kindDiscard && data[off] != '>' ||
			s.q.front().kind == kindBarrier && (data[off] == '$' || data[off] == '-')) {
			// The reply to a replayed state command or to a barrier: not
			// the client's. (A push, such as a tracking invalidation, is the
			// client's; so are pub/sub messages and MONITOR lines before a
			// barrier's reply, which is a bulk string or an error.)
			s.writeClient(data[flushed:off])
			flushed = off
			s.discarding = true
		}
		n, fin, err := s.rf.Feed(data[off:])
		off += n
		if err != nil {
			p.log.Warn("bad reply from upstream; closing", "upstream", s.upAddr, "err", err)
			if !s.discarding {
				s.writeClient(data[flushed:off])
			}
			s.closeBoth()
			return
		}
		if s.discarding {
			flushed = off
			if !fin {
				break
			}
			s.discarding = false
			if e := s.q.pop(); e.flags&flagReset != 0 {
				s.monitor, s.resp3 = false, false
				s.subs = subCounts{}
			}
			popped++
			continue
		}
		if !fin {
			break
		}
		// The engine rejects a request it cannot parse with "-ERR Protocol
		// error: ..." and closes the connection: if the close follows, no
		// error replies of ours may come after it (see upstreamClosed). A
		// script may return such an error too; any later reply clears it.
		f := s.rf.Frame()
		s.engineProtoErr = f.Type == '-' && bytes.HasPrefix(f.Head, engineProtoErr)
		if e, ok := s.onFrame(s.rf.Frame()); ok {
			popped++
			if measure {
				// service starts when this request was sent or the previous
				// reply completed, whichever is later (a pipelined request
				// waits behind the ones before it).
				done = append(done, doneRec{tIn: e.tIn, tSent: e.tSent, tReply: now,
					svcFrom: max(e.tSent, s.lastReply), cmd: int(e.cmd), isErr: s.rf.Frame().IsError(),
					argc: e.argc, key: e.key})
				s.lastReply = now
			}
			if e.flags&flagQuit != 0 {
				s.closeAfter = true
			}
		}
		if s.q.len() > 0 && s.q.front().kind == kindLocal {
			s.writeClient(data[flushed:off])
			flushed = off
			s.answerLocal()
		}
	}
	if s.raw {
		off = len(data)
	}
	// t_out is read just before the write, as t_sent is: once the bytes are
	// in the client's socket the client may see them (and, on a busy
	// machine, run) before a clock read that follows the write, and the
	// proxy would book more than the client itself saw.
	var tOut int64
	if measure && len(done) > 0 {
		tOut = p.now()
	}
	if off > flushed {
		s.writeClient(data[flushed:off])
	}
	s.l.inflight.Add(-int64(popped))
	if measure && len(done) > 0 {
		m := s.l.m
		m.Lock()
		for i := range done {
			d := &done[i]
			m.ObserveLocked(d.cmd, time.Duration(tOut-d.tIn), time.Duration(d.tReply-d.tSent),
				time.Duration(d.tReply-d.svcFrom), d.isErr)
			// Per-shard phases only when there are shards: with one
			// upstream (route none) they would repeat the totals, at the
			// cost of five more histogram records per command.
			if s.mshard >= 0 {
				if p.route != routeNone {
					m.ShardObserveLocked(s.mshard, time.Duration(tOut-d.tIn), time.Duration(d.tReply-d.tSent),
						time.Duration(d.tReply-d.svcFrom), d.isErr)
				} else {
					m.ShardCountLocked(s.mshard, d.isErr)
				}
			}
		}
		if tOut >= s.l.nextRTT && p.cfg.TCPInfoInterval > 0 {
			s.l.nextRTT = tOut + int64(p.cfg.TCPInfoInterval)
			s.l.sampleRTT(s)
		}
		m.Unlock()
		if sl := p.cfg.SlowLog; sl != nil {
			for i := range done {
				if d := &done[i]; time.Duration(tOut-d.tIn) >= sl.Threshold() {
					s.slow(sl, d, tOut)
				}
			}
		}
		if s.q.len() == 0 {
			s.lastOut = tOut
		}
	}
	s.l.done = done[:0]
	if s.closeAfter && s.q.len() == 0 {
		s.closeClient()
	}
	if s.linger != nil && (s.q.len() == 0 || s.blockedAtHead()) {
		s.closeBoth()
	}
	if s.holding && s.q.len() == 0 && !s.closed {
		s.releaseHold() // last: it processes the held input
	}
}

// slow adds a command to the slow log.
func (s *session) slow(sl *slowlog.Log, d *doneRec, tOut int64) {
	slowRec(sl, s.p.resolver.Name(command.ID(d.cmd)), d.argc, s.name, s.client.RemoteAddr(), &d.key,
		d.tIn, d.tSent, d.tReply, tOut, d.tReply-d.svcFrom)
}

// engineProtoErr starts the error Redis sends before closing a connection
// on a request it cannot parse ("ERR Protocol error: ..."), as much of it as
// a Frame.Head holds.
var engineProtoErr = []byte("ERR Protocol err")

// onFrame matches one complete reply. It returns the request it answered
// and true, or false for a frame that answers nothing (a push, a pub/sub
// message, a MONITOR line) or only part of a request (one of several
// SUBSCRIBE confirmations).
func (s *session) onFrame(f *resp.Frame) (pending, bool) {
	switch {
	case s.monitor && f.Type == '+' && len(f.Head) > 0 && f.Head[0] >= '0' && f.Head[0] <= '9':
		return pending{}, false // a MONITOR line: "+1700000000.123456 [0 127.0.0.1:5000] ..."
	case f.Type == '>' || (f.Type == '*' && !s.resp3 && (s.subscribed() || s.q.len() > 0 && s.q.front().kind == kindSub)):
		fam, confirm, message := classifyPubsub(f.Head)
		if message {
			return pending{}, false
		}
		if confirm != 0 {
			return s.confirmation(fam, confirm, f.Int)
		}
		if f.Type == '>' {
			return pending{}, false // invalidate and other pushes
		}
	}
	if s.q.len() == 0 || s.q.front().kind == kindLocal {
		s.p.log.Debug("unmatched reply from upstream", "type", string(f.Type))
		return pending{}, false
	}
	e := s.q.pop()
	if e.flags&flagSetName != 0 && len(s.names) > 0 {
		if !f.IsError() {
			s.name = s.names[0]
		}
		s.names = s.names[1:]
	}
	switch {
	case e.flags&flagMonitor != 0 && f.Type == '+':
		s.monitor = true
	case e.flags&flagReset != 0:
		s.monitor, s.resp3 = false, false
		s.subs = subCounts{}
	case e.cmd == command.Hello && f.Type == '%':
		s.resp3 = true
	case e.cmd == command.Hello && f.Type == '*':
		s.resp3 = false
	}
	return e, true
}

// confirmation handles a (p|s)(un)subscribe confirmation carrying the
// client's new subscription count.
func (s *session) confirmation(fam uint8, unsub int, count int64) (pending, bool) {
	s.subs.set(fam, count)
	if s.q.len() == 0 {
		return pending{}, false
	}
	e := s.q.front()
	if e.kind != kindSub || e.subFamily != fam {
		return pending{}, false
	}
	if e.expect > 0 {
		e.expect--
		if e.expect > 0 {
			return pending{}, false
		}
	} else if unsub > 1 && s.subs.of(fam) > 0 {
		return pending{}, false // UNSUBSCRIBE with no names: one per channel until none is left
	}
	return s.q.pop(), true
}

// classifyPubsub looks at the first element of an array or push. confirm is
// 1 for a subscribe confirmation, 2 for an unsubscribe one (0: neither);
// message is true for a delivered message.
func classifyPubsub(head []byte) (fam uint8, confirm int, message bool) {
	switch {
	case eqFold(head, "message"), eqFold(head, "pmessage"), eqFold(head, "smessage"):
		return 0, 0, true
	case eqFold(head, "subscribe"):
		return famChan, 1, false
	case eqFold(head, "unsubscribe"):
		return famChan, 2, false
	case eqFold(head, "psubscribe"):
		return famPat, 1, false
	case eqFold(head, "punsubscribe"):
		return famPat, 2, false
	case eqFold(head, "ssubscribe"):
		return famShard, 1, false
	case eqFold(head, "sunsubscribe"):
		return famShard, 2, false
	}
	return 0, 0, false
}

// writeClient sends b to the client (or, after the client half-closed, to
// the lingering writer).
func (s *session) writeClient(b []byte) {
	if len(b) == 0 {
		return
	}
	if s.linger != nil {
		s.linger.write(b)
	} else if !s.closed {
		_, _ = s.client.Write(b)
		// A client that does not read: its replies pile up in gnet's
		// outbound buffer, which has no bound of its own.
		if lim := s.p.cfg.ClientOutputLimit; lim > 0 {
			s.checkOutput(lim, len(b))
		}
	}
	if m := s.l.m; m != nil {
		m.AddClientBytes(0, len(b))
	}
}

// closeClient closes the client connection once the replies queued for it
// are written (closeFlushed). Its callers owe it nothing more, so its
// upstream goes at once and anything else for it (a push, a MONITOR line)
// is dropped, as Redis drops output to a client it will close after its
// replies (CLIENT_CLOSE_AFTER_REPLY).
func (s *session) closeClient() { s.closeBoth() }

// checkOutput applies the client output limit (outputGuard) after added
// bytes were written to the client.
func (s *session) checkOutput(lim, added int) {
	if s.out.exceeded(s.client.OutboundBuffered(), 0, added, lim) {
		s.evict("output_limit")
	}
}

// evict disconnects a client that crossed a memory limit (reason is a
// bounded label: output_limit, query_limit).
func (s *session) evict(reason string) {
	if s.closed {
		return
	}
	if m := s.p.cfg.Metrics; m != nil {
		m.ClientEvicted(reason)
	}
	s.p.log.Warn("client evicted", "reason", reason, "client", s.client.RemoteAddr().String())
	if s.linger == nil {
		s.l.closeNow(s.client)
	}
	s.closeBoth()
}

func (s *session) closeBoth() {
	if s.linger != nil {
		// The client's OnClose has run already: settle its accounts here.
		s.linger.close()
		s.linger = nil
		s.l.inflight.Add(-int64(s.q.len()))
		s.q = fifo{}
	} else if !s.closed {
		s.l.closeFlushed(s.client)
	}
	s.closed = true
	s.shutdownUpstream()
}

// failPending answers every pending request with reply (an upstream error)
// in order, keeping a queued protocol error in its place, then closes the
// client.
func (s *session) failPending(reply []byte) {
	n := s.q.len()
	for s.q.len() > 0 {
		e := s.q.pop()
		if e.kind == kindLocal {
			s.writeClient(s.localErr)
			continue
		}
		if e.kind == kindDiscard || e.kind == kindBarrier {
			continue
		}
		s.writeClient(reply)
		if m := s.l.m; m != nil {
			m.Lock()
			m.CountLocked(int(e.cmd), true)
			m.Unlock()
		}
	}
	s.l.inflight.Add(-int64(n))
	s.closeClient()
}

// dialFailed runs on the loop when the upstream could not be reached.
func (s *session) dialFailed(err error) {
	if m := s.p.cfg.Metrics; m != nil {
		m.UpstreamDialFailed()
	}
	s.p.log.Warn("upstream unreachable", "upstream", s.upAddr, "err", err)
	s.upFailed = upstreamError(s.upAddr, "unreachable", err)
	s.outq = nil
	if s.closed {
		return
	}
	if s.q.len() > 0 {
		s.failPending(s.upFailed)
	}
	// Otherwise the next request gets the error (clientTraffic), so that
	// a client that has not sent anything yet still sees why.
}

// upstreamClosed runs when the engine side closed: by the engine (QUIT,
// CLIENT KILL, a crash) or by us.
func (s *session) upstreamClosed(err error) {
	if m := s.p.cfg.Metrics; m != nil && s.up != nil {
		m.UpstreamClosed() // only the ones upstreamOpened counted
	}
	s.up = nil
	if s.closed && s.linger == nil {
		return
	}
	if s.closeAfter || s.raw || s.engineProtoErr {
		s.closeClient()
		return
	}
	if s.rf.InFrame() {
		// A reply was cut in two and its first part already relayed: no
		// error reply can follow it on the same stream.
		s.closeBoth()
		return
	}
	if s.q.len() > 0 && !s.p.closing.Load() {
		if m := s.p.cfg.Metrics; m != nil {
			m.UpstreamLost()
		}
		s.p.log.Warn("upstream lost with requests pending", "upstream", s.upAddr, "pending", s.q.len())
	}
	s.failPending(s.p.lostUpstream(s.upAddr, err))
}

// clientClosed runs when the client connection is gone. Its upstream is
// closed too, so that a blocked command (BLPOP) cannot take an element for
// a client that left, and no late reply can reach anybody else. One
// exception: a client that half-closed (shutdown(SHUT_WR), as `nc -N` or a
// script piping into redis-cli does) after sending non-blocking requests
// still gets their replies, as it would from Redis: gnet closes the socket
// on EOF, so the proxy keeps a duplicate of the descriptor and writes the
// remaining replies through it before closing.
func (s *session) clientClosed(c gnet.Conn, err error) {
	if m := s.p.cfg.Metrics; m != nil {
		m.ClientClosed()
	}
	s.p.clients.Add(-1)
	if s.closed {
		s.l.inflight.Add(-int64(s.q.len()))
		s.q = fifo{}
		return
	}
	if s.holding {
		// Half-closed (or gone) while a barrier was awaited: what it
		// sent still runs, all of it.
		s.holding, s.noHold = false, true
		s.clientData(nil)
	}
	if errors.Is(err, io.EOF) && s.q.len() > 0 && s.upFailed == nil && !s.blockedAtHead() && !s.p.draining.Load() {
		if fd, derr := unix.Dup(c.Fd()); derr == nil {
			s.linger = newLinger(s.p, fd, s.p.cfg.ClientOutputLimit)
			s.stopRead = true
			// Bound the wait: a reply that never comes must not keep the
			// descriptor (and the upstream) forever.
			el := c.EventLoop()
			time.AfterFunc(lingerTimeout, func() {
				_ = el.Execute(context.Background(), gnet.RunnableFunc(func(context.Context) error {
					if s.linger != nil {
						s.closeBoth()
					}
					return nil
				}))
			})
			return
		}
	}
	s.closed = true
	s.l.inflight.Add(-int64(s.q.len()))
	s.q = fifo{}
	s.shutdownUpstream()
}

// lingerTimeout bounds how long a half-closed client's replies are waited
// for.
const lingerTimeout = 60 * time.Second

// shutdownUpstream closes the upstream connection. The FIN is sent at once
// (shutdown(2)), not at gnet's next loop iteration, so that the engine frees
// the client's blocked command (BLPOP) before anything else can reach it.
func (s *session) shutdownUpstream() {
	if s.up != nil {
		_ = unix.Shutdown(s.up.Fd(), unix.SHUT_RDWR)
		_ = s.up.Close()
	}
}

// blockedAtHead reports whether the oldest pending request may block in the
// engine (or turns the connection into a feed): Redis would be stuck on it
// when it reads the client's EOF, and would free the client then.
func (s *session) blockedAtHead() bool {
	if s.q.len() == 0 {
		return s.monitor || s.subscribed() || s.raw
	}
	// Pub/sub confirmations and replies in a subscribed or MONITOR
	// context come at once: only a request that may block holds the
	// connection.
	e := s.q.front()
	return e.flags&(flagBlocking|flagMonitor|flagSync) != 0 || s.raw
}

// toUpstream forwards raw bytes (replication mode).
func (s *session) toUpstream(b []byte) {
	if s.up != nil {
		_, _ = s.up.Write(b)
	} else {
		s.outq = append(s.outq, b...)
	}
}

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

// barrierEcho follows a RESET whose reply CLIENT REPLY SKIP drops, so that
// the proxy knows when it has run (see holding). Its
// reply, a bulk string (or an error if ACLs deny ECHO), is dropped; pub/sub
// messages, pushes and MONITOR lines, which may come before it, are never
// bulk strings or errors.
var barrierEcho = []byte("*2\r\n$4\r\nECHO\r\n$9\r\nrespmeter\r\n")

// pushBarrier queues and sends barrierEcho; flags (flagReset) take effect
// when its reply comes.
func (s *session) pushBarrier(flags uint8) {
	s.q.push(pending{kind: kindBarrier, flags: flags})
	s.l.inflight.Add(1)
	s.toUpstream(barrierEcho)
}

// releaseHold runs once the barrier after a RESET under CLIENT REPLY SKIP
// is answered: the input held meanwhile goes on.
func (s *session) releaseHold() {
	s.holding = false
	if len(s.partial) > 0 {
		s.clientData(nil)
	}
}
