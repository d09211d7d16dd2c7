package proxy

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/respmeter/respmeter/metrics/heat"
	"github.com/respmeter/respmeter/metrics/slowlog"
)

// heatPair is pair with key and slot heat of one loop sampling one request
// in sample attached (sample 0: heat off), and GETs of nkeys distinct
// keys to send. The slow log is on, as respmeter proxy's is by default,
// with a threshold no command here reaches: heat keeps the key the slow
// log copies anyway.
func heatPair(tb testing.TB, sample, nkeys int) (*client, *memConn, *link, [][]byte) {
	tb.Helper()
	s, cl, up := pair(tb, true, slowlog.New(128, time.Second))
	if sample > 0 {
		s.p.cfg.Metrics.SetHeat(heat.NewSet(1, heat.Config{Sample: sample}))
	}
	reqs := make([][]byte, nkeys)
	for i := range reqs {
		k := fmt.Sprintf("user:%08d", i)
		reqs[i] = fmt.Appendf(nil, "*2\r\n$3\r\nGET\r\n$%d\r\n%s\r\n", len(k), k)
	}
	return s, cl, up, reqs
}

// TestHeatHotPathAllocs pins the per-command path with heat on (every
// request sampled, so the top-K summaries take every one, and 100,000
// distinct keys, so they evict all the time) at zero allocations.
func TestHeatHotPathAllocs(t *testing.T) {
	s, cl, up, reqs := heatPair(t, 1, 100_000)
	for i := range 5000 {
		roundTrip(s, cl, up, reqs[i%len(reqs)], getReply)
	}
	i := 0
	allocs := testing.AllocsPerRun(5000, func() {
		roundTrip(s, cl, up, reqs[i%len(reqs)], getReply)
		i++
	})
	if allocs != 0 {
		t.Errorf("%v allocations per command with heat on, want 0", allocs)
	}
	if got := s.p.cfg.Metrics.Heat().Keys(1, nil).ByRequests; len(got) != 1 {
		t.Errorf("no top key recorded: %v", got)
	}
}

// threadCPU returns the CPU time of the calling OS thread in nanoseconds
// (CLOCK_THREAD_CPUTIME_ID): unlike the process's, it does not count
// other processes' time slices or other goroutines, so a loaded machine
// moves it little.
func threadCPU(tb testing.TB) int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
		tb.Fatal(err)
	}
	return ts.Nano()
}

// BenchmarkHeat is BenchmarkHotPath's per-command path over 100,000
// distinct keys (GETs of user:00000000 on, each slot hit in turn as a
// uniform workload does) three ways side by side in one run: heat off, at
// the default sampling (1 in 64) and with every request sampled. The three
// proxies take turns, 4,096 commands each, so that the machine's load
// falls on each alike; cpu-ns/op is the benchmark thread's CPU time per
// command (CLOCK_THREAD_CPUTIME_ID) and x-off the ratio to heat off's, the
// heat's cost: 1.03 is 3 % more CPU per command.
func BenchmarkHeat(b *testing.B) {
	variants := []struct {
		name   string
		sample int
	}{{"heat-off", 0}, {"heat-64", 64}, {"heat-1", 1}}
	type side struct {
		s     *client
		cl    *memConn
		up    *link
		reqs  [][]byte
		next  int
		cpuNs int64
	}
	sides := make([]*side, len(variants))
	for i, v := range variants {
		s, cl, up, reqs := heatPair(b, v.sample, 100_000)
		sides[i] = &side{s: s, cl: cl, up: up, reqs: reqs}
		for range len(reqs) { // warm up: every key and slot seen once
			roundTrip(s, cl, up, reqs[sides[i].next], getReply)
			sides[i].next = (sides[i].next + 1) % len(reqs)
		}
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	const turn = 4096
	b.ReportAllocs()
	b.ResetTimer()
	for done := 0; done < b.N; done += turn {
		n := min(turn, b.N-done)
		for _, d := range sides {
			t0 := threadCPU(b)
			for range n {
				roundTrip(d.s, d.cl, d.up, d.reqs[d.next], getReply)
				if d.next++; d.next == len(d.reqs) {
					d.next = 0
				}
			}
			d.cpuNs += threadCPU(b) - t0
		}
	}
	b.StopTimer()
	off := float64(sides[0].cpuNs)
	for i, v := range variants {
		b.ReportMetric(float64(sides[i].cpuNs)/float64(b.N), v.name+"-cpu-ns/op")
		if i > 0 {
			b.ReportMetric(float64(sides[i].cpuNs)/off, v.name+"-x-off")
		}
	}
}
