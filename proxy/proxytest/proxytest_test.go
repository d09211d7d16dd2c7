package proxytest_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/respmeter/respmeter/internal/redistest"
	"github.com/respmeter/respmeter/proxy"
	"github.com/respmeter/respmeter/proxy/proxytest"
)

func TestStartProxy(t *testing.T) {
	srv := redistest.Start(t)
	p, set := proxytest.StartProxy(t, srv.Addr(), nil)
	c := redistest.Dial(t, p.Addr())
	c.Roundtrip(t, redistest.Cmd("SET", "k", "v"), []byte("+OK\r\n"))
	c.Roundtrip(t, redistest.Cmd("GET", "k"), []byte("$1\r\nv\r\n"))
	redistest.Eventually(t, 2*time.Second, func() error {
		if n := proxytest.Command(t, set, "get").Count; n != 1 {
			return fmt.Errorf("get counted %d times, want 1", n)
		}
		return nil
	})
	proxytest.Stop(t, p)
	proxytest.Stop(t, p) // idempotent; the cleanup does nothing more
}

func TestStartProxyNoMeasure(t *testing.T) {
	srv := redistest.Start(t)
	p, set := proxytest.StartProxy(t, srv.Addr(), func(c *proxy.Config) { c.Measure = false; c.Loops = 1 })
	if set != nil {
		t.Fatalf("Set returned with measuring off")
	}
	redistest.Dial(t, p.Addr()).Roundtrip(t, redistest.Cmd("PING"), []byte("+PONG\r\n"))
}
