package hdrlog_test

import (
	"bytes"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/respmeter/respmeter/internal/goldenfile"

	"github.com/HdrHistogram/hdrhistogram-go"

	"github.com/respmeter/respmeter/metrics/hdrlog"
)

// newHist returns a histogram shaped as package metrics makes them:
// microseconds, 1 µs .. 1 h, 3 significant digits.
func newHist(values ...int64) *hdrhistogram.Histogram {
	h := hdrhistogram.New(1, 3_600_000_000, 3)
	for _, v := range values {
		if err := h.RecordValue(v); err != nil {
			panic(err)
		}
	}
	return h
}

// seq returns the values from, from+step, ... up to n values.
func seq(from, step int64, n int) []int64 {
	vs := make([]int64, n)
	for i := range vs {
		vs[i] = from + int64(i)*step
	}
	return vs
}

var start = time.Date(2024, 5, 6, 7, 8, 9, 250e6, time.UTC) // not a whole second

func TestHeaderGolden(t *testing.T) {
	var buf bytes.Buffer
	if _, err := hdrlog.NewWriter(&buf, start); err != nil {
		t.Fatal(err)
	}
	golden(t, "header.golden", buf.Bytes())
}

type interval struct {
	tag        string
	start, end time.Time
	values     []int64
}

// roundTripIntervals are the intervals of TestRoundTrip.
func roundTripIntervals() []interval {
	at := func(ms int) time.Time { return start.Add(time.Duration(ms) * time.Millisecond) }
	return []interval{
		{"get.total", at(0), at(1000), seq(100, 1, 1000)},
		{"get.upstream", at(0), at(1000), seq(50, 1, 1000)},
		{"set.total", at(0), at(1000), []int64{1, 2_000_000}},
		{"get.total", at(1000), at(2000), seq(1000, 7, 500)},
		{"", at(2000), at(2500), []int64{42}},                         // untagged
		{"get.total", at(2500), at(3001), seq(3_000_000_000, 1e6, 5)}, // near 1 h
		{"empty.total", at(3001), at(4000), nil},
	}
}

func TestRoundTrip(t *testing.T) {
	intervals := roundTripIntervals()
	var buf bytes.Buffer
	w, err := hdrlog.NewWriter(&buf, start)
	if err != nil {
		t.Fatal(err)
	}
	for _, iv := range intervals {
		h := newHist(iv.values...)
		h.SetTag("keep")
		if err := w.WriteInterval(iv.start, iv.end, iv.tag, h); err != nil {
			t.Fatalf("%s: %v", iv.tag, err)
		}
		if h.Tag() != "keep" || h.StartTimeMs() != 0 || h.EndTimeMs() != 0 {
			t.Errorf("%s: WriteInterval left tag %q, times %d..%d", iv.tag, h.Tag(), h.StartTimeMs(), h.EndTimeMs())
		}
	}

	r := hdrhistogram.NewHistogramLogReader(bytes.NewReader(buf.Bytes()))
	for i, iv := range intervals {
		got, err := r.NextIntervalHistogram()
		if err != nil || got == nil {
			t.Fatalf("interval %d: %v, %v\n%s", i, got, err, buf.String())
		}
		want := newHist(iv.values...)
		if got.Tag() != iv.tag {
			t.Errorf("interval %d: tag %q, want %q", i, got.Tag(), iv.tag)
		}
		if got.StartTimeMs() != iv.start.UnixMilli() || got.EndTimeMs() != iv.end.UnixMilli() {
			t.Errorf("interval %d: times %d..%d, want %d..%d", i,
				got.StartTimeMs(), got.EndTimeMs(), iv.start.UnixMilli(), iv.end.UnixMilli())
		}
		if got.TotalCount() != want.TotalCount() || got.Max() != want.Max() || got.Min() != want.Min() {
			t.Errorf("interval %d: count/min/max %d/%d/%d, want %d/%d/%d", i,
				got.TotalCount(), got.Min(), got.Max(), want.TotalCount(), want.Min(), want.Max())
		}
		for _, pct := range []float64{0, 50, 90, 99, 99.9, 99.99, 100} {
			if g, w := got.ValueAtQuantile(pct), want.ValueAtQuantile(pct); g != w {
				t.Errorf("interval %d: p%g = %d, want %d", i, pct, g, w)
			}
		}
	}
	if h, err := r.NextIntervalHistogram(); h != nil || err != nil {
		t.Errorf("after the last interval: %v, %v", h, err)
	}
	// Interval_Max is max/1e6 (hdrhistogram-go's fixed ratio): seconds here.
	if line := strings.Split(buf.String(), "\n")[6]; !strings.HasPrefix(line, "Tag=set.total,0.250000,1.000000,2.000895,HIST") {
		t.Errorf("set.total line: %q", line)
	}
}

