package main

import (
	"bytes"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/respmeter/respmeter/internal/redistest"
	engstats "github.com/respmeter/respmeter/metrics/engine"
)

// BenchmarkHeatCPU reports what `respmeter proxy --heat` (1 request in 64
// sampled into the top keys, every one counted in its slot) costs in the
// proxy's own CPU per command, through real sockets, with a confidence
// interval that says whether the difference is resolved: two proxies in
// front of one redis-server, one with heat and one without, each driven
// by 50 client connections that stay open for the whole epoch, measured
// in b.N rounds (-benchtime 600x: 600 rounds) in epochs of 50, each epoch
// with a pair of proxies of its own.
//
// A round is 8 turns, heat off and heat on alternating in the order
// ABBAABBA (BAABBAAB in odd rounds), so that a load or a host that drifts
// within a round falls on both sides alike. In a turn one side's 50
// connections each send 25 pipelines of 16 commands (-P 16: 20,000
// commands in all) or 40 single commands (-P 1: 2,000), SET and GET
// alternating, of 100-byte values over 100,000 random keys (as
// redis-benchmark -d 100 -r 100000; the keys are written first, so that
// every GET finds its value), and each reply is checked byte for byte.
// A side's CPU is its process's time on a CPU summed over its threads
// (/proc/PID/task/TID/schedstat, in ns) over the turn. The connections
// are opened before the first round, so a turn's CPU is the proxy's
// per-command work alone, without connection set-up (a redis-benchmark
// run reconnects its 50 clients: some 30 ms of the proxy's CPU, a share
// that dilutes a ratio the more, the shorter the turns); the load
// generator writes prepared requests and reads the replies' known lengths
// (no allocation), so that its own pauses do not reshape the proxy's
// batches. One unmeasured round warms each epoch's pair up first.
//
// Each epoch gives a ratio, heat on over heat off, of the two sides' CPU
// over its rounds; the benchmark reports their mean ("on/off") and the
// ends of its 95 % confidence interval ("on/off-lo", "on/off-hi"; see
// reportPaired: Student's t over the epochs, so that what holds for a
// whole epoch, such as where each process's memory landed, is part of
// the interval), the pooled ratio of the sums ("on/off-sum") and the two
// sides' CPU per command ("off-µs/op", "on-µs/op"), and logs whether the
// interval's upper end is within 1.03: only then does the run show "≤ 3 %
// CPU per operation". It fails when the heat proxy's slots do not hold
// every command.
//
// Both proxies keep the slow log at 1 s: heat takes every command at or
// over the slow log's threshold into its top keys, whatever the sampling,
// and on a loaded machine most commands could pass the default 10 ms.
// metrics/heat's BenchmarkRecord and proxy/'s BenchmarkHeat measure the
// heat code alone, in memory, without the system calls. Run it alone on a
// quiet machine (about 0.6 s a round and depth on a 2-core machine):
//
//	go test -run '^$' -bench HeatCPU -benchtime 600x ./cmd/respmeter/
//
// With $RESPMETER_HEAT_BASE set to a git revision, the "off" side is that
// revision's build with heat on: the ratio is then this build's heat over
// the base's, side by side, which tells whether a change to heat made it
// cheaper where two runs against heat off, minutes apart, cannot (their
// intervals are about ±1 % each):
//
//	RESPMETER_HEAT_BASE=main go test -run '^$' -bench 'HeatCPU/p16' -benchtime 600x ./cmd/respmeter/
func BenchmarkHeatCPU(b *testing.B) {
	var exe [2]string // each side's program: "" for the test binary
	if rev := os.Getenv(heatBaseEnv); rev != "" {
		// Both sides built alike: the test binary's own heap and
		// start-up would be a difference of their own.
		exe = [2]string{buildRevision(b, rev), buildRevision(b, "")}
		b.Logf("the off side is %s's build with heat on, the on side this work tree's", rev)
	}
	srv := redistest.Start(b)
	fillHeatKeys(b, srv.Addr())
	for _, pipe := range []int{1, 16} {
		b.Run("p"+strconv.Itoa(pipe), func(b *testing.B) {
			perConn := 25 // pipelines per connection and turn
			if pipe == 1 {
				perConn = 40
			}
			ops := int64(4 * heatConns * perConn * pipe) // each side's commands in a round
			// Rounds of ABBAABBA, BAABBAAB: (first+order[j])%2 is turn j's side.
			order := [8]int{0, 1, 1, 0, 0, 1, 1, 0}
			var offNs, onNs, epochs []float64
			var gcs []string // each epoch's GC cycles, heat off/heat on
			b.ResetTimer()
			for done := 0; done < b.N; {
				n := min(heatEpochRounds, b.N-done)
				b.StopTimer()
				e := startCPUEpoch(b, srv.Addr(), exe, pipe, len(epochs))
				round := func(first int) (ns [2]int64) {
					for _, o := range order {
						i := (first + o) % 2
						ns[i] += e.sides[i].turn(b, perConn)
					}
					return ns
				}
				round(0) // warm-up, not measured
				b.StartTimer()
				var sumOff, sumOn float64
				for i := range n {
					ns := round((done + i) % 2)
					offNs, onNs = append(offNs, float64(ns[0])/float64(ops)), append(onNs, float64(ns[1])/float64(ops))
					sumOff, sumOn = sumOff+float64(ns[0]), sumOn+float64(ns[1])
				}
				b.StopTimer()
				// The proxy records a command once its reply is written, so
				// the last replies may reach the client first.
				redistest.Eventually(b, 5*time.Second, func() error {
					if counted, sent := slotRequests(b, e.admin[1]), int64(n+1)*ops; counted < sent {
						return fmt.Errorf("the slots count %d requests, %d were sent", counted, sent)
					}
					return nil
				})
				// The Go collector's cycles are part of each side's CPU:
				// logged, to tell them apart from heat's own work.
				gcs = append(gcs, gcCycles(b, e.admin[0])+"/"+gcCycles(b, e.admin[1]))
				e.stop(b)
				b.StartTimer()
				epochs = append(epochs, sumOn/sumOff)
				done += n
			}
			b.StopTimer()
			// One line each (a benchmark's log keeps its first lines only).
			b.Logf("epochs' on/off: %.4f", epochs)
			b.Logf("epochs' GC cycles, heat off/heat on: %s", strings.Join(gcs, " "))
			reportPaired(b, offNs, onNs, epochs, 1.03)
		})
	}
}

