package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/respmeter/respmeter/internal/redistest"
)

// The files under test, relative to this package.
const (
	promRules     = "../../configs/prometheus/rules.yml"
	promConfig    = "../../configs/prometheus/prometheus.yml"
	grafanaBoard  = "../../configs/grafana/respmeter.json"
	promWindow    = 30 * time.Second // what $__rate_interval stands for in the test
	promLoadAhead = 40 * time.Second // load before the panels are evaluated
)

// TestPrometheusDashboard runs the fleet the dashboard is for against a real
// Prometheus (the Debian binary; skipped when it is not installed): engines
// E1 and E2; proxies P1 and P2 in front of E1 (P1 given 127.0.0.1:port, P2
// localhost:port, as two app hosts may name one engine), P3 in front of E2, and P4
// routing hash slots over E1 and E2, all under load; one Prometheus scraping
// the four every 3 s (a scrape can take seconds on a busy 2-core machine
// under -race) with configs/prometheus/rules.yml loaded. Then:
//
//   - promtool accepts the rules and the shipped scrape config, and lints
//     /metrics of a plain and a routed proxy under load clean;
//   - every rule evaluates without error, every recording rule to a
//     non-empty result;
//   - every panel query of configs/grafana/respmeter.json ($__rate_interval
//     = 30s, every variable = all) answers a non-empty vector of finite,
//     non-negative numbers (NaN only where a series had no traffic), and
//     the "where the upstream time goes" row reads 0, not NaN, once the
//     load has stopped for a whole window;
//   - the engine rate panel, one series per engine named by engine (its
//     run_id), equals each engine's own INFO commandstats rate within 5 %,
//     over the 30 s windows the scrape and poll intervals allow (rates),
//     although two proxies poll E1 under two addresses (the double count
//     of issue 19);
//   - the p99 panel for P3's DEBUG SLEEP (the window covering the whole
//     run, as /stats does) is within 15 % of P3's /stats p99. The sleeps
//     are 1 .. 4 ms for 90 % of the commands and 250 .. 470 ms for 10 %:
//     the p99 then lies inside the classic bucket (250 ms, 500 ms], which
//     holds 10 % of the values spread evenly over most of it, so linear
//     interpolation there is close (about +5 % expected), and the tens of
//     milliseconds a busy machine (or -race) adds to some commands push
//     well under 1 % of them past 500 ms. A p99 in a thin tail just past
//     a bound reads far off with any classic buckets; that is what native
//     buckets are for.
func TestPrometheusDashboard(t *testing.T) {
	promBin, err1 := exec.LookPath("prometheus")
	promtool, err2 := exec.LookPath("promtool")
	if err := errors.Join(err1, err2); err != nil {
		redistest.SkipMissingTool(t, fmt.Sprintf("needs prometheus and promtool (Debian package prometheus): %v", err))
	}
	if testing.Short() {
		t.Skip("-short: no engines, proxies and Prometheus")
	}
	for _, args := range [][]string{{"check", "rules", promRules}, {"check", "config", promConfig}} {
		if out, err := exec.Command(promtool, args...).CombinedOutput(); err != nil {
			t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	rulesPath, err := filepath.Abs(promRules)
	if err != nil {
		t.Fatal(err)
	}

	e1 := redistest.Start(t) // skips without redis-server
	e2 := redistest.Start(t, "--enable-debug-command", "yes")
	common := []string{"--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0", "--loops", "1",
		"--engine-poll", "500ms", "--probe-interval", "50ms", "--hdr-interval", "500ms"}
	type proxyProc struct{ addr, admin string }
	startProxy := func(args ...string) proxyProc {
		p := start(t, nil, append(append([]string{"proxy"}, args...), common...)...)
		return proxyProc{
			addr:  p.waitFor(t, p.stderr, logAddr("proxy listening"))[1],
			admin: p.waitFor(t, p.stderr, logAddr("admin listening"))[1],
		}
	}
	p1 := startProxy("--upstream", e1.Addr())
	p2 := startProxy("--upstream", "localhost:"+strconv.Itoa(e1.Port()))
	p3 := startProxy("--upstream", e2.Addr())
	p4 := startProxy("--route", "slots", "--shards", e1.Addr()+","+e2.Addr())

	// Load, paced so that four proxies, two engines and Prometheus share
	// two cores: pipelines of 10 SET/GET every 20 ms through P1, P2 and P4
	// (P4's pipelines span both shards: batches of several commands), and
	// a closed loop of DEBUG SLEEP through P3 (1 .. 4 ms, 10 % 250 .. 470 ms).
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	loadErr := make(chan error, 4)
	run := func(addr string, step func(context.Context, *redis.Client, int) error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := redis.NewClient(&redis.Options{Addr: addr, DisableIdentity: true, PoolSize: 1})
			defer c.Close()
			for i := 0; ctx.Err() == nil; i++ {
				if err := step(ctx, c, i); err != nil && ctx.Err() == nil {
					loadErr <- fmt.Errorf("load through %s: %w", addr, err)
					return
				}
			}
		}()
	}
	pipelined := func(ctx context.Context, c *redis.Client, i int) error {
		_, err := c.Pipelined(ctx, func(pp redis.Pipeliner) error {
			for k := range 5 {
				key := fmt.Sprintf("k%d", (i*5+k)%64)
				pp.Set(ctx, key, "v", 0)
				pp.Get(ctx, key)
			}
			return nil
		})
		select {
		case <-ctx.Done():
		case <-time.After(20 * time.Millisecond):
		}
		return err
	}
	for _, p := range []proxyProc{p1, p2, p4} {
		run(p.addr, pipelined)
	}
	run(p3.addr, func(ctx context.Context, c *redis.Client, _ int) error {
		sleep := 0.001 + 0.003*rand.Float64() // seconds
		if rand.IntN(10) == 0 {
			sleep = 0.250 + 0.220*rand.Float64()
		}
		return c.Do(ctx, "DEBUG", "SLEEP", strconv.FormatFloat(sleep, 'f', 6, 64)).Err()
	})

	prom := startPrometheus(t, promBin, rulesPath, p1.admin, p2.admin, p3.admin, p4.admin)
	redistest.Eventually(t, time.Minute, func() error {
		v, err := prom.query("max_over_time(up[1m])", time.Now()) // up at least once: scrapes can time out on a busy machine
		if err != nil {
			return err
		}
		up := 0
		for _, s := range v {
			if s.value == 1 {
				up++
			}
		}
		if up != 4 {
			return fmt.Errorf("%d of 4 targets scraped: %v", up, v)
		}
		return nil
	})

	// Each engine's own counters, read every promOracleEvery from before
	// the panels' window to after it, with the load running; the panels
	// are evaluated at t1.
	time.Sleep(promLoadAhead - promWindow - promEdgeBefore) // the load's warm-up: rates need a full window of samples
	t1 := time.Now().Add(promEdgeBefore + promWindow)
	oracle := newCallsOracle(t, e1.Addr(), e2.Addr())
	oracle.readUntil(t, t1.Add(promEdgeAfter))
	select {
	case err := <-loadErr:
		t.Fatal(err)
	default:
	}

	// /metrics under load passes promtool's lint, plain and routed.
	for _, p := range []proxyProc{p1, p4} {
		cmd := exec.Command(promtool, "check", "metrics")
		resp, err := (&http.Client{Timeout: 30 * time.Second}).Get("http://" + p.admin + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stdin = resp.Body
		defer resp.Body.Close()
		if out, err := cmd.CombinedOutput(); err != nil || len(out) > 0 {
			t.Errorf("promtool check metrics of %s: %v\n%s", p.admin, err, out)
		}
	}

	// Rules: loaded, evaluated without error, recording rules non-empty.
	for _, r := range prom.rules(t) {
		if r.Health != "ok" || r.LastError != "" {
			t.Errorf("rule %s%s: health %q, error %q", r.Name, r.Query, r.Health, r.LastError)
		}
		if r.Type == "recording" {
			if v, err := prom.query(r.Name, t1); err != nil || len(v) == 0 {
				t.Errorf("recording rule %s: %v, %v; want a non-empty result", r.Name, v, err)
			}
		}
	}

	// Every panel query answers plausibly.
	board := loadDashboard(t)
	panelExpr := map[string]string{} // title -> first query, with all variables = all
	for _, p := range board {
		for _, expr := range p.exprs {
			q := substitute(expr, map[string]string{"instance": ".*", "command": ".*", "phase": ".*"})
			if _, ok := panelExpr[p.title]; !ok {
				panelExpr[p.title] = q
			}
			v, err := prom.query(q, t1)
			if err != nil {
				t.Errorf("panel %q: %s: %v", p.title, q, err)
				continue
			}
			finite := 0
			for _, s := range v {
				switch {
				case math.IsNaN(s.value):
				case math.IsInf(s.value, 0) || s.value < 0:
					t.Errorf("panel %q: %s: %v = %g, want a finite value >= 0", p.title, q, s.metric, s.value)
				default:
					finite++
				}
			}
			if finite == 0 {
				t.Errorf("panel %q: %s: %d series, none finite: %v", p.title, q, len(v), v)
			}
		}
	}

	// Where the upstream time goes: the stacked account (path, engine,
	// queue, other clients, run queue, the replies' loop wait) adds up to
	// the upstream line within 2 %, every part a number (no NaN gap).
	var account *dashboardPanel
	for i := range board {
		if board[i].title == "Where the upstream time goes (seconds per request)" {
			account = &board[i]
		}
	}
	if account == nil || len(account.exprs) < 7 {
		t.Fatalf("no account panel with upstream and six parts: %+v", account)
	}
	var upstream, stack float64
	for i, expr := range account.exprs[:7] {
		v, err := prom.query(substitute(expr, map[string]string{"instance": ".*"}), t1)
		if err != nil || len(v) != 1 || math.IsNaN(v[0].value) {
			t.Fatalf("account panel query %d %s: %v, %v; want one number", i, expr, v, err)
		}
		if i == 0 {
			upstream = v[0].value
		} else {
			stack += v[0].value
		}
	}
	if d := stack/upstream - 1; math.Abs(d) > 0.02 {
		t.Errorf("the account adds up to %.6f s per request, upstream %.6f (%+.1f%%), want within 2%%", stack, upstream, 100*d)
	} else {
		t.Logf("the account adds up to %.6f s per request, upstream %.6f (%+.2f%%)", stack, upstream, 100*d)
	}

	// Engine rate: once per engine, whatever the number of proxies and
	// however they name it: the panel's query is sum by (engine) of
	// max by (engine, command) of the rates, as the recording rule
	// engine:respmeter_engine_commands:rate1m.
	q, ok := panelExpr["Engine command rate"]
	if !ok {
		t.Fatal(`no panel "Engine command rate"`)
	}
	v, err := prom.query(q, t1)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, s := range v {
		got[s.metric["engine"]] = s.value
	}
	for _, e := range []string{e1.Addr(), e2.Addr()} {
		id := engineRunID(t, e)
		lo, hi := oracle.rates(e, t1)
		if r1, r2 := got[id]/lo, got[id]/hi; math.IsNaN(r1) || r1 < 0.95 || r2 > 1.05 {
			t.Errorf("engine %s (run_id %s): panel %.1f/s, INFO commandstats %.1f .. %.1f/s over the windows the scrapes allow (ratios %.3f .. %.3f); want within 5 %% of that range (all series: %v)",
				e, id, got[id], lo, hi, r2, r1, v)
		} else {
			t.Logf("engine %s: panel %.1f/s, INFO commandstats %.1f .. %.1f/s over the windows the scrapes allow (ratios %.3f .. %.3f)", e, got[id], lo, hi, r2, r1)
		}
	}
	if len(got) != 2 {
		t.Errorf("engine rate: series %v, want one per engine (its run_id in engine)", v)
	}

	// p99 of P3's DEBUG SLEEP against its /stats, both over the whole run.
	q = substitute(boardExpr(t, board, "p99"), map[string]string{"instance": regexpQuote(p3.admin), "command": "debug", "phase": "total"})
	q = strings.ReplaceAll(q, fmt.Sprintf("[%ds]", int(promWindow.Seconds())), "[5m]")
	v, err = prom.query(q, t1)
	if err != nil || len(v) != 1 {
		t.Fatalf("p99 panel for P3 debug total: %v, %v; want one series", v, err)
	}
	var stats struct {
		Commands map[string]struct {
			Phases map[string]struct {
				P99 float64 `json:"p99"`
			} `json:"phases"`
		} `json:"commands"`
	}
	getJSON(t, "http://"+p3.admin+"/stats", &stats)
	truth := stats.Commands["debug"].Phases["total"].P99
	if r := v[0].value / truth; math.IsNaN(r) || math.Abs(r-1) > 0.15 {
		t.Errorf("p99 of debug through P3: panel %.6fs, /stats %.6fs (ratio %.3f); want within 15 %%", v[0].value, truth, r)
	} else {
		t.Logf("p99 of debug through P3: panel %.6fs, /stats %.6fs (ratio %.3f)", v[0].value, truth, r)
	}

	// Idle: once a whole window has passed without requests, every part of
	// the account reads 0, not NaN (a gap in the stacked chart).
	cancel()
	wg.Wait()
	idle := time.Now().Add(promWindow + promScrapeEvery + promEdgeAfter)
	time.Sleep(time.Until(idle) + promEdgeAfter)
	for i, expr := range account.exprs {
		v, err := prom.query(substitute(expr, map[string]string{"instance": ".*"}), idle)
		if err != nil || len(v) != 1 || math.IsNaN(v[0].value) || v[0].value != 0 {
			t.Errorf("idle account panel query %d %s: %v, %v; want one 0", i, expr, v, err)
		}
	}
}

// engineInfo returns the INFO section of the engine at addr.
func engineInfo(t *testing.T, addr, section string) string {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr, DisableIdentity: true, PoolSize: 1})
	defer c.Close()
	info, err := c.Info(context.Background(), section).Result()
	if err != nil {
		t.Fatalf("INFO %s of %s: %v", section, addr, err)
	}
	return info
}

