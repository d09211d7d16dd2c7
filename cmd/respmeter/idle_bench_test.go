package main

import (
	"bufio"
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/respmeter/respmeter/internal/redistest"
)

// BenchmarkIdleCPU reports the CPU that `respmeter proxy` with its default
// settings spends with no traffic, in percent of one core ("cpu-%"): one
// client connected and idle, its engine connection open, for 3 s per
// iteration. What runs then is only the periodic work: the engine probe
// (a PING every 100 ms), the engine poller (every second, at the verdict
// interval's end), the verdict's read of its threads' schedstat, the loop-lag
// sampler (20 tasks per loop and verdict interval) and the Go runtime. The
// CPU is the process's user + system time from /proc/PID/stat, in clock
// ticks (10 ms each on Linux), so the figure's resolution is 0.33 %. Sampling the
// loops every 10 ms cost 7.6 % here (BENCHMARKS.md "Issue 12").
func BenchmarkIdleCPU(b *testing.B) {
	srv := redistest.Start(b)
	p, addr, _ := startProxy(b, srv.Addr())
	c, err := net.Dial("tcp", addr)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		b.Fatal(err)
	}
	if line, err := bufio.NewReader(c).ReadString('\n'); err != nil || line != "+PONG\r\n" {
		b.Fatalf("PING through the proxy: %q, %v", line, err)
	}
	pid := p.cmd.Process.Pid
	const window = 3 * time.Second
	b.ResetTimer()
	var ticks int64
	for range b.N {
		t0 := procTicks(b, pid)
		time.Sleep(window)
		ticks += procTicks(b, pid) - t0
	}
	b.StopTimer()
	// 100 ticks a second (USER_HZ on Linux).
	b.ReportMetric(float64(ticks)/float64(b.N)/window.Seconds(), "cpu-%")
	p.signal(b, syscall.SIGTERM)
	if code := p.wait(b); code != 0 {
		b.Fatalf("respmeter exited %d on SIGTERM\n%s", code, p.stderr)
	}
}

// procTicks returns process pid's user + system CPU time in clock ticks
// (fields 14 and 15 of /proc/PID/stat, proc(5)).
func procTicks(tb testing.TB, pid int) int64 {
	tb.Helper()
	raw, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		tb.Fatal(err)
	}
	// The command name (field 2) is in parentheses and may hold spaces:
	// fields are counted from after its closing parenthesis (field 3 on).
	s := string(raw)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	utime, err1 := strconv.ParseInt(f[14-3], 10, 64)
	stime, err2 := strconv.ParseInt(f[15-3], 10, 64)
	if err1 != nil || err2 != nil {
		tb.Fatalf("/proc/%d/stat: %q", pid, s)
	}
	return utime + stime
}
