package metrics_test

import (
	"bytes"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/respmeter/respmeter/internal/goldenfile"

	"github.com/respmeter/respmeter/metrics"
)

// Command IDs of testNames.
const (
	cmdOther = iota
	cmdGet
	cmdSet
	cmdPing
)

var testNames = []string{"other", "get", "set", "ping"}

const us = time.Microsecond

// op is one recording call on a loop.
type op struct {
	loop            int
	cmd             int
	total, upstream time.Duration
	isErr           bool
	untimed         bool // CountLocked instead of ObserveLocked
}

// record applies ops, one lock per op.
func record(s *metrics.Set, ops ...op) {
	for _, o := range ops {
		l := s.Loop(o.loop)
		l.Lock()
		if o.untimed {
			l.CountLocked(o.cmd, o.isErr)
		} else {
			l.ObserveLocked(o.cmd, o.total, o.upstream, o.upstream, o.isErr)
		}
		l.Unlock()
	}
}

// span returns timed ops on loop for cmd with totals from..to µs step 1 and
// no upstream time.
func span(loop, cmd, from, to int) []op {
	var ops []op
	for v := from; v <= to; v++ {
		ops = append(ops, op{loop: loop, cmd: cmd, total: time.Duration(v) * us})
	}
	return ops
}

// golden compares got with testdata/name (-update rewrites it).
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	goldenfile.Check(t, filepath.Join("testdata", name), got)
}

func TestPhaseString(t *testing.T) {
	for _, tc := range []struct {
		p    metrics.Phase
		want string
	}{
		{metrics.PhaseTotal, "total"},
		{metrics.PhaseUpstream, "upstream"},
		{metrics.PhaseProxy, "proxy"},
		{metrics.PhaseService, "service"},
		{metrics.PhaseQueue, "queue"},
		{metrics.PhaseInjected, "injected"},
		{metrics.PhaseTLS, "tls"},
		{metrics.NumPhases, "Phase(7)"},
	} {
		if got := tc.p.String(); got != tc.want {
			t.Errorf("Phase(%d).String() = %q, want %q", uint8(tc.p), got, tc.want)
		}
	}
}

// check is one expected value in a Snapshot. pct < 0 means Max, pct == 0
// means Mean.
type check struct {
	cmd   int
	phase metrics.Phase
	pct   float64
	want  time.Duration
}