// engineRunID returns the run_id of INFO server of the engine at addr.
func engineRunID(t *testing.T, addr string) string {
	t.Helper()
	info := engineInfo(t, addr, "server")
	for line := range strings.Lines(info) {
		if id, ok := strings.CutPrefix(strings.TrimSpace(line), "run_id:"); ok {
			return id
		}
	}
	t.Fatalf("INFO server of %s has no run_id:\n%s", addr, info)
	return ""
}

// The engine rate panel is rate(...[30s]) at t1 of a counter that the
// proxies poll from the engine every 500 ms (--engine-poll) and Prometheus
// scrapes every 3 s (startPrometheus): Prometheus takes the increase
// between the first and the last sample in (t1-30s, t1] and extrapolates
// it to the window's edges (the rate over the samples' own span), and a
// sample's value is the engine's counter of a poll up to 500 ms before its
// scrape, or of one during a scrape that took up to about a second on a
// busy machine. The engine rate the panel reports is therefore the one
// over a window that starts in [t1-30s-500ms, t1-30s+3s+1s] and ends in
// [t1-3s-500ms, t1+1s]; when a busy core makes the load's rate drift, the
// alignment alone moves it by more than 5 % (measured: 1.055 against one
// reading at each end of [t1-30s, t1], in a run with a CPU burner).
const (
	promOracleEvery = 200 * time.Millisecond
	promEdgeBefore  = 500 * time.Millisecond // a poll before the first scrape in the window
	promEdgeAfter   = time.Second            // a scrape's own time, busy
	promScrapeEvery = 3 * time.Second
)

