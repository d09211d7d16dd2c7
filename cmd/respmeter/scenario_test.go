package main

// Scenarios with a known truth against a real redis-server, for the split
// of upstream into engine execution, engine wait and the network path
// (issue 17): the verdict of every interval measured under load must name
// what was done to the engine or the path, and the split must agree with
// what the clients measured themselves in the same run. Each test skips
// under -short or without redis-server (redistest.Start). The truths are
// milliseconds where the noise of a loaded 2-core machine is tens to
// hundreds of microseconds; each is tried up to three times
// (redistest.Retry: measured at load average 14, the clients' round trip
// ran 23% above what the proxy saw, and a relay set to 4 ms added 10-15
// ms).

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"golang.org/x/sys/unix"

	"github.com/respmeter/respmeter/configs"
	"github.com/respmeter/respmeter/internal/redistest"
	engstats "github.com/respmeter/respmeter/metrics/engine"
	"github.com/respmeter/respmeter/metrics/split"
	"github.com/respmeter/respmeter/metrics/verdict"
)

// Scenario timing: the verdict interval (scStarvedInterval for the starved
// engine), the engine poll (the witnesses' window), the warm-up before
// intervals count and how many are measured.
const (
	scInterval  = time.Second
	scPoll      = 500 * time.Millisecond
	scWarmUp    = 1500 * time.Millisecond
	scIntervals = 3
)

// scStack starts the proxy in-process in front of upstream, with the probe
// every 20 ms, the engine poll every scPoll and a verdict every interval,
// and stops it when the test ends.
func scStack(t testing.TB, upstream string, interval time.Duration) *stack {
	return scStackWith(t, upstream, interval, nil)
}

// scStackWith is scStack with the configuration changed by mod (unless
// nil) after the scenarios' settings.
func scStackWith(t testing.TB, upstream string, interval time.Duration, mod func(*configs.Config)) *stack {
	t.Helper()
	st := testStack(t, upstream, func(cfg *configs.Config) {
		cfg.Admin = "off"
		cfg.Loops = 1
		cfg.ProbeInterval = configs.Duration(20 * time.Millisecond)
		cfg.EnginePoll = configs.Duration(scPoll)
		cfg.HDRInterval = configs.Duration(interval)
		if mod != nil {
			mod(cfg)
		}
	})
	// One idle interval first: the probe's unloaded baseline.
	redistest.Eventually(t, 5*interval, func() error {
		if st.analyzer.Latest() == nil {
			return errors.New("no verdict interval")
		}
		return nil
	})
	return st
}

// testStack starts the proxy in-process on a free port in front of
// upstream, with the defaults changed by mod, and stops it when the test
// ends.
func testStack(t testing.TB, upstream string, mod func(*configs.Config)) *stack {
	t.Helper()
	cfg := configs.Default()
	cfg.Listen = "127.0.0.1:0"
	cfg.Upstream = upstream
	mod(&cfg)
	st, err := startStack(cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	// This process holds the test's clients and CPU burners too: its
	// threads are not the proxy's alone (TestScenarioHostStarved runs
	// respmeter as a process of its own).
	st.analyzer.SetProcSelf("")
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = st.stop(ctx)
	})
	return st
}

// scLoad is closed-loop load: clients each send cmd, wait for the reply,
// and send again, until stopped; each client measures its own round trips.
type scLoad struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
	mu     sync.Mutex
	sum    time.Duration
	n      int64
	errs   []error
	record bool
}

// scStart starts clients closed-loop clients of addr sending args.
func scStart(t testing.TB, addr string, clients int, args ...any) *scLoad {
	return scStartThink(t, addr, clients, 0, args...)
}

// scStartThink is scStart with clients that pause think after each reply.
func scStartThink(t testing.TB, addr string, clients int, think time.Duration, args ...any) *scLoad {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	l := &scLoad{cancel: cancel}
	for range clients {
		c := redis.NewClient(&redis.Options{Addr: addr, PoolSize: 1, MaxRetries: -1, ReadTimeout: 10 * time.Second,
			DisableIdentity: true, Protocol: 2})
		l.wg.Go(func() {
			defer c.Close()
			for ctx.Err() == nil {
				t0 := time.Now()
				err := c.Do(ctx, args...).Err()
				rtt := time.Since(t0)
				if ctx.Err() != nil {
					return
				}
				l.mu.Lock()
				if err != nil && err != redis.Nil {
					l.errs = append(l.errs, err)
				} else if l.record {
					l.sum += rtt
					l.n++
				}
				l.mu.Unlock()
				if think > 0 {
					redistest.SleepPrecise(think)
				}
			}
		})
	}
	t.Cleanup(l.stop)
	return l
}

// measure starts (on) or ends (off) the clients' own measurement window.
func (l *scLoad) measure(on bool) {
	l.mu.Lock()
	l.record = on
	l.mu.Unlock()
}

