package proxy_test

// Slow readers (see docs/cases.md F-02): a client that
// pipelines GETs of a 1 MiB value and reads nothing must be disconnected
// once the replies queued for it cross the client output limit, without
// the proxy's memory growing past that limit plus a fixed overhead and
// without slowing the clients that share its event loop. Every proxy here
// runs with one event loop (Loops: 1), so "the same event loop" holds for
// all clients.
//
// Memory is measured on the test process itself (the proxy runs
// in-process): VmRSS from /proc/self/status just before the slow reader
// starts, and the peak (VmHWM, reset through /proc/self/clear_refs, and a
// 2 ms sampler) until it has been evicted. The test's own part of that
// growth is kept small: the slow reader's socket has a 4 KiB SO_RCVBUF and
// reads nothing, the neighbours use 16-byte values. Under -race the
// detector's shadow memory lands in VmRSS too (measured here: VmRSS grew
// two to three times as much as the Go heap), so there the bound is
// checked on the Go runtime's own footprint (runtime/metrics: memory mapped
// and not released to the OS) and VmRSS is only logged.
//
// These tests measure memory and latency, so they do not run in parallel.

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/respmeter/respmeter/internal/redistest"
	rmetrics "github.com/respmeter/respmeter/metrics"
	"github.com/respmeter/respmeter/proxy"
)

const (
	// srGets is how many GETs a slow reader pipelines at most.
	srGets = 5000
	// srMemSlack is the fixed overhead allowed over the output limit: the
	// proxy's peak memory growth must stay under limit + srMemSlack.
	srMemSlack = 64 << 20
	// srRcvBuf is the slow reader's SO_RCVBUF (the kernel doubles it).
	srRcvBuf = 4096
)

// srLog collects the proxy's log output (slog text lines) so that a test
// can count them. It may be written from any goroutine, also after the
// test has ended.
type srLog struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *srLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// count returns the number of lines containing every one of subs.
func (l *srLog) count(subs ...string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, line := range strings.Split(l.b.String(), "\n") {
		ok := line != ""
		for _, s := range subs {
			ok = ok && strings.Contains(line, s)
		}
		if ok {
			n++
		}
	}
	return n
}

// srSetup starts redis-server, with a value of size bytes under key
// unless size is 0, and a proxy in front of it with one event loop, the
// default output limit and its log (Warn and above) captured in the
// returned srLog.
func srSetup(t *testing.T, key string, size int) (*e2eEnv, *srLog) {
	t.Helper()
	lg := &srLog{}
	e := e2eSetupWith(t, func(c *proxy.Config) {
		c.Loops = 1
		c.ClientOutputLimit = 0 // proxy.DefaultClientOutputLimit
		c.Logger = slog.New(slog.NewTextHandler(lg, &slog.HandlerOptions{Level: slog.LevelWarn}))
	})
	if size > 0 {
		// A numbered pattern, not one repeated byte, so that a reply cut
		// or shifted anywhere would not compare equal.
		var v strings.Builder
		for i := 0; v.Len() < size; i++ {
			fmt.Fprintf(&v, "%07d|", i)
		}
		e.srv.DoT(t, "SET", key, v.String()[:size])
	}
	return e, lg
}

// srStatus returns VmRSS and VmHWM of this process in bytes; it skips t
// where /proc/self/status has no VmRSS.
func srStatus(t testing.TB) (rss, hwm int64) {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Skipf("no /proc/self/status: %v", err)
	}
	rss, hwm = srParseStatus(b)
	if rss == 0 {
		t.Skip("no VmRSS in /proc/self/status")
	}
	return rss, hwm
}

// srParseStatus reads VmRSS and VmHWM (in bytes) from the text of
// /proc/<pid>/status; 0 where absent.
func srParseStatus(b []byte) (rss, hwm int64) {
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) != 3 || f[2] != "kB" {
			continue
		}
		v, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil {
			continue
		}
		switch f[0] {
		case "VmRSS:":
			rss = v << 10
		case "VmHWM:":
			hwm = v << 10
		}
	}
	return rss, hwm
}

// srResetHWM resets VmHWM to the current RSS (Linux >= 4.0); it reports
// whether that worked.
func srResetHWM() bool {
	return os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) == nil
}

var srFootprintSamples = []metrics.Sample{
	{Name: "/memory/classes/total:bytes"},
	{Name: "/memory/classes/heap/released:bytes"},
}

// srGoFootprint returns the memory the Go runtime has mapped and not
// returned to the OS: about this process's RSS without the race detector's
// shadow memory (there are no cgo allocations to miss).
func srGoFootprint() int64 {
	s := slices.Clone(srFootprintSamples)
	metrics.Read(s)
	return int64(s[0].Value.Uint64()) - int64(s[1].Value.Uint64())
}

