package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"

	"github.com/respmeter/respmeter/configs"
	"github.com/respmeter/respmeter/internal/tlsconf"
	"github.com/respmeter/respmeter/metrics"
)

// Demo limits.
const (
	// demoMaxConns bounds --conns.
	demoMaxConns = 256
	// demoMaxDuration bounds --duration.
	demoMaxDuration = time.Hour
	// demoPipeline is the number of GETs in each pipelined batch.
	demoPipeline = 16
	// demoScrapeTimeout bounds each GET of /metrics, /stats and /slowlog.
	demoScrapeTimeout = 5 * time.Second
	// demoEnginePoll is the demo's --engine-poll.
	demoEnginePoll = 500 * time.Millisecond
)

// demoFlags holds the demo subcommand's flags.
type demoFlags struct {
	duration time.Duration
	conns    int
	serve    bool
	tls      bool
}

// demoCmd is "respmeter demo".
func (a *app) demoCmd() *cobra.Command {
	var f demoFlags
	cmd := &cobra.Command{
		Use:   "demo [flags]",
		Short: "Run a short self-contained demo: engine, proxy and load, then the table",
		Long: `Run a self-contained demo that needs nothing installed: start redis-server from
PATH on a free loopback port (in a temporary directory, no persistence) or,
when there is none, an embedded miniredis; put the proxy in front of it on a
free port with the admin server on another; drive a mixed load through it with
--conns connections for --duration (SET, GET, INCR, HSET, HGETALL, LPUSH,
LRANGE, LTRIM; every other connection also sends pipelines of 16 GETs) from a
separate process (this binary re-executed), so that the verdict is about the
path, the engine and the proxy, not the load generator sharing their process;
check /metrics, /stats and /slowlog; print the latency table, the verdict
(where the request cycle went: client, path, engine, proxy) and the mean time
per command in each of those; stop everything, or with --serve keep the
proxy, its live page and the engine up until interrupted (Ctrl-C).

With --tls the load connects to respmeter's TLS listener, and respmeter to
redis-server over TLS when redis-server was built with it (--port 0
--tls-port); the certificates are throwaway ones, of a CA made for the run
in a temporary directory removed at exit. The output then shows each side's
handshakes: how many, their mean time, the version and cipher negotiated.

The output ends with three lines: the verdict in plain words, what it
means, and the command that puts respmeter in front of your own engine.`,
		Example: `  respmeter demo
  respmeter demo --duration 10s --conns 32
  respmeter demo --serve
  respmeter demo --tls`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if f.duration <= 0 || f.duration > demoMaxDuration {
				return usageError(cmd, fmt.Errorf("--duration must be in (0, %v], got %v", demoMaxDuration, f.duration))
			}
			if f.conns < 1 || f.conns > demoMaxConns {
				return usageError(cmd, fmt.Errorf("--conns must be in 1..%d, got %d", demoMaxConns, f.conns))
			}
			return a.runDemo(cmd.Context(), f)
		},
	}
	fs := cmd.Flags()
	fs.SortFlags = false
	fs.DurationVar(&f.duration, "duration", 3*time.Second, "how long to drive load")
	fs.IntVar(&f.conns, "conns", 8, "number of client connections")
	fs.BoolVar(&f.serve, "serve", false, "after the load, keep the proxy, its live page and the engine up until interrupted")
	fs.BoolVar(&f.tls, "tls", false, "TLS on both sides, with throwaway certificates; shows the handshakes")
	return cmd
}

