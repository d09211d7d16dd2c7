package engine

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

func TestParseWitness(t *testing.T) {
	// Abridged from redis-server 7.0.15's INFO cpu and INFO stats.
	cpu := "# CPU\r\nused_cpu_sys:1.250000\r\nused_cpu_user:2.500000\r\nused_cpu_sys_children:0.000000\r\n" +
		"used_cpu_user_children:0.000000\r\nused_cpu_sys_main_thread:1.000000\r\nused_cpu_user_main_thread:2.000000\r\n"
	stats := "# Stats\r\ntotal_connections_received:3\r\ntotal_commands_processed:1234\r\nio_threads_active:0\r\n"
	s := parseWitness(cpu, stats)
	if !s.hasMainCPU || s.mainCPU != 3*time.Second || !s.hasProc || s.procCPU != 3750*time.Millisecond ||
		!s.hasCommands || s.commands != 1234 || s.ioThreads {
		t.Errorf("redis 7: %+v", s)
	}
	// Dragonfly-like: no main-thread figures.
	s = parseWitness("# CPU\nused_cpu_sys:0.5\nused_cpu_user:0.5\n", "total_commands_processed:7\nio_threads_active:1\n")
	if s.hasMainCPU || !s.hasProc || s.procCPU != time.Second || s.commands != 7 || !s.ioThreads {
		t.Errorf("no main thread: %+v", s)
	}
	if s := parseWitness("", ""); s.hasMainCPU || s.hasProc || s.hasCommands {
		t.Errorf("nothing: %+v", s)
	}

	t0 := time.Unix(100, 0)
	prev := witnessSample{at: t0, commands: 100, mainCPU: time.Second, hasMainCPU: true, hasCommands: true,
		host: hostSample{mainCPU: time.Second, runQueue: 2 * time.Second}, hasHost: true}
	cur := witnessSample{at: t0.Add(2 * time.Second), commands: 1100, mainCPU: 1500 * time.Millisecond, hasMainCPU: true,
		hasCommands: true, host: hostSample{mainCPU: 1400 * time.Millisecond, runQueue: 2200 * time.Millisecond}, hasHost: true}
	w := cur.delta(prev)
	w.Exec = 300 * time.Millisecond
	// Busy: host CPU 400ms + run queue 200ms (more than Exec 300ms).
	if w.Commands != 1000 || w.Busy() != 600*time.Millisecond || w.Utilization() != 0.3 ||
		w.Demand() != 600*time.Microsecond {
		t.Errorf("delta %+v: busy %v util %v demand %v", w, w.Busy(), w.Utilization(), w.Demand())
	}
	// DEBUG SLEEP: execution without CPU counts as busy.
	w.Exec = 1900 * time.Millisecond
	if w.Busy() != 1900*time.Millisecond || w.Utilization() != 0.95 {
		t.Errorf("exec-bound: busy %v util %v", w.Busy(), w.Utilization())
	}
	// Cumulative witnesses: the sum of two intervals less the first is
	// the second.
	var total Witness
	total.add(w)
	first := total
	w2 := w
	w2.Commands, w2.Exec, w2.RunQueue = 7, 5*time.Millisecond, time.Millisecond
	total.add(w2)
	if d := total.Since(first); d.Commands != 7 || d.Exec != 5*time.Millisecond || d.RunQueue != time.Millisecond ||
		d.Interval != w.Interval || !d.HasHost || !d.HasMainCPU {
		t.Errorf("Since: %+v", d)
	}
	// Redis 7.2+ and Valkey 8+: the event loop's own busy time, which
	// holds execution and socket I/O by the engine's clock; it sets Busy
	// when it is the largest witness.
	ev := parseWitness(cpu, stats+"eventloop_cycles:222\r\neventloop_duration_sum:546644\r\neventloop_duration_cmd_sum:528646\r\n")
	if !ev.hasEventLoop || ev.eventLoop != 546644*time.Microsecond || s.hasEventLoop {
		t.Errorf("event loop: %+v", ev)
	}
	evPrev, evCur := prev, cur
	evPrev.eventLoop, evPrev.hasEventLoop = 100*time.Millisecond, true
	evCur.eventLoop, evCur.hasEventLoop = 2100*time.Millisecond, true
	we := evCur.delta(evPrev)
	we.Exec = 1900 * time.Millisecond
	if sh, ok := we.EventLoopShare(); !ok || sh != 1 || we.Busy() != 2*time.Second || we.Utilization() != 1 {
		t.Errorf("event loop 2s of 2s: share %v %v, busy %v", sh, ok, we.Busy())
	}
	evCur.eventLoop = 700 * time.Millisecond // less than the execution: Exec stays the busy time
	if we = evCur.delta(evPrev); we.EventLoop != 600*time.Millisecond || we.Busy() != 600*time.Millisecond {
		t.Errorf("event loop 600ms: %+v busy %v", we, we.Busy())
	}
	we.Exec = 900 * time.Millisecond
	if we.Busy() != 900*time.Millisecond {
		t.Errorf("exec above the event loop: busy %v", we.Busy())
	}
	if _, ok := w.EventLoopShare(); ok {
		t.Errorf("Redis 7.0: an event-loop share from %+v", w)
	}
	// A counter going backwards (restart) leaves the source unknown.
	cur.host.runQueue = 0
	cur.commands = 5
	if w := cur.delta(prev); w.HasHost || w.Commands != 0 || !w.HasMainCPU {
		t.Errorf("after restart %+v", w)
	}
}