// mean returns the clients' mean round trip in the measurement window and
// the number of round trips.
func (l *scLoad) mean() (time.Duration, int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.n == 0 {
		return 0, 0
	}
	return l.sum / time.Duration(l.n), l.n
}

func (l *scLoad) stop() {
	l.cancel()
	l.wg.Wait()
}

// scVerdicts waits scWarmUp, then collects the verdicts of scIntervals
// whole intervals while the load runs, with the clients of l and of also
// (an oracle's) measuring over the same stretch.
func scVerdicts(t testing.TB, st *stack, l *scLoad, also ...*scLoad) []*verdict.Record {
	t.Helper()
	return scVerdictsEach(t, st, l, nil, also...)
}

// scVerdictsEach is scVerdicts calling each (unless nil) with every
// interval's verdict record as it is collected.
func scVerdictsEach(t testing.TB, st *stack, l *scLoad, each func(*verdict.Record), also ...*scLoad) []*verdict.Record {
	t.Helper()
	return scVerdictsN(t, st, l, scIntervals, each, also...)
}

// scVerdictsN is scVerdictsEach collecting n intervals.
func scVerdictsN(t testing.TB, st *stack, l *scLoad, n int, each func(*verdict.Record), also ...*scLoad) []*verdict.Record {
	t.Helper()
	time.Sleep(scWarmUp)
	start := st.analyzer.Latest()
	redistest.Eventually(t, 5*st.analyzer.Interval(), func() error {
		if st.analyzer.Latest() == start {
			return errors.New("no new verdict interval")
		}
		return nil
	})
	loads := append([]*scLoad{l}, also...)
	for _, c := range loads {
		c.measure(true)
	}
	var out []*verdict.Record
	last := st.analyzer.Latest()
	redistest.Eventually(t, time.Duration(n+3)*st.analyzer.Interval(), func() error {
		if cur := st.analyzer.Latest(); cur != last {
			out = append(out, cur)
			last = cur
			if each != nil {
				each(cur)
			}
		}
		if len(out) < n {
			return fmt.Errorf("only %d verdict intervals", len(out))
		}
		return nil
	})
	for _, c := range loads {
		c.measure(false)
		c.mu.Lock()
		errs := c.errs
		c.mu.Unlock()
		if len(errs) > 0 {
			t.Fatalf("%d client errors, first: %v", len(errs), errs[0])
		}
	}
	return out
}

// scSplit is the request-weighted mean of the intervals' split, per
// request.
type scSplit struct {
	requests                                   int64
	upstream, exec, wait, runq, network, total time.Duration
	probe                                      time.Duration
	pathShare                                  float64
	util                                       float64
}

func (s scSplit) String() string {
	return fmt.Sprintf("%d requests: total %v upstream %v = engine %v + wait %v (run queue %v) + path %v; path share %.1f%%; thread %.0f%% busy; probe wait %v",
		s.requests, s.total, s.upstream, s.exec, s.wait, s.runq, s.network, 100*s.pathShare, 100*s.util, s.probe)
}

func scMean(recs []*verdict.Record) scSplit {
	var s scSplit
	var up, exec, wait, runq, net, total, share, util, probe float64
	for _, r := range recs {
		n := float64(r.Interval.Requests)
		v := r.Verdict
		s.requests += r.Interval.Requests
		up += r.Interval.Upstream.Seconds()
		total += r.Interval.Total.Seconds()
		exec += v.Exec.Seconds() * n
		wait += v.EngineWait.Seconds() * n
		runq += v.RunQueueWait.Seconds() * n
		net += v.Network.Seconds() * n
		share += v.Path * n
		util += v.Utilization * n
		probe += v.ProbeWait.Seconds() * n
	}
	if s.requests == 0 {
		return s
	}
	n := float64(s.requests)
	d := func(x float64) time.Duration { return time.Duration(x / n * 1e9) }
	s.upstream, s.exec, s.wait, s.runq, s.network, s.total = d(up), d(exec), d(wait), d(runq), d(net), d(total)
	s.pathShare, s.util, s.probe = share/n, util/n, d(probe)
	return s
}

// scBounds checks that every interval's verdict is want and logs them.
func scBounds(t testing.TB, recs []*verdict.Record, want string) {
	t.Helper()
	for i, r := range recs {
		t.Logf("interval %d: %d requests, %s", i, r.Interval.Requests, r.Verdict)
		if r.Verdict.Bound != want {
			t.Errorf("interval %d: verdict %q, want %q (%s)", i, r.Verdict.Bound, want, r.Verdict)
		}
	}
}

// scKeyServer starts redis-server with the key sc:k the GET scenarios read.
func scKeyServer(t testing.TB) *redistest.Server {
	srv := redistest.Start(t)
	srv.Do("SET", "sc:k", "v")
	return srv
}

