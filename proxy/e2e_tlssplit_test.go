package proxy_test

import (
	"crypto/tls"
	"errors"
	"testing"
	"time"

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

// TestSplitPathDelayTLS: with clients on respmeter's TLS listener, the
// path still reads what a known network delay between respmeter and the
// engine adds: the decryption and encryption (off the event loops, in the
// TLS bridge) stay out of the upstream phase. Two proxies serving TLS in
// front of the same engine, each behind a plaintext delay relay (0, the
// baseline, and 1 ms each way), 300 sequential GETs each on one TLS
// connection in alternating blocks of 100; the path's p50 (upstream p50
// minus the engine's mean, from a Poller on the real engine) must grow by
// 2 ms ±10%.
func TestSplitPathDelayTLS(t *testing.T) {
	redistest.SkipIfUnavailable(t)
	redistest.Retry(t, 3, splitPathDelayTLS)
}

func splitPathDelayTLS(t testing.TB) {
	spMoreProcs(t)
	srv := redistest.Start(t)
	srv.Do("SET", "sp:k", "v")
	poller := spStartPoller(t, srv.Addr())
	ca := redistest.NewCA(t)
	cert := ca.IssueValid("respmeter")
	server, err := tlsconf.Server(cert.CertFile, cert.KeyFile, "", tlsconf.AuthClientsNo)
	if err != nil {
		t.Fatal(err)
	}
	const (
		oneWay = time.Millisecond
		blocks = 3
		n      = 100 // per block
	)
	get := respCmd("GET", "sp:k")
	legs := []*spLeg{
		{name: "TLS, 0 delay", relay: redistest.StartDelayRelay(t, srv.Addr(), 0)},
		{name: "TLS, 1ms each way", relay: redistest.StartDelayRelay(t, srv.Addr(), oneWay)},
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
	t.Logf("path delta %v (want %v ±10%%: %s)", delta, want, spPct(delta, want))
	if !spWithin(delta, want, want/10) {
		t.Errorf("behind a TLS listener the path p50 grew by %v with %v each way; want %v ±10%%", delta, oneWay, want)
	}
}
