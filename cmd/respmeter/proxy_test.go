package main

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/respmeter/respmeter/internal/redistest"
)

// httpGet returns the body of GET url, failing t unless the status is 200.
func httpGet(t *testing.T, url string) string {
	t.Helper()
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s, %v\n%s", url, resp.Status, err, body)
	}
	return string(body)
}

// tableHeader is a line every latency table (metrics.WriteTable) starts with.
const tableHeader = "Latency in milliseconds"

// TestProxyRedis runs "respmeter proxy" in front of a real redis-server:
// a PING goes through, /metrics counts it, SIGUSR1 prints the table and
// SIGTERM stops with exit 0 after printing it again.
func TestProxyRedis(t *testing.T) {
	srv := redistest.Start(t) // skips without redis-server or with -short
	p := start(t, nil, "proxy",
		"--listen", "127.0.0.1:0", "--upstream", srv.Addr(), "--admin", "127.0.0.1:0",
		"--loops", "2", "--drain-timeout", "2s")
	addr := p.waitFor(t, p.stderr, logAddr("proxy listening"))[1]
	admin := p.waitFor(t, p.stderr, logAddr("admin listening"))[1]
	if strings.HasSuffix(admin, ":0") || strings.HasSuffix(addr, ":0") {
		t.Fatalf("port 0 logged instead of the chosen port: proxy %s, admin %s", addr, admin)
	}
	if strings.Contains(p.stderr.String(), "not loopback") {
		t.Errorf("loopback admin address warned about:\n%s", p.stderr)
	}

	c := redis.NewClient(&redis.Options{Addr: addr, DisableIdentity: true})
	if got, err := c.Ping(context.Background()).Result(); err != nil || got != "PONG" {
		t.Fatalf("PING through the proxy: %q, %v", got, err)
	}
	_ = c.Close()

	// The count is recorded when the reply is written; poll briefly.
	want := regexp.MustCompile(`(?m)^respmeter_commands_total\{command="ping"\} 1$`)
	deadline := time.Now().Add(5 * time.Second)
	for body := ""; !want.MatchString(body); {
		if time.Now().After(deadline) {
			t.Fatalf("/metrics has no %s:\n%s", want, body)
		}
		body = httpGet(t, "http://"+admin+"/metrics")
	}
	var stats map[string]any
	if err := json.Unmarshal([]byte(httpGet(t, "http://"+admin+"/stats")), &stats); err != nil {
		t.Errorf("/stats is not JSON: %v", err)
	}

	p.signal(t, syscall.SIGUSR1)
	p.waitFor(t, p.stdout, `(?m)^ping +1 `)
	if p.exited() {
		t.Fatal("SIGUSR1 ended the process")
	}

	p.signal(t, syscall.SIGTERM)
	if code := p.wait(t); code != exitOK {
		t.Fatalf("exit %d after SIGTERM\nstderr:\n%s", code, p.stderr)
	}
	out := p.stdout.String()
	if n := strings.Count(out, tableHeader); n != 2 {
		t.Errorf("stdout has %d tables, want 2 (SIGUSR1 and exit):\n%s", n, out)
	}
	if !strings.Contains(p.stderr.String(), `msg=stopping component=main reason=terminated`) {
		t.Errorf("no stopping line in stderr:\n%s", p.stderr)
	}
}

