package proxy

import (
	"context"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/respmeter/respmeter/internal/redistest"
)

// TestFacadePortTakenBeforeBind: a port picked for a facade address of
// port 0 that another process binds before gnet does (afterPick stands
// for it, the first time only) makes Start pick again instead of failing
// with "address already in use" (CI saw it once).
func TestFacadePortTakenBeforeBind(t *testing.T) {
	srv := redistest.Start(t)
	p, err := New(Config{Listen: "127.0.0.1:0", Route: RouteFacade, Shards: []string{srv.Addr()},
		FacadeListen: []string{"127.0.0.1:0"}, Loops: 1, DrainTimeout: time.Second, DialTimeout: time.Second,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	var taken []string
	p.facade.afterPick = func(listen string, nodes []string) {
		if len(taken) > 0 {
			return
		}
		ln, err := net.Listen("tcp", nodes[0])
		if err != nil {
			t.Fatalf("taking %s: %v", nodes[0], err)
		}
		t.Cleanup(func() { _ = ln.Close() })
		taken = append(taken, listen, nodes[0])
	}
	if err := p.Start(); err != nil {
		t.Fatalf("Start with a picked port taken: %v", err)
	}
	t.Cleanup(func() { _ = p.Stop(context.Background()) })
	if len(taken) == 0 {
		t.Fatal("afterPick never ran")
	}
	node := p.FacadeAddrs()[0]
	if node == taken[1] {
		t.Errorf("virtual node on %s, the port taken", node)
	}
	c, err := redistest.DialConn(node, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Write([]byte("*1\r\n$4\r\nPING\r\n")); err != nil {
		t.Fatal(err)
	}
	if f, err := c.ReadFrame(2 * time.Second); err != nil || string(f) != "+PONG\r\n" {
		t.Errorf("PING at the virtual node %s: %q %v", node, f, err)
	}
}
