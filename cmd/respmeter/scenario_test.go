package main

// Scenarios with a known truth against a real redis-server, for the split
// of upstream into engine execution, engine wait and the network path
// (issue 17): the verdict of every interval measured under load must name
// what was done to the engine or the path, and the split must agree with
// what the clients measured themselves in the same run. Each test skips
// under -short or without redis-server (redistest.Start). The truths are
// milliseconds where the noise of a loaded 2-core machine is tens to
// hundreds of microseconds.

import (
	"context"
	"fmt"
	"log/slog"
	"os"
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
)

// Scenario timing: the verdict interval, the engine poll (the witnesses'
// window), the warm-up before intervals count and how many are measured.
const (
	scInterval  = time.Second
	scPoll      = 500 * time.Millisecond
	scWarmUp    = 1500 * time.Millisecond
	scIntervals = 3
)

// scStack starts the proxy in-process in front of upstream, with the probe
// every 20 ms, the engine poll every scPoll and a verdict every scInterval,
// and stops it when the test ends.
func scStack(t *testing.T, upstream string) *stack {
	t.Helper()
	cfg := configs.Default()
	cfg.Listen = "127.0.0.1:0"
	cfg.Upstream = upstream
	cfg.Admin = "off"
	cfg.Loops = 1
	cfg.ProbeInterval = configs.Duration(20 * time.Millisecond)
	cfg.EnginePoll = configs.Duration(scPoll)
	cfg.HDRInterval = configs.Duration(scInterval)
	st, err := startStack(cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = st.stop(ctx)
	})
	// One idle interval first: the probe's unloaded baseline.
	deadline := time.Now().Add(5 * scInterval)
	for st.analyzer.latest() == nil {
		if time.Now().After(deadline) {
			t.Fatal("no verdict interval")
		}
		time.Sleep(10 * time.Millisecond)
	}
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
func scStart(t *testing.T, addr string, clients int, args ...any) *scLoad {
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
// whole intervals while the load runs, with the clients measuring over
// the same stretch.
func scVerdicts(t *testing.T, st *stack, l *scLoad) []*verdictRecord {
	t.Helper()
	time.Sleep(scWarmUp)
	start := st.analyzer.latest()
	for cur := st.analyzer.latest(); cur == start; cur = st.analyzer.latest() {
		time.Sleep(5 * time.Millisecond)
	}
	l.measure(true)
	var out []*verdictRecord
	last := st.analyzer.latest()
	deadline := time.Now().Add(time.Duration(scIntervals+3) * scInterval)
	for len(out) < scIntervals {
		if time.Now().After(deadline) {
			t.Fatalf("only %d verdict intervals in %v", len(out), time.Duration(scIntervals+3)*scInterval)
		}
		time.Sleep(5 * time.Millisecond)
		if cur := st.analyzer.latest(); cur != last {
			out = append(out, cur)
			last = cur
		}
	}
	l.measure(false)
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.errs) > 0 {
		t.Fatalf("%d client errors, first: %v", len(l.errs), l.errs[0])
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

func scMean(recs []*verdictRecord) scSplit {
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
func scBounds(t *testing.T, recs []*verdictRecord, want string) {
	t.Helper()
	for i, r := range recs {
		t.Logf("interval %d: %d requests, %s", i, r.Interval.Requests, r.Verdict)
		if r.Verdict.Bound != want {
			t.Errorf("interval %d: verdict %q, want %q (%s)", i, r.Verdict.Bound, want, r.Verdict)
		}
	}
}

// scEnginePID returns the engine's process ID from INFO server.
func scEnginePID(t *testing.T, srv *redistest.Server) int {
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

// TestScenarioEngineSaturated: ten closed-loop clients of DEBUG SLEEP 0.002
// and no network delay. Truth: the engine executes each command 2 ms and
// serves one at a time, so each waits behind the nine others, ~18 ms; the
// clients measure ~20 ms. respmeter must say engine-saturated in every
// interval, with execution plus wait at least 80% of upstream, and its
// total within 10% of the clients' own round trip.
func TestScenarioEngineSaturated(t *testing.T) {
	srv := redistest.Start(t, "--enable-debug-command", "yes")
	st := scStack(t, srv.Addr())
	load := scStart(t, st.proxy.Addr(), 10, "DEBUG", "SLEEP", "0.002")
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
	if s.pathShare > 0.1 {
		t.Errorf("path share %.1f%%, want < 10%% with no network delay", 100*s.pathShare)
	}
	if d := float64(s.total-client) / float64(client); d < -0.1 || d > 0.1 {
		t.Errorf("respmeter total %v vs the clients' %v (%+.1f%%), want within 10%%", s.total, client, 100*d)
	}
}

// TestScenarioPathDelay: one closed-loop client of GET through a relay
// that delays each direction 2 ms; the engine idle. Truth: a client
// talking to the relay directly, in the same run, measures the path
// (~4 ms). respmeter must say path-bound in every interval, its network
// path within 10% of that client's round trip, and engine wait under 5%
// of it.
func TestScenarioPathDelay(t *testing.T) {
	srv := redistest.Start(t)
	srv.Do("SET", "sc:k", "v")
	relay := redistest.StartDelayRelay(t, srv.Addr(), 2*time.Millisecond)
	st := scStack(t, relay)
	load := scStart(t, st.proxy.Addr(), 1, "GET", "sc:k")
	direct := scStart(t, relay, 1, "GET", "sc:k")
	direct.measure(true)
	recs := scVerdicts(t, st, load)
	load.stop()
	direct.stop()
	scBounds(t, recs, "path-bound")
	s := scMean(recs)
	client, n := direct.mean()
	t.Logf("respmeter: %s; a client of the relay: mean round trip %v over %d", s, client, n)
	if d := float64(s.network-client) / float64(client); d < -0.1 || d > 0.1 {
		t.Errorf("network path %v vs the relay client's %v (%+.1f%%), want within 10%%", s.network, client, 100*d)
	}
	if s.wait > client/20 {
		t.Errorf("engine wait %v with an idle engine, want < 5%% of %v", s.wait, client)
	}
}

// TestScenarioEngineStarved: redis-server and a CPU burner pinned to the
// same core, the burner at a higher priority (nice -20: a neighbour that
// takes the core whenever it wants it), busy 10 ms then idle 10 ms; one
// closed-loop client of GET. Truth: the client's round trip grows by
// milliseconds against the same client before the burner started, while
// the engine executes each GET in microseconds. respmeter must say
// engine-starved in every interval, with the run-queue wait reported.
func TestScenarioEngineStarved(t *testing.T) {
	srv := redistest.Start(t)
	srv.Do("SET", "sc:k", "v")
	pid := scEnginePID(t, srv)
	if _, err := os.Stat(fmt.Sprintf("/proc/%d/task/%d/schedstat", pid, pid)); err != nil {
		t.Skipf("no schedstat for the engine: %v", err)
	}
	core := scPin(t, pid)
	st := scStack(t, srv.Addr())
	load := scStart(t, st.proxy.Addr(), 1, "GET", "sc:k")
	before := scVerdicts(t, st, load)
	baseline, _ := load.mean()
	scBurn(t, core, 10*time.Millisecond, 10*time.Millisecond)
	load.mu.Lock()
	load.sum, load.n = 0, 0
	load.mu.Unlock()
	recs := scVerdicts(t, st, load)
	load.stop()
	sb := scMean(before)
	t.Logf("before the burner: %s; client %v", sb, baseline)
	scBounds(t, recs, "engine-starved")
	s := scMean(recs)
	client, n := load.mean()
	t.Logf("respmeter: %s; client: mean round trip %v over %d (%v before the burner)", s, client, n, baseline)
	if client-baseline < time.Millisecond {
		t.Fatalf("the burner added only %v to the client's round trip: no starvation to find", client-baseline)
	}
	if s.runq <= 0 {
		t.Errorf("no run-queue wait reported")
	}
}

// scPin pins every thread of the engine pid to one core (the last one
// this process may use) and returns it.
func scPin(t *testing.T, pid int) int {
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

// scBurn runs a CPU burner on core until the test ends: a thread of its
// own at nice -20 (or as high as allowed), busy for busy, then asleep for
// idle, bounded by the test's end.
func scBurn(t *testing.T, core int, busy, idle time.Duration) {
	t.Helper()
	stop := make(chan struct{})
	done := make(chan struct{})
	ready := make(chan error, 1)
	go func() {
		defer close(done)
		runtime.LockOSThread() // never unlocked: the thread dies with its pinning
		var one unix.CPUSet
		one.Set(core)
		err := unix.SchedSetaffinity(0, &one)
		if err == nil {
			err = unix.Setpriority(unix.PRIO_PROCESS, unix.Gettid(), -20)
		}
		ready <- err
		deadline := time.Now().Add(time.Minute)
		for time.Now().Before(deadline) {
			select {
			case <-stop:
				return
			default:
			}
			for end := time.Now().Add(busy); time.Now().Before(end); {
			}
			time.Sleep(idle)
		}
	}()
	if err := <-ready; err != nil {
		t.Logf("burner: %v (running anyway)", err)
	}
	t.Cleanup(func() { close(stop); <-done })
}