func TestObserveAndMerge(t *testing.T) {
	type counts struct{ count, errors, timed int64 }
	tests := []struct {
		name   string
		ops    []op
		counts map[int]counts // by command ID; others must be zero
		checks []check
	}{
		{
			name:   "one command one loop",
			ops:    []op{{loop: 0, cmd: cmdGet, total: 100 * us, upstream: 60 * us}},
			counts: map[int]counts{cmdGet: {1, 0, 1}},
			checks: []check{
				{cmdGet, metrics.PhaseTotal, 50, 100 * us},
				{cmdGet, metrics.PhaseUpstream, 50, 60 * us},
				{cmdGet, metrics.PhaseProxy, 50, 40 * us},
				{cmdGet, metrics.PhaseProxy, -1, 40 * us},
			},
		},
		{
			name:   "two loops merge",
			ops:    append(span(0, cmdGet, 1, 100), span(1, cmdGet, 101, 200)...),
			counts: map[int]counts{cmdGet: {200, 0, 200}},
			checks: []check{
				{cmdGet, metrics.PhaseTotal, 50, 100 * us},
				{cmdGet, metrics.PhaseTotal, 90, 180 * us},
				{cmdGet, metrics.PhaseTotal, 99, 198 * us},
				{cmdGet, metrics.PhaseTotal, 100, 200 * us},
				{cmdGet, metrics.PhaseTotal, -1, 200 * us},
				{cmdGet, metrics.PhaseTotal, 0, 100500 * time.Nanosecond}, // exact mean
				{cmdGet, metrics.PhaseUpstream, -1, 1 * us},               // 0 recorded as 1 µs
			},
		},
		{
			name: "two loops two commands",
			ops: append(append(span(0, cmdGet, 1, 10), span(1, cmdSet, 1001, 1010)...),
				op{loop: 1, cmd: cmdGet, total: 11 * us}),
			counts: map[int]counts{cmdGet: {11, 0, 11}, cmdSet: {10, 0, 10}},
			checks: []check{
				{cmdGet, metrics.PhaseTotal, -1, 11 * us},
				{cmdGet, metrics.PhaseTotal, 50, 6 * us},
				{cmdSet, metrics.PhaseTotal, 50, 1005 * us},
				{cmdSet, metrics.PhaseProxy, -1, 1010 * us},
			},
		},
		{
			name: "errors and untimed",
			ops: []op{
				{loop: 0, cmd: cmdSet, total: 5 * us, isErr: true},
				{loop: 1, cmd: cmdSet, isErr: true, untimed: true},
				{loop: 1, cmd: cmdPing, untimed: true},
			},
			counts: map[int]counts{cmdSet: {2, 2, 1}, cmdPing: {1, 0, 0}},
		},
		{
			name: "out of range IDs count as other",
			ops: []op{
				{loop: 0, cmd: 99, total: 3 * us},
				{loop: 1, cmd: -1, untimed: true},
			},
			counts: map[int]counts{cmdOther: {2, 0, 1}},
		},
		{
			name: "clamping",
			ops: []op{
				{loop: 0, cmd: cmdGet, total: -5 * us, upstream: -1},               // negative: 0, recorded as 1 µs
				{loop: 0, cmd: cmdGet, total: 500 * time.Nanosecond},               // below 1 µs
				{loop: 0, cmd: cmdGet, total: 1500 * time.Nanosecond},              // rounded up
				{loop: 1, cmd: cmdSet, total: 10 * us, upstream: 20 * us},          // upstream > total: proxy 0
				{loop: 1, cmd: cmdPing, total: 2 * time.Hour, upstream: time.Hour}, // above 1 h
			},
			counts: map[int]counts{cmdGet: {3, 0, 3}, cmdSet: {1, 0, 1}, cmdPing: {1, 0, 1}},
			checks: []check{
				{cmdGet, metrics.PhaseTotal, 1, 1 * us},
				{cmdGet, metrics.PhaseTotal, -1, 2 * us},
				{cmdGet, metrics.PhaseTotal, 0, 2000 * time.Nanosecond / 3}, // sum 2 µs exact, negative as 0
				{cmdSet, metrics.PhaseProxy, -1, 1 * us},
				{cmdSet, metrics.PhaseUpstream, -1, 20 * us},
				{cmdPing, metrics.PhaseTotal, 0, 2 * time.Hour}, // the mean stays exact
				{cmdPing, metrics.PhaseProxy, 0, time.Hour},
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := metrics.NewSet(2, testNames)
			record(s, tc.ops...)
			sn := s.Snapshot()
			if len(sn.Commands) != len(testNames) {
				t.Fatalf("len(Commands) = %d, want %d", len(sn.Commands), len(testNames))
			}
			for id, c := range sn.Commands {
				if c.Name != testNames[id] {
					t.Errorf("Commands[%d].Name = %q, want %q", id, c.Name, testNames[id])
				}
				want := tc.counts[id]
				got := counts{c.Count, c.Errors, c.Phases[metrics.PhaseTotal].Count()}
				if got != want {
					t.Errorf("%s: (count, errors, timed) = %v, want %v", c.Name, got, want)
				}
				for p, d := range c.Phases {
					if metrics.Phase(p) == metrics.PhaseInjected || metrics.Phase(p) == metrics.PhaseTLS {
						continue // only for injected commands and TLS clients': TestObserveInjected, TestObserveTLS
					}
					if d.Count() != want.timed {
						t.Errorf("%s %s: count %d, want %d", c.Name, metrics.Phase(p), d.Count(), want.timed)
					}
				}
				if c.Observed() != (want.timed > 0) {
					t.Errorf("%s: Observed() = %v", c.Name, c.Observed())
				}
			}
			for _, ck := range tc.checks {
				d := sn.Commands[ck.cmd].Phases[ck.phase]
				var got time.Duration
				switch {
				case ck.pct < 0:
					got = d.Max()
				case ck.pct == 0:
					got = d.Mean()
				default:
					got = d.Percentile(ck.pct)
				}
				if got != ck.want {
					t.Errorf("%s %s pct=%g: got %v, want %v", testNames[ck.cmd], ck.phase, ck.pct, got, ck.want)
				}
			}
		})
	}
}

