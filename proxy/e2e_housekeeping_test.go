package proxy_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/respmeter/respmeter/internal/redistest"
	"github.com/respmeter/respmeter/proxy"
	"github.com/respmeter/respmeter/routing"
)

// keyOn returns a key with prefix whose slot the shard of index shard owns
// in topo.
func keyOn(t *testing.T, topo *routing.Topology, prefix string, shard int) string {
	t.Helper()
	for i := range 100000 {
		if k := fmt.Sprintf("%s%d", prefix, i); topo.Shard(routing.Slot([]byte(k))) == shard {
			return k
		}
	}
	t.Fatalf("no key of prefix %q on shard %d", prefix, shard)
	return ""
}

// engineClients returns the lines of srv's CLIENT LIST that contain all of
// want (such as "name=x" and "user=y").
func engineClients(srv *redistest.Server, want ...string) []string {
	return clientLines(srv.Do("CLIENT", "LIST").(string), want...)
}

// clientLines returns the lines of a CLIENT LIST reply that contain all of
// want (such as "name=x"; the last field too).
func clientLines(list string, want ...string) []string {
	var out []string
	for _, line := range strings.Split(list, "\n") {
		ok := line != ""
		for _, w := range want {
			ok = ok && strings.Contains(line+" ", " "+w+" ")
		}
		if ok {
			out = append(out, line)
		}
	}
	return out
}

// TestSessionIdleTimeoutRedial: three engines with "timeout 2", routed by
// slot. A client logged in as alice (AUTH, CLIENT SETNAME, SELECT) writes
// a key on one shard and then reads another shard every 0.5 s for 10 s:
// the engine of the first shard closes respmeter's idle connection there
// (checked: no connection named after the client is left on it), and the
// client keeps its connection and reads its key back through a new
// connection that carries its user, name and db. Then alice is deleted on
// that shard (ACL DELUSER, which closes the connection) and the client's
// next request for it closes the client: EOF, no reply, and the request
// was not run (its SET is not in the engine). The client used to be closed
// by the first idle close, mid-traffic.
func TestSessionIdleTimeoutRedial(t *testing.T) {
	var srvs []*redistest.Server
	var addrs []string
	for range 3 {
		s := redistest.Start(t, "--timeout", "2")
		s.DoT(t, "ACL", "SETUSER", "alice", "on", ">pw", "~*", "+@all")
		srvs, addrs = append(srvs, s), append(addrs, s.Addr())
	}
	for _, mode := range []string{proxy.UpstreamPrivate, proxy.UpstreamShared} {
		t.Run(mode, func(t *testing.T) {
			p, set := startRouted(t, proxy.RouteSlots, addrs, func(c *proxy.Config) { c.UpstreamMode = mode })
			topo, _ := routing.EvenSplit(addrs)
			busy, wrote := keyOn(t, topo, "busy:"+mode+":", 0), keyOn(t, topo, "wrote:"+mode+":", 2)
			name := "idle-" + mode
			c := redistest.Dial(t, p.Addr())
			defer c.Close()
			c.Roundtrip(t, respJoin(redistest.Cmd("AUTH", "alice", "pw"), redistest.Cmd("CLIENT", "SETNAME", name),
				redistest.Cmd("SELECT", "3"), redistest.Cmd("SET", wrote, "v-"+mode), redistest.Cmd("SET", busy, "b")),
				[]byte("+OK\r\n+OK\r\n+OK\r\n+OK\r\n+OK\r\n"))
			if got := engineClients(srvs[2], "name="+name, "user=alice", "db=3"); len(got) != 1 {
				t.Fatalf("shard 2 serves the client on %d connections, want 1: %q", len(got), got)
			}
			for end := time.Now().Add(10 * time.Second); time.Now().Before(end); {
				c.Roundtrip(t, redistest.Cmd("GET", busy), []byte("$1\r\nb\r\n"))
				time.Sleep(500 * time.Millisecond)
			}
			// The injected truth: shard 2 closed the idle connection.
			if got := engineClients(srvs[2], "name="+name); len(got) != 0 {
				t.Fatalf("shard 2 still has the client's connection after 10 s of timeout 2: %q", got)
			}
			c.Roundtrip(t, redistest.Cmd("GET", wrote), []byte(fmt.Sprintf("$%d\r\nv-%s\r\n", len("v-"+mode), mode)))
			if got := engineClients(srvs[2], "name="+name, "user=alice", "db=3"); len(got) != 1 {
				t.Errorf("after the re-dial shard 2 serves the client on %d connections as alice, named, db 3; want 1: %q",
					len(got), engineClients(srvs[2]))
			}

			// ACL DELUSER closes alice's connection on shard 2; the proxy
			// sees it (its upstream connections drop by one).
			before := set.Counters().UpstreamConns
			srvs[2].DoT(t, "ACL", "DELUSER", "alice")
			redistest.Eventually(t, 10*time.Second, func() error {
				if n := set.Counters().UpstreamConns; n >= before {
					return fmt.Errorf("%d upstream connections, want fewer than %d", n, before)
				}
				return nil
			})
			c.Roundtrip(t, redistest.Cmd("GET", busy), []byte("$1\r\nb\r\n")) // shard 0 still serves it
			_ = c.Write(redistest.Cmd("SET", wrote, "as-someone-else"))
			if got, closed := c.ReadToClose(5 * time.Second); !closed || len(got) > 0 {
				t.Errorf("request after the user was deleted: got %q closed=%v, want EOF and no reply", got, closed)
			}
			// The refused request never reached the engine.
			d := redistest.Dial(t, addrs[2])
			defer d.Close()
			d.Roundtrip(t, respJoin(redistest.Cmd("SELECT", "3"), redistest.Cmd("GET", wrote)),
				[]byte(fmt.Sprintf("+OK\r\n$%d\r\nv-%s\r\n", len("v-"+mode), mode)))
			srvs[2].DoT(t, "ACL", "SETUSER", "alice", "on", ">pw", "~*", "+@all")
		})
	}
}

