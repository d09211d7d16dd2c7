package proxy_test

import (
	"bytes"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/respmeter/respmeter/metrics"

	"github.com/respmeter/respmeter/internal/redistest"
	"github.com/respmeter/respmeter/internal/tlsconf"
	"github.com/respmeter/respmeter/proxy"
	"github.com/respmeter/respmeter/proxy/proxytest"
	"github.com/respmeter/respmeter/routing/command"
)

// tlsFrameConn is a client's TLS connection read frame by frame, as
// redistest.Conn reads a plaintext one.
type tlsFrameConn struct {
	c   *tls.Conn
	buf []byte
}

func (c *tlsFrameConn) Write(b []byte) error {
	_ = c.c.SetWriteDeadline(time.Now().Add(redistest.DefaultTimeout))
	_, err := c.c.Write(b)
	return err
}

// ReadFrame returns the next whole RESP frame, within timeout.
func (c *tlsFrameConn) ReadFrame(timeout time.Duration) ([]byte, error) {
	_ = c.c.SetReadDeadline(time.Now().Add(timeout))
	chunk := make([]byte, 4096)
	for {
		n, err := redistest.FrameLen(c.buf)
		if err != nil {
			return nil, err
		}
		if n > 0 {
			f := append([]byte(nil), c.buf[:n]...)
			c.buf = c.buf[n:]
			return f, nil
		}
		m, err := c.c.Read(chunk)
		c.buf = append(c.buf, chunk[:m]...)
		if err != nil {
			return c.buf, err
		}
	}
}

// spTLSServer returns a test CA and a TLS listener's configuration with a
// certificate of it, asking clients for none.
func spTLSServer(t testing.TB) (*redistest.CA, *tls.Config) {
	t.Helper()
	ca := redistest.NewCA(t)
	cert := ca.IssueValid("respmeter")
	server, err := tlsconf.Server(cert.CertFile, cert.KeyFile, "", tlsconf.AuthClientsNo, tlsconf.Suites{})
	if err != nil {
		t.Fatal(err)
	}
	return ca, server
}

// TestSplitPathDelayTLS: with clients on respmeter's TLS listener, the
// path still reads what a known network delay between respmeter and the
// engine adds: the decryption and encryption of the client's records (its
// tls phase) stay out of the upstream phase. Two proxies serving TLS in
// front of the same engine, each behind a plaintext delay relay (0, the
// baseline, and 5 ms each way: large against the wake-up costs of hops
// that idle behind the delay, TestSplitPathDelay), 300 sequential GETs
// each on one TLS connection in alternating blocks of 100; the path's p50
// (upstream p50 minus the engine's mean, from a Poller on the real engine)
// must grow by 10 ms ±5%.
func TestSplitPathDelayTLS(t *testing.T) {
	redistest.SkipIfUnavailable(t)
	redistest.Retry(t, 3, splitPathDelayTLS)
}

func splitPathDelayTLS(t testing.TB) {
	spMoreProcs(t)
	srv := redistest.Start(t)
	srv.Do("SET", "sp:k", "v")
	poller := spStartPoller(t, srv.Addr())
	ca, server := spTLSServer(t)
	const (
		oneWay = 5 * time.Millisecond
		blocks = 3
		n      = 100 // per block
	)
	get := respCmd("GET", "sp:k")
	legs := []*spLeg{
		{name: "TLS, 0 delay", relay: redistest.StartDelayRelay(t, srv.Addr(), 0)},
		{name: "TLS, 5ms each way", relay: redistest.StartDelayRelay(t, srv.Addr(), oneWay)},
	}
	for _, l := range legs {
		var p *proxy.Proxy
		p, l.set = proxytest.StartProxy(t, l.relay, func(c *proxy.Config) {
			c.TLSListen, c.TLS = "127.0.0.1:0", server
		})
		tc, err := tls.Dial("tcp", p.TLSAddr(), ca.ClientConfig())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = tc.Close() })
		l.c = &tlsFrameConn{c: tc}
		spRoundTrips(t, l.c, get, 20, 0) // dial the upstream, warm up
		spWaitTimed(t, l.set, command.Get, 20)
	}
	spWaitPolls(t, poller, 2)
	for range blocks {
		for _, l := range legs {
			spBlock(t, poller, l, get, n)
		}
	}
	paths := make([]time.Duration, len(legs))
	for i, l := range legs {
		if l.eng.calls == 0 {
			t.Fatal(errors.New("no engine calls counted"))
		}
		engMean := l.eng.time / time.Duration(l.eng.calls)
		paths[i] = l.up.Percentile(50) - engMean
		t.Logf("%-18s upstream p50 %v mean %v | engine mean %v (%d calls) | path p50 %v",
			l.name, l.up.Percentile(50), l.up.Mean(), engMean, l.eng.calls, paths[i])
	}
	want := 2 * oneWay
	delta := paths[1] - paths[0]
	t.Logf("path delta %v (want %v ±5%%: %s)", delta, want, spPct(delta, want))
	if !spWithin(delta, want, want/20) {
		t.Errorf("behind a TLS listener the path p50 grew by %v with %v each way; want %v ±5%%", delta, oneWay, want)
	}
}

