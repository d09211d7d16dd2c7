package report_test

import (
	"bytes"
	"errors"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/respmeter/respmeter/internal/goldenfile"

	"github.com/HdrHistogram/hdrhistogram-go"

	"github.com/respmeter/respmeter/metrics/hdrlog"
	"github.com/respmeter/respmeter/metrics/report"
)

var t0 = time.Date(2024, 5, 6, 7, 8, 9, 0, time.UTC)

// newHist returns a histogram shaped as package metrics makes them
// (microseconds, 1 µs .. 1 h, 3 significant digits) holding values.
func newHist(values ...int64) *hdrhistogram.Histogram {
	h := hdrhistogram.New(1, 3_600_000_000, 3)
	for _, v := range values {
		if err := h.RecordValue(v); err != nil {
			panic(err)
		}
	}
	return h
}

// seq returns n values from, from+step, ...
func seq(from, step int64, n int) []int64 {
	vs := make([]int64, n)
	for i := range vs {
		vs[i] = from + int64(i)*step
	}
	return vs
}

// interval is one line of a test log: values recorded in second sec.
type interval struct {
	sec    int
	tag    string
	values []int64
}

// writeLog writes intervals with hdrlog.Writer and returns the log text.
func writeLog(t *testing.T, intervals []interval) []byte {
	t.Helper()
	var buf bytes.Buffer
	w, err := hdrlog.NewWriter(&buf, t0)
	if err != nil {
		t.Fatal(err)
	}
	for _, iv := range intervals {
		s := t0.Add(time.Duration(iv.sec) * time.Second)
		if err := w.WriteInterval(s, s.Add(time.Second), iv.tag, newHist(iv.values...)); err != nil {
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

// redis and valkey are two runs: get.total over two intervals, tags found
// in only one of them, an empty histogram.
var (
	redis = []interval{
		{0, "get.total", seq(100, 1, 1000)}, // 100..1099 µs
		{0, "get.upstream", seq(50, 1, 1000)},
		{0, "set.total", seq(200, 2, 500)},
		{1, "get.total", seq(1100, 1, 1000)}, // 1100..2099 µs
		{1, "get.upstream", seq(1050, 1, 1000)},
		{1, "ping.total", nil},
	}
	valkey = []interval{
		{0, "get.total", seq(90, 1, 1000)},
		{0, "get.upstream", seq(40, 1, 1000)},
		{0, "del.total", []int64{7, 8, 9, 250_000}},
		{1, "get.total", seq(1000, 2, 1000)},
		{1, "get.upstream", seq(1000, 2, 1000)},
	}
)

func TestTable(t *testing.T) {
	var buf bytes.Buffer
	if err := report.Table(&buf, load(t, writeLog(t, redis))); err != nil {
		t.Fatal(err)
	}
	golden(t, "table.golden", buf.Bytes())
	// Spot check against the histogram itself: p99 of 100..2099 µs.
	if want := newHist(seq(100, 1, 2000)...).ValueAtQuantile(99); !strings.Contains(buf.String(), "  2.079  ") || want != 2079 {
		t.Errorf("get.total p99: want %d µs as 2.079 ms in\n%s", want, buf.String())
	}
}

func TestCompare(t *testing.T) {
	var buf bytes.Buffer
	a, b := load(t, writeLog(t, redis)), load(t, writeLog(t, valkey))
	if err := report.Compare(&buf, a, b, "redis", "valkey"); err != nil {
		t.Fatal(err)
	}
	golden(t, "compare.golden", buf.Bytes())
}

func TestWriteError(t *testing.T) {
	l := load(t, writeLog(t, redis))
	if err := report.Table(errWriter{}, l); err == nil {
		t.Error("Table: no error from a failing writer")
	}
	if err := report.Compare(errWriter{}, l, l, "", ""); err == nil {
		t.Error("Compare: no error from a failing writer")
	}
}

type errWriter struct{}

func (errWriter) Write([]byte) (int, error) { return 0, errors.New("broken pipe") }

func TestPlot(t *testing.T) {
	a, b := load(t, writeLog(t, redis)), load(t, writeLog(t, valkey))
	dir := t.TempDir()
	for _, tc := range []struct {
		name string
		logs map[string]*hdrlog.Log
	}{
		{"one", map[string]*hdrlog.Log{"redis": a}},
		{"compare", map[string]*hdrlog.Log{"redis": a, "valkey": b}},
	} {
		t.Run(tc.name+"/png", func(t *testing.T) {
			path := filepath.Join(dir, tc.name+".png")
			if err := report.Plot(path, tc.logs, report.PlotOptions{}); err != nil {
				t.Fatal(err)
			}
			f, err := os.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			img, err := png.Decode(f)
			if err != nil {
				t.Fatal(err)
			}
			r := img.Bounds()
			if r.Dx() == 0 || r.Dy() == 0 {
				t.Fatalf("size %v", r)
			}
			first, same := img.At(r.Min.X, r.Min.Y), true
			for y := r.Min.Y; y < r.Max.Y && same; y++ {
				for x := r.Min.X; x < r.Max.X && same; x++ {
					same = img.At(x, y) == first
				}
			}
			if same {
				t.Error("all pixels are the same")
			}
		})
		t.Run(tc.name+"/svg", func(t *testing.T) {
			path := filepath.Join(dir, tc.name+".svg")
			if err := report.Plot(path, tc.logs, report.PlotOptions{}); err != nil {
				t.Fatal(err)
			}
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			for _, want := range []string{"<svg", "99.99%", "get.total", "Latency (ms"} {
				if !bytes.Contains(data, []byte(want)) {
					t.Errorf("SVG lacks %q", want)
				}
			}
		})
	}
}

func TestPlotErrors(t *testing.T) {
	dir := t.TempDir()
	a := load(t, writeLog(t, redis))
	empty := load(t, writeLog(t, []interval{{0, "ping.total", nil}}))
	for _, tc := range []struct {
		name, file string
		logs       map[string]*hdrlog.Log
		msg        string
	}{
		{"unknown format", "x.gif", map[string]*hdrlog.Log{"a": a}, `unknown format ".gif"`},
		{"no extension", "x", map[string]*hdrlog.Log{"a": a}, "unknown format"},
		{"no logs", "x.png", nil, "no histogram"},
		{"empty histograms", "x.svg", map[string]*hdrlog.Log{"a": empty}, "no histogram"},
		{"bad dir", "nodir/x.png", map[string]*hdrlog.Log{"a": a}, "no such file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, tc.file)
			err := report.Plot(path, tc.logs, report.PlotOptions{})
			if err == nil || !strings.Contains(err.Error(), tc.msg) {
				t.Errorf("err %v, want one containing %q", err, tc.msg)
			}
			if _, serr := os.Stat(path); serr == nil {
				t.Errorf("%s was created", tc.file)
			}
		})
	}
}

// golden compares got with testdata/name (-update rewrites it).
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	goldenfile.Check(t, filepath.Join("testdata", name), got)
}
