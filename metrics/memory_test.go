package metrics_test

import (
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/respmeter/respmeter/internal/heaptest"
	"github.com/respmeter/respmeter/metrics"
	"github.com/respmeter/respmeter/routing/command"
)

// timedPhases is the number of phases a timed command records: all but
// injected, which only commands a fault injection rule delayed have.
const timedPhases = int(metrics.NumPhases) - 1

// memLoops and memShards are the shape of the memory workload: the issue's
// "2 loops (and 3 shards routed)".
const (
	memLoops  = 2
	memShards = 3
)

// memWorkload records, on one loop, timings for every command of the
// built-in table (routing/command.Names) with the spread of a proxy in front
// of a local engine: totals around 100 µs with a log-normal body (σ = 0.6)
// and one command in 500 in a tail up to ~50 ms; upstream about 80% of it,
// service most of upstream; plus think times, TCP RTTs and, when routed,
// the shard phases and upstream batch sizes. It is deterministic per seed.
type memWorkload struct {
	rng    *rand.Rand
	shards []int // shard indexes; empty when not routed
}

func newMemWorkload(s *metrics.Set, seed uint64, shards int) *memWorkload {
	w := &memWorkload{rng: rand.New(rand.NewPCG(seed, 16))}
	for i := range shards {
		w.shards = append(w.shards, s.Shard(fmt.Sprintf("127.0.0.1:%d", 7001+i)))
	}
	return w
}

// latency returns one total duration of the workload's distribution.
func (w *memWorkload) latency() time.Duration {
	us := 100 * math.Exp(0.6*w.rng.NormFloat64())
	if w.rng.IntN(500) == 0 {
		us *= 10 + 490*w.rng.Float64() // tail: 1 ms .. 50 ms
	}
	return time.Duration(us * float64(time.Microsecond))
}

// round records perCmd timed commands for each command ID of the built-in
// table on l, under one lock per command (a read batch).
func (w *memWorkload) round(l *metrics.Loop, perCmd int) { w.roundN(l, command.NumIDs(), perCmd) }

// roundN is round for command IDs 0 .. ids-1.
func (w *memWorkload) roundN(l *metrics.Loop, ids, perCmd int) {
	for id := range ids {
		l.Lock()
		for range perCmd {
			total := w.latency()
			up := total * time.Duration(70+w.rng.IntN(25)) / 100
			svc := up * time.Duration(80+w.rng.IntN(21)) / 100
			l.ObserveLocked(id, total, up, svc, w.rng.IntN(100) == 0)
			l.ThinkLocked(w.latency() / 2)
			if len(w.shards) > 0 {
				sh := w.shards[w.rng.IntN(len(w.shards))]
				l.ShardObserveLocked(sh, total, up, svc, false)
				l.ShardBatchLocked(sh, 1+w.rng.IntN(16))
			}
		}
		l.TCPRTTLocked(false, 50*time.Microsecond+w.latency()/10)
		l.TCPRTTLocked(true, 30*time.Microsecond+w.latency()/10)
		l.Unlock()
	}
}

// memScraper reads a Set the three ways an operator does: a Prometheus
// Gather (/metrics), /stats and the table.
type memScraper struct {
	s     *metrics.Set
	reg   *prometheus.Registry
	stats http.Handler
	req   *http.Request
}

func newMemScraper(tb testing.TB, s *metrics.Set) *memScraper {
	tb.Helper()
	reg := prometheus.NewRegistry()
	if err := s.Register(reg); err != nil {
		tb.Fatal(err)
	}
	return &memScraper{s: s, reg: reg, stats: s.StatsHandler(), req: httptest.NewRequest(http.MethodGet, "/stats", nil)}
}

// scrape gathers, serves /stats and writes the table, discarding the output.
func (m *memScraper) scrape(tb testing.TB) {
	if _, err := m.reg.Gather(); err != nil {
		tb.Fatal(err)
	}
	m.stats.ServeHTTP(discardResponse{}, m.req)
	if err := m.s.WriteTable(io.Discard); err != nil {
		tb.Fatal(err)
	}
}

// discardResponse is an http.ResponseWriter that keeps nothing, so that a
// scrape's cost is not a recorder's buffer.
type discardResponse struct{}

func (discardResponse) Header() http.Header         { return http.Header{} }
func (discardResponse) Write(p []byte) (int, error) { return len(p), nil }
func (discardResponse) WriteHeader(int)             {}

