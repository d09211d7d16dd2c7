package proxy_test

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/respmeter/respmeter/internal/redistest"
	"github.com/respmeter/respmeter/internal/resp"
	"github.com/respmeter/respmeter/proxy"
	"github.com/respmeter/respmeter/proxy/proxytest"
)

// sessionModes are the default shape (the client's own engine connection)
// and those in which the proxy opens engine connections on a client's
// behalf (one engine: under slots it is the only shard).
var sessionModes = []struct {
	name string
	mod  func(addr string) func(*proxy.Config)
}{
	{"private", func(string) func(*proxy.Config) {
		return func(c *proxy.Config) { c.UpstreamMode = proxy.UpstreamPrivate }
	}},
	{"shared", func(string) func(*proxy.Config) {
		return func(c *proxy.Config) { c.UpstreamMode = proxy.UpstreamShared }
	}},
	{"slots", func(a string) func(*proxy.Config) {
		return func(c *proxy.Config) {
			c.Route, c.Shards, c.UpstreamMode = proxy.RouteSlots, []string{a}, proxy.UpstreamPrivate
		}
	}},
	{"slots+shared", func(a string) func(*proxy.Config) {
		return func(c *proxy.Config) {
			c.Route, c.Shards, c.UpstreamMode = proxy.RouteSlots, []string{a}, proxy.UpstreamShared
		}
	}},
}

// TestSessionStateSentOnce: a connection-state command that opens the
// client's first engine connection reaches the engine once, not replayed
// and then forwarded (MONITOR showed it twice; ACL LOG counted 2 failures
// for 1 AUTH; a BCAST tracking prefix overlapped itself).
func TestSessionStateSentOnce(t *testing.T) {
	srv := redistest.Start(t)
	for _, m := range sessionModes {
		t.Run(m.name, func(t *testing.T) {
			mon := redistest.Dial(t, srv.Addr())
			defer mon.Close()
			mon.Roundtrip(t, redistest.Cmd("MONITOR"), []byte("+OK\r\n"))
			srv.Do("ACL", "LOG", "RESET")
			p, _ := proxytest.StartProxy(t, srv.Addr(), m.mod(srv.Addr()))
			c := redistest.Dial(t, p.Addr())
			defer c.Close()
			c.Roundtrip(t, redistest.Cmd("AUTH", "nobody", "wrong"),
				[]byte("-WRONGPASS invalid username-password pair or user is disabled.\r\n"))
			// Identical failures share one ACL LOG entry: its count says
			// how many there were.
			var failures int64
			for _, entry := range srv.Do("ACL", "LOG").([]any) {
				failures += entry.(map[any]any)["count"].(int64) // (a RESP3 map: the test client speaks RESP3)
			}
			if failures != 1 {
				t.Errorf("ACL LOG counts %d failures for one failed AUTH, want 1", failures)
			}
			d := redistest.Dial(t, p.Addr())
			defer d.Close()
			d.Roundtrip(t, redistest.Cmd("CLIENT", "TRACKING", "on", "BCAST", "PREFIX", "user:"), []byte("+OK\r\n"))
			n := redistest.Dial(t, p.Addr())
			defer n.Close()
			n.Roundtrip(t, redistest.Cmd("CLIENT", "SETNAME", "once-"+m.name), []byte("+OK\r\n"))
			n.Roundtrip(t, redistest.Cmd("ECHO", "end-"+m.name), []byte("$"+strconv.Itoa(len("end-"+m.name))+"\r\nend-"+m.name+"\r\n"))
			feed, err := mon.ReadWhile(func(b []byte) bool { return bytes.Contains(b, []byte("end-"+m.name)) }, 5*time.Second)
			if err != nil {
				t.Fatalf("MONITOR: %v (so far %q)", err, redistest.Trunc(feed))
			}
			if c := bytes.Count(feed, []byte(`"once-`+m.name+`"`)); c != 1 {
				t.Errorf("MONITOR shows CLIENT SETNAME %d times, want 1:\n%s", c, feed)
			}
		})
	}
}

