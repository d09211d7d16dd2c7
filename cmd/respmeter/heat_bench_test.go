package main

import (
	"net"
	"os/exec"
	"regexp"
	"strconv"
	"testing"

	"github.com/respmeter/respmeter/internal/redistest"
	engstats "github.com/respmeter/respmeter/metrics/engine"
)

// BenchmarkHeatCPU reports what `respmeter proxy --heat` (1 request in 64
// sampled into the top keys, every one counted in its slot) costs in the
// proxy's own CPU per command, through real sockets, with a confidence
// interval that says whether the difference is resolved: two proxies in
// front of one redis-server, one with heat and one without, measured in
// b.N short rounds (-benchtime 40x: 40 rounds). A round drives each proxy
// in turn with the same redis-benchmark run (-c 50, SET and GET of
// 100-byte values over 100,000 random keys, -P 1 or 16), heat off first
// in even rounds and heat on first in odd ones, so that a load that
// drifts over the run falls on both sides alike; one unmeasured round
// warms both up first. A side's CPU is its process's time on a CPU summed
// over its threads (/proc/PID/task/TID/schedstat, in ns), over the
// commands the round sent through it.
//
// Each round gives a ratio, heat on over heat off; the benchmark reports
// their median ("on/off"), the ends of its 95 % confidence interval by
// order statistics ("on/off-lo", "on/off-hi": distribution-free, about ±2
// binomial standard deviations of ranks around the median, so it needs
// some 20 rounds to be narrow), the pooled ratio of the sums
// ("on/off-sum") and the two sides' CPU per command ("off-µs/op",
// "on-µs/op"), and logs whether the interval's upper end is within 1.03:
// only then does the run show "≤ 3 % CPU per operation". It fails when
// the heat proxy's slots do not hold every command.
//
// Both proxies keep the slow log at 1 s: heat takes every command at or
// over the slow log's threshold into its top keys, whatever the sampling,
// and on a loaded machine most commands could pass the default 10 ms.
// metrics/heat's BenchmarkRecord and proxy/'s BenchmarkHeat measure the
// heat code alone, in memory, without the system calls. Run it alone on a
// quiet machine (2-3 s a round and depth on a busy 2-core machine):
//
//	go test -run '^$' -bench HeatCPU -benchtime 40x ./cmd/respmeter/
func BenchmarkHeatCPU(b *testing.B) {
	bench := redistest.Tool(b, "redis-benchmark")
	srv := redistest.Start(b)
	off, offAddr, offAdmin := startProxy(b, srv.Addr(), "--slowlog-threshold", "1s")
	on, onAddr, onAdmin := startProxy(b, srv.Addr(), "--slowlog-threshold", "1s", "--heat")
	sides := [2]cpuSide{{off, offAddr}, {on, onAddr}}
	var sent int64
	for _, pipe := range []int{1, 16} {
		b.Run("p"+strconv.Itoa(pipe), func(b *testing.B) {
			// About 0.3 s of proxy CPU per side and round on a quiet
			// 2-core machine.
			n := 10_000
			if pipe > 1 {
				n = 100_000
			}
			args := []string{"-c", "50", "-n", strconv.Itoa(n), "-P", strconv.Itoa(pipe),
				"-d", "100", "-t", "set,get", "-r", "100000", "-q"}
			ops := 2 * int64(n) // -t set,get: n of each
			// A warm-up round, not measured.
			pairedRound(b, bench, sides, 0, args)
			sent += ops
			var offNs, onNs []float64
			b.ResetTimer()
			for i := range b.N {
				ns := pairedRound(b, bench, sides, i%2, args)
				offNs, onNs = append(offNs, float64(ns[0])/float64(ops)), append(onNs, float64(ns[1])/float64(ops))
				sent += ops
			}
			b.StopTimer()
			if counted := slotRequests(b, onAdmin); counted < sent {
				b.Fatalf("the slots count %d requests, %d were sent", counted, sent)
			}
			reportPaired(b, offNs, onNs, 1.03)
			// The Go collector's cycles are part of each side's CPU:
			// logged, to tell them apart from heat's own work.
			b.Logf("GC cycles since start: heat off %s, heat on %s", gcCycles(b, offAdmin), gcCycles(b, onAdmin))
		})
	}
}