// BenchmarkScrapeMemory drives every command name of the built-in table on
// 2 loops (sub-benchmark shards=3: also routed to 3 shards), then scrapes it
// (Prometheus Gather + /stats + table) once per iteration, with 20 more
// commands per name and loop recorded between scrapes. It reports:
//
//   - live-MiB: the live heap the Set holds after the last scrape (after a
//     GC, less the heap before the Set was made);
//   - B/series: live-MiB over the distributions that hold values: 5 phases
//     per command name (and per shard), plus think time and TCP RTTs;
//   - scrape-B/op: bytes allocated by one scrape (all three readers),
//     garbage once it returns.
//
// Run it with a fixed count of scrapes, as bench/memory.sh does:
//
//	go test -run '^$' -bench BenchmarkScrapeMemory -benchtime 200x ./metrics/
func BenchmarkScrapeMemory(b *testing.B) {
	for _, shards := range []int{0, memShards} {
		b.Run(fmt.Sprintf("loops=%d/shards=%d", memLoops, shards), func(b *testing.B) {
			base := heaptest.Live()
			s := metrics.NewSet(memLoops, command.Names())
			ws := make([]*memWorkload, memLoops)
			for li := range ws {
				ws[li] = newMemWorkload(s, uint64(li), shards)
				ws[li].round(s.Loop(li), 200) // warm up: every distribution holds values
			}
			m := newMemScraper(b, s)
			m.scrape(b)
			var scrapeBytes uint64
			var ms runtime.MemStats
			b.ResetTimer()
			for b.Loop() {
				for li, w := range ws {
					w.round(s.Loop(li), 20)
				}
				runtime.ReadMemStats(&ms)
				before := ms.TotalAlloc
				m.scrape(b)
				runtime.ReadMemStats(&ms)
				scrapeBytes += ms.TotalAlloc - before
			}
			b.StopTimer()
			live := float64(heaptest.Live() - base)
			series := float64(command.NumIDs()*timedPhases + shards*timedPhases + 3)
			b.ReportMetric(live/(1<<20), "live-MiB")
			b.ReportMetric(live/series, "B/series")
			b.ReportMetric(float64(scrapeBytes)/float64(b.N), "scrape-B/op")
			runtime.KeepAlive(s)
		})
	}
}

// TestScrapeHeapBounded scrapes a Set 200 times (Prometheus Gather +
// /stats + table, as an operator scraping every second would) while one
// goroutine per loop records into it, and checks that the scrapes leave
// nothing behind: the live heap then is at most 1 MiB above that of a Set
// given the same recordings (same seeds, same rounds) and scraped once, at
// the end. Recording alone fills the histograms' buckets, so it is the
// comparison, not a heap that stays flat while values still arrive, that
// isolates what the scrapes keep. It also bounds the heap itself: at most
// 16 KiB per distribution, all loops together (a dense 1 µs .. 1 h
// HdrHistogram is ~188 KB, and there were 5 per distribution).
//
// It uses the first memTestNames command names of the built-in table on 2
// loops and 3 shards, so that 200 scrapes stay quick under -race;
// BenchmarkScrapeMemory covers every name.
func TestScrapeHeapBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: 200 scrapes")
	}
	const memTestNames, rounds, scrapes = 64, 100, 200
	names := command.Names()[:memTestNames]
	// build records rounds rounds per loop, one goroutine per loop, while
	// the caller's goroutine scrapes `scrapes` times (at least), and
	// returns the live heap it holds after a final scrape.
	build := func(scrapes int) uint64 {
		base := heaptest.Live()
		s := metrics.NewSet(memLoops, names)
		m := newMemScraper(t, s)
		var scraped atomic.Int64 // for the recorders' pace
		var done atomic.Int32
		var wg sync.WaitGroup
		for li := range memLoops {
			w := newMemWorkload(s, uint64(li), memShards)
			wg.Go(func() {
				defer done.Add(1)
				for r := range rounds {
					w.roundN(s.Loop(li), len(names), 10)
					if scrapes > 0 {
						// Spread the rounds over the scrapes, as
						// an event loop's batches spread over the
						// seconds between two scrapes.
						for done.Load() == 0 && int(scraped.Load()) < (r+1)*scrapes/rounds {
							time.Sleep(50 * time.Microsecond)
						}
					}
				}
			})
		}
		for ; int(scraped.Load()) < scrapes || done.Load() < memLoops; scraped.Add(1) {
			m.scrape(t)
		}
		wg.Wait()
		m.scrape(t)
		live := heaptest.Live() - base
		runtime.KeepAlive(s)
		return live
	}
	once := build(0)
	many := build(scrapes)
	series := uint64(memTestNames*timedPhases + memShards*timedPhases + 3)
	t.Logf("live heap: %d B scraped once, %d B scraped %d times under load (%d B per distribution)", once, many, scrapes, many/series)
	if limit := series * 16 << 10; many > limit {
		t.Errorf("live heap %d B after %d scrapes, want <= %d (16 KiB per distribution)", many, scrapes, limit)
	}
	if many > once+1<<20 {
		t.Errorf("live heap %d B after %d scrapes under load, %d B scraped once: the scrapes kept %d B, want at most 1 MiB",
			many, scrapes, once, many-once)
	}
}
