package main

import (
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"regexp"
	"strconv"
	"strings"
	"sync"
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
// by 50 client connections that stay open for the whole run, measured in
// b.N rounds (-benchtime 300x: 300 rounds).
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
// batches. One unmeasured round warms both up first.
//
// Each round gives a ratio, heat on over heat off, of the two sides'
// CPU per command; the benchmark reports their median ("on/off"), the
// ends of its 95 % confidence interval by order statistics ("on/off-lo",
// "on/off-hi": distribution-free, about ±2 binomial standard deviations of
// ranks around the median, so it needs some 20 rounds to be narrow), the
// pooled ratio of the sums ("on/off-sum") and the two sides' CPU per
// command ("off-µs/op", "on-µs/op"), and logs whether the interval's upper
// end is within 1.03: only then does the run show "≤ 3 % CPU per
// operation". It fails when the heat proxy's slots do not hold every
// command.
//
// Both proxies keep the slow log at 1 s: heat takes every command at or
// over the slow log's threshold into its top keys, whatever the sampling,
// and on a loaded machine most commands could pass the default 10 ms.
// metrics/heat's BenchmarkRecord and proxy/'s BenchmarkHeat measure the
// heat code alone, in memory, without the system calls. Run it alone on a
// quiet machine (about 0.6 s a round and depth on a 2-core machine):
//
//	go test -run '^$' -bench HeatCPU -benchtime 300x ./cmd/respmeter/
func BenchmarkHeatCPU(b *testing.B) {
	srv := redistest.Start(b)
	fillHeatKeys(b, srv.Addr())
	off, offAddr, offAdmin := startProxy(b, srv.Addr(), "--slowlog-threshold", "1s")
	on, onAddr, onAdmin := startProxy(b, srv.Addr(), "--slowlog-threshold", "1s", "--heat")
	for _, pipe := range []int{1, 16} {
		b.Run("p"+strconv.Itoa(pipe), func(b *testing.B) {
			perConn := 25 // pipelines per connection and turn
			if pipe == 1 {
				perConn = 40
			}
			sides := [2]*cpuSide{newCPUSide(b, off, offAddr, pipe), newCPUSide(b, on, onAddr, pipe)}
			before := slotRequests(b, onAdmin)
			// Rounds of ABBAABBA, BAABBAAB: (first+order[j])%2 is turn j's side.
			order := [8]int{0, 1, 1, 0, 0, 1, 1, 0}
			round := func(first int) (ns [2]int64) {
				for _, o := range order {
					i := (first + o) % 2
					ns[i] += sides[i].turn(b, perConn)
				}
				return ns
			}
			ops := int64(4 * heatConns * perConn * pipe) // each side's commands in a round
			round(0)                                     // warm-up, not measured
			var offNs, onNs []float64
			b.ResetTimer()
			for i := range b.N {
				ns := round(i % 2)
				offNs, onNs = append(offNs, float64(ns[0])/float64(ops)), append(onNs, float64(ns[1])/float64(ops))
			}
			b.StopTimer()
			if sent, counted := int64(b.N+1)*ops, slotRequests(b, onAdmin)-before; counted < sent {
				b.Fatalf("the slots count %d requests, %d were sent", counted, sent)
			}
			reportPaired(b, offNs, onNs, 1.03)
			// The Go collector's cycles are part of each side's CPU:
			// logged, to tell them apart from heat's own work.
			b.Logf("GC cycles since start: heat off %s, heat on %s", gcCycles(b, offAdmin), gcCycles(b, onAdmin))
		})
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