// runDemo runs the demo; SIGINT/SIGTERM end the load early and still stop
// everything in order. The stack runs with the default settings except for
// free ports and a faster engine poll (none for miniredis).
func (a *app) runDemo(ctx context.Context, f demoFlags) (err error) {
	ctx, stopSignals := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stopSignals()
	log := newLogger(a.stderr, "warn", "text")

	var dt *demoTLS
	if f.tls {
		if dt, err = newDemoTLS(); err != nil {
			return failure(err)
		}
		defer func() {
			if rerr := os.RemoveAll(dt.dir); rerr != nil {
				err = errors.Join(err, failure(rerr))
			}
		}()
	}
	eng, err := startEngine(ctx, dt.engineTLS())
	if err != nil {
		return failure(err)
	}
	defer func() {
		if serr := eng.stop(); serr != nil {
			err = errors.Join(err, failure(fmt.Errorf("stop engine: %w", serr)))
		}
	}()
	fmt.Fprintf(a.stdout, "engine: %s\n", eng.desc)
	fmt.Fprintf(a.stdout, "upstream: %s\n", eng.addr)

	cfg := configs.Default()
	cfg.Listen, cfg.Upstream, cfg.Admin = "127.0.0.1:0", eng.addr, "127.0.0.1:0"
	// Poll the engine often enough for a few seconds of load to show its
	// own times; miniredis has no statistics to poll.
	cfg.EnginePoll = configs.Duration(demoEnginePoll)
	if eng.embedded {
		cfg.EnginePoll = 0
	}
	if dt != nil {
		cfg.TLSListen, cfg.TLSCertFile, cfg.TLSKeyFile, cfg.TLSAuthClients = "127.0.0.1:0", dt.certFile, dt.keyFile, tlsconf.AuthClientsNo
		if eng.tls {
			cfg.UpstreamTLS, cfg.UpstreamTLSCACertFile = true, dt.caFile
		}
	}
	if err := cfg.Validate(); err != nil {
		return failure(err)
	}
	st, err := startStack(cfg, log)
	if err != nil {
		return failure(err)
	}
	stopped := false
	stopStack := func() error {
		if stopped {
			return nil
		}
		stopped = true
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Duration(cfg.DrainTimeout)+stopGrace)
		defer cancel()
		return st.stop(sctx)
	}
	defer func() { _ = stopStack() }()

	base := "http://" + st.adminAddr
	until := "these stop when the demo ends; --serve keeps them up"
	if f.serve {
		until = "until interrupted"
	}
	fmt.Fprintf(a.stdout, "proxy: %s (%d event loops)\n", st.proxy.Addr(), st.loops)
	loadAddr, caFile := st.proxy.Addr(), ""
	if dt != nil {
		loadAddr, caFile = st.proxy.TLSAddr(), dt.caFile
		fmt.Fprintf(a.stdout, "proxy TLS listener: %s (throwaway certificates in %s, removed at exit)\n", loadAddr, dt.dir)
	}
	fmt.Fprintf(a.stdout, "live page: %s/ (%s)\n", base, until)
	fmt.Fprintf(a.stdout, "metrics: %s/metrics, stats: %s/stats, slowlog: %s/slowlog\n", base, base, base)
	fmt.Fprintf(a.stdout, "load: %d connections for %v: SET GET INCR HSET HGETALL LPUSH LRANGE LTRIM, pipelines of %d GETs on every other connection\n",
		f.conns, f.duration, demoPipeline)

	res, err := loadProcess(ctx, loadAddr, caFile, f.conns, f.duration)
	if err != nil {
		return failure(err)
	}
	fmt.Fprintf(a.stdout, "load: ran in its own process (pid %d, %.3f s of CPU), apart from the proxy (pid %d)\n",
		res.Pid, res.CPUSeconds, os.Getpid())

	samples, err := scrapeMetrics(ctx, base+"/metrics")
	if err != nil {
		return failure(err)
	}
	statsBytes, err := fetch(ctx, base+"/stats")
	if err != nil {
		return failure(err)
	}
	slowBytes, err := fetch(ctx, base+"/slowlog")
	if err != nil {
		return failure(err)
	}
	fmt.Fprintf(a.stdout, "scraped: /metrics (%d respmeter_ samples), /stats (%d bytes of JSON), /slowlog (%d bytes of JSON)\n\n",
		samples, len(statsBytes), len(slowBytes))
	if dt != nil {
		writeTLSSides(a.stdout, st.tls.metrics, eng.tls)
	}

	if !f.serve {
		if err := stopStack(); err != nil {
			return failure(err)
		}
	}
	if err := st.writeTables(a.stdout); err != nil {
		return failure(err)
	}
	rate := float64(res.Commands) / res.ElapsedSeconds
	fmt.Fprintf(a.stdout, "\ndemo: %d commands in %.1fs (%.0f/s) over %d connections, %d errors\n",
		res.Commands, res.ElapsedSeconds, rate, f.conns, res.Errors)
	if f.serve {
		fmt.Fprintf(a.stdout, "serving until interrupted (Ctrl-C): live page %s/, proxy %s, engine %s\n", base, st.proxy.Addr(), eng.addr)
	}
	if f.serve {
		// The stack keeps running: the account since start holds the
		// intervals the verdict has closed, so wait for the one the load
		// ended in (at most a few intervals).
		deadline := time.Now().Add(3 * st.analyzer.Interval())
		for st.analyzer.LatestBusy() == nil && time.Now().Before(deadline) {
			time.Sleep(st.analyzer.Interval() / 10)
		}
	}
	v := st.analyzer.SinceStart().Verdict
	words, meaning := plainVerdict(v.Bound)
	fmt.Fprintf(a.stdout, "\nIn plain words: %s (%s).\n", words, v.Bound)
	fmt.Fprintf(a.stdout, "What it means: %s\n", meaning)
	d := configs.Default()
	fmt.Fprintf(a.stdout, "Next, in front of your own engine: respmeter proxy --upstream %s   (your engine's host:port; point your clients at %s, open http://%s/)\n",
		d.Upstream, d.Listen, d.Admin)
	if res.Errors > 0 {
		return failure(fmt.Errorf("demo load saw %d errors; first: %s", res.Errors, res.FirstError))
	}
	if f.serve {
		<-ctx.Done()
		if err := stopStack(); err != nil {
			return failure(err)
		}
	}
	return nil
}

