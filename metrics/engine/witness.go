package engine

import (
	"errors"
	"fmt"
	"math"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Witness is what the engine and its host say about the engine's command
// thread over one poll interval: how busy it was and how many commands it
// ran. Durations are sums over the interval, not per command. Each source
// is used only where the engine or the host offers it; the Has flags say
// which did.
//
// Sources (Redis INFO, https://redis.io/docs/latest/commands/info/):
//
//   - Commands: INFO stats total_commands_processed delta (all clients of
//     the engine, respmeter's side connections included).
//   - MainCPU: INFO cpu used_cpu_user_main_thread + used_cpu_sys_main_thread
//     delta (Redis >= 7, Valkey): CPU of the thread that executes commands,
//     reading and writing sockets included. HasMainCPU.
//   - ProcCPU: INFO cpu used_cpu_user + used_cpu_sys delta: the whole
//     process (every engine; Dragonfly's only CPU figure). HasProcCPU.
//   - Exec: the sum of INFO commandstats usec deltas: wall-clock execution
//     of commands only, no I/O (so DEBUG SLEEP counts, CPU-less).
//   - IOThreads: INFO stats io_threads_active was 1 at the end of the
//     interval: socket I/O is partly off the main thread.
//   - EventLoop: INFO stats eventloop_duration_sum delta (Redis >= 7.2,
//     Valkey >= 8; microseconds): the engine's own wall-clock of its event
//     loop's cycles, from waking with work to going back to wait for it:
//     the thread's busy time as the engine measures it, command execution,
//     socket I/O, its periodic tasks and a CPU-less DEBUG SLEEP all held.
//     HasEventLoop.
//   - Host witnesses, only when the engine runs on this host (Poller.Host):
//     HostMainCPU and RunQueue from /proc/PID/task/PID/schedstat (the main
//     thread's time on a CPU and time runnable but waiting for one, in ns;
//     https://docs.kernel.org/scheduler/sched-stats.html), RunQueueAll the
//     run-queue wait of all of its threads, and HostProcCPU from
//     /proc/PID/stat utime + stime (clock ticks of 10 ms, USER_HZ = 100).
//     HasHost.
type Witness struct {
	// Interval is the wall-clock time between the two polls.
	Interval time.Duration
	Commands int64
	// MainCPU, ProcCPU and Exec: see the type comment.
	MainCPU, ProcCPU, Exec   time.Duration
	HasMainCPU, HasProcCPU   bool
	IOThreads                bool
	EventLoop                time.Duration
	HasEventLoop             bool
	HostMainCPU, RunQueue    time.Duration
	RunQueueAll, HostProcCPU time.Duration
	HasHost                  bool
	// Work is the engine's execution per command label over the
	// interval (INFO commandstats deltas, all clients), indexed like
	// Poller.Labels; nil when commandstats did not answer.
	Work []Work
}

// Work is the engine's execution of one command label over an interval,
// from INFO commandstats: Calls and Time (execution, wall-clock) are
// deltas; Square is the second moment of the label's execution times, their
// sum of squares in seconds² (Σ x² over the calls), the sum of the poll
// intervals' (see square: from the poll interval's LATENCY HISTOGRAM where
// the engine has one, else each call taken as the interval's mean, Time ×
// Time / Calls). It is what a queue behind the label's calls depends on
// (Pollaczek–Khinchine: the mean residual work a request arriving at a
// random moment finds is Σ Square / (2 × interval)), and why a queue behind
// a few 2 ms commands is not one behind many 1 µs ones of the same label.
type Work struct {
	Calls  int64
	Time   time.Duration
	Square float64
}

// addWork adds b to a elementwise (sign -1: subtracts); the result has
// the longer length.
func addWork(a, b []Work, sign int64) []Work {
	if len(b) == 0 {
		return a
	}
	out := make([]Work, max(len(a), len(b)))
	copy(out, a)
	for i, w := range b {
		out[i].Calls += sign * w.Calls
		out[i].Time += time.Duration(sign) * w.Time
		out[i].Square += float64(sign) * w.Square
	}
	return out
}

// add adds the durations and counts of d to w; the Has flags and
// IOThreads become d's (the latest interval's).
func (w *Witness) add(d Witness) {
	w.Interval += d.Interval
	w.Commands += d.Commands
	w.MainCPU += d.MainCPU
	w.ProcCPU += d.ProcCPU
	w.Exec += d.Exec
	w.EventLoop += d.EventLoop
	w.HostMainCPU += d.HostMainCPU
	w.RunQueue += d.RunQueue
	w.RunQueueAll += d.RunQueueAll
	w.HostProcCPU += d.HostProcCPU
	w.HasMainCPU, w.HasProcCPU, w.HasHost, w.IOThreads = d.HasMainCPU, d.HasProcCPU, d.HasHost, d.IOThreads
	w.HasEventLoop = d.HasEventLoop
	w.Work = addWork(w.Work, d.Work, 1)
}

// Since returns the witness between two cumulative ones (Poller.WitnessTotal),
// prev taken first: the sums of the poll intervals that ended in between.
// A source is known only if it was in both.
func (w Witness) Since(prev Witness) Witness {
	return Witness{
		Interval:     w.Interval - prev.Interval,
		Commands:     w.Commands - prev.Commands,
		MainCPU:      w.MainCPU - prev.MainCPU,
		ProcCPU:      w.ProcCPU - prev.ProcCPU,
		Exec:         w.Exec - prev.Exec,
		EventLoop:    w.EventLoop - prev.EventLoop,
		HostMainCPU:  w.HostMainCPU - prev.HostMainCPU,
		RunQueue:     w.RunQueue - prev.RunQueue,
		RunQueueAll:  w.RunQueueAll - prev.RunQueueAll,
		HostProcCPU:  w.HostProcCPU - prev.HostProcCPU,
		HasMainCPU:   w.HasMainCPU && prev.HasMainCPU,
		HasProcCPU:   w.HasProcCPU && prev.HasProcCPU,
		HasHost:      w.HasHost && prev.HasHost,
		HasEventLoop: w.HasEventLoop && prev.HasEventLoop,
		IOThreads:    w.IOThreads,
		Work:         addWork(addWork(nil, w.Work, 1), prev.Work, -1),
	}
}

// Busy returns how long the command thread was occupied in the interval:
// the largest of its CPU time plus its run-queue wait (a runnable thread
// serves nobody else while it waits for a CPU), the commands' wall-clock
// execution (which holds CPU-less waits such as DEBUG SLEEP) and, where
// the engine publishes it, its event loop's own busy time (EventLoop:
// execution and socket I/O by the engine's clock); CPU is the main
// thread's (host schedstat, else INFO main thread, else the whole
// process). 0 when the interval is unknown.
func (w Witness) Busy() time.Duration {
	b := max(w.ThreadCPU()+w.RunQueue, w.Exec)
	if w.HasEventLoop {
		b = max(b, w.EventLoop)
	}
	return b
}

// EventLoopShare returns EventLoop / Interval, the share of the interval
// the engine's event loop says it was busy (capped at 1); ok is false
// when the engine publishes no event-loop figures or Interval is 0.
func (w Witness) EventLoopShare() (share float64, ok bool) {
	if !w.HasEventLoop || w.Interval <= 0 {
		return 0, false
	}
	return min(float64(w.EventLoop)/float64(w.Interval), 1), true
}

// ThreadCPU returns the command thread's CPU time in the interval: the
// host's schedstat of the main thread, else INFO's main-thread CPU, else
// the whole process's (0 when the engine gives none).
func (w Witness) ThreadCPU() time.Duration {
	switch {
	case w.HasHost:
		return w.HostMainCPU
	case w.HasMainCPU:
		return w.MainCPU
	}
	return w.ProcCPU
}

// Utilization returns Busy / Interval, 0..1 (capped at 1: the sources are
// sampled a few milliseconds apart), or 0 when Interval is 0.
func (w Witness) Utilization() float64 {
	if w.Interval <= 0 {
		return 0
	}
	return min(float64(w.Busy())/float64(w.Interval), 1)
}

// Demand returns the command thread's service demand per command: Busy /
// Commands (the mean time the thread is occupied by one command, its socket
// I/O included); 0 without commands.
func (w Witness) Demand() time.Duration {
	if w.Commands <= 0 {
		return 0
	}
	return w.Busy() / time.Duration(w.Commands)
}

// witnessSample is one poll's cumulative readings.
type witnessSample struct {
	at                  time.Time
	commands            int64
	mainCPU, procCPU    time.Duration
	hasMainCPU, hasProc bool
	hasCommands         bool
	ioThreads           bool
	eventLoop           time.Duration
	hasEventLoop        bool
	host                hostSample
	hasHost             bool
}

// hostSample is one reading of the engine process in /proc.
type hostSample struct {
	mainCPU, runQueue, runQueueAll, procCPU time.Duration
}

// infoValues returns the "key:value" lines of an INFO reply's text (every
// section in it), comments and blank lines skipped.
func infoValues(text string) map[string]string {
	out := make(map[string]string)
	for line := range strings.Lines(text) {
		line = strings.TrimRight(line, "\r\n")
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if k, v, ok := strings.Cut(line, ":"); ok {
			out[k] = v
		}
	}
	return out
}

// secondsField returns the INFO field key (seconds, fractional) as a
// Duration.
func secondsField(kv map[string]string, key string) (time.Duration, bool) {
	s, ok := kv[key]
	if !ok {
		return 0, false
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || f < 0 {
		return 0, false
	}
	return time.Duration(f * float64(time.Second)), true
}

// parseWitness reads the cumulative witnesses from the text of INFO cpu and
// INFO stats (either may be ""). Fields an engine lacks are left unset.
func parseWitness(cpuText, statsText string) witnessSample {
	var s witnessSample
	cpu := infoValues(cpuText)
	mu, ok1 := secondsField(cpu, "used_cpu_user_main_thread")
	ms, ok2 := secondsField(cpu, "used_cpu_sys_main_thread")
	if ok1 && ok2 {
		s.mainCPU, s.hasMainCPU = mu+ms, true
	}
	pu, ok1 := secondsField(cpu, "used_cpu_user")
	ps, ok2 := secondsField(cpu, "used_cpu_sys")
	if ok1 && ok2 {
		s.procCPU, s.hasProc = pu+ps, true
	}
	st := infoValues(statsText)
	if n, err := strconv.ParseInt(st["total_commands_processed"], 10, 64); err == nil && n >= 0 {
		s.commands, s.hasCommands = n, true
	}
	s.ioThreads = st["io_threads_active"] == "1"
	if us, err := strconv.ParseInt(st["eventloop_duration_sum"], 10, 64); err == nil && us >= 0 {
		s.eventLoop, s.hasEventLoop = time.Duration(us)*time.Microsecond, true
	}
	return s
}

// errNotLocal says the engine's process is not one respmeter can read.
var errNotLocal = errors.New("engine: process not on this host")

// engineComms are the process names (/proc/PID/comm) taken for an engine:
// a PID seen in another PID namespace may belong to anything else here.
var engineComms = []string{"redis", "valkey", "dragonfly", "keydb"}

// localPID returns pid when the engine at addr runs on this host: addr's
// host is a loopback address (or "localhost") and procRoot/pid is a
// process whose name (comm) holds an engine's. Otherwise it returns
// errNotLocal.
func localPID(procRoot, addr string, pid int) (int, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil || pid <= 0 {
		return 0, errNotLocal
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return 0, errNotLocal
	}
	comm, err := os.ReadFile(filepath.Join(procRoot, strconv.Itoa(pid), "comm"))
	if err != nil {
		return 0, errNotLocal
	}
	name := strings.ToLower(strings.TrimSpace(string(comm)))
	for _, e := range engineComms {
		if strings.Contains(name, e) {
			return pid, nil
		}
	}
	return 0, errNotLocal
}

// parseSchedstat decodes /proc/.../schedstat: "<ns on cpu> <ns waiting on a
// run queue> <timeslices>".
func parseSchedstat(b []byte) (cpu, runQueue time.Duration, err error) {
	f := strings.Fields(string(b))
	if len(f) < 2 {
		return 0, 0, fmt.Errorf("%w: schedstat %q", errShape, b)
	}
	c, err1 := strconv.ParseInt(f[0], 10, 64)
	r, err2 := strconv.ParseInt(f[1], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, 0, fmt.Errorf("%w: schedstat %q", errShape, b)
	}
	return time.Duration(c), time.Duration(r), nil
}

// TasksSchedstat returns the time on a CPU and the time runnable but
// waiting for one (run queue), in ns, summed over the threads of the
// process whose /proc directory is dir ("/proc/self" for respmeter's own,
// "/proc/PID"), from each dir/task/TID/schedstat
// (https://docs.kernel.org/scheduler/sched-stats.html). Threads that end
// while it reads are skipped; their time drops out of the sums, so a
// caller taking deltas clamps them at zero.
func TasksSchedstat(dir string) (cpu, runQueue time.Duration, err error) {
	tasks, err := os.ReadDir(filepath.Join(dir, "task"))
	if err != nil {
		return 0, 0, err
	}
	for _, t := range tasks {
		b, err := os.ReadFile(filepath.Join(dir, "task", t.Name(), "schedstat"))
		if err != nil {
			continue // a thread that just ended
		}
		if c, rq, err := parseSchedstat(b); err == nil {
			cpu += c
			runQueue += rq
		}
	}
	return cpu, runQueue, nil
}

// userHZ is the unit of /proc/PID/stat's utime and stime: USER_HZ, 100 on
// every Linux architecture Go supports (proc(5)).
const userHZ = 100

// parseProcStat returns utime + stime of /proc/PID/stat (proc(5): fields 14
// and 15, counted after the parenthesised comm, which may hold spaces).
func parseProcStat(b []byte) (time.Duration, error) {
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("%w: stat without comm", errShape)
	}
	f := strings.Fields(s[i+1:]) // f[0] is field 3 (state)
	if len(f) < 13 {
		return 0, fmt.Errorf("%w: stat has %d fields", errShape, len(f)+2)
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("%w: stat utime/stime %q %q", errShape, f[11], f[12])
	}
	return time.Duration(ut+st) * time.Second / userHZ, nil
}

// readHost reads the engine process pid under procRoot: its main thread's
// schedstat, the run-queue wait of all its threads and its utime + stime.
func readHost(procRoot string, pid int) (hostSample, error) {
	var h hostSample
	dir := filepath.Join(procRoot, strconv.Itoa(pid))
	b, err := os.ReadFile(filepath.Join(dir, "task", strconv.Itoa(pid), "schedstat"))
	if err != nil {
		return h, err
	}
	if h.mainCPU, h.runQueue, err = parseSchedstat(b); err != nil {
		return h, err
	}
	if _, h.runQueueAll, err = TasksSchedstat(dir); err != nil {
		return h, err
	}
	b, err = os.ReadFile(filepath.Join(dir, "stat"))
	if err != nil {
		return h, err
	}
	h.procCPU, err = parseProcStat(b)
	return h, err
}

// delta returns the witness between the samples prev and cur (cur taken
// later). A counter that went backwards (a restarted engine) makes its
// source unknown for the interval.
func (cur witnessSample) delta(prev witnessSample) Witness {
	w := Witness{Interval: cur.at.Sub(prev.at)}
	if cur.hasCommands && prev.hasCommands && cur.commands >= prev.commands {
		w.Commands = cur.commands - prev.commands
	}
	if cur.hasMainCPU && prev.hasMainCPU && cur.mainCPU >= prev.mainCPU {
		w.MainCPU, w.HasMainCPU = cur.mainCPU-prev.mainCPU, true
	}
	if cur.hasProc && prev.hasProc && cur.procCPU >= prev.procCPU {
		w.ProcCPU, w.HasProcCPU = cur.procCPU-prev.procCPU, true
	}
	w.IOThreads = cur.ioThreads
	if cur.hasEventLoop && prev.hasEventLoop && cur.eventLoop >= prev.eventLoop {
		w.EventLoop, w.HasEventLoop = cur.eventLoop-prev.eventLoop, true
	}
	if cur.hasHost && prev.hasHost && cur.host.mainCPU >= prev.host.mainCPU && cur.host.runQueue >= prev.host.runQueue {
		w.HasHost = true
		w.HostMainCPU = cur.host.mainCPU - prev.host.mainCPU
		w.RunQueue = cur.host.runQueue - prev.host.runQueue
		w.RunQueueAll = max(cur.host.runQueueAll-prev.host.runQueueAll, 0)
		w.HostProcCPU = max(cur.host.procCPU-prev.host.procCPU, 0)
	}
	return w
}

// square returns the second moment (Σ x², seconds²) of calls executions
// totalling t, given their LATENCY HISTOGRAM over the same poll interval
// (hist: bucket upper bound in µs → calls in that bucket; nil or empty when
// the engine has none). The engine's buckets are powers of two, a call of x
// µs in the bucket (b/2, b] (Redis's HdrHistogram, reported in whole µs:
// 1, 2, 4, ..., 1056, 2113, 4227); commandstats gives the exact total t.
// Of all the executions that fit both, square returns the least spread one:
// each bucket's calls at one point of the bucket, clamp(λ, b/2, b), with λ
// chosen so that they total t (the minimum of Σ x² under Σ x = t and the
// bucket bounds). So it is t²/calls (every call the mean) when one value
// fits every bucket, a lower bound on the true second moment in any case,
// and it grows where the histogram proves the calls differ: 100 calls of
// 1 µs and 100 of 2 ms give 4.0e-4 s², where the mean alone gives 2.0e-4.
// Spread inside a bucket is not seen: measured against the engines' slow
// logs on a loaded host, DEBUG SLEEP 0.002 and 0 alternating read -4 to
// -15 % (the mean alone -42 to -60 %); a guess inside the buckets (each
// call uniform in its bucket) read +7 to +32 % and +10 to +16 % for calls
// of one length, so square keeps to what the histogram proves.
// The histogram's counts are scaled to calls (the two sources are read
// together but count separately); a histogram that cannot total t (both
// sources reset between them, say) is not used.
func square(t time.Duration, calls int64, hist map[int64]int64) float64 {
	if calls <= 0 || t <= 0 {
		return 0
	}
	total := t.Seconds()
	mean := total * total / float64(calls)
	var n int64
	for _, c := range hist {
		n += c
	}
	if n <= 0 {
		return mean
	}
	type bucket struct{ w, lo, hi float64 }
	bs := make([]bucket, 0, len(hist))
	var lo, hi float64 // the totals with every call at its bucket's low or high end
	for b, c := range hist {
		if c <= 0 {
			continue
		}
		k := bucket{w: float64(c) * float64(calls) / float64(n), hi: float64(b) * 1e-6}
		if b > 1 {
			k.lo = k.hi / 2
		}
		bs = append(bs, k)
		lo += k.w * k.lo
		hi += k.w * k.hi
	}
	if total < lo || total > hi {
		return mean
	}
	at := func(lambda float64) (sum, sq float64) {
		for _, k := range bs {
			x := min(max(lambda, k.lo), k.hi)
			sum += k.w * x
			sq += k.w * x * x
		}
		return sum, sq
	}
	// The total grows with λ: bisect between the smallest low end and the
	// largest high end.
	a, z := math.Inf(1), 0.0
	for _, k := range bs {
		a, z = min(a, k.lo), max(z, k.hi)
	}
	for range 64 {
		m := (a + z) / 2
		if sum, _ := at(m); sum < total {
			a = m
		} else {
			z = m
		}
	}
	_, sq := at((a + z) / 2)
	return max(sq, mean)
}
