package proxy_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/respmeter/respmeter/internal/redistest"
	"github.com/respmeter/respmeter/proxy/proxytest"
)

// TestConnectionChurnRate: go-redis clients (RESP3, a client of its own
// each) open and close 1,000 connections a second for 3 s, as a PHP-FPM
// style application does, 32 at a time; a third of them with connection
// state (a name and db 2: private engine connections in shared mode), a
// third leave in the middle of a blocked BLPOP (the client's context runs
// out). Every command answers right, and afterwards nothing is left: the
// proxy's client gauge and in-flight count are 0, its engine connections
// back to what they were, the engine's connected_clients too, no
// goroutine of the process is new and no more descriptors are open (with
// the proxy still running: a shared engine connection may have been
// replaced meanwhile), and after the proxy stops no goroutine or
// descriptor is new. The rate reached is logged,
// not asserted (the offered load is paced at 1,000 a second; a busy
// machine reaches less): the test checks that nothing leaks, not speed.
func TestConnectionChurnRate(t *testing.T) {
	redistest.VerifyNoLeaks(t)
	e := e2eSetup(t)
	ctx := context.Background()
	const rate, seconds, workers = 1000, 3, 32

	engineClients := func() int {
		info := e.srv.DoT(t, "INFO", "clients").(string)
		for _, l := range strings.Split(info, "\r\n") {
			if v, ok := strings.CutPrefix(l, "connected_clients:"); ok {
				n, _ := strconv.Atoi(v)
				return n
			}
		}
		t.Fatalf("no connected_clients in %q", info)
		return 0
	}
	var failed atomic.Int32
	fail := func(i int, format string, args ...any) {
		if failed.Add(1) <= 5 {
			t.Errorf("connection %d: "+format, append([]any{i}, args...)...)
		}
	}
	cycle := func(i int) {
		o := &redis.Options{Addr: e.paddr, PoolSize: 1, MaxRetries: -1, DisableIdentity: true, ContextTimeoutEnabled: true,
			DialTimeout: 5 * time.Second, ReadTimeout: 5 * time.Second, WriteTimeout: 5 * time.Second}
		if i%3 == 1 {
			o.ClientName, o.DB = fmt.Sprintf("churn-%d", i), 2
		}
		c := redis.NewClient(o)
		defer c.Close()
		k := "churn:" + strconv.Itoa(i)
		switch i % 3 {
		case 0:
			if v, err := c.Ping(ctx).Result(); err != nil || v != "PONG" {
				fail(i, "PING: %q %v", v, err)
			}
		case 1:
			if err := c.Set(ctx, k, i, time.Minute).Err(); err != nil {
				fail(i, "SET: %v", err)
			}
			if v, err := c.Get(ctx, k).Int(); err != nil || v != i {
				fail(i, "GET: %d %v", v, err)
			}
			if n, err := c.ClientGetName(ctx).Result(); err != nil || n != o.ClientName {
				fail(i, "CLIENT GETNAME: %q %v", n, err)
			}
		case 2:
			if v, err := c.Ping(ctx).Result(); err != nil || v != "PONG" {
				fail(i, "PING: %q %v", v, err)
			}
			// Blocked until the client gives up and drops the connection.
			bctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
			err := c.BLPop(bctx, 0, k).Err()
			cancel()
			if !errors.Is(err, context.DeadlineExceeded) && !isTimeout(err) {
				fail(i, "BLPOP with nothing to pop: %v, want the client's deadline", err)
			}
		}
	}

	// Warm up (the loops' shared connections, the auth check's, pools),
	// then take the baseline.
	for i := range workers {
		cycle(i)
	}
	waitQuiet := func(ups int64, engine int) {
		redistest.Eventually(t, 10*time.Second, func() error {
			k := e.set.Counters()
			if k.ClientConns != 0 || e.p.InFlight() != 0 || k.UpstreamConns > ups || k.UpstreamConns < 0 {
				return fmt.Errorf("%d client connections, %d in flight, %d upstream connections; want 0, 0, at most %d",
					k.ClientConns, e.p.InFlight(), k.UpstreamConns, ups)
			}
			if n := engineClients(); n > engine {
				return fmt.Errorf("the engine has %d clients, %d before", n, engine)
			}
			return nil
		})
	}
	maxUp := int64(0)
	if sharedMode() {
		maxUp = 2*proxytest.DefaultLoops + 1 // and the auth check's
	}
	waitQuiet(maxUp, 1<<30)
	ups, engine := e.set.Counters().UpstreamConns, engineClients()
	before := redistest.Snapshot()
	accepted := e.set.Counters().ClientConnsTotal

	n := rate * seconds
	work := make(chan int, workers)
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				cycle(i)
			}
		}()
	}
	start := time.Now()
	tick := time.NewTicker(time.Second / rate)
	for i := workers; i < workers+n; i++ {
		<-tick.C
		work <- i
	}
	tick.Stop()
	close(work)
	wg.Wait()
	took := time.Since(start)
	t.Logf("%d connections in %v: %.0f a second (offered %d a second)", n, took.Round(time.Millisecond), float64(n)/took.Seconds(), rate)

	if got := e.set.Counters().ClientConnsTotal - accepted; got != int64(n) {
		t.Errorf("the proxy accepted %d connections, want %d", got, n)
	}
	waitQuiet(ups, engine)
	redistest.CheckNoGrowth(t, before)
}

// isTimeout reports whether err is a network timeout (go-redis reports a
// context deadline as the connection's read deadline passing).
func isTimeout(err error) bool {
	var te interface{ Timeout() bool }
	return errors.As(err, &te) && te.Timeout()
}