// scEnginePID returns the engine's process ID from INFO server.
func scEnginePID(t testing.TB, srv *redistest.Server) int {
	t.Helper()
	info, _ := srv.Do("INFO", "server").(string)
	_, rest, _ := strings.Cut(info, "process_id:")
	end := strings.IndexAny(rest, "\r\n")
	pid, err := strconv.Atoi(rest[:max(end, 0)])
	if err != nil {
		t.Fatalf("no process_id in INFO server: %v", err)
	}
	return pid
}

// scEngineRead is the test's own reading of the engine: its threads'
// run-queue wait so far (/proc/PID/task/*/schedstat) and the commands it
// has processed (INFO stats total_commands_processed).
func scEngineRead(t testing.TB, srv *redistest.Server, pid int) (time.Duration, int64) {
	_, rq, err := engstats.TasksSchedstat(fmt.Sprintf("/proc/%d", pid))
	if err != nil {
		t.Errorf("engine schedstat: %v", err)
	}
	info, _ := srv.Do("INFO", "stats").(string)
	_, rest, _ := strings.Cut(info, "total_commands_processed:")
	n, _ := strconv.ParseInt(strings.TrimSpace(strings.SplitN(rest, "\n", 2)[0]), 10, 64)
	return rq, n
}

// scSpin keeps the engine's command thread on the CPU for ARGV[1]
// microseconds (redistest.SpinScript says how on each engine).
const scSpin = redistest.SpinScript

// TestSpinEnds: scSpin of 5 ms ends on the engine under test
// (RESPMETER_TEST_ENGINE), after at least 5 ms of the client's clock and
// well before its 5 s timeout.
func TestSpinEnds(t *testing.T) {
	redistest.SkipIfUnavailable(t)
	srv := redistest.Start(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr(), ReadTimeout: 5 * time.Second, MaxRetries: -1, DisableIdentity: true, Protocol: 2})
	defer c.Close()
	const spin = 5 * time.Millisecond
	t0 := time.Now()
	n, err := c.Do(context.Background(), "EVAL", scSpin, "0", strconv.Itoa(int(spin/time.Microsecond))).Int64()
	rtt := time.Since(t0)
	if err != nil {
		t.Fatalf("EVAL scSpin %v: %v after %v", spin, err, rtt)
	}
	t.Logf("%v of spin: %d loops, %v round trip", spin, n, rtt)
	if rtt < spin || n < 1 {
		t.Errorf("EVAL scSpin %v: %d loops, round trip %v, want at least %v", spin, n, rtt, spin)
	}
}

// TestScenarioEngineSaturated: ten closed-loop clients of 2 ms of Lua CPU
// work (scSpin) and no network delay. Truth: the engine executes each
// command 2 ms and serves one at a time, so each waits behind the nine
// others, ~18 ms; the clients measure ~20 ms. respmeter must say
// engine-saturated in every interval, with execution plus wait at least
// 80% of upstream (so the path holds under 20% of it, the bound),
// and its total at most the clients' own round trip. Measured on a
// loaded 2-core machine: path 1-36% of single intervals, 5-11% of the
// three together; the thread's utilisation reads 78-100% for a thread
// with nine requests waiting.
//
// Not DEBUG SLEEP: the thread sleeps inside it, so neither its CPU nor its
// run-queue time holds the thread's work outside execution (reading,
// writing), and the utilisation comes out ~10% low (measured: 90% for a
// thread never idle), the wait with it.
func TestScenarioEngineSaturated(t *testing.T) {
	redistest.SkipIfUnavailable(t)
	redistest.Retry(t, 3, scenarioEngineSaturated)
}

func scenarioEngineSaturated(t testing.TB) {
	srv := redistest.Start(t)
	st := scStack(t, srv.Addr(), scInterval)
	load := scStart(t, st.proxy.Addr(), 10, "EVAL", scSpin, "0", "2000")
	recs := scVerdicts(t, st, load)
	load.stop()
	scBounds(t, recs, "engine-saturated")
	s := scMean(recs)
	client, n := load.mean()
	t.Logf("respmeter: %s; clients: mean round trip %v over %d", s, client, n)
	if eng := s.exec + s.wait; float64(eng) < 0.8*float64(s.upstream) {
		t.Errorf("engine %v + wait %v = %v is %.0f%% of upstream %v, want >= 80%%", s.exec, s.wait, eng,
			100*float64(eng)/float64(s.upstream), s.upstream)
	}
	if s.pathShare > 0.2 {
		t.Errorf("path share %.1f%%, want < 20%% with no network delay", 100*s.pathShare)
	}
	// The proxy's total is part of what each client waits (t_sent and
	// t_out are stamped before their writes): never more, and, with ten
	// -race clients on a loaded 2-core machine, 10-25% less (their own
	// goroutine wake-ups).
	if d := float64(s.total-client) / float64(client); d > 0.01 || d < -0.3 {
		t.Errorf("respmeter total %v vs the clients' %v (%+.1f%%), want at most theirs and at least 70%% of it", s.total, client, 100*d)
	}
}

