package hdrlog_test

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"

	"github.com/respmeter/respmeter/metrics/hdrlog"
)

// writeLog writes intervals with Writer and returns the log text.
func writeLog(t *testing.T, intervals []interval) []byte {
	t.Helper()
	var buf bytes.Buffer
	w, err := hdrlog.NewWriter(&buf, start)
	if err != nil {
		t.Fatal(err)
	}
	for _, iv := range intervals {
		if err := w.WriteInterval(iv.start, iv.end, iv.tag, newHist(iv.values...)); err != nil {
			t.Fatal(err)
		}
	}
	return buf.Bytes()
}

func load(t *testing.T, data []byte) *hdrlog.Log {
	t.Helper()
	l, err := hdrlog.Load(bytes.NewReader(data))
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	return l
}

// second returns the interval of values recorded in second sec after start.
func second(sec int, tag string, values []int64) interval {
	s := start.Add(time.Duration(sec) * time.Second)
	return interval{tag, s, s.Add(time.Second), values}
}

func TestLoad(t *testing.T) {
	ivs := []interval{
		second(0, "get.total", seq(100, 1, 1000)), // 100..1099 µs
		second(0, "get.upstream", seq(50, 1, 1000)),
		second(0, "set.total", seq(200, 2, 500)),
		second(1, "get.total", seq(1100, 1, 1000)), // 1100..2099 µs
		second(1, "ping.total", nil),
	}
	l := load(t, writeLog(t, ivs))
	if got, want := strings.Join(l.Tags(), " "), "get.total get.upstream ping.total set.total"; got != want {
		t.Errorf("Tags %q, want %q", got, want)
	}
	if l.Intervals() != len(ivs) {
		t.Errorf("Intervals %d, want %d", l.Intervals(), len(ivs))
	}
	if !l.Start().Equal(start) || !l.End().Equal(start.Add(2*time.Second)) {
		t.Errorf("Start..End %v..%v, want %v..%v", l.Start(), l.End(), start, start.Add(2*time.Second))
	}
	want := newHist(seq(100, 1, 2000)...) // both intervals
	if got := l.Histogram("get.total"); !got.Equals(want) {
		t.Errorf("get.total: count %d p50 %d max %d, want %d %d %d", got.TotalCount(),
			got.ValueAtQuantile(50), got.Max(), want.TotalCount(), want.ValueAtQuantile(50), want.Max())
	}
	if l.Histogram("nope") != nil {
		t.Error("Histogram of a missing tag is not nil")
	}
}

// TestLoadWidens merges intervals of different layouts without dropping.
func TestLoadWidens(t *testing.T) {
	log := "#[BaseTime: 1700000000 (seconds since epoch)]\n"
	var want []int64
	for i, hi := range []int64{1000, 10_000_000, 100_000} {
		h := hdrhistogram.New(1, hi, 2+i%2)
		vs := []int64{hi / 2, hi}
		for _, v := range vs {
			_ = h.RecordValue(v)
		}
		want = append(want, vs...)
		enc, err := h.Encode(hdrhistogram.V2CompressedEncodingCookieBase)
		if err != nil {
			t.Fatal(err)
		}
		log += "Tag=x,0.000,1.000,0.000," + string(enc) + "\n"
	}
	h := load(t, []byte(log)).Histogram("x")
	if h.TotalCount() != int64(len(want)) || h.Max() < 10_000_000 || h.Min() > 500 {
		t.Errorf("count %d min %d max %d", h.TotalCount(), h.Min(), h.Max())
	}
}

func TestLoadErrors(t *testing.T) {
	header := string(writeLog(t, nil))
	for _, tc := range []struct {
		name, in string
		want     error
		msg      string
	}{
		{"garbage", "hello, world\n", hdrlog.ErrFormat, `line 1 is not a comment, legend or`},
		{"garbage after header", header + "Tag=a,0.0,1.0,0.1,HIST\nnot a log line\n", hdrlog.ErrFormat, "line 6 "},
		{"binary", "\x89PNG\r\n\x1a\n\x00\x00", hdrlog.ErrFormat, `line 1 is not a comment, legend or [Tag=T,]start,length,max,histogram interval: "\x89PNG"`},
		{"bad number", header + "Tag=a,0.0,x,0.1,HIST\n", hdrlog.ErrFormat, "line 5"},
		{"tag without comma", "Tag=a\n", hdrlog.ErrFormat, "line 1"},
		{"bad histogram", header + "Tag=a,0.0,1.0,0.1,bm90IGEgaGlzdG9ncmFt\n", hdrlog.ErrFormat, "interval 1"},
		{"empty", "", hdrlog.ErrEmpty, "no intervals"},
		{"header only", header, hdrlog.ErrEmpty, "no intervals"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := hdrlog.Load(strings.NewReader(tc.in))
			if l != nil || !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.msg) {
				t.Errorf("Load = %v, %v; want %v containing %q", l, err, tc.want, tc.msg)
			}
		})
	}
	readErr := errors.New("disk on fire")
	if _, err := hdrlog.Load(iotest.ErrReader(readErr)); !errors.Is(err, readErr) {
		t.Errorf("read error: %v", err)
	}
}

// TestMergeExact: merging the HDR logs of four workers (two intervals
// each, workers with different distributions) gives the p50/p99/p99.9 of
// one histogram built from all their values, not their average; the
// logs merged are left as they were.
func TestMergeExact(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	one := newHist()
	var logs []*hdrlog.Log
	var before []int64
	for w := range 4 {
		var buf bytes.Buffer
		lw, err := hdrlog.NewWriter(&buf, start)
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
			from := start.Add(time.Duration(iv) * time.Second)
			if err := lw.WriteInterval(from, from.Add(time.Second), "get.total", h); err != nil {
				t.Fatal(err)
			}
		}
		l, err := hdrlog.Load(&buf)
		if err != nil {
			t.Fatal(err)
		}
		logs = append(logs, l)
		before = append(before, l.Histogram("get.total").TotalCount())
	}
	m := hdrlog.Merge(logs...)
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