// plainVerdict says what the verdict's bound (split.Verdict.Bound) means
// for the demo's reader: what took the time, and what follows from it.
func plainVerdict(bound string) (words, meaning string) {
	switch bound {
	case "client-bound":
		return "most of each request's cycle was the clients' own time between requests",
			"the load generator set the pace, not the proxy or the engine: more connections or pipelining load the engine harder."
	case "path-bound":
		return "most of each request's cycle was the path between proxy and engine (kernel, network)",
			"neither the engine nor respmeter was the limit; over a real network this part grows with the round trip."
	case "engine-bound":
		return "most of each request's cycle was the engine executing commands",
			"the engine's own work is the limit: the table shows which commands cost most."
	case "engine-saturated":
		return "requests queued for the engine's command thread, which was busy",
			"the engine is at its capacity for this load: fewer costly commands, or more shards, help."
	case "engine-starved":
		return "the engine waited for a CPU more than anything else",
			"this host is short of CPU for the engine, the proxy and the load together; the figures say more about the host than the engine."
	case "proxy-bound":
		return "respmeter's own processing was the largest part of each request's cycle",
			"on one loopback host the proxy's cost shows most; in front of an engine across a network, the path usually dominates."
	case "engine-busy":
		return "requests waited for the engine behind other clients' long commands",
			"the engine was busy with someone else's work: the verdict names the command that kept it busy."
	case "host-starved":
		return "respmeter's threads waited for a CPU more than anything else",
			"this host is short of CPU for the proxy and the load together; the figures say more about the host than the proxy: run the load elsewhere or on other cores."
	case "proxy-saturated":
		return "respmeter's event loops were never idle, or waited for a CPU",
			"this host is short of CPU for the proxy: give it more cores (--loops) or run the clients elsewhere."
	}
	return "no requests were measured", "the load did not reach the proxy: the errors above say why."
}

// loadResult is what one or all demo workers did.
type loadResult struct {
	commands int64
	errors   int64
	firstErr error
	elapsed  time.Duration
}

// count records one command's outcome; a missing key (redis.Nil) is not
// an error.
func (r *loadResult) count(err error) {
	r.commands++
	if err != nil && !errors.Is(err, redis.Nil) {
		r.errors++
		if r.firstErr == nil {
			r.firstErr = err
		}
	}
}

// driveLoad runs conns workers against addr for d (or until ctx ends) and
// returns their summed results.
func driveLoad(ctx context.Context, addr string, tc *tls.Config, conns int, d time.Duration) loadResult {
	lctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	results := make([]loadResult, conns)
	var wg sync.WaitGroup
	start := time.Now()
	for i := range conns {
		wg.Go(func() { results[i] = worker(ctx, lctx, addr, tc, i) })
	}
	wg.Wait()
	total := loadResult{elapsed: time.Since(start)}
	for _, r := range results {
		total.commands += r.commands
		total.errors += r.errors
		if total.firstErr == nil {
			total.firstErr = r.firstErr
		}
	}
	return total
}