// TestScenarioPathDelay: one closed-loop client of GET through a relay
// that delays each direction 2 ms; the engine idle. Truth: what the relay
// adds to a client's round trip, measured over the same intervals by two more
// clients, one of the relay and one of the engine directly (the
// difference leaves out the clients' own overhead, which under -race on a
// loaded machine is most of a millisecond). respmeter must say path-bound
// in every interval, its network path within 10% of that difference,
// engine wait under 5% of it, and the probe's median round trip within
// 1.3x of it.
func TestScenarioPathDelay(t *testing.T) {
	redistest.SkipIfUnavailable(t)
	redistest.Retry(t, 3, scenarioPathDelay)
}

func scenarioPathDelay(t testing.TB) {
	srv := scKeyServer(t)
	relay := redistest.StartDelayRelay(t, srv.Addr(), 2*time.Millisecond)
	st := scStack(t, relay, scInterval)
	load := scStart(t, st.proxy.Addr(), 1, "GET", "sc:k")
	// The oracle's clients pause 4 ms between requests, so that the one of
	// the engine does not load the machine (closed-loop, it would send
	// thousands of requests a second).
	viaRelay := scStartThink(t, relay, 1, 4*time.Millisecond, "GET", "sc:k")
	direct := scStartThink(t, srv.Addr(), 1, 4*time.Millisecond, "GET", "sc:k")
	recs := scVerdicts(t, st, load, viaRelay, direct)
	for _, l := range []*scLoad{load, viaRelay, direct} {
		l.stop()
	}
	scBounds(t, recs, "path-bound")
	s := scMean(recs)
	r, nr := viaRelay.mean()
	d, nd := direct.mean()
	path := r - d
	t.Logf("respmeter: %s; clients: via the relay %v (%d), to the engine %v (%d): the relay adds %v", s, r, nr, d, nd, path)
	if dev := float64(s.network-path) / float64(path); dev < -0.1 || dev > 0.1 {
		t.Errorf("network path %v vs the %v the relay adds to a client (%+.1f%%), want within 10%%", s.network, path, 100*dev)
	}
	if s.wait > path/20 {
		t.Errorf("engine wait %v with an idle engine, want < 5%% of %v", s.wait, path)
	}
	// The probe's median PING under the load (its unloaded baseline plus
	// the intervals' probe wait) is a round trip through the same relay:
	// within 1.3x of what the relay adds to a client, either way.
	probe := st.analyzer.ProbeBase(st.analyzer.Engine()) + s.probe
	t.Logf("probe median under load %v (baseline %v + wait %v) vs the relay's %v", probe, probe-s.probe, s.probe, path)
	if float64(probe) > 1.3*float64(path) || 1.3*float64(probe) < float64(path) {
		t.Errorf("probe median %v vs the %v the relay adds to a client, want within 1.3x", probe, path)
	}
}

// scStarvedInterval is TestScenarioEngineStarved's verdict interval: a
// starved engine on a loaded machine answers only 5-35 of its calls a
// second, and an interval of a few requests is decided by a single slow
// poll window (measured: path 74% in one 1 s interval of 5 requests,
// engine-starved in the next two).
const scStarvedInterval = 3 * time.Second

// scStarvedIntervals is how many of them TestScenarioEngineStarved judges.
const scStarvedIntervals = 5

// TestScenarioEngineStarved: redis-server pinned to one core at nice 5,
// one closed-loop client of a CPU-bound Lua loop (20,000 iterations: ~0.4
// ms of CPU a call on an idle core), then a CPU burner at nice 0 pinned to
// the same core. Truth: the engine does the same work, but its weight (335
// against the burner's 1024, sched(7)) leaves it a quarter of the core
// while the burner runs, so each call waits milliseconds for the CPU; the
// client measures its round trip before and with the burner. respmeter
// must say engine-starved in at least 80 % of scStarvedIntervals intervals
// with the burner, its run-queue wait per request between the engine's own
// (schedstat, read by the test) per command and all of it over the
// requests. Judged only in the intervals in which this process's threads
// waited for a CPU less than half as long as they ran; with fewer than
// three it skips, saying so with its figures. Not every interval: this
// process (respmeter and the client) shares the one core the test leaves
// it, and in a CI run one interval in three or four had respmeter's loops
// waiting longer than the engine (loop wait 46-55 % of the cycle, the
// engine's run queue 32-36 %: proxy-saturated) or the client's goroutine
// late (client-bound), with the process's threads waiting 0.25-0.40x
// their CPU time.
func TestScenarioEngineStarved(t *testing.T) {
	redistest.SkipIfUnavailable(t)
	redistest.Retry(t, 3, scenarioEngineStarved)
}

