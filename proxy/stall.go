package proxy

import (
	"context"
	"time"

	"github.com/panjf2000/gnet/v2"
)

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