// srMemProbe tracks the peak growth of this process's memory from the
// moment it starts.
type srMemProbe struct {
	rss0, fp0  int64
	hwmOK      bool
	maxRSS     atomic.Int64
	maxFP      atomic.Int64
	stop, done chan struct{}
}

func srStartMemProbe(t testing.TB) *srMemProbe {
	t.Helper()
	m := &srMemProbe{stop: make(chan struct{}), done: make(chan struct{})}
	m.rss0, _ = srStatus(t)
	m.fp0 = srGoFootprint()
	m.hwmOK = srResetHWM()
	m.maxRSS.Store(m.rss0)
	m.maxFP.Store(m.fp0)
	go func() {
		defer close(m.done)
		tick := time.NewTicker(2 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-m.stop:
				return
			case <-tick.C:
			}
			if b, err := os.ReadFile("/proc/self/status"); err == nil {
				if rss, _ := srParseStatus(b); rss > m.maxRSS.Load() {
					m.maxRSS.Store(rss)
				}
			}
			if fp := srGoFootprint(); fp > m.maxFP.Load() {
				m.maxFP.Store(fp)
			}
		}
	}()
	return m
}

// finish stops the sampler and returns the peak growth of VmRSS and of the
// Go footprint over their values at the start.
func (m *srMemProbe) finish(t testing.TB) (rss, fp int64) {
	t.Helper()
	close(m.stop)
	<-m.done
	peak := m.maxRSS.Load()
	if _, hwm := srStatus(t); m.hwmOK && hwm > peak {
		peak = hwm
	}
	return peak - m.rss0, m.maxFP.Load() - m.fp0
}

// check fails t unless the proxy's memory growth stayed under limit +
// srMemSlack (VmRSS; the Go footprint under -race), and returns a
// description of the figures.
func (m *srMemProbe) check(t testing.TB, limit int64) string {
	t.Helper()
	rss, fp := m.finish(t)
	bound := limit + srMemSlack
	desc := fmt.Sprintf("VmRSS %d MiB + %.1f MiB at peak (VmHWM reset: %v), Go footprint + %.1f MiB, bound + %d MiB",
		m.rss0>>20, float64(rss)/(1<<20), m.hwmOK, float64(fp)/(1<<20), bound>>20)
	what, got := "VmRSS", rss
	if redistest.RaceEnabled() {
		what, got = "Go footprint (-race: VmRSS includes the detector's shadow memory)", fp
	}
	if got >= bound {
		t.Errorf("memory grew by %.1f MiB (%s) while a slow reader's replies piled up; want < limit %d MiB + %d MiB\n%s",
			float64(got)/(1<<20), what, limit>>20, srMemSlack>>20, desc)
	}
	return desc
}

// srDialSlow connects to addr with a small receive buffer, set before the
// connect so that the advertised window stays small too.
func srDialSlow(t testing.TB, addr string) *net.TCPConn {
	t.Helper()
	d := net.Dialer{Timeout: 2 * time.Second, Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		if err := rc.Control(func(fd uintptr) {
			serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, srRcvBuf)
		}); err != nil {
			return err
		}
		return serr
	}}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c.(*net.TCPConn)
}

// srSlowWriter pipelines up to total "GET key" on c, in batches of batch
// requests every pause (all at once when pause is 0), and reads nothing.
// It stops at the first write error (the proxy closed the connection) or
// when stop is closed; the returned channel yields the number of GETs
// written.
func srSlowWriter(c *net.TCPConn, key string, batch, total int, pause time.Duration, stop <-chan struct{}) <-chan int {
	out := make(chan int, 1)
	go func() {
		one := respCmd("GET", key)
		sent := 0
		for sent < total {
			n := min(batch, total-sent)
			_ = c.SetWriteDeadline(time.Now().Add(20 * time.Second))
			if _, err := c.Write(bytes.Repeat(one, n)); err != nil {
				break
			}
			sent += n
			if pause > 0 {
				select {
				case <-stop:
					out <- sent
					return
				case <-time.After(pause):
				}
			}
		}
		out <- sent
	}()
	return out
}

// srDrain reads c until the peer closes it or timeout passes, and returns
// the bytes read, whether it was closed, and how.
func srDrain(c *net.TCPConn, timeout time.Duration) (n int64, closed bool, how error) {
	_ = c.SetReadDeadline(time.Now().Add(timeout))
	buf := make([]byte, 64<<10)
	for {
		k, err := c.Read(buf)
		n += int64(k)
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				return n, false, err
			}
			return n, true, err
		}
	}
}