func scenarioEngineStarved(t testing.TB) {
	srv := redistest.Start(t)
	pid := scEnginePID(t, srv)
	if _, err := os.Stat(fmt.Sprintf("/proc/%d/task/%d/schedstat", pid, pid)); err != nil {
		t.Skipf("no schedstat for the engine: %v", err)
	}
	core := scPin(t, pid)
	if err := unix.Setpriority(unix.PRIO_PROCESS, pid, 5); err != nil {
		t.Skipf("renice the engine: %v", err)
	}
	scAvoid(t, core)
	st := scStack(t, srv.Addr(), scStarvedInterval)
	const loop = "local i = 0 while i < tonumber(ARGV[1]) do i = i + 1 end return i"
	load := scStart(t, st.proxy.Addr(), 1, "EVAL", loop, "0", "20000")
	before := scVerdicts(t, st, load)
	baseline, _ := load.mean()
	burner := scBurn(t, core)
	load.mu.Lock()
	load.sum, load.n = 0, 0
	load.mu.Unlock()
	// This process's threads (respmeter's and the client's, all on the
	// cores the engine is not pinned to; the burner's left out) on a CPU
	// and waiting for one, read by the test as it sees each interval.
	var cpus, waits, engWaits []time.Duration
	var engRan []int64
	self := func(*verdict.Record) {
		cpu, rq := scSelfSched(t, burner)
		cpus, waits = append(cpus, cpu), append(waits, rq)
		w, n := scEngineRead(t, srv, pid)
		engWaits, engRan = append(engWaits, w), append(engRan, n)
	}
	self(nil)
	recs := scVerdictsN(t, st, load, scStarvedIntervals, self)
	load.stop()
	sb := scMean(before)
	t.Logf("before the burner: %s; client %v", sb, baseline)
	s := scMean(recs)
	client, n := load.mean()
	added := client - baseline
	t.Logf("respmeter: %s; client: mean round trip %v over %d, %v more than before the burner", s, client, n, added)
	if added < 2*time.Millisecond {
		t.Fatalf("the burner added only %v to the client's round trip: no starvation to find", added)
	}
	// The truth holds where the host gave respmeter and the client their
	// CPU: where this process's threads waited for one at least half as
	// long as they ran (split.HostStarved), respmeter's loops waited too
	// and the verdict rightly books that wait to the proxy (in a CI run
	// beside other test binaries on the one core left to this process:
	// loop wait 48 % of the cycle against the engine's run queue 33 %,
	// proxy-saturated). Scenario intervals are scStarvedInterval long, so
	// the read a few milliseconds late hardly moves the ratio.
	judged, starved := 0, 0
	var others []string
	for i, r := range recs {
		cpu, rq := cpus[i+1]-cpus[i], waits[i+1]-waits[i]
		t.Logf("interval %d: %d requests, the test process's threads %v on a CPU, %v waiting for one (%.2fx); %s",
			i, r.Interval.Requests, cpu, rq, rq.Seconds()/cpu.Seconds(), r.Verdict)
		if rq.Seconds() >= split.HostStarved*cpu.Seconds() {
			continue
		}
		judged++
		if r.Verdict.Bound == "engine-starved" {
			starved++
		} else {
			others = append(others, fmt.Sprintf("interval %d: %s", i, r.Verdict))
		}
	}
	if judged < 3 {
		t.Skipf("in only %d of %d intervals did this process's threads wait for a CPU less than half as long as they ran "+
			"(the host's other work starved respmeter and the client): the verdict cannot be judged in this run", judged, len(recs))
	}
	if starved*5 < judged*4 {
		t.Errorf("engine-starved in %d of %d judged intervals, want at least 80%%; the others:\n%s", starved, judged, strings.Join(others, "\n"))
	}
	// The amount, over all the intervals, against the engine's own
	// run-queue wait as the test read it (schedstat): at least its mean
	// per command (the EVALs, each preempted several times, wait longer
	// than respmeter's probes and polls between them) and at most all of
	// it over the requests (respmeter cannot book more than the engine
	// waited), each within 10 % for the few milliseconds between an
	// interval's end and the test's read; and at most the client's round
	// trip. The round trip the burner added is no bound: it also holds
	// the client's and the proxy's own waits on their one core, which grew
	// with the burner (the booked wait read 41-50 % of it in 4 of 6
	// attempts on the idle VM).
	truth, ran := engWaits[len(engWaits)-1]-engWaits[0], engRan[len(engRan)-1]-engRan[0]
	var requests int64
	for _, r := range recs {
		requests += r.Interval.Requests
	}
	if ran <= 0 || requests <= 0 {
		t.Fatalf("the engine ran %d commands, respmeter saw %d requests over the intervals", ran, requests)
	}
	perCommand, perRequest := truth/time.Duration(ran), truth/time.Duration(requests)
	t.Logf("run-queue wait %v per request booked; by the test's reads %v over %d commands (%v each) and %d requests (%v each); the burner added %v to the client's %v",
		s.runq, truth, ran, perCommand, requests, perRequest, added, client)
	if s.runq < perCommand*9/10 || s.runq > perRequest*11/10 || s.runq > client {
		t.Errorf("run-queue wait %v per request by the verdicts; by schedstat %v per command, %v per request (want between them, within 10%%); the client's round trip %v",
			s.runq, perCommand, perRequest, client)
	}
}

