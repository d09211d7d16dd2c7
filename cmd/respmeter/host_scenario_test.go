package main

import (
	"fmt"
	"os"
	"strconv"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/respmeter/respmeter/internal/redistest"
	engstats "github.com/respmeter/respmeter/metrics/engine"
	"github.com/respmeter/respmeter/metrics/split"
)

// TestScenarioHostStarved: respmeter as a process of its own, pinned to
// one core with a CPU burner, and one closed-loop client of GET on the
// other core. Truth: respmeter's threads' run-queue wait, read by the
// test itself from /proc/PID/task/*/schedstat over the same intervals.
// respmeter must read host-starved (its threads wait for a CPU, not a
// busy proxy) in at least 80 % of the intervals, and its own run-queue
// wait, summed over them, must be within ±15 % of the test's. At its exit
// the verdict's shares recompute from the table beside it and the table's
// rows add up to its Totals row (checkAccount), in a run whose loop wait
// is the host's.
func TestScenarioHostStarved(t *testing.T) {
	redistest.SkipIfUnavailable(t)
	redistest.Retry(t, 3, scenarioHostStarved)
}

func scenarioHostStarved(t testing.TB) {
	srv := scKeyServer(t)
	p, addr, admin, proc, core := scPinnedProxy(t, srv)
	scBurn(t, core)
	load := scStart(t, addr, 1, "GET", "sc:k")
	defer load.stop()

	time.Sleep(scWarmUp)
	load.measure(true)
	vs, truth, _, _ := scHostIntervals(t, admin, proc, 5)
	var sum time.Duration
	starved, n := 0, len(vs)
	for _, v := range vs {
		if v.Bound == "host-starved" {
			starved++
		}
		sum += time.Duration(v.ProxyRunQueueSeconds * float64(time.Second))
	}
	load.measure(false)
	client, nc := load.mean()
	t.Logf("the client's own mean round trip %v over %d", client, nc)
	t.Logf("respmeter's threads' run-queue wait: %v by its verdicts, %v by the test's schedstat reads", sum, truth)
	if truth < 100*time.Millisecond*time.Duration(n) {
		t.Fatalf("respmeter waited only %v for a CPU over %d intervals: no starved host to find", truth, n)
	}
	if dev := float64(sum-truth) / float64(truth); dev < -0.15 || dev > 0.15 {
		t.Errorf("run-queue wait %v by the verdicts, %v by schedstat (%+.1f%%), want within 15%%", sum, truth, 100*dev)
	}
	if 5*starved < 4*n {
		t.Errorf("host-starved in %d of %d intervals, want at least 80%%", starved, n)
	}
	load.stop()
	p.signal(t, syscall.SIGTERM)
	if code := p.wait(t); code != exitOK {
		t.Fatalf("exit %d after SIGTERM\nstderr:\n%s", code, p.stderr)
	}
	checkAccount(t, p.stdout.String())
}

// scHostIntervals returns the next n verdicts of the respmeter process
// whose admin address and /proc directory are given, from /stats, and its
// threads' run-queue wait and CPU time over them, read by the test itself
// from schedstat as it sees each verdict (a few milliseconds after its
// end): in all (rq, cpu) and per interval (hosts); it fails when an
// interval was missed.
func scHostIntervals(t testing.TB, admin, proc string, n int) (vs []*verdictJSON, rq, cpu time.Duration, hosts []scHost) {
	t.Helper()
	type verdictDoc struct {
		Verdict *verdictJSON `json:"verdict"`
	}
	// latest waits for a verdict that ended after after and returns it
	// with the test's own schedstat reading when it saw it.
	latest := func(after time.Time) (*verdictJSON, time.Duration, time.Duration) {
		var v *verdictJSON
		var cpu, rq time.Duration
		redistest.EventuallyEvery(t, 10*time.Second, 5*time.Millisecond, func() error {
			var doc verdictDoc
			getJSON(t, admin+"/stats", &doc)
			cpu, rq, _ = engstats.TasksSchedstat(proc)
			if doc.Verdict == nil || !doc.Verdict.End.After(after) {
				return fmt.Errorf("no verdict after %v", after)
			}
			v = doc.Verdict
			return nil
		})
		return v, cpu, rq
	}
	// A fresh interval: its end and the test's first reading a few
	// milliseconds apart.
	prev, cpu0, rq0 := latest(time.Now())
	cpu1, rq1 := cpu0, rq0
	for range n {
		c, r := cpu1, rq1
		var v *verdictJSON
		v, cpu1, rq1 = latest(prev.End)
		hosts = append(hosts, scHost{cpu: cpu1 - c, rq: rq1 - r})
		if v.End.Sub(prev.End) > 3*time.Second/2 {
			t.Fatalf("an interval was missed: %v to %v", prev.End, v.End)
		}
		if !v.ProxyHostKnown {
			t.Fatalf("no proxy schedstat in the verdict: %+v", v)
		}
		t.Logf("interval: %d requests, %s; run queue %.3fs on %.3fs of CPU", v.Requests, v.String, v.ProxyRunQueueSeconds, v.ProxyCPUSeconds)
		vs = append(vs, v)
		prev = v
	}
	return vs, rq1 - rq0, cpu1 - cpu0, hosts
}

// scHost is a process's threads' CPU and run-queue time over an interval.
type scHost struct{ cpu, rq time.Duration }

