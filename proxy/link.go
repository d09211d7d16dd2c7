package proxy

import (
	"bytes"
	"context"
	"errors"
	"io"
	"slices"
	"time"

	"github.com/panjf2000/gnet/v2"
	"golang.org/x/sys/unix"

	"github.com/respmeter/respmeter/internal/resp"
	"github.com/respmeter/respmeter/metrics"
	"github.com/respmeter/respmeter/routing"
	"github.com/respmeter/respmeter/routing/command"
)

// link is a connection to one engine (a shard): a client's own, or one of
// its loop's shared connections. Its FIFO holds, for every request written
// to it and not yet answered, the request and part the reply belongs to (a nil entry: a reply to drop, such as the replies to
// replayed AUTH/HELLO or to the ASKING sent before an ASK retry).
type link struct {
	p      *Proxy
	l      *loop
	owner  *client // nil for a loop's shared link (Config.UpstreamMode "shared")
	idx    int     // topology shard index; -1 for a node outside the map
	resp3  bool    // a shared link speaking RESP3 (HELLO 3 sent first)
	addr   string  // host:port
	mshard int     // metrics shard index; -1 when not measuring
	c      gnet.Conn
	tio    *tlsIO // the record layer under --upstream-tls; nil: plaintext
	// tlsRead: the engine's records gave plaintext; tlsErr: the record
	// layer failed, the cause the requests on the connection get.
	tlsRead bool
	tlsErr  error
	rf      *resp.ReplyFramer
	q       ring[linkRef]
	wb      []byte // requests to write at the end of the batch (or once connected)
	wn      int    // requests in wb
	cur     []byte // the reply being received, when it spans reads
	// lastReply is when the previous reply completed (service of a
	// pipelined request starts there).
	lastReply int64
	touched   bool
	stream    *client // the client the reply being received streams to
	// dropping: the reply being received answers a client that left (a
	// shared link keeps receiving its replies): framed, not kept.
	dropping       bool
	dead           bool
	engineProtoErr bool    // the last reply was the engine's protocol error
	protoErrBy     *client // the client whose request it answered
	// Pub/sub and MONITOR on a private link (see pubsub.go): the engine's
	// subscription counts from its latest confirmations (channels,
	// patterns, shard channels), whether MONITOR made it a feed, and the
	// confirmations collected for the request at the head.
	subs    subCounts
	monitor bool
	subAcc  []byte
	// lastSeq is the seq of the owner's request this link answered last
	// (see client.oob).
	lastSeq uint64
	// A shared link's progress is when (p.now) it last got reply bytes or
	// requests with none in flight; stalled: taken out of use (loop.checkStalls),
	// closed once drained.
	progress int64
	stalled  bool
	// seen is when (p.now) the loop's timeout check first saw requests
	// pending on the link since it last had none (checkUpstreams); 0: not yet.
	seen int64
	// pre is how many leading bytes of the owner's next request went to
	// the engine before the request was complete (client.forwardPartial):
	// queue trims them off.
	pre int
	// raw: a SYNC/PSYNC was answered; the link relays the replication
	// stream to its owner unframed (see onData).
	raw bool
	// gate counts the replayed state commands (replayState) not answered
	// yet; while it is > 0 only the first gateBytes of wb (the replay) are
	// written, the owner's requests after them wait (write).
	gate      int
	gateBytes int
}

type linkRef struct {
	e    *request
	part int32
	// replay is 1 + the state slot (client.states) of a replayed state
	// command, whose reply is checked (replayed); 0 for other requests.
	replay int8
}

// queue appends req (copied) to the link's write buffer, answered by part
// of e.
func (ln *link) queue(e *request, part int, req []byte) {
	req, ln.pre = req[ln.pre:], 0
	ln.wb = append(ln.wb, req...)
	ln.wn++
	ln.q.push(linkRef{e: e, part: int32(part)})
	if e != nil {
		e.ps[part].link = ln
	}
	if !ln.touched {
		ln.touched = true
		ln.l.touched = append(ln.l.touched, ln)
	}
}

// queueDrop appends req (copied) to the link's write buffer; its reply is
// dropped (a held request the proxy answered already: MULTI, ASKING; the
// ASKING before an ASK retry; the HELLO 3 of a new RESP3 shared
// connection).
func (ln *link) queueDrop(req []byte) { ln.queueRef(req, linkRef{}) }

