package proxy_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/respmeter/respmeter/internal/redistest"
	"github.com/respmeter/respmeter/proxy"
	"github.com/respmeter/respmeter/proxy/proxytest"
)

// TestInFlightAfterEngineKill: the engine dies under a 16-deep pipeline
// from 50 clients; every request is answered or dropped exactly once, so
// the in-flight count (Little's law's L) returns to 0, and a SIGTERM-style
// Stop then ends at once instead of waiting out its drain timeout. It went
// negative under --route slots (pending=-8 in the drain warning) and Stop
// waited the whole timeout.
func TestInFlightAfterEngineKill(t *testing.T) {
	modes := []struct {
		name   string
		shards int
		mod    func(*proxy.Config)
	}{
		{"private", 1, func(c *proxy.Config) { c.UpstreamMode = proxy.UpstreamPrivate }},
		{"shared", 1, func(c *proxy.Config) { c.UpstreamMode = proxy.UpstreamShared }},
		{"slots", 3, func(c *proxy.Config) { c.Route, c.UpstreamMode = proxy.RouteSlots, proxy.UpstreamPrivate }},
		{"slots+shared", 3, func(c *proxy.Config) { c.Route, c.UpstreamMode = proxy.RouteSlots, proxy.UpstreamShared }},
		{"pinned", 3, func(c *proxy.Config) { c.Route = proxy.RoutePinned }},
		{"cluster", 0, func(c *proxy.Config) { c.Route = proxy.RouteSlots }},
	}
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			var srvs []*redistest.Server
			var addrs []string
			if m.shards > 0 {
				srvs, addrs = startShards(t, m.shards)
			} else {
				cl := redistest.StartCluster(t, 3)
				srvs, addrs = cl.Nodes, cl.Addrs()
			}
			p, _ := proxytest.StartProxy(t, addrs[0], func(c *proxy.Config) {
				m.mod(c)
				switch {
				case m.shards == 0:
					c.Cluster = addrs[0]
				case c.Route != proxy.RouteNone && c.Route != "":
					c.Shards = addrs
				}
				c.DrainTimeout = 5 * time.Second
			})
			const clients, depth = 50, 16
			var wg sync.WaitGroup
			started := make(chan struct{}, clients)
			stop := make(chan struct{})
			for i := range clients {
				wg.Add(1)
				go func() {
					defer wg.Done()
					c, err := redistest.DialConn(p.Addr(), 2*time.Second)
					if err != nil {
						t.Error(err)
						return
					}
					defer c.Close()
					var batch []byte
					for j := range depth {
						k := fmt.Sprintf("k:%d:%d", i, j)
						batch = append(batch, redistest.Cmd("SET", k, "v")...)
					}
					once := false
					for {
						select {
						case <-stop:
							return
						default:
						}
						if c.Write(batch) != nil {
							return
						}
						for range depth {
							if _, err := c.ReadFrame(10 * time.Second); err != nil {
								return // closed by the proxy after the engine's loss
							}
						}
						if !once {
							once = true
							started <- struct{}{}
						}
					}
				}()
			}
			for range clients {
				select {
				case <-started:
				case <-time.After(20 * time.Second):
					t.Fatal("clients did not get going")
				}
			}
			for _, s := range srvs {
				s.Kill()
			}
			close(stop)
			wg.Wait()
			redistest.Eventually(t, 5*time.Second, func() error {
				if n := p.InFlight(); n != 0 {
					return fmt.Errorf("in flight %d after the engine's loss, want 0", n)
				}
				return nil
			})
			begin := time.Now()
			proxytest.Stop(t, p)
			if d := time.Since(begin); d > 2*time.Second {
				t.Errorf("Stop took %v with nothing in flight (drain timeout 5s)", d)
			}
		})
	}
}
