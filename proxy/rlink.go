package proxy

import (
	"bytes"
	"context"
	"time"

	"github.com/panjf2000/gnet/v2"
	"golang.org/x/sys/unix"

	"github.com/respmeter/respmeter/proxy/resp"
	"github.com/respmeter/respmeter/routing"
)

// rlink is a routed session's connection to one shard. Its FIFO holds, for
// every request written to it and not yet answered, the entry and part the
// reply belongs to (a nil entry: a reply to drop, such as the replies to
// replayed AUTH/HELLO or to the ASKING sent before an ASK retry).
type rlink struct {
	s      *rsession
	idx    int    // topology shard index; -1 for a node outside the map
	addr   string // host:port
	mshard int    // metrics shard index; -1 when not measuring
	c      gnet.Conn
	rf     *resp.ReplyFramer
	q      ring[rref]
	wb     []byte // requests to write at the end of the batch (or once connected)
	wn     int    // requests in wb
	cur    []byte // the reply being received, when it spans reads
	// lastReply is when the previous reply completed (service of a
	// pipelined request starts there).
	lastReply int64
	touched   bool
	dead      bool
}

type rref struct {
	e    *rentry
	part int32
}

// queue appends req (copied) to the link's write buffer, answered by part
// of e.
func (ln *rlink) queue(e *rentry, part int, req []byte) {
	ln.wb = append(ln.wb, req...)
	ln.wn++
	ln.q.push(rref{e: e, part: int32(part)})
	if e != nil {
		e.ps[part].link = ln
	}
	if !ln.touched {
		ln.touched = true
		ln.s.touched = append(ln.s.touched, ln)
	}
}

// write sends the buffered requests, stamping their t_sent with t (read
// before the write: see session.clientTraffic). While the connection is
// being dialed they wait.
func (ln *rlink) write(t int64) {
	ln.touched = false
	if ln.c == nil || len(ln.wb) == 0 {
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
		p.svcFrom = max(t, ln.lastReply)
		if r.e.tSent == 0 {
			r.e.tSent = t
		}
	}
	_, _ = ln.c.Write(ln.wb)
	p := ln.s.p
	if m := p.cfg.Metrics; m != nil {
		m.AddUpstreamBytes(0, len(ln.wb))
		if lm := ln.s.l.m; lm != nil && ln.mshard >= 0 {
			lm.Lock()
			lm.ShardBatchLocked(ln.mshard, ln.wn)
			lm.Unlock()
		}
	}
	if cap(ln.wb) > 1<<20 {
		ln.wb = nil
	} else {
		ln.wb = ln.wb[:0]
	}
	ln.wn = 0
}

// opened runs when the dial completed.
func (ln *rlink) opened(c gnet.Conn) gnet.Action {
	if ln.s.closed || ln.dead {
		return gnet.Close
	}
	ln.c = c
	if m := ln.s.p.cfg.Metrics; m != nil {
		m.UpstreamOpened()
	}
	var t int64
	if ln.s.l.m != nil {
		t = ln.s.p.now()
	}
	ln.write(t)
	return gnet.None
}