func TestHistogramsAboveTwoMilliseconds(t *testing.T) {
	// Above 2048 µs HdrHistogram buckets widen; values come back as the
	// highest equivalent value at 3 significant digits.
	s := metrics.NewSet(1, testNames)
	record(s, op{cmd: cmdGet, total: 2 * time.Second})
	got := s.Snapshot().Commands[cmdGet].Phases[metrics.PhaseTotal].Max()
	if want := 2000895 * us; got != want {
		t.Errorf("Max() = %v, want %v", got, want)
	}
}

func TestSnapshotIsCumulativeAndOwned(t *testing.T) {
	s := metrics.NewSet(2, testNames)
	record(s, span(0, cmdGet, 1, 50)...)
	first := s.Snapshot()
	record(s, span(1, cmdGet, 51, 100)...)
	record(s, op{loop: 0, cmd: cmdGet, total: 101 * us})
	s.Loop(0).Lock()
	s.Loop(0).ThinkLocked(3 * time.Millisecond)
	s.Loop(0).Unlock()
	second := s.Snapshot()
	third := s.Snapshot() // nothing new: still cumulative

	for _, tc := range []struct {
		name       string
		sn         *metrics.Snapshot
		count      int64
		max, think time.Duration
	}{
		{"first", first, 50, 50 * us, 0},
		{"second", second, 101, 101 * us, 3001 * us}, // 3 ms at 3 significant digits
		{"third", third, 101, 101 * us, 3001 * us},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := tc.sn.Commands[cmdGet]
			d := c.Phases[metrics.PhaseTotal]
			if c.Count != tc.count || d.Count() != tc.count || d.Max() != tc.max {
				t.Errorf("count %d, timed %d, max %v; want %d, %d, %v", c.Count, d.Count(), d.Max(), tc.count, tc.count, tc.max)
			}
			if got := tc.sn.Think.Max(); got != tc.think {
				t.Errorf("think max %v, want %v", got, tc.think)
			}
		})
	}
}

func TestTotals(t *testing.T) {
	s := metrics.NewSet(2, testNames)
	record(s, span(0, cmdGet, 1, 100)...)
	record(s, span(1, cmdSet, 101, 200)...)
	record(s, op{loop: 1, cmd: cmdPing, isErr: true, untimed: true})
	tot := s.Snapshot().Totals()
	if tot.Count != 201 || tot.Errors != 1 {
		t.Errorf("count %d errors %d, want 201 1", tot.Count, tot.Errors)
	}
	d := tot.Phases[metrics.PhaseTotal]
	if d.Count() != 200 || d.Percentile(50) != 100*us || d.Max() != 200*us {
		t.Errorf("timed %d p50 %v max %v, want 200 100µs 200µs", d.Count(), d.Percentile(50), d.Max())
	}
}

func TestCounters(t *testing.T) {
	s := metrics.NewSet(2, nil)
	for range 3 {
		s.ClientOpened()
	}
	s.ClientClosed()
	s.UpstreamOpened()
	s.UpstreamOpened()
	s.UpstreamClosed()
	s.UpstreamLost()
	s.UpstreamDialFailed()
	s.UpstreamDialFailed()
	s.ProtocolError()
	// Byte counters are per loop; Counters sums them.
	s.Loop(0).AddClientBytes(10, 20)
	s.Loop(1).AddClientBytes(1, 2)
	s.Loop(1).AddUpstreamBytes(200, 0)
	s.Loop(0).AddUpstreamBytes(0, 100)
	s.ClientRejected()
	s.ClientEvicted(metrics.EvictOutputLimit)
	s.ClientEvicted(metrics.EvictQueryLimit)
	s.ClientEvicted(metrics.EvictQueryLimit)
	s.ClientEvicted("raw client junk")
	want := metrics.Counters{
		ClientConns: 2, ClientConnsTotal: 3, ClientsRejected: 1,
		ClientsEvictedOutputLimit: 1, ClientsEvictedQueryLimit: 2, ClientsEvictedOther: 1, UpstreamConns: 1, UpstreamDialErrors: 2,
		UpstreamLost: 1, ProtocolErrors: 1, ClientReadBytes: 11, ClientWrittenBytes: 22,
		UpstreamReadBytes: 200, UpstreamWrittenBytes: 100,
	}
	if got := s.Counters(); got != want {
		t.Errorf("Counters = %+v, want %+v", got, want)
	}
	if got := s.Snapshot().Counters; got != want {
		t.Errorf("Snapshot().Counters = %+v, want %+v", got, want)
	}
	if got := s.Sums().Counters; got != want {
		t.Errorf("Sums().Counters = %+v, want %+v", got, want)
	}
}

