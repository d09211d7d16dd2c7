package metrics

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// TestHighestEquivalent checks highestEquivalent against hdrhistogram-go's
// own buckets (Bar.To of a dense histogram) for a value in every bucket of
// both geometries of the package, durations and batches.
func TestHighestEquivalent(t *testing.T) {
	for _, g := range []struct {
		name    string
		h       *hdrhistogram.Histogram
		highest int64
	}{{"durations", newDense(), histHighestMicros}, {"batches", newDenseBatch(), batchHighest}} {
		for v := int64(1); v <= g.highest; v += 1 + v/4096 {
			if err := g.h.RecordValue(v); err != nil {
				t.Fatalf("%s: RecordValue(%d): %v", g.name, v, err)
			}
		}
		n := 0
		for _, bar := range g.h.Distribution() {
			if bar.Count == 0 {
				continue
			}
			n++
			if got := highestEquivalent(bar.From); got != bar.To {
				t.Errorf("%s: highestEquivalent(%d) = %d, want %d", g.name, bar.From, got, bar.To)
			}
		}
		if n < 10000 {
			t.Errorf("%s: only %d buckets checked", g.name, n)
		}
	}
}

// histSample returns n microsecond values of the spread BenchmarkScrapeMemory
// records: log-normal around 100 µs (σ = 0.6), one in 500 in a tail of
// 1 .. 50 ms.
func histSample(n int) []int64 {
	rng := rand.New(rand.NewPCG(1, 2))
	out := make([]int64, n)
	for i := range out {
		us := 100 * math.Exp(0.6*rng.NormFloat64())
		if rng.IntN(500) == 0 {
			us *= 10 + 490*rng.Float64()
		}
		out[i] = max(int64(math.Ceil(us)), 1)
	}
	return out
}

// reportPcts are the percentiles the exports show (/stats, the table).
var reportPcts = []float64{50, 90, 99, 99.9, 99.99}

// BenchmarkHistogramOptions measures the representations issue 16 weighed,
// each fed the same 1,000,000 values (histSample): bytes held after them
// (B/hist), ns per RecordValue, and the largest error of p50 .. p99.99
// against the dense 1 µs .. 1 h, 3-digit histogram used before, in units
// of the third significant digit (digit-err; the target is <= 1):
//
//   - dense 1 µs .. 1 h, 3 digits: the reference;
//   - dense with a shorter range (100 s, 10 s): the counts array shrinks by
//     1,024 counters (8 KB) per halving of the range only;
//   - dense with 2 significant digits: small, but p99 off by up to ~8 in
//     the third digit;
//   - sparse (PackedHistogram), 1 µs .. 1 h, 3 digits: what the package
//     uses. Same buckets, so no error, and bytes only for used buckets.
func BenchmarkHistogramOptions(b *testing.B) {
	values := histSample(1_000_000)
	ref := newDense()
	for _, v := range values {
		_ = ref.RecordValue(v)
	}
	type recorder interface {
		RecordValue(int64) error
		ValueAtPercentile(float64) int64
	}
	for _, o := range []struct {
		name  string
		new   func() recorder
		bytes func(recorder) int
	}{
		{"dense-1h-3digits", func() recorder { return newDense() }, func(r recorder) int { return r.(*hdrhistogram.Histogram).ByteSize() }},
		{"dense-100s-3digits", func() recorder { return hdrhistogram.New(1, 100_000_000, 3) }, func(r recorder) int { return r.(*hdrhistogram.Histogram).ByteSize() }},
		{"dense-10s-3digits", func() recorder { return hdrhistogram.New(1, 10_000_000, 3) }, func(r recorder) int { return r.(*hdrhistogram.Histogram).ByteSize() }},
		{"dense-1h-2digits", func() recorder { return hdrhistogram.New(1, histHighestMicros, 2) }, func(r recorder) int { return r.(*hdrhistogram.Histogram).ByteSize() }},
		{"sparse-1h-3digits", func() recorder { return newHistogram() }, func(r recorder) int { return r.(*hdrhistogram.PackedHistogram).GetMemorySize() }},
	} {
		b.Run(o.name, func(b *testing.B) {
			var h recorder
			b.ReportAllocs()
			for b.Loop() {
				h = o.new()
				for _, v := range values {
					_ = h.RecordValue(v)
				}
			}
			var digitErr float64
			for _, pct := range reportPcts {
				want, got := ref.ValueAtPercentile(pct), h.ValueAtPercentile(pct)
				unit := math.Pow(10, math.Floor(math.Log10(float64(want)))-2) // one in the third digit
				digitErr = max(digitErr, math.Abs(float64(got-want))/unit)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(values)), "ns/record")
			b.ReportMetric(float64(o.bytes(h)), "B/hist")
			b.ReportMetric(digitErr, "digit-err")
			b.ReportMetric(0, "ns/op")
		})
	}
}