// TestSessionEngineClosesClient: when the engine closes the connection it
// serves a client on (CLIENT KILL, ACL DELUSER) with nothing in flight, a
// client with one engine is closed, as its own connection would be; a
// client routed by slot or pinned keeps its connection, as a cluster
// client keeps or re-dials its node connections, and its next request is served on a new
// engine connection with its state replayed (SELECT 9), or, when the
// engine refuses the replayed AUTH of a deleted user, closes it with no
// reply. It is never served as someone else: a client logged in as a
// deleted user went on as "default".
func TestSessionEngineClosesClient(t *testing.T) {
	srv := redistest.Start(t)
	for _, m := range sessionModes {
		t.Run(m.name, func(t *testing.T) {
			redial := strings.HasPrefix(m.name, "slots") || routedMode() || pinnedMode() && m.name == "private"
			p, set := proxytest.StartProxy(t, srv.Addr(), m.mod(srv.Addr()))
			c := redistest.Dial(t, p.Addr())
			defer c.Close()
			c.Roundtrip(t, redistest.Cmd("SELECT", "9"), []byte("+OK\r\n"))
			// Kill the engine connection that serves c, found by its db.
			killed := 0
			for _, line := range strings.Split(srv.Do("CLIENT", "LIST").(string), "\n") {
				if strings.Contains(line, " db=9 ") {
					id := strings.Fields(line)[0][len("id="):]
					srv.Do("CLIENT", "KILL", "ID", id)
					killed++
				}
			}
			if killed != 1 {
				t.Fatalf("%d engine connections on db 9, want c's alone", killed)
			}
			// The proxy closes c as soon as it reads the engine's close,
			// with nothing in flight (a request sent before that would get
			// an "upstream connection lost" error: the engine never ran it).
			// Routed by slot, c stays and is served on db 9 again once the
			// proxy has seen the close.
			if redial {
				redistest.Eventually(t, 5*time.Second, func() error {
					if n := set.Counters().UpstreamConns; n != 0 {
						return fmt.Errorf("%d upstream connections, want 0", n)
					}
					return nil
				})
				c.Send(t, redistest.Cmd("CLIENT", "INFO"))
				if b, err := c.ReadFrame(5 * time.Second); err != nil || !bytes.Contains(b, []byte(" db=9 ")) {
					t.Errorf("CLIENT INFO after CLIENT KILL of its engine connection: %q %v, want db=9 (replayed)", b, err)
				}
			} else if got, closed := c.ReadToClose(5 * time.Second); !closed || len(got) > 0 {
				t.Errorf("after CLIENT KILL of its engine connection: got %q closed=%v, want the close", got, closed)
			}

			srv.Do("ACL", "SETUSER", "alice", "on", ">pw", "~k*", "+@all")
			a := redistest.Dial(t, p.Addr())
			defer a.Close()
			a.Roundtrip(t, redistest.Cmd("AUTH", "alice", "pw"), []byte("+OK\r\n"))
			a.Send(t, redistest.Cmd("SET", "other", "y"))
			if b, err := a.ReadFrame(5 * time.Second); err != nil || !bytes.HasPrefix(b, []byte("-NOPERM")) {
				t.Fatalf("alice's SET other: %q %v", b, err)
			}
			ups := set.Counters().UpstreamConns
			srv.Do("ACL", "DELUSER", "alice")
			if redial {
				// Open until its next request, which the refused replay of
				// AUTH alice closes (sent once the proxy has seen the
				// engine's close: sent before, it would fail with an error
				// reply, as a request in flight on a lost connection).
				redistest.Eventually(t, 5*time.Second, func() error {
					if n := set.Counters().UpstreamConns; n >= ups {
						return fmt.Errorf("%d upstream connections, want fewer than %d", n, ups)
					}
					return nil
				})
				_ = a.Write(respJoin(redistest.Cmd("SET", "other", "y"), redistest.Cmd("ACL", "WHOAMI")))
			}
			if got, closed := a.ReadToClose(5 * time.Second); !closed || len(got) > 0 {
				t.Errorf("deleted user's connection: got %q closed=%v, want a close and no reply", got, closed)
			}
			_ = a.Write(respJoin(redistest.Cmd("SET", "other", "y"), redistest.Cmd("ACL", "WHOAMI")))
			if v := srv.Do("EXISTS", "other"); v != int64(0) {
				t.Errorf("EXISTS other = %v: the deleted user wrote", v)
			}
		})
	}
}

// TestSessionClientIDAcrossPubSub: a client's engine connection stays the
// same across SUBSCRIBE and UNSUBSCRIBE, so its CLIENT ID stays valid as a
// tracking REDIRECT target. Leaving pub/sub used to open another
// connection.
func TestSessionClientIDAcrossPubSub(t *testing.T) {
	srv := redistest.Start(t)
	for _, m := range sessionModes {
		t.Run(m.name, func(t *testing.T) {
			p, _ := proxytest.StartProxy(t, srv.Addr(), m.mod(srv.Addr()))
			c := redistest.Dial(t, p.Addr())
			defer c.Close()
			c.Send(t, redistest.Cmd("CLIENT", "ID"))
			id, err := c.ReadFrame(5 * time.Second)
			if err != nil || id[0] != resp.TypeInteger {
				t.Fatalf("CLIENT ID: %q %v", id, err)
			}
			c.Roundtrip(t, redistest.Cmd("SUBSCRIBE", "idch"), []byte("*3\r\n$9\r\nsubscribe\r\n$4\r\nidch\r\n:1\r\n"))
			c.Roundtrip(t, redistest.Cmd("UNSUBSCRIBE"), []byte("*3\r\n$11\r\nunsubscribe\r\n$4\r\nidch\r\n:0\r\n"))
			c.Roundtrip(t, redistest.Cmd("CLIENT", "ID"), id)
			d := redistest.Dial(t, p.Addr())
			defer d.Close()
			d.Roundtrip(t, redistest.Cmd("CLIENT", "TRACKING", "on", "REDIRECT", string(id[1:len(id)-2])), []byte("+OK\r\n"))
		})
	}
}

