package main

import (
	"bufio"
	"bytes"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/respmeter/respmeter/internal/redistest"
)

// BenchmarkVerdictCPU compares side by side, in one run, the CPU of two
// `respmeter proxy` processes in front of one engine: one with the
// verdict's engine witnesses on (the defaults: a PING probe every 100 ms,
// the engine poll every second), one with them off (--probe-interval 0
// --engine-poll 0; its verdict's interval step and schedstat reads still
// run, with no engine evidence). Idle: one client connected to each, as
// BenchmarkIdleCPU, a 3 s window per process and iteration; load: one
// client sending PINGs in pipelines of 16 as fast as the proxy answers, a
// 2 s window per process and iteration. The processes take turns, the
// first alternating between iterations, so that a neighbour's burst falls
// on both. CPU is each process's user + system time from /proc/PID/stat
// (10 ms ticks). Reported: "on-cpu-%" and "off-cpu-%" (percent of one
// core), under load "on-ns/req" and "off-ns/req" (CPU per request), and
// "on/off", the ratio of the two (CPU per request under load).
//
//	go test -run '^$' -bench VerdictCPU -benchtime 3x ./cmd/respmeter/
func BenchmarkVerdictCPU(b *testing.B) {
	for _, load := range []bool{false, true} {
		name := "idle"
		if load {
			name = "load"
		}
		b.Run(name, func(b *testing.B) { benchVerdictCPU(b, load) })
	}
}

func benchVerdictCPU(b *testing.B, load bool) {
	srv := redistest.Start(b)
	type side struct {
		p           *proc
		send        func()
		ticks, reqs int64
	}
	const depth = 16
	batch := bytes.Repeat([]byte("PING\r\n"), depth)
	open := func(args ...string) *side {
		p, addr, _ := startProxy(b, srv.Addr(), args...)
		c, err := net.Dial("tcp", addr)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { c.Close() })
		r := bufio.NewReader(c)
		s := &side{p: p}
		// send sends one pipeline and reads its replies.
		s.send = func() {
			if _, err := c.Write(batch); err != nil {
				b.Fatal(err)
			}
			for range depth {
				if line, err := r.ReadString('\n'); err != nil || line != "+PONG\r\n" {
					b.Fatalf("PING through the proxy: %q, %v", line, err)
				}
			}
		}
		s.send()
		return s
	}
	on, off := open(), open("--probe-interval", "0", "--engine-poll", "0")
	window := 3 * time.Second
	if load {
		window = 2 * time.Second
	}
	measure := func(s *side) {
		pid := s.p.cmd.Process.Pid
		t0 := procTicks(b, pid)
		if load {
			for end := time.Now().Add(window); time.Now().Before(end); s.reqs += depth {
				s.send()
			}
		} else {
			time.Sleep(window)
		}
		s.ticks += procTicks(b, pid) - t0
	}
	b.ResetTimer()
	for i := range b.N {
		if i%2 == 0 {
			measure(on)
			measure(off)
		} else {
			measure(off)
			measure(on)
		}
	}
	b.StopTimer()
	// 100 ticks a second (USER_HZ on Linux).
	pct := func(s *side) float64 { return float64(s.ticks) / float64(b.N) / window.Seconds() }
	b.ReportMetric(pct(on), "on-cpu-%")
	b.ReportMetric(pct(off), "off-cpu-%")
	if load {
		if on.reqs == 0 || off.reqs == 0 || off.ticks == 0 {
			b.Fatalf("no requests or no CPU: on %+v, off %+v", on, off)
		}
		perReq := func(s *side) float64 { return float64(s.ticks) * 1e7 / float64(s.reqs) }
		b.ReportMetric(perReq(on), "on-ns/req")
		b.ReportMetric(perReq(off), "off-ns/req")
		b.ReportMetric(perReq(on)/perReq(off), "on/off")
	} else if off.ticks > 0 {
		b.ReportMetric(pct(on)/pct(off), "on/off")
	}
	for _, s := range []*side{on, off} {
		s.p.signal(b, syscall.SIGTERM)
		if code := s.p.wait(b); code != 0 {
			b.Fatalf("respmeter exited %d on SIGTERM\n%s", code, s.p.stderr)
		}
	}
}
