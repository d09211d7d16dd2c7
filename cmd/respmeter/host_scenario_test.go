package main

import (
	"fmt"
	"testing"
	"time"

	"github.com/respmeter/respmeter/internal/redistest"
	engstats "github.com/respmeter/respmeter/metrics/engine"
)

// TestScenarioHostStarved: respmeter as a process of its own, pinned to
// one core with a CPU burner, and one closed-loop client of GET on the
// other core. Truth: respmeter's threads' run-queue wait, read by the
// test itself from /proc/PID/task/*/schedstat over the same intervals.
// respmeter must read host-starved (its threads wait for a CPU, not a
// busy proxy) in at least 80 % of the intervals, and its own run-queue
// wait, summed over them, must be within ±15 % of the test's.
func TestScenarioHostStarved(t *testing.T) {
	redistest.SkipIfUnavailable(t)
	redistest.Retry(t, 3, scenarioHostStarved)
}

func scenarioHostStarved(t testing.TB) {
	srv := scKeyServer(t)
	p := start(t, nil, "proxy", "--listen", "127.0.0.1:0", "--upstream", srv.Addr(), "--admin", "127.0.0.1:0",
		"--loops", "1", "--hdr-interval", "1s", "--probe-interval", "20ms")
	addr := p.waitFor(t, p.stderr, logAddr("proxy listening"))[1]
	admin := "http://" + p.waitFor(t, p.stderr, logAddr("admin listening"))[1]
	pid := p.cmd.Process.Pid
	proc := fmt.Sprintf("/proc/%d", pid)
	if _, _, err := engstats.TasksSchedstat(proc); err != nil {
		t.Skipf("no schedstat for respmeter: %v", err)
	}
	core := scPin(t, pid)
	scAvoid(t, core)
	scBurn(t, core)
	load := scStart(t, addr, 1, "GET", "sc:k")
	defer load.stop()

	type verdictDoc struct {
		Verdict *verdictJSON `json:"verdict"`
	}
	// latest returns /stats' verdict, waiting for one that ended after
	// after, and the test's own schedstat reading when it saw it.
	latest := func(after time.Time) (*verdictJSON, time.Duration) {
		var v *verdictJSON
		var rq time.Duration
		redistest.EventuallyEvery(t, 10*time.Second, 5*time.Millisecond, func() error {
			var doc verdictDoc
			getJSON(t, admin+"/stats", &doc)
			_, rq, _ = engstats.TasksSchedstat(proc)
			if doc.Verdict == nil || !doc.Verdict.End.After(after) {
				return fmt.Errorf("no verdict after %v", after)
			}
			v = doc.Verdict
			return nil
		})
		return v, rq
	}
	time.Sleep(scWarmUp)
	// A fresh interval: its end and the test's first reading a few
	// milliseconds apart.
	first, rq0 := latest(time.Now())
	load.measure(true)
	prev := first
	var sum time.Duration
	starved, n := 0, 0
	var rq1 time.Duration
	for range 5 {
		var v *verdictJSON
		v, rq1 = latest(prev.End)
		if v.End.Sub(prev.End) > 3*time.Second/2 {
			t.Fatalf("an interval was missed: %v to %v", prev.End, v.End)
		}
		n++
		if v.Bound == "host-starved" {
			starved++
		}
		if !v.ProxyHostKnown {
			t.Fatalf("no proxy schedstat in the verdict: %+v", v)
		}
		sum += time.Duration(v.ProxyRunQueueSeconds * float64(time.Second))
		t.Logf("interval: %d requests, %s; run queue %.3fs on %.3fs of CPU", v.Requests, v.String, v.ProxyRunQueueSeconds, v.ProxyCPUSeconds)
		prev = v
	}
	truth := rq1 - rq0
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
}