// scPin pins every thread of the engine pid to one core (the last one
// this process may use) and returns it.
func scPin(t testing.TB, pid int) int {
	t.Helper()
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		t.Skipf("sched_getaffinity: %v", err)
	}
	core := -1
	for c := range 1024 {
		if set.IsSet(c) {
			core = c
		}
	}
	if set.Count() < 2 {
		t.Skip("one core only: pinning would starve the test itself")
	}
	var one unix.CPUSet
	one.Set(core)
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, task := range tasks {
		tid, _ := strconv.Atoi(task.Name())
		if err := unix.SchedSetaffinity(tid, &one); err != nil {
			t.Skipf("pin the engine's thread %d to core %d: %v", tid, core, err)
		}
	}
	return core
}

// scAvoid keeps this test process (the clients and the proxy) off core
// while the test runs: every thread's affinity, which new threads inherit,
// leaves it out. The burner pins itself back onto it. Without this the
// burner starves the clients too, and the verdict rightly says
// client-bound.
func scAvoid(t testing.TB, core int) {
	t.Helper()
	var all unix.CPUSet
	if err := unix.SchedGetaffinity(0, &all); err != nil {
		t.Skipf("sched_getaffinity: %v", err)
	}
	rest := all
	rest.Clear(core)
	set := func(cs *unix.CPUSet) {
		tasks, _ := os.ReadDir("/proc/self/task")
		for _, task := range tasks {
			tid, _ := strconv.Atoi(task.Name())
			_ = unix.SchedSetaffinity(tid, cs) // a thread that just ended
		}
	}
	set(&rest)
	t.Cleanup(func() { set(&all) })
	// As many Ps as the cores left, as the Go runtime sizes GOMAXPROCS
	// for a process started with that affinity: with more, the process's
	// own threads queue for each other on the one core left of two (the
	// test process's threads waited 0.85-0.98 times their CPU time for a
	// CPU on an idle 2-core machine, GOMAXPROCS 2), which the tests that
	// judge only the intervals without a starved host would read as the
	// host's other work.
	scAddProcs(t, rest.Count()-all.Count())
}

// scAddProcs changes GOMAXPROCS by n (at least 1 left) until the test
// ends.
func scAddProcs(t testing.TB, n int) {
	runtime.GOMAXPROCS(max(runtime.GOMAXPROCS(0)+n, 1))
	t.Cleanup(func() { runtime.GOMAXPROCS(max(runtime.GOMAXPROCS(0)-n, 1)) })
}

// scBurn runs a CPU burner pinned to core, at the default priority, until
// the test ends or a minute has passed, and returns its thread's ID (a
// thread of this process: leave it out of this process's schedstat).
func scBurn(t testing.TB, core int) (tid int) {
	t.Helper()
	stop := make(chan struct{})
	done := make(chan struct{})
	ready := make(chan error, 1)
	go func() {
		defer close(done)
		runtime.LockOSThread() // never unlocked: the thread dies with its pinning
		var one unix.CPUSet
		one.Set(core)
		tid = unix.Gettid()
		ready <- unix.SchedSetaffinity(0, &one)
		deadline := time.Now().Add(time.Minute)
		for i := 0; ; i++ {
			if i%1024 == 0 {
				select {
				case <-stop:
					return
				default:
				}
				if time.Now().After(deadline) {
					return
				}
			}
		}
	}()
	if err := <-ready; err != nil {
		t.Skipf("pin the burner to core %d: %v", core, err)
	}
	t.Cleanup(func() { close(stop); <-done })
	// A P of its own: the burner stands for another process's work on
	// the engine's core, and holding one of this process's Ps it would
	// keep respmeter's loops and the clients from running (Go-level
	// waits that the proxy's loop wait shows, proxy-saturated).
	scAddProcs(t, 1)
	return tid
}

// scSelfSched is this process's threads' time on a CPU and waiting for one
// (engstats.TasksSchedstat of /proc/self), less that of the threads
// listed (the burners: they wait for the engine's core by design).
func scSelfSched(t testing.TB, leaveOut ...int) (cpu, runQueue time.Duration) {
	t.Helper()
	cpu, runQueue, err := engstats.TasksSchedstat("/proc/self")
	if err != nil {
		t.Fatalf("schedstat: %v", err)
	}
	for _, tid := range leaveOut {
		b, err := os.ReadFile(fmt.Sprintf("/proc/self/task/%d/schedstat", tid))
		if err != nil {
			t.Fatalf("the burner's schedstat: %v", err)
		}
		var c, rq int64
		if _, err := fmt.Sscan(string(b), &c, &rq); err != nil {
			t.Fatalf("the burner's schedstat %q: %v", b, err)
		}
		cpu, runQueue = cpu-time.Duration(c), runQueue-time.Duration(rq)
	}
	return cpu, runQueue
}

