package report

import (
	"encoding/csv"
	"encoding/json"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"

	"github.com/respmeter/respmeter/metrics/hdrlog"
)

// Machine-readable output of `respmeter report --json` and `--csv`. The
// figures are those of Table and Compare (count, p50, p90, p99, p99.9,
// p99.99, max), with latencies in seconds, as /stats and the proxy's
// --summary give them: the log's whole microseconds divided by 10^6,
// written in the shortest decimal form that reads back to the same float
// (so microseconds·10^-6 round-trip exactly).

// key returns the JSON and CSV name of s: "count", "p50", …, "max".
func (s stat) key() string {
	k, _, _ := strings.Cut(s.name, "(")
	return k
}

// number returns s's figure for h as a JSON/CSV number: the count, or
// seconds; ok is false where Table prints "-".
func (s stat) number(h *hdrhistogram.Histogram) (v float64, ok bool) {
	if h == nil || (s.isMs && h.TotalCount() == 0) {
		return 0, false
	}
	v = float64(s.value(h))
	if s.isMs {
		v /= 1e6
	}
	return v, true
}

// ratioNumber returns b's figure of s over a's, as ratio prints it; ok is
// false where ratio prints "-" or "n/a".
func (s stat) ratioNumber(a, b *hdrhistogram.Histogram) (float64, bool) {
	va, okA := s.number(a)
	vb, okB := s.number(b)
	if !okA || !okB || va == 0 || s.atFloor(a) || s.atFloor(b) {
		return 0, false
	}
	return vb / va, true
}

// LogJSON is the document of Log.WriteJSON, and each side of CompareJSON.
type LogJSON struct {
	// Name is the log's name (its file's base name, or --names).
	Name string `json:"name"`
	// Start and End bound the log's intervals; Intervals counts them.
	Start     time.Time `json:"start"`
	End       time.Time `json:"end"`
	Intervals int       `json:"intervals"`
	// Unit is "seconds": the unit of every latency below.
	Unit string `json:"unit"`
	// Tags maps each tag ("" for untagged intervals) to its figures:
	// "count" and, when count > 0, "p50", "p90", "p99", "p99.9",
	// "p99.99" and "max" in seconds.
	Tags map[string]map[string]float64 `json:"tags"`
}

// CompareJSON is the document of WriteCompareJSON.
type CompareJSON struct {
	A LogJSON `json:"a"`
	B LogJSON `json:"b"`
	// Ratios maps every tag of either log to B's figure over A's, per
	// figure, left out where Compare prints "-" (a side missing, or A's
	// figure 0) or "n/a" (a latency at the 1 µs floor).
	Ratios map[string]map[string]float64 `json:"ratios"`
}

// JSON returns l's figures as a LogJSON named name.
func JSON(l *hdrlog.Log, name string) LogJSON {
	doc := LogJSON{Name: name, Start: l.Start().UTC(), End: l.End().UTC(), Intervals: l.Intervals(),
		Unit: "seconds", Tags: make(map[string]map[string]float64, len(l.Tags()))}
	for _, tag := range l.Tags() {
		doc.Tags[tag] = figures(l.Histogram(tag))
	}
	return doc
}

// figures returns the figures of h that are not "-", by key.
func figures(h *hdrhistogram.Histogram) map[string]float64 {
	m := make(map[string]float64, len(stats))
	for _, s := range stats {
		if v, ok := s.number(h); ok {
			m[s.key()] = v
		}
	}
	return m
}

// WriteJSON writes JSON(l, name) to w as indented JSON. It returns w's error.
func WriteJSON(w io.Writer, l *hdrlog.Log, name string) error {
	return writeJSON(w, JSON(l, name))
}

// WriteCompareJSON writes the comparison of a and b (named nameA and nameB)
// to w as an indented CompareJSON. It returns w's error.
func WriteCompareJSON(w io.Writer, a, b *hdrlog.Log, nameA, nameB string) error {
	doc := CompareJSON{A: JSON(a, nameA), B: JSON(b, nameB), Ratios: map[string]map[string]float64{}}
	for _, tag := range unionTags(a, b) {
		m := map[string]float64{}
		for _, s := range stats {
			if r, ok := s.ratioNumber(a.Histogram(tag), b.Histogram(tag)); ok {
				m[s.key()] = r
			}
		}
		doc.Ratios[tag] = m
	}
	return writeJSON(w, doc)
}

func writeJSON(w io.Writer, doc any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(doc)
}

// csvHeader returns the header of the single-log CSV: tag, count, then
// p50_seconds … max_seconds.
func csvHeader() []string {
	h := []string{"tag"}
	for _, s := range stats {
		if s.isMs {
			h = append(h, s.key()+"_seconds")
		} else {
			h = append(h, s.key())
		}
	}
	return h
}

// csvNumber formats a figure for CSV: "" where Table prints "-".
func csvNumber(v float64, ok bool) string {
	if !ok {
		return ""
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}

// WriteCSV writes l's figures to w as RFC 4180 CSV: the header tag, count,
// p50_seconds, p90_seconds, p99_seconds, p99.9_seconds, p99.99_seconds,
// max_seconds, then one row per tag, sorted ("" for untagged intervals),
// an empty cell where Table prints "-". It returns w's error.
func WriteCSV(w io.Writer, l *hdrlog.Log) error {
	cw := csv.NewWriter(w)
	_ = cw.Write(csvHeader())
	for _, tag := range l.Tags() {
		row := []string{tag}
		for _, s := range stats {
			row = append(row, csvNumber(s.number(l.Histogram(tag))))
		}
		_ = cw.Write(row)
	}
	cw.Flush()
	return cw.Error()
}

// WriteCompareCSV writes the comparison of a and b to w as CSV, in the
// long form of Compare: the header tag, stat, nameA, nameB, ratio, then per
// tag of either log (sorted) one row per figure (stat "count", or
// "p50_seconds" … "max_seconds"), an empty cell where Compare prints "-".
// It returns w's error.
func WriteCompareCSV(w io.Writer, a, b *hdrlog.Log, nameA, nameB string) error {
	cw := csv.NewWriter(w)
	_ = cw.Write([]string{"tag", "stat", nameA, nameB, "ratio"})
	header := csvHeader()[1:]
	for _, tag := range unionTags(a, b) {
		ha, hb := a.Histogram(tag), b.Histogram(tag)
		for i, s := range stats {
			_ = cw.Write([]string{tag, header[i], csvNumber(s.number(ha)), csvNumber(s.number(hb)), csvNumber(s.ratioNumber(ha, hb))})
		}
	}
	cw.Flush()
	return cw.Error()
}
