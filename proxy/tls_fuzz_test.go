package proxy_test

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/respmeter/respmeter/internal/tlsconf"
	"github.com/respmeter/respmeter/proxy"
)

// FuzzTLSListener feeds arbitrary bytes to the TLS listener of one proxy
// in front of a TLS engine, then ends its side of the stream: each
// connection is closed by the proxy, never panics it, and a TLS client is
// served after every input.
//
// The input is followed by a half close (FIN) rather than silence: most
// inputs are a cut record on which the proxy waits for more, and waiting
// out the handshake timeout cost each of them 200 ms, so that minimizing
// one new input (hundreds of runs) showed as minutes at 0 execs per
// second. A client that goes silent mid-handshake is TestTLSBadInput's
// (silent, truncated).
func FuzzTLSListener(f *testing.F) {
	const timeout = 200 * time.Millisecond
	e := tlsSetup(f, tlsconf.AuthClientsNo, func(_ *tlsEnv, c *proxy.Config) { c.TLSHandshakeTimeout = timeout })
	hello := clientHello(f)
	f.Add(hello)
	f.Add(hello[:len(hello)/2])
	f.Add(append(hello[:len(hello):len(hello)], "*1\r\n$4\r\nPING\r\n"...))
	f.Add([]byte("*1\r\n$4\r\nPING\r\n"))
	f.Add([]byte{0x16, 0x03, 0x01, 0xff, 0xff})
	f.Add([]byte{})
	good := e.client(f, e.ca.ClientConfig())
	f.Fuzz(func(t *testing.T, in []byte) {
		c, err := net.Dial("tcp", e.addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(20 * timeout))
		_, _ = c.Write(in) // the proxy may have closed already
		_ = c.(*net.TCPConn).CloseWrite()
		buf := make([]byte, 4096)
		for {
			if _, err := c.Read(buf); err != nil {
				if isTimeout(err) {
					t.Fatalf("not closed within %v of the handshake timeout %v", 20*timeout, timeout)
				}
				break
			}
		}
		if err := good.Ping(context.Background()).Err(); err != nil {
			t.Fatalf("a TLS client after the input: %v", err)
		}
	})
}