// TestScenarioLittleThink: two clients of 1 ms of Lua work (scSpin)
// pausing 3 ms between requests, so each has a request in flight ~25% of
// the time. Truth: Little's law (L = λW) holds for any system over an
// interval, up to the work of the requests in flight at its two ends. λW is measured from the proxy's
// latency histograms, L from the area under its in-flight count
// (metrics.InFlight): L within 15% of λW over the three intervals together
// and since start (scLittle). The count spans a little more than the latency (see
// analyzer.inFlightArea): with GETs of ~170 µs under -race L read 4-15%
// above λW, hence the 1 ms of work. The 100 Hz sampler that L was read with
// before, on a thread of its own, gave L/λW 0.62-0.87 for one client of
// GETs pausing 3 ms.
func TestScenarioLittleThink(t *testing.T) {
	redistest.SkipIfUnavailable(t)
	redistest.Retry(t, 3, scenarioLittleThink)
}

func scenarioLittleThink(t testing.TB) {
	srv := scKeyServer(t)
	st := scStack(t, srv.Addr(), scInterval)
	load := scStartThink(t, st.proxy.Addr(), 2, 3*time.Millisecond, "EVAL", scSpin, "0", "1000")
	recs := scVerdicts(t, st, load)
	load.stop()
	scLittle(t, st, recs, 0.15, true)
}

// TestScenarioLittleStall: four clients of GET pausing 1 ms between
// requests while another client, straight to the engine, stalls it with
// DEBUG SLEEP 0.03 every 100 ms: for 30% of the time all four wait. Truth:
// Little's law: L within 15% of λW over the three intervals together and
// since start (scLittle).
func TestScenarioLittleStall(t *testing.T) {
	redistest.SkipIfUnavailable(t)
	redistest.Retry(t, 3, scenarioLittleStall)
}

func scenarioLittleStall(t testing.TB) {
	srv := redistest.Start(t, "--enable-debug-command", "yes")
	srv.Do("SET", "sc:k", "v")
	st := scStack(t, srv.Addr(), scInterval)
	ctx, cancel := context.WithCancel(context.Background())
	staller := redis.NewClient(&redis.Options{Addr: srv.Addr(), PoolSize: 1, MaxRetries: -1, DisableIdentity: true, Protocol: 2})
	var wg sync.WaitGroup
	var stalls int
	var stallErr error
	wg.Go(func() {
		for ctx.Err() == nil {
			if err := staller.Do(ctx, "DEBUG", "SLEEP", "0.03").Err(); err != nil {
				if ctx.Err() == nil {
					stallErr = err
				}
				return
			}
			stalls++
			redistest.SleepPrecise(70 * time.Millisecond)
		}
	})
	stop := func() { cancel(); wg.Wait(); _ = staller.Close() }
	t.Cleanup(stop)
	load := scStartThink(t, st.proxy.Addr(), 4, time.Millisecond, "GET", "sc:k")
	recs := scVerdicts(t, st, load)
	load.stop()
	stop()
	if stallErr != nil {
		t.Fatalf("DEBUG SLEEP: %v", stallErr)
	}
	t.Logf("%d stalls of 30 ms", stalls)
	scLittle(t, st, recs, 0.15, true)
}

// scLittle checks Little's law, L within tol (relative) of λW, since start
// with the load stopped and nothing in flight, and, when window is set,
// over the consecutive intervals of recs together (their inner ends
// cancel: what one interval's L holds of a request in flight at its end,
// the next one's λW counts). Over an interval L and λW differ by the
// requests in flight at its ends, whatever they are: on a loaded machine a
// 100 ms hiccup of the proxy at an interval's end (measured once: +38% in
// a 1 s interval of the stall scenario, +1% over the three), and with 200
// connections each up to a whole cycle old (measured: −16% over three
// intervals of memtier at 100-300 ms cycles, +0.1% since start).
func scLittle(t testing.TB, st *stack, recs []*verdict.Record, tol float64, window bool) {
	t.Helper()
	var area, work, length float64
	for i, r := range recs {
		v := r.Verdict
		t.Logf("interval %d: L %.4f vs λW %.4f (%+.1f%%): %s", i, v.L, v.LambdaW, 100*(v.L/v.LambdaW-1), v)
		if !v.Little {
			t.Fatalf("interval %d: Little's law not evaluated: %s", i, v)
		}
		sec := r.Interval.Length.Seconds()
		area += v.L * sec
		work += v.LambdaW * sec
		length += sec
	}
	t.Logf("%d intervals: L %.4f vs λW %.4f (%+.1f%%)", len(recs), area/length, work/length, 100*(area/work-1))
	if window && (work <= 0 || math.Abs(area/work-1) > tol) {
		t.Errorf("%d intervals: L %.4f vs λW %.4f, want within ±%.0f%%", len(recs), area/length, work/length, 100*tol)
	}
	redistest.EventuallyEvery(t, 5*time.Second, time.Millisecond, func() error {
		if n := st.proxy.InFlight(); n != 0 {
			return fmt.Errorf("%d requests still in flight", n)
		}
		return nil
	})
	v := st.analyzer.SinceStart().Verdict
	t.Logf("since start: L %.4f vs λW %.4f (%+.1f%%)", v.L, v.LambdaW, 100*(v.L/v.LambdaW-1))
	if !v.Little || v.LambdaW <= 0 || math.Abs(v.L/v.LambdaW-1) > tol {
		t.Errorf("since start: L %.4f vs λW %.4f, want within ±%.0f%%", v.L, v.LambdaW, 100*tol)
	}
}