func TestParseProc(t *testing.T) {
	cpu, rq, err := parseSchedstat([]byte("195875297 75271504 5030\n"))
	if err != nil || cpu != 195875297 || rq != 75271504 {
		t.Errorf("schedstat: %v %v %v", cpu, rq, err)
	}
	if _, _, err := parseSchedstat([]byte("12\n")); !errors.Is(err, errShape) {
		t.Errorf("short schedstat: %v", err)
	}
	// A comm with spaces and parentheses; utime 250, stime 50 ticks.
	stat := "9314 (redis-server (x) y) S 1 9314 9314 0 -1 4194560 500 0 0 0 250 50 0 0 20 0 5 0 1000 1 2\n"
	if d, err := parseProcStat([]byte(stat)); err != nil || d != 3*time.Second {
		t.Errorf("stat: %v %v", d, err)
	}
	if _, err := parseProcStat([]byte("1 (x) S 1 2")); !errors.Is(err, errShape) {
		t.Errorf("short stat: %v", err)
	}

	root := t.TempDir()
	mk := func(pid, comm string) {
		dir := filepath.Join(root, pid, "task", pid)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		_ = os.WriteFile(filepath.Join(root, pid, "comm"), []byte(comm+"\n"), 0o644)
		_ = os.WriteFile(filepath.Join(dir, "schedstat"), []byte("3000 5000 7\n"), 0o644)
		_ = os.WriteFile(filepath.Join(root, pid, "stat"), []byte(pid+" ("+comm+") S "+
			"1 1 1 0 -1 0 0 0 0 0 10 20 0 0 20 0 1 0 1 1 1\n"), 0o644)
	}
	mk("42", "redis-server")
	mk("43", "bash")
	_ = os.MkdirAll(filepath.Join(root, "42", "task", "44"), 0o755)
	_ = os.WriteFile(filepath.Join(root, "42", "task", "44", "schedstat"), []byte("1 100 1\n"), 0o644)
	for _, tc := range []struct {
		addr string
		pid  int
		ok   bool
	}{
		{"127.0.0.1:6379", 42, true}, {"[::1]:6379", 42, true}, {"localhost:6379", 42, true},
		{"10.0.0.5:6379", 42, false}, {"127.0.0.1:6379", 43, false}, {"127.0.0.1:6379", 99, false}, {"127.0.0.1:6379", 0, false},
	} {
		if got, err := localPID(root, tc.addr, tc.pid); (err == nil) != tc.ok || (tc.ok && got != tc.pid) {
			t.Errorf("localPID(%s, %d) = %d, %v; want ok %v", tc.addr, tc.pid, got, err, tc.ok)
		}
	}
	h, err := readHost(root, 42)
	if err != nil || h.mainCPU != 3000 || h.runQueue != 5000 || h.runQueueAll != 5100 || h.procCPU != 300*time.Millisecond {
		t.Errorf("readHost: %+v %v", h, err)
	}
}

