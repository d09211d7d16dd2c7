package proxy

import (
	"context"
	"time"

	"github.com/panjf2000/gnet/v2"
)

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
// <host:port> not answering" and closes it. As when a dial fails, a client
// under slot routing keeps its connection (its next request to the shard
// opens a new one); with one engine the client is closed once answered,
// as a direct client whose connection timed out would reconnect.
func (ln *link) notAnswering(quiet time.Duration) {
	ln.p.log.Warn("upstream not answering; failing its pending requests and closing the connection",
		"upstream", ln.addr, "pending", ln.q.len(), "silent", quiet.Round(time.Millisecond))
	lost := ln.p.route != routeSlots
	if m := ln.p.cfg.Metrics; m != nil && !lost {
		m.UpstreamLost() // (fail counts it when lost)
	}
	ln.fail(upstreamError(ln.addr, "not answering", nil), lost)
	ln.shutdown()
}