// TestScenarioMemtier200: the closed-loop case, memtier_benchmark
// 4 threads × 50 connections at pipeline 1 (SET:GET 1:10 of 32-byte values)
// through respmeter, with no delay anywhere: 200 requests always in flight
// between the clients, the proxy and one engine thread on a 2-core machine.
// Truth: nothing on the network to wait for (loopback), so the verdict
// must not blame the path: it must name the part whose witness shows it
// busy — the engine (engine-saturated whenever its thread reads ≥ 90%
// busy) or the proxy's loop (proxy-saturated: the tasks handed to it wait
// at least as long as its processing takes). Measured under -race on a
// loaded 2-core machine: ~4,000 requests/s, the engine thread 28-61% busy,
// and before the loop-wait witness the verdict said path-bound or
// client-bound (path and think ~50% each: requests and replies unread in
// the proxy's sockets). Little's law must close since start (L within 15%
// of λW; not over the intervals, whose ends hold up to 200 requests each a
// cycle old: see scLittle), with L at most the 200 connections.
func TestScenarioMemtier200(t *testing.T) {
	redistest.SkipIfUnavailable(t)
	bin := redistest.Memtier(t)
	redistest.Retry(t, 3, func(t testing.TB) { scenarioMemtier200(t, bin) })
}

func scenarioMemtier200(t testing.TB, bin string) {
	srv := redistest.Start(t)
	st := scStack(t, srv.Addr(), scInterval)
	secs := int((scWarmUp + time.Duration(scIntervals+2)*scInterval) / time.Second)
	done, out := scMemtier(t, bin, st.proxy.Addr(), secs, "-t", "4", "-c", "50", "--pipeline", "1")
	recs := scVerdicts(t, st, &scLoad{})
	if err := <-done; err != nil {
		t.Fatalf("memtier: %v\n%s", err, out.String())
	}
	// memtier's own throughput and latency, the Totals row of its table.
	for _, line := range strings.Split(out.String(), "\n") {
		if strings.HasPrefix(line, "Totals") {
			t.Logf("memtier: %s", strings.Join(strings.Fields(line), " "))
		}
	}
	for i, r := range recs {
		v := r.Verdict
		t.Logf("interval %d: %d requests, L %.1f, %s", i, r.Interval.Requests, v.L, v)
		switch {
		case v.Bound != "proxy-saturated" && !strings.HasPrefix(v.Bound, "engine-"):
			t.Errorf("interval %d: verdict %s, want engine-* or proxy-saturated with nothing on the path: %s", i, v.Bound, v)
		case v.Bound == "proxy-saturated" && !v.LoopWaitKnown:
			t.Errorf("interval %d: %s without the loop-wait witness: %s", i, v.Bound, v)
		case !v.WaitKnown:
			t.Errorf("interval %d: no engine thread witnesses: %s", i, v)
		case v.Utilization >= split.SaturatedUtilization && v.Bound != "engine-saturated" && strings.HasPrefix(v.Bound, "engine"):
			t.Errorf("interval %d: engine thread %.0f%% busy, verdict %s", i, 100*v.Utilization, v.Bound)
		case v.L > 200.5:
			t.Errorf("interval %d: L %.1f, more than memtier's 200 connections", i, v.L)
		}
	}
	scLittle(t, st, recs, 0.15, false)
}

// scMemtier starts memtier_benchmark (bin) against addr for secs seconds,
// keys 1-10000, with the extra arguments args (threads, connections,
// pipeline, ratio); it returns a channel that gets its exit and its
// output, and kills it when the test ends. memtier inherits the test
// process's CPU affinity.
func scMemtier(t testing.TB, bin, addr string, secs int, args ...string) (<-chan error, *strings.Builder) {
	t.Helper()
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(secs+30)*time.Second)
	cmd := exec.CommandContext(ctx, bin, append([]string{"-s", host, "-p", port, "--protocol", "redis",
		"--test-time", strconv.Itoa(secs), "--key-maximum", "10000", "--hide-histogram"}, args...)...)
	out := &strings.Builder{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatal(err)
	}
	done, finished := make(chan error, 1), make(chan struct{})
	go func() { done <- cmd.Wait(); close(finished) }()
	t.Cleanup(func() { cancel(); <-finished })
	return done, out
}
