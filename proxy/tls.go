package proxy

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/panjf2000/gnet/v2"

	"github.com/respmeter/respmeter/metrics"
)

// TLS on both sides feeds the one client core and the one upstream link
// (docs/tls.md, "Design"). crypto/tls runs on goroutines, off the event
// loops: a TLS connection is accepted (or dialed) and its handshake done
// there, bounded by TLSHandshakeTimeout, then it is bridged to a gnet
// connection through a Unix socket pair: one end is enrolled on an event
// loop (gnet EventLoop.Enroll, Engine.Register) and served exactly as a
// plaintext TCP connection, the other end is copied to and from the
// tls.Conn by two goroutines, which decrypt and encrypt. A handshake
// that never finishes therefore holds a goroutine until its timeout, never
// a loop.

// DefaultTLSHandshakeTimeout bounds a TLS handshake when
// Config.TLSHandshakeTimeout is 0.
const DefaultTLSHandshakeTimeout = 10 * time.Second

// tlsServer is a client-facing TLS listener: Config.TLSListen's, or a
// virtual node's under Config.FacadeTLS.
type tlsServer struct {
	ln   net.Listener
	addr string
	node int            // the facade's virtual node it serves (its index); -1 for TLSListen's
	wg   sync.WaitGroup // the accept loop and the handshakes in progress
	// ctx ends the handshakes in progress when Stop closes the listener.
	ctx  context.Context
	stop context.CancelFunc
}

func newTLSServer(ln net.Listener, node int) *tlsServer {
	s := &tlsServer{ln: ln, addr: ln.Addr().String(), node: node}
	s.ctx, s.stop = context.WithCancel(context.Background())
	return s
}

// servesTLS reports whether any client listener speaks TLS: TLSListen, or
// the facade's virtual nodes under FacadeTLS.
func (p *Proxy) servesTLS() bool {
	return p.cfg.TLSListen != "" || (p.facade != nil && p.facade.tls)
}

func (p *Proxy) handshakeTimeout() time.Duration {
	if p.cfg.TLSHandshakeTimeout > 0 {
		return p.cfg.TLSHandshakeTimeout
	}
	return DefaultTLSHandshakeTimeout
}

// OnTick is called by gnet's ticker, which starts once every event loop
// is registered (gnet v2.9.7 calls OnBoot before that): its first call
// lets startTLS hand TLS clients to the loops (Engine.Register). It then
// sleeps; the ticker runs only with a TLS listener.
func (p *Proxy) OnTick() (time.Duration, gnet.Action) {
	p.loopsUpOnce.Do(func() { close(p.loopsUp) })
	return time.Hour, gnet.None
}

// listenTLSNodes binds the facade's virtual nodes under FacadeTLS, before
// gnet starts (which then binds the plain endpoint only): each node's
// address becomes the one bound, the port chosen for a "host:0". The
// nodes accept once startTLS runs.
func (p *Proxy) listenTLSNodes() error {
	f := p.facade
	for i := range f.nodes {
		ln, err := net.Listen("tcp", f.nodes[i].addr)
		if err != nil {
			p.closeTLSNodes()
			return fmt.Errorf("proxy: listen %s: %w", f.nodes[i].addr, err)
		}
		s := newTLSServer(ln, i)
		f.nodes[i].addr = s.addr
		p.tlsNodes = append(p.tlsNodes, s)
	}
	return nil
}

// closeTLSNodes closes the virtual nodes' TLS listeners of a Start that
// failed before they accepted.
func (p *Proxy) closeTLSNodes() {
	for _, s := range p.tlsNodes {
		_ = s.ln.Close()
	}
	p.tlsNodes = nil
}

// startTLS listens on cfg.TLSListen (when set) and starts accepting there
// and on the virtual nodes' TLS listeners, once the engine has booted and
// its event loops are registered.
func (p *Proxy) startTLS() error {
	select {
	case <-p.loopsUp:
	case <-time.After(10 * time.Second):
		return errors.New("gnet's event loops did not start")
	}
	servers := p.tlsNodes
	if p.cfg.TLSListen != "" {
		ln, err := net.Listen("tcp", p.cfg.TLSListen)
		if err != nil {
			return err
		}
		p.tls = newTLSServer(ln, -1)
		servers = append(servers, p.tls)
	}
	for _, s := range servers {
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			p.acceptTLS(s)
		}()
	}
	return nil
}