// queueRef appends req (copied) to the link's write buffer, answered by r,
// a reference to no request.
func (ln *link) queueRef(req []byte, r linkRef) {
	req, ln.pre = req[ln.pre:], 0
	ln.wb = append(ln.wb, req...)
	ln.wn++
	ln.q.push(r)
	if !ln.touched {
		ln.touched = true
		ln.l.touched = append(ln.l.touched, ln)
	}
}

// replayState queues the connection state of s (client.states: AUTH,
// HELLO, SELECT, ...) on its new link, ahead of everything, and gates the
// link: the requests queued after it are written only once the engine
// has answered all of it (replayed), as a cluster client awaits AUTH on a
// new node connection before it sends commands there. So a request never
// runs under someone else's identity when the replayed AUTH is refused
// (an ACL user deleted since): the client is closed instead.
func (ln *link) replayState(s *client) {
	for k, st := range s.states() {
		ln.queueRef(st, linkRef{replay: int8(k + 1)})
		ln.gate++
	}
	ln.gateBytes = len(ln.wb)
}

// stateRefusals are the error codes by which an engine refuses a replayed
// AUTH/HELLO (WRONGPASS: the user is gone or its password changed) or the
// right to set the state (NOPERM, NOAUTH).
var stateRefusals = [][]byte{[]byte("WRONGPASS"), []byte("NOPERM"), []byte("NOAUTH")}

// replayed handles the reply (of type t, first line head) to a replayed
// state command of r on the owner's link. A refusal of the replayed AUTH,
// HELLO, SELECT or READONLY/READWRITE (who the client is, which db it
// reads) that the client's own command did not get (client.stateFailed)
// closes the client at once, with nothing more from this link and its
// held requests never sent: the engine would not serve it as the client
// it was. The other replayed setters' errors are dropped, as their own
// were (a library's CLIENT SETINFO that a restricted user may not send).
// Once every replayed command is answered, the held requests are written.
func (ln *link) replayed(r linkRef, t byte, head []byte, now int64) {
	s := ln.owner
	k := int(r.replay) - 1
	if t == resp.TypeError && k <= stReadMode && !s.stateFailed[k] &&
		slices.ContainsFunc(stateRefusals, func(code []byte) bool { return bytes.HasPrefix(head, code) }) {
		ln.p.log.Debug("replayed connection state refused; closing the client", "upstream", ln.addr, "reply", string(head[:min(len(head), 16)]))
		s.closing(csNow)
		s.markDirty()
		ln.fail(nil, false) // the owner is closing now: nothing of it is answered
		ln.shutdown()
		return
	}
	if ln.gate--; ln.gate == 0 {
		ln.write(now)
	}
}

// stateReply records whether the engine refused a client's own AUTH,
// HELLO, SELECT or READONLY/READWRITE (e answered by a reply of type t),
// for replayed.
func stateReply(e *request, t byte) {
	if e.flags&eInTx != 0 {
		return
	}
	if k := stateSlot(e.cmd, nil); k >= 0 {
		e.s.stateFailed[k] = resp.IsErrorType(t)
	}
}

// queueRaw appends b (copied) to the link's write buffer with no request
// of its own: the start of an incomplete request (client.forwardPartial),
// or a replication stream's bytes (client.raw).
func (ln *link) queueRaw(b []byte) {
	ln.wb = append(ln.wb, b...)
	if !ln.touched {
		ln.touched = true
		ln.l.touched = append(ln.l.touched, ln)
	}
}

