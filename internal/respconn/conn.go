package respconn

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"time"

	"github.com/respmeter/respmeter/internal/tlsconf"
)

// Options of Dial. The zero value dials without a bound but ctx's, names
// nothing and does not authenticate.
type Options struct {
	// Timeout bounds the dial and the setup round trip (AUTH, CLIENT
	// SETNAME) together; 0 means no bound but ctx's.
	Timeout time.Duration
	// Name is set with CLIENT SETNAME (CLIENT LIST shows it as name=); ""
	// sends nothing. An error reply (an engine without CLIENT SETNAME) is
	// ignored.
	Name string
	// User and Password, when Password is set, are sent with AUTH before
	// anything else (AUTH user password, or AUTH password when User is
	// empty: Redis 6 ACL and requirepass). They appear in no log and no
	// error. User without Password sends nothing.
	User, Password string
	// TLS, when set, runs a TLS handshake over the new connection (within
	// Timeout and ctx) before anything is sent, with the configuration
	// TLS gives for addr (tlsconf.Dialer.Config: the engine's certificate
	// verified against the CA certificates read last, for the server name
	// configured or else the host dialed). nil speaks plaintext.
	TLS *tlsconf.Dialer
}

// Conn is one blocking RESP connection. Do, Pipeline and Close may be called
// from one goroutine at a time; Close may also be called from any other
// goroutine to unblock them. After any error of Do or Pipeline the
// connection is out of step and must be closed.
type Conn struct {
	nc   net.Conn
	r    *bufio.Reader
	wbuf []byte
	stop func() bool // unregisters the close-on-ctx hook
}

// Dial connects to addr ("host:port") over TCP, authenticates and names the
// connection as opts says, and arms a hook that closes it as soon as ctx is
// done, so that a blocked Do returns at once (with an I/O error: callers that
// want ctx.Err() check ctx). An error reply to AUTH is an error wrapping a
// ServerError (the engine's text, never the credentials); an error reply
// that means the engine cannot serve (NOAUTH, LOADING) surfaces on the first
// real command.
func Dial(ctx context.Context, addr string, opts Options) (*Conn, error) {
	nc, err := DialNet(ctx, addr, opts.Timeout, opts.TLS)
	if err != nil {
		return nil, err
	}
	c := &Conn{nc: nc, r: bufio.NewReaderSize(nc, MaxLineLen)}
	c.stop = context.AfterFunc(ctx, func() { _ = nc.Close() })
	var setup [][]string
	if opts.Password != "" {
		if opts.User != "" {
			setup = append(setup, []string{"AUTH", opts.User, opts.Password})
		} else {
			setup = append(setup, []string{"AUTH", opts.Password})
		}
	}
	if opts.Name != "" {
		setup = append(setup, []string{"CLIENT", "SETNAME", opts.Name})
	}
	if len(setup) == 0 {
		return c, nil
	}
	vs, err := c.Pipeline(opts.Timeout, setup...)
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("respconn: connection setup: %w", err)
	}
	if opts.Password != "" && vs[0].IsError() {
		c.Close()
		return nil, fmt.Errorf("respconn: AUTH refused: %w", vs[0].Err())
	}
	return c, nil
}

// DialNet opens the transport Dial speaks RESP over, for clients that
// frame their own bytes (respmeter check and replay): a TCP connection to
// addr ("host:port") and, when td is set, a TLS handshake over it
// (td.Handshake: the peer's certificate verified as td's configuration in
// use says, for its server name or else the host of addr). timeout (0:
// none) bounds the connect and the handshake together, as ctx does.
func DialNet(ctx context.Context, addr string, timeout time.Duration, td *tlsconf.Dialer) (net.Conn, error) {
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	var d net.Dialer
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil || td == nil {
		return nc, err
	}
	return td.Handshake(ctx, nc, addr)
}

// Do sends one command and reads its reply, within timeout (0: no bound).
// An error reply is a Value (see Value.Err), not an error: the error is for
// the connection (I/O, timeout, ErrProtocol).
func (c *Conn) Do(timeout time.Duration, args ...string) (Value, error) {
	vs, err := c.Pipeline(timeout, args)
	if err != nil {
		return Value{}, err
	}
	return vs[0], nil
}

// Pipeline sends cmds in one write and reads their replies in order, all
// within timeout (0: no bound). Error replies are Values, as for Do.
func (c *Conn) Pipeline(timeout time.Duration, cmds ...[]string) ([]Value, error) {
	c.wbuf = c.wbuf[:0]
	for _, args := range cmds {
		c.wbuf = AppendCommand(c.wbuf, args...)
	}
	return c.roundtrip(timeout, c.wbuf, len(cmds))
}

// roundtrip writes req and reads n replies, all within timeout (0: no
// bound).
func (c *Conn) roundtrip(timeout time.Duration, req []byte, n int) ([]Value, error) {
	var deadline time.Time
	if timeout > 0 {
		deadline = time.Now().Add(timeout)
	}
	if err := c.nc.SetDeadline(deadline); err != nil {
		return nil, err
	}
	if _, err := c.nc.Write(req); err != nil {
		return nil, err
	}
	out := make([]Value, n)
	for i := range out {
		v, err := Read(c.r)
		if err != nil {
			return nil, err
		}
		out[i] = v
	}
	return out, nil
}

// DoRaw sends req as it stands (bytes a client could send, well formed or
// not: an inline request, a frame that bends the protocol) and reads one
// reply, within timeout (0: no bound); for asking an engine how it parses
// a request. Errors are as for Do.
func (c *Conn) DoRaw(timeout time.Duration, req []byte) (Value, error) {
	vs, err := c.roundtrip(timeout, req, 1)
	if err != nil {
		return Value{}, err
	}
	return vs[0], nil
}

// Close closes the connection and disarms the close-on-ctx hook.
func (c *Conn) Close() error {
	c.stop()
	return c.nc.Close()
}
