package report_test

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
	"testing"

	"github.com/respmeter/respmeter/metrics/hdrlog"
	"github.com/respmeter/respmeter/metrics/report"
)

// figureKeys are the figures of the table, as JSON names them.
var figureKeys = []string{"count", "p50", "p90", "p99", "p99.9", "p99.99", "max"}

// tableCells reads a text table (Table) into map[tag][column]cell, the
// columns named by figureKeys.
func tableCells(t *testing.T, text string) map[string]map[string]string {
	t.Helper()
	out := map[string]map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(text), "\n")[1:] {
		f := strings.Fields(line)
		if len(f) != 1+len(figureKeys) {
			t.Fatalf("table line %q", line)
		}
		tag := f[0]
		if tag == "(untagged)" {
			tag = hdrlog.Untagged
		}
		out[tag] = map[string]string{}
		for i, k := range figureKeys {
			out[tag][k] = f[1+i]
		}
	}
	return out
}

// asTableCell formats a JSON/CSV figure as the text table does: the count,
// or milliseconds with 3 decimals from whole microseconds.
func asTableCell(key string, v float64) string {
	if key == "count" {
		return strconv.FormatInt(int64(v), 10)
	}
	us := int64(math.Round(v * 1e6))
	if float64(us)/1e6 != v {
		return fmt.Sprintf("not whole microseconds: %v", v)
	}
	if us <= 1 {
		return "≤1µs"
	}
	return fmt.Sprintf("%d.%03d", us/1000, us%1000)
}

// TestJSONRoundTrip: --json gives, for every tag and figure, the value the
// text table prints (seconds that read back to the same whole
// microseconds), nothing where the table prints "-", and the log's span.
func TestJSONRoundTrip(t *testing.T) {
	l := load(t, writeLog(t, redis))
	var table, js bytes.Buffer
	if err := report.Table(&table, l); err != nil {
		t.Fatal(err)
	}
	if err := report.WriteJSON(&js, l, "redis"); err != nil {
		t.Fatal(err)
	}
	var doc report.LogJSON
	dec := json.NewDecoder(&js)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&doc); err != nil {
		t.Fatalf("decode: %v\n%s", err, js.String())
	}
	if doc.Name != "redis" || doc.Unit != "seconds" || doc.Intervals != 6 || !doc.Start.Equal(t0) || !doc.End.Equal(t0.Add(2e9)) {
		t.Errorf("header: %+v", doc)
	}
	want := tableCells(t, table.String())
	if len(doc.Tags) != len(want) {
		t.Errorf("%d tags in JSON, %d in the table", len(doc.Tags), len(want))
	}
	for tag, cells := range want {
		got := doc.Tags[tag]
		for _, k := range figureKeys {
			v, ok := got[k]
			switch {
			case cells[k] == "-" && ok:
				t.Errorf("%s %s: JSON %v where the table has -", tag, k, v)
			case cells[k] != "-" && !ok:
				t.Errorf("%s %s: missing from JSON, table %s", tag, k, cells[k])
			case ok && asTableCell(k, v) != cells[k]:
				t.Errorf("%s %s: JSON %v reads %s, table %s", tag, k, v, asTableCell(k, v), cells[k])
			}
		}
	}
	if n, pct := doc.Tags["get.total"]["count"], doc.Tags["ping.total"]; n != 2000 || len(pct) != 1 || pct["count"] != 0 {
		t.Errorf("get.total count %v (want 2000), ping.total %v (want only count 0)", n, pct)
	}
}

// TestCSVRoundTrip: --csv holds the same figures as the text table, under
// a header that names the unit.
func TestCSVRoundTrip(t *testing.T) {
	l := load(t, writeLog(t, redis))
	var table, out bytes.Buffer
	if err := report.Table(&table, l); err != nil {
		t.Fatal(err)
	}
	if err := report.WriteCSV(&out, l); err != nil {
		t.Fatal(err)
	}
	recs, err := csv.NewReader(&out).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	wantHeader := "tag,count,p50_seconds,p90_seconds,p99_seconds,p99.9_seconds,p99.99_seconds,max_seconds"
	if got := strings.Join(recs[0], ","); got != wantHeader {
		t.Fatalf("header %q, want %q", got, wantHeader)
	}
	want := tableCells(t, table.String())
	if len(recs)-1 != len(want) {
		t.Errorf("%d CSV rows, %d table rows", len(recs)-1, len(want))
	}
	for _, rec := range recs[1:] {
		cells, ok := want[rec[0]]
		if !ok {
			t.Errorf("CSV tag %q not in the table", rec[0])
			continue
		}
		for i, k := range figureKeys {
			cell := rec[1+i]
			if cell == "" {
				if cells[k] != "-" {
					t.Errorf("%s %s: empty in CSV, table %s", rec[0], k, cells[k])
				}
				continue
			}
			v, err := strconv.ParseFloat(cell, 64)
			if err != nil || asTableCell(k, v) != cells[k] {
				t.Errorf("%s %s: CSV %q (%v), table %s", rec[0], k, cell, err, cells[k])
			}
		}
	}
}