// write sends the buffered requests, stamping their t_sent with t (read
// before the write: once the bytes are in the socket the engine may answer first). While the connection is
// being dialed they wait.
func (ln *link) write(t int64) {
	ln.touched = false
	if ln.c == nil || len(ln.wb) == 0 {
		return
	}
	if ln.gate > 0 {
		// Only the replayed state goes out, at once; the rest waits for
		// its replies (replayed).
		if n := ln.gateBytes; n > 0 {
			ln.send(ln.wb[:n])
			if m := ln.l.m; m != nil {
				m.AddUpstreamBytes(0, n)
			}
			ln.wb = append(ln.wb[:0], ln.wb[n:]...)
			ln.wn -= ln.gate
			ln.gateBytes = 0
		}
		return
	}
	first := ln.q.len() - ln.wn
	for i := max(first, 0); i < ln.q.len(); i++ {
		r := ln.q.at(i)
		if r.e == nil {
			continue
		}
		p := &r.e.ps[r.part]
		p.tSent, p.mshard = t, ln.mshard
		if p.tFirst == 0 {
			p.tFirst = t
		}
		if r.e.tSent == 0 {
			r.e.tSent = t
		}
	}
	if ln.q.len() == ln.wn {
		ln.seen = 0 // nothing was in flight: the timeout's wait starts at the next look
	}
	if ln.owner == nil {
		if ln.q.len() == ln.wn {
			ln.progress = ln.p.now() // nothing was in flight: the wait starts now
		}
		ln.l.watchStalls()
	}
	ln.send(ln.wb)
	if ln.wn > 0 && ln.p.cfg.UpstreamTimeout > 0 {
		ln.l.watchUpstreams()
	}
	if m := ln.l.m; m != nil {
		m.AddUpstreamBytes(0, len(ln.wb))
		if ln.mshard >= 0 && ln.wn > 0 {
			m.Lock()
			m.ShardBatchLocked(ln.mshard, ln.wn)
			m.Unlock()
		}
	}
	if cap(ln.wb) > 1<<20 {
		ln.wb = nil
	} else {
		ln.wb = ln.wb[:0]
	}
	ln.wn = 0
}

// send writes b to the engine, sealed in TLS records over --upstream-tls.
func (ln *link) send(b []byte) {
	if ln.tio != nil {
		b = ln.tio.encrypt(b)
	}
	_, _ = ln.c.Write(b)
}

// opened runs when the dial completed.
func (ln *link) opened(c gnet.Conn) gnet.Action {
	if ln.dead || ln.owner != nil && ln.owner.gone() {
		return gnet.Close
	}
	ln.c = c
	ln.p.router.markUp(ln.addr)
	if m := ln.p.cfg.Metrics; m != nil {
		m.UpstreamOpened()
	}
	var t int64
	if ln.l.m != nil {
		t = ln.p.now()
	}
	ln.write(t)
	return gnet.None
}

// traffic frames the shard's replies and hands each to its request.
func (ln *link) traffic(c gnet.Conn) {
	data, _ := c.Next(-1)
	ln.input(c, data)
}

// input handles bytes read from the engine, decrypted first over TLS. A
// failure of the record layer closes the connection, which fails its
// requests as a connection the engine cut does, the failure named in their
// error; its close_notify is followed by the end of the connection,
// handled then. An alert before any reply is the engine refusing the
// handshake after respmeter's side of it ended: over TLS 1.3 the server
// checks the client's certificate after the client's Finished (RFC 8446
// 4.4.2.4), so a missing or refused one shows only now. It is counted and
// logged as the handshake failure it is.
func (ln *link) input(c gnet.Conn, data []byte) {
	if ln.tio == nil {
		ln.onData(data)
		return
	}
	plain, err := ln.tio.read(c, data, &ln.l.tlsPlain)
	if len(plain) > 0 {
		ln.tlsRead = true
		ln.onData(plain)
	}
	if err != nil && !errors.Is(err, io.EOF) && ln.tlsErr == nil {
		ln.tlsErr = err
		if !ln.tlsRead {
			ln.p.handshakeFailed(metrics.TLSSideUpstream, ln.addr, err)
		} else {
			ln.p.log.Warn("TLS engine's records refused", "upstream", ln.addr, "err", err)
		}
		_ = c.Close()
	}
}

// drain reads, without blocking, what the engine sent before the
// connection failed (a reply and the reset may arrive together) and handles it as traffic.
func (ln *link) drain(c gnet.Conn) {
	var buf [16 << 10]byte
	for !ln.dead {
		n, err := unix.Read(c.Fd(), buf[:])
		if n <= 0 || err != nil {
			return
		}
		ln.input(c, buf[:n])
	}
}

