package proxy_test

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/respmeter/respmeter/internal/redistest"
	"github.com/respmeter/respmeter/proxy"
	"github.com/respmeter/respmeter/proxy/proxytest"
)

// TestEngineRedirectIPv6Relayed: a Valkey replica whose primary is
// configured by an IPv6 address (replicaof ::1 port) names it bare in its
// redirect ("-REDIRECT ::1:7001", checked on the replica directly). Through
// respmeter, in each upstream mode and in the test's shape (none, slots or
// pinned over the replica as one shard), a client that sent CLIENT CAPA
// redirect gets those bytes unchanged for a write, host and port intact,
// and the write reaches no engine; a client that did not ask gets
// -READONLY.
func TestEngineRedirectIPv6Relayed(t *testing.T) {
	primary := redistest.Start(t, "--bind", "127.0.0.1", "::1")
	if !engineKnows(t, primary, "client|capa") {
		_, engine := primary.Version()
		t.Skipf("%s has no CLIENT CAPA", engine)
	}
	replica := redistest.Start(t, "--replicaof", "::1", fmt.Sprint(primary.Port()))
	direct := redistest.Dial(t, replica.Addr())
	defer direct.Close()
	direct.Roundtrip(t, respCmd("CLIENT", "CAPA", "redirect"), []byte("+OK\r\n"))
	direct.Send(t, respCmd("SET", "k6", "v"))
	want, err := direct.ReadFrame(5 * time.Second)
	if err != nil || string(want) != fmt.Sprintf("-REDIRECT ::1:%d\r\n", primary.Port()) {
		t.Fatalf("the replica itself answers %q, %v; want -REDIRECT ::1:%d", want, err, primary.Port())
	}
	for _, mode := range []string{proxy.UpstreamPrivate, proxy.UpstreamShared} {
		p, _ := proxytest.StartProxy(t, replica.Addr(), func(c *proxy.Config) { c.UpstreamMode = mode })
		plain := redistest.Dial(t, p.Addr())
		plain.Send(t, respCmd("SET", "k6", "v"))
		if got, err := plain.ReadFrame(5 * time.Second); err != nil || !bytes.HasPrefix(got, []byte("-READONLY")) {
			t.Errorf("%s: SET without CLIENT CAPA redirect: %q, %v; want -READONLY", mode, got, err)
		}
		plain.Close()
		c := redistest.Dial(t, p.Addr())
		c.Roundtrip(t, respCmd("CLIENT", "CAPA", "redirect"), []byte("+OK\r\n"))
		for range 3 {
			c.Send(t, respCmd("SET", "k6", "v"))
			if got, err := c.ReadFrame(5 * time.Second); err != nil || string(got) != string(want) {
				t.Errorf("%s: SET after CLIENT CAPA redirect through respmeter: %q, %v; the replica answers %q", mode, got, err, want)
			}
		}
		c.Close()
	}
	if n := primary.Do("EXISTS", "k6"); fmt.Sprint(n) != "0" {
		t.Errorf("the primary holds k6 (%v): a redirected write was sent on", n)
	}
}
