package metrics

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
)

func TestNativeKey(t *testing.T) {
	tests := []struct {
		v    float64 // seconds
		want int
	}{
		{1, 0},
		{2, 8},
		{0.5, -8},
		{1.0001, 1},
		{1.09, 1},  // just below 2^(1/8) = 1.0905
		{1.091, 2}, // just above
		{1.1, 2},   // log2(1.1)*8 = 1.1
		{1e-6, -159},
		{1e-4, -106},
		{1e-3, -79},
		{2.000895, 9},
		{3600, 95}, // log2(3600)*8 = 94.5
	}
	for _, tc := range tests {
		got := nativeKey(tc.v)
		if got != tc.want {
			t.Errorf("nativeKey(%g) = %d, want %d", tc.v, got, tc.want)
		}
		// The bucket's bounds, as Prometheus defines them for schema 3.
		lo, hi := math.Exp2(float64(got-1)/8), math.Exp2(float64(got)/8)
		if !(tc.v > lo*(1-1e-15) && tc.v <= hi*(1+1e-15)) {
			t.Errorf("nativeKey(%g) = %d: bucket (%g, %g] does not hold it", tc.v, got, lo, hi)
		}
	}
}

func TestNativeBuckets(t *testing.T) {
	type bucket struct {
		key   int
		count int64
	}
	type span struct {
		offset int32
		length uint32
	}
	tests := []struct {
		name   string
		add    []bucket
		spans  []span
		deltas []int64
	}{
		{"empty", nil, nil, nil},
		{"one", []bucket{{-5, 3}}, []span{{-5, 1}}, []int64{3}},
		{"same key merges", []bucket{{4, 1}, {4, 2}, {5, 1}}, []span{{4, 2}}, []int64{3, -2}},
		{"gap of two is filled", []bucket{{0, 2}, {3, 1}}, []span{{0, 4}}, []int64{2, -2, 0, 1}},
		{"gap of three starts a span", []bucket{{0, 2}, {4, 1}}, []span{{0, 1}, {3, 1}}, []int64{2, -1}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var b nativeBuckets
			for _, a := range tc.add {
				b.add(a.key, a.count)
			}
			var spans []span
			for _, s := range b.spans {
				spans = append(spans, span{s.GetOffset(), s.GetLength()})
			}
			if !equal(spans, tc.spans) || !equal(b.deltas, tc.deltas) {
				t.Errorf("spans %v deltas %v, want %v %v", spans, b.deltas, tc.spans, tc.deltas)
			}
		})
	}
}

func equal[T comparable](a, b []T) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestToMicros(t *testing.T) {
	for _, tc := range []struct {
		d    time.Duration
		want int64
	}{
		{0, 1},
		{-time.Second, 1},
		{time.Nanosecond, 1},
		{time.Microsecond, 1},
		{time.Microsecond + 1, 2},
		{1500 * time.Microsecond, 1500},
		{time.Hour, histHighestMicros},
		{time.Hour + time.Microsecond, histHighestMicros},
	} {
		if got := toMicros(tc.d); got != tc.want {
			t.Errorf("toMicros(%v) = %d, want %d", tc.d, got, tc.want)
		}
	}
}

func TestEmptyHistogramMetric(t *testing.T) {
	c := newCollector(NewSet(1, nil), Export{})
	m := newHistogramMetric(c.think, c.boundsMicros, Durations{})
	var out dto.Metric
	if err := m.Write(&out); err != nil {
		t.Fatal(err)
	}
	h := out.GetHistogram()
	if h.GetSampleCount() != 0 || len(h.GetPositiveSpan()) != 0 || h.GetZeroThreshold() == 0 || len(h.GetBucket()) != 25 {
		t.Errorf("empty histogram: %v", h)
	}
}