// onData frames the shard's bytes. A reply whose request is next in line
// for its client, and that is not an error (a redirect must be seen
// whole), is streamed: its bytes go to the client as they arrive
// (cut-through), so a large reply is never held whole. Others are
// collected whole and handed to their request.
func (ln *link) onData(data []byte) {
	if ln.dead || ln.owner != nil && ln.owner.gone() {
		return
	}
	if m := ln.l.m; m != nil {
		m.AddUpstreamBytes(len(data), 0)
	}
	now := ln.p.now()
	ln.progress = now
	for off := 0; off < len(data); {
		if !ln.raw && !ln.rf.InFrame() && ln.stream == nil && len(ln.cur) == 0 && ln.q.len() > 0 {
			if r := ln.q.front(); r.e != nil && r.e.flags&eSync != 0 {
				// The reply to SYNC/PSYNC starts the replication stream
				// ("+FULLRESYNC ...", an RDB payload with no trailing
				// CRLF, then commands): the request is answered by its
				// first byte, and the rest is relayed as it comes.
				ln.q.pop()
				ln.raw = true
				r.e.ps[r.part].svcFrom = r.e.ps[r.part].tSent
				r.e.s.complete(r.e, int(r.part), nil, now, true)
			}
		}
		if ln.raw {
			if s := ln.owner; s != nil && !s.gone() {
				s.wbuf = append(s.wbuf, data[off:]...)
				s.markDirty()
			}
			break
		}
		if !ln.rf.InFrame() && ln.stream == nil && len(ln.cur) == 0 {
			ln.stream = ln.streamable(data[off])
			if ln.stream != nil {
				ln.stream.streaming = ln
				ln.stream.streamAt = len(ln.stream.wbuf)
			}
			ln.dropping = ln.stream == nil && ln.forGone(data[off])
		}
		n, fin, err := ln.rf.Feed(data[off:])
		chunk := data[off : off+n]
		off += n
		if err == nil && ln.dropping {
			if !fin {
				break
			}
			ln.dropping = false
			ln.q.pop()
			ln.lastReply = now
			continue
		}
		if err == nil && ln.stream != nil {
			s := ln.stream
			if r := ln.q.front(); r.e != nil {
				r.e.heat.Reply(chunk) // a streamed reply's sizes, piece by piece
			}
			if !s.gone() {
				s.wbuf = append(s.wbuf, chunk...)
				s.markDirty()
			}
			if !fin {
				break
			}
			ln.stream = nil
			s.endStream()
			r := ln.q.pop()
			prev := ln.lastReply
			ln.lastReply = now
			ln.engineProtoErr = false
			if !s.gone() {
				r.e.ps[r.part].svcFrom = max(r.e.ps[r.part].tSent, prev)
				s.complete(r.e, int(r.part), nil, now, true)
			}
			continue
		}
		if err != nil {
			ln.p.log.Warn("bad reply from upstream; closing", "upstream", ln.addr, "err", err)
			ln.fail(upstreamError(ln.addr, "sent a bad reply", nil), true)
			if ln.c != nil {
				_ = ln.c.Close()
			}
			break
		}
		if !fin {
			ln.cur = append(ln.cur, chunk...)
			break
		}
		frame := chunk
		if len(ln.cur) > 0 {
			ln.cur = append(ln.cur, chunk...)
			frame = ln.cur
		}
		ln.onReply(frame, ln.rf.Frame(), now)
		if cap(ln.cur) > 1<<20 {
			ln.cur = nil
		} else {
			ln.cur = ln.cur[:0]
		}
		if ln.dead {
			break // refused replayed state (replayed): nothing more is read
		}
	}
	if ln.stalled && ln.q.len() == 0 && !ln.rf.InFrame() {
		ln.shutdown() // drained: it is out of use
	}
	ln.l.flushAll()
}

