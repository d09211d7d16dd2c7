package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/respmeter/respmeter/internal/redistest"
)

// httpGet returns the body of GET url, failing t unless the status is 200.
func httpGet(t testing.TB, url string) string {
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
	p, addr, admin := startProxy(t, srv.Addr(), "--loops", "2", "--drain-timeout", "2s")
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
	redistest.Eventually(t, 5*time.Second, func() error {
		if body := httpGet(t, "http://"+admin+"/metrics"); !want.MatchString(body) {
			return fmt.Errorf("/metrics has no %s:\n%s", want, body)
		}
		return nil
	})
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

// startProxy runs "respmeter proxy" in front of upstream, listening and
// serving its admin endpoints on free loopback ports, with args added, and
// returns it with the two addresses it logged.
func startProxy(t testing.TB, upstream string, args ...string) (p *proc, addr, admin string) {
	t.Helper()
	return startProxyExe(t, "", upstream, args...)
}

// startProxyExe is startProxy with the program exe: "" for the test
// binary, or a respmeter built from another revision (buildRevision).
func startProxyExe(t testing.TB, exe, upstream string, args ...string) (p *proc, addr, admin string) {
	t.Helper()
	args = append([]string{"proxy", "--listen", "127.0.0.1:0", "--upstream", upstream, "--admin", "127.0.0.1:0"}, args...)
	if exe == "" {
		p = start(t, nil, args...)
	} else {
		p = startExe(t, exe, nil, args...)
	}
	addr = p.waitFor(t, p.stderr, logAddr("proxy listening"))[1]
	admin = p.waitFor(t, p.stderr, logAddr("admin listening"))[1]
	return p, addr, admin
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
		{"admin with hdr log", []string{"--listen", "127.0.0.1:0", "--admin", busy, "--hdr-log", filepath.Join(t.TempDir(), "x.hlog")},
			"respmeter: admin: listen tcp " + busy},
		{"listen with hdr log", []string{"--listen", busy, "--admin", "off", "--hdr-log", filepath.Join(t.TempDir(), "x.hlog")},
			"respmeter: proxy: listen " + busy},
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
// with the embedded miniredis. The load runs in a process of its own (a
// pid other than the demo's, with CPU time of its own), the live page's
// URL is printed with the warning that it stops with the demo, and the
// output ends with the verdict in plain words, what it means and the
// command to run next.
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
				redistest.Tool(t, "redis-server")
			}
			p := start(t, tc.env, "demo", "--duration", "700ms", "--conns", "4")
			code := p.wait(t)
			stdout, stderr := p.stdout.String(), p.stderr.String()
			if code != exitOK {
				t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
			}
			checkDemoOutput(t, stdout, p.cmd.Process.Pid)
			for _, want := range []string{tc.engine, "/metrics,", "/stats,", tableHeader, " 0 errors\n",
				"(these stop when the demo ends; --serve keeps them up)\n"} {
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

// checkDemoOutput checks what every demo prints: the live page's URL, a
// load process apart from the demo's (pid demoPid), and the three closing
// lines. It returns the live page's URL.
func checkDemoOutput(t *testing.T, stdout string, demoPid int) string {
	t.Helper()
	live := regexp.MustCompile(`(?m)^live page: (http://127\.0\.0\.1:\d+/) `).FindStringSubmatch(stdout)
	if live == nil {
		t.Fatalf("no live page URL:\n%s", stdout)
	}
	m := regexp.MustCompile(`(?m)^load: ran in its own process \(pid (\d+), (\d+\.\d+) s of CPU\), apart from the proxy \(pid (\d+)\)$`).FindStringSubmatch(stdout)
	if m == nil {
		t.Fatalf("no load process line:\n%s", stdout)
	}
	if cpu, _ := strconv.ParseFloat(m[2], 64); m[1] == m[3] || m[3] != strconv.Itoa(demoPid) || cpu <= 0 {
		t.Errorf("load pid %s with %s s of CPU, proxy pid %s, demo pid %d: want the load in a process of its own that used CPU", m[1], m[2], m[3], demoPid)
	}
	lines := strings.Split(strings.TrimRight(stdout, "\n"), "\n")
	if len(lines) < 3 {
		t.Fatalf("output too short:\n%s", stdout)
	}
	last := lines[len(lines)-3:]
	if !regexp.MustCompile(`^In plain words: .+ \((client|path|proxy|engine|host)-(bound|saturated|starved|busy)\)\.$`).MatchString(last[0]) ||
		!strings.HasPrefix(last[1], "What it means: ") ||
		!strings.HasPrefix(last[2], "Next, in front of your own engine: respmeter proxy --upstream 127.0.0.1:6379 ") {
		t.Errorf("the output does not end with the plain verdict, its meaning and the next command:\n%s", strings.Join(last, "\n"))
	}
	return live[1]
}

// TestDemoServe: demo --serve keeps the live page, /metrics and the engine
// up after the load until SIGINT, then stops them and exits 0.
func TestDemoServe(t *testing.T) {
	p := start(t, nil, "demo", "--duration", "300ms", "--conns", "2", "--serve")
	// The closing lines come last: wait for them, then read the rest.
	p.waitFor(t, p.stdout, `(?m)^Next, in front of your own engine: .*\n`)
	m := regexp.MustCompile(`(?m)^serving until interrupted \(Ctrl-C\): live page (\S+), proxy (\S+), engine (\S+)$`).FindStringSubmatch(p.stdout.String())
	if m == nil {
		t.Fatalf("no serving line:\n%s", p.stdout)
	}
	live := checkDemoOutput(t, p.stdout.String(), p.cmd.Process.Pid)
	if live != m[1] {
		t.Errorf("serving %s, live page printed as %s", m[1], live)
	}
	if !strings.Contains(p.stdout.String(), "(until interrupted)") {
		t.Errorf("--serve: the live page line does not say it stays up:\n%s", p.stdout)
	}
	time.Sleep(200 * time.Millisecond) // past the load: still serving
	if body := httpGet(t, live); !strings.Contains(body, "<html") {
		t.Errorf("GET %s: not the live page:\n%.300s", live, body)
	}
	if body := httpGet(t, live+"metrics"); !strings.Contains(body, "respmeter_commands_total") {
		t.Errorf("GET %smetrics: no respmeter_commands_total", live)
	}
	c := redistest.Dial(t, m[2])
	c.Roundtrip(t, redistest.Cmd("PING"), []byte("+PONG\r\n"))
	p.signal(t, syscall.SIGINT)
	if code := p.wait(t); code != exitOK {
		t.Fatalf("exit %d after SIGINT\nstderr:\n%s", code, p.stderr)
	}
	for _, a := range []string{strings.TrimSuffix(strings.TrimPrefix(live, "http://"), "/"), m[3]} {
		if c, err := net.DialTimeout("tcp", a, time.Second); err == nil {
			c.Close()
			t.Errorf("%s still accepts connections after the demo exited", a)
		}
	}
}

// getJSON GETs url and decodes its JSON body into v.
func getJSON(t testing.TB, url string, v any) {
	t.Helper()
	body := httpGet(t, url)
	if err := json.Unmarshal([]byte(body), v); err != nil {
		t.Fatalf("GET %s: not JSON: %v\n%s", url, err, body)
	}
}

// statsDoc is the part of /stats TestProxyObservability reads.
type statsDoc struct {
	Commands map[string]json.RawMessage `json:"commands"`
	Engine   *struct {
		Sources  []string `json:"sources"`
		Polls    int64    `json:"polls"`
		Errors   int64    `json:"errors"`
		Commands map[string]struct {
			Calls    int64   `json:"calls"`
			Mean     float64 `json:"mean"`
			LastMean float64 `json:"last_mean"`
		} `json:"commands"`
	} `json:"engine"`
	Probe *struct {
		Count  int64   `json:"count"`
		Mean   float64 `json:"mean"`
		Errors int64   `json:"errors"`
	} `json:"probe"`
	Verdict *struct {
		IntervalSeconds float64            `json:"interval_seconds"`
		Requests        int64              `json:"requests"`
		CycleSeconds    float64            `json:"cycle_seconds"`
		Shares          map[string]float64 `json:"shares"`
		Bound           string             `json:"bound"`
		EngineKnown     bool               `json:"engine_known"`
		Little          bool               `json:"little"`
		L               *float64           `json:"l"`
		LambdaW         *float64           `json:"lambda_w"`
		WaitKnown       bool               `json:"wait_known"`
		HostKnown       bool               `json:"host_known"`
		Utilization     float64            `json:"engine_utilization"`
		String          string             `json:"string"`
	} `json:"verdict"`
}

// verdictBounds matches every verdict's bound (split.Verdict.Bound).
const verdictBounds = `^(client-bound|path-bound|proxy-bound|proxy-saturated|host-starved|engine-bound|engine-saturated|engine-starved|engine-busy|injected-bound)$`

// TestProxyObservability runs "respmeter proxy" with a fast probe, engine
// poll and verdict in front of a real redis-server: /slowlog records a
// DEBUG SLEEP with its phases, /stats gains "engine", "probe" and
// "verdict", /metrics the probe histogram, --hdr-log is written, and
// SIGTERM prints the verdict and the "where the time went" table.
func TestProxyObservability(t *testing.T) {
	srv := redistest.Start(t, "--enable-debug-command", "yes") // skips without redis-server or with -short
	hlog := filepath.Join(t.TempDir(), "proxy.hlog")
	p := start(t, nil, "proxy",
		"--listen", "127.0.0.1:0", "--upstream", srv.Addr(), "--admin", "127.0.0.1:0", "--loops", "2",
		"--hdr-interval", "200ms", "--engine-poll", "200ms", "--probe-interval", "20ms",
		"--slowlog-threshold", "10ms", "--slowlog-len", "8", "--hdr-log", hlog, "--log-level", "debug")
	addr := p.waitFor(t, p.stderr, logAddr("proxy listening"))[1]
	admin := "http://" + p.waitFor(t, p.stderr, logAddr("admin listening"))[1]

	// The engine poll counts what ran since its first poll: the DEBUG
	// SLEEP below must come after that one, or the poll never sees it.
	redistest.Eventually(t, 10*time.Second, func() error {
		var st statsDoc
		getJSON(t, admin+"/stats", &st)
		if st.Engine == nil || st.Engine.Polls < 1 {
			return errors.New("no engine poll yet")
		}
		return nil
	})
	ctx := context.Background()
	c := redis.NewClient(&redis.Options{Addr: addr, DisableIdentity: true, PoolSize: 1})
	defer c.Close()
	if err := c.Do(ctx, "DEBUG", "SLEEP", "0.02").Err(); err != nil {
		t.Fatalf("DEBUG SLEEP through the proxy: %v", err)
	}

	// /slowlog: the DEBUG SLEEP, with its phases.
	var slow struct {
		ThresholdSeconds float64 `json:"threshold_seconds"`
		Capacity         int     `json:"capacity"`
		Entries          []struct {
			Command string             `json:"command"`
			Args    int                `json:"args"`
			Client  string             `json:"client"`
			Phases  map[string]float64 `json:"phases_seconds"`
		} `json:"entries"`
	}
	redistest.Eventually(t, 10*time.Second, func() error {
		getJSON(t, admin+"/slowlog", &slow)
		found := false
		for _, e := range slow.Entries {
			if e.Command != "debug" {
				continue
			}
			found = true
			if e.Args != 3 || e.Client == "" {
				t.Errorf("debug entry: args %d, client %q; want 3 and an address", e.Args, e.Client)
			}
			if e.Phases["total"] < 0.02 || e.Phases["upstream"] < 0.02 {
				t.Errorf("debug entry phases %v: want total and upstream >= 20ms", e.Phases)
			}
			if _, ok := e.Phases["proxy"]; !ok {
				t.Errorf("debug entry phases %v: no proxy phase", e.Phases)
			}
		}
		if !found {
			return fmt.Errorf("/slowlog has no debug entry: %+v", slow.Entries)
		}
		return nil
	})
	if slow.ThresholdSeconds != 0.01 || slow.Capacity != 8 {
		t.Errorf("/slowlog threshold %v, capacity %d; want 0.01 and 8 (the flags)", slow.ThresholdSeconds, slow.Capacity)
	}

	// Load in the background until the verdict has requests and engine
	// time: that takes two polls and an interval after them.
	loadCtx, stopLoad := context.WithCancel(ctx)
	loadDone := make(chan error, 1)
	go func() {
		for i := 0; loadCtx.Err() == nil; i++ {
			if err := c.Set(ctx, "k", i, 0).Err(); err != nil {
				loadDone <- err
				return
			}
			if err := c.Get(ctx, "k").Err(); err != nil {
				loadDone <- err
				return
			}
		}
		loadDone <- nil
	}()
	var stats statsDoc
	redistest.Eventually(t, 20*time.Second, func() error {
		var raw map[string]json.RawMessage
		body := httpGet(t, admin+"/stats")
		if err := json.Unmarshal([]byte(body), &raw); err != nil {
			t.Fatalf("/stats is not JSON: %v", err)
		}
		for _, k := range []string{"commands", "totals", "think", "connections", "bytes", "engine", "probe", "verdict"} {
			if _, ok := raw[k]; !ok {
				t.Fatalf("/stats has no %q key:\n%s", k, body)
			}
		}
		stats = statsDoc{}
		_ = json.Unmarshal([]byte(body), &stats)
		// The DEBUG SLEEP run before the load is in a poll of its own,
		// which may come after the first verdict that knows the engine.
		if v := stats.Verdict; v != nil && v.Requests > 0 && v.EngineKnown && v.WaitKnown && stats.Probe != nil && stats.Probe.Count > 0 &&
			stats.Engine != nil && stats.Engine.Commands["debug"].Calls > 0 {
			return nil
		}
		return fmt.Errorf("no verdict with requests and engine time, or no DEBUG polled yet:\n%s", body)
	})
	stopLoad()
	if err := <-loadDone; err != nil {
		t.Fatalf("load through the proxy: %v", err)
	}

	v := stats.Verdict
	if v.IntervalSeconds < 0.1 || v.IntervalSeconds > 2 {
		t.Errorf("verdict interval %vs, want about 0.2s", v.IntervalSeconds)
	}
	sum := 0.0
	for _, k := range []string{"client", "path", "engine", "engine_wait", "proxy"} {
		share, ok := v.Shares[k]
		if !ok || share < 0 || share > 1 {
			t.Errorf("verdict share %q = %v (present %v), want 0..1", k, share, ok)
		}
		sum += share
	}
	if sum < 0.99 || sum > 1.01 {
		t.Errorf("verdict shares %v sum to %v, want 1", v.Shares, sum)
	}
	if v.CycleSeconds <= 0 || !regexp.MustCompile(verdictBounds).MatchString(v.Bound) || !v.Little || v.L == nil || v.LambdaW == nil ||
		!strings.HasPrefix(v.String, "cycle ") || !strings.Contains(v.String, "Little: L ") {
		t.Errorf("verdict %+v", v)
	}
	// redis-server 7 on this host: its thread's witnesses, /proc included.
	if !v.HostKnown || v.Utilization < 0 || v.Utilization > 1 || !strings.Contains(v.String, "engine wait") {
		t.Errorf("verdict witnesses: %+v", v)
	}
	e := stats.Engine
	if e == nil || e.Polls < 2 || !slices.Contains(e.Sources, "latency_histogram") || !slices.Contains(e.Sources, "commandstats") {
		t.Fatalf("engine %+v: want >= 2 polls from latency_histogram and commandstats", e)
	}
	if d := e.Commands["debug"]; d.Calls != 1 || d.Mean < 0.019 {
		t.Errorf("engine debug: %+v, want 1 call of >= 19ms", d)
	}
	if g := e.Commands["get"]; g.Calls == 0 {
		t.Errorf("engine get: %+v, want calls", g)
	}
	if stats.Probe.Errors != 0 || stats.Probe.Mean <= 0 {
		t.Errorf("probe %+v", stats.Probe)
	}

	metricsBody := httpGet(t, admin+"/metrics")
	runID := engineRunID(t, srv.Addr())
	for _, want := range []string{
		// The engine's figures name it in shard=, the one backend label,
		// and its own ones (polled, and its thread's utilisation and wait)
		// also by its run_id in engine=.
		`respmeter_upstream_probe_seconds_count{shard="` + srv.Addr() + `"}`,
		`respmeter_engine_commands_total{command="debug",engine="` + runID + `",shard="` + srv.Addr() + `"} 1`,
		`respmeter_engine_utilization{engine="` + runID + `",shard="` + srv.Addr() + `"} `,
		`respmeter_engine_wait_seconds{engine="` + runID + `",part="run_queue",shard="` + srv.Addr() + `"} `,
		`respmeter_network_path_seconds{shard="` + srv.Addr() + `"} `,
		`respmeter_engine_main_thread_cpu_seconds_total{engine="` + runID + `",shard="` + srv.Addr() + `"} `,
		`respmeter_engine_runqueue_wait_seconds_total{engine="` + runID + `",shard="` + srv.Addr() + `"} `,
	} {
		if !strings.Contains(metricsBody, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}

	p.signal(t, syscall.SIGTERM)
	if code := p.wait(t); code != exitOK {
		t.Fatalf("exit %d after SIGTERM\nstderr:\n%s", code, p.stderr)
	}
	out := p.stdout.String()
	for _, re := range []string{
		`(?m)^verdict: cycle \S+: client \d+% \| path \d+% \| engine (\d+%|n/a \(no engine stats for these commands\))` +
			`( \| engine wait \d+%( \(run queue \d+%\))?)? \| proxy \d+%( \((tls \d+%(, )?)?(loop wait \d+%)?\))?( \| injected \d+%)? — ` + verdictBounds[1:len(verdictBounds)-1] +
			`(; engine thread \d+% busy(, \d+% with \S+ \(\S+ each\)( from other clients| through respmeter| \(\d+% through respmeter\)))?)?` +
			`(; respmeter's threads waited \d+\.\dx their CPU time for a CPU)?; Little: L \d+\.\d\d vs λW \d+\.\d\d$`,
		`(?m)^next: \S`,
		`(?m)^Command +Timed +total \(ms\) +upstream \(ms\) +engine \(ms\) +wait \(ms\) +run queue \(ms\) +path \(ms\) +proxy \(ms\) +loop wait \(ms\) +injected \(ms\)$`,
		`(?m)^get +[1-9]\d* +\d+\.\d{4} +\d+\.\d{4} +\d+\.\d{4} +\d+\.\d{4} +\d+\.\d{4} +-?\d+\.\d{4} +\d+\.\d{4} +(?:\d+\.\d{4}|-) +\d+\.\d{4}$`,
		`(?m)^account per request \(ms\): think \d+\.\d{4} \+ path \d+\.\d{4} \+ engine \d+\.\d{4} \+ queue \d+\.\d{4} \+ other_clients \d+\.\d{4} \+ run_queue \d+\.\d{4} \+ proxy \d+\.\d{4} \+ loop_wait_request \d+\.\d{4} \+ loop_wait_reply \d+\.\d{4} \+ injected \d+\.\d{4} \+ tls \d+\.\d{4} = cycle \d+\.\d{4}$`,
		`(?m)^Totals +[1-9]\d* `,
		`(?m)^probe: PING round trip mean \d+\.\d{3} ms, p99 \d+\.\d{3} ms over [1-9]\d* PINGs, 0 errors$`,
		`(?m)^think: mean \d+\.\d{3} ms over [1-9]\d* gaps`,
	} {
		if !regexp.MustCompile(re).MatchString(out) {
			t.Errorf("stdout has no match for %s:\n%s\nstderr:\n%s", re, out, p.stderr)
		}
	}
	checkAccount(t, out) // the exit verdict adds up to the table beside it
	// DEBUG SLEEP 0.02: its 20 ms upstream in its row, which is its part
	// of the account (the engine's own 20 ms, checked in /stats above,
	// is in the account only where a poll within its interval saw it:
	// it ran before the load, perhaps before the engine's second poll, and
	// then its interval books it to the path, in its row as in Totals).
	m := regexp.MustCompile(`(?m)^debug +1 +(\d+\.\d+) +(\d+\.\d+) `).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no debug row:\n%s", out)
	}
	if total, up := parseFloat(t, m[1]), parseFloat(t, m[2]); up < 19 || total < up {
		t.Errorf("debug: total %s ms, upstream %s ms; want 19 <= upstream <= total", m[1], m[2])
	}
	if i, j := strings.Index(out, tableHeader), strings.Index(out, "\nverdict: "); i < 0 || j < i {
		t.Errorf("the verdict does not follow the latency table:\n%s", out)
	}

	// The HdrHistogram log was written and closed with the last interval.
	data, err := os.ReadFile(hlog)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"#[Histogram log format version 1.3]", "Tag=get.total,", "Tag=debug.upstream,"} {
		if !strings.Contains(string(data), want) {
			t.Errorf("%s lacks %q:\n%s", hlog, want, data)
		}
	}
}

func parseFloat(t *testing.T, s string) float64 {
	t.Helper()
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// TestProxyLimits checks that --max-clients and --client-query-limit reach
// the proxy, and that --probe-interval 0, --engine-poll 0 and a negative
// --slowlog-threshold turn those off.
func TestProxyLimits(t *testing.T) {
	srv := redistest.Start(t)
	p := start(t, []string{"RESPMETER_MAX_CLIENTS=1"}, "proxy",
		"--listen", "127.0.0.1:0", "--upstream", srv.Addr(), "--admin", "127.0.0.1:0",
		"--client-query-limit", "1KiB", "--probe-interval", "0s", "--engine-poll", "0s", "--slowlog-threshold", "-1s",
		"--hdr-interval", "50ms")
	addr := p.waitFor(t, p.stderr, logAddr("proxy listening"))[1]
	admin := "http://" + p.waitFor(t, p.stderr, logAddr("admin listening"))[1]

	dial := func() (net.Conn, *bufio.Reader) {
		t.Helper()
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		return c, bufio.NewReader(c)
	}
	c1, r1 := dial()
	if _, err := c1.Write([]byte("PING\r\n")); err != nil {
		t.Fatal(err)
	}
	if line, err := r1.ReadString('\n'); line != "+PONG\r\n" {
		t.Fatalf("first client: %q, %v", line, err)
	}
	_, r2 := dial()
	if line, err := r2.ReadString('\n'); line != "-ERR max number of clients reached\r\n" {
		t.Errorf("second client with --max-clients 1: %q, %v", line, err)
	}
	// More than 1KiB of an unfinished request: the client is evicted.
	if _, err := c1.Write([]byte("*2\r\n$3\r\nSET\r\n$4000\r\n" + strings.Repeat("x", 2000))); err != nil {
		t.Fatal(err)
	}
	if b, err := io.ReadAll(r1); len(b) != 0 || err != nil {
		t.Errorf("client over --client-query-limit: read %q, %v; want EOF", b, err)
	}
	want := `respmeter_client_evictions_total{reason="query_limit"} 1`
	redistest.Eventually(t, 5*time.Second, func() error {
		body := httpGet(t, admin+"/metrics")
		if strings.Contains(body, "respmeter_upstream_probe_seconds") || strings.Contains(body, "respmeter_engine_") {
			t.Fatalf("probe or engine metrics with --probe-interval 0 --engine-poll 0:\n%s", body)
		}
		if !strings.Contains(body, want) {
			return fmt.Errorf("/metrics lacks %s:\n%s", want, body)
		}
		return nil
	})

	var stats map[string]json.RawMessage
	redistest.Eventually(t, 5*time.Second, func() error {
		getJSON(t, admin+"/stats", &stats)
		if string(stats["verdict"]) == "null" {
			return errors.New("/stats verdict still null with --hdr-interval 50ms")
		}
		return nil
	})
	if string(stats["engine"]) != "null" || string(stats["probe"]) != "null" {
		t.Errorf("/stats engine %s, probe %s; want null when off", stats["engine"], stats["probe"])
	}
	var slow struct {
		ThresholdSeconds float64 `json:"threshold_seconds"`
	}
	getJSON(t, admin+"/slowlog", &slow)
	if slow.ThresholdSeconds != -1 {
		t.Errorf("/slowlog threshold_seconds %v with --slowlog-threshold -1s, want -1 (disabled)", slow.ThresholdSeconds)
	}

	p.signal(t, syscall.SIGTERM)
	if code := p.wait(t); code != exitOK {
		t.Fatalf("exit %d\nstderr:\n%s", code, p.stderr)
	}
	out := p.stdout.String()
	for _, want := range []string{"\nverdict: ", "probe: off (--probe-interval 0)\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("stdout lacks %q:\n%s", want, out)
		}
	}
	// No engine poll: the engine's columns are unknown; the row's path is
	// its part of the account, which books the upstream the engine's
	// figures cannot explain to the path (or to a reply's loop wait).
	if !regexp.MustCompile(`(?m)^ping +1 +\d+\.\d{4} +\d+\.\d{4} +- +- +- +\d+\.\d{4} +\d+\.\d{4} +(?:\d+\.\d{4}|-) +\d+\.\d{4}$`).MatchString(out) {
		t.Errorf("no ping row with unknown engine:\n%s", out)
	}
}

// TestHDRLogBadPath: an --hdr-log that cannot be created is a runtime
// failure, exit 1, before anything listens.
func TestHDRLogBadPath(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "no", "such", "dir", "x.hlog")
	_, stderr, code := runCLI(t, nil, "proxy", "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0",
		"--upstream", redistest.ClosedAddr(t), "--hdr-log", bad)
	if code != exitFailure || !strings.Contains(stderr, "respmeter: ") || !strings.Contains(stderr, bad) ||
		strings.Contains(stderr, "listening") {
		t.Errorf("exit %d, want %d naming %s and nothing listening\nstderr:\n%s", code, exitFailure, bad, stderr)
	}
}

