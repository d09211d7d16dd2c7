package proxy_test

// Shared helpers of the end-to-end tests (e2e_*_test.go): each test starts
// its own redis-server (internal/redistest) and an in-process proxy in
// front of it (proxy/proxytest), then uses the engine as the
// oracle: the same bytes are sent directly and through the proxy and the
// replies must be identical.

import (
	"bytes"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/respmeter/respmeter/internal/redistest"
	"github.com/respmeter/respmeter/metrics"
	"github.com/respmeter/respmeter/proxy"
	"github.com/respmeter/respmeter/proxy/proxytest"
)

// env is one engine with one proxy in front of it.
type e2eEnv struct {
	srv   *redistest.Server
	p     *proxy.Proxy
	paddr string
	set   *metrics.Set
}

// setup starts redis-server with args and a proxy in front of it (it skips
// t when redis-server is missing or -short is set).
func e2eSetup(t *testing.T, args ...string) *e2eEnv {
	t.Helper()
	return e2eSetupWith(t, nil, args...)
}

func e2eSetupWith(t *testing.T, mod func(*proxy.Config), args ...string) *e2eEnv {
	t.Helper()
	srv := redistest.Start(t, args...)
	p, set := proxytest.StartProxy(t, srv.Addr(), mod)
	return &e2eEnv{srv: srv, p: p, paddr: p.Addr(), set: set}
}

var respCmd = redistest.Cmd

// join concatenates requests into one write.
func respJoin(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

// same runs the exchange against the engine and through the proxy, each on
// a freshly flushed data set, and fails t unless the (masked) bytes and the
// closed flags agree. It returns the direct (masked) bytes.
func (e *e2eEnv) same(t *testing.T, writes [][]byte, o redistest.ExchangeOptions, masks ...func([]byte) []byte) []byte {
	t.Helper()
	e.srv.DoT(t, "FLUSHALL")
	direct, dClosed := redistest.Exchange(t, e.srv.Addr(), writes, o)
	e.srv.DoT(t, "FLUSHALL")
	via, pClosed := redistest.Exchange(t, e.paddr, writes, o)
	for _, m := range masks {
		direct, via = m(direct), m(via)
	}
	if !bytes.Equal(direct, via) || dClosed != pClosed {
		t.Errorf("proxy differs from engine\n direct (closed=%v): %q\n proxy  (closed=%v): %q",
			dClosed, redistest.Trunc(direct), pClosed, redistest.Trunc(via))
	}
	return direct
}

// healthy checks the proxy still serves a fresh connection.
func (e *e2eEnv) healthy(t *testing.T) {
	t.Helper()
	got, _ := redistest.Exchange(t, e.paddr, [][]byte{respCmd("PING")},
		redistest.ExchangeOptions{Want: 7, Timeout: 2 * time.Second})
	if string(got) != "+PONG\r\n" {
		t.Errorf("proxy unhealthy: PING on a fresh connection got %q", got)
	}
}

// targets names the two ways to reach the engine, for tests that run the
// same steps against each and compare.
func (e *e2eEnv) targets() []struct{ name, addr string } {
	return []struct{ name, addr string }{{"direct", e.srv.Addr()}, {"proxy", e.paddr}}
}

// eq fails t unless got equals want.
func eqBytes(t *testing.T, what string, got []byte, want string) {
	t.Helper()
	if string(got) != want {
		t.Errorf("%s:\n got  %q\n want %q", what, redistest.Trunc(got), redistest.Trunc([]byte(want)))
	}
}

// waitCount polls set (up to 2 s) until command name has been counted at
// least want times and returns its stats. The proxy records a command
// after writing its reply, so a client can see the reply a moment before
// the count moves.
func e2eWaitCount(t *testing.T, set *metrics.Set, name string, want int) metrics.CommandStats {
	t.Helper()
	var c metrics.CommandStats
	_ = redistest.Await(2*time.Second, 5*time.Millisecond, func() error {
		if c = proxytest.Command(t, set, name); c.Count < int64(want) {
			return errors.New("short") // the caller asserts the count
		}
		return nil
	})
	return c
}

// sharedMode reports whether the suite runs with shared upstream
// connections (RESPMETER_TEST_UPSTREAM_MODE=shared, see proxytest).
func sharedMode() bool { return os.Getenv("RESPMETER_TEST_UPSTREAM_MODE") == "shared" }

// routedMode reports whether the suite runs through hash-slot routing
// (RESPMETER_TEST_ROUTE=slots, see proxytest), the engine as the only
// shard.
func routedMode() bool { return os.Getenv("RESPMETER_TEST_ROUTE") == "slots" }

// pinnedMode reports whether the suite runs under --route pinned
// (RESPMETER_TEST_ROUTE=pinned, see proxytest; not for a test that asks
// for shared connections).
func pinnedMode() bool { return os.Getenv("RESPMETER_TEST_ROUTE") == "pinned" }

// skipIfRouted skips a test of behaviour that --route slots changes by
// design when the suite runs routed; why says how (and where docs/ states
// it).
func skipIfRouted(t *testing.T, why string) {
	t.Helper()
	if routedMode() {
		t.Skip("--route slots: " + why)
	}
}

// e2eSettledCount returns the count of command name once it has stopped
// changing for 50 ms (at most 2 s): a proxy records a command just after
// writing its reply, so a client can read the reply of its last command a
// moment before that command is counted.
func e2eSettledCount(t *testing.T, set *metrics.Set, name string) int64 {
	t.Helper()
	last := int64(-1)
	_ = redistest.Await(2*time.Second, 50*time.Millisecond, func() error {
		c := proxytest.Command(t, set, name).Count
		if c != last {
			last = c
			return errors.New("still changing") // the caller asserts the count
		}
		return nil
	})
	return last
}
