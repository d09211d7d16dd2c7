package redistest

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"testing"
	"time"
)

// DefaultTimeout bounds a read when the caller gives no timeout.
const DefaultTimeout = 3 * time.Second

// ErrTimeout reports that a read condition was not met before its deadline
// while the connection was still open.
var ErrTimeout = errors.New("redistest: read timed out")

// Conn is a raw TCP client that keeps the bytes it has read but not yet
// consumed, for byte-exact request/reply checks. A Conn is not safe for
// concurrent use; the error-returning methods may be called from any
// goroutine, the ones taking a testing.TB only from that test's goroutine.
type Conn struct {
	c      net.Conn     // tcp, or a TLS connection over it (DialConnTLS)
	tcp    *net.TCPConn // the socket
	buf    []byte       // read but not yet consumed
	closed bool         // EOF or reset seen from the peer
	rerr   error        // the error that ended reading, if any
}

// DialConn connects to addr (TCP_NODELAY on, Go's default).
func DialConn(addr string, timeout time.Duration) (*Conn, error) {
	c, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return nil, err
	}
	tc := c.(*net.TCPConn)
	_ = tc.SetNoDelay(true)
	return &Conn{c: tc, tcp: tc}, nil
}

// DialConnTLS connects to addr as DialConn does and does a TLS handshake
// with cfg (within timeout): the Conn then reads and writes the decrypted
// stream.
func DialConnTLS(addr string, timeout time.Duration, cfg *tls.Config) (*Conn, error) {
	c, err := DialConn(addr, timeout)
	if err != nil {
		return nil, err
	}
	host, _, _ := net.SplitHostPort(addr)
	if cfg.ServerName == "" {
		cfg = cfg.Clone()
		cfg.ServerName = host
	}
	tc := tls.Client(c.tcp, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := tc.HandshakeContext(ctx); err != nil {
		_ = c.tcp.Close()
		return nil, err
	}
	c.c = tc
	return c, nil
}

// Dial is DialConn that fails t on error and closes the Conn in t.Cleanup.
func Dial(t testing.TB, addr string) *Conn {
	t.Helper()
	c, err := DialConn(addr, 2*time.Second)
	if err != nil {
		t.Fatalf("redistest: dial %s: %v", addr, err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// TCP returns the underlying connection.
func (c *Conn) TCP() *net.TCPConn { return c.tcp }

// LocalAddr returns the client side address, "127.0.0.1:port".
func (c *Conn) LocalAddr() string { return c.c.LocalAddr().String() }

// Write sends b in one write call.
func (c *Conn) Write(b []byte) error {
	_ = c.c.SetWriteDeadline(time.Now().Add(DefaultTimeout))
	_, err := c.c.Write(b)
	return err
}

// WriteBytewise sends b one byte per write call (TCP_NODELAY is on, so
// every byte leaves in its own segment).
func (c *Conn) WriteBytewise(b []byte) error {
	for i := range b {
		if err := c.Write(b[i : i+1]); err != nil {
			return err
		}
	}
	return nil
}

// CloseWrite shuts down the sending side (shutdown(SHUT_WR)): the peer
// reads EOF but may still answer.
func (c *Conn) CloseWrite() error {
	if tc, ok := c.c.(*tls.Conn); ok {
		return tc.CloseWrite()
	}
	return c.tcp.CloseWrite()
}

// Close closes the connection with a FIN.
func (c *Conn) Close() error { return c.c.Close() }

// Reset closes the connection with an RST (SO_LINGER 0).
func (c *Conn) Reset() error {
	_ = c.tcp.SetLinger(0)
	return c.tcp.Close()
}

// Closed reports whether EOF or a reset has been seen from the peer.
func (c *Conn) Closed() bool { return c.closed }

// Buffered returns the bytes read but not yet consumed.
func (c *Conn) Buffered() []byte { return c.buf }

// isClosedErr reports errors that mean "the peer is gone".
func isClosedErr(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.EPIPE) || errors.Is(err, net.ErrClosed)
}

// fill reads once more into buf, until deadline.
func (c *Conn) fill(deadline time.Time) error {
	if c.closed {
		return io.EOF
	}
	_ = c.c.SetReadDeadline(deadline)
	var tmp [32 << 10]byte
	n, err := c.c.Read(tmp[:])
	c.buf = append(c.buf, tmp[:n]...)
	if err != nil {
		if isClosedErr(err) {
			c.closed, c.rerr = true, err
			return io.EOF
		}
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return ErrTimeout
		}
		c.closed, c.rerr = true, err
		return err
	}
	return nil
}

// ReadWhile reads until done(buffered) reports true, the peer closes or
// timeout passes, and returns (without consuming) the buffered bytes. The
// error is nil when done was satisfied, io.EOF when the peer closed first,
// ErrTimeout when time ran out.
func (c *Conn) ReadWhile(done func([]byte) bool, timeout time.Duration) ([]byte, error) {
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	deadline := time.Now().Add(timeout)
	for !done(c.buf) {
		if err := c.fill(deadline); err != nil {
			if done(c.buf) {
				return c.buf, nil
			}
			return c.buf, err
		}
	}
	return c.buf, nil
}

// Consume drops the first n buffered bytes.
func (c *Conn) Consume(n int) { c.buf = append(c.buf[:0], c.buf[n:]...) }

// ReadN reads and consumes exactly n bytes.
func (c *Conn) ReadN(n int, timeout time.Duration) ([]byte, error) {
	b, err := c.ReadWhile(func(b []byte) bool { return len(b) >= n }, timeout)
	if err != nil {
		out := append([]byte(nil), b...)
		c.Consume(len(b))
		return out, err
	}
	out := append([]byte(nil), b[:n]...)
	c.Consume(n)
	return out, nil
}

// ReadFrame reads and consumes one complete top-level RESP2/RESP3 frame.
func (c *Conn) ReadFrame(timeout time.Duration) ([]byte, error) {
	var ferr error
	b, err := c.ReadWhile(func(b []byte) bool {
		n, e := FrameLen(b)
		if e != nil {
			ferr = e
			return true
		}
		return n > 0
	}, timeout)
	if ferr != nil {
		return nil, ferr
	}
	if err != nil {
		return append([]byte(nil), b...), err
	}
	n, _ := FrameLen(b)
	out := append([]byte(nil), b[:n]...)
	c.Consume(n)
	return out, nil
}

// ReadToClose reads until the peer closes or timeout passes and returns all
// unconsumed bytes and whether the peer closed.
func (c *Conn) ReadToClose(timeout time.Duration) ([]byte, bool) {
	b, _ := c.ReadWhile(func([]byte) bool { return false }, timeout)
	out := append([]byte(nil), b...)
	c.Consume(len(b))
	return out, c.closed
}

// Quiet waits d and returns whatever arrived meanwhile (consumed); use it
// to prove that nothing more is sent.
func (c *Conn) Quiet(d time.Duration) []byte {
	b, _ := c.ReadWhile(func([]byte) bool { return false }, d)
	out := append([]byte(nil), b...)
	c.Consume(len(b))
	return out
}

// Send writes b and fails t on error.
func (c *Conn) Send(t testing.TB, b []byte) {
	t.Helper()
	if err := c.Write(b); err != nil {
		t.Fatalf("redistest: write %q: %v", Trunc(b), err)
	}
}

// Expect reads len(want) bytes and fails t unless they equal want.
func (c *Conn) Expect(t testing.TB, want []byte, timeout time.Duration) {
	t.Helper()
	got, err := c.ReadN(len(want), timeout)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("redistest: want %q, got %q (err %v)", Trunc(want), Trunc(got), err)
	}
}

// Roundtrip writes req and expects exactly want back.
func (c *Conn) Roundtrip(t testing.TB, req, want []byte) {
	t.Helper()
	c.Send(t, req)
	c.Expect(t, want, 0)
}

// ExchangeOptions shape one Exchange. The zero value sends every write in
// one call and reads until the peer closes or DefaultTimeout passes.
type ExchangeOptions struct {
	// Delay is the pause before each write after the first.
	Delay time.Duration
	// Bytewise sends every write one byte per write call.
	Bytewise bool
	// CloseWrite half-closes the connection after the last write.
	CloseWrite bool
	// Stop conditions; reading ends when any set one holds: Want bytes
	// received, the received bytes end with Until, or Frames complete RESP
	// frames received. With none set, reading goes on until close/timeout.
	Want   int
	Until  []byte
	Frames int
	// Timeout bounds the whole read phase; 0 means DefaultTimeout.
	Timeout time.Duration
	// Linger keeps reading this long after a stop condition held, to
	// catch extra bytes that should not be there.
	Linger time.Duration
}

func (o ExchangeOptions) done(b []byte) bool {
	if o.Want > 0 && len(b) >= o.Want {
		return true
	}
	if len(o.Until) > 0 && bytes.HasSuffix(b, o.Until) {
		return true
	}
	if o.Frames > 0 {
		frames, _, err := SplitFrames(b)
		if err != nil || len(frames) >= o.Frames {
			return true
		}
	}
	return false
}

// Exchange is the byte oracle: it connects to addr, sends writes as
// ExchangeOptions say, reads until a stop condition, close or timeout, and
// returns the bytes received and whether the peer closed the connection.
// Write errors after the peer closed are not failures (the reading shows
// what happened); a failed dial fails t.
func Exchange(t testing.TB, addr string, writes [][]byte, o ExchangeOptions) ([]byte, bool) {
	t.Helper()
	c, err := DialConn(addr, 2*time.Second)
	if err != nil {
		t.Fatalf("redistest: dial %s: %v", addr, err)
	}
	defer c.Close()
	for i, w := range writes {
		if i > 0 && o.Delay > 0 {
			time.Sleep(o.Delay)
		}
		if o.Bytewise {
			err = c.WriteBytewise(w)
		} else {
			err = c.Write(w)
		}
		if err != nil {
			if !isClosedErr(err) {
				t.Fatalf("redistest: write to %s: %v", addr, err)
			}
			break
		}
	}
	if o.CloseWrite && err == nil {
		_ = c.CloseWrite()
	}
	timeout := o.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	stop := o.done
	if o.Want == 0 && len(o.Until) == 0 && o.Frames == 0 {
		stop = func([]byte) bool { return false }
	}
	b, _ := c.ReadWhile(stop, timeout)
	if o.Linger > 0 && !c.closed {
		b, _ = c.ReadWhile(func([]byte) bool { return false }, o.Linger)
	}
	return append([]byte(nil), b...), c.closed
}

// Trunc shortens b for failure messages.
func Trunc(b []byte) []byte {
	const max = 600
	if len(b) <= max {
		return b
	}
	out := append([]byte(nil), b[:max/2]...)
	out = append(out, fmt.Sprintf("...(%d bytes)...", len(b)-max)...)
	return append(out, b[len(b)-max/2:]...)
}