// TestProxySecondSignal: a second SIGTERM while the drain waits for a
// BLPOP cuts the wait short and still exits 0, as --help says ("a second one
// cuts the wait short"); it used to exit 1 with "unclean stop".
func TestProxySecondSignal(t *testing.T) {
	srv := redistest.Start(t) // skips without redis-server or with -short
	p := start(t, nil, "proxy",
		"--listen", "127.0.0.1:0", "--upstream", srv.Addr(), "--admin", "off", "--drain-timeout", "30s")
	addr := p.waitFor(t, p.stderr, logAddr("proxy listening"))[1]
	c := redistest.Dial(t, addr)
	if err := c.Write(redistest.Cmd("BLPOP", "nolist", "0")); err != nil {
		t.Fatal(err)
	}
	// The BLPOP is in flight once the engine has it blocked.
	redistest.Eventually(t, 5*time.Second, func() error {
		if !strings.Contains(fmt.Sprint(srv.DoT(t, "INFO", "clients")), "blocked_clients:1") {
			return errors.New("the BLPOP never blocked in the engine")
		}
		return nil
	})
	p.signal(t, syscall.SIGTERM)
	p.waitFor(t, p.stderr, `msg=stopping`)
	p.signal(t, syscall.SIGTERM)
	if code := p.wait(t); code != exitOK {
		t.Fatalf("exit %d after a second SIGTERM, want 0\nstderr:\n%s", code, p.stderr)
	}
	if s := p.stderr.String(); !strings.Contains(s, "second signal") || strings.Contains(s, "unclean stop") {
		t.Errorf("stderr lacks the second-signal warning or reports an unclean stop:\n%s", s)
	}
}