// srWaitEvicted polls set until its output-limit evictions exceed before,
// and returns how long that took (or fails t after within).
func srWaitEvicted(t testing.TB, set *rmetrics.Set, before int64, within time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	redistest.EventuallyEvery(t, within, 2*time.Millisecond, func() error {
		if set.Counters().ClientsEvictedOutputLimit <= before {
			return fmt.Errorf("slow reader not evicted (output-limit evictions still %d)", before)
		}
		return nil
	})
	return time.Since(start)
}

// srEvictions returns respmeter_client_evictions_total by reason, as
// /metrics exposes it.
func srEvictions(t testing.TB, set *rmetrics.Set) map[string]float64 {
	t.Helper()
	reg := prometheus.NewRegistry()
	if err := set.Register(reg); err != nil {
		t.Fatalf("register metrics: %v", err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "respmeter_client_evictions_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "reason" {
					out[l.GetValue()] = m.GetCounter().GetValue()
				}
			}
		}
	}
	if len(out) == 0 {
		t.Fatalf("no respmeter_client_evictions_total in the exposition")
	}
	return out
}

// Phases of a latency run: samples taken in srPhaseWarm are dropped.
const (
	srPhaseWarm = iota
	srPhaseBase
	srPhaseDuring
	srNumPhases
)

// srLatency is a set of clients running requests at a fixed pace on their
// own connections, recording the client-side latency of each by the phase
// it was sent in.
type srLatency struct {
	phase atomic.Int32
	stop  chan struct{}
	wg    sync.WaitGroup

	mu   sync.Mutex
	lat  [srNumPhases][]time.Duration
	errs []string
	// n counts each phase's samples as they come (lat gets them at finish).
	n [srNumPhases]atomic.Int64
}

// srStartNeighbours starts n clients on addr, each alternating "SET
// <prefix>:i <16 bytes>" and "GET <prefix>:i" (checking the replies) every
// pace.
func srStartNeighbours(t testing.TB, addr, prefix string, n int, pace time.Duration) *srLatency {
	t.Helper()
	l := &srLatency{stop: make(chan struct{})}
	for i := 0; i < n; i++ {
		c, err := redistest.DialConn(addr, 2*time.Second)
		if err != nil {
			l.finish(t)
			t.Fatalf("neighbour %d: %v", i, err)
		}
		key, val := fmt.Sprintf("%s:%d", prefix, i), fmt.Sprintf("neighbour-%06d", i)
		set, setWant := respCmd("SET", key, val), "+OK\r\n"
		get, getWant := respCmd("GET", key), fmt.Sprintf("$%d\r\n%s\r\n", len(val), val)
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			defer c.Close()
			// Spread the clients over the pace interval.
			next := time.Now().Add(pace * time.Duration(i) / time.Duration(n))
			l.run(c, pace, next, func(k int) ([]byte, string) {
				if k%2 == 0 {
					return set, setWant
				}
				return get, getWant
			}, fmt.Sprintf("neighbour %d", i))
		}()
	}
	return l
}

// run sends req(k) every pace from next on until stop, recording latencies.
func (l *srLatency) run(c *redistest.Conn, pace time.Duration, next time.Time, req func(k int) ([]byte, string), who string) {
	var mine [srNumPhases][]time.Duration
	defer func() {
		l.mu.Lock()
		for p := range mine {
			l.lat[p] = append(l.lat[p], mine[p]...)
		}
		l.mu.Unlock()
	}()
	fail := func(format string, args ...any) {
		l.mu.Lock()
		l.errs = append(l.errs, who+": "+fmt.Sprintf(format, args...))
		l.mu.Unlock()
	}
	for k := 0; ; k++ {
		if d := time.Until(next); d > 0 {
			select {
			case <-l.stop:
				return
			case <-time.After(d):
			}
		} else {
			select {
			case <-l.stop:
				return
			default:
			}
			next = time.Now() // late: do not send a burst to catch up
		}
		next = next.Add(pace)
		b, want := req(k)
		ph := l.phase.Load()
		start := time.Now()
		if err := c.Write(b); err != nil {
			fail("write: %v", err)
			return
		}
		f, err := c.ReadFrame(5 * time.Second)
		d := time.Since(start)
		if err != nil || string(f) != want {
			fail("request %d: got %q (err %v), want %q", k, redistest.Trunc(f), err, want)
			return
		}
		mine[ph] = append(mine[ph], d)
		l.n[ph].Add(1)
	}
}

// finish stops the clients and fails t on any error they met.
func (l *srLatency) finish(t testing.TB) {
	t.Helper()
	close(l.stop)
	l.wg.Wait()
	for _, e := range l.errs {
		t.Error(e)
	}
}