func TestNewSet(t *testing.T) {
	s := metrics.NewSet(0, nil)
	if s.Loops() != 1 || len(s.Names()) != 1 || s.Names()[0] != "other" {
		t.Errorf("NewSet(0, nil): %d loops, names %q", s.Loops(), s.Names())
	}
	for _, names := range [][]string{{"other", "get", "get"}, {"other", ""}} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("NewSet(%q) did not panic", names)
				}
			}()
			metrics.NewSet(1, names)
		}()
	}
}

func TestObserveLockedAllocs(t *testing.T) {
	s := metrics.NewSet(1, testNames)
	l := s.Loop(0)
	observe := func() {
		l.Lock()
		l.ObserveLocked(cmdGet, 250*us, 200*us, 200*us, false)
		l.ObserveLocked(cmdSet, 3*time.Millisecond, 2*time.Millisecond, 2*time.Millisecond, true)
		l.CountLocked(cmdPing, false)
		l.ThinkLocked(time.Millisecond)
		l.Unlock()
	}
	observe() // allocates the histograms
	if n := testing.AllocsPerRun(1000, observe); n != 0 {
		t.Errorf("ObserveLocked after warm-up: %v allocs per run, want 0", n)
	}
	// A scrape copies the histograms out and resets them, keeping their
	// capacity; recording into them again allocates nothing either.
	s.Snapshot()
	observe()
	s.Snapshot()
	if n := testing.AllocsPerRun(1000, observe); n != 0 {
		t.Errorf("ObserveLocked after a scrape: %v allocs per run, want 0", n)
	}
}

// TestConcurrentSnapshot runs readers while loops record, until both have
// done a fair amount of work; run it with -race.
func TestConcurrentSnapshot(t *testing.T) {
	const loops, minOps, minReads = 2, 20000, 3
	s := metrics.NewSet(loops, testNames)
	reg := newRegistry(t, s)
	var reads atomic.Int64
	var ops [loops]int64
	var wg sync.WaitGroup
	for li := range loops {
		wg.Go(func() {
			l := s.Loop(li)
			i := 0
			for ; i < minOps || reads.Load() < minReads; i++ {
				if i%100 == 0 { // one lock per batch of 100
					if i > 0 {
						l.Unlock()
					}
					l.Lock()
				}
				l.ObserveLocked(i%len(testNames), time.Duration(i%5000)*us, time.Duration(i%3000)*us, time.Duration(i%3000)*us, i%7 == 0)
				l.ThinkLocked(time.Duration(i%10000) * us)
				l.AddClientBytes(1, 2) // per-loop atomics, read by every Snapshot
			}
			l.Unlock()
			ops[li] = int64(i)
			s.ClientOpened()
		})
	}
	done := make(chan struct{})
	var readers sync.WaitGroup
	readers.Go(func() {
		for {
			select {
			case <-done:
				return
			default:
			}
			sn := s.Snapshot()
			tot := sn.Totals()
			if tot.Count != tot.Phases[metrics.PhaseTotal].Count() {
				t.Errorf("snapshot inconsistent: count %d, timed %d", tot.Count, tot.Phases[metrics.PhaseTotal].Count())
			}
			if _, err := reg.Gather(); err != nil {
				t.Errorf("Gather: %v", err)
			}
			var buf bytes.Buffer
			if err := s.WriteTable(&buf); err != nil {
				t.Errorf("WriteTable: %v", err)
			}
			reads.Add(1)
		}
	})
	wg.Wait()
	close(done)
	readers.Wait()

	want := ops[0] + ops[1]
	sn := s.Snapshot()
	if tot := sn.Totals(); tot.Count != want || tot.Phases[metrics.PhaseProxy].Count() != want {
		t.Errorf("final count %d, proxy timed %d, want %d", tot.Count, tot.Phases[metrics.PhaseProxy].Count(), want)
	}
	if n := sn.Think.Count(); n != want {
		t.Errorf("think count %d, want %d", n, want)
	}
	if n := sn.Counters.ClientConnsTotal; n != loops {
		t.Errorf("clients accepted %d, want %d", n, loops)
	}
	if c := sn.Counters; c.ClientReadBytes != want || c.ClientWrittenBytes != 2*want {
		t.Errorf("client bytes read %d written %d, want %d %d", c.ClientReadBytes, c.ClientWrittenBytes, want, 2*want)
	}
}