// TLSAddr returns the address the TLS listener is bound to (the port
// picked for a "host:0" TLSListen), "" when there is none.
func (p *Proxy) TLSAddr() string {
	if p.tls == nil {
		return ""
	}
	return p.tls.addr
}

// stopTLS closes the TLS listeners, ends the handshakes in progress and
// waits for their goroutines.
func (p *Proxy) stopTLS() {
	servers := p.tlsNodes
	if p.tls != nil {
		servers = append(servers, p.tls)
	}
	for _, s := range servers {
		_ = s.ln.Close()
		s.stop()
	}
	for _, s := range servers {
		s.wg.Wait()
	}
}

// acceptTLS accepts until the listener is closed, each connection's
// handshake on its own goroutine.
func (p *Proxy) acceptTLS(s *tlsServer) {
	var delay time.Duration
	for {
		nc, err := s.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// EMFILE and the like: back off as net/http does.
			delay = min(max(2*delay, 5*time.Millisecond), time.Second)
			p.log.Warn("TLS accept", "err", err, "retry_in", delay)
			time.Sleep(delay)
			continue
		}
		delay = 0
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			p.serveTLS(s, nc)
		}()
	}
}

// serveTLS does the server handshake of nc and hands the decrypted stream
// to an event loop as a client connection.
func (p *Proxy) serveTLS(s *tlsServer, nc net.Conn) {
	raw := &timedConn{Conn: nc}
	tc := tls.Server(raw, p.cfg.TLS)
	start := time.Now()
	ctx, cancel := context.WithTimeout(s.ctx, p.handshakeTimeout())
	err := tc.HandshakeContext(ctx)
	cancel()
	if err != nil {
		p.handshakeFailed(metrics.TLSSideClient, nc.RemoteAddr().String(), err)
		_ = nc.Close()
		return
	}
	p.handshakeDone(metrics.TLSSideClient, start, tc)
	quickAck(nc)
	if p.draining.Load() {
		_ = tc.Close()
		return
	}
	meter := new(tlsMeter)
	loopEnd, err := p.bridge(tc, raw, meter)
	if err != nil {
		p.log.Warn("TLS client not served", "client", nc.RemoteAddr().String(), "err", err)
		return
	}
	ctx = gnet.NewContext(context.Background(), tlsPeer{addr: nc.RemoteAddr(), local: nc.LocalAddr(), node: s.node, meter: meter})
	ch, err := p.eng.Register(gnet.NewNetConnContext(ctx, loopEnd))
	if err == nil {
		err = (<-ch).Err
	}
	_ = loopEnd.Close() // gnet serves its own duplicate of the descriptor
	if err != nil {
		p.log.Debug("TLS client not served", "client", nc.RemoteAddr().String(), "err", err)
	}
}

// quickAck acknowledges at once what the kernel has received on nc and
// not yet acknowledged: the client's Finished, after a server handshake.
// crypto/tls sends its TLS 1.3 session tickets in its first flight (an
// OpenSSL server, redis-server's, sends them after the client's Finished),
// so nothing answers the Finished and the kernel delays its ACK, up to
// 40 ms; a client with Nagle's algorithm on (TCP_NODELAY off: Python's
// sockets, for one) holds its first request until that ACK comes. Setting
// TCP_QUICKACK sends the pending ACK now (Linux: tcp(7)).
func quickAck(nc net.Conn) {
	if tc, ok := nc.(*net.TCPConn); ok {
		if rc, err := tc.SyscallConn(); err == nil {
			_ = rc.Control(func(fd uintptr) {
				_ = syscall.SetsockoptInt(int(fd), syscall.IPPROTO_TCP, syscall.TCP_QUICKACK, 1)
			})
		}
	}
}

// tlsPeer is the context of a TLS client's bridged connection until its
// OnOpen: the addresses of the TLS connection (the bridge's socket pair
// has none): its peer's, which the client reports as its own, and the
// local one the client reached; the facade's virtual node whose
// listener accepted it (-1: TLSListen's); and the meter of its bridge's
// crypto time.
type tlsPeer struct {
	addr, local net.Addr
	node        int
	meter       *tlsMeter
}

