package proxy

import (
	"context"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/panjf2000/gnet/v2"
	"golang.org/x/sys/unix"

	"github.com/respmeter/respmeter/internal/resp"
	"github.com/respmeter/respmeter/metrics"
	"github.com/respmeter/respmeter/routing"
	"github.com/respmeter/respmeter/routing/command"
)

// An event loop (gnet runs one goroutine per loop) owns the clients whose
// connections it serves, their links, the loop's shared links and its
// scratch: everything here runs on that loop's goroutine, without locks.

// loop is the per-event-loop state: only that loop's goroutine touches it,
// except the atomic counters that InFlight and Stop read.
type loop struct {
	el  gnet.EventLoop
	idx int           // order of creation: picks the loop's capture buffer
	m   *metrics.Loop // nil when not measuring
	// tlsPlain is the plaintext of the last TLS read on this loop
	// (tlsIO.decrypt): one buffer for all of the loop's TLS connections,
	// as gnet's read buffer is, not one per connection.
	tlsPlain []byte
	// inflight counts the requests of this loop's clients sent and not yet
	// answered. It is per loop, not one counter for the proxy, because an
	// atomic add on a cache line that the other loops also write moves the
	// line between cores twice per command (see InFlight for the sum).
	inflight metrics.InFlight
	// inN requests taken in at inAt (one client read: they share its
	// clock read) are not yet added to inflight: commitIn adds them with
	// one update instead of one per request (four atomic operations
	// each), before anything is subtracted and at the end of the read.
	inN, inAt int64
	args      [][]byte // scratch for request arguments
	// injRand draws fault injection's probabilities and delays (inject.go);
	// nil until a rule file is in use.
	injRand *rand.Rand
	// nextRTT is when (p.now) this loop next samples TCP_INFO.
	nextRTT int64
	// ups holds the loop's open upstream connections, so that Stop can
	// close them first when its drain timeout expires (their requests
	// then get the shutdown error before their clients are closed).
	ups map[gnet.Conn]struct{}
	// clients holds the loop's open client connections, and flushing
	// those waiting for their replies to be written before they are
	// closed (see closeFlushed); nflushing counts them for Stop.
	clients map[gnet.Conn]struct{}
	// flushing maps each such client to the bytes gnet held for it at the
	// last look; flushWait is the wait before the next look, flushTimer
	// whether one is pending.
	flushing  map[gnet.Conn]int
	nflushing atomic.Int64
	// lingerEnd: the clients of flushing that Stop has half-closed
	// (closeFlushed), each with when it is closed whatever it sends.
	lingerEnd     map[gnet.Conn]time.Time
	flushWait     time.Duration
	flushTimer    bool
	flushLooks    atomic.Int64 // checkFlushing passes (tests read it)
	runFlushCheck gnet.Runnable
	// Engine connection timeouts (watchUpstreams): upArmed, a checkUpstreams
	// is scheduled on upTimer (made once, re-armed).
	upArmed    bool
	upTimer    *time.Timer
	runUpCheck gnet.Runnable
	upLooks    atomic.Int64 // checkUpstreams passes (tests read it)
	// stallTimer: a checkStalls is scheduled (watchStalls).
	stallTimer    bool
	runStallCheck gnet.Runnable

	// Clients' scratch and pool (see client.go).
	p       *Proxy
	touched []*link // links with requests to write at the end of the callback
	// Shared links whose write waits for the end of the loop's pass
	// (flushAll, deferShared), the task that writes them, and whether it
	// is queued.
	deferred    []*link
	runDeferred gnet.Runnable
	flushQueued bool
	// later holds routed clients whose replies wait for the end of the
	// pass (deferClient); inTask is set while the task writes them.
	later   []*client
	inTask  bool
	dirty   []*client // clients with replies to write at the end of the callback
	resume  []*client // clients whose pause ended
	shared  []*link   // shared upstream connections (see loop.sharedLink)
	rpool   []*request
	call    routing.Call // the request being routed, classified once (client.route)
	slots   []uint16
	group   []int32
	mg      *merger   // reply merging scratch (merge.go)
	replies [][]byte  // scratch: a request's part replies
	pos     [][]int32 // scratch: an MGET's key positions per part
	num     []byte
	scratch []byte
	capKeys []byte // the key positions of a read's requests (capture.AppendKeyPos)
	sf      *resp.ReplyFramer
	hscan   resp.RequestScanner // splits held requests

	// inFlushAll is set while flushAll runs (it is entered again from a
	// write that fails: see flushAll).
	inFlushAll bool
	// last is the command name looked up last, as the client spelt it,
	// and its ID (see lookup).
	last struct {
		name [lastNameLen]byte
		n    int
		id   command.ID
	}

	// authWait: the shared clients paused until an auth check that started
	// after they connected has passed (awaitAuth, wakeAuth).
	authWait []*client
}