// buckets returns h's non-empty buckets as (lowest value, count) pairs.
func buckets(h *hdrhistogram.PackedHistogram) [][2]int64 {
	var out [][2]int64
	h.ForEachBucket(func(v, c int64) bool {
		out = append(out, [2]int64{v, c})
		return true
	})
	return out
}

// TestRecMatchesSparse records the same values into a rec and straight
// into a sparse histogram, in both geometries, over three scrapes (takeFrom
// into a swap slot, addTo an emptied histogram): the buckets must be the same, including
// hot counts that overflowed their byte (a value recorded 1,000 times) and
// values on both sides of hotValues.
func TestRecMatchesSparse(t *testing.T) {
	for _, g := range []struct {
		name    string
		newFn   func() *hdrhistogram.PackedHistogram
		highest int64
	}{{"durations", newHistogram, histHighestMicros}, {"batches", newBatchHistogram, batchHighest}} {
		t.Run(g.name, func(t *testing.T) {
			var r, slot rec
			swap := g.newFn()
			sample := histSample(20_000)
			for round := range 3 {
				want := g.newFn()
				add := func(v int64) {
					v = min(v, g.highest)
					r.record(v, g.newFn)
					_ = want.RecordValue(v)
				}
				for _, v := range sample[round*5000 : (round+1)*5000] {
					add(v * int64(1+round)) // rounds differ
				}
				for range 1000 {
					add(hotValues - 1) // overflows its byte 3 times
				}
				for range 600 {
					add(hotLimit - 1) // the last dense slot overflows its byte too
				}
				for _, v := range []int64{1, 15, 16, hotValues - 16, hotValues, hotValues + 1, hotValues + 2,
					4095, 4096, 4097, 20_001, hotLimit - 2, hotLimit, hotLimit + 1, g.highest} {
					add(v)
				}
				if r.pending != want.TotalCount() {
					t.Errorf("round %d: pending %d, want %d", round, r.pending, want.TotalCount())
				}
				// A scrape: the loop's rec into the swap slot, then the
				// slot into a histogram.
				slot.takeFrom(&r, g.newFn)
				if r.pending != 0 || slot.pending != want.TotalCount() {
					t.Errorf("round %d: pending %d after takeFrom, slot %d; want 0, %d", round, r.pending, slot.pending, want.TotalCount())
				}
				swap.Reset()
				slot.addTo(swap)
				slot.reset()
				if got, exp := buckets(swap), buckets(want); fmt.Sprint(got) != fmt.Sprint(exp) {
					t.Errorf("round %d: %d buckets, %d values; want %d buckets, %d values", round, len(got), swap.TotalCount(), len(exp), want.TotalCount())
				}
				for _, x := range []*rec{&r, &slot} {
					if x.pending != 0 || x.spill.TotalCount() != 0 || slices.ContainsFunc(x.hot.counts, func(c uint8) bool { return c != 0 }) {
						t.Errorf("round %d: rec not reset by the scrape", round)
					}
				}
			}
		})
	}
}