// streamable returns the client to stream the reply starting with type
// byte t to, or nil: the reply must answer the request next in line for
// its client, alone (not one part of a fan-out), and not be an error or a
// push; and the link must not be a pub/sub or MONITOR feed, whose frames
// are seen whole (feed), nor the reply one that changes that (MONITOR,
// RESET) or one the facade rewrites (INFO and CLUSTER GETSLOTMIGRATIONS on
// a virtual node).
func (ln *link) streamable(t byte) *client {
	if resp.IsErrorType(t) || t == resp.TypePush || ln.q.len() == 0 || ln.monitor || ln.inSubMode() {
		return nil
	}
	r := ln.q.front()
	e := r.e
	if e == nil || e.s.gone() || e.agg != aggRelay || e.left != 1 || e.flags&(eExecAbort|eSilent|eNodeIDs) != 0 || e.hold != 0 ||
		e.s.q.len() == 0 || e.s.q.front() != e || e.cmd == command.Monitor || e.cmd == command.Reset ||
		e.cmd == command.InfoCmd && e.s.vnode != nil { // rewritten whole (facadeInfo)
		return nil
	}
	return e.s
}

// forGone reports whether the reply starting with type byte t answers a
// client that has left: it is then dropped as it arrives instead of being
// collected whole (a client evicted with many large replies in flight on a
// shared link would otherwise cost a copy of each). Errors are still
// collected (an engine protocol error must be seen), and pushes are not
// replies.
func (ln *link) forGone(t byte) bool {
	if resp.IsErrorType(t) || t == resp.TypePush || ln.q.len() == 0 {
		return false
	}
	e := ln.q.front().e
	return e != nil && e.s.gone()
}

// onReply matches one complete reply with the oldest request of the link.
func (ln *link) onReply(frame []byte, f *resp.Frame, now int64) {
	if ln.owner != nil && ln.feed(frame, f.Type, f.Head, f.Int, now) {
		return
	}
	if f.Type == resp.TypePush {
		return // a push on a shared link: nobody to give it to
	}
	if s := ln.owner; ln.q.len() == 0 && f.Type == resp.TypeError && s != nil && s.fixed() {
		// An error that answers nothing the client sent whole, on the
		// client's own connection to its one engine: the engine refused
		// the start of a request it got early (client.forwardPartial),
		// "-ERR Protocol error: ..." from the header alone, or refused the
		// connection itself ("-ERR max number of clients reached"). Its
		// close follows (see closed); the client gets both as a direct
		// client would.
		ln.engineProtoErr, ln.protoErrBy = true, s
		s.closing(csStopRead)
		s.oob(ln, frame)
		return
	}
	if ln.q.len() == 0 {
		ln.p.log.Debug("unmatched reply from upstream", "upstream", ln.addr, "type", string(f.Type))
		return
	}
	r := ln.q.pop()
	prev := ln.lastReply
	ln.lastReply = now
	if r.replay > 0 && ln.owner != nil {
		ln.replayed(r, f.Type, f.Head, now)
		return
	}
	if r.e != nil && r.part == 0 {
		stateReply(r.e, f.Type) // (a state command's other parts go to the other shards: broadcastState)
	}
	switch {
	case r.e != nil && r.e.cmd == command.Reset:
		ln.subs, ln.monitor = subCounts{}, false
	case r.e != nil && r.e.cmd == command.Monitor && f.Type == resp.TypeSimpleString:
		ln.monitor = true
	}
	if ln.owner == nil && f.Type == resp.TypeError && bytes.HasPrefix(f.Head, noauthReply[1:]) {
		ln.p.requestAuthCheck() // the engine's authentication changed under the shared connection
	}
	// The engine's "-ERR Protocol error: ..." is followed by its close: no
	// error replies of ours may follow it (see closed).
	ln.engineProtoErr = f.Type == resp.TypeError && bytes.HasPrefix(f.Head, engineProtoErr)
	if ln.engineProtoErr && r.e != nil {
		ln.protoErrBy = r.e.s
	}
	if r.e == nil || r.e.s.gone() {
		return // a replayed state command's reply, ASKING's +OK, or a client that left
	}
	e := r.e
	// Service starts when the request was sent or the previous reply on
	// this connection completed, whichever is later (a pipelined request
	// waits behind the ones before it).
	e.ps[r.part].svcFrom = max(e.ps[r.part].tSent, prev)
	if f.Type == resp.TypeError && e.flags&eInTx == 0 && (ln.redirect(e, int(r.part), frame, now) || ln.tryAgain(e, int(r.part), frame, now)) {
		return
	}
	if e.s.vnode != nil {
		switch {
		case f.Type == resp.TypeError:
			frame = e.s.facadeRedirect(frame, ln.addr) // a relayed MOVED/ASK names a virtual node
		case e.cmd == command.InfoCmd && !e.s.p.router.cluster:
			frame = e.s.facadeInfo(frame) // a standalone engine's INFO says cluster_enabled:1
		case e.flags&eNodeIDs != 0:
			frame = e.s.facadeNodeIDs(e.s.p.router.load(), frame) // the jobs name virtual nodes
		}
	}
	e.s.complete(e, int(r.part), frame, now, false)
}