// TestNativeKeyHdrValues checks every value the collector converts (the
// highest equivalent value of each HdrHistogram bucket, in seconds) against
// the schema 3 boundaries with a margin far above float rounding, which
// backs nativeKey's claim that rounding never matters here.
func TestNativeKeyHdrValues(t *testing.T) {
	var values []int64
	for v := int64(1); v < 2048; v++ {
		values = append(values, v)
	}
	for b := uint(1); ; b++ {
		if int64(1024)<<b > histHighestMicros {
			break
		}
		for sub := int64(1024); sub < 2048; sub++ {
			values = append(values, sub<<b+(1<<b)-1)
		}
	}
	const margin = 1e-12
	for _, us := range values {
		v := float64(us) / 1e6
		k := nativeKey(v)
		lo, hi := math.Exp2(float64(k-1)/8), math.Exp2(float64(k)/8)
		if !(v > lo*(1+margin) && (v <= hi*(1-margin) || v == hi)) {
			t.Errorf("%d us: key %d, bucket (%g, %g] too close or wrong", us, k, lo, hi)
		}
	}
}

// TestNativeKeyBatchValues is TestNativeKeyHdrValues for the batch
// histogram: every highest equivalent value of its geometry (1 .. 1<<20 at 3
// significant digits), exported as a plain count, lands clear of the schema
// 3 boundaries.
func TestNativeKeyBatchValues(t *testing.T) {
	h := newDenseBatch()
	var values []int64
	for v := int64(1); v < 2048; v++ {
		values = append(values, v)
	}
	for b := uint(1); int64(1024)<<b <= batchHighest; b++ {
		for sub := int64(1024); sub < 2048; sub++ {
			values = append(values, sub<<b+(1<<b)-1)
		}
	}
	const margin = 1e-12
	for _, v := range values {
		if v <= batchHighest {
			// The values are the histogram's own highest equivalents.
			if err := h.RecordValue(v); err != nil {
				t.Fatalf("RecordValue(%d): %v", v, err)
			}
		}
		k := nativeKey(float64(v))
		lo, hi := math.Exp2(float64(k-1)/8), math.Exp2(float64(k)/8)
		if !(float64(v) > lo*(1+margin) && (float64(v) <= hi*(1-margin) || float64(v) == hi)) {
			t.Errorf("%d: key %d, bucket (%g, %g] too close or wrong", v, k, lo, hi)
		}
	}
	checked := make(map[int64]bool, len(values))
	for _, v := range values {
		checked[v] = true
	}
	for _, bar := range h.Distribution() {
		if bar.Count != 0 && !checked[bar.To] {
			t.Errorf("bucket [%d, %d]: highest equivalent value not among the checked ones", bar.From, bar.To)
		}
	}
}

func TestBatchBounds(t *testing.T) {
	want := []int64{1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024}
	if got := batchBounds(); !equal(got, want) {
		t.Errorf("batchBounds() = %v, want %v", got, want)
	}
}

// TestSparseMatchesDense records the same values into the package's sparse
// histogram and a dense one of the same geometry (the representation before
// issue 16) and checks that every percentile the exports use, the max and
// the Prometheus buckets are the same: sparse storage loses nothing.
func TestSparseMatchesDense(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	sparse, dense := newHistogram(), newDense()
	for range 200000 {
		us := int64(100*math.Exp(1.5*rng.NormFloat64())) + 1
		us = min(us, histHighestMicros)
		if err := sparse.RecordValue(us); err != nil {
			t.Fatal(err)
		}
		if err := dense.RecordValue(us); err != nil {
			t.Fatal(err)
		}
	}
	for _, pct := range []float64{0, 1, 10, 50, 90, 99, 99.9, 99.99, 99.999, 100} {
		if s, d := sparse.ValueAtPercentile(pct), dense.ValueAtQuantile(pct); s != d {
			t.Errorf("p%g: sparse %d, dense %d", pct, s, d)
		}
	}
	if s, d := sparse.Max(), dense.Max(); s != d {
		t.Errorf("max: sparse %d, dense %d", s, d)
	}
	c := newCollector(NewSet(1, nil), Export{})
	var ms, md dto.Metric
	if err := newHistogramMetric(c.think, c.boundsMicros, Durations{sparse: sparse}).Write(&ms); err != nil {
		t.Fatal(err)
	}
	if err := newHistogramMetric(c.think, c.boundsMicros, Durations{Hist: dense}).Write(&md); err != nil {
		t.Fatal(err)
	}
	if ms.String() != md.String() {
		t.Errorf("Prometheus histogram from sparse:\n%v\nfrom dense:\n%v", &ms, &md)
	}
}