// TestSessionReplicationHandshake: REPLCONF before SYNC travels with the
// client to the connection the replication stream uses (a filtered,
// diskless RDB), with shared upstream connections too, where it was sent
// on a shared connection and lost.
func TestSessionReplicationHandshake(t *testing.T) {
	srv := redistest.Start(t, "--repl-diskless-sync-delay", "0")
	srv.Do("SET", "repl:k", "v")

	for _, m := range sessionModes {
		t.Run(m.name, func(t *testing.T) {
			p, _ := proxytest.StartProxy(t, srv.Addr(), m.mod(srv.Addr()))
			for _, addr := range []string{srv.Addr(), p.Addr()} {
				c := redistest.Dial(t, addr)
				c.Roundtrip(t, redistest.Cmd("REPLCONF", "capa", "eof"), []byte("+OK\r\n"))
				c.Roundtrip(t, redistest.Cmd("REPLCONF", "rdb-filter-only", "functions"), []byte("+OK\r\n"))
				c.Send(t, redistest.Cmd("SYNC"))
				// "$EOF:<40-byte mark>\r\n<RDB><mark>" (newlines before it
				// are the engine's keep-alives while it prepares the payload)
				got, _ := c.ReadWhile(func(b []byte) bool {
					b = bytes.TrimLeft(b, "\n")
					return len(b) > 5+40+2 && bytes.Count(b, b[5:45]) == 2
				}, 10*time.Second)
				_ = c.Close()
				if got = bytes.TrimLeft(got, "\n"); !bytes.HasPrefix(got, []byte("$EOF:")) {
					t.Errorf("%s: the replication stream starts %q, want a diskless (filtered) one: $EOF:...", addr, redistest.Trunc(got))
				}
				if bytes.Contains(got, []byte("repl:k")) {
					t.Errorf("%s: the RDB holds the key repl:k; rdb-filter-only functions leaves keys out", addr)
				}
			}
		})
	}
}

// TestSharedNoAuthAfterRequirepass: once the engine wants a password, a
// client without AUTH is not served through a shared connection that was
// logged in before (it got the data; directly and in the other modes it
// gets -NOAUTH); once the password is gone, shared connections serve such
// clients again.
func TestSharedNoAuthAfterRequirepass(t *testing.T) {
	srv := redistest.Start(t)
	srv.Do("SET", "auth:k", "v")
	p, _ := proxytest.StartProxy(t, srv.Addr(), func(c *proxy.Config) {
		c.UpstreamMode = proxy.UpstreamShared
		c.Loops = 1
		c.AuthCheck = 200 * time.Millisecond
	})
	before := redistest.Dial(t, p.Addr())
	defer before.Close()
	before.Roundtrip(t, redistest.Cmd("GET", "auth:k"), []byte("$1\r\nv\r\n"))
	srv.Do("CONFIG", "SET", "requirepass", "pw") // behind the proxy's back
	redistest.Eventually(t, 5*time.Second, func() error {
		got, _ := redistest.Exchange(t, p.Addr(), [][]byte{redistest.Cmd("GET", "auth:k")}, redistest.ExchangeOptions{Frames: 1, Timeout: 2 * time.Second})
		if !bytes.HasPrefix(got, []byte("-NOAUTH")) {
			return fmt.Errorf("a new client without AUTH got %q, want -NOAUTH", got)
		}
		return nil
	})
	// The client that was on the shared connections meets the password too.
	before.Send(t, redistest.Cmd("GET", "auth:k"))
	if b, err := before.ReadFrame(5 * time.Second); err != nil || !bytes.HasPrefix(b, []byte("-NOAUTH")) {
		t.Errorf("client from before the password: %q %v, want -NOAUTH", b, err)
	}
	// With AUTH it is served (on its own connection).
	c := redistest.Dial(t, p.Addr())
	defer c.Close()
	c.Roundtrip(t, respJoin(redistest.Cmd("AUTH", "pw"), redistest.Cmd("GET", "auth:k")), []byte("+OK\r\n$1\r\nv\r\n"))
	// Password removed through the proxy: shared connections again.
	c.Roundtrip(t, redistest.Cmd("CONFIG", "SET", "requirepass", ""), []byte("+OK\r\n"))
	redistest.Eventually(t, 5*time.Second, func() error {
		got, _ := redistest.Exchange(t, p.Addr(), [][]byte{redistest.Cmd("GET", "auth:k")}, redistest.ExchangeOptions{Frames: 1, Timeout: 2 * time.Second})
		if string(got) != "$1\r\nv\r\n" {
			return fmt.Errorf("a new client without AUTH got %q after the password was removed", got)
		}
		return nil
	})
}

