package proxy_test

// A TLS client's records once its handshake is done: the event loop
// decrypts them (tlsIO), so a record cut anywhere, a record that came with
// the handshake's last message, a forged record and bytes that are no
// record at all each meet the loop, not a goroutine of their own.

import (
	"bytes"
	"context"
	"crypto/tls"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/respmeter/respmeter/internal/tlsconf"
)

// heldConn is a TLS client's TCP connection whose writes can be held
// (collected, sent later in one write), from now or after the next
// passing write, sent a byte at a time, or have one bit of the next write
// flipped.
type heldConn struct {
	net.Conn
	mu        sync.Mutex
	hold      bool
	holdAfter bool
	held      []byte
	trickle   time.Duration // > 0: each byte written alone, this far apart
	flip      bool
}

func (c *heldConn) Write(b []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.hold:
		c.held = append(c.held, b...)
		return len(b), nil
	case c.holdAfter:
		c.holdAfter, c.hold = false, true
	case c.flip:
		c.flip = false
		b = bytes.Clone(b)
		b[len(b)-1] ^= 0x40 // in the record's authentication tag
	case c.trickle > 0:
		for i := range b {
			if _, err := c.Conn.Write(b[i : i+1]); err != nil {
				return i, err
			}
			time.Sleep(c.trickle)
		}
		return len(b), nil
	}
	return c.Conn.Write(b)
}

// release sends what was held, in one write, and stops holding.
func (c *heldConn) release() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.hold = false
	_, err := c.Conn.Write(c.held)
	return err
}

func (c *heldConn) set(f func(c *heldConn)) {
	c.mu.Lock()
	f(c)
	c.mu.Unlock()
}

// readReply reads one line-sized reply through tc within 5 s.
func readReply(t *testing.T, tc *tls.Conn) string {
	t.Helper()
	_ = tc.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 64)
	n, err := tc.Read(buf)
	if err != nil {
		t.Fatalf("reading the reply: %v (got %q)", err, buf[:n])
	}
	return string(buf[:n])
}

// awaitClosed fails unless the proxy closes raw within 5 s.
func awaitClosed(t *testing.T, raw net.Conn) {
	t.Helper()
	_ = raw.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 1024)
	for {
		if _, err := raw.Read(buf); err != nil {
			if isTimeout(err) {
				t.Fatal("the proxy did not close the connection within 5 s")
			}
			return
		}
	}
}

func TestTLSRecordsOnLoop(t *testing.T) {
	t.Parallel()
	e := tlsSetup(t, tlsconf.AuthClientsNo, nil)
	ctx := context.Background()
	good := e.client(t, e.ca.ClientConfig())
	dial := func(t *testing.T) (*heldConn, *tls.Conn) {
		t.Helper()
		nc, err := net.Dial("tcp", e.addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = nc.Close() })
		hc := &heldConn{Conn: nc}
		cfg := e.ca.ClientConfig()
		cfg.ServerName = "127.0.0.1"
		return hc, tls.Client(hc, cfg)
	}
	ping := []byte("*1\r\n$4\r\nPING\r\n")

	// TLS 1.3: the client's Finished is its last handshake message and
	// needs no answer, so a client may send its first request in the same
	// segment; the proxy's handshake then reads that request's record
	// with the Finished, and no more bytes come to wake the loop.
	t.Run("request with the Finished", func(t *testing.T) {
		hc, tc := dial(t)
		hc.set(func(c *heldConn) { c.holdAfter = true }) // the ClientHello passes
		if err := tc.Handshake(); err != nil {
			t.Fatal(err)
		}
		if _, err := tc.Write(ping); err != nil {
			t.Fatal(err)
		}
		if err := hc.release(); err != nil {
			t.Fatal(err)
		}
		if got := readReply(t, tc); got != "+PONG\r\n" {
			t.Fatalf("got %q, want +PONG", got)
		}
	})

	t.Run("records a byte at a time", func(t *testing.T) {
		hc, tc := dial(t)
		if err := tc.Handshake(); err != nil {
			t.Fatal(err)
		}
		hc.set(func(c *heldConn) { c.trickle = time.Millisecond })
		req := bytes.Repeat([]byte("*3\r\n$3\r\nSET\r\n$5\r\nbytes\r\n$3\r\none\r\n"), 2)
		if _, err := tc.Write(req); err != nil {
			t.Fatal(err)
		}
		got := ""
		for len(got) < len("+OK\r\n+OK\r\n") {
			got += readReply(t, tc)
		}
		if got != "+OK\r\n+OK\r\n" {
			t.Fatalf("got %q, want two +OK", got)
		}
		if v, err := good.Get(ctx, "bytes").Result(); err != nil || v != "one" {
			t.Fatalf("GET bytes: %q, %v", v, err)
		}
	})

	t.Run("forged record", func(t *testing.T) {
		hc, tc := dial(t)
		if _, err := tc.Write(ping); err != nil {
			t.Fatal(err)
		}
		if got := readReply(t, tc); got != "+PONG\r\n" {
			t.Fatalf("got %q, want +PONG", got)
		}
		hc.set(func(c *heldConn) { c.flip = true })
		if _, err := tc.Write(ping); err != nil {
			t.Fatal(err)
		}
		_ = tc.SetReadDeadline(time.Now().Add(5 * time.Second))
		n, err := tc.Read(make([]byte, 64))
		// crypto/tls reports the peer's alert as "remote error: tls: <alert>".
		if n != 0 || err == nil || !strings.Contains(err.Error(), "remote error: tls: bad record MAC") {
			t.Fatalf("after a forged record: read %d bytes, %v; want the proxy's bad_record_mac alert", n, err)
		}
		awaitClosed(t, hc.Conn)
	})

	t.Run("plaintext after the handshake", func(t *testing.T) {
		hc, tc := dial(t)
		if err := tc.Handshake(); err != nil {
			t.Fatal(err)
		}
		if _, err := hc.Conn.Write(ping); err != nil {
			t.Fatal(err)
		}
		awaitClosed(t, hc.Conn)
	})

	// close_notify ends the client's requests, not its replies: the
	// request sent before it is answered.
	t.Run("close_notify", func(t *testing.T) {
		hc, tc := dial(t)
		if err := tc.Handshake(); err != nil {
			t.Fatal(err)
		}
		hc.set(func(c *heldConn) { c.hold = true })
		if _, err := tc.Write([]byte("*2\r\n$4\r\nECHO\r\n$4\r\nlast\r\n")); err != nil {
			t.Fatal(err)
		}
		if err := tc.CloseWrite(); err != nil {
			t.Fatal(err)
		}
		_ = hc.Conn.SetWriteDeadline(time.Time{}) // crypto/tls's CloseWrite leaves one in the past
		if err := hc.release(); err != nil {
			t.Fatal(err)
		}
		if got := readReply(t, tc); got != "$4\r\nlast\r\n" {
			t.Fatalf("got %q, want the ECHO's reply", got)
		}
	})

	if err := good.Ping(ctx).Err(); err != nil {
		t.Errorf("another TLS client after the bad ones: %v", err)
	}
}