// pct returns the pct percentile (0-100) of the phase's latencies, the
// nearest-rank value, and the number of samples.
func (l *srLatency) pct(phase int, pct float64) (time.Duration, int) {
	l.mu.Lock()
	s := slices.Clone(l.lat[phase])
	l.mu.Unlock()
	if len(s) == 0 {
		return 0, 0
	}
	slices.Sort(s)
	i := int(math.Ceil(pct/100*float64(len(s)))) - 1
	return s[max(i, 0)], len(s)
}

// srBound is the most a neighbour's p99 may reach next to a slow reader:
// twice its p99 without it, but at least its p99 + 2 ms, so that a
// sub-millisecond baseline does not turn scheduling noise into a failure.
func srBound(base time.Duration) time.Duration {
	return max(2*base, base+2*time.Millisecond)
}

// srEvictedOnce fails t unless the slow client at addr was evicted for its
// output exactly once: the output-limit counter went up by one from
// before, and one "client evicted" line with reason=output_limit names it.
func srEvictedOnce(t testing.TB, e *e2eEnv, lg *srLog, addr string, before int64) {
	t.Helper()
	if got := e.set.Counters().ClientsEvictedOutputLimit - before; got != 1 {
		t.Errorf("output-limit evictions went up by %d, want 1", got)
	}
	// The line is written on the loop right after the count; give it a
	// moment all the same.
	_ = redistest.Await(time.Second, 5*time.Millisecond, func() error {
		if lg.count(`msg="client evicted"`, "client="+addr) == 0 {
			return errors.New("no line yet") // asserted below
		}
		return nil
	})
	if got := lg.count(`msg="client evicted"`, "reason=output_limit", "client="+addr); got != 1 {
		t.Errorf("%d 'client evicted' log lines with reason=output_limit for %s, want exactly 1; log:\n%s",
			got, addr, lg.String())
	}
}

