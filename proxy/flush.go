package proxy

import (
	"context"
	"sync"
	"time"

	"github.com/panjf2000/gnet/v2"
)

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
func (l *loop) closeFlushed(c gnet.Conn) {
	if l.el == nil || c.OutboundBuffered() == 0 {
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
	for c, prev := range l.flushing {
		n := c.OutboundBuffered()
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
		l.nflushing.Add(-1)
	}
}

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
