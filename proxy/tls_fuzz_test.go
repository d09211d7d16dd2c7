package proxy_test

import (
	"bytes"
	"context"
	"crypto/tls"
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

// FuzzTLSRecords feeds arbitrary bytes to the record layer a TLS client
// meets once its handshake is done, which runs on the event loop: after a
// PING answered, the input goes on the client's socket as it is, then a
// half close. The proxy closes the connection, never panics, and serves
// a TLS client after every input.
func FuzzTLSRecords(f *testing.F) {
	e := tlsSetup(f, tlsconf.AuthClientsNo, nil)
	f.Add([]byte{})
	f.Add([]byte("*1\r\n$4\r\nPING\r\n"))                                    // plaintext after the handshake
	f.Add([]byte{0x17, 0x03, 0x03, 0x00, 0x20, 0x01})                        // an application data record, cut
	f.Add(bytes.Repeat([]byte{0x17, 0x03, 0x03, 0x00, 0x01, 0x00}, 3))       // records too short for their tag
	f.Add([]byte{0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 0x28})                  // an alert in the clear
	f.Add(append([]byte{0x17, 0x03, 0x03, 0x40, 0x11}, make([]byte, 64)...)) // a record over the size limit
	good := e.client(f, e.ca.ClientConfig())
	cfg := e.ca.ClientConfig()
	cfg.ServerName = "127.0.0.1"
	f.Fuzz(func(t *testing.T, in []byte) {
		raw, err := net.Dial("tcp", e.addr)
		if err != nil {
			t.Fatal(err)
		}
		defer raw.Close()
		_ = raw.SetDeadline(time.Now().Add(5 * time.Second))
		tc := tls.Client(raw, cfg)
		if _, err := tc.Write([]byte("*1\r\n$4\r\nPING\r\n")); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 4096)
		if n, err := tc.Read(buf); err != nil || string(buf[:n]) != "+PONG\r\n" {
			t.Fatalf("PING before the input: %q, %v", buf[:n], err)
		}
		_, _ = raw.Write(in) // the proxy may have closed already
		_ = raw.(*net.TCPConn).CloseWrite()
		for {
			if _, err := raw.Read(buf); err != nil {
				if isTimeout(err) {
					t.Fatal("not closed within 5 s of the input and its half close")
				}
				break
			}
		}
		if err := good.Ping(context.Background()).Err(); err != nil {
			t.Fatalf("a TLS client after the input: %v", err)
		}
	})
}