// TestServiceQueueAndExclusion checks the pipelining split (queue = upstream
// - service, service clamped into [0, upstream]) and that commands excluded
// from the totals are still recorded under their own name.
func TestServiceQueueAndExclusion(t *testing.T) {
	s := metrics.NewSet(1, testNames)
	s.ExcludeFromTotals(cmdPing)
	l := s.Loop(0)
	l.Lock()
	l.ObserveLocked(cmdGet, 900*us, 800*us, 200*us, false)  // queued 600 µs behind earlier replies
	l.ObserveLocked(cmdGet, 900*us, 800*us, 2000*us, false) // service clamped to upstream: queue 0
	l.ObserveLocked(cmdPing, 30*time.Second, 30*time.Second, 30*time.Second, false)
	l.Unlock()
	sn := s.Snapshot()
	get := sn.Commands[cmdGet]
	if got := get.Phases[metrics.PhaseService].Sum; got != 1000*us {
		t.Errorf("service sum = %v, want 1ms", got)
	}
	if got := get.Phases[metrics.PhaseQueue].Sum; got != 600*us {
		t.Errorf("queue sum = %v, want 600µs", got)
	}
	tot := sn.Totals()
	if tot.Count != 2 || tot.Phases[metrics.PhaseTotal].Max() > time.Millisecond {
		t.Errorf("totals: count %d, max %v; want 2 and <= 1ms (ping excluded)", tot.Count, tot.Phases[metrics.PhaseTotal].Max())
	}
	if sn.Commands[cmdPing].Count != 1 {
		t.Errorf("ping count = %d, want 1 (still recorded under its own name)", sn.Commands[cmdPing].Count)
	}
}

// TestTCPRTT checks that socket RTT samples land by side.
func TestTCPRTT(t *testing.T) {
	s := metrics.NewSet(2, testNames)
	for i, up := range []bool{false, true, true} {
		l := s.Loop(i % 2)
		l.Lock()
		l.TCPRTTLocked(up, time.Duration(50+i)*us)
		l.Unlock()
	}
	sn := s.Snapshot()
	if sn.ClientRTT.Count() != 1 || sn.UpstreamRTT.Count() != 2 {
		t.Fatalf("client %d, upstream %d samples; want 1 and 2", sn.ClientRTT.Count(), sn.UpstreamRTT.Count())
	}
	if got := sn.UpstreamRTT.Max(); got != 52*us {
		t.Errorf("upstream max = %v, want 52µs", got)
	}
}

// TestSumsMatchSnapshot: the cheap Sums agree with a full Snapshot on
// counts, sums, means and totals.
func TestSumsMatchSnapshot(t *testing.T) {
	s := metrics.NewSet(2, testNames)
	s.ExcludeFromTotals(cmdPing)
	for i := 0; i < 100; i++ {
		l := s.Loop(i % 2)
		l.Lock()
		l.ObserveLocked(cmdGet+i%3, time.Duration(100+i)*us, time.Duration(50+i)*us, time.Duration(10+i)*us, i%10 == 0)
		l.ThinkLocked(time.Duration(i) * us)
		l.Unlock()
	}
	sums, snap := s.Sums(), s.Snapshot()
	for ci := range snap.Commands {
		for p := range snap.Commands[ci].Phases {
			a, b := sums.Commands[ci].Phases[p], snap.Commands[ci].Phases[p]
			if a.Count() != b.Count() || a.Sum != b.Sum || a.Mean() != b.Mean() {
				t.Errorf("%s/%v: sums (%d, %v) vs snapshot (%d, %v)", snap.Commands[ci].Name, metrics.Phase(p), a.Count(), a.Sum, b.Count(), b.Sum)
			}
		}
	}
	ta, tb := sums.Totals(), snap.Totals()
	if ta.Phases[metrics.PhaseTotal].Count() != tb.Phases[metrics.PhaseTotal].Count() || ta.Phases[metrics.PhaseTotal].Sum != tb.Phases[metrics.PhaseTotal].Sum {
		t.Errorf("totals differ: %+v vs %+v", ta.Phases[metrics.PhaseTotal].Count(), tb.Phases[metrics.PhaseTotal].Count())
	}
	if sums.Think.Count() != 100 || sums.Think.Sum != snap.Think.Sum {
		t.Errorf("think: %d %v vs %v", sums.Think.Count(), sums.Think.Sum, snap.Think.Sum)
	}
}