// TestSharedStallMovesOthers: with shared upstream connections, one
// client's request that the engine holds (a looping script, a write under
// CLIENT PAUSE WRITE) no longer holds up the other clients: their requests
// go to another shared connection once it has stalled (100 ms), so they get
// what the engine answers them directly (-BUSY, a read during a write
// pause), and SCRIPT KILL or CLIENT UNPAUSE from another client frees the
// engine. Before, they waited behind it: only a direct connection could
// free the engine.
func TestSharedStallMovesOthers(t *testing.T) {
	srv := redistest.Start(t, "--busy-reply-threshold", "100")
	p, set := proxytest.StartProxy(t, srv.Addr(), func(c *proxy.Config) {
		c.UpstreamMode = proxy.UpstreamShared
		c.Loops = 1 // every client on the same shared connection
	})
	dial := func() *redistest.Conn {
		c := redistest.Dial(t, p.Addr())
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	timed := func(c *redistest.Conn, req []byte, wantPrefix string, within time.Duration) {
		t.Helper()
		start := time.Now()
		c.Send(t, req)
		b, err := c.ReadFrame(10 * time.Second)
		d := time.Since(start)
		if err != nil || !bytes.HasPrefix(b, []byte(wantPrefix)) || d > within {
			t.Errorf("%q: %q %v after %v; want %s... within %v", req, b, err, d, wantPrefix, within)
		}
		t.Logf("%q answered in %v", req, d)
	}
	looper, other, killer := dial(), dial(), dial()
	other.Roundtrip(t, redistest.Cmd("PING"), []byte("+PONG\r\n")) // on the shared connection
	looper.Send(t, redistest.Cmd("EVAL", "while true do end", "0"))
	time.Sleep(300 * time.Millisecond) // the script runs past busy-reply-threshold
	timed(other, redistest.Cmd("PING"), "-BUSY", time.Second)
	timed(killer, redistest.Cmd("SCRIPT", "KILL"), "+OK", time.Second)
	if b, err := looper.ReadFrame(5 * time.Second); err != nil || b[0] != resp.TypeError {
		t.Errorf("the killed script's client: %q %v, want its error", b, err)
	}
	other.Roundtrip(t, redistest.Cmd("PING"), []byte("+PONG\r\n"))

	pauser, writer, reader, unpauser := dial(), dial(), dial(), dial()
	reader.Roundtrip(t, redistest.Cmd("PING"), []byte("+PONG\r\n"))
	pauser.Roundtrip(t, redistest.Cmd("CLIENT", "PAUSE", "10000", "WRITE"), []byte("+OK\r\n"))
	writer.Send(t, redistest.Cmd("SET", "stall:k", "v")) // held by the engine for 10 s
	time.Sleep(300 * time.Millisecond)
	timed(reader, redistest.Cmd("GET", "stall:k"), "$-1", 500*time.Millisecond)
	timed(unpauser, redistest.Cmd("CLIENT", "UNPAUSE"), "+OK", time.Second)
	writer.Expect(t, []byte("+OK\r\n"), 5*time.Second)
	reader.Roundtrip(t, redistest.Cmd("GET", "stall:k"), []byte("$1\r\nv\r\n"))
	if n := set.Snapshot().Routing.SharedStalls; n < 2 {
		t.Errorf("shared stalls counted: %d, want at least 2 (the script, the paused write)", n)
	}
}

// TestSharedOwnedPush: a push that answers the client's own request (DEBUG
// PROTOCOL push, RESP3) reaches it with shared upstream connections too: it
// was dropped as a push on a shared connection, which has no owner.
func TestSharedOwnedPush(t *testing.T) {
	e := e2eSetupWith(t, func(c *proxy.Config) { c.UpstreamMode = proxy.UpstreamShared }, "--enable-debug-command", "yes")
	writes := [][]byte{respJoin(redistest.Cmd("HELLO", "3"), redistest.Cmd("DEBUG", "PROTOCOL", "push"), redistest.Cmd("PING"))}
	got := e.same(t, writes, redistest.ExchangeOptions{Until: []byte("+PONG\r\n"), Timeout: 5 * time.Second}, redistest.MaskHelloID)
	if !bytes.Contains(got, []byte(">")) {
		t.Errorf("the engine sent no push: %q", got)
	}
}
