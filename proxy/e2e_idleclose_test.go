package proxy_test

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/respmeter/respmeter/internal/redistest"
	"github.com/respmeter/respmeter/proxy"
	"github.com/respmeter/respmeter/routing"
)

// engineDo runs one command on the engine at addr over a connection of
// its own (the engines' "timeout 1" closes any connection left idle, the
// Server's own client's too).
func engineDo(t *testing.T, addr string, args ...any) any {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr, DisableIdentity: true, MaxRetries: -1})
	defer c.Close()
	v, err := c.Do(context.Background(), args...).Result()
	if err != nil {
		t.Fatalf("%v on %s: %v", args, addr, err)
	}
	return v
}

// clientsOn returns the lines of CLIENT LIST of the engine at addr that
// contain all of want (clientLines).
func clientsOn(t *testing.T, addr string, want ...string) []string {
	return clientLines(engineDo(t, addr, "CLIENT", "LIST").(string), want...)
}

// namedOn returns the index of the engine among addrs that has a
// connection named name, or -1.
func namedOn(t *testing.T, addrs []string, name string) int {
	for i, a := range addrs {
		if len(clientsOn(t, a, "name="+name)) > 0 {
			return i
		}
	}
	return -1
}

// TestSessionIdleCloseOneNode: three engines with "timeout 1", under
// --route pinned and through a facade virtual node, where a client talks
// to one engine over one connection. A go-redis client (RESP3, logged in
// as alice, db 3, named; one pooled connection) idles until its engine has
// closed respmeter's connection for it (checked on the engine), then
// sends again (once respmeter has seen the close: a request sent before
// would race it, as on a direct connection): it keeps its own connection (go-redis dialled once), reads
// the key it wrote, and is served by a new engine connection (another
// CLIENT ID) that carries its user, db, name and protocol. Where a new
// connection cannot stand for the closed one, the client is closed as a
// direct one is (EOF, no reply): a transaction open (its queued commands
// are gone with the engine's connection), a WATCH (an EXEC on a new one
// would run unwatched), CLIENT TRACKING on (invalidations lost). A client
// blocked in BLPOP is not idle for the engine and keeps its connection:
// it gets the element pushed 2 s later; when the engine kills its
// connection instead (CLIENT KILL), the request in flight gets the error
// and the client is closed, as in the default mode. In the default mode
// (route none) the idle client is closed, as its own connection would be.
func TestSessionIdleCloseOneNode(t *testing.T) {
	var addrs []string
	for range 3 {
		s := redistest.Start(t, "--timeout", "1")
		addrs = append(addrs, s.Addr())
		engineDo(t, s.Addr(), "ACL", "SETUSER", "alice", "on", ">pw", "~*", "+@all")
	}
	topo, _ := routing.EvenSplit(addrs)
	ctx := context.Background()
	for _, route := range []string{proxy.RoutePinned, proxy.RouteFacade} {
		t.Run(route, func(t *testing.T) {
			// (Private connections, in every shape: the count of them
			// tells when respmeter has seen the engine's closes.)
			p, set := startRouted(t, route, addrs, func(c *proxy.Config) {
				c.UpstreamMode = proxy.UpstreamPrivate
				if route == proxy.RouteFacade {
					c.FacadeListen = []string{"127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"}
				}
			})
			addr, key := p.Addr(), "idle:"+route
			if route == proxy.RouteFacade {
				addr, key = p.FacadeAddrs()[1], keyOn(t, topo, "idle:"+route+":", 1)
			}
			name := "idle-" + route
			var dials atomic.Int32
			rdb := redis.NewClient(&redis.Options{Addr: addr, Username: "alice", Password: "pw", DB: 3,
				ClientName: name, PoolSize: 1, MaxRetries: -1, DisableIdentity: true,
				ReadTimeout: 10 * time.Second, WriteTimeout: 10 * time.Second,
				Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
					dials.Add(1)
					var d net.Dialer
					return d.DialContext(ctx, network, addr)
				}})
			defer rdb.Close()
			if err := rdb.Set(ctx, key, "v", 0).Err(); err != nil {
				t.Fatal(err)
			}
			id1, err := rdb.ClientID(ctx).Result()
			if err != nil {
				t.Fatal(err)
			}
			home := namedOn(t, addrs, name)
			if home < 0 {
				t.Fatalf("no engine has a connection named %s", name)
			}

			skip := func() {
				if route == proxy.RoutePinned {
					// Pinned round-robin over three engines: two
					// connections more, and the next one lands on the
					// go-redis client's engine.
					for range 2 {
						redistest.Dial(t, addr).Roundtrip(t, redistest.Cmd("PING"), []byte("+PONG\r\n"))
					}
				}
			}
			// Raw clients whose state a new connection cannot restore, and
			// a blocked one; all on the same engine as the go-redis client.
			open := func(what string, setup ...[]byte) *redistest.Conn {
				c := redistest.Dial(t, addr)
				c.Roundtrip(t, respJoin(redistest.Cmd("CLIENT", "SETNAME", what+"-"+route), redistest.Cmd("GET", key)), []byte("+OK\r\n$-1\r\n"))
				if on := namedOn(t, addrs, what+"-"+route); on != home {
					t.Fatalf("%s is on engine %d, the go-redis client on %d", what, on, home)
				}
				for _, b := range setup {
					c.Send(t, b)
					if _, err := c.ReadFrame(5 * time.Second); err != nil {
						t.Fatalf("%s: %q: %v", what, b, err)
					}
				}
				return c
			}
			skip()
			multi := open("multi", redistest.Cmd("MULTI"), redistest.Cmd("SET", key, "tx"))
			skip()
			watch := open("watch", redistest.Cmd("WATCH", key))
			skip()
			track := open("track", redistest.Cmd("HELLO", "3"), redistest.Cmd("CLIENT", "TRACKING", "on"))
			skip()
			list := "list:" + key // same slot as key: {…} not needed, the pinned client goes home anyway
			if route == proxy.RouteFacade {
				list = keyOn(t, topo, "list:", 1)
			}
			blocked := open("blocked")
			blocked.Send(t, redistest.Cmd("BLPOP", list, "0"))

			// The injected truth: the engine closes the idle connections.
			start := time.Now()
			redistest.Eventually(t, 15*time.Second, func() error {
				for _, n := range []string{name, "multi-" + route, "watch-" + route, "track-" + route} {
					if namedOn(t, addrs, n) >= 0 {
						return fmt.Errorf("%s still connected on the engine", n)
					}
				}
				return nil
			})
			t.Logf("the engine closed the idle connections %v after the last request", time.Since(start).Round(10*time.Millisecond))
			if namedOn(t, addrs, "blocked-"+route) != home {
				t.Fatalf("the blocked client's connection was closed by the engine")
			}
			// Once respmeter has seen them all (a request sent before
			// would race the close, as on a direct connection: it would
			// be lost with it), only the blocked client's is left.
			redistest.Eventually(t, 15*time.Second, func() error {
				if n := set.Counters().UpstreamConns; n != 1 {
					return fmt.Errorf("%d engine connections open, want the blocked client's alone", n)
				}
				return nil
			})

			if got, err := rdb.Get(ctx, key).Result(); err != nil || got != "v" {
				t.Fatalf("GET after the idle close: %q %v, want v", got, err)
			}
			id2, err := rdb.ClientID(ctx).Result()
			if err != nil || id2 == id1 {
				t.Fatalf("CLIENT ID after the idle close: %d %v; before %d: want a new engine connection", id2, err, id1)
			}
			if n, err := rdb.ClientGetName(ctx).Result(); err != nil || n != name {
				t.Errorf("CLIENT GETNAME after the re-dial: %q %v, want %q", n, err, name)
			}
			if got := clientsOn(t, addrs[home], "name="+name, "user=alice", "db=3", "resp=3"); len(got) != 1 {
				t.Errorf("after the re-dial the engine serves the client on %d connections as alice, db 3, RESP3; want 1: %q",
					len(got), clientsOn(t, addrs[home]))
			}
			if n := dials.Load(); n != 1 {
				t.Errorf("go-redis dialled %d times, want 1: the proxy closed its connection", n)
			}

			for what, c := range map[string]*redistest.Conn{"MULTI": multi, "WATCH": watch, "TRACKING": track} {
				_ = c.Write(redistest.Cmd("PING"))
				if got, closed := c.ReadToClose(5 * time.Second); !closed || len(got) > 0 {
					t.Errorf("client with %s open after the idle close: got %q closed=%v, want EOF and no reply", what, got, closed)
				}
			}
			// The transaction's SET never ran.
			if got, _ := rdb.Get(ctx, key).Result(); got != "v" {
				t.Errorf("key after the closed transaction: %q, want v", got)
			}

			time.Sleep(time.Second) // (blocked 2 s, twice the timeout, in all)
			engineDo(t, addrs[home], "RPUSH", list, "x")
			if b, err := blocked.ReadFrame(5 * time.Second); err != nil || !strings.Contains(string(b), "x") {
				t.Fatalf("blocked client: %q %v, want the pushed element", b, err)
			}
			blocked.Send(t, redistest.Cmd("BLPOP", list, "0"))
			redistest.Eventually(t, 5*time.Second, func() error {
				if len(clientsOn(t, addrs[home], "name=blocked-"+route, "cmd=blpop")) == 0 {
					return fmt.Errorf("BLPOP not blocked yet")
				}
				return nil
			})
			engineDo(t, addrs[home], "CLIENT", "KILL", "USER", "default")
			got, closed := blocked.ReadToClose(5 * time.Second)
			if !closed || !strings.HasPrefix(string(got), "-ERR upstream") {
				t.Errorf("blocked client whose connection was killed: %q closed=%v, want the upstream error, then EOF", got, closed)
			}
		})
	}

	t.Run(proxy.RouteNone, func(t *testing.T) {
		if routedMode() || pinnedMode() {
			t.Skip("the default mode's test: the shape's route would replace it")
		}
		p, _ := startRouted(t, proxy.RouteNone, nil, func(c *proxy.Config) { c.Upstream, c.Shards = addrs[0], nil })
		c := redistest.Dial(t, p.Addr())
		c.Roundtrip(t, redistest.Cmd("CLIENT", "SETNAME", "idle-none"), []byte("+OK\r\n"))
		redistest.Eventually(t, 15*time.Second, func() error {
			if namedOn(t, addrs, "idle-none") >= 0 {
				return fmt.Errorf("idle-none still connected on the engine")
			}
			return nil
		})
		if got, closed := c.ReadToClose(5 * time.Second); !closed || len(got) > 0 {
			t.Errorf("idle client of route none: got %q closed=%v, want EOF and no reply, as directly", got, closed)
		}
	})
}