// TestObserveInjected: a command a fault injection rule delayed has its
// injected phase, taken out of proxy (proxy = total - upstream -
// injected); one it did not touch has none.
func TestObserveInjected(t *testing.T) {
	s := metrics.NewSet(1, testNames)
	l := s.Loop(0)
	l.Lock()
	l.ObserveInjectedLocked(cmdGet, 2300*us, 200*us, 150*us, 2000*us, false)
	l.ObserveLocked(cmdSet, 300*us, 200*us, 150*us, false)
	l.Unlock()
	sn := s.Snapshot()
	get, set := sn.Commands[cmdGet], sn.Commands[cmdSet]
	for _, tc := range []struct {
		what string
		d    metrics.Durations
		want time.Duration
	}{
		{"get total", get.Phases[metrics.PhaseTotal], 2300 * us},
		{"get upstream", get.Phases[metrics.PhaseUpstream], 200 * us},
		{"get injected", get.Phases[metrics.PhaseInjected], 2000 * us},
		{"get proxy", get.Phases[metrics.PhaseProxy], 100 * us},
		{"set proxy", set.Phases[metrics.PhaseProxy], 100 * us},
	} {
		if tc.d.Count() != 1 || tc.d.Sum != tc.want {
			t.Errorf("%s: count %d sum %v, want 1, %v", tc.what, tc.d.Count(), tc.d.Sum, tc.want)
		}
	}
	if n := set.Phases[metrics.PhaseInjected].Count(); n != 0 {
		t.Errorf("set injected: %d observations, want none", n)
	}
}

// TestObserveTLS: a TLS client's command has its crypto time as the tls
// phase, held by its total and proxy (the caller adds it to total); a
// plaintext client's has none, and the table shows the tls block only
// once a TLS client was timed.
func TestObserveTLS(t *testing.T) {
	s := metrics.NewSet(1, testNames)
	l := s.Loop(0)
	l.Lock()
	l.ObserveLocked(cmdSet, 300*us, 200*us, 150*us, false)
	l.Unlock()
	var table strings.Builder
	if err := s.WriteTable(&table); err != nil || strings.Contains(table.String(), "tls") {
		t.Errorf("plaintext only: the table mentions tls (err %v):\n%s", err, table.String())
	}
	l.Lock()
	l.ObserveLocked(cmdGet, 350*us, 200*us, 150*us, false) // 50 µs of it TLS
	l.TLSLocked(cmdGet, 50*us)
	l.Unlock()
	sn := s.Snapshot()
	get, set := sn.Commands[cmdGet], sn.Commands[cmdSet]
	for _, tc := range []struct {
		what string
		d    metrics.Durations
		want time.Duration
	}{
		{"get total", get.Phases[metrics.PhaseTotal], 350 * us},
		{"get proxy", get.Phases[metrics.PhaseProxy], 150 * us},
		{"get tls", get.Phases[metrics.PhaseTLS], 50 * us},
	} {
		if tc.d.Count() != 1 || tc.d.Sum != tc.want {
			t.Errorf("%s: count %d sum %v, want 1, %v", tc.what, tc.d.Count(), tc.d.Sum, tc.want)
		}
	}
	if n := set.Phases[metrics.PhaseTLS].Count(); n != 0 {
		t.Errorf("set tls: %d observations, want none", n)
	}
	table.Reset()
	if err := s.WriteTable(&table); err != nil || !strings.Contains(table.String(), "- tls (ms) -") {
		t.Errorf("with a TLS client: no tls block in the table (err %v):\n%s", err, table.String())
	}
}