// tlsMeter is the crypto time of one TLS client's bridge: the time its
// two goroutines spent inside tls.Conn Read and Write less the time the
// socket reads and writes under them took (timedConn), that is decrypting
// and encrypting records (and the copies and record bookkeeping around
// them), in ns. The bridge adds to it before it passes the bytes on, so
// the event loop that reads a request finds its decryption here
// (client.bookTLS).
type tlsMeter struct {
	crypto atomic.Int64
}

// take returns the crypto time added since the last take.
func (m *tlsMeter) take() int64 { return m.crypto.Swap(0) }

// timedConn is the TCP connection under a TLS client's tls.Conn, timing
// the reads and writes crypto/tls makes on it (in ns, each direction on
// its own: the bridge's two goroutines read and write at once).
type timedConn struct {
	net.Conn
	rd, wr atomic.Int64
}

func (c *timedConn) Read(b []byte) (int, error) {
	t := time.Now()
	n, err := c.Conn.Read(b)
	c.rd.Add(int64(time.Since(t)))
	return n, err
}

func (c *timedConn) Write(b []byte) (int, error) {
	t := time.Now()
	n, err := c.Conn.Write(b)
	c.wr.Add(int64(time.Since(t)))
	return n, err
}

// dialUpstream connects to the engine at addr: over TLS when
// cfg.UpstreamTLS is set, returning the loop's end of the bridge to the
// verified TLS connection; never falling back to plaintext.
func (p *Proxy) dialUpstream(addr string) (net.Conn, error) {
	nc, err := p.dialer.Dial("tcp", addr)
	if err != nil || p.cfg.UpstreamTLS == nil {
		return nc, err
	}
	// The one TLS dial of every engine connection (respconn.DialNet's
	// too): the configuration in use at this moment, the engine verified
	// for the server name configured or else the host dialed.
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), p.handshakeTimeout())
	tc, err := p.cfg.UpstreamTLS.Handshake(ctx, nc, addr)
	cancel()
	if err != nil {
		p.handshakeFailed(metrics.TLSSideUpstream, addr, err)
		return nil, err
	}
	p.handshakeDone(metrics.TLSSideUpstream, start, tc)
	return p.bridge(tc, nil, nil)
}

func (p *Proxy) handshakeDone(side string, start time.Time, tc *tls.Conn) {
	st := tc.ConnectionState()
	p.cfg.TLSMetrics.Handshake(side, time.Since(start), tls.VersionName(st.Version), tls.CipherSuiteName(st.CipherSuite))
}

func (p *Proxy) handshakeFailed(side, peer string, err error) {
	reason := HandshakeReason(err)
	p.cfg.TLSMetrics.HandshakeFailed(side, reason)
	if side == metrics.TLSSideClient {
		p.log.Info("TLS handshake failed", "side", side, "client", peer, "reason", reason, "err", err)
	} else {
		p.log.Warn("TLS handshake failed", "side", side, "upstream", peer, "reason", reason, "err", err)
	}
}

// HandshakeReason classifies a failed TLS handshake for the reason label
// of respmeter_tls_handshake_errors_total: "plaintext" (the peer's first
// bytes are not a TLS record: a plaintext client on a TLS port, or a
// plaintext engine), "timeout", "eof" (closed or cut during the
// handshake), "unknown_ca", "expired", "bad_certificate" (any other
// certificate verification failure), "no_certificate" (a client without a
// certificate under tls-auth-clients yes), "protocol_version", "cipher"
// (no cipher suite both sides allow, found on respmeter's side),
// "handshake_failure" (the peer's handshake_failure alert: it found no
// acceptable set of parameters, RFC 5246 7.2.2 — OpenSSL sends it for no
// shared cipher suite, and over TLS 1.2 for a missing client certificate),
// "shutdown" (cut by Stop) and "other". A failure the peer saw is known by
// its alert (RFC 8446 6.2), which crypto/tls reports as "remote error:
// tls: <description>".
func HandshakeReason(err error) string {
	var (
		rh      tls.RecordHeaderError
		ne      net.Error
		unknown x509.UnknownAuthorityError
		invalid x509.CertificateInvalidError
		hostErr x509.HostnameError
		verify  *tls.CertificateVerificationError
	)
	switch {
	case errors.As(err, &rh):
		return "plaintext"
	case errors.Is(err, context.Canceled):
		return "shutdown"
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, os.ErrDeadlineExceeded),
		errors.As(err, &ne) && ne.Timeout():
		return "timeout"
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, syscall.ECONNRESET):
		return "eof"
	case errors.As(err, &unknown):
		return "unknown_ca"
	case errors.As(err, &invalid) && invalid.Reason == x509.Expired:
		return "expired"
	case errors.As(err, &hostErr), errors.As(err, &invalid), errors.As(err, &verify):
		return "bad_certificate"
	}
	msg := err.Error()
	if strings.Contains(msg, "client didn't provide a certificate") {
		return "no_certificate"
	}
	if strings.Contains(msg, "unsupported versions") || strings.Contains(msg, "protocol version") {
		return "protocol_version"
	}
	if strings.Contains(msg, "no cipher suite supported by both") || strings.Contains(msg, "unconfigured cipher suite") {
		return "cipher"
	}
	if _, alert, ok := strings.Cut(msg, "remote error: tls: "); ok {
		switch alert {
		case "unknown certificate authority":
			return "unknown_ca"
		case "expired certificate":
			return "expired"
		case "certificate required":
			return "no_certificate"
		case "bad certificate", "unsupported certificate", "revoked certificate", "unknown certificate":
			return "bad_certificate"
		case "handshake failure", "insufficient security":
			return "handshake_failure"
		}
	}
	return "other"
}

