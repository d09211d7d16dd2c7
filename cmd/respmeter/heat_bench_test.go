package main

import (
	"strconv"
	"testing"

	"github.com/respmeter/respmeter/internal/redistest"
	"github.com/respmeter/respmeter/metrics/heat"
)

// BenchmarkHeatCPU reports what `respmeter proxy --heat` (1 request in 64
// sampled into the top keys, every one counted in its slot) costs in the
// proxy's own CPU per command, through real sockets: two proxies in front
// of one redis-server, one with heat and one without, driven at the same
// time by identical redis-benchmark runs (-c 50, SET and GET of 100-byte
// values over 100,000 random keys, -P 1 or 16), so that a busy machine
// slows both alike. Both keep the slow log at 1 s, so that the machine's
// load does not turn most commands into slow ones, which heat counts
// always, whatever the sampling. The CPU is each proxy process's user + system time
// from /proc/PID/stat divided by the commands sent through it:
// "off-µs/op", "on-µs/op" and their ratio "on/off". It fails when the
// heat proxy's slots do not hold every command.
//
// proxy/'s BenchmarkHeat measures the same code without the system calls,
// in memory: a larger ratio, of a smaller denominator. Run it alone on a
// quiet machine:
//
//	go test -run '^$' -bench HeatCPU -benchtime 3x ./cmd/respmeter/
func BenchmarkHeatCPU(b *testing.B) {
	bench := redistest.Tool(b, "redis-benchmark")
	srv := redistest.Start(b)
	// A command at or over the slow log's threshold always enters the top
	// keys (docs/heat.md); at 1 s none does here, and the figure is the
	// sampling's, on a quiet machine and a loaded one alike.
	off, offAddr, _ := startProxy(b, srv.Addr(), "--slowlog-threshold", "1s")
	on, onAddr, onAdmin := startProxy(b, srv.Addr(), "--slowlog-threshold", "1s", "--heat")
	var sent int64
	for _, pipe := range []int{1, 16} {
		b.Run("p"+strconv.Itoa(pipe), func(b *testing.B) {
			// 1-2 s of proxy CPU per side and iteration on a quiet
			// machine: 10 ms ticks resolve the ratio to about 1 %.
			n := 50_000 * min(pipe, 8)
			var offTicks, onTicks, ops int64
			for range b.N {
				off0, on0 := procTicks(b, off.cmd.Process.Pid), procTicks(b, on.cmd.Process.Pid)
				sideBySide(b, bench, []string{offAddr, onAddr}, "-c", "50", "-n", strconv.Itoa(n),
					"-P", strconv.Itoa(pipe), "-d", "100", "-r", "100000", "-t", "set,get", "-q")
				offTicks += procTicks(b, off.cmd.Process.Pid) - off0
				onTicks += procTicks(b, on.cmd.Process.Pid) - on0
				ops += 2 * int64(n) // -t set,get: n of each
			}
			b.StopTimer()
			sent += ops
			var doc heat.Slots
			getJSON(b, "http://"+onAdmin+"/slots", &doc)
			var counted int64
			for _, s := range doc.Slots {
				counted += s.Requests
			}
			if counted < sent {
				b.Fatalf("the slots count %d requests, %d were sent", counted, sent)
			}
			// A tick is 10 ms (USER_HZ 100): µs/op = ticks * 1e4 / ops.
			b.ReportMetric(float64(offTicks)*1e4/float64(ops), "off-µs/op")
			b.ReportMetric(float64(onTicks)*1e4/float64(ops), "on-µs/op")
			b.ReportMetric(float64(onTicks)/float64(offTicks), "on/off")
		})
	}
}
