package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/respmeter/respmeter/internal/redistest"
)

// TestProxySharedUpstream runs "respmeter proxy --upstream-mode shared
// --loops 1" in front of a real redis-server with 20 concurrent raw-socket
// clients doing SET/GET: every client gets its own values back, the engine
// sees the shared connections plus one private connection per client that
// moved (two MULTI, one SELECT 1) instead of one per client, the moves are
// counted by reason, and /metrics shows the batching.
func TestProxySharedUpstream(t *testing.T) {
	const (
		clients = 20
		rounds  = 50
		conns   = 2 // --upstream-conns
	)
	// Clients that move to private connections halfway, and why.
	moves := map[int]string{0: "MULTI", 1: "MULTI", 2: "SELECT"}

	srv := redistest.Start(t) // skips without redis-server or with -short
	// No PING probe and no engine poll: the proxy's only connections to
	// the engine are then those of its clients.
	p := start(t, nil, "proxy",
		"--listen", "127.0.0.1:0", "--upstream", srv.Addr(), "--admin", "127.0.0.1:0",
		"--upstream-mode", "shared", "--upstream-conns", strconv.Itoa(conns), "--loops", "1",
		"--probe-interval", "0s", "--engine-poll", "0s", "--drain-timeout", "2s")
	m := p.waitFor(t, p.stderr, `msg="proxy listening" component=proxy addr=(\S+) route=none upstream=(\S+) `+
		`upstream_mode=shared upstream_conns=2 loops=1 measure=true\n`)
	addr := m[1]
	admin := "http://" + p.waitFor(t, p.stderr, logAddr("admin listening"))[1]

	// Connect every client first, so that all 20 are open together.
	cs := make([]net.Conn, clients)
	for i := range cs {
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		_ = c.SetDeadline(time.Now().Add(30 * time.Second))
		cs[i] = c
	}
	var wg sync.WaitGroup
	errs := make(chan error, clients)
	for i, c := range cs {
		wg.Go(func() {
			if err := sharedClient(c, i, rounds, moves[i]); err != nil {
				errs <- fmt.Errorf("client %d: %w", i, err)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if t.Failed() {
		t.FailNow()
	}

	// The values are in the engine: db 0, and for the client that
	// switched halfway, db 1 from then on.
	for i := range clients {
		key, want := fmt.Sprintf("sh:%d", i), fmt.Sprintf("c%d-r%d", i, rounds-1)
		if moves[i] == "SELECT" {
			want = fmt.Sprintf("c%d-r%d", i, rounds/2-1)
		}
		if got := srv.Do("GET", key); got != want {
			t.Errorf("engine db 0: GET %s = %v, want %s", key, got, want)
		}
	}
	db1 := redis.NewClient(&redis.Options{Addr: srv.Addr(), DB: 1, DisableIdentity: true})
	defer db1.Close()
	if got, err := db1.Get(context.Background(), "sh:2:db1").Result(); err != nil || got != fmt.Sprintf("c2-r%d", rounds-1) {
		t.Errorf("engine db 1: GET sh:2:db1 = %q, %v; want c2-r%d", got, err, rounds-1)
	}

	// The engine's view, with all 20 clients still connected: the shared
	// connections (RESP2: resp=2) and the private ones of the clients that
	// moved, not one per client. The test's own connections use RESP3;
	// the one the auth check keeps is named.
	clist := srv.Do("CLIENT", "LIST").(string)
	var proxied []string
	for _, line := range strings.Split(strings.TrimSpace(clist), "\n") {
		if strings.Contains(line, " resp=2") && !strings.Contains(line, " name=respmeter-auth-check ") {
			proxied = append(proxied, line)
		}
	}
	if want := conns + len(moves); len(proxied) != want {
		t.Errorf("engine sees %d proxy connections for %d clients, want %d (%d shared, %d private):\n%s",
			len(proxied), clients, want, conns, len(moves), clist)
	}

	// /metrics: the moves by reason, and batches on the shared connections.
	wantLines := []string{
		`respmeter_handoffs_total{reason="transaction"} 2` + "\n",
		`respmeter_handoffs_total{reason="state"} 1` + "\n",
		fmt.Sprintf(`respmeter_upstream_batch_commands_count{shard=%q} `, srv.Addr()),
	}
	var body string
	redistest.Eventually(t, 10*time.Second, func() error {
		body = httpGet(t, admin+"/metrics")
		for _, w := range wantLines {
			if !strings.Contains(body, w) {
				return fmt.Errorf("/metrics lacks %q:\n%s", w, body)
			}
		}
		return nil
	})
	// Every client writes SET and GET together: a write upstream carries
	// more than one command on average.
	sum := metricValue(t, body, fmt.Sprintf(`respmeter_upstream_batch_commands_sum{shard=%q}`, srv.Addr()))
	count := metricValue(t, body, fmt.Sprintf(`respmeter_upstream_batch_commands_count{shard=%q}`, srv.Addr()))
	if sum < clients*rounds*2 || count <= 0 || sum/count <= 1 {
		t.Errorf("respmeter_upstream_batch_commands: sum %v, count %v; want >= %d commands, more than 1 per write",
			sum, count, clients*rounds*2)
	}

	for _, c := range cs {
		_ = c.Close()
	}
	p.signal(t, syscall.SIGTERM)
	if code := p.wait(t); code != exitOK {
		t.Fatalf("exit %d after SIGTERM\nstderr:\n%s", code, p.stderr)
	}
	if !regexp.MustCompile(`(?m)^set +[1-9]\d* `).MatchString(p.stdout.String()) {
		t.Errorf("no set row in the table:\n%s", p.stdout)
	}
}

// sharedClient runs rounds of "SET sh:<i> c<i>-r<n>" and "GET sh:<i>",
// written together, on c and checks every reply. With move "MULTI" or
// "SELECT" it sends, halfway, a transaction or SELECT 1 (after which its
// key is sh:<i>:db1), which moves it to a private upstream connection.
func sharedClient(c net.Conn, i, rounds int, move string) error {
	r := bufio.NewReader(c)
	exchange := func(req, want string) error {
		if _, err := io.WriteString(c, req); err != nil {
			return err
		}
		got := make([]byte, len(want))
		if _, err := io.ReadFull(r, got); err != nil || string(got) != want {
			return fmt.Errorf("sent %q: got %q, want %q (%v)", req, got, want, err)
		}
		return nil
	}
	key := fmt.Sprintf("sh:%d", i)
	for n := range rounds {
		if n == rounds/2 {
			switch move {
			case "MULTI":
				ctr := fmt.Sprintf("sh:%d:n", i)
				if err := exchange(string(redistest.Cmds([]string{"MULTI"}, []string{"INCR", ctr}, []string{"INCR", ctr}, []string{"EXEC"})),
					"+OK\r\n+QUEUED\r\n+QUEUED\r\n*2\r\n:1\r\n:2\r\n"); err != nil {
					return err
				}
			case "SELECT":
				if err := exchange(string(redistest.Cmd("SELECT", "1")), "+OK\r\n"); err != nil {
					return err
				}
				key += ":db1"
			}
		}
		v := fmt.Sprintf("c%d-r%d", i, n)
		req := redistest.Cmds([]string{"SET", key, v}, []string{"GET", key})
		if err := exchange(string(req), fmt.Sprintf("+OK\r\n$%d\r\n%s\r\n", len(v), v)); err != nil {
			return fmt.Errorf("round %d: %w", n, err)
		}
	}
	return nil
}

// metricValue returns the value of the sample named series (name and
// labels, exactly as exposed) in a Prometheus text body.
func metricValue(t *testing.T, body, series string) float64 {
	t.Helper()
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\S+)$`).FindStringSubmatch(body)
	if m == nil {
		t.Fatalf("/metrics has no %s:\n%s", series, body)
	}
	return parseFloat(t, m[1])
}