// histogramQuantile is Prometheus's histogram_quantile over classic
// buckets (cumulative counts at upper bounds, ascending, +Inf implied by
// total): the bucket holding rank q·total, interpolated linearly from its
// lower bound (0 for the first) to its upper bound; a rank in +Inf gives
// the highest finite bound. q is a rank 0-1.
func histogramQuantile(q float64, h *dto.Histogram) float64 {
	rank := q * float64(h.GetSampleCount())
	var lower, prev float64
	for _, b := range h.GetBucket() {
		cum := float64(b.GetCumulativeCount())
		if cum >= rank {
			if cum == prev {
				return b.GetUpperBound()
			}
			return lower + (b.GetUpperBound()-lower)*(rank-prev)/(cum-prev)
		}
		lower, prev = b.GetUpperBound(), cum
	}
	return lower
}

// TestClassicP99Error: the p99 a Prometheus reads from the classic buckets
// (histogram_quantile) against the p99 of /stats (the HdrHistogram's), for
// the proxy's own microseconds and for a millisecond-range engine, with the
// buckets before issue 19 (10 µs .. 10 s, 1-2.5-5) and now (1, 2, 5 µs
// added). Before, every proxy phase read 9.9 µs at p99, whatever it was;
// from 10 µs up the bounds, and so the errors, are the same.
func TestClassicP99Error(t *testing.T) {
	before := []int64{10, 25, 50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000,
		100_000, 250_000, 500_000, 1_000_000, 2_500_000, 5_000_000, 10_000_000}
	rng := rand.New(rand.NewPCG(19, 2))
	for _, tc := range []struct {
		name   string
		micros func() float64 // one value, µs
		maxErr float64        // now, relative
	}{
		// The proxy phase on loopback: 1-2 µs mostly, a tail to ~5 µs.
		{"proxy 1-5us", func() float64 { return 1 + math.Abs(rng.NormFloat64())*1.0 }, 0.15},
		// An engine answering in ~1 ms, log-normal (sigma 0.4).
		{"engine ~1ms", func() float64 { return 1000 * math.Exp(0.4*rng.NormFloat64()) }, 0.15},
	} {
		s := NewSet(1, nil)
		l := s.Loop(0)
		l.Lock()
		for range 100_000 {
			d := time.Duration(tc.micros() * float64(time.Microsecond))
			l.ObserveLocked(0, d, d, d, false)
		}
		l.Unlock()
		c := newCollector(s, Export{})
		_ = s.view(func(sn *Snapshot) error {
			d := sn.Commands[0].Phases[PhaseTotal]
			truth := d.Percentile(99).Seconds()
			relErr := func(bounds []int64) float64 {
				var m dto.Metric
				if err := newHistogramMetric(c.duration, bounds, d, "other", "total").Write(&m); err != nil {
					t.Fatal(err)
				}
				return histogramQuantile(0.99, m.GetHistogram())/truth - 1
			}
			was, now := relErr(before), relErr(c.boundsMicros)
			t.Logf("%s: /stats p99 %.1f µs; classic-bucket p99 error before %+.1f %%, now %+.1f %%",
				tc.name, truth*1e6, was*100, now*100)
			if math.Abs(now) > tc.maxErr {
				t.Errorf("%s: classic-bucket p99 off by %+.1f %% of /stats's %.1f µs, want within %.0f %%",
					tc.name, now*100, truth*1e6, tc.maxErr*100)
			}
			return nil
		})
	}
}
