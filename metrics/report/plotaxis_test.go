package report_test

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"testing"

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
	if err := report.Plot(logPath, map[string]*report.Log{"redis": a}, report.PlotOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := report.Plot(linPath, map[string]*report.Log{"redis": a}, report.PlotOptions{Linear: true}); err != nil {
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
	if err := report.Plot(filepath.Join(dir, "floor.svg"), map[string]*report.Log{"c": floor}, report.PlotOptions{}); err != nil {
		t.Errorf("a log at the floor: %v", err)
	}
}