// TestSessionReplayedSetterRefusedKept: a user who may not send CLIENT
// SETNAME (as a library sends its setters at connect) gets -NOPERM for
// it, and the same refusal of its replay on every shard the client opens
// later is dropped, as the client's own was: the client reads keys on all
// three shards. Only a refused AUTH, HELLO, SELECT or READONLY/READWRITE
// closes the client.
func TestSessionReplayedSetterRefusedKept(t *testing.T) {
	_, addrs := startShards(t, 3)
	for _, a := range addrs {
		c := redistest.Dial(t, a)
		c.Roundtrip(t, redistest.Cmd("ACL", "SETUSER", "bob", "on", ">pw", "~*", "+@all", "-client|setname"), []byte("+OK\r\n"))
		c.Close()
	}
	p, _ := startRouted(t, proxy.RouteSlots, addrs, func(c *proxy.Config) { c.UpstreamMode = proxy.UpstreamPrivate })
	topo, _ := routing.EvenSplit(addrs)
	c := redistest.Dial(t, p.Addr())
	defer c.Close()
	c.Roundtrip(t, redistest.Cmd("AUTH", "bob", "pw"), []byte("+OK\r\n"))
	c.Send(t, redistest.Cmd("CLIENT", "SETNAME", "bob-app"))
	if b, err := c.ReadFrame(5 * time.Second); err != nil || !strings.HasPrefix(string(b), "-NOPERM") {
		t.Fatalf("CLIENT SETNAME as bob: %q %v, want -NOPERM", b, err)
	}
	for shard := range 3 {
		c.Roundtrip(t, redistest.Cmd("GET", keyOn(t, topo, "bob:", shard)), []byte("$-1\r\n"))
	}
}