// redirect follows a -MOVED or -ASK reply (Redis Cluster specification,
// "Redirection and resharding"): MOVED updates the shard map and re-sends
// the request to the new owner; ASK sends ASKING and the request to the
// target, once, leaving the map alone. It reports false when frame is not a
// redirect, the request was not kept, or it was redirected too often:
// then the client gets the engine's reply.
func (ln *link) redirect(e *request, part int, frame []byte, now int64) bool {
	line := frame[1 : len(frame)-2]
	if !bytes.HasPrefix(line, redirectMoved) && !bytes.HasPrefix(line, redirectAsk) {
		return false
	}
	p := &e.ps[part]
	if len(p.req) == 0 || p.hops >= maxRedirects {
		return false
	}
	rd, ok := routing.ParseRedirect(line, ln.addr)
	if !ok {
		return false
	}
	s := e.s
	router := s.p.router
	if m := s.p.cfg.Metrics; m != nil {
		m.Redirect(rd.Ask)
	}
	ln.hop(e, p, now)
	p.hops++
	if p.redirAt == 0 {
		p.redirAt = now
	}
	if !rd.Ask {
		router.moved(rd.Slot, rd.Addr)
	}
	p.asked = rd.Ask
	to := s.linkAddr(rd.Addr)
	if rd.Ask {
		to.queueDrop(askingReq)
	}
	to.queue(e, part, p.req)
	return true
}

// hop records, on ln's shard, part p of e answered at now with a redirect
// or -TRYAGAIN that the proxy follows: a sub-request of its own from p's
// last send, not an error (the client never sees the reply). A write held
// by a CLUSTER MIGRATESLOTS cut-over and then answered MOVED spends the
// pause here, in the source shard's figures; the shard that finally
// answers records the part from its own send on (client.complete).
func (ln *link) hop(e *request, p *part, now int64) {
	m := ln.l.m
	if m == nil || p.mshard < 0 || p.tSent == 0 {
		return
	}
	m.Lock()
	if e.s.p.shape.perShard() {
		m.ShardObserveLocked(p.mshard, time.Duration(now-p.tSent), time.Duration(now-p.tSent), time.Duration(now-p.svcFrom), false)
	} else {
		m.ShardCountLocked(p.mshard, false)
	}
	m.Unlock()
}

// -TRYAGAIN retries (Redis Cluster specification, "Multi-keys operations":
// during a slot's migration a multi-key command whose keys are split between
// the source and the target is refused with -TRYAGAIN, and cluster clients
// retry it after a back-off). A part is re-sent to the node that refused it
// after tryAgainWait, doubling up to tryAgainWaitMax, at most maxTryAgain
// times (about 1 s in all, within which a MIGRATE of the slot's remaining
// keys usually ends); then the engine's -TRYAGAIN is relayed. go-redis
// retries it with 8-512 ms back-offs, redis-py sleeps 50 ms.
const (
	maxTryAgain     = 8
	tryAgainWait    = 10 * time.Millisecond
	tryAgainWaitMax = 250 * time.Millisecond
)

// tryAgain schedules the re-send of part of e after a back-off when frame
// is -TRYAGAIN, and reports whether it did; false when frame is something
// else, the request was not kept (only under --cluster: p.req) or it was
// retried maxTryAgain times already: then the client gets the engine's
// reply. The retry waits on a timer of its own (a -TRYAGAIN is rare: no
// timer on the per-command path); meanwhile the part is on no link.
func (ln *link) tryAgain(e *request, part int, frame []byte, now int64) bool {
	if !bytes.HasPrefix(frame[1:], tryAgainErr) {
		return false
	}
	p := &e.ps[part]
	if len(p.req) == 0 || p.tries >= maxTryAgain {
		return false
	}
	ln.hop(e, p, now)
	wait := min(tryAgainWait<<p.tries, tryAgainWaitMax)
	p.tries++
	if p.redirAt == 0 {
		p.redirAt = now
	}
	if m := ln.p.cfg.Metrics; m != nil {
		m.TryAgain()
	}
	l, addr, seq := ln.l, ln.addr, e.seq
	retry := func() { l.retryPart(e, seq, part, addr) }
	if l.el == nil {
		retry()
		return true
	}
	time.AfterFunc(wait, func() {
		_ = l.el.Execute(context.Background(), gnet.RunnableFunc(func(context.Context) error {
			retry()
			return nil
		})) // an error: the engine is stopping, and closes the client
	})
	return true
}