// callsReading is the sum of an engine's INFO commandstats calls at a time.
type callsReading struct {
	at    time.Time
	calls float64
}

// callsOracle reads engines' INFO commandstats calls every
// promOracleEvery over its own connection to each.
type callsOracle struct {
	clients  map[string]*redis.Client
	readings map[string][]callsReading
}

func newCallsOracle(t *testing.T, addrs ...string) *callsOracle {
	o := &callsOracle{clients: map[string]*redis.Client{}, readings: map[string][]callsReading{}}
	for _, a := range addrs {
		c := redis.NewClient(&redis.Options{Addr: a, DisableIdentity: true, PoolSize: 1})
		t.Cleanup(func() { c.Close() })
		o.clients[a] = c
	}
	return o
}

// readUntil reads each engine every promOracleEvery until end.
func (o *callsOracle) readUntil(t *testing.T, end time.Time) {
	t.Helper()
	for {
		for a, c := range o.clients {
			info, err := c.Info(context.Background(), "commandstats").Result()
			if err != nil {
				t.Fatalf("INFO commandstats of %s: %v", a, err)
			}
			o.readings[a] = append(o.readings[a], callsReading{time.Now(), sumCalls(t, info)})
		}
		if time.Now().After(end) {
			return
		}
		time.Sleep(promOracleEvery)
	}
}