// TestSplitTLSCrypto: the tls phase reads the proxy's own crypto time. A
// TLS client SETs and GETs a 1 MiB value through a TLS respmeter behind a
// plaintext 1 ms each-way delay relay, in alternating blocks: a SET's tls
// is mostly the decryption of its 1 MiB request, a GET's the encryption of
// a 1 MiB reply (the one before it: bookTLS). The oracle, measured in the
// same run between the blocks, is the CPU time of this thread
// (CLOCK_THREAD_CPUTIME_ID, locked to it) that crypto/tls takes, as a
// server with the same certificate, to decrypt the same request and to
// encrypt the same reply in 32 KiB writes (the proxy encrypts a streamed
// reply piece by piece, as the engine's bytes arrive), over a socket it
// never waits on. Medians on both sides, so that a preempted command or
// run does not decide; the tls p50s must be within [0.8, 1.6]x the
// oracle's: the phase is wall-clock time (a thread waiting for a CPU inside
// crypto/tls counts) and holds the record bookkeeping and copies around
// the cipher (under -race, whose instrumentation differs between the two,
// the counts only). A plaintext client on the same proxy adds no tls.
func TestSplitTLSCrypto(t *testing.T) {
	redistest.SkipIfUnavailable(t)
	redistest.Retry(t, 3, splitTLSCrypto)
}

func splitTLSCrypto(t testing.TB) {
	spMoreProcs(t)
	srv := redistest.Start(t)
	ca, server := spTLSServer(t)
	relay := redistest.StartDelayRelay(t, srv.Addr(), time.Millisecond)
	p, set := proxytest.StartProxy(t, relay, func(c *proxy.Config) {
		c.TLSListen, c.TLS = "127.0.0.1:0", server
	})
	tc, err := tls.Dial("tcp", p.TLSAddr(), ca.ClientConfig())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tc.Close() })
	c := &tlsFrameConn{c: tc}
	value := strings.Repeat("v", 1<<20)
	setReq, getReq := respCmd("SET", "tc:k", value), respCmd("GET", "tc:k")
	reply := []byte(fmt.Sprintf("$%d\r\n%s\r\n", len(value), value))
	spRoundTrips(t, c, setReq, 3, 0) // dial the upstream, warm up
	spRoundTrips(t, c, getReq, 3, 0)

	o := newCryptoOracle(t, server, ca.ClientConfig())
	blocks, n, oracleRuns := 3, 12, 8
	timing := !redistest.RaceEnabled()
	if !timing {
		// Under -race the instrumented code paths differ: the counts and
		// the plaintext client only, on a short run.
		blocks, n, oracleRuns = 1, 3, 1
	}
	var dec, enc []time.Duration
	s0 := spWaitTimed(t, set, command.Get, 3)
	for range blocks {
		for range oracleRuns {
			dec = append(dec, o.decrypt(t, setReq))
		}
		spRoundTrips(t, c, setReq, n, 0)
		for range oracleRuns {
			enc = append(enc, o.encrypt(t, reply))
		}
		spRoundTrips(t, c, getReq, n, 0)
	}
	s1 := spWaitTimed(t, set, command.Get, int64(3+blocks*n))
	s1 = spWaitTimed(t, set, command.Set, spCmd(s1, command.Set).Phases[metrics.PhaseTotal].Count()) // (the GETs were last)
	setTLS := spPhase(s0, s1, command.Set, metrics.PhaseTLS)
	getTLS := spPhase(s0, s1, command.Get, metrics.PhaseTLS)
	if want := int64(blocks * n); setTLS.Count() != want || getTLS.Count() != want {
		t.Fatalf("tls timed %d SETs and %d GETs, want %d each", setTLS.Count(), getTLS.Count(), blocks*n)
	}
	decP50, encP50 := spMedian(dec), spMedian(enc)
	for _, r := range []struct {
		what      string
		got, want time.Duration
	}{
		{"SET (decrypting 1 MiB)", setTLS.Percentile(50), decP50},
		{"GET (encrypting 1 MiB)", getTLS.Percentile(50), encP50},
	} {
		ratio := float64(r.got) / float64(r.want)
		t.Logf("%s: tls p50 %v, oracle's CPU time %v (%.2fx)", r.what, r.got, r.want, ratio)
		if timing && (ratio < 0.8 || ratio > 1.6) {
			t.Errorf("%s: tls p50 %v against the oracle's %v of CPU time (%.2fx); want 0.8x .. 1.6x", r.what, r.got, r.want, ratio)
		}
	}
	// The phase is a part of proxy, and proxy of total.
	for _, id := range []command.ID{command.Set, command.Get} {
		tlsSum := spPhase(s0, s1, id, metrics.PhaseTLS).Sum
		if px := spPhase(s0, s1, id, metrics.PhaseProxy).Sum; px < tlsSum {
			t.Errorf("%s: proxy sum %v below its tls sum %v", id.Name(), px, tlsSum)
		}
	}

	// A plaintext client: timed, with no tls.
	pc := redistest.Dial(t, p.Addr())
	spRoundTrips(t, pc, getReq, n, 0)
	s2 := spWaitTimed(t, set, command.Get, spCmd(s1, command.Get).Phases[metrics.PhaseTotal].Count()+int64(n))
	if d := spPhase(s1, s2, command.Get, metrics.PhaseTLS); d.Count() != 0 || d.Sum != 0 {
		t.Errorf("a plaintext client's GETs added %d tls observations (%v)", d.Count(), d.Sum)
	}
}

