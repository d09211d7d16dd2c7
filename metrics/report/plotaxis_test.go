package report_test

import (
	"html"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/respmeter/respmeter/metrics/hdrlog"
	"github.com/respmeter/respmeter/metrics/report"
)

// svgLabels returns the text of every <text> element of the SVG at path.
func svgLabels(t *testing.T, path string) []string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, m := range regexp.MustCompile(`<text[^>]*>([^<]*)</text>`).FindAllSubmatch(data, -1) {
		out = append(out, string(m[1]))
	}
	return out
}

// TestPlotLogAxis: the latency axis is logarithmic by default, ticked by
// decades around the data (redis: 0.05 .. 2.1 ms, so 0.01 .. 10), and
// linear from 0 with Linear; a log at the 1 µs floor (0 µs in a client's
// log) still plots on the log axis.
func TestPlotLogAxis(t *testing.T) {
	a := load(t, writeLog(t, redis))
	dir := t.TempDir()
	logPath, linPath := filepath.Join(dir, "log.svg"), filepath.Join(dir, "lin.svg")
	if err := report.Plot(logPath, map[string]*hdrlog.Log{"redis": a}, report.PlotOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := report.Plot(linPath, map[string]*hdrlog.Log{"redis": a}, report.PlotOptions{Linear: true}); err != nil {
		t.Fatal(err)
	}
	logL, linL := svgLabels(t, logPath), svgLabels(t, linPath)
	for _, want := range []string{"0.01", "0.1", "1", "10", "Latency (ms, log scale)"} {
		if !slices.Contains(logL, want) {
			t.Errorf("log axis lacks label %q: %q", want, logL)
		}
	}
	if slices.Contains(logL, "0") || slices.Contains(logL, "2") {
		t.Errorf("log axis has linear ticks: %q", logL)
	}
	for _, want := range []string{"0", "1", "2", "Latency (ms)"} {
		if !slices.Contains(linL, want) {
			t.Errorf("linear axis lacks label %q: %q", want, linL)
		}
	}
	floor := load(t, writeLog(t, []interval{{0, "get.queue", []int64{0, 1, 1, 3}}}))
	if err := report.Plot(filepath.Join(dir, "floor.svg"), map[string]*hdrlog.Log{"c": floor}, report.PlotOptions{}); err != nil {
		t.Errorf("a log at the floor: %v", err)
	}
}

// svgText is one <text> element of a plot's SVG in viewBox units: its x
// and y attributes, its font size and whether it sits in a rotated group
// (the y axis label).
type svgText struct {
	x, y, size float64
	text       string
	rotated    bool
}

// svgTexts parses the SVG at path: its viewBox width and height, and its
// <text> elements (vgsvg draws in a frame flipped by scale(1,-1)
// translate(0,-h) and flips each text back, so a text's baseline starts at
// (x, h+y) of the viewBox; in the rotate(90) group it starts at (y, h-x) and
// runs upwards).
func svgTexts(t *testing.T, path string) (w, h float64, texts []svgText) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	vb := regexp.MustCompile(`viewBox="0 0 ([0-9.]+) ([0-9.]+)"`).FindSubmatch(data)
	if vb == nil {
		t.Fatalf("%s: no viewBox", path)
	}
	w, _ = strconv.ParseFloat(string(vb[1]), 64)
	h, _ = strconv.ParseFloat(string(vb[2]), 64)
	re := regexp.MustCompile(`(<g transform="rotate\(90\)">\s*)?<text x="([-0-9.e]+)" y="([-0-9.e]+)"[^>]*font-size:([0-9.]+)px[^>]*>([^<]*)</text>`)
	for _, m := range re.FindAllSubmatch(data, -1) {
		x, _ := strconv.ParseFloat(string(m[2]), 64)
		y, _ := strconv.ParseFloat(string(m[3]), 64)
		size, _ := strconv.ParseFloat(string(m[4]), 64)
		texts = append(texts, svgText{x: x, y: y, size: size, text: html.UnescapeString(string(m[5])), rotated: len(m[1]) > 0})
	}
	return w, h, texts
}

// fallbackEm is a generous width in em of a character drawn in a face the
// plot did not measure (DejaVu Sans: digits 0.64 em, '%' 0.95 em; DejaVu
// Sans Mono: 0.6 em each).
func fallbackEm(r rune) float64 {
	switch r {
	case '%', 'm', 'w', 'M', 'W', '@':
		return 1.0
	case '.', ',', ':', ' ', 'i', 'l', '1':
		return 0.65 // as wide as a digit in a monospace fallback
	}
	return 0.7
}

// TestPlotLabelsInside: the SVG names a generic family after its fonts,
// and every label, drawn from where the layout put its start in a fallback
// face wider than the measured one (fallbackEm), stays inside the viewBox:
// the last x tick (99.99% here) is not clipped.
func TestPlotLabelsInside(t *testing.T) {
	long := load(t, writeLog(t, []interval{{0, "get.total", seq(1, 1, 200_000)}}))
	for _, tc := range []struct {
		name string
		logs map[string]*hdrlog.Log
		opts report.PlotOptions
	}{
		{"log", map[string]*hdrlog.Log{"redis": load(t, writeLog(t, redis))}, report.PlotOptions{}},
		{"linear", map[string]*hdrlog.Log{"redis": load(t, writeLog(t, redis))}, report.PlotOptions{Linear: true}},
		{"long tail", map[string]*hdrlog.Log{"a": long, "b": load(t, writeLog(t, redis))}, report.PlotOptions{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "p.svg")
			if err := report.Plot(path, tc.logs, tc.opts); err != nil {
				t.Fatal(err)
			}
			data, _ := os.ReadFile(path)
			for _, m := range regexp.MustCompile(`font-family:([^;"]*)`).FindAllSubmatch(data, -1) {
				fams := strings.Split(string(m[1]), ",")
				if last := strings.TrimSpace(fams[len(fams)-1]); len(fams) < 2 || (last != "sans-serif" && last != "monospace") {
					t.Errorf("font-family %q: want a list ending in a generic family", m[1])
					break
				}
			}
			w, h, texts := svgTexts(t, path)
			ticks := 0
			for _, tx := range texts {
				var width float64
				for _, r := range tx.text {
					width += fallbackEm(r) * tx.size
				}
				// Ink from 0.75 em above the baseline to 0.25 em below.
				if tx.rotated {
					if x, y := tx.y, h-tx.x; x-0.75*tx.size < 0 || x+0.25*tx.size > w || y > h || y-width < 0 {
						t.Errorf("rotated label %q from (%g, %g) upwards, %g long, leaves the %gx%g viewBox", tx.text, x, y, width, w, h)
					}
					continue
				}
				if strings.HasSuffix(tx.text, "%") {
					ticks++
				}
				if x, y := tx.x, h+tx.y; x < 0 || x+width > w || y-0.75*tx.size < 0 || y+0.25*tx.size > h {
					t.Errorf("label %q from (%g, %g), %g wide in a fallback face, leaves the %gx%g viewBox", tx.text, x, y, width, w, h)
				}
			}
			if ticks < 4 {
				t.Errorf("%d percentile tick labels, want at least 4: %+v", ticks, texts)
			}
		})
	}
}