// TestPollerWitness: against a real redis-server on this host, the Poller
// finds the engine's process, and a client keeping the engine's command
// thread busy with DEBUG SLEEP 0.01 (wall-clock execution the client
// measures itself) shows up as the thread's utilisation and as the
// command count INFO stats gives.
func TestPollerWitness(t *testing.T) {
	s := startServer(t)
	p := NewPoller(s.Addr(), 300*time.Millisecond, []string{"debug", "ping"}, nil)
	runUntilCancel(t, p.Run)
	waitFor(t, 5*time.Second, "first witness", func() bool { _, ok := p.Witness(); return ok })
	if p.Host() <= 0 {
		t.Fatalf("engine on 127.0.0.1 not found in /proc (pid %d)", p.Host())
	}
	c := s.Client()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan time.Duration)
	go func() {
		var busy time.Duration
		for ctx.Err() == nil {
			t0 := time.Now()
			if err := c.Do(context.Background(), "DEBUG", "SLEEP", "0.01").Err(); err != nil && err != redis.Nil {
				break
			}
			busy += time.Since(t0)
		}
		done <- busy
	}()
	polls := p.Stats().Polls
	waitFor(t, 10*time.Second, "two polls under load", func() bool { return p.Stats().Polls >= polls+3 })
	w, _ := p.Witness()
	cancel()
	<-done
	t.Logf("witness under a DEBUG SLEEP loop: %+v util %.2f demand %v", w, w.Utilization(), w.Demand())
	// A closed loop of 10 ms sleeps keeps the thread busy ~95% of the time
	// (the rest is the client's turnaround); at least 80% on a loaded machine.
	if u := w.Utilization(); u < 0.8 {
		t.Errorf("utilisation %.2f under a DEBUG SLEEP 0.01 closed loop, want >= 0.8", u)
	}
	// ~30 DEBUG SLEEPs per 300 ms poll plus the poll's own commands.
	if w.Commands < 10 || w.Commands > 100 {
		t.Errorf("commands %d in %v", w.Commands, w.Interval)
	}
	if !w.HasMainCPU || !w.HasProcCPU || !w.HasHost {
		t.Errorf("witnesses missing from redis-server 7 on this host: %+v", w)
	}
	// DEBUG SLEEP sleeps: its CPU is a small part of its execution.
	if w.HostMainCPU > w.Exec/2 {
		t.Errorf("host CPU %v vs execution %v", w.HostMainCPU, w.Exec)
	}
}

// TestWitnessWork: the per-label work adds up over poll intervals and
// subtracts between two cumulative witnesses, squares included (a label's
// second moment is the sum of its poll intervals').
func TestWitnessWork(t *testing.T) {
	var tot Witness
	tot.add(Witness{Interval: time.Second, Work: []Work{{}, {Calls: 400, Time: 800 * time.Millisecond, Square: 0.0016}}})
	first := tot
	tot.add(Witness{Interval: time.Second, Work: []Work{{Calls: 10, Time: 20 * time.Microsecond, Square: 4e-11}, {Calls: 100, Time: 200 * time.Millisecond, Square: 0.0004}}})
	d := tot.Since(first)
	if len(d.Work) != 2 || d.Work[1].Calls != 100 || d.Work[1].Time != 200*time.Millisecond || d.Work[0].Calls != 10 ||
		d.Work[1].Square < 0.0004-1e-12 || d.Work[1].Square > 0.0004+1e-12 {
		t.Errorf("since the first: %+v", d.Work)
	}
	if first.Work[1].Calls != 400 || tot.Work[1].Calls != 500 {
		t.Errorf("the first total changed with the second: %+v, %+v", first.Work, tot.Work)
	}
}