// exited reports whether p has exited 50 ms from now.
func (p *proc) exited() bool {
	time.Sleep(50 * time.Millisecond)
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// TestProxyAdmin covers the admin server's modes; the upstream need not
// exist for these.
func TestProxyAdmin(t *testing.T) {
	dead := redistest.ClosedAddr(t)

	t.Run("port 0", func(t *testing.T) {
		t.Parallel()
		p := start(t, nil, "proxy", "--listen", "127.0.0.1:0", "--upstream", dead, "--admin", "127.0.0.1:0")
		admin := p.waitFor(t, p.stderr, logAddr("admin listening"))[1]
		if !regexp.MustCompile(`^127\.0\.0\.1:[1-9]\d*$`).MatchString(admin) {
			t.Fatalf("admin address %q", admin)
		}
		if body := httpGet(t, "http://"+admin+"/metrics"); !strings.Contains(body, "go_goroutines") ||
			!strings.Contains(body, "process_open_fds") || !strings.Contains(body, "respmeter_") {
			t.Errorf("/metrics lacks Go, process or respmeter metrics:\n%s", body)
		}
		p.waitFor(t, p.stderr, `msg="upstream not reachable`)
		p.signal(t, syscall.SIGINT)
		if code := p.wait(t); code != exitOK {
			t.Fatalf("exit %d after SIGINT\nstderr:\n%s", code, p.stderr)
		}
		if !strings.Contains(p.stdout.String(), tableHeader) {
			t.Errorf("no table on stdout after SIGINT:\n%s", p.stdout)
		}
	})

	t.Run("off", func(t *testing.T) {
		t.Parallel()
		p := start(t, []string{"RESPMETER_LISTN=127.0.0.1:1"},
			"proxy", "--listen", "127.0.0.1:0", "--upstream", dead, "--admin", "off", "--log-format", "json")
		p.waitFor(t, p.stderr, `"msg":"unknown environment variable ignored","component":"config","name":"RESPMETER_LISTN"`)
		p.waitFor(t, p.stderr, `"msg":"proxy listening"`)
		p.waitFor(t, p.stderr, `"msg":"admin server off`)
		p.signal(t, syscall.SIGTERM)
		if code := p.wait(t); code != exitOK {
			t.Fatalf("exit %d\nstderr:\n%s", code, p.stderr)
		}
		stderr := p.stderr.String()
		if strings.Contains(stderr, "admin listening") {
			t.Errorf("admin server started with --admin off:\n%s", stderr)
		}
		for _, line := range strings.Split(strings.TrimSpace(stderr), "\n") {
			var rec map[string]any
			if err := json.Unmarshal([]byte(line), &rec); err != nil {
				t.Errorf("log line is not JSON: %q", line)
			} else if _, ok := rec["component"]; !ok {
				t.Errorf("log line has no component: %q", line)
			}
		}
	})

	t.Run("not loopback", func(t *testing.T) {
		t.Parallel()
		p := start(t, nil, "proxy", "--listen", "127.0.0.1:0", "--upstream", dead, "--admin", "0.0.0.0:0")
		p.waitFor(t, p.stderr, `level=WARN msg="admin address is not loopback`)
		p.signal(t, syscall.SIGTERM)
		if code := p.wait(t); code != exitOK {
			t.Fatalf("exit %d\nstderr:\n%s", code, p.stderr)
		}
	})
}

// TestPortInUse: a proxy or admin port already taken is a runtime failure,
// exit 1, and nothing is announced as listening.
func TestPortInUse(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	busy, dead := ln.Addr().String(), redistest.ClosedAddr(t)
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"listen", []string{"--listen", busy, "--admin", "off"}, "respmeter: proxy: listen " + busy},
		{"admin", []string{"--listen", "127.0.0.1:0", "--admin", busy}, "respmeter: admin: listen tcp " + busy},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, stderr, code := runCLI(t, nil, append([]string{"proxy", "--upstream", dead}, tc.args...)...)
			if code != exitFailure || !strings.Contains(stderr, tc.want) || strings.Contains(stderr, "listening") {
				t.Errorf("exit %d, want %d with %q and no \"listening\"\nstderr:\n%s", code, exitFailure, tc.want, stderr)
			}
		})
	}
}

// TestDemo runs "respmeter demo" with redis-server and, with PATH emptied,
// with the embedded miniredis.
func TestDemo(t *testing.T) {
	for _, tc := range []struct {
		name   string
		env    []string
		engine string
	}{
		{"redis-server", nil, "engine: redis-server 7."},
		{"miniredis", []string{"PATH="}, "engine: embedded miniredis (redis-server not found in PATH)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if tc.env == nil {
				if testing.Short() {
					t.Skip("demo with redis-server skipped with -short")
				}
				if _, err := exec.LookPath("redis-server"); err != nil {
					t.Skipf("redis-server not in PATH: %v", err)
				}
			}
			stdout, stderr, code := runCLI(t, tc.env, "demo", "--duration", "700ms", "--conns", "4")
			if code != exitOK {
				t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
			}
			for _, want := range []string{tc.engine, "/metrics\n", "/stats\n", tableHeader, " 0 errors\n"} {
				if !strings.Contains(stdout, want) {
					t.Errorf("stdout does not contain %q:\n%s", want, stdout)
				}
			}
			for _, cmd := range []string{"get", "set", "incr", "hset", "hgetall", "lpush", "lrange"} {
				if !regexp.MustCompile(`(?m)^` + cmd + ` +[1-9]\d* `).MatchString(stdout) {
					t.Errorf("table has no %s row:\n%s", cmd, stdout)
				}
			}
			// Nothing is left listening where the engine was.
			m := regexp.MustCompile(`(?m)^upstream: (\S+)$`).FindStringSubmatch(stdout)
			if m == nil {
				t.Fatalf("no upstream line:\n%s", stdout)
			}
			if c, err := net.DialTimeout("tcp", m[1], time.Second); err == nil {
				c.Close()
				t.Errorf("engine at %s still accepts connections after demo exited", m[1])
			}
		})
	}
}
