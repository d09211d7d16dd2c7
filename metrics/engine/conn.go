package engine

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"net"
	"time"
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

// conn is one side connection. It is used by one goroutine only (the Run
// goroutine of its Probe or Poller); close may be called from any goroutine.
type conn struct {
	nc   net.Conn
	r    *bufio.Reader
	wbuf []byte
	stop func() bool // unregisters the close-on-cancel hook
}

// dial connects to addr, names the connection with CLIENT SETNAME and arms a
// hook that closes it as soon as ctx is done, so that a blocked read returns
// at once. An error reply to CLIENT SETNAME (an engine without it) is not a
// failure; an error reply that means the engine cannot serve us (NOAUTH,
// LOADING) surfaces on the first real command.
func dial(ctx context.Context, addr, name string) (*conn, error) {
	d := net.Dialer{Timeout: dialTimeout}
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	c := &conn{nc: nc, r: bufio.NewReaderSize(nc, maxLineLen)}
	c.stop = context.AfterFunc(ctx, func() { _ = nc.Close() })
	if _, err := c.do(dialTimeout, "CLIENT", "SETNAME", name); err != nil {
		c.close()
		return nil, fmt.Errorf("client setname: %w", err)
	}
	return c, nil
}

// do sends one command and reads its reply within timeout.
func (c *conn) do(timeout time.Duration, args ...string) (value, error) {
	vs, err := c.pipeline(timeout, args)
	if err != nil {
		return value{}, err
	}
	return vs[0], nil
}

// pipeline sends cmds in one write and reads their replies, all within
// timeout. Error replies are returned as values, not errors: the error is
// for the connection (I/O, timeout, malformed bytes), after which c must be
// closed.
func (c *conn) pipeline(timeout time.Duration, cmds ...[]string) ([]value, error) {
	if err := c.nc.SetDeadline(time.Now().Add(timeout)); err != nil {
		return nil, err
	}
	c.wbuf = c.wbuf[:0]
	for _, args := range cmds {
		c.wbuf = appendCommand(c.wbuf, args...)
	}
	if _, err := c.nc.Write(c.wbuf); err != nil {
		return nil, err
	}
	out := make([]value, len(cmds))
	for i := range out {
		v, err := readValue(c.r)
		if err != nil {
			return nil, err
		}
		out[i] = v
	}
	return out, nil
}

func (c *conn) close() {
	c.stop()
	_ = c.nc.Close()
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
