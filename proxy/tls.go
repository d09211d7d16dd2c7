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
	"syscall"
	"time"

	"github.com/panjf2000/gnet/v2"

	"github.com/respmeter/respmeter/metrics"
)

// TLS on both sides feeds the one client core and the one upstream link
// (docs/tls.md, "Design"). A TLS connection is accepted (or dialed) on a
// goroutine, which does the handshake there, bounded by
// TLSHandshakeTimeout, so a handshake's public-key work or a client that
// never finishes one cannot hold an event loop. Its TCP socket is then
// enrolled on an event loop (gnet EventLoop.Enroll, Engine.Register) and
// the record layer runs there: the loop hands crypto/tls the ciphertext it
// read and serves the plaintext that comes out exactly as a plaintext
// connection's bytes, and what the loop writes is encrypted on its way out
// (tlsIO).

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

// serveTLS does the server handshake of nc and hands the connection to an
// event loop as a client connection, its record layer in a tlsIO.
func (p *Proxy) serveTLS(s *tlsServer, nc net.Conn) {
	tio := &tlsIO{nc: nc, timed: true}
	tc := tls.Server(tio, p.cfg.TLS)
	tio.tc = tc
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
	tio.onLoop = true
	ctx = gnet.NewContext(context.Background(), tlsPeer{addr: nc.RemoteAddr(), local: nc.LocalAddr(), node: s.node, tio: tio})
	ch, err := p.eng.Register(gnet.NewNetConnContext(ctx, nc))
	if err == nil {
		err = (<-ch).Err
	}
	_ = nc.Close() // gnet serves its own duplicate of the descriptor
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

// tlsPeer is the context of a TLS client's connection until its OnOpen:
// the addresses of the TLS connection, its peer's and the local one the
// client reached; the facade's virtual node whose listener accepted it (-1:
// TLSListen's); and its record layer.
type tlsPeer struct {
	addr, local net.Addr
	node        int
	tio         *tlsIO
}

// tlsIO is the record layer of one TLS connection served by an event loop,
// and crypto/tls's transport (its net.Conn). During the handshake, on its
// goroutine, it passes crypto/tls's reads and writes to the TCP connection
// nc. Once the connection is on a loop (onLoop) crypto/tls never touches
// the socket: decrypt lends it the ciphertext the loop read, and what it
// writes (records, alerts) is collected in out for the loop to send. A
// read with nothing lent returns errWouldBlock, a temporary net.Error,
// which crypto/tls passes back without ending the connection, keeping a
// partial record for the next read (crypto/tls's readRecordOrCCS: only an
// error that is not a temporary net.Error is kept as the connection's).
// After the handshake it is used by its loop only.
type tlsIO struct {
	tc     *tls.Conn
	nc     net.Conn
	onLoop bool
	in     []byte // ciphertext lent for one decrypt
	out    []byte // ciphertext written by tc, not yet sent
	// timed: a client's, whose crypto time (ns in tc's Read and Write,
	// the record layer's work: no socket I/O happens in them on the loop)
	// accumulates in crypto until the client takes it (client.bookTLS).
	timed  bool
	crypto int64
}

// errWouldBlock is tlsIO's read with no ciphertext left: temporary, so
// crypto/tls keeps the connection usable.
var errWouldBlock error = wouldBlock{}

type wouldBlock struct{}

func (wouldBlock) Error() string   { return "tls: no more ciphertext read" }
func (wouldBlock) Timeout() bool   { return false }
func (wouldBlock) Temporary() bool { return true }

// maxTLSRecord is the most plaintext one TLS record carries (RFC 8446
// 5.1), the room decrypt keeps free for each read.
const maxTLSRecord = 16 << 10

// decrypt gives tc the ciphertext data (a slice of the loop's read
// buffer: tc keeps a partial record in its own buffer) and returns the
// plaintext of every record it completes, written in *scratch (the loop's
// tlsPlain, grown as needed): valid, as gnet's read buffer, until the
// next read on the loop; what the client core or link keeps of it, it
// copies. err is io.EOF once the peer sent close_notify, or the record
// layer's failure (a bad record, an alert): the connection is then to be
// closed, after any alert tc wrote (pending) is sent.
func (t *tlsIO) decrypt(data []byte, scratch *[]byte) (plain []byte, err error) {
	var start time.Time
	if t.timed {
		start = time.Now()
	}
	t.in = data
	plain = (*scratch)[:0]
	for {
		if cap(plain)-len(plain) < maxTLSRecord {
			plain = append(plain, make([]byte, maxTLSRecord)...)[:len(plain)]
		}
		n, rerr := t.tc.Read(plain[len(plain):cap(plain)])
		plain = plain[:len(plain)+n]
		if rerr != nil {
			if rerr != errWouldBlock {
				err = rerr
			}
			break
		}
	}
	t.in = nil
	if cap(plain) <= 1<<20 {
		*scratch = plain // a large read's buffer is not kept
	}
	if t.timed {
		t.crypto += int64(time.Since(start))
	}
	return plain, err
}

// read decrypts what the loop read from c (decrypt) and sends at once what
// crypto/tls wrote while reading: its answer to a KeyUpdate, or the alert
// of a failure.
func (t *tlsIO) read(c gnet.Conn, data []byte, scratch *[]byte) ([]byte, error) {
	plain, err := t.decrypt(data, scratch)
	if out := t.pending(); len(out) > 0 {
		_, _ = c.Write(out)
	}
	return plain, err
}

// encrypt returns b sealed in records (and anything tc wrote before, such
// as a reply to the peer's KeyUpdate), valid until the next encrypt or
// decrypt.
func (t *tlsIO) encrypt(b []byte) []byte {
	var start time.Time
	if t.timed {
		start = time.Now()
	}
	_, _ = t.tc.Write(b)
	if t.timed {
		t.crypto += int64(time.Since(start))
	}
	return t.pending()
}

// pending returns, and forgets, what tc wrote that is not yet sent.
func (t *tlsIO) pending() []byte {
	out := t.out
	if cap(out) > 1<<20 {
		t.out = nil // a large reply's buffer is not kept
	} else {
		t.out = t.out[:0]
	}
	return out
}

// take returns the crypto time added since the last take, in ns.
func (t *tlsIO) take() int64 {
	c := t.crypto
	t.crypto = 0
	return c
}

func (t *tlsIO) Read(b []byte) (int, error) {
	if !t.onLoop {
		return t.nc.Read(b)
	}
	if len(t.in) == 0 {
		return 0, errWouldBlock
	}
	n := copy(b, t.in)
	t.in = t.in[n:]
	return n, nil
}

func (t *tlsIO) Write(b []byte) (int, error) {
	if !t.onLoop {
		return t.nc.Write(b)
	}
	t.out = append(t.out, b...)
	return len(b), nil
}

// Close closes the socket during the handshake (a timeout, a failure);
// on the loop gnet owns it.
func (t *tlsIO) Close() error {
	if !t.onLoop {
		return t.nc.Close()
	}
	return nil
}

func (t *tlsIO) LocalAddr() net.Addr  { return t.nc.LocalAddr() }
func (t *tlsIO) RemoteAddr() net.Addr { return t.nc.RemoteAddr() }

func (t *tlsIO) SetDeadline(d time.Time) error {
	if !t.onLoop {
		return t.nc.SetDeadline(d)
	}
	return nil
}

func (t *tlsIO) SetReadDeadline(d time.Time) error {
	if !t.onLoop {
		return t.nc.SetReadDeadline(d)
	}
	return nil
}

func (t *tlsIO) SetWriteDeadline(d time.Time) error {
	if !t.onLoop {
		return t.nc.SetWriteDeadline(d)
	}
	return nil
}

// dialUpstream connects to the engine at addr. Over TLS (cfg.UpstreamTLS
// set) it returns the TCP connection of the verified TLS connection and its
// record layer, to be enrolled on a loop; never falling back to plaintext.
func (p *Proxy) dialUpstream(addr string) (net.Conn, *tlsIO, error) {
	nc, err := p.dialer.Dial("tcp", addr)
	if err != nil || p.cfg.UpstreamTLS == nil {
		return nc, nil, err
	}
	// The one TLS dial of every engine connection (respconn.DialNet's
	// too): the configuration in use at this moment, the engine verified
	// for the server name configured or else the host dialed.
	tio := &tlsIO{nc: nc}
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), p.handshakeTimeout())
	tc, err := p.cfg.UpstreamTLS.Handshake(ctx, tio, addr)
	cancel()
	if err != nil {
		p.handshakeFailed(metrics.TLSSideUpstream, addr, err)
		return nil, nil, err
	}
	p.handshakeDone(metrics.TLSSideUpstream, start, tc)
	tio.tc, tio.onLoop = tc, true
	return nc, tio, nil
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