// TestScenarioProxySaturated: respmeter as a process of its own with one
// loop, pinned alone to one core, memtier's 40 connections of GET/SET
// (pipeline 4) through it from the other cores: its loop is never idle,
// and nothing else wants its core. Truth: respmeter's threads' run-queue
// wait against their CPU time, read by the test itself from schedstat over
// each interval: the claim is about the intervals in which that wait was
// under 0.4 times the CPU (HostStarved less a margin: respmeter alone on
// its core; on a host so busy that respmeter waits for its own core,
// host-starved is right), and needs at least 3 in 5 of them. respmeter
// must read proxy-saturated, not host-starved, in at least 80 % of them;
// and host-starved in at least 80 % of the intervals (when 3 or more) in
// which that wait was 0.6 times the CPU or more.
//
// On a 2-core machine shared with other work (load average 15-32) the
// respmeter process waited 0.4-1.5 times its CPU for its core in most
// intervals in 3 of 4 runs (the test then skips, with the figures: the
// host's other work left no proxy alone on its core to judge); in the
// fourth it had its core in 4 of 5 intervals (0.03-0.27), all four
// proxy-saturated, and the fifth (0.58) read host-starved. At load
// average 13 respmeter waited 2.97-6.34 times its CPU in every interval
// of two runs: host-starved in 5 of 5 and 4 of 5 (the other path-bound).
func TestScenarioProxySaturated(t *testing.T) {
	redistest.SkipIfUnavailable(t)
	bin := redistest.Memtier(t)
	redistest.Retry(t, 3, func(t testing.TB) { scenarioProxySaturated(t, bin) })
}

func scenarioProxySaturated(t testing.TB, bin string) {
	srv := scKeyServer(t)
	_, addr, admin, proc, core := scPinnedProxy(t, srv)
	scPinAway(t, scEnginePID(t, srv), core)
	const intervals = 5
	secs := int((scWarmUp+(intervals+3)*time.Second)/time.Second) + 1
	// memtier keeps off respmeter's core, as the test does (scAvoid).
	scMemtier(t, bin, addr, secs, "-t", "2", "-c", "20", "--pipeline", "4", "--ratio", "1:1")
	time.Sleep(scWarmUp)
	vs, rq, cpu, hosts := scHostIntervals(t, admin, proc, intervals)
	t.Logf("respmeter's threads over the intervals: %v on a CPU, %v waiting for one (test's schedstat reads)", cpu, rq)
	// The intervals in which, by the test's reads, respmeter's threads
	// waited for their core less than HostStarved times their CPU (with a
	// margin for the few milliseconds between the verdict's reads and the
	// test's) must read proxy-saturated.
	// Those in which it waited HostStarved times its CPU or more (with the
	// same margin the other way), as when the host's other work takes its
	// core, must read host-starved.
	alone, saturated, starved, readStarved := 0, 0, 0, 0
	for i, v := range vs {
		h := hosts[i]
		ratio := h.rq.Seconds() / h.cpu.Seconds()
		t.Logf("interval %d: %s; by the test's reads %.2fx the CPU waiting", i, v.Bound, ratio)
		switch {
		case ratio >= split.HostStarved+0.1:
			starved++
			if v.Bound == "host-starved" {
				readStarved++
			}
		case ratio < split.HostStarved-0.1:
			alone++
			if v.Bound == "proxy-saturated" {
				saturated++
			}
		}
	}
	if starved >= 3 && 5*readStarved < 4*starved {
		t.Errorf("host-starved in %d of the %d intervals in which respmeter waited for its core %.1f-fold or more its CPU, want at least 80%%",
			readStarved, starved, split.HostStarved+0.1)
		return
	}
	if 5*alone < 3*len(vs) {
		if starved >= 3 {
			t.Logf("host-starved in %d of the %d intervals in which respmeter waited for its core", readStarved, starved)
		}
		t.Skipf("respmeter waited for its core %.1f-fold or more its CPU in %d of %d intervals by the test's reads: "+
			"the host's other work left no proxy alone on its core to judge proxy-saturated in this run", split.HostStarved-0.1, len(vs)-alone, len(vs))
	}
	if cpu < 400*time.Millisecond*intervals {
		t.Fatalf("respmeter ran only %v over %d intervals: not a proxy-bound load", cpu, intervals)
	}
	if 5*saturated < 4*alone {
		t.Errorf("proxy-saturated in %d of the %d intervals in which respmeter had its core, want at least 80%%", saturated, alone)
	}
}

// scPinAway keeps every thread of process pid off core.
func scPinAway(t testing.TB, pid, core int) {
	t.Helper()
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		t.Skipf("sched_getaffinity: %v", err)
	}
	set.Clear(core)
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, task := range tasks {
		tid, _ := strconv.Atoi(task.Name())
		if err := unix.SchedSetaffinity(tid, &set); err != nil {
			t.Skipf("keep thread %d of %d off core %d: %v", tid, pid, core, err)
		}
	}
}

// scPinnedProxy starts respmeter as a process of its own with one loop in
// front of srv, a verdict every second, pins it to one core and keeps this
// test process off that core; it returns the process, its listening and
// admin (http://) addresses, its /proc directory and the core.
func scPinnedProxy(t testing.TB, srv *redistest.Server) (p *proc, addr, admin, procDir string, core int) {
	t.Helper()
	p = start(t, nil, "proxy", "--listen", "127.0.0.1:0", "--upstream", srv.Addr(), "--admin", "127.0.0.1:0",
		"--loops", "1", "--hdr-interval", "1s", "--probe-interval", "20ms")
	addr = p.waitFor(t, p.stderr, logAddr("proxy listening"))[1]
	admin = "http://" + p.waitFor(t, p.stderr, logAddr("admin listening"))[1]
	pid := p.cmd.Process.Pid
	procDir = fmt.Sprintf("/proc/%d", pid)
	if _, _, err := engstats.TasksSchedstat(procDir); err != nil {
		t.Skipf("no schedstat for respmeter: %v", err)
	}
	core = scPin(t, pid)
	scAvoid(t, core)
	return p, addr, admin, procDir, core
}
