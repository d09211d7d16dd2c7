package proxy_test

import (
	"bytes"
	"testing"
	"time"

	"github.com/respmeter/respmeter/internal/redistest"
	"github.com/respmeter/respmeter/internal/resp"
)

// TestQuitReachesEngine: where a client has one private engine connection
// (no route, or --route pinned to its shard), its QUIT is the engine's to
// answer: by the time the client reads +OK the engine has run QUIT and
// closed that connection, as directly, so what the engine does on the close
// (a CLIENT TRACKING redirect broken, the client gone from CLIENT LIST)
// comes before anything the client does next. The oracle is the engine's
// own count of QUIT calls, read right after +OK (the engine counts a
// command before it writes the reply). Shared connections cannot carry a
// client's QUIT: the proxy answers it there.
func TestQuitReachesEngine(t *testing.T) {
	t.Parallel()
	skipIfQuitLocal(t)
	e := e2eSetup(t)
	for _, tc := range []struct {
		name string
		req  []byte
		want string
	}{
		{"QUIT", respCmd("QUIT"), "+OK\r\n"},
		{"inline QUIT", []byte("QUIT\r\n"), "+OK\r\n"},
		{"PING then QUIT", respJoin(respCmd("PING"), respCmd("QUIT")), "+PONG\r\n+OK\r\n"},
		{"QUIT then PING", respJoin(respCmd("QUIT"), respCmd("PING")), "+OK\r\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := commandstats(t, e.srv)["quit"]
			got, closed := redistest.Exchange(t, e.paddr, [][]byte{tc.req}, redistest.ExchangeOptions{Timeout: 5 * time.Second})
			after := commandstats(t, e.srv)["quit"]
			eqBytes(t, "via proxy", got, tc.want)
			if !closed {
				t.Errorf("connection not closed after %s", tc.name)
			}
			if after != before+1 {
				t.Errorf("engine's QUIT calls went %d -> %d when the client read +OK: want one more (the engine answers it)", before, after)
			}
		})
	}
	e.healthy(t)
}

// TestQuitBreaksTrackingRedirect: a RESP3 client tracks keys with its
// invalidations redirected to another client, which then QUITs through the
// proxy; a write from a third client after that +OK finds the redirect
// gone, and the tracking client gets the engine's tracking-redir-broken
// push (Redis's own suite, unit/tracking), in every round. In every shape:
// the redirect client's CLIENT ID gives it a connection of its own (under
// shared connections it moves to one; under --route slots QUIT goes to each
// shard connection the client has).
func TestQuitBreaksTrackingRedirect(t *testing.T) {
	t.Parallel()
	e := e2eSetup(t)
	const rounds = 20
	for i := range rounds {
		redir := redistest.Dial(t, e.paddr)
		redir.Send(t, respCmd("CLIENT", "ID"))
		idReply, err := redir.ReadFrame(5 * time.Second)
		if err != nil || len(idReply) < 4 || idReply[0] != resp.TypeInteger {
			t.Fatalf("round %d: CLIENT ID: %q %v", i, idReply, err)
		}
		rid := string(idReply[1 : len(idReply)-2])

		tr := redistest.Dial(t, e.paddr)
		tr.Send(t, respJoin(respCmd("HELLO", "3"), respCmd("CLIENT", "TRACKING", "on", "REDIRECT", rid), respCmd("GET", "qt:k")))
		for range 3 {
			if _, err := tr.ReadFrame(5 * time.Second); err != nil {
				t.Fatalf("round %d: tracking client's setup: %v", i, err)
			}
		}
		redir.Roundtrip(t, respCmd("QUIT"), []byte("+OK\r\n"))
		e.srv.DoT(t, "SET", "qt:k", "v")
		b, err := tr.ReadWhile(func(b []byte) bool { return bytes.Contains(b, []byte("tracking-redir-broken")) }, 5*time.Second)
		if err != nil {
			t.Fatalf("round %d of %d: no tracking-redir-broken push after the redirect client's QUIT and a write: got %q (%v)", i+1, rounds, b, err)
		}
		_ = tr.Close()
		_ = redir.Close()
	}
	e.healthy(t)
}

// skipIfQuitLocal skips a test of a QUIT the engine answers where respmeter
// answers it: no engine connection is the client's own.
func skipIfQuitLocal(t *testing.T) {
	t.Helper()
	if sharedMode() {
		t.Skip("--upstream-mode shared: QUIT is answered by the proxy (a shared connection is not the client's)")
	}
	skipIfRouted(t, "a client's requests go to several shards' connections, none of which is its own: the proxy answers QUIT")
}