// TestCompareExports: the JSON and CSV comparisons hold both logs' figures
// and the ratios Compare prints (to its 3 decimals), with nothing where it
// prints "-".
func TestCompareExports(t *testing.T) {
	a, b := load(t, writeLog(t, redis)), load(t, writeLog(t, valkey))
	var text, js, cs bytes.Buffer
	if err := report.Compare(&text, a, b, "redis", "valkey"); err != nil {
		t.Fatal(err)
	}
	if err := report.WriteCompareJSON(&js, a, b, "redis", "valkey"); err != nil {
		t.Fatal(err)
	}
	if err := report.WriteCompareCSV(&cs, a, b, "redis", "valkey"); err != nil {
		t.Fatal(err)
	}
	var doc report.CompareJSON
	if err := json.Unmarshal(js.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	recs, err := csv.NewReader(&cs).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(recs[0], ","); got != "tag,stat,redis,valkey,ratio" {
		t.Fatalf("CSV header %q", got)
	}
	// The text rows: tag, stat, a, b, ratio.
	lines := strings.Split(strings.TrimSpace(text.String()), "\n")[1:]
	if len(lines) != len(recs)-1 {
		t.Fatalf("%d text rows, %d CSV rows", len(lines), len(recs)-1)
	}
	if doc.A.Name != "redis" || doc.B.Name != "valkey" || len(doc.Ratios) != len(lines)/len(figureKeys) {
		t.Errorf("names %q %q, %d ratio tags for %d text rows", doc.A.Name, doc.B.Name, len(doc.Ratios), len(lines))
	}
	for i, line := range lines {
		f := strings.Fields(line)
		tag, rec := f[0], recs[1+i]
		key := figureKeys[i%len(figureKeys)]
		if rec[0] != tag || strings.TrimSuffix(rec[1], "_seconds") != key {
			t.Fatalf("row %d: CSV %v, text %q", i, rec, line)
		}
		for side, cell := range []string{f[2], f[3]} {
			jsv, ok := []report.LogJSON{doc.A, doc.B}[side].Tags[tag][key]
			csvCell := rec[2+side]
			if cell == "-" {
				if ok || csvCell != "" {
					t.Errorf("%s %s side %d: JSON %v (present %v), CSV %q where the text has -", tag, key, side, jsv, ok, csvCell)
				}
				continue
			}
			v, err := strconv.ParseFloat(csvCell, 64)
			if !ok || err != nil || asTableCell(key, jsv) != cell || asTableCell(key, v) != cell {
				t.Errorf("%s %s side %d: JSON %v, CSV %q, text %s", tag, key, side, jsv, csvCell, cell)
			}
		}
		r, ok := doc.Ratios[tag][key]
		switch {
		case f[4] == "-" || f[4] == "n/a":
			if ok || rec[4] != "" {
				t.Errorf("%s %s: ratio JSON %v CSV %q where the text has -", tag, key, r, rec[4])
			}
		case !ok || strconv.FormatFloat(r, 'f', 3, 64) != f[4]:
			t.Errorf("%s %s: ratio JSON %v (present %v), text %s", tag, key, r, ok, f[4])
		default:
			if c, err := strconv.ParseFloat(rec[4], 64); err != nil || c != r {
				t.Errorf("%s %s: ratio CSV %q, JSON %v", tag, key, rec[4], r)
			}
		}
	}
}

// TestCompareFloor: a latency at the histograms' 1 µs floor shows as ≤1µs
// and its ratio as n/a (it read 885759.000 against 885.759 ms), in the text
// and, left out, in JSON and CSV; a count's ratio stays.
func TestCompareFloor(t *testing.T) {
	a := load(t, writeLog(t, []interval{{0, "get.queue", []int64{1, 1, 1}}}))
	b := load(t, writeLog(t, []interval{{0, "get.queue", []int64{885_759, 885_759, 885_759}}}))
	var text, js, cs bytes.Buffer
	if err := report.Compare(&text, a, b, "a", "b"); err != nil {
		t.Fatal(err)
	}
	want := "tag        stat          a        b       b/a\n" +
		"get.queue  count         3        3     1.000\n" +
		"get.queue  p50(ms)    ≤1µs  885.759       n/a\n" +
		"get.queue  p90(ms)    ≤1µs  885.759       n/a\n" +
		"get.queue  p99(ms)    ≤1µs  885.759       n/a\n" +
		"get.queue  p99.9(ms)  ≤1µs  885.759       n/a\n" +
		"get.queue  p99.99(ms) ≤1µs  885.759       n/a\n" +
		"get.queue  max(ms)    ≤1µs  885.759       n/a\n"
	got := text.String()
	norm := func(s string) string { // compare cells, not padding
		var out []string
		for _, l := range strings.Split(strings.TrimSpace(s), "\n") {
			out = append(out, strings.Join(strings.Fields(l), " "))
		}
		return strings.Join(out, "\n")
	}
	if norm(got) != norm(want) {
		t.Errorf("text:\n%s\nwant:\n%s", got, want)
	}
	if err := report.WriteCompareJSON(&js, a, b, "a", "b"); err != nil {
		t.Fatal(err)
	}
	var doc report.CompareJSON
	if err := json.Unmarshal(js.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	if r := doc.Ratios["get.queue"]; len(r) != 1 || r["count"] != 1 || doc.A.Tags["get.queue"]["p50"] != 1e-6 {
		t.Errorf("JSON ratios %v (want only count 1), a's p50 %v (want 1e-06)", r, doc.A.Tags["get.queue"]["p50"])
	}
	if err := report.WriteCompareCSV(&cs, a, b, "a", "b"); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(cs.String(), "get.queue,p50_seconds,1e-06,0.885759,\n") {
		t.Errorf("CSV:\n%s", cs.String())
	}
}
