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
			offTicks, onTicks, ops := onOffTicks(b, bench, off, on, offAddr, onAddr, pipe, "-r", "100000")
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
			reportOnOff(b, offTicks, onTicks, ops)
		})
	}
}
