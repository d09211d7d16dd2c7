package proxy_test

import (
	"bytes"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/respmeter/respmeter/internal/redistest"
	"github.com/respmeter/respmeter/proxy"
	"github.com/respmeter/respmeter/proxy/proxytest"
)

// authChecks returns how many auth checks the engine has answered: its
// calls of ACL GETUSER (INFO commandstats), which each check sends once.
func authChecks(t *testing.T, srv *redistest.Server) int64 {
	t.Helper()
	m := regexp.MustCompile(`cmdstat_acl\|getuser:calls=(\d+)`).FindStringSubmatch(srv.DoT(t, "INFO", "commandstats").(string))
	if m == nil {
		return 0
	}
	n, _ := strconv.ParseInt(m[1], 10, 64)
	return n
}

// TestSharedNoAuthWindow: in shared mode a new client is served on the
// shared connections only after an auth check that started after it
// connected has passed. The periodic check is set to an hour, so only the
// checks new clients ask for run. A burst of 100 clients that connected
// together costs at most 2 checks (each check is one ACL GETUSER default
// on respmeter's kept check connection, counted by the engine) and at
// least one. Then CONFIG SET requirepass, sent to the
// engine directly, is met by a new client's GET 50 ms later: -NOAUTH, as
// a fresh engine connection gets. It was served from the still logged-in
// shared connection until the next periodic check.
func TestSharedNoAuthWindow(t *testing.T) {
	srv := redistest.Start(t)
	srv.DoT(t, "SET", "auth:w", "v")
	p, set := proxytest.StartProxy(t, srv.Addr(), func(c *proxy.Config) {
		c.UpstreamMode = proxy.UpstreamShared
		c.Loops = 1
		c.AuthCheck = time.Hour
	})
	admin := redistest.Dial(t, srv.Addr()) // logged in before the password
	defer admin.Close()
	warm := redistest.Dial(t, p.Addr())
	defer warm.Close()
	warm.Roundtrip(t, redistest.Cmd("GET", "auth:w"), []byte("$1\r\nv\r\n"))

	const burst = 100
	conns := make([]*redistest.Conn, burst)
	for i := range conns {
		conns[i] = redistest.Dial(t, p.Addr())
		defer conns[i].Close()
	}
	// The burst's clients connected before it: respmeter has opened them
	// all (a client opened after a check started needs the next one, so on
	// a busy machine, where the loop opens them late, the burst would cost
	// a check for each one begun while they were being opened).
	redistest.Eventually(t, 5*time.Second, func() error {
		if n := set.Counters().ClientConns; n < burst+1 {
			return fmt.Errorf("respmeter has opened %d client connections, want %d", n, burst+1)
		}
		return nil
	})
	before := authChecks(t, srv)
	var wg sync.WaitGroup
	errs := make(chan error, burst)
	for _, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := c.Write(redistest.Cmd("GET", "auth:w")); err != nil {
				errs <- err
				return
			}
			if b, err := c.ReadFrame(10 * time.Second); err != nil || string(b) != "$1\r\nv\r\n" {
				errs <- fmt.Errorf("burst GET: %q %v", b, err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if checks := authChecks(t, srv) - before; checks < 1 || checks > 2 {
		t.Errorf("a burst of %d new clients cost %d auth checks, want 1 or 2", burst, checks)
	}

	admin.Roundtrip(t, redistest.Cmd("CONFIG", "SET", "requirepass", "pw"), []byte("+OK\r\n"))
	defer admin.Roundtrip(t, redistest.Cmd("CONFIG", "SET", "requirepass", ""), []byte("+OK\r\n"))
	time.Sleep(50 * time.Millisecond)
	got, _ := redistest.Exchange(t, p.Addr(), [][]byte{redistest.Cmd("GET", "auth:w")},
		redistest.ExchangeOptions{Frames: 1, Timeout: 5 * time.Second})
	if !bytes.HasPrefix(got, []byte("-NOAUTH")) {
		t.Errorf("a new client without AUTH, 50 ms after requirepass: %q, want -NOAUTH", got)
	}
}

// TestSharedAuthCheckAfterReply: in shared mode the auth check that a
// command which may change the engine's authentication calls for runs
// once the engine has answered it, and only for such a command. The
// periodic check is set to an hour. CONFIG GET, ACL WHOAMI and ACL LIST
// (redis-benchmark sends CONFIG GET at start) ask for no check: the engine
// answers no ACL GETUSER in the 300 ms after them. A new client connecting
// right after the reply to a CONFIG SET is served after one check, not
// after a delay: the median of its first GET over 10 such clients stays
// within 50 ms of the same new clients' median without the CONFIG SET,
// measured in the same run (a check set off when the CONFIG SET was sent
// and run 100 ms later held each of them that long). And CONFIG SET
// requirepass sent through respmeter is met by a new client at once, with
// no pause after its reply: -NOAUTH.
func TestSharedAuthCheckAfterReply(t *testing.T) {
	srv := redistest.Start(t)
	srv.DoT(t, "SET", "auth:r", "v")
	p, _ := proxytest.StartProxy(t, srv.Addr(), func(c *proxy.Config) {
		c.UpstreamMode = proxy.UpstreamShared
		c.Loops = 1
		c.AuthCheck = time.Hour
	})
	admin := redistest.Dial(t, p.Addr())
	defer admin.Close()
	admin.Roundtrip(t, redistest.Cmd("GET", "auth:r"), []byte("$1\r\nv\r\n"))

	before := authChecks(t, srv)
	for range 20 {
		if err := admin.Write(redistest.Cmd("CONFIG", "GET", "save")); err != nil {
			t.Fatal(err)
		}
		if b, err := admin.ReadFrame(5 * time.Second); err != nil || !bytes.HasPrefix(b, []byte("*2\r\n")) {
			t.Fatalf("CONFIG GET save: %q %v", b, err)
		}
	}
	for _, cmd := range [][]byte{redistest.Cmd("ACL", "WHOAMI"), redistest.Cmd("ACL", "LIST")} {
		if err := admin.Write(cmd); err != nil {
			t.Fatal(err)
		}
		if _, err := admin.ReadFrame(5 * time.Second); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(300 * time.Millisecond)
	if n := authChecks(t, srv) - before; n != 0 {
		t.Errorf("CONFIG GET, ACL WHOAMI and ACL LIST set off %d auth checks, want none", n)
	}

	// A new client's first GET, after a CONFIG SET answered or not.
	newClient := func(configSet bool) time.Duration {
		if configSet {
			admin.Roundtrip(t, redistest.Cmd("CONFIG", "SET", "maxmemory-policy", "noeviction"), []byte("+OK\r\n"))
		}
		t0 := time.Now()
		got, _ := redistest.Exchange(t, p.Addr(), [][]byte{redistest.Cmd("GET", "auth:r")},
			redistest.ExchangeOptions{Frames: 1, Timeout: 5 * time.Second})
		if string(got) != "$1\r\nv\r\n" {
			t.Fatalf("a new client's GET: %q", got)
		}
		return time.Since(t0)
	}
	var plain, after []time.Duration
	for range 10 {
		plain = append(plain, newClient(false))
		after = append(after, newClient(true))
	}
	slices.Sort(plain)
	slices.Sort(after)
	t.Logf("a new client's first GET, median: %v, right after a CONFIG SET's reply %v", plain[5], after[5])
	if after[5] > plain[5]+50*time.Millisecond {
		t.Errorf("a new client right after a CONFIG SET waits %v (median of 10) for its first GET, %v without one: the auth check is delayed", after[5], plain[5])
	}

	admin.Roundtrip(t, redistest.Cmd("CONFIG", "SET", "requirepass", "pw"), []byte("+OK\r\n"))
	defer srv.DoT(t, "CONFIG", "SET", "requirepass", "")
	got, _ := redistest.Exchange(t, p.Addr(), [][]byte{redistest.Cmd("GET", "auth:r")},
		redistest.ExchangeOptions{Frames: 1, Timeout: 5 * time.Second})
	if !bytes.HasPrefix(got, []byte("-NOAUTH")) {
		t.Errorf("a new client without AUTH right after CONFIG SET requirepass through respmeter: %q, want -NOAUTH", got)
	}
}