// heatEpochRounds is the rounds of one epoch of BenchmarkHeatCPU: each
// epoch starts its own pair of proxies, so that the run samples as many
// of the processes' placements in memory and on the CPUs.
const heatEpochRounds = 50

// cpuEpoch is one epoch's pair of proxies, heat off (0) and heat on (1),
// with their admin addresses and connections.
type cpuEpoch struct {
	procs [2]*proc
	admin [2]string
	sides [2]*cpuSide
}

// heatBaseEnv names the git revision whose build, with heat on, is
// BenchmarkHeatCPU's "off" side instead of this build without heat.
const heatBaseEnv = "RESPMETER_HEAT_BASE"

// startCPUEpoch starts epoch k's two proxies in front of upstream, the
// one started first alternating from epoch to epoch, and opens their
// connections for pipelines of depth commands. exe are the sides'
// programs ("": the test binary); where side 0 has one of its own, it
// runs with heat on too.
func startCPUEpoch(b *testing.B, upstream string, exe [2]string, depth, k int) *cpuEpoch {
	b.Helper()
	e := &cpuEpoch{}
	args := [2][]string{{"--slowlog-threshold", "1s"}, {"--slowlog-threshold", "1s", "--heat"}}
	if exe[0] != "" {
		args[0] = args[1]
	}
	for j := range 2 {
		i := (k + j) % 2
		var addr string
		e.procs[i], addr, e.admin[i] = startProxyExe(b, exe[i], upstream, args[i]...)
		e.sides[i] = newCPUSide(b, e.procs[i], addr, depth)
	}
	return e
}

// stop closes e's connections and stops its proxies.
func (e *cpuEpoch) stop(b *testing.B) {
	b.Helper()
	for i, p := range e.procs {
		for _, c := range e.sides[i].conns {
			_ = c.Close()
		}
		p.signal(b, syscall.SIGINT)
		if code := p.wait(b); code != exitOK {
			b.Fatalf("proxy exited %d\nstderr:\n%s", code, p.stderr)
		}
	}
}

// The load of BenchmarkHeatCPU: heatConns connections per proxy (as
// redis-benchmark's default -c 50), keys key:0 .. key:99999, 100-byte
// values, heatPrepared pipelines prepared per connection and sent in turn.
const (
	heatConns    = 50
	heatKeys     = 100_000
	heatPrepared = 64
)

var heatValue = strings.Repeat("x", 100)

// heatGetReply is a GET's reply to a key fillHeatKeys wrote.
var heatGetReply = "$100\r\n" + heatValue + "\r\n"

// fillHeatKeys writes every key of the load on the engine at addr, so that
// each GET of a turn finds its value and its reply's length is known.
func fillHeatKeys(b *testing.B, addr string) {
	b.Helper()
	c, err := redistest.DialConn(addr, 5*time.Second)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	const batch = 1000
	for k := 0; k < heatKeys; k += batch {
		var req []byte
		for i := k; i < k+batch; i++ {
			req = append(req, redistest.Cmd("SET", "key:"+strconv.Itoa(i), heatValue)...)
		}
		if err := c.Write(req); err != nil {
			b.Fatal(err)
		}
		if got, err := c.ReadN(batch*len("+OK\r\n"), 10*time.Second); err != nil || string(got) != strings.Repeat("+OK\r\n", batch) {
			b.Fatalf("filling the keys: %q %v", got, err)
		}
	}
}

// cpuSide is one proxy of a side-by-side CPU benchmark: its process and
// the client connections that drive it, each with its prepared pipelines
// and their replies.
type cpuSide struct {
	dir   string // /proc/PID
	conns [heatConns]net.Conn
	reqs  [heatConns][heatPrepared][]byte
	want  []byte // the replies of every pipeline (SET and GET alternate)
	next  int    // the prepared pipeline each connection sends next
}