// String returns the log so far.
func (l *srLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestSlowReaderEvictedNeighboursKeepLatency: one client pipelines up to
// 240 GETs of a 1 MiB value and reads nothing, while 20 neighbours on the
// same event loop (Loops: 1) run small SET/GET requests. The slow client
// must be disconnected once its queued replies cross the default output
// limit (64 MiB): counted once in respmeter_client_evictions_total
// {reason="output_limit"}, logged once, its socket closed, and the proxy's
// memory must grow by less than the limit + 64 MiB. The neighbours' p99 must
// stay within srBound of their p99 just before, without the slow reader.
//
// Two things other than the shared event loop slow the neighbours down on
// a small machine, and the test keeps them out of the comparison:
//
//   - The engine. redis-server is single-threaded, and handed 5,000 GETs of
//     1 MiB in one write it builds about 600 MiB of replies per 16 KiB read
//     of requests before it serves anyone else: seconds of stall and GiBs of
//     its memory, the same with or without a proxy (TestF02SlowReaderMemory
//     sends its 5,000 GETs in one write, with a smaller value). Here the
//     slow reader pipelines one GET every 5 ms (at most 200 MiB/s of
//     replies), 240 of them at most, and never waits for a reply.
//   - The machine: the proxy runs in this process, the 2-core machine is
//     shared, and moving 128 MiB costs CPU and GC time that every goroutine
//     feels. A control group of 20 clients on a second proxy and engine runs
//     the same requests at the same time; whatever their p99 rises by is
//     allowed on top of the bound.
//
// The engine still builds 1 MiB per GET, and on a busy machine several of
// the slow reader's GETs reach it together. What the engine gives its
// clients meanwhile is measured too: a direct group of 5 clients runs the
// same requests on the engine itself, not through the proxy (as Y' does
// in TestF02SlowReaderMemory). The bound allows the larger of the two
// rises; a proxy that stalls its event loop on the slow reader adds its
// stall on top of both and fails.
//
// The comparison is retried up to 3 times (fresh baseline and slow reader,
// same proxies), as the split timing tests do with redistest.Retry; the eviction,
// log and memory checks hold on every attempt. Built with -race, the test
// makes no comparison: the detector's work on every byte copied runs on
// the loop and would be what the neighbours wait for; .ci/test runs the
// test again without -race in the unsharded shapes.
func TestSlowReaderEvictedNeighboursKeepLatency(t *testing.T) {
	redistest.VerifyNoLeaks(t)
	const (
		valueSize  = 1 << 20
		attempts   = 3
		neighbours = 20
		direct     = 5                    // clients of the same engine, not through the proxy
		pace       = 8 * time.Millisecond // per neighbour: 2,500 requests/s per group
		slowPause  = 5 * time.Millisecond // between the slow reader's GETs
		// The slow reader's GETs: 240 MiB of replies, three times the
		// output limit + slack, so it must be evicted; no more, so that
		// a burst of its GETs (read at once by a proxy or an engine slowed
		// by a busy machine) cannot keep the engine building replies for
		// seconds (measured with 5,000: the engine answered nobody for
		// 20 s while its memory grew to 700 MiB, and no eviction came).
		slowGets = 3 * (proxy.DefaultClientOutputLimit + 16<<20) / valueSize
		baseFor  = 1500 * time.Millisecond
		minBase  = 1000 // baseline samples, for a p99 of 10 or more
	)
	e, lg := srSetup(t, "big:sr", valueSize)
	ctl, _ := srSetup(t, "", 0)
	limit := int64(proxy.DefaultClientOutputLimit)
	before := e.set.Counters()
	runs := 0
	for attempt := 1; attempt <= attempts; attempt++ {
		runs++
		nb := srStartNeighbours(t, e.paddr, "nb", neighbours, pace)
		cg := srStartNeighbours(t, ctl.paddr, "nb", neighbours, pace)
		dg := srStartNeighbours(t, e.srv.Addr(), "direct", direct, pace)
		time.Sleep(300 * time.Millisecond) // warm-up
		runtime.GC()
		debug.FreeOSMemory()
		nb.phase.Store(srPhaseBase)
		cg.phase.Store(srPhaseBase)
		dg.phase.Store(srPhaseBase)
		// The baseline runs baseFor, and longer while it has fewer than
		// minBase samples (a loaded machine serves fewer requests).
		time.Sleep(baseFor)
		_ = redistest.Await(20*time.Second, 100*time.Millisecond, func() error {
			if n := nb.n[srPhaseBase].Load(); n < minBase {
				return fmt.Errorf("%d baseline samples", n)
			}
			return nil
		})

		mem := srStartMemProbe(t)
		evictedBefore := e.set.Counters().ClientsEvictedOutputLimit
		slow := srDialSlow(t, e.paddr)
		slowAddr := slow.LocalAddr().String()
		stop := make(chan struct{})
		nb.phase.Store(srPhaseDuring)
		cg.phase.Store(srPhaseDuring)
		dg.phase.Store(srPhaseDuring)
		sentc := srSlowWriter(slow, "big:sr", 1, slowGets, slowPause, stop)
		took := srWaitEvicted(t, e.set, evictedBefore, 20*time.Second)
		n, closed, how := srDrain(slow, 5*time.Second)
		time.Sleep(200 * time.Millisecond) // the neighbours see the clean-up too
		close(stop)
		sent := <-sentc
		nb.finish(t)
		cg.finish(t)
		dg.finish(t)
		memDesc := mem.check(t, limit)

		if !closed {
			t.Errorf("attempt %d: slow reader's connection still open 5s after its eviction (read %d bytes, %v)", attempt, n, how)
		}
		if all := int64(sent) * valueSize; n >= all {
			t.Errorf("attempt %d: slow reader received all %d bytes of its %d replies: not evicted", attempt, n, sent)
		}
		srEvictedOnce(t, e, lg, slowAddr, evictedBefore)

		base, nBase := nb.pct(srPhaseBase, 99)
		during, nDuring := nb.pct(srPhaseDuring, 99)
		cBase, _ := cg.pct(srPhaseBase, 99)
		cDuring, _ := cg.pct(srPhaseDuring, 99)
		dBase, _ := dg.pct(srPhaseBase, 99)
		dDuring, _ := dg.pct(srPhaseDuring, 99)
		machine := max(cDuring-cBase, dDuring-dBase, 0)
		bound := srBound(base) + machine
		t.Logf("attempt %d: evicted %v after the first GET, %d GETs written, %d bytes received before the close (%v); %s",
			attempt, took.Round(time.Millisecond), sent, n, how, memDesc)
		t.Logf("attempt %d: neighbours' p99 %v (%d requests) without, %v (%d) with the slow reader (ratio %.2f); "+
			"control group %v -> %v; direct group %v -> %v; bound %v",
			attempt, base, nBase, during, nDuring, float64(during)/float64(base), cBase, cDuring, dBase, dDuring, bound)
		if sharedMode() {
			// On a shared upstream connection the neighbours' requests
			// queue behind the slow reader's 1 MiB replies still in
			// flight (until it is evicted, and its in-flight replies are
			// drained): head-of-line blocking, as in TestF02SlowReaderMemory
			// and documented in docs/shared.md. Memory, eviction and replies are
			// still checked; the latencies are not compared, so their
			// sample counts do not matter either. (This bound held here
			// until the control group stopped rising with the test's own
			// garbage: Set.Counters.)
			t.Logf("shared upstream connections: neighbours' p99 not bounded (head-of-line blocking behind the slow reader)")
			break
		}
		if redistest.RaceEnabled() {
			// Under -race every byte copied (1 MiB per reply, into and
			// out of gnet's buffers) also updates the detector's shadow
			// memory on the loop: it is the detector's cost the
			// neighbours would wait for, not the proxy's. .ci/test runs
			// this test again without -race, where the bound applies.
			t.Logf("-race: neighbours' p99 not bounded (the race detector's per-byte cost is on the loop); the run without -race bounds it")
			break
		}
		if nBase < minBase || nDuring < 200 {
			// The slow reader was evicted before the neighbours sent
			// enough requests: a fresh attempt, then a failure.
			if attempt == attempts {
				t.Fatalf("attempt %d: too few neighbour requests to compare (%d, %d)", attempt, nBase, nDuring)
			}
			t.Logf("attempt %d: too few neighbour requests to compare (%d, %d); retrying", attempt, nBase, nDuring)
			continue
		}
		if during <= bound {
			break
		}
		if attempt == attempts {
			t.Errorf("neighbours' p99 %v next to the slow reader, %v without (control group %v -> %v, direct group %v -> %v): over max(2x, +2ms) + the larger rise = %v in %d attempts",
				during, base, cBase, cDuring, dBase, dDuring, bound, attempts)
		} else {
			t.Logf("attempt %d: p99 over the bound; retrying", attempt)
		}
	}

	after := e.set.Counters()
	if got := after.ClientsEvictedOutputLimit - before.ClientsEvictedOutputLimit; got != int64(runs) {
		t.Errorf("output-limit evictions %d over %d runs", got, runs)
	}
	ev := srEvictions(t, e.set)
	if ev["output_limit"] != float64(runs) || ev["query_limit"] != 0 || ev["other"] != 0 {
		t.Errorf("respmeter_client_evictions_total = %v, want output_limit=%d and no other", ev, runs)
	}
	if lost := after.UpstreamLost - before.UpstreamLost; lost != 0 {
		t.Errorf("UpstreamLost went up by %d: an eviction is not a lost upstream", lost)
	}
	if n := ctl.set.Counters(); n.ClientsEvictedOutputLimit+n.ClientsEvictedQueryLimit+n.ClientsEvictedOther != 0 {
		t.Errorf("the control proxy evicted clients: %+v", n)
	}
	e.healthy(t)
}

// TestF02SlowReaderMemory is case F-02 with data of its own. X, with a
// 4 KiB receive buffer, pipelines 5,000 "GET big:f02" in one write and
// reads nothing; meanwhile Y sends PING every 10 ms and 80 clients each
// send bursts of 200 pipelined "SET f02:<client>:<i> <100 bytes>". X must
// be stopped: either disconnected for its output (counted under
// reason=output_limit and logged once with that reason) or held with its
// connection open (backpressure); the proxy's memory must stay under the
// output limit + 64 MiB; every burst must be answered in full; Y's latency
// must stay at its baseline.
//
// The value is 64 KiB, not the case's 1 MiB: 5,000 replies of 1 MiB make
// redis-server itself build 5 GiB of replies, stalling every client of the
// engine for tens of seconds on a 2-core machine (measured: 28 s), with or
// without a proxy. 5,000 x 64 KiB is 312 MiB, still more than twice the
// output limit. Even so, the engine answers nobody while it builds a 16 KiB
// read's worth of X's replies (about 600 of them; measured: a direct
// PING waited up to 127 ms). So "Y's baseline" during X is what the engine
// itself gives a client at that moment: Y', a second PING client on the
// same schedule, talks to the engine directly. Y's p99 may exceed srBound
// of its own baseline by what the p99 of Y' rose by, plus what the p99 of
// Z rose by: a third PING client, on a second proxy and engine, measuring
// the load of the shared 2-core machine (as the control group of
// TestSlowReaderEvictedNeighboursKeepLatency does). A proxy that stalls
// its event loop on X (a blocking write, a queue that grows by copying)
// adds its stall on top and fails. The latency comparison is retried up to
// 3 times with a fresh X and fresh baselines; the other checks hold on
// every attempt.
func TestF02SlowReaderMemory(t *testing.T) {
	redistest.VerifyNoLeaks(t)
	const (
		valueSize    = 64 << 10
		burstClients = 80
		burstLen     = 200
		burstEvery   = 2 * time.Second
		ping         = 10 * time.Millisecond
		baseFor      = 2 * time.Second
		duringFor    = 2500 * time.Millisecond // at least, from X's write
		holdFor      = 10 * time.Second
		attempts     = 3
	)
	e, lg := srSetup(t, "big:f02", valueSize)
	ctl, _ := srSetup(t, "", 0)
	limit := int64(proxy.DefaultClientOutputLimit)

	// The burst clients, for the whole test: a burst, all 200 replies
	// checked, a pause, again.
	val := strings.Repeat("v", 100)
	want := []byte(strings.Repeat("+OK\r\n", burstLen))
	var (
		bwg     sync.WaitGroup
		bstop   = make(chan struct{})
		bmu     sync.Mutex
		berrs   []string
		bursts  atomic.Int64 // answered in full
		duringX atomic.Bool  // an X has written its GETs
		burstsX atomic.Int64 // of bursts, those sent after that
	)
	stopBursts := func() {
		close(bstop)
		bwg.Wait()
		for _, s := range berrs {
			t.Error(s)
		}
	}
	for ci := 0; ci < burstClients; ci++ {
		c, err := redistest.DialConn(e.paddr, 2*time.Second)
		if err != nil {
			stopBursts()
			t.Fatal(err)
		}
		var req []byte
		for i := 0; i < burstLen; i++ {
			req = append(req, respCmd("SET", fmt.Sprintf("f02:%d:%d", ci, i), val)...)
		}
		bwg.Add(1)
		go func() {
			defer bwg.Done()
			defer c.Close()
			// One burst per client every burstEvery, the clients spread
			// over it: 8,000 SETs/s in all, a load a 2-core machine
			// carries under -race with Y's baseline intact.
			pause := burstEvery * time.Duration(ci) / burstClients
			for {
				select {
				case <-bstop:
					return
				case <-time.After(pause):
				}
				pause = burstEvery
				afterX := duringX.Load()
				err := c.Write(req)
				var got []byte
				if err == nil {
					got, err = c.ReadN(len(want), 10*time.Second)
				}
				if err != nil || !bytes.Equal(got, want) {
					bmu.Lock()
					berrs = append(berrs, fmt.Sprintf("burst client %d: got %q (err %v)", ci, redistest.Trunc(got), err))
					bmu.Unlock()
					return
				}
				bursts.Add(1)
				if afterX {
					burstsX.Add(1)
				}
			}
		}()
	}
	time.Sleep(burstEvery) // warm-up: every burst client has sent one burst

	// The latency comparison is retried (fresh X, fresh baselines) up to
	// attempts times; the other checks hold on every attempt.
	evictions := 0 // of the Xs
	for attempt := 1; attempt <= attempts; attempt++ {
		// Y through the proxy, Y' directly, Z through a second proxy to
		// a second engine (the machine's own load).
		var ys [3]*srLatency
		for i, addr := range []string{e.paddr, e.srv.Addr(), ctl.paddr} {
			c, err := redistest.DialConn(addr, 2*time.Second)
			if err != nil {
				stopBursts()
				t.Fatal(err)
			}
			y := &srLatency{stop: make(chan struct{})}
			y.wg.Add(1)
			go func() {
				defer y.wg.Done()
				defer c.Close()
				y.run(c, ping, time.Now().Add(ping/3*time.Duration(i)), func(int) ([]byte, string) {
					return respCmd("PING"), "+PONG\r\n"
				}, []string{"Y", "Y'", "Z"}[i])
			}()
			ys[i] = y
		}
		setPhase := func(p int32) {
			for _, y := range ys {
				y.phase.Store(p)
			}
		}
		time.Sleep(300 * time.Millisecond)
		runtime.GC()
		debug.FreeOSMemory()
		setPhase(srPhaseBase)
		time.Sleep(baseFor)

		mem := srStartMemProbe(t)
		evictedBefore := e.set.Counters().ClientsEvictedOutputLimit
		logBefore := lg.count(`msg="client evicted"`)
		x := srDialSlow(t, e.paddr)
		xAddr := x.LocalAddr().String()
		setPhase(srPhaseDuring)
		duringX.Store(true)
		wrote := time.Now()
		sent := <-srSlowWriter(x, "big:f02", srGets, srGets, 0, nil)
		evicted := redistest.Await(holdFor-time.Since(wrote), 2*time.Millisecond, func() error {
			if e.set.Counters().ClientsEvictedOutputLimit > evictedBefore {
				return nil
			}
			return errors.New("not evicted")
		}) == nil
		took := time.Since(wrote)
		var (
			n      int64
			closed bool
			how    error
		)
		if evicted {
			n, closed, how = srDrain(x, 5*time.Second)
		} else {
			// Held, not evicted: the connection must still be open.
			n, closed, how = srDrain(x, 100*time.Millisecond)
		}
		time.Sleep(max(300*time.Millisecond, duringFor-time.Since(wrote)))
		for _, y := range ys {
			y.finish(t)
		}
		_ = x.Close()
		memDesc := mem.check(t, limit)

		if sent != srGets {
			t.Errorf("attempt %d: X wrote %d GETs, want all %d in one write", attempt, sent, srGets)
		}
		switch {
		case evicted:
			evictions++
			if !closed {
				t.Errorf("attempt %d: X's connection still open 5s after its eviction (read %d bytes, %v)", attempt, n, how)
			}
			if n >= srGets*valueSize {
				t.Errorf("attempt %d: X received all %d bytes: not evicted", attempt, n)
			}
			srEvictedOnce(t, e, lg, xAddr, evictedBefore)
		case closed:
			t.Errorf("attempt %d: X's connection was closed (%v, %d bytes read) without an output-limit eviction being counted; log:\n%s",
				attempt, how, n, lg.String())
		default:
			t.Logf("attempt %d: X not evicted within %v but held with its connection open (backpressure)", attempt, holdFor)
		}
		if got := lg.count(`msg="client evicted"`) - logBefore; got > 1 {
			t.Errorf("attempt %d: %d 'client evicted' log lines, want at most 1 (X's); log:\n%s", attempt, got, lg.String())
		}

		yBase, nYBase := ys[0].pct(srPhaseBase, 99)
		yDuring, nYDuring := ys[0].pct(srPhaseDuring, 99)
		dBase, _ := ys[1].pct(srPhaseBase, 99)
		dDuring, nDDuring := ys[1].pct(srPhaseDuring, 99)
		zBase, _ := ys[2].pct(srPhaseBase, 99)
		zDuring, _ := ys[2].pct(srPhaseDuring, 99)
		engine := max(dDuring-dBase, 0)
		machine := max(zDuring-zBase, 0)
		bound := srBound(yBase) + engine + machine
		t.Logf("attempt %d: X: %d GETs of %d KiB in one write; evicted=%v after %v; %d bytes received before the close (%v); %s",
			attempt, sent, valueSize>>10, evicted, took.Round(time.Millisecond), n, how, memDesc)
		t.Logf("attempt %d: Y (proxy) PING p99 %v (%d) before X, %v (%d) during; Y' (direct) %v -> %v (%d); Z (control) %v -> %v; bound %v",
			attempt, yBase, nYBase, yDuring, nYDuring, dBase, dDuring, nDDuring, zBase, zDuring, bound)
		if nYBase < 150 || nYDuring < 50 {
			// A busy machine answered too few PINGs in a phase (X is
			// evicted when it is, so the phase cannot simply run longer):
			// measure again rather than pass or fail on too few samples.
			if attempt < attempts {
				t.Logf("attempt %d: too few PINGs to compare (%d before, %d during); measuring again", attempt, nYBase, nYDuring)
				continue
			}
			stopBursts()
			t.Fatalf("too few PINGs to compare in %d attempts (last: %d before, %d during)", attempts, nYBase, nYDuring)
		}
		if yDuring <= bound {
			break
		}
		if sharedMode() {
			// On shared upstream connections Y's PINGs wait behind X's
			// replies on the same connection until X is evicted:
			// head-of-line blocking, documented in docs/shared.md
			// (known limits). Memory, eviction and
			// correctness are still checked.
			t.Logf("shared upstream connections: Y's p99 not bounded (head-of-line blocking behind X)")
			break
		}
		if attempt == attempts {
			t.Errorf("Y's PING p99 through the proxy rose from %v to %v while X's replies piled up; the engine's own rise (Y', direct) was %v, the machine's (Z, control) %v; want <= %v (in %d attempts)",
				yBase, yDuring, engine, machine, bound, attempts)
		} else {
			t.Logf("attempt %d: p99 over the bound; retrying", attempt)
		}
	}
	stopBursts()
	t.Logf("%d bursts of %d SETs answered, %d of them sent after an X's write", bursts.Load(), burstLen, burstsX.Load())
	if burstsX.Load() < burstClients {
		t.Errorf("%d bursts sent after X's write were answered, want at least one per client (%d)", burstsX.Load(), burstClients)
	}
	if ev := srEvictions(t, e.set); ev["output_limit"] != float64(evictions) || ev["query_limit"] != 0 || ev["other"] != 0 {
		t.Errorf("respmeter_client_evictions_total = %v, want output_limit=%d (one per evicted X) and no other", ev, evictions)
	}
	e.healthy(t)
}