// rates returns the lowest and the highest of the engine's command rates
// (per second) over the windows that the engine rate panel at t1 may
// stand for: from a reading in [t1-promWindow-promEdgeBefore,
// t1-promWindow+promScrapeEvery+promEdgeAfter] to one in
// [t1-promScrapeEvery-promEdgeBefore, t1+promEdgeAfter].
func (o *callsOracle) rates(addr string, t1 time.Time) (lo, hi float64) {
	rs := o.readings[addr]
	t0 := t1.Add(-promWindow)
	lo, hi = math.Inf(1), math.Inf(-1)
	for _, a := range rs {
		if a.at.Before(t0.Add(-promEdgeBefore)) || a.at.After(t0.Add(promScrapeEvery+promEdgeAfter)) {
			continue
		}
		for _, b := range rs {
			if b.at.Before(t1.Add(-promScrapeEvery-promEdgeBefore)) || b.at.After(t1.Add(promEdgeAfter)) {
				continue
			}
			r := (b.calls - a.calls) / b.at.Sub(a.at).Seconds()
			lo, hi = min(lo, r), max(hi, r)
		}
	}
	if math.IsInf(lo, 1) {
		return math.NaN(), math.NaN()
	}
	return lo, hi
}

// sumCalls returns the sum of calls over an INFO commandstats reply.
func sumCalls(t *testing.T, info string) float64 {
	t.Helper()
	var sum float64
	for line := range strings.Lines(info) {
		_, rest, ok := strings.Cut(line, "calls=")
		if !ok {
			continue
		}
		n, _, _ := strings.Cut(rest, ",")
		v, err := strconv.ParseFloat(n, 64)
		if err != nil {
			t.Fatalf("INFO commandstats line %q: %v", line, err)
		}
		sum += v
	}
	return sum
}