// TestHotSlots checks the dense slots against HdrHistogram's own
// buckets: two values below hotLimit share a slot exactly when the
// histogram counts them together, and a slot's lowest value maps back to
// it. Without this the hot counts would move values into other buckets.
func TestHotSlots(t *testing.T) {
	h := hdrhistogram.New(histLowestMicros, histHighestMicros, histSigFigs)
	prev := 0 // slot 0 would be value 0, below the geometry
	for v := int64(1); v < hotLimit; v++ {
		i := hotIndex(v)
		switch {
		case i < 0 || i >= hotSlots:
			t.Fatalf("hotIndex(%d) = %d, outside [0, %d)", v, i, hotSlots)
		case i != prev && i != prev+1:
			t.Fatalf("hotIndex(%d) = %d after %d: slots must be consecutive", v, i, prev)
		case (i == prev) != h.ValuesAreEquivalent(v, v-1) && v > 1:
			t.Fatalf("%d and %d: same slot %v, HdrHistogram equivalent %v", v-1, v, i == prev, h.ValuesAreEquivalent(v, v-1))
		case !h.ValuesAreEquivalent(v, hotValue(i)) || hotIndex(hotValue(i)) != i || (i != prev && hotValue(i) != v):
			t.Fatalf("slot %d of %d: lowest value %d", i, v, hotValue(i))
		}
		prev = i
	}
	if prev != hotSlots-1 {
		t.Errorf("last slot %d, want %d", prev, hotSlots-1)
	}
}

// recSpreads are the value spreads of BenchmarkRecorder: histSample's
// (log-normal around 100 µs with a tail, as BenchmarkScrapeMemory records)
// and BenchmarkObserveLocked's (100 .. 1123 in turn, 1,024 buckets).
var recSpreads = []struct {
	name   string
	values []int64
}{
	{"lognormal", histSample(1 << 16)},
	{"saturated", func() []int64 { // log-normal around 5 ms: an engine or proxy at its limit
		vs := histSample(1 << 16)
		for i := range vs {
			vs[i] *= 50
		}
		return vs
	}()},
	{"uniform1024", func() []int64 {
		vs := make([]int64, 1<<16)
		for i := range vs {
			vs[i] = 100 + int64(i&1023)
		}
		return vs
	}()},
}

// BenchmarkRecorder measures the time per value of a loop's recording
// (ns/op), side by side: the sparse histogram alone (before the hot
// counts), rec (hot counts below hotValues, sparse above) and the dense
// histogram. Every 65,536 values, as between two scrapes of a busy loop,
// it moves them into a swap buffer, as a scrape does under the loop's lock,
// timed apart (µs/take: how long the loop waits), then drains that into a
// cumulative histogram (untimed).
func BenchmarkRecorder(b *testing.B) {
	type recorder struct {
		record func(int64)
		take   func() // under the loop's lock
		drain  func() // after it
	}
	for _, sp := range recSpreads {
		for _, o := range []struct {
			name string
			new  func() recorder
		}{
			{"sparse", func() recorder { // the swap buffer before rec
				h, swap, acc := newHistogram(), newHistogram(), newHistogram()
				return recorder{func(v int64) { _ = h.RecordValue(v) },
					func() { swap.Merge(h); h.Reset() },
					func() { acc.Merge(swap); swap.Reset() }}
			}},
			{"rec", func() recorder {
				var r, slot rec
				acc := newHistogram()
				return recorder{func(v int64) { r.record(v, newHistogram) },
					func() { slot.takeFrom(&r, newHistogram) },
					func() { drain(&slot, &acc, nil, newHistogram) }}
			}},
			{"dense", func() recorder {
				h, swap, acc := newDense(), newDense(), newDense()
				return recorder{func(v int64) { _ = h.RecordValue(v) },
					func() { swap.Merge(h); h.Reset() },
					func() { acc.Merge(swap); swap.Reset() }}
			}},
		} {
			b.Run(sp.name+"/"+o.name, func(b *testing.B) {
				r := o.new()
				b.ReportAllocs()
				var scrapes int
				var scraping time.Duration
				i := 0
				for b.Loop() {
					r.record(sp.values[i&(len(sp.values)-1)])
					i++
					if i&65535 == 0 {
						b.StopTimer()
						t0 := time.Now()
						r.take()
						scraping += time.Since(t0)
						scrapes++
						r.drain()
						b.StartTimer()
					}
				}
				if scrapes > 0 {
					b.ReportMetric(float64(scraping.Microseconds())/float64(scrapes), "µs/take")
				}
			})
		}
	}
}