// retryPart re-sends part of e (request number seq of its client) to addr,
// after ASKING when it went to an ASK target, unless the client left.
func (l *loop) retryPart(e *request, seq uint64, part int, addr string) {
	s := e.s
	if s == nil || s.gone() || e.seq != seq || part >= len(e.ps) {
		return
	}
	p := &e.ps[part]
	if l.p.closing.Load() {
		s.complete(e, part, s.upstreamReply(l.p.lostUpstream(addr, nil), addr), l.p.now(), false)
		l.flushAll()
		return
	}
	to := s.linkAddr(addr)
	if p.asked {
		to.queueDrop(askingReq)
	}
	to.queue(e, part, p.req)
	l.flushAll()
}

// fail answers every request waiting on the link with reply, and forgets
// the link. With lost, a client that had requests on it is closed once it
// has its replies, as a passthrough client is: what the engine did with
// them is unknown (or, unreachable, the client learns it at once).
func (ln *link) fail(reply []byte, lost bool) {
	if ln.dead {
		return
	}
	ln.dead = true
	if ln.owner != nil {
		ln.owner.dropLink(ln)
	} else {
		ln.l.dropShared(ln)
	}
	ln.p.router.requestRefresh()
	if s := ln.stream; s != nil && ln.q.len() > 0 {
		// Part of this reply went to the client already: no error reply
		// can follow it on the same stream.
		ln.stream = nil
		s.streaming = nil
		ln.q.pop()
		s.closing(csNow)
		s.markDirty()
	}
	now := ln.p.now()
	pending := 0
	for ln.q.len() > 0 {
		r := ln.q.pop()
		if r.e == nil || r.e.s.cs >= csNow {
			continue
		}
		pending++
		s := r.e.s
		s.complete(r.e, int(r.part), s.upstreamReply(reply, ln.addr), now, false)
		if lost {
			// What the engine did with the request is unknown: the
			// client is closed once it has its replies.
			s.closing(csAfterReplies)
		}
	}
	if s := ln.owner; lost && s != nil && !s.gone() && (ln.subs.any() || ln.monitor) {
		// Its subscriptions or MONITOR feed are gone with it: the client
		// is closed, as its own connection to the engine would be.
		s.closing(csAfterReplies)
		s.markDirty()
	}
	if lost && pending > 0 && ln.c != nil && !ln.p.closing.Load() {
		if m := ln.p.cfg.Metrics; m != nil {
			m.UpstreamLost()
		}
		ln.p.log.Warn("upstream lost with requests pending", "upstream", ln.addr, "pending", pending)
	}
	ln.l.flushAll()
}

