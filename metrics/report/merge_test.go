package report_test

import (
	"bytes"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/respmeter/respmeter/metrics/hdrlog"
	"github.com/respmeter/respmeter/metrics/report"
)

// TestMergeExact: merging the HDR logs of four workers (two intervals
// each, workers with different distributions) gives the p50/p99/p99.9 of
// one histogram built from all their values, not their average; the
// logs merged are left as they were.
func TestMergeExact(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	one := newHist()
	var logs []*report.Log
	var before []int64
	for w := range 4 {
		var buf bytes.Buffer
		lw, err := hdrlog.NewWriter(&buf, t0)
		if err != nil {
			t.Fatal(err)
		}
		for iv := range 2 {
			h := newHist()
			for range 3000 * (w + 1) {
				v := 1 + int64(rng.ExpFloat64()*float64(200*(w+1)*(w+1)))
				_ = h.RecordValue(v)
				_ = one.RecordValue(v)
			}
			from := t0.Add(time.Duration(iv) * time.Second)
			if err := lw.WriteInterval(from, from.Add(time.Second), "get.total", h); err != nil {
				t.Fatal(err)
			}
		}
		l, err := report.Load(&buf)
		if err != nil {
			t.Fatal(err)
		}
		logs = append(logs, l)
		before = append(before, l.Histogram("get.total").TotalCount())
	}
	m := report.Merge(logs...)
	got := m.Histogram("get.total")
	for _, q := range []float64{50, 99, 99.9} {
		var avg int64
		for _, l := range logs {
			avg += l.Histogram("get.total").ValueAtQuantile(q) / int64(len(logs))
		}
		want := one.ValueAtQuantile(q)
		if g := got.ValueAtQuantile(q); g != want {
			t.Errorf("merged p%v = %d µs, want %d (one histogram of all values; the average of the logs' is %d)", q, g, want, avg)
		}
		if avg == want {
			t.Errorf("p%v: the average of the logs' percentiles is the exact one (%d): the test cannot tell them apart", q, avg)
		}
	}
	if got.TotalCount() != one.TotalCount() || m.Intervals() != 8 {
		t.Errorf("merged %d values in %d intervals, want %d in 8", got.TotalCount(), m.Intervals(), one.TotalCount())
	}
	for i, l := range logs {
		if n := l.Histogram("get.total").TotalCount(); n != before[i] {
			t.Errorf("log %d changed by the merge: %d values, had %d", i, n, before[i])
		}
	}
}