// traffic frames the shard's replies and hands each to its request.
func (ln *rlink) traffic(c gnet.Conn) {
	data, _ := c.Next(-1)
	s := ln.s
	if s.closed || ln.dead {
		return
	}
	if m := s.p.cfg.Metrics; m != nil {
		m.AddUpstreamBytes(len(data), 0)
	}
	now := s.p.now()
	for off := 0; off < len(data); {
		n, fin, err := ln.rf.Feed(data[off:])
		chunk := data[off : off+n]
		off += n
		if err != nil {
			s.p.log.Warn("bad reply from upstream; closing", "upstream", ln.addr, "err", err)
			ln.fail(upstreamError(ln.addr, "sent a bad reply", nil), true)
			_ = c.Close()
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
	}
	s.flush()
}

// onReply matches one complete reply with the oldest request of the link.
func (ln *rlink) onReply(frame []byte, f *resp.Frame, now int64) {
	s := ln.s
	if f.Type == '>' {
		// A RESP3 push (client tracking): out of band, passed on as is.
		s.wbuf = append(s.wbuf, frame...)
		return
	}
	if ln.q.len() == 0 {
		s.p.log.Debug("unmatched reply from upstream", "upstream", ln.addr, "type", string(f.Type))
		return
	}
	r := ln.q.pop()
	if r.e == nil {
		return // a replayed state command's reply, or ASKING's +OK
	}
	ln.lastReply = now
	e := r.e
	if f.Type == '-' && e.flags&eInTx == 0 && ln.redirect(e, int(r.part), frame, now) {
		return
	}
	s.complete(e, int(r.part), frame, now)
}

// redirect follows a -MOVED or -ASK reply (Redis Cluster specification,
// "Redirection and resharding"): MOVED updates the shard map and re-sends
// the request to the new owner; ASK sends ASKING and the request to the
// target, once, leaving the map alone. It reports false when frame is not a
// redirect, the request was not kept, or it was redirected too often:
// then the client gets the engine's reply.
func (ln *rlink) redirect(e *rentry, part int, frame []byte, now int64) bool {
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
	s := ln.s
	router := s.p.router
	if m := s.p.cfg.Metrics; m != nil {
		m.Redirect(rd.Ask)
	}
	p.hops++
	if p.redirAt == 0 {
		p.redirAt = now
	}
	if !rd.Ask {
		router.moved(rd.Slot, rd.Addr)
	}
	to := s.linkAddr(rd.Addr)
	if rd.Ask {
		to.queue(nil, 0, askingReq)
	}
	to.queue(e, part, p.req)
	return true
}

// fail answers every request waiting on the link with reply, and forgets
// the link. With lost (the connection broke with requests in flight) the
// client is closed once it has its replies: what the engine did with them
// is unknown.
func (ln *rlink) fail(reply []byte, lost bool) {
	if ln.dead {
		return
	}
	ln.dead = true
	s := ln.s
	s.dropLink(ln)
	s.p.router.requestRefresh()
	now := s.p.now()
	pending := 0
	for ln.q.len() > 0 {
		r := ln.q.pop()
		if r.e == nil || s.closed {
			continue
		}
		pending++
		s.complete(r.e, int(r.part), reply, now)
	}
	if lost && pending > 0 {
		if m := s.p.cfg.Metrics; m != nil {
			m.UpstreamLost()
		}
		s.p.log.Warn("upstream lost with requests pending", "upstream", ln.addr, "pending", pending)
		s.closeAfter, s.stopRead = true, true
	}
	s.flush()
}

// closed runs when the shard connection closed.
func (ln *rlink) closed(err error) {
	if m := ln.s.p.cfg.Metrics; m != nil && ln.c != nil {
		m.UpstreamClosed()
	}
	if ln.s.closed || ln.dead {
		return
	}
	if ln.rf.InFrame() {
		// Part of a reply is lost: nothing sensible can follow.
		ln.dead = true
		ln.s.evictQuiet()
		return
	}
	ln.fail(upstreamError(ln.addr, "connection lost", err), true)
}

// dialFailed runs on the loop when the shard could not be reached.
func (ln *rlink) dialFailed(err error) {
	if m := ln.s.p.cfg.Metrics; m != nil {
		m.UpstreamDialFailed()
	}
	if ln.s.closed || ln.dead {
		return
	}
	ln.s.p.log.Warn("upstream unreachable", "upstream", ln.addr, "err", err)
	ln.fail(upstreamError(ln.addr, "unreachable", err), false)
}

// shutdown closes the connection at once (see session.shutdownUpstream).
func (ln *rlink) shutdown() {
	ln.dead = true
	if ln.c != nil {
		_ = unix.Shutdown(ln.c.Fd(), unix.SHUT_RDWR)
		_ = ln.c.Close()
	}
}

// evictQuiet closes the client and its shard connections without a reply
// (a reply was cut in two and part of it may have been relayed already).
func (s *rsession) evictQuiet() {
	if s.closed {
		return
	}
	_ = s.client.Close()
	s.shutdown()
}

// dialLink connects a shard link off the loop and enrolls it on el.
func (p *Proxy) dialLink(ln *rlink, el gnet.EventLoop) {
	fail := func(err error) {
		_ = el.Execute(context.Background(), gnet.RunnableFunc(func(context.Context) error {
			ln.dialFailed(err)
			return nil
		}))
	}
	conn, err := p.dialer.Dial("tcp", ln.addr)
	if err != nil {
		fail(err)
		return
	}
	ch, err := el.Enroll(gnet.NewContext(context.Background(), ln), conn)
	if err != nil {
		_ = conn.Close()
		fail(err)
		return
	}
	if r := <-ch; r.Err != nil {
		fail(r.Err)
	}
}

var _ = time.Second
