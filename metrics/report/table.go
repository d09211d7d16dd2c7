package report

import (
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/HdrHistogram/hdrhistogram-go"

	"github.com/respmeter/respmeter/metrics/hdrlog"
)

// stat is one column of Table, one row per tag of Compare.
type stat struct {
	name  string
	value func(h *hdrhistogram.Histogram) int64 // count, or microseconds
	isMs  bool                                  // value is microseconds, printed as ms
}

// stats are the figures reported per tag. Percents are 0-100, as
// hdrhistogram's ValueAtQuantile takes them.
var stats = []stat{
	{"count", (*hdrhistogram.Histogram).TotalCount, false},
	pctStat("p50(ms)", 50),
	pctStat("p90(ms)", 90),
	pctStat("p99(ms)", 99),
	pctStat("p99.9(ms)", 99.9),
	pctStat("p99.99(ms)", 99.99),
	{"max(ms)", (*hdrhistogram.Histogram).Max, true},
}

func pctStat(name string, pct float64) stat {
	return stat{name, func(h *hdrhistogram.Histogram) int64 { return h.ValueAtQuantile(pct) }, true}
}

// floorMicros is the histograms' floor: respmeter records whole
// microseconds rounded up, at least 1 (metrics.toMicros), so a latency of
// 1 µs (or 0, as some clients' logs hold) says "at most 1 µs", not how
// much less.
const floorMicros = 1

// atFloor reports whether s is a latency whose value for h is at the floor.
func (s stat) atFloor(h *hdrhistogram.Histogram) bool {
	return s.isMs && h != nil && h.TotalCount() > 0 && s.value(h) <= floorMicros
}

// floorCell is how the tables show a latency at the floor.
const floorCell = "≤1µs"

// format returns s's value for h: the count, or milliseconds with 3 decimals
// (exact, the histograms hold whole microseconds), "≤1µs" at the 1 µs floor;
// "-" for a missing tag and for the latencies of an empty histogram.
func (s stat) format(h *hdrhistogram.Histogram) string {
	if h == nil || (s.isMs && h.TotalCount() == 0) {
		return "-"
	}
	if s.atFloor(h) {
		return floorCell
	}
	v := s.value(h)
	if !s.isMs {
		return strconv.FormatInt(v, 10)
	}
	return fmt.Sprintf("%d.%03d", v/1000, v%1000)
}

// ratio returns b's value of s over a's with 3 decimals; "-" if either is
// missing or a's is 0; "n/a" for latencies where either side is at the
// 1 µs floor, whose ratio would say nothing (1 µs against 885 ms read
// 885759.000).
func (s stat) ratio(a, b *hdrhistogram.Histogram) string {
	if a == nil || b == nil || (s.isMs && (a.TotalCount() == 0 || b.TotalCount() == 0)) {
		return "-"
	}
	if s.atFloor(a) || s.atFloor(b) {
		return "n/a"
	}
	va, vb := s.value(a), s.value(b)
	if va == 0 {
		return "-"
	}
	return strconv.FormatFloat(float64(vb)/float64(va), 'f', 3, 64)
}

func tagName(tag string) string {
	if tag == hdrlog.Untagged {
		return "(untagged)"
	}
	return tag
}

// Table writes l's percentile table to w: one row per tag, sorted by tag,
// with columns tag, count, p50, p90, p99, p99.9, p99.99 and max, latencies in
// milliseconds with 3 decimals (the log's values are microseconds; each is
// the highest value equivalent to the percentile's at the histogram's
// precision). Untagged intervals are shown as "(untagged)". It returns w's
// error.
func Table(w io.Writer, l *hdrlog.Log) error {
	header := []string{"tag"}
	for _, s := range stats {
		header = append(header, s.name)
	}
	rows := [][]string{header}
	for _, tag := range l.Tags() {
		h := l.Histogram(tag)
		row := []string{tagName(tag)}
		for _, s := range stats {
			row = append(row, s.format(h))
		}
		rows = append(rows, row)
	}
	return writeTable(w, rows, 1)
}

// Compare writes a side-by-side comparison of logs a and b to w, named nameA
// and nameB in the header (say "redis" and "valkey"; "a" and "b" if empty).
// For each tag found in either log, sorted, it writes one row per figure
// (count, p50, p90, p99, p99.9, p99.99, max; latencies in milliseconds with 3
// decimals; "≤1µs" at the histograms' 1 µs floor) with columns tag, stat,
// a's value, b's value and b/a, the ratio with 3 decimals: above 1 means b
// is slower (or, for count, did more). Values of a tag missing from a log,
// and ratios without both values or with a zero divisor, are "-"; ratios of
// a latency at the floor on either side are "n/a". It returns w's error.
func Compare(w io.Writer, a, b *hdrlog.Log, nameA, nameB string) error {
	if nameA == "" {
		nameA = "a"
	}
	if nameB == "" {
		nameB = "b"
	}
	rows := [][]string{{"tag", "stat", nameA, nameB, nameB + "/" + nameA}}
	for _, tag := range unionTags(a, b) {
		ha, hb := a.Histogram(tag), b.Histogram(tag)
		for _, s := range stats {
			rows = append(rows, []string{tagName(tag), s.name, s.format(ha), s.format(hb), s.ratio(ha, hb)})
		}
	}
	return writeTable(w, rows, 2)
}

// unionTags returns the tags of a and b, sorted, each once.
func unionTags(a, b *hdrlog.Log) []string {
	tags := append(a.Tags(), b.Tags()...)
	slices.Sort(tags)
	return slices.Compact(tags)
}

// writeTable writes rows as columns separated by two spaces, the first left
// columns left-aligned and the others right-aligned, without trailing spaces. Widths count runes.
func writeTable(w io.Writer, rows [][]string, left int) error {
	var widths []int
	for _, row := range rows {
		for i, cell := range row {
			if i == len(widths) {
				widths = append(widths, 0)
			}
			widths[i] = max(widths[i], utf8.RuneCountInString(cell))
		}
	}
	var b strings.Builder
	for _, row := range rows {
		var line strings.Builder
		for i, cell := range row {
			if i > 0 {
				line.WriteString("  ")
			}
			pad := strings.Repeat(" ", widths[i]-utf8.RuneCountInString(cell))
			if i < left {
				line.WriteString(cell + pad)
			} else {
				line.WriteString(pad + cell)
			}
		}
		b.WriteString(strings.TrimRight(line.String(), " "))
		b.WriteByte('\n')
	}
	_, err := io.WriteString(w, b.String())
	return err
}