// TestWritePackedIntervalSameLines writes TestRoundTrip's intervals from
// dense histograms (WriteInterval) and from sparse ones with the same
// values (WritePackedInterval): the logs must be byte for byte the same,
// and the sparse histograms keep their own tag and times.
func TestWritePackedIntervalSameLines(t *testing.T) {
	var dense, packed bytes.Buffer
	dw, err := hdrlog.NewWriter(&dense, start)
	if err != nil {
		t.Fatal(err)
	}
	pw, err := hdrlog.NewWriter(&packed, start)
	if err != nil {
		t.Fatal(err)
	}
	for _, iv := range roundTripIntervals() {
		if err := dw.WriteInterval(iv.start, iv.end, iv.tag, newHist(iv.values...)); err != nil {
			t.Fatalf("%s: %v", iv.tag, err)
		}
		h := hdrhistogram.NewPacked(1, 3_600_000_000, 3)
		for _, v := range iv.values {
			if err := h.RecordValue(v); err != nil {
				t.Fatal(err)
			}
		}
		h.SetTag("keep")
		if err := pw.WritePackedInterval(iv.start, iv.end, iv.tag, h); err != nil {
			t.Fatalf("%s: %v", iv.tag, err)
		}
		if h.Tag() != "keep" || h.StartTimeMs() != 0 || h.EndTimeMs() != 0 {
			t.Errorf("%s: WritePackedInterval left tag %q, times %d..%d", iv.tag, h.Tag(), h.StartTimeMs(), h.EndTimeMs())
		}
	}
	if !bytes.Equal(dense.Bytes(), packed.Bytes()) {
		t.Errorf("logs differ:\ndense:\n%s\npacked:\n%s", dense.String(), packed.String())
	}
	if err := pw.WritePackedInterval(start, start, "get total", hdrhistogram.NewPacked(1, 3_600_000_000, 3)); !errors.Is(err, hdrlog.ErrTag) {
		t.Errorf("tag with a space: err %v, want ErrTag", err)
	}
}

func TestWriteIntervalErrors(t *testing.T) {
	w, err := hdrlog.NewWriter(&bytes.Buffer{}, start)
	if err != nil {
		t.Fatal(err)
	}
	base := start.Truncate(time.Second)
	for _, tc := range []struct {
		name       string
		tag        string
		start, end time.Time
		want       error
	}{
		{"comma", "get,total", start, start, hdrlog.ErrTag},
		{"trailing space", "get.total ", start, start, hdrlog.ErrTag},
		{"newline", "get\n", start, start, hdrlog.ErrTag},
		{"leading comma", ",x", start, start, hdrlog.ErrTag},
		{"end before start", "get.total", start, start.Add(-time.Millisecond), hdrlog.ErrInterval},
		{"before base time", "get.total", base.Add(-time.Millisecond), start, hdrlog.ErrInterval},
		{"at base time", "get.total", base, start, nil},
		{"zero length", "get.total", start, start, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := w.WriteInterval(tc.start, tc.end, tc.tag, newHist(5))
			if !errors.Is(err, tc.want) || (err == nil) != (tc.want == nil) {
				t.Errorf("err %v, want %v", err, tc.want)
			}
		})
	}
}

type failWriter struct{}

func (failWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }

func TestNewWriterError(t *testing.T) {
	if _, err := hdrlog.NewWriter(failWriter{}, start); err == nil || !strings.Contains(err.Error(), "disk full") {
		t.Errorf("err %v, want the write error", err)
	}
}

func TestDelta(t *testing.T) {
	prevVals := append(seq(100, 3, 400), 5000, 5000, 70)
	newVals := append(seq(90, 5, 300), 5000, 1_000_000)
	prev := newHist(prevVals...)
	cur := newHist(append(append([]int64(nil), prevVals...), newVals...)...)
	want := newHist(newVals...)
	curCopy, prevCopy := cur.Export(), prev.Export()

	for _, tc := range []struct {
		name      string
		cur, prev *hdrhistogram.Histogram
		want      *hdrhistogram.Histogram
	}{
		{"interval", cur, prev, want},
		{"nil prev", cur, nil, cur},
		{"same", cur, cur, newHist()},
		// prev in another layout: re-recorded into cur's before subtracting.
		{"other layout", cur, func() *hdrhistogram.Histogram {
			h := hdrhistogram.New(1, 10_000_000, 3)
			for _, v := range prevVals {
				_ = h.RecordValue(v)
			}
			return h
		}(), want},
		// prev is not an earlier cur (a reset): counts clamp at 0.
		{"reset", newHist(10, 20), newHist(10, 10, 30), newHist(20)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := hdrlog.Delta(tc.cur, tc.prev)
			if !got.Equals(tc.want) {
				t.Errorf("count %d max %d p50 %d, want count %d max %d p50 %d",
					got.TotalCount(), got.Max(), got.ValueAtQuantile(50),
					tc.want.TotalCount(), tc.want.Max(), tc.want.ValueAtQuantile(50))
			}
			if got == tc.cur {
				t.Error("Delta returned cur itself")
			}
		})
	}
	if !hdrhistogram.Import(curCopy).Equals(cur) || !hdrhistogram.Import(prevCopy).Equals(prev) {
		t.Error("Delta changed its arguments")
	}
	// The result is independent of cur.
	d := hdrlog.Delta(cur, nil)
	_ = d.RecordValue(123)
	if cur.TotalCount() != int64(len(prevVals)+len(newVals)) {
		t.Error("recording into Delta(cur, nil) changed cur")
	}
}

// golden compares got with testdata/name (-update rewrites it).
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	goldenfile.Check(t, filepath.Join("testdata", name), got)
}
