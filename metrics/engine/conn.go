package engine

import (
	"context"
	"log/slog"
	"time"

	"github.com/respmeter/respmeter/internal/respconn"
)

// Timeouts and reconnection pacing of the side connections.
const (
	// dialTimeout bounds one connection attempt, including CLIENT SETNAME.
	dialTimeout = 2 * time.Second
	// opTimeout bounds one round trip (a PING, one poll). It is long on
	// purpose: a PING that takes 3 s because the engine is busy is a sample
	// worth recording, not a failure. It matches the top classic bucket.
	opTimeout = 10 * time.Second
	// backoffMin and backoffMax bound the pause between connection attempts
	// while the engine is down; it doubles per failed attempt.
	backoffMin = 100 * time.Millisecond
	backoffMax = 5 * time.Second
)

// Connection names set with CLIENT SETNAME; CLIENT LIST shows them as name=.
const (
	probeName = "respmeter-probe"
	pollName  = "respmeter-poll"
)

// conn is one side connection; see dial.
type conn = respconn.Conn

// dial connects to addr and names the connection with CLIENT SETNAME (an
// error reply to it, from an engine without it, is not a failure; one that
// means the engine cannot serve us, NOAUTH or LOADING, surfaces on the first
// real command). The connection is closed as soon as ctx is done, so that a
// blocked read returns at once. login's User and Password, when set,
// authenticate it first (AUTH). It is used by one goroutine only (the Run
// goroutine of its Probe or Poller).
func dial(ctx context.Context, addr, name string, login respconn.Options) (*conn, error) {
	return respconn.Dial(ctx, addr, respconn.Options{Timeout: dialTimeout, Name: name, User: login.User, Password: login.Password, TLS: login.TLS})
}

// sleepCtx waits d or until ctx is done and reports whether ctx is still
// live.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// backoff is the pause before the next connection attempt: backoffMin after
// a success, doubling up to backoffMax while attempts fail.
type backoff struct{ d time.Duration }

func (b *backoff) next() time.Duration {
	b.d = min(max(2*b.d, backoffMin), backoffMax)
	return b.d
}

func (b *backoff) reset() { b.d = 0 }

// health tracks whether the engine answers, counts failures and logs only
// on a change of state. The owner serializes calls (it holds its own mutex).
type health struct {
	logger  *slog.Logger
	known   bool // a first outcome was seen
	failing bool
	errors  int64
	lastErr string
}

// ok records a success; it logs at Info when the engine starts answering.
func (h *health) ok() {
	if !h.known || h.failing {
		h.logger.Info("engine answering")
	}
	h.known, h.failing = true, false
}

// fail records err; it logs at Warn when the engine stops answering, and
// not again until it has answered once.
func (h *health) fail(err error) {
	h.errors++
	h.lastErr = err.Error()
	if !h.known || !h.failing {
		h.logger.Warn("engine not answering", "err", err)
	}
	h.known, h.failing = true, true
}

// newLogger returns logger (or a discarding one if nil) with the component
// and upstream attributes.
func newLogger(logger *slog.Logger, component, addr string) *slog.Logger {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return logger.With("component", component, "upstream", addr)
}