// cpuSide is one proxy of a side-by-side CPU benchmark and its listening
// address.
type cpuSide struct {
	p    *proc
	addr string
}

// pairedRound runs redis-benchmark (bench) with args through each side in
// turn, sides[first] first, and returns the CPU each side's process took
// meanwhile, in ns.
func pairedRound(b *testing.B, bench string, sides [2]cpuSide, first int, args []string) (ns [2]int64) {
	b.Helper()
	for k := range 2 {
		i := (first + k) % 2
		_, port, _ := net.SplitHostPort(sides[i].addr)
		dir := "/proc/" + strconv.Itoa(sides[i].p.cmd.Process.Pid)
		cpu0, _, err := engstats.TasksSchedstat(dir)
		if err != nil {
			b.Fatal(err)
		}
		if out, err := exec.Command(bench, append([]string{"-h", "127.0.0.1", "-p", port}, args...)...).CombinedOutput(); err != nil {
			b.Fatalf("redis-benchmark through %s: %v\n%s", sides[i].addr, err, out)
		}
		cpu1, _, err := engstats.TasksSchedstat(dir)
		if err != nil {
			b.Fatal(err)
		}
		ns[i] = int64(cpu1 - cpu0)
	}
	return ns
}

// reportPaired reports paired CPU-per-command figures of rounds, off[i]
// and on[i] measured in round i: each side's mean ("off-µs/op",
// "on-µs/op"), the median of the rounds' ratios on/off ("on/off") with
// the ends of its approximate 95 % confidence interval by order
// statistics ("on/off-lo", "on/off-hi"; quantileCI), and the pooled ratio
// of the sums ("on/off-sum"). It logs whether the interval's upper end is
// within bound, the one claim the run can make.
func reportPaired(b *testing.B, off, on []float64, bound float64) {
	var sumOff, sumOn float64
	ratios := make([]float64, len(off))
	for i := range off {
		sumOff, sumOn = sumOff+off[i], sumOn+on[i]
		ratios[i] = on[i] / off[i]
	}
	n := float64(len(off))
	b.ReportMetric(sumOff/n/1e3, "off-µs/op")
	b.ReportMetric(sumOn/n/1e3, "on-µs/op")
	b.ReportMetric(sumOn/sumOff, "on/off-sum")
	med, lo, hi := median(ratios), quantileCI(ratios, 0.5, -2), quantileCI(ratios, 0.5, 2)
	b.ReportMetric(med, "on/off")
	b.ReportMetric(lo, "on/off-lo")
	b.ReportMetric(hi, "on/off-hi")
	switch {
	case len(ratios) < 10:
		b.Logf("%d rounds: too few for an interval (-benchtime 40x)", len(ratios))
	case hi <= bound:
		b.Logf("%d rounds: on/off median %.4f, 95 %% interval [%.4f, %.4f]: within %.2f shown", len(ratios), med, lo, hi, bound)
	default:
		b.Logf("%d rounds: on/off median %.4f, 95 %% interval [%.4f, %.4f]: within %.2f NOT shown", len(ratios), med, lo, hi, bound)
	}
}

// gcCycles returns the garbage collections the process serving admin has
// run (go_gc_duration_seconds_count of its /metrics).
func gcCycles(b *testing.B, admin string) string {
	m := regexp.MustCompile(`(?m)^go_gc_duration_seconds_count (\S+)$`).FindStringSubmatch(httpGet(b, "http://"+admin+"/metrics"))
	if m == nil {
		return "?"
	}
	return m[1]
}
