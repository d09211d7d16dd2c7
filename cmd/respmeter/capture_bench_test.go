package main

import (
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"

	"github.com/respmeter/respmeter/internal/capture"
	"github.com/respmeter/respmeter/internal/redistest"
)

// sideBySide runs redis-benchmark (bench) with args through each of addrs
// at the same time, so that a busy machine slows each alike, and fails b
// if one fails.
func sideBySide(b *testing.B, bench string, addrs []string, args ...string) {
	b.Helper()
	var wg sync.WaitGroup
	errs := make([]error, len(addrs))
	for i, addr := range addrs {
		_, port, _ := net.SplitHostPort(addr)
		wg.Go(func() {
			out, err := exec.Command(bench, append([]string{"-h", "127.0.0.1", "-p", port}, args...)...).CombinedOutput()
			if err != nil {
				errs[i] = fmt.Errorf("redis-benchmark through %s: %v\n%s", addr, err, out)
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			b.Fatal(err)
		}
	}
}

// onOffTicks runs b.N rounds of redis-benchmark (-c 50, SET and GET of
// 100-byte values, pipeline pipe, then extra arguments) through the
// proxies off and on side by side, and returns the CPU ticks each process
// took and the commands sent through each. A round is 1-2 s of proxy CPU
// per side on a quiet machine: 10 ms ticks resolve the ratio to about 1 %.
func onOffTicks(b *testing.B, bench string, off, on *proc, offAddr, onAddr string, pipe int, extra ...string) (offTicks, onTicks, ops int64) {
	b.Helper()
	n := 50_000 * min(pipe, 8)
	for range b.N {
		off0, on0 := procTicks(b, off.cmd.Process.Pid), procTicks(b, on.cmd.Process.Pid)
		sideBySide(b, bench, []string{offAddr, onAddr}, append([]string{"-c", "50", "-n", strconv.Itoa(n),
			"-P", strconv.Itoa(pipe), "-d", "100", "-t", "set,get", "-q"}, extra...)...)
		offTicks += procTicks(b, off.cmd.Process.Pid) - off0
		onTicks += procTicks(b, on.cmd.Process.Pid) - on0
		ops += 2 * int64(n) // -t set,get: n of each
	}
	b.StopTimer()
	return offTicks, onTicks, ops
}

// reportOnOff reports the CPU per command of each side, "off-µs/op" and
// "on-µs/op", and their ratio "on/off".
func reportOnOff(b *testing.B, offTicks, onTicks, ops int64) {
	// A tick is 10 ms (USER_HZ 100): µs/op = ticks * 1e4 / ops.
	b.ReportMetric(float64(offTicks)*1e4/float64(ops), "off-µs/op")
	b.ReportMetric(float64(onTicks)*1e4/float64(ops), "on-µs/op")
	b.ReportMetric(float64(onTicks)/float64(offTicks), "on/off")
}

// BenchmarkCaptureCPU reports what `respmeter proxy --capture FILE` costs
// in the proxy's own CPU per command, through real sockets (issue 18: "≤
// 1.15× the CPU µs/op without capture"): two proxies in front of one
// redis-server, one capturing to a file and one not, driven at the same
// time by identical redis-benchmark runs (onOffTicks: -c 50, SET and GET,
// 100-byte values, -P 1 or 16), so that a busy machine slows both alike. The CPU is
// each proxy process's user + system time from /proc/PID/stat (every
// thread: the event loops, the capture's writer goroutine and its zstd
// encoder), divided by the commands redis-benchmark sent through it:
// "off-µs/op", "on-µs/op" and their ratio "on/off". It fails when the
// capture dropped a record (it then did less than the whole work).
//
// proxy/'s BenchmarkCaptureHotPath measures the same code without the
// system calls, in memory: a larger ratio, of a smaller denominator.
// Run it alone on a quiet machine:
//
//	go test -run '^$' -bench CaptureCPU -benchtime 3x ./cmd/respmeter/
func BenchmarkCaptureCPU(b *testing.B) {
	bench := redistest.Tool(b, "redis-benchmark")
	srv := redistest.Start(b)
	off, offAddr, _ := startProxy(b, srv.Addr())
	file := filepath.Join(b.TempDir(), "cpu.respcap")
	on, onAddr, onAdmin := startProxy(b, srv.Addr(), "--capture", file)
	for _, pipe := range []int{1, 16} {
		b.Run("p"+strconv.Itoa(pipe), func(b *testing.B) {
			offTicks, onTicks, ops := onOffTicks(b, bench, off, on, offAddr, onAddr, pipe)
			var st capture.Stats
			getJSON(b, "http://"+onAdmin+"/capture", &st)
			if !st.Running || st.Dropped != 0 || st.Records == 0 {
				b.Fatalf("capture: %+v, want running with records, none dropped", st)
			}
			reportOnOff(b, offTicks, onTicks, ops)
		})
	}
}
