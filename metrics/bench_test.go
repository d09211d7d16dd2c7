package metrics_test

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/respmeter/respmeter/metrics"
)

// BenchmarkObserveLocked measures recording one timed command, within a
// batch (lock held) and with a lock per command.
func BenchmarkObserveLocked(b *testing.B) {
	s := metrics.NewSet(1, testNames)
	l := s.Loop(0)
	l.Lock()
	for cmd := range testNames { // warm up: allocate the histograms
		l.ObserveLocked(cmd, time.Millisecond, 800*us, 800*us, false)
	}
	l.Unlock()
	b.Run("batched", func(b *testing.B) {
		b.ReportAllocs()
		l.Lock()
		defer l.Unlock()
		i := 0
		for b.Loop() {
			l.ObserveLocked(i&3, time.Duration(100+i&1023)*us, time.Duration(50+i&511)*us, time.Duration(50+i&511)*us, false)
			i++
		}
	})
	b.Run("lock-per-op", func(b *testing.B) {
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			l.Lock()
			l.ObserveLocked(i&3, time.Duration(100+i&1023)*us, time.Duration(50+i&511)*us, time.Duration(50+i&511)*us, false)
			l.Unlock()
			i++
		}
	})
}

// BenchmarkSnapshot measures merging the loops, with something new recorded
// between rounds as between scrapes: Snapshot (copies the merged histograms)
// and a Prometheus Gather (shares them, builds the buckets).
func BenchmarkSnapshot(b *testing.B) {
	for _, loops := range []int{1, 4} {
		s := metrics.NewSet(loops, testNames)
		for li := range loops {
			l := s.Loop(li)
			l.Lock()
			for i := range 10000 {
				l.ObserveLocked(i%len(testNames), time.Duration(50+i%5000)*us, time.Duration(20+i%4000)*us, time.Duration(20+i%4000)*us, false)
			}
			l.Unlock()
		}
		reg := prometheus.NewRegistry()
		if err := s.Register(reg); err != nil {
			b.Fatal(err)
		}
		for _, read := range []struct {
			name string
			fn   func()
		}{
			{"snapshot", func() { s.Snapshot() }},
			{"gather", func() {
				if _, err := reg.Gather(); err != nil {
					b.Fatal(err)
				}
			}},
		} {
			b.Run(fmt.Sprintf("loops=%d/%s", loops, read.name), func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					l := s.Loop(0)
					l.Lock()
					l.ObserveLocked(cmdGet, time.Millisecond, 900*us, 900*us, false)
					l.Unlock()
					read.fn()
				}
			})
		}
	}
}

// BenchmarkShardObserveLocked measures recording one timed command and its
// batch for a shard, within a batch (lock held).
func BenchmarkShardObserveLocked(b *testing.B) {
	s := metrics.NewSet(1, testNames)
	shards := []int{s.Shard("127.0.0.1:7001"), s.Shard("127.0.0.1:7002"), s.Shard("127.0.0.1:7003")}
	l := s.Loop(0)
	l.Lock()
	defer l.Unlock()
	for _, sh := range shards { // warm up: allocate the histograms
		l.ShardObserveLocked(sh, time.Millisecond, 800*us, 800*us, false)
		l.ShardBatchLocked(sh, 1)
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		sh := shards[i%len(shards)]
		l.ShardObserveLocked(sh, time.Duration(100+i&1023)*us, time.Duration(50+i&511)*us, time.Duration(50+i&511)*us, false)
		l.ShardBatchLocked(sh, 1+i&15)
		i++
	}
}

// scrapeSizeNames returns n command names for BenchmarkScrapeSize: "other"
// and n-1 made-up ones (the size depends on the count, not the spelling).
func scrapeSizeNames(n int) []string {
	names := []string{"other"}
	for i := 1; i < n; i++ {
		names = append(names, fmt.Sprintf("cmd%03d", i))
	}
	return names
}

// BenchmarkScrapeSize measures the /metrics text of a proxy that saw 218
// commands (Redis's own test suite through one proxy, issue 19), each in
// every phase from 1 µs to 100 ms, under the cardinality budgets of Export:
// bytes per scrape and series (b.ReportMetric), and the time to gather and
// encode.
func BenchmarkScrapeSize(b *testing.B) {
	const commands = 218
	s := metrics.NewSet(1, scrapeSizeNames(commands))
	l := s.Loop(0)
	l.Lock()
	for i := range 100 * commands {
		d := time.Duration(1+(i*7919)%100_000) * us
		l.ObserveLocked(i%commands, d, d/2, d/4, false)
	}
	l.Unlock()
	for _, tc := range []struct {
		name string
		ex   metrics.Export
	}{
		{"all", metrics.Export{}},
		{"commands=100", metrics.Export{MaxCommands: 100}},
		{"commands=100,phases=total+upstream+proxy", metrics.Export{MaxCommands: 100,
			Phases: []metrics.Phase{metrics.PhaseTotal, metrics.PhaseUpstream, metrics.PhaseProxy}}},
		{"commands=20,phases=total", metrics.Export{MaxCommands: 20, Phases: []metrics.Phase{metrics.PhaseTotal}}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			reg := prometheus.NewRegistry()
			if err := s.RegisterExport(reg, tc.ex); err != nil {
				b.Fatal(err)
			}
			var text []byte
			for b.Loop() {
				text = exposition(b, reg)
			}
			// Every line is a series but the HELP and TYPE of each family.
			series := bytes.Count(text, []byte("\n")) - 2*bytes.Count(text, []byte("\n# TYPE "))
			size := len(text)
			b.ReportMetric(float64(size), "bytes/scrape")
			b.ReportMetric(float64(series), "series")
		})
	}
}
