package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"

	"github.com/respmeter/respmeter/configs"
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
LRANGE, LTRIM; every other connection also sends pipelines of 16 GETs); check
/metrics, /stats and /slowlog; stop everything and print the latency table,
the verdict (where the request cycle went: client, path, engine, proxy) and
the mean time per command in each of those.`,
		Example: `  respmeter demo
  respmeter demo --duration 10s --conns 32`,
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
	return cmd
}

// runDemo runs the demo; SIGINT/SIGTERM end the load early and still stop
// everything in order. The stack runs with the default settings except for
// free ports and a faster engine poll (none for miniredis).
func (a *app) runDemo(ctx context.Context, f demoFlags) (err error) {
	ctx, stopSignals := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stopSignals()
	log := newLogger(a.stderr, "warn", "text")

	eng, err := startEngine(ctx)
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
	fmt.Fprintf(a.stdout, "proxy: %s (%d event loops)\n", st.proxy.Addr(), st.loops)
	fmt.Fprintf(a.stdout, "metrics: %s/metrics\n", base)
	fmt.Fprintf(a.stdout, "stats: %s/stats\n", base)
	fmt.Fprintf(a.stdout, "slowlog: %s/slowlog\n", base)
	fmt.Fprintf(a.stdout, "load: %d connections for %v: SET GET INCR HSET HGETALL LPUSH LRANGE LTRIM, pipelines of %d GETs on every other connection\n",
		f.conns, f.duration, demoPipeline)

	res := driveLoad(ctx, st.proxy.Addr(), f.conns, f.duration)

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

	if err := stopStack(); err != nil {
		return failure(err)
	}
	if err := st.writeTables(a.stdout); err != nil {
		return failure(err)
	}
	rate := float64(res.commands) / res.elapsed.Seconds()
	fmt.Fprintf(a.stdout, "\ndemo: %d commands in %.1fs (%.0f/s) over %d connections, %d errors\n",
		res.commands, res.elapsed.Seconds(), rate, f.conns, res.errors)
	if res.errors > 0 {
		return failure(fmt.Errorf("demo load saw %d errors; first: %w", res.errors, res.firstErr))
	}
	return nil
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
func driveLoad(ctx context.Context, addr string, conns int, d time.Duration) loadResult {
	lctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	results := make([]loadResult, conns)
	var wg sync.WaitGroup
	start := time.Now()
	for i := range conns {
		wg.Go(func() { results[i] = worker(ctx, lctx, addr, i) })
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

// worker drives one connection until lctx ends; commands run under ctx so
// that the load deadline does not cut one off midway. Odd-numbered workers
// also send pipelines of demoPipeline GETs.
func worker(ctx, lctx context.Context, addr string, id int) loadResult {
	c := redis.NewClient(&redis.Options{
		Addr:             addr,
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
