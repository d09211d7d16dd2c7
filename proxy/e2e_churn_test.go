package proxy_test

import (
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/respmeter/respmeter/internal/redistest"
	"github.com/respmeter/respmeter/proxy/proxytest"
)

// TestUpstreamClientKill: the engine closes one upstream connection (CLIENT
// KILL, as an operator or a timeout would). Only the client behind it is
// affected: its pending requests get an error reply, then it is closed; a
// neighbour keeps working and a new connection works.
func TestUpstreamClientKill(t *testing.T) {
	redistest.VerifyNoLeaks(t)
	e := e2eSetup(t)
	victim := redistest.Dial(t, e.paddr)
	victim.Roundtrip(t, respCmd("CLIENT", "SETNAME", "victim"), []byte("+OK\r\n"))
	neighbour := redistest.Dial(t, e.paddr)
	neighbour.Roundtrip(t, respCmd("PING"), []byte("+PONG\r\n"))

	// A blocked request keeps something pending on the victim's upstream.
	victim.Send(t, respCmd("BLPOP", "kill:empty", "0"))
	redistest.Eventually(t, 3*time.Second, func() error {
		if list := e.srv.DoT(t, "CLIENT", "LIST").(string); !strings.Contains(list, "name=victim age=") || !strings.Contains(list, "cmd=blpop") {
			return errors.New("BLPOP never reached the engine")
		}
		return nil
	})
	if n := e.srv.DoT(t, "CLIENT", "KILL", "USER", "default", "SKIPME", "yes"); n == int64(0) {
		t.Fatalf("CLIENT KILL killed %v clients", n)
	}
	// Routed by slot on a connection of its own (a blocking command moves
	// a shared client to one), the victim keeps its connection after the
	// error, as a cluster client keeps its other node connections
	// (docs/sessions-housekeeping.md); otherwise it is closed, as a direct
	// client of the engine is.
	if routedMode() {
		got, err := victim.ReadFrame(3 * time.Second)
		if err != nil || !strings.HasPrefix(string(got), "-ERR upstream") || victim.Closed() {
			t.Errorf("victim got %q %v (closed=%v); want -ERR upstream ..., the connection kept", got, err, victim.Closed())
		}
	} else if got, closed := victim.ReadToClose(3 * time.Second); !closed || !strings.HasPrefix(string(got), "-ERR upstream") {
		t.Errorf("victim got %q (closed=%v); want -ERR upstream ..., then close", got, closed)
	}
	// The neighbour's upstream was killed too (CLIENT KILL USER default
	// takes every proxied connection); with nothing pending it is simply
	// closed, and a new connection works.
	e.healthy(t)
}

// TestConnectDisconnectChurn: 10,000 connect / PING / disconnect cycles,
// half closed cleanly and half reset, leave no goroutine or descriptor
// behind and the proxy healthy.
func TestConnectDisconnectChurn(t *testing.T) {
	redistest.VerifyNoLeaks(t)
	e := e2eSetup(t)
	n := 10000
	if testing.Short() {
		n = 1000
	}
	ping := respCmd("PING")
	buf := make([]byte, 7)
	for i := 0; i < n; i++ {
		c, err := net.Dial("tcp", e.paddr)
		if err != nil {
			t.Fatalf("cycle %d: %v", i, err)
		}
		if i%2 == 0 {
			_ = c.SetDeadline(time.Now().Add(5 * time.Second))
			if _, err := c.Write(ping); err != nil {
				t.Fatalf("cycle %d: write: %v", i, err)
			}
			if _, err := readFull(c, buf); err != nil || string(buf) != "+PONG\r\n" {
				t.Fatalf("cycle %d: got %q, %v", i, buf, err)
			}
			_ = c.Close()
		} else {
			_ = c.(*net.TCPConn).SetLinger(0) // RST
			_ = c.Close()
		}
	}
	e.healthy(t)
	// With shared upstream connections, the loops' shared ones stay open
	// (one per loop and protocol at most).
	maxUp := int64(0)
	if sharedMode() {
		maxUp = 2 * proxytest.DefaultLoops
	}
	redistest.Eventually(t, 5*time.Second, func() error {
		// The gauges must come back to 0, never below: a client that
		// leaves before its upstream is open must not count an upstream
		// close.
		if k := e.set.Counters(); k.ClientConns != 0 || k.UpstreamConns > maxUp || k.UpstreamConns < 0 {
			return fmt.Errorf("after churn: %d client and %d upstream connections open, want 0 and at most %d", k.ClientConns, k.UpstreamConns, maxUp)
		}
		return nil
	})
	if got := e.set.Counters().ClientConnsTotal; got < int64(n) {
		t.Errorf("accepted %d connections, want >= %d", got, n)
	}
}

func readFull(c net.Conn, b []byte) (int, error) {
	n := 0
	for n < len(b) {
		k, err := c.Read(b[n:])
		n += k
		if err != nil {
			return n, err
		}
	}
	return n, nil
}