// lastNameLen is the longest command name lookup remembers.
const lastNameLen = 16

// lookup returns the command ID of name (routing.Resolver.Lookup: the
// engine's command table, case-insensitively). Pipelines and load
// generators send runs of the same command (redis-benchmark a test at a
// time, memtier a SET among ten GETs), so the loop remembers the last name
// as it was spelt and its ID: a repeat costs a byte compare instead of a
// case fold, a hash and a map probe. The resolver does not
// change once the proxy has started, so a remembered ID stays right.
func (l *loop) lookup(name []byte) command.ID {
	if len(name) == l.last.n && string(name) == string(l.last.name[:l.last.n]) {
		return l.last.id
	}
	id := l.p.resolver.Lookup(name)
	if len(name) <= lastNameLen {
		l.last.n = copy(l.last.name[:], name)
		l.last.id = id
	}
	return id
}

func (p *Proxy) loopFor(el gnet.EventLoop) *loop {
	p.mu.Lock()
	defer p.mu.Unlock()
	l := p.loops[el]
	if l == nil {
		l = &loop{p: p, el: el, idx: len(p.loops), args: make([][]byte, 0, 16), sf: resp.NewReplyFramer(), mg: newMerger(), num: make([]byte, 0, 24),
			ups: make(map[gnet.Conn]struct{}), clients: make(map[gnet.Conn]struct{})}
		l.inflight.SetClock(p.base)
		l.hscan.Dialect = p.dialect
		if el != nil && (p.shared || p.shape.spreads()) { // deferShared, deferClient
			l.runDeferred = gnet.RunnableFunc(func(context.Context) error {
				l.writeDeferred()
				return nil
			})
		}
		if m := p.cfg.Metrics; m != nil {
			l.m = m.Loop(len(p.loops) % m.Loops())
		}
		p.loops[el] = l
	}
	return l
}

// recycle returns e to the loop's pool, keeping its buffers unless large.
func (l *loop) recycle(e *request) {
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
	*e = request{ps: ps, out: out}
	l.rpool = append(l.rpool, e)
}

// takeIn counts a request taken in at now (t_in: in flight from there,
// Little's law's L); see commitIn.
func (l *loop) takeIn(now int64) {
	if l.inN > 0 && l.inAt != now {
		l.commitIn()
	}
	l.inN++
	l.inAt = now
}

// commitIn adds the requests counted by takeIn to inflight.
func (l *loop) commitIn() {
	if l.inN > 0 {
		l.inflight.AddAt(l.inN, l.inAt)
		l.inN = 0
	}
}

// flushAll ends a callback: it writes what the links have queued (one write
// per link), then each touched client's ready replies (one write per
// client). A shared link is written once per pass of the event loop
// instead (see deferShared).
//
// A write may close its connection before it returns: gnet's Conn.Write
// closes a connection whose write(2) fails (EPIPE, ECONNRESET: an engine
// killed between two writes) and calls OnClose inside the Write (gnet
// v2.9.7 conn.write), whose handlers (link.fail, a client's close) end
// with a flushAll of their own. That inner call returns at once: the
// outer one goes on and takes what the close queued (the failed requests'
// error replies, links and clients it touched) in further passes, so
// nothing waits for the next callback and no list is walked twice.
func (l *loop) flushAll() {
	if l.inFlushAll {
		return
	}
	l.inFlushAll = true
	for {
		l.flushPass()
		if len(l.touched) == 0 && len(l.dirty) == 0 && len(l.resume) == 0 {
			break
		}
	}
	l.inFlushAll = false
}

