package proxy_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/respmeter/respmeter/internal/redistest"
	"github.com/respmeter/respmeter/metrics/slowlog"
	"github.com/respmeter/respmeter/proxy"
	"github.com/respmeter/respmeter/proxy/proxytest"
	"github.com/respmeter/respmeter/routing"
)

// TestSetNameBlobErrorKeepsName: a RESP3 client whose CLIENT SETNAME gets
// a blob error (!) sees the error, byte for byte, and the name the proxy
// records for it (the slow log's client_name) stays the one set before, in
// every upstream shape. The engine is scripted: no real engine answers
// SETNAME with a blob error. The SETNAME goes in a pipeline behind a
// request that its engine answers 300 ms late; under slot routing that
// request is on the other shard, so the SETNAME's reply arrives first and
// waits (copied) for it: the path where the error was taken for success.
func TestSetNameBlobErrorKeepsName(t *testing.T) {
	const delay = 300 * time.Millisecond
	engines := []string{startScriptedEngine(t, "e0", delay), startScriptedEngine(t, "e1", delay)}
	topo, err := routing.EvenSplit(engines)
	if err != nil {
		t.Fatal(err)
	}
	twoShards := func(route string) func(*proxy.Config) {
		return func(c *proxy.Config) { c.Route, c.Shards = route, engines }
	}
	facade := func(c *proxy.Config) {
		c.Route, c.Shards = proxy.RouteFacade, engines
		c.FacadeListen = []string{"127.0.0.1:0", "127.0.0.1:0"}
	}
	modes := []struct {
		name   string
		mod    func(*proxy.Config)
		vnode  bool // connect to the facade's virtual node 0
		routed bool // slot-routed: the slow request goes to the other shard
	}{
		{"private", func(c *proxy.Config) { c.UpstreamMode = proxy.UpstreamPrivate }, false, false},
		{"shared", func(c *proxy.Config) { c.UpstreamMode = proxy.UpstreamShared }, false, false},
		{"pinned", twoShards(proxy.RoutePinned), false, false},
		{"slots", twoShards(proxy.RouteSlots), false, true},
		{"slots+shared", func(c *proxy.Config) {
			twoShards(proxy.RouteSlots)(c)
			c.UpstreamMode = proxy.UpstreamShared
		}, false, true},
		{"facade", facade, false, true},
		{"facade node", facade, true, false},
	}
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			sl := slowlog.New(128, 0)
			p, _ := proxytest.StartProxy(t, engines[0], func(c *proxy.Config) {
				m.mod(c)
				c.SlowLog = sl
			})
			addr := p.Addr()
			if m.vnode {
				addr = p.FacadeAddrs()[0]
			}
			c := redistest.Dial(t, addr)
			defer c.Close()
			c.Roundtrip(t, redistest.Cmd("HELLO", "3"), []byte("%1\r\n$5\r\nproto\r\n:3\r\n"))
			c.Roundtrip(t, redistest.Cmd("CLIENT", "SETNAME", "app"), []byte("+OK\r\n"))
			// The slow request's key: under slot routing one on the shard
			// that is not the client's home (where ECHO goes).
			c.Send(t, redistest.Cmd("ECHO", "home"))
			home, err := c.ReadFrame(5 * time.Second)
			if err != nil {
				t.Fatal(err)
			}
			key := ""
			for i := 0; key == ""; i++ {
				k := fmt.Sprintf("slow:%d", i)
				other := "+" + fmt.Sprintf("e%d", topo.Shard(routing.Slot([]byte(k)))) + "\r\n"
				if !m.routed || other != string(home) {
					key = k
				}
			}
			c.Send(t, respJoin(redistest.Cmd("LLEN", key), redistest.Cmd("CLIENT", "SETNAME", "refused-name"), redistest.Cmd("PING")))
			c.Expect(t, []byte(":7\r\n"+scriptedBlobError+"+PONG\r\n"), 5*time.Second)
			redistest.Eventually(t, 5*time.Second, func() error {
				var names []string
				pinged := false
				for _, e := range sl.Entries() {
					names = append(names, e.Command+"="+e.ClientName)
					if e.ClientName == "refused-name" {
						return fmt.Errorf("entry %s: the refused name was recorded (%v)", e.Command, names)
					}
					if e.Command == "ping" {
						pinged = true
						if e.ClientName != "app" {
							return fmt.Errorf("PING after the refused SETNAME recorded as client %q, want app", e.ClientName)
						}
					}
				}
				if !pinged {
					return fmt.Errorf("no PING in the slow log yet: %v", names)
				}
				return nil
			})
		})
	}
}