// TestSquare: the second moment from a poll interval's histogram and the
// exact total of its calls.
func TestSquare(t *testing.T) {
	us := func(n float64) time.Duration { return time.Duration(n * float64(time.Microsecond)) }
	for _, tc := range []struct {
		name  string
		t     time.Duration
		calls int64
		hist  map[int64]int64
		want  float64 // seconds²
	}{
		{"no calls", 0, 0, nil, 0},
		{"no histogram: each call the mean", us(2000) * 10, 10, nil, 10 * 2e-3 * 2e-3},
		{"one bucket: each call the mean", us(2000) * 10, 10, map[int64]int64{2113: 10}, 10 * 2e-3 * 2e-3},
		// Calls of 2.10 and 2.15 ms, either side of the 2113 µs bound: at
		// 2113 and 2137 µs, within 0.1 % of their own second moment.
		{"two near buckets", us(2100)*5 + us(2150)*5, 10, map[int64]int64{2113: 5, 4227: 5}, 5 * (2.1e-3*2.1e-3 + 2.15e-3*2.15e-3)},
		// 100 calls of 1 µs, 100 of 2 ms: the histogram proves the spread.
		{"short and long", us(1)*100 + us(2000)*100, 200, map[int64]int64{1: 100, 2113: 100}, 100*1e-6*1e-6 + 100*2e-3*2e-3},
		// Counts scaled to calls: the histogram saw 20, commandstats 200.
		{"scaled counts", us(1)*100 + us(2000)*100, 200, map[int64]int64{1: 10, 2113: 10}, 100*1e-6*1e-6 + 100*2e-3*2e-3},
		// A histogram that cannot total t is not used.
		{"inconsistent", us(10) * 10, 10, map[int64]int64{2113: 10}, 10 * 10e-6 * 10e-6},
	} {
		got := square(tc.t, tc.calls, tc.hist)
		if math.Abs(got-tc.want) > 1e-3*tc.want {
			t.Errorf("%s: square %.6g, want %.6g", tc.name, got, tc.want)
		}
	}
}

// TestPollerSquare: against a real engine, one label (debug) of 40 calls
// of DEBUG SLEEP 0.002 and 40 of DEBUG SLEEP 0 between two polls. Truth:
// the sum of the squares of the same calls' durations in the engine's own
// slow log (every command logged: slowlog-log-slower-than 0), the duration
// commandstats and LATENCY HISTOGRAM count too. The label's Square is the
// least second moment the histogram allows, so it must lie between each
// call taken as the mean (about half the truth here) and the truth, and
// close at least half of the gap between them (measured on the loaded
// machine against Redis 7.0.15, 8.0.6, Valkey 8.1.1 and 9.1.2: -4 to -15 %
// of the truth, the mean -42 to -60 %).
func TestPollerSquare(t *testing.T) {
	s := startServer(t)
	s.Do("CONFIG", "SET", "slowlog-log-slower-than", "0")
	s.Do("CONFIG", "SET", "slowlog-max-len", "1024")
	p := NewPoller(s.Addr(), time.Hour, []string{"debug", "ping"}, nil)
	runUntilCancel(t, p.Run)
	for range 2 {
		if !p.PollNow(5 * time.Second) {
			t.Fatal("no poll")
		}
	}
	w0, ok := p.WitnessTotal()
	if !ok {
		t.Fatal("no witness after two polls")
	}
	s.Do("SLOWLOG", "RESET")
	c := s.Client()
	ctx := context.Background()
	for range 40 {
		for _, d := range []string{"0.002", "0"} {
			if err := c.Do(ctx, "DEBUG", "SLEEP", d).Err(); err != nil {
				t.Fatal(err)
			}
		}
	}
	log, err := c.Do(ctx, "SLOWLOG", "GET", "1024").Slice()
	if err != nil {
		t.Fatal(err)
	}
	if !p.PollNow(5 * time.Second) {
		t.Fatal("no poll")
	}
	w1, _ := p.WitnessTotal()
	var truth float64
	var n int
	for _, e := range log {
		f, _ := e.([]any)
		if len(f) < 4 {
			t.Fatalf("slow log entry %v", e)
		}
		args, _ := f[3].([]any)
		if len(args) == 0 || !strings.EqualFold(fmt.Sprint(args[0]), "debug") {
			continue
		}
		x := float64(f[2].(int64)) * 1e-6
		truth += x * x
		n++
	}
	work := w1.Since(w0).Work[0]
	mean := work.Time.Seconds() * work.Time.Seconds() / float64(work.Calls)
	t.Logf("debug: %d calls, %v; Square %.4g s², each call the mean %.4g; slow log: %d calls, Σx² %.4g",
		work.Calls, work.Time, work.Square, mean, n, truth)
	if n != 80 || work.Calls != 80 {
		t.Fatalf("%d DEBUG calls in the slow log, %d in commandstats, want 80", n, work.Calls)
	}
	if work.Square < mean || work.Square > truth*1.001 {
		t.Errorf("Square %.4g s², want between the mean's %.4g and the slow log's %.4g", work.Square, mean, truth)
	}
	if truth-work.Square > (truth-mean)/2 {
		t.Errorf("Square %.4g s² closes less than half the gap between the mean's %.4g and the slow log's %.4g", work.Square, mean, truth)
	}
}