// closed runs when the shard connection closed.
func (ln *link) closed(err error) {
	if ln.tlsErr != nil {
		err = ln.tlsErr
	}
	if m := ln.p.cfg.Metrics; m != nil && ln.c != nil {
		m.UpstreamClosed()
	}
	if ln.dead || ln.owner != nil && ln.owner.gone() {
		return
	}
	if s := ln.protoErrBy; ln.engineProtoErr && s != nil && !s.gone() {
		// The engine refused a request it could not parse and closed the
		// connection, as it would have closed the client's own: that
		// client gets what is ready and is closed the same way, with no
		// errors of ours after the engine's. (On a shared connection the
		// other clients' requests on it fail as on any lost connection.)
		s.closing(csNow)
		s.markDirty()
	}
	if s := ln.owner; s != nil && !s.gone() && ln.c != nil {
		if ln.redialable(s) {
			if m := ln.p.cfg.Metrics; m != nil && ln.q.len() > 0 && !ln.p.closing.Load() {
				m.UpstreamLost() // (fail counts it when lost)
			}
			// A connection the proxy holds for the client as a cluster
			// client holds one per node (slots, pinned, a facade node;
			// shape.redials) was closed by the engine (its idle timeout,
			// CLIENT KILL, ACL DELUSER, a restart): as a cluster client
			// does, the requests in flight on it fail, and the next
			// request for the shard dials again and replays the
			// client's state (replayState), which closes the client if
			// the engine now refuses it.
			ln.fail(ln.p.lostUpstream(ln.addr, err), false)
			return
		}
		// The engine closed a connection it served on this client's
		// behalf (CLIENT KILL, ACL DELUSER, its idle timeout, a crash):
		// the client is closed once its replies are written, as its own
		// connection would be, even with nothing in flight. (A dial that
		// failed never reached the engine: only the requests for it fail.)
		s.closing(csAfterReplies)
		s.markDirty()
	}
	if ln.owner == nil && ln.c != nil && !ln.p.closing.Load() {
		ln.l.closeRiders(ln)
	}
	if ln.rf.InFrame() && ln.q.len() > 0 && ln.q.front().e != nil {
		// Part of a reply is lost (it is held whole before it is relayed,
		// so the client has none of it): the request fails as the others.
		ln.p.log.Warn("upstream closed in the middle of a reply", "upstream", ln.addr)
	}
	ln.fail(ln.p.lostUpstream(ln.addr, err), true)
}

// redialable reports whether the engine's close of s's link leaves s
// usable, as the shape decides (shape.redials: a client routed by slot,
// --route pinned, a facade virtual node; not route none), unless the link
// carried state that a new connection cannot restore: subscriptions or a
// MONITOR feed, a replication stream, a transaction or WATCH bound to it,
// client-side caching (CLIENT TRACKING on: the invalidations of keys read
// through it would be lost), the start of an incomplete request
// (client.forwardPartial), or the engine's own protocol error.
func (ln *link) redialable(s *client) bool {
	if ln.subs.any() || ln.monitor || ln.raw || ln.engineProtoErr || ln.pre > 0 ||
		s.tx.on || s.tx.shard >= 0 && s.tx.shard == ln.idx {
		return false
	}
	if st := s.state[stTracking]; len(st) > 0 && bytes.Contains(bytes.ToLower(st), []byte("\r\non\r\n")) {
		return false
	}
	return s.p.shape.redials(s, ln.busy())
}

// busy reports whether requests of a client that is still open wait on
// the link.
func (ln *link) busy() bool {
	for i := range ln.q.len() {
		if r := ln.q.at(i); r.e != nil && r.e.s.cs < csNow {
			return true
		}
	}
	return false
}

// dialFailed runs on the loop when the shard could not be reached.
func (ln *link) dialFailed(err error) {
	if m := ln.p.cfg.Metrics; m != nil {
		m.UpstreamDialFailed()
	}
	if ln.dead || ln.owner != nil && ln.owner.gone() {
		return
	}
	ln.p.log.Warn("upstream unreachable", "upstream", ln.addr, "err", err)
	ln.p.router.markDown(ln.addr)
	// The requests never reached the engine: under slot routing they get
	// the error and the client keeps its connection and its other
	// shards; with one engine (no route, or pinned) the client is closed
	// once answered, as a direct client whose connection failed is
	// (shape.closesOnFailure).
	ln.fail(upstreamError(ln.addr, "unreachable", err), ln.p.shape.closesOnFailure())
}

// shutdown closes the connection at once (SHUT_RDWR: a blocked command is freed at once).
func (ln *link) shutdown() {
	ln.dead = true
	if ln.c != nil {
		_ = unix.Shutdown(ln.c.Fd(), unix.SHUT_RDWR)
		_ = ln.c.Close()
	}
}

// dialLink connects a shard link off the loop and enrolls it on el.
func (p *Proxy) dialLink(ln *link, el gnet.EventLoop) {
	p.dialOn(el, ln)
}

// engineProtoErr starts the error Redis sends before closing a connection
// on a request it cannot parse ("ERR Protocol error: ..."), as much of it as
// a Frame.Head holds.
var engineProtoErr = []byte("ERR Protocol err")
