package proxy_test

import (
	"strings"
	"testing"
	"time"

	"github.com/respmeter/respmeter/internal/redistest"
	"github.com/respmeter/respmeter/proxy"
	"github.com/respmeter/respmeter/proxy/proxytest"
)

// TestSharedClientKillSkipmeNo: CLIENT KILL USER default SKIPME no from a
// client riding a shared connection runs on a connection of its own, so
// the engine's rules decide as for a direct client: the sender gets the
// count of killed clients and then EOF, and the engine's other clients get
// EOF: one connected directly, and a bystander riding the shared
// connection (directly it would have had its own, killed too). It ran on
// the shared connection, which the engine killed as the sender, and the
// sender and the bystander stayed open.
func TestSharedClientKillSkipmeNo(t *testing.T) {
	skipIfRouted(t, "a slot-routed client whose idle shard connection the engine closed re-dials it (docs/sessions-housekeeping.md): the bystander stays, TestSessionIdleTimeoutRedial")
	srv := redistest.Start(t)
	p, _ := proxytest.StartProxy(t, srv.Addr(), func(c *proxy.Config) {
		c.UpstreamMode = proxy.UpstreamShared
		c.Loops = 1
	})
	direct := redistest.Dial(t, srv.Addr())
	defer direct.Close()
	direct.Roundtrip(t, redistest.Cmd("PING"), []byte("+PONG\r\n"))
	bystander := redistest.Dial(t, p.Addr())
	defer bystander.Close()
	bystander.Roundtrip(t, redistest.Cmd("PING"), []byte("+PONG\r\n")) // on the shared connection
	sender := redistest.Dial(t, p.Addr())
	defer sender.Close()
	sender.Roundtrip(t, redistest.Cmd("PING"), []byte("+PONG\r\n")) // on the shared connection
	_ = sender.Write(redistest.Cmd("CLIENT", "KILL", "USER", "default", "SKIPME", "no"))
	got, closed := sender.ReadToClose(5 * time.Second)
	if !closed || !strings.HasPrefix(string(got), ":") {
		t.Errorf("sender of CLIENT KILL ... SKIPME no: got %q closed=%v, want :N then EOF", got, closed)
	}
	if got, closed := direct.ReadToClose(5 * time.Second); !closed || len(got) > 0 {
		t.Errorf("the engine's direct client: got %q closed=%v, want EOF", got, closed)
	}
	if got, closed := bystander.ReadToClose(5 * time.Second); !closed || len(got) > 0 {
		t.Errorf("the bystander on the shared connection: got %q closed=%v, want EOF", got, closed)
	}
}