// flushPass is one pass of flushAll over the touched links, the dirty
// clients and the clients to resume.
func (l *loop) flushPass() {
	l.commitIn()
	if len(l.touched) > 0 {
		var t int64
		if l.m != nil {
			t = l.p.now()
		}
		deferring := l.deferShared()
		for i := 0; i < len(l.touched); i++ { // a failed write may touch more (link.fail)
			ln := l.touched[i]
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
	for i := 0; i < len(l.dirty); i++ { // flush may dirty more (a pause that ends)
		s := l.dirty[i]
		l.dirty[i] = nil
		if l.deferClient(s) {
			l.later = append(l.later, s) // stays dirty until written
			continue
		}
		s.set(cfDirty, false)
		s.flush()
	}
	l.dirty = l.dirty[:0]
	if len(l.later) > 0 && !l.flushQueued {
		l.flushQueued = true
		if l.el.Execute(context.Background(), l.runDeferred) != nil {
			l.writeDeferred() // the loop is shutting down
		}
	}
	// Paused clients last: resume processes held input, which flushes again.
	for len(l.resume) > 0 {
		s := l.resume[0]
		l.resume = append(l.resume[:0], l.resume[1:]...)
		s.set(cfResumeQueued, false)
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

// deferClient reports whether s's replies should wait for the end of the
// loop's pass: for a slot-routed client (--route slots, and the facade's
// plain endpoint) while its last request still waits for a reply. A
// pipeline split over three shards is answered in up to three pieces, each
// in its own callback; written as they come, they reach a client that
// refills its pipeline reply by reply (memtier_benchmark) in three small
// reads, and its next pipeline comes in three small pieces too: batches
// shrink until each command costs its own system calls. Written once per
// pass, the pieces that arrived together leave together, one pass later
// at most (see deferShared for when the task runs).
func (l *loop) deferClient(s *client) bool {
	if l.inTask || l.runDeferred == nil || s.fixed() || l.p.closing.Load() ||
		s.gone() || s.cs != csOpen || s.q.len() == 0 {
		return false
	}
	return !s.q.at(s.q.len() - 1).ready
}

// writeDeferred writes the shared links deferred by flushAll, then the
// replies of the clients it deferred (deferClient).
func (l *loop) writeDeferred() {
	l.flushQueued = false
	if len(l.later) > 0 {
		l.inTask = true
		for i, s := range l.later {
			l.later[i] = nil
			l.dirty = append(l.dirty, s) // still marked dirty
		}
		l.later = l.later[:0]
		defer func() { l.inTask = false }()
		defer l.flushAll()
	}
	if len(l.deferred) == 0 {
		return
	}
	var t int64
	if l.m != nil {
		t = l.p.now()
	}
	// A write that fails closes its link at once (see flushAll), whose
	// flushAll may defer more links: they are written here too.
	for i := 0; i < len(l.deferred); i++ {
		ln := l.deferred[i]
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
func (l *loop) sharedLink(shard int, resp3 bool, k int) *link {
	i := l.sharedIndex(shard, resp3, k)
	for i >= len(l.shared) {
		l.shared = append(l.shared, nil)
	}
	if ln := l.shared[i]; ln != nil {
		return ln
	}
	addr := l.p.router.load().t.Addrs[shard]
	ln := &link{p: l.p, l: l, idx: shard, addr: addr, rf: resp.NewReplyFramer(), mshard: -1, resp3: resp3}
	if m := l.p.cfg.Metrics; m != nil {
		ln.mshard = m.Shard(addr)
	}
	if resp3 {
		ln.queueDrop(hello3Req)
	}
	l.shared[i] = ln
	go l.p.dialLink(ln, l.el)
	return ln
}

// sharedIndex is where in l.shared the shared link of shard, protocol and
// connection k (client.slot) is.
func (l *loop) sharedIndex(shard int, resp3 bool, k int) int {
	n := l.p.cfg.UpstreamConns
	i := shard*2*n + k
	if resp3 {
		i += n
	}
	return i
}

// closeRiders closes, once answered, the clients riding the shared link
// ln, which the engine closed (CLIENT KILL, its idle timeout, a restart),
// that their shape would close had the same close reached a connection of
// their own with nothing in flight (shape.redials: route none's clients),
// as a shared link is idle only when all its riders are. The others are
// left to re-dial, as their private connections are (link.redialable);
// riders with requests in flight on ln are closed by ln.fail either way.
func (l *loop) closeRiders(ln *link) {
	i := slices.Index(l.shared, ln)
	if i < 0 {
		return
	}
	for c := range l.clients {
		s, _ := c.Context().(*client)
		if s == nil || s.gone() || !s.has(cfShared) || s.p.shape.redials(s, false) ||
			l.sharedIndex(s.home, s.has(cfResp3), s.slot) != i {
			continue
		}
		s.closing(csAfterReplies)
		s.markDirty()
	}
}

// dropShared forgets a failed shared link.
func (l *loop) dropShared(ln *link) {
	for i, x := range l.shared {
		if x == ln {
			l.shared[i] = nil
		}
	}
}

// partReplies returns the replies of e's parts in part order, in the
// loop's scratch slice (valid until the next call).
func (l *loop) partReplies(e *request) [][]byte {
	rs := l.replies[:0]
	for i := range e.ps {
		rs = append(rs, e.ps[i].reply)
	}
	l.replies = rs
	return rs
}

// holdInput appends data, read while a client waits (a pause, see
// client.needsPause), to buf, counting it as client bytes, and
// reports whether buf is now over the query limit.
func (l *loop) holdInput(buf, data []byte) ([]byte, bool) {
	if m := l.m; m != nil {
		m.AddClientBytes(len(data), 0)
	}
	buf = append(buf, data...)
	lim := l.p.cfg.ClientQueryLimit
	return buf, lim > 0 && len(buf) > lim
}

// sampleRTT records the kernel's RTT estimate (TCP_INFO) of a client's
// socket and of its home shard's engine connection (l.m locked).
func (l *loop) sampleRTT(s *client) {
	var up *link
	switch {
	case s.home < 0:
	case !s.has(cfShared) && s.home < len(s.links):
		up = s.links[s.home]
	case s.has(cfShared) && s.home < len(s.sticky):
		up = s.sticky[s.home]
	}
	for i, c := range [2]gnetFder{s.conn, nil} {
		if i == 1 {
			if up == nil || up.c == nil || up.dead {
				continue
			}
			c = up.c
		}
		ti, err := unix.GetsockoptTCPInfo(c.Fd(), unix.IPPROTO_TCP, unix.TCP_INFO)
		if err != nil || ti.Rtt == 0 {
			continue
		}
		l.m.TCPRTTLocked(i == 1, time.Duration(ti.Rtt)*time.Microsecond)
	}
}

type gnetFder interface{ Fd() int }

// Closing a client after its replies.
//
// gnet's Close writes what the socket takes at once of the bytes it still
// holds for the connection and drops the rest. Redis closes a client that
// sent QUIT, or one it answered with a protocol error, only once every reply
// queued for it has been written (CLIENT_CLOSE_AFTER_REPLY). So does the
// proxy: closeFlushed keeps the connection open, while its client ignores
// further input, until gnet holds nothing for it, then closes it. A client
// that never reads keeps its connection, as it would with Redis (what is
// queued for it stayed within the output limit, and nothing is added once
// it is closing); Stop bounds the wait by its drain timeout.
// Evictions close at once (their replies are dropped, as Redis drops an
// over-limit client's).

// A loop looks at the clients waiting for their replies to be written
// every flushPoll while one of them takes bytes; while none does, it waits
// twice as long each time, up to flushPollMax, so that a client that never
// reads costs a wake-up per flushPollMax, not one per flushPoll (gnet has no
// event for "the socket took bytes").
const (
	flushPoll    = 2 * time.Millisecond
	flushPollMax = 200 * time.Millisecond
)

// closeFlushed closes client connection c once gnet has written every byte
// queued for it. It runs on c's loop.
//
// When the proxy stops, a client may still be sending (a pipeline): a
// socket closed with unread input sends RST, and the peer's kernel then
// drops reply bytes it has not read yet, so the client saw its stream cut
// mid-reply (measured: 6 of 30 runs of TestStopWhileClientsPipeline under
// --route slots). So once Stop has begun (draining: a client that sends is
// closed after its replies) the close is a lingering one, as a web server's:
// the write side is shut (FIN after the last reply byte), input is still
// read and ignored, and the socket is closed when the client closes or
// stopLinger later.
func (l *loop) closeFlushed(c gnet.Conn) {
	if l.el == nil || (c.OutboundBuffered() == 0 && !l.p.draining.Load()) {
		_ = c.Close()
		return
	}
	if _, open := l.clients[c]; !open {
		return // closed already (closeNow)
	}
	if _, dup := l.flushing[c]; dup {
		return
	}
	if l.flushing == nil {
		l.flushing = make(map[gnet.Conn]int)
		l.runFlushCheck = gnet.RunnableFunc(func(context.Context) error {
			l.checkFlushing()
			return nil
		})
	}
	l.flushing[c] = c.OutboundBuffered()
	l.nflushing.Add(1)
	l.flushWait = flushPoll
	if !l.flushTimer {
		l.pollFlushing()
	}
}

// pollFlushing runs checkFlushing on the loop after l.flushWait. One timer
// at most is pending per loop (l.flushTimer).
func (l *loop) pollFlushing() {
	l.flushTimer = true
	time.AfterFunc(l.flushWait, func() {
		// An error means the engine is stopping: gnet closes every
		// connection itself.
		_ = l.el.Execute(context.Background(), l.runFlushCheck)
	})
}

// checkFlushing closes the waiting clients whose replies are all written,
// and polls again while some are left: soon if one of them took bytes
// since the last look, later otherwise.
func (l *loop) checkFlushing() {
	l.flushTimer = false
	l.flushLooks.Add(1)
	moved := false
	now := time.Now()
	for c, prev := range l.flushing {
		n := c.OutboundBuffered()
		if n == 0 && l.p.draining.Load() {
			end, half := l.lingerEnd[c]
			if !half {
				if l.lingerEnd == nil {
					l.lingerEnd = make(map[gnet.Conn]time.Time)
				}
				l.lingerEnd[c] = now.Add(stopLinger)
				_ = unix.Shutdown(c.Fd(), unix.SHUT_WR)
			}
			if now.Before(end) || !half {
				moved = true // look again soon
				continue
			}
		}
		if n == 0 {
			l.doneFlushing(c)
			_ = c.Close()
			continue
		}
		if n != prev {
			moved = true
			l.flushing[c] = n
		}
	}
	if len(l.flushing) == 0 {
		return
	}
	if moved {
		l.flushWait = flushPoll
	} else {
		l.flushWait = min(2*l.flushWait, flushPollMax)
	}
	l.pollFlushing()
}

// doneFlushing takes c off the clients waiting to be closed, if it is on it
// (it is closed, or closed by the client meanwhile).
func (l *loop) doneFlushing(c gnet.Conn) {
	if _, ok := l.flushing[c]; ok {
		delete(l.flushing, c)
		delete(l.lingerEnd, c)
		l.nflushing.Add(-1)
	}
}

// stopLinger bounds how long Stop keeps a half-closed client connection
// open for the client to read its last replies and close (closeFlushed).
const stopLinger = 100 * time.Millisecond

// clientGone forgets a closed client connection.
func (l *loop) clientGone(c gnet.Conn) {
	delete(l.clients, c)
	l.doneFlushing(c)
}

// closeNow closes client connection c at once, dropping the replies gnet
// still holds for it (an eviction); a closeFlushed that follows is a no-op.
func (l *loop) closeNow(c gnet.Conn) {
	_ = c.Close()
	l.clientGone(c)
}

// minFlushWait is how long Stop waits for queued replies to be written when
// the drain timeout is spent already.
const minFlushWait = 200 * time.Millisecond

// closeClients closes every client connection of every loop once its
// queued replies are written (closeFlushed), and waits up to d (or until ctx
// ends) for the last of them. Stop calls it when no request is in flight,
// so what is queued is all the clients will get.
func (p *Proxy) closeClients(ctx context.Context, d time.Duration) {
	var wg sync.WaitGroup
	p.mu.Lock()
	for _, l := range p.loops {
		if l.el == nil {
			continue
		}
		wg.Add(1)
		err := l.el.Execute(ctx, gnet.RunnableFunc(func(context.Context) error {
			defer wg.Done()
			for c := range l.clients {
				l.closeFlushed(c)
			}
			return nil
		}))
		if err != nil {
			wg.Done()
		}
	}
	p.mu.Unlock()
	end := time.Now().Add(d)
	queued := make(chan struct{})
	go func() {
		wg.Wait()
		close(queued)
	}()
	select {
	case <-queued:
	case <-time.After(d):
		return
	case <-ctx.Done():
		return
	}
	waitUntil(ctx, time.Until(end), func() bool { return p.flushing() == 0 })
}

// flushing returns the number of client connections, over all loops,
// waiting for their replies to be written before they are closed.
func (p *Proxy) flushing() int64 {
	return p.sumLoops(func(l *loop) int64 { return l.nflushing.Load() })
}

// Stalled shared connections.
//
// One client's request can hold a shared upstream connection for as long as
// the engine makes it wait: a script that loops (other clients get -BUSY
// from the engine at once, but not behind it on the same connection), a
// write under CLIENT PAUSE WRITE. A shared connection whose oldest request
// has had no reply byte for stallAfter is taken out of use: new requests go
// to a new shared connection, while the stalled one delivers what is queued
// on it and is closed once it has (respmeter_shared_stalls_total counts
// them). A client with requests in flight keeps using the connection they
// went to, so that its own effects keep their order. The commands that free
// an engine (SCRIPT KILL, FUNCTION KILL, SHUTDOWN, CLIENT UNPAUSE, ...) move
// their client to a private connection, which the engine answers at once.

const (
	stallAfter = 100 * time.Millisecond // no reply byte for this long: stalled
	stallPoll  = 50 * time.Millisecond  // how often a loop with shared requests in flight looks
)

// watchStalls makes sure the loop looks at its shared connections soon.
func (l *loop) watchStalls() {
	if l.stallTimer || l.el == nil || l.p.stallAfter <= 0 {
		return
	}
	if l.runStallCheck == nil {
		l.runStallCheck = gnet.RunnableFunc(func(context.Context) error {
			l.checkStalls()
			return nil
		})
	}
	l.stallTimer = true
	time.AfterFunc(stallPoll, func() {
		_ = l.el.Execute(context.Background(), l.runStallCheck) // an error: the engine is stopping
	})
}

// checkStalls takes stalled shared connections out of use, and looks again
// while some have requests in flight.
func (l *loop) checkStalls() {
	l.stallTimer = false
	now := l.p.now()
	busy := false
	for i, ln := range l.shared {
		if ln == nil || ln.dead || ln.q.len() == 0 {
			continue
		}
		busy = true
		if ln.c != nil && now-ln.progress > int64(l.p.stallAfter) {
			l.shared[i] = nil
			ln.stalled = true
			if m := l.p.cfg.Metrics; m != nil {
				m.SharedStall()
			}
			l.p.log.Debug("shared upstream connection stalled; new requests go to another", "upstream", ln.addr, "pending", ln.q.len())
		}
	}
	if busy {
		l.watchStalls()
	}
}

// Engines that stop answering (Config.UpstreamTimeout).
//
// An engine frozen without a reset (SIGSTOP, a paused VM, a partition that
// drops packets) leaves its connections open and silent: the kernel keeps
// accepting, nothing comes back, and the requests sent to it would wait
// for TCP's own timeouts (minutes). A cluster client times such a request
// out, drops the connection and re-reads the slot map; so does respmeter.
// Each event loop that wrote requests to an engine looks at its open
// engine connections every quarter of the timeout (one timer per loop,
// re-armed while some connection has requests pending): a connection with
// requests pending and no reply byte for longer than the timeout fails
// them, in order, with "-ERR upstream <host:port> not answering", and is
// closed. Under --cluster that asks for a topology refresh at once (as any
// lost connection does), so a failover is picked up without waiting for
// the refresh period. The wait is measured from the later of the last
// reply byte and the first look that saw the requests pending, so a
// timeout fires between UpstreamTimeout and 1.5 times it after the engine
// went silent.
//
// A blocking command at the head of the connection is the engine waiting
// on purpose: its own timeout is added (BLPOP k 5: UpstreamTimeout + 5 s),
// and one that may wait forever (BLPOP k 0, XREAD BLOCK 0, WAIT n 0, or a
// blocking command whose timeout cannot be read) is never cut.

// upCheckEvery returns how often a loop looks at its engine connections.
func (p *Proxy) upCheckEvery() time.Duration { return p.cfg.UpstreamTimeout / 4 }

// watchUpstreams makes sure the loop looks at its engine connections
// within upCheckEvery. One timer per loop, made once and re-armed.
func (l *loop) watchUpstreams() {
	if l.upArmed || l.el == nil {
		return
	}
	l.upArmed = true
	if l.upTimer == nil {
		l.runUpCheck = gnet.RunnableFunc(func(context.Context) error {
			l.checkUpstreams()
			return nil
		})
		l.upTimer = time.AfterFunc(l.p.upCheckEvery(), func() {
			_ = l.el.Execute(context.Background(), l.runUpCheck) // an error: the engine is stopping
		})
		return
	}
	l.upTimer.Reset(l.p.upCheckEvery())
}

// checkUpstreams fails the requests of the loop's engine connections that
// have been silent too long (see above), and looks again while some
// connection has requests pending.
func (l *loop) checkUpstreams() {
	l.upArmed = false
	l.upLooks.Add(1)
	now := l.p.now()
	limit := int64(l.p.cfg.UpstreamTimeout)
	busy := false
	for c := range l.ups {
		ln, ok := c.Context().(*link)
		if !ok || ln.dead || ln.raw {
			continue
		}
		if ln.q.len() == 0 {
			ln.seen = 0
			continue
		}
		busy = true
		if ln.seen == 0 {
			ln.seen = now
		}
		allow := limit
		if r := ln.q.front(); r.e != nil && r.e.block != 0 {
			if r.e.block < 0 {
				continue
			}
			allow += r.e.block
		}
		if now-max(ln.progress, ln.seen) <= allow {
			continue
		}
		// Replies the loop has not read yet (it was kept busy) are
		// progress: read what the socket holds first.
		ln.drain(c)
		if ln.dead || ln.q.len() == 0 {
			continue
		}
		if quiet := now - max(ln.progress, ln.seen); quiet > allow {
			ln.notAnswering(time.Duration(quiet))
		}
	}
	if busy {
		l.watchUpstreams()
	}
}

// notAnswering fails the requests pending on ln with "-ERR upstream
// <host:port> not answering" and closes it. As when a dial fails, the
// shape says whether their clients are closed once answered, as a direct
// client whose connection timed out would reconnect (one engine), or keep
// their connections, their next request to the shard opening a new one
// (slot routing; shape.closesOnFailure).
func (ln *link) notAnswering(quiet time.Duration) {
	ln.p.log.Warn("upstream not answering; failing its pending requests and closing the connection",
		"upstream", ln.addr, "pending", ln.q.len(), "silent", quiet.Round(time.Millisecond))
	lost := ln.p.shape.closesOnFailure()
	if m := ln.p.cfg.Metrics; m != nil && !lost {
		m.UpstreamLost() // (fail counts it when lost)
	}
	ln.fail(upstreamError(ln.addr, "not answering", nil), lost)
	ln.shutdown()
}

// wakeAuth resumes the loop's clients whose auth check has passed and
// forgets those gone (runs on the loop).
func (l *loop) wakeAuth(context.Context) error {
	kept := l.authWait[:0]
	for _, s := range l.authWait {
		switch {
		case s.gone() || s.paused != pauseAuth:
		case s.p.authChecked(s.authAfter):
			s.maybeResume()
		default:
			kept = append(kept, s)
			continue
		}
		s.p.authWaiters.Add(-1)
	}
	clear(l.authWait[len(kept):])
	l.authWait = kept
	l.flushAll()
	return nil
}