// worker drives one connection (over TLS with tc, when set) until lctx
// ends; commands run under ctx so that the load deadline does not cut one
// off midway. Odd-numbered workers also send pipelines of demoPipeline
// GETs.
func worker(ctx, lctx context.Context, addr string, tc *tls.Config, id int) loadResult {
	c := redis.NewClient(&redis.Options{
		Addr:             addr,
		TLSConfig:        tc,
		Protocol:         2,
		DisableIdentity:  true,
		PoolSize:         1,
		PipelinePoolSize: -1, // pipelines share the one connection
		MaxRetries:       -1,
	})
	defer c.Close()
	var r loadResult
	key := "demo:" + strconv.Itoa(id)
	for n := 0; lctx.Err() == nil; n++ {
		r.count(c.Set(ctx, key, n, 0).Err())
		r.count(c.Get(ctx, key).Err())
		r.count(c.Incr(ctx, key+":counter").Err())
		r.count(c.HSet(ctx, key+":hash", "f"+strconv.Itoa(n%8), n).Err())
		r.count(c.HGetAll(ctx, key+":hash").Err())
		r.count(c.LPush(ctx, key+":list", n).Err())
		r.count(c.LRange(ctx, key+":list", 0, 9).Err())
		if n%64 == 63 {
			r.count(c.LTrim(ctx, key+":list", 0, 99).Err())
		}
		if id%2 == 1 && n%4 == 0 {
			cmds, _ := c.Pipelined(ctx, func(p redis.Pipeliner) error {
				for range demoPipeline {
					p.Get(ctx, key)
				}
				return nil
			})
			for _, cmd := range cmds {
				r.count(cmd.Err())
			}
		}
		if ctx.Err() != nil {
			break
		}
	}
	if ctx.Err() != nil {
		r.errors, r.firstErr = 0, nil // interrupted: errors are expected
	}
	return r
}

// fetch GETs url and returns the body; a status other than 200 is an error.
func fetch(ctx context.Context, url string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, demoScrapeTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return body, nil
}

// scrapeMetrics GETs the Prometheus text at url and counts the respmeter_
// samples in it; none is an error.
func scrapeMetrics(ctx context.Context, url string) (int, error) {
	body, err := fetch(ctx, url)
	if err != nil {
		return 0, err
	}
	n := 0
	sc := bufio.NewScanner(strings.NewReader(string(body)))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), "respmeter_") {
			n++
		}
	}
	if n == 0 {
		return 0, fmt.Errorf("GET %s: no respmeter_ samples", url)
	}
	return n, nil
}

// demoLoadCmd is "respmeter demo-load", hidden: the demo's load generator,
// run by the demo as a process of its own (loadProcess). It drives --conns
// connections against --addr for --duration and writes a demoLoadReport as
// JSON to stdout; SIGINT/SIGTERM end the load early.
func (a *app) demoLoadCmd() *cobra.Command {
	var addr, caFile string
	var f demoFlags
	cmd := &cobra.Command{
		Use:    "demo-load --addr HOST:PORT",
		Short:  "The demo's load generator (run by respmeter demo)",
		Hidden: true,
		Args:   noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			var tc *tls.Config
			if caFile != "" {
				var err error
				if tc, err = tlsconf.Client(caFile, "", "", "", false, tlsconf.Suites{}); err != nil {
					return failure(err)
				}
			}
			res := driveLoad(ctx, addr, tc, f.conns, f.duration)
			rep := demoLoadReport{Commands: res.commands, Errors: res.errors, ElapsedSeconds: res.elapsed.Seconds()}
			if res.firstErr != nil {
				rep.FirstError = res.firstErr.Error()
			}
			return json.NewEncoder(a.stdout).Encode(rep)
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&addr, "addr", "", "`host:port` to drive")
	fs.StringVar(&caFile, "cacert", "", "connect over TLS, verifying --addr's certificate with this PEM CA `file`")
	fs.DurationVar(&f.duration, "duration", 3*time.Second, "how long to drive load")
	fs.IntVar(&f.conns, "conns", 8, "number of client connections")
	return cmd
}

// demoLoadReport is what the demo's load process did. Pid and CPUSeconds
// (user and system time) are filled in by loadProcess.
type demoLoadReport struct {
	Commands       int64   `json:"commands"`
	Errors         int64   `json:"errors"`
	FirstError     string  `json:"first_error,omitempty"`
	ElapsedSeconds float64 `json:"elapsed_seconds"`
	Pid            int     `json:"-"`
	CPUSeconds     float64 `json:"-"`
}