// dashboardPanel is one panel of the Grafana dashboard: its title and the
// PromQL of its targets, variables unsubstituted.
type dashboardPanel struct {
	title string
	exprs []string
}

// loadDashboard returns the panels of configs/grafana/respmeter.json that
// have queries, failing t unless it parses and names its data source
// through the variable ${datasource}.
func loadDashboard(t *testing.T) []dashboardPanel {
	t.Helper()
	b, err := os.ReadFile(grafanaBoard)
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Panels []struct {
			Title   string `json:"title"`
			Type    string `json:"type"`
			Targets []struct {
				Expr       string `json:"expr"`
				Datasource struct {
					UID string `json:"uid"`
				} `json:"datasource"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v", grafanaBoard, err)
	}
	var out []dashboardPanel
	for _, p := range d.Panels {
		if p.Type == "row" {
			continue
		}
		dp := dashboardPanel{title: p.Title}
		for _, tg := range p.Targets {
			if tg.Datasource.UID != "${datasource}" {
				t.Errorf("panel %q: data source %q, want ${datasource}", p.Title, tg.Datasource.UID)
			}
			dp.exprs = append(dp.exprs, tg.Expr)
		}
		if len(dp.exprs) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		out = append(out, dp)
	}
	if len(out) < 10 {
		t.Fatalf("%s: %d panels", grafanaBoard, len(out))
	}
	return out
}

// boardExpr returns the first query of the panel titled title.
func boardExpr(t *testing.T, board []dashboardPanel, title string) string {
	t.Helper()
	for _, p := range board {
		if p.title == title {
			return p.exprs[0]
		}
	}
	t.Fatalf("no panel %q", title)
	return ""
}

// substitute replaces Grafana's $__rate_interval with promWindow and each
// $name of vars with its value (a regular expression: the dashboard matches
// variables with =~).
func substitute(expr string, vars map[string]string) string {
	expr = strings.ReplaceAll(expr, "$__rate_interval", fmt.Sprintf("%ds", int(promWindow.Seconds())))
	for k, v := range vars {
		expr = strings.ReplaceAll(expr, "$"+k, v)
	}
	if strings.Contains(expr, "$") {
		panic("unsubstituted variable in " + expr)
	}
	return expr
}

// regexpQuote escapes s for a PromQL regular expression inside a
// double-quoted string (dots of an address).
func regexpQuote(s string) string { return strings.ReplaceAll(s, ".", `\\.`) }

// promServer is a Prometheus started by startPrometheus.
type promServer struct{ base string }

// startPrometheus starts the prometheus binary bin on a free loopback port,
// with its own data directory, scraping targets and evaluating the rules
// file rules every 3 s, and stops it when t ends.
func startPrometheus(t *testing.T, bin, rules string, targets ...string) *promServer {
	t.Helper()
	dir := t.TempDir()
	cfg := fmt.Sprintf(`global:
  scrape_interval: 3s
  scrape_timeout: 3s
  evaluation_interval: 3s
rule_files: [%q]
scrape_configs:
  - job_name: respmeter
    static_configs:
      - targets: ["%s"]
`, rules, strings.Join(targets, `", "`))
	cfgPath := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	var log syncBuffer
	cmd := exec.Command(bin, "--config.file="+cfgPath, "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr, "--log.level=warn")
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
		if t.Failed() {
			t.Logf("prometheus log:\n%s", log.String())
		}
	})
	ps := &promServer{base: "http://" + addr}
	redistest.Eventually(t, 30*time.Second, func() error {
		select {
		case <-done:
			t.Fatalf("prometheus exited:\n%s", log.String())
		default:
		}
		resp, err := http.Get(ps.base + "/-/ready")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("/-/ready: %s", resp.Status)
		}
		return nil
	})
	return ps
}

// promSample is one element of an instant vector.
type promSample struct {
	metric map[string]string
	value  float64
}

// query evaluates expr at time at through the HTTP API and returns the
// instant vector (a scalar result is an error).
func (ps *promServer) query(expr string, at time.Time) ([]promSample, error) {
	u := ps.base + "/api/v1/query?" + url.Values{
		"query": {expr}, "time": {strconv.FormatFloat(float64(at.UnixMilli())/1e3, 'f', 3, 64)},
	}.Encode()
	c := http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get(u)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var r struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			ResultType string `json:"resultType"`
			Result     []struct {
				Metric map[string]string `json:"metric"`
				Value  [2]any            `json:"value"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		return nil, err
	}
	if r.Status != "success" {
		return nil, fmt.Errorf("%s: %s", r.Status, r.Error)
	}
	if r.Data.ResultType != "vector" {
		return nil, fmt.Errorf("result type %s, want vector", r.Data.ResultType)
	}
	out := make([]promSample, 0, len(r.Data.Result))
	for _, s := range r.Data.Result {
		str, _ := s.Value[1].(string)
		v, err := strconv.ParseFloat(str, 64)
		if err != nil {
			return nil, fmt.Errorf("value %v: %w", s.Value, err)
		}
		out = append(out, promSample{metric: s.Metric, value: v})
	}
	return out, nil
}

// promRule is one rule as /api/v1/rules reports it.
type promRule struct {
	Name      string `json:"name"`
	Query     string `json:"query"`
	Type      string `json:"type"`
	Health    string `json:"health"`
	LastError string `json:"lastError"`
}

// rules returns every rule Prometheus loaded, once each has been evaluated
// at least once, failing t unless rules.yml's are all there.
func (ps *promServer) rules(t *testing.T) []promRule {
	t.Helper()
	var out []promRule
	redistest.Eventually(t, 30*time.Second, func() error {
		resp, err := http.Get(ps.base + "/api/v1/rules")
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		var r struct {
			Data struct {
				Groups []struct {
					Rules []promRule `json:"rules"`
				} `json:"groups"`
			} `json:"data"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
			return err
		}
		out = out[:0]
		for _, g := range r.Data.Groups {
			out = append(out, g.Rules...)
		}
		for _, rl := range out {
			if rl.Health == "unknown" {
				return fmt.Errorf("rule %s not evaluated yet", rl.Name)
			}
		}
		if len(out) < 10 {
			return fmt.Errorf("%d rules loaded", len(out))
		}
		return nil
	})
	return out
}