// bridge returns the event loop's end of a Unix socket pair whose other
// end two goroutines copy to and from tc: the decrypted stream of tc, as
// a plain connection gnet can enroll. Either side closing ends both: the
// peer's end of stream is passed on as a half close, so replies still
// queued on the loop are written first. With a meter (a client's: raw is
// the connection under tc), the goroutines add their crypto time to it.
func (p *Proxy) bridge(tc *tls.Conn, raw *timedConn, meter *tlsMeter) (*net.UnixConn, error) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		_ = tc.Close()
		return nil, err
	}
	loopEnd, err1 := fileConn(fds[0])
	pumpEnd, err2 := fileConn(fds[1])
	if err := errors.Join(err1, err2); err != nil {
		for _, c := range []net.Conn{loopEnd, pumpEnd} {
			if c != nil {
				_ = c.Close()
			}
		}
		_ = tc.Close()
		return nil, err
	}
	var done sync.WaitGroup
	done.Add(2)
	go func() { // peer -> loop: decrypt
		defer done.Done()
		if meter == nil {
			_, _ = io.Copy(pumpEnd, tc)
		} else {
			pump(pumpEnd, tc, &raw.rd, meter)
		}
		_ = pumpEnd.CloseWrite()
	}()
	go func() { // loop -> peer: encrypt
		defer done.Done()
		if meter == nil {
			_, _ = io.Copy(tc, pumpEnd)
		} else {
			pump(tc, pumpEnd, &raw.wr, meter)
		}
		_ = tc.Close()
	}()
	go func() {
		done.Wait()
		_ = pumpEnd.Close()
	}()
	return loopEnd, nil
}

// pump copies src to dst as io.Copy does, adding to meter the time spent
// in the tls.Conn's call (src's Read when decrypting, dst's Write when
// encrypting) less the socket time under it that sock (timedConn's rd or
// wr) counts, before it passes the bytes on.
func pump(dst io.Writer, src io.Reader, sock *atomic.Int64, meter *tlsMeter) {
	buf := make([]byte, 32<<10)
	_, decrypt := src.(*tls.Conn)
	for {
		t, s0 := time.Now(), sock.Load()
		n, err := src.Read(buf)
		if decrypt {
			meter.crypto.Add(max(int64(time.Since(t))-(sock.Load()-s0), 0))
		}
		if n > 0 {
			t, s0 = time.Now(), sock.Load()
			_, werr := dst.Write(buf[:n])
			if !decrypt {
				meter.crypto.Add(max(int64(time.Since(t))-(sock.Load()-s0), 0))
			}
			if werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// fileConn makes a *net.UnixConn of descriptor fd (closing fd).
func fileConn(fd int) (*net.UnixConn, error) {
	f := os.NewFile(uintptr(fd), "tls-bridge")
	c, err := net.FileConn(f)
	_ = f.Close()
	if err != nil {
		return nil, err
	}
	return c.(*net.UnixConn), nil
}