// TestRequestsInFlightGauge: /metrics' respmeter_requests_in_flight is 1
// while a DEBUG SLEEP 2 sent through the proxy is on the engine, and back to
// 0 once its reply has been written.
func TestRequestsInFlightGauge(t *testing.T) {
	srv := redistest.Start(t, "--enable-debug-command", "yes")
	_, addr, admin := startProxy(t, srv.Addr())
	gauge := regexp.MustCompile(`(?m)^respmeter_requests_in_flight (\S+)$`)
	inFlight := func() string {
		m := gauge.FindStringSubmatch(httpGet(t, "http://"+admin+"/metrics"))
		if m == nil {
			t.Fatal("/metrics has no respmeter_requests_in_flight")
		}
		return m[1]
	}
	if got := inFlight(); got != "0" {
		t.Fatalf("in flight before any request: %s, want 0", got)
	}
	c := redis.NewClient(&redis.Options{Addr: addr, DisableIdentity: true, ReadTimeout: 10 * time.Second})
	defer c.Close()
	done := make(chan error, 1)
	go func() { done <- c.Do(context.Background(), "DEBUG", "SLEEP", "2").Err() }()
	redistest.Eventually(t, 2*time.Second, func() error {
		if got := inFlight(); got != "1" {
			return fmt.Errorf("in flight during DEBUG SLEEP 2: %s, want 1", got)
		}
		return nil
	})
	if err := <-done; err != nil {
		t.Fatalf("DEBUG SLEEP through the proxy: %v", err)
	}
	if got := inFlight(); got != "0" {
		t.Errorf("in flight after the reply: %s, want 0", got)
	}
}