// loadProcess runs the demo's load against addr in a process of its own
// (this executable, "demo-load"), so that the load generator does not
// share the proxy's process, scheduler and garbage collector, and returns
// its report; with caFile it connects over TLS, verifying addr's
// certificate against that CA. Cancelling ctx interrupts it (SIGINT); it
// still reports.
func loadProcess(ctx context.Context, addr, caFile string, conns int, d time.Duration) (demoLoadReport, error) {
	var rep demoLoadReport
	exe, err := os.Executable()
	if err != nil {
		return rep, fmt.Errorf("demo load: %w", err)
	}
	var out, errb bytes.Buffer
	args := []string{"demo-load", "--addr", addr, "--conns", strconv.Itoa(conns), "--duration", d.String()}
	if caFile != "" {
		args = append(args, "--cacert", caFile)
	}
	cmd := exec.Command(exe, args...)
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Start(); err != nil {
		return rep, fmt.Errorf("demo load: %w", err)
	}
	done := make(chan struct{})
	go func() {
		select {
		case <-ctx.Done():
			_ = cmd.Process.Signal(os.Interrupt)
		case <-done:
		}
	}()
	werr := cmd.Wait()
	close(done)
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		return rep, fmt.Errorf("demo load: %v (%w)\n%s", err, werr, errb.String())
	}
	rep.Pid = cmd.Process.Pid
	rep.CPUSeconds = (cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()).Seconds()
	return rep, nil
}

// demoTLS is demo --tls's throwaway certificates: a CA made for the run
// and the certificates it issued to respmeter's TLS listener and to the
// engine, in dir (removed at exit).
type demoTLS struct {
	dir, caFile, certFile, keyFile string
	engine                         engineTLS
}

// newDemoTLS makes the CA and the certificates, valid for a day, for
// 127.0.0.1, ::1 and localhost.
func newDemoTLS() (_ *demoTLS, err error) {
	dir, err := os.MkdirTemp("", "respmeter-demo-tls-")
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			_ = os.RemoveAll(dir)
		}
	}()
	from, to := time.Now().Add(-time.Hour), time.Now().Add(24*time.Hour)
	ca, err := tlsconf.NewCA("respmeter demo CA (throwaway)", from, to)
	if err != nil {
		return nil, err
	}
	dt := &demoTLS{dir: dir, caFile: filepath.Join(dir, "ca.crt"),
		certFile: filepath.Join(dir, "respmeter.crt"), keyFile: filepath.Join(dir, "respmeter.key")}
	dt.engine = engineTLS{certFile: filepath.Join(dir, "engine.crt"), keyFile: filepath.Join(dir, "engine.key"), caFile: dt.caFile}
	if err := os.WriteFile(dt.caFile, ca.CertPEM, 0o600); err != nil {
		return nil, err
	}
	if err := ca.IssueFiles("respmeter", from, to, dt.certFile, dt.keyFile); err != nil {
		return nil, err
	}
	if err := ca.IssueFiles("redis-server", from, to, dt.engine.certFile, dt.engine.keyFile); err != nil {
		return nil, err
	}
	if dt.engine.client, err = tlsconf.Client(dt.caFile, "", "", "", false, tlsconf.Suites{}); err != nil {
		return nil, err
	}
	return dt, nil
}

// engineTLS is what the engine is asked to serve; nil without --tls.
func (dt *demoTLS) engineTLS() *engineTLS {
	if dt == nil {
		return nil
	}
	return &dt.engine
}

// writeTLSSides prints each side's handshakes: how many, their mean time,
// what was negotiated, the failures by reason.
func writeTLSSides(w io.Writer, m *metrics.TLS, upstreamTLS bool) {
	for _, side := range []struct{ name, desc string }{
		{metrics.TLSSideClient, "load -> respmeter"},
		{metrics.TLSSideUpstream, "respmeter -> engine"},
	} {
		if side.name == metrics.TLSSideUpstream && !upstreamTLS {
			fmt.Fprintf(w, "tls %s (%s): plaintext, the engine serves no TLS\n", side.name, side.desc)
			continue
		}
		s := m.Side(side.name)
		fmt.Fprintf(w, "tls %s (%s): %d handshakes, mean %.3f ms", side.name, side.desc, s.Handshakes, float64(s.Mean)/float64(time.Millisecond))
		for _, k := range slices.Sorted(maps.Keys(s.Negotiated)) {
			fmt.Fprintf(w, ", %s x%d", k, s.Negotiated[k])
		}
		failed := "no failed handshakes"
		if len(s.Errors) > 0 {
			var parts []string
			for _, k := range slices.Sorted(maps.Keys(s.Errors)) {
				parts = append(parts, fmt.Sprintf("%s x%d", k, s.Errors[k]))
			}
			failed = "failed: " + strings.Join(parts, ", ")
		}
		fmt.Fprintf(w, "; %s\n", failed)
	}
}