func newCPUSide(b *testing.B, p *proc, addr string, depth int) *cpuSide {
	b.Helper()
	s := &cpuSide{dir: "/proc/" + strconv.Itoa(p.cmd.Process.Pid)}
	for j := range depth {
		if j%2 == 0 {
			s.want = append(s.want, "+OK\r\n"...)
		} else {
			s.want = append(s.want, heatGetReply...)
		}
	}
	rng := rand.New(rand.NewPCG(uint64(depth), 1))
	for i := range s.conns {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = c.Close() })
		s.conns[i] = c
		for k := range s.reqs[i] {
			var req []byte
			for j := range depth {
				key := "key:" + strconv.Itoa(rng.IntN(heatKeys))
				if j%2 == 0 {
					req = append(req, redistest.Cmd("SET", key, heatValue)...)
				} else {
					req = append(req, redistest.Cmd("GET", key)...)
				}
			}
			s.reqs[i][k] = req
		}
	}
	return s
}

// turn has each of s's connections send n of its prepared pipelines, one
// at a time, checking every reply, and returns the CPU s's process took
// meanwhile, in ns.
func (s *cpuSide) turn(b *testing.B, n int) int64 {
	b.Helper()
	cpu0, _, err := engstats.TasksSchedstat(s.dir)
	if err != nil {
		b.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, len(s.conns))
	for i, c := range s.conns {
		wg.Go(func() {
			got := make([]byte, len(s.want))
			for k := range n {
				req := s.reqs[i][(s.next+k)%heatPrepared]
				if _, err := c.Write(req); err != nil {
					errs <- err
					return
				}
				if _, err := io.ReadFull(c, got); err != nil || !bytes.Equal(got, s.want) {
					errs <- fmt.Errorf("replies %q (%v), want %q", got, err, s.want)
					return
				}
			}
		})
	}
	wg.Wait()
	s.next += n
	close(errs)
	if err := <-errs; err != nil {
		b.Fatal(err)
	}
	cpu1, _, err := engstats.TasksSchedstat(s.dir)
	if err != nil {
		b.Fatal(err)
	}
	return int64(cpu1 - cpu0)
}

// reportPaired reports paired CPU-per-command figures of rounds, off[i]
// and on[i] measured in round i, and of epochs, each epoch's pooled ratio
// on/off over its rounds: each side's mean ("off-µs/op", "on-µs/op"),
// the pooled ratio of the sums ("on/off-sum"), the epochs' mean ratio
// ("on/off") and the ends of its 95 % confidence interval ("on/off-lo",
// "on/off-hi"). The interval is the batch-means one, Student's t over the
// epochs' ratios: rounds of one pair of processes are not independent of
// each other (each process's placement in memory and on the CPUs, and the
// host's state, hold for many rounds), so an interval over rounds would
// leave that variance out; over epochs it is in. It logs the rounds'
// median with its interval by order statistics (quantileCI) for
// comparison, and whether the epochs' interval's upper end is within
// bound, the one claim the run can make.
func reportPaired(b *testing.B, off, on, epochs []float64, bound float64) {
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
	if len(ratios) >= 10 {
		b.Logf("%d rounds: median %.4f, interval over rounds [%.4f, %.4f]", len(ratios),
			median(ratios), quantileCI(ratios, 0.5, -2), quantileCI(ratios, 0.5, 2))
	}
	k := len(epochs)
	var mean, ss float64
	for _, r := range epochs {
		mean += r / float64(k)
	}
	for _, r := range epochs {
		ss += (r - mean) * (r - mean)
	}
	b.ReportMetric(mean, "on/off")
	if k < 3 {
		b.Logf("%d epochs: too few for an interval (-benchtime %dx)", k, 3*heatEpochRounds)
		return
	}
	half := tQuantile95(k-1) * math.Sqrt(ss/float64(k-1)/float64(k))
	lo, hi := mean-half, mean+half
	b.ReportMetric(lo, "on/off-lo")
	b.ReportMetric(hi, "on/off-hi")
	verdict := "NOT shown"
	if hi <= bound {
		verdict = "shown"
	}
	b.Logf("%d epochs of up to %d rounds: on/off mean %.4f, 95 %% interval [%.4f, %.4f]: within %.2f %s",
		k, heatEpochRounds, mean, lo, hi, bound, verdict)
}

// tQuantile95 returns the 0.975 quantile of Student's t distribution of
// df degrees of freedom (df >= 1), the half-width factor of a two-sided
// 95 % interval; between the tabled values, the one of the next smaller
// df, which is larger: the interval errs wide.
func tQuantile95(df int) float64 {
	table := [...]struct {
		df int
		t  float64
	}{{1, 12.706}, {2, 4.303}, {3, 3.182}, {4, 2.776}, {5, 2.571}, {6, 2.447}, {7, 2.365}, {8, 2.306},
		{9, 2.262}, {10, 2.228}, {12, 2.179}, {15, 2.131}, {20, 2.086}, {30, 2.042}, {60, 2.000}, {120, 1.980}}
	t := table[0].t
	for _, e := range table {
		if e.df <= df {
			t = e.t
		}
	}
	return t
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