// spMedian returns the median of ds (sorted in place).
func spMedian(ds []time.Duration) time.Duration {
	slices.Sort(ds)
	return ds[len(ds)/2]
}

// cryptoOracle is a TLS server connection, handshaken over loopback TCP
// with the proxy's configuration, whose socket can be swapped for memory
// (oracleConn), so that its crypto runs without waiting on anything.
type cryptoOracle struct {
	srv, cli   *tls.Conn
	sraw, craw *oracleConn
}

// oracleConn is a socket that, once sink is set, takes writes into it,
// and once in is set, serves reads from it.
type oracleConn struct {
	net.Conn
	sink io.Writer
	out  bytes.Buffer
	in   *bytes.Reader
}

func (c *oracleConn) Write(b []byte) (int, error) {
	if c.sink != nil {
		return c.sink.Write(b)
	}
	return c.Conn.Write(b)
}

func (c *oracleConn) Read(b []byte) (int, error) {
	if c.in != nil {
		return c.in.Read(b)
	}
	return c.Conn.Read(b)
}

func newCryptoOracle(t testing.TB, server, client *tls.Config) *cryptoOracle {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		accepted <- c
	}()
	cc, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	sc := <-accepted
	if sc == nil {
		t.Fatal("oracle: accept failed")
	}
	client = client.Clone()
	if client.ServerName == "" {
		client.ServerName = "127.0.0.1" // as tls.Dial takes it from the address
	}
	o := &cryptoOracle{sraw: &oracleConn{Conn: sc}, craw: &oracleConn{Conn: cc}}
	o.srv, o.cli = tls.Server(o.sraw, server), tls.Client(o.craw, client)
	t.Cleanup(func() { _ = sc.Close(); _ = cc.Close() })
	for _, c := range []net.Conn{sc, cc} {
		_ = c.SetDeadline(time.Now().Add(redistest.DefaultTimeout))
	}
	errc := make(chan error, 1)
	go func() { errc <- o.srv.Handshake() }()
	if err := errors.Join(o.cli.Handshake(), <-errc); err != nil {
		t.Fatal(err)
	}
	// From here on, in memory: the server's records are dropped (they
	// are only encrypted), the client's kept for the server to decrypt.
	o.sraw.sink, o.craw.sink = io.Discard, &o.craw.out
	return o
}

// threadCPU returns the calling thread's CPU time.
func threadCPU(t testing.TB) time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ts.Nano())
}

// encrypt returns the CPU time the server takes to encrypt b in 32 KiB
// writes.
func (o *cryptoOracle) encrypt(t testing.TB, b []byte) time.Duration {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	start := threadCPU(t)
	for len(b) > 0 {
		k := min(len(b), 32<<10)
		if _, err := o.srv.Write(b[:k]); err != nil {
			t.Fatal(err)
		}
		b = b[k:]
	}
	return threadCPU(t) - start
}

// decrypt returns the CPU time the server takes to decrypt b, as the
// client's one write sent it, in 32 KiB reads.
func (o *cryptoOracle) decrypt(t testing.TB, b []byte) time.Duration {
	o.craw.out.Reset()
	if _, err := o.cli.Write(b); err != nil {
		t.Fatal(err)
	}
	o.sraw.in = bytes.NewReader(o.craw.out.Bytes())
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	buf := make([]byte, 32<<10)
	start := threadCPU(t)
	for got := 0; got < len(b); {
		k, err := o.srv.Read(buf)
		if err != nil {
			t.Fatal(err)
		}
		got += k
	}
	return threadCPU(t) - start
}
