package main

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	"github.com/spf13/cobra"

	"github.com/respmeter/respmeter/internal/redistest"
	"github.com/respmeter/respmeter/metrics"
	"github.com/respmeter/respmeter/metrics/hdrlog"
	"github.com/respmeter/respmeter/metrics/report"
)

// execReport runs "respmeter report args..." in-process and returns its
// output and exit code. Once the CLI registers the report command it goes
// through run, as a user would; until then through a root made here that
// reports errors as run does.
func execReport(t testing.TB, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errb bytes.Buffer
	a := &app{stdout: &out, stderr: &errb, lookupEnv: func(string) (string, bool) { return "", false }, environ: func() []string { return nil }}
	if slices.ContainsFunc(a.rootCmd().Commands(), func(c *cobra.Command) bool { return c.Name() == "report" }) {
		code = a.run(context.Background(), append([]string{"report"}, args...))
		return out.String(), errb.String(), code
	}
	root := &cobra.Command{Use: "respmeter", SilenceErrors: true, SilenceUsage: true}
	root.CompletionOptions.DisableDefaultCmd = true
	root.SetOut(&out)
	root.SetErr(&errb)
	root.AddCommand(newReportCmd(&out, &errb))
	root.SetArgs(append([]string{"report"}, args...))
	err := root.Execute()
	if err == nil {
		return out.String(), errb.String(), exitOK
	}
	// As app.run does.
	var ee *exitError
	if !errors.As(err, &ee) {
		ee = &exitError{code: exitUsage, err: err, hint: "Run 'respmeter --help' for usage."}
	}
	if ee.err != nil {
		for _, line := range errorLines(ee.err) {
			errb.WriteString("respmeter: " + line + "\n")
		}
	}
	if ee.hint != "" {
		errb.WriteString(ee.hint + "\n")
	}
	return out.String(), errb.String(), ee.code
}

// writeRunLog writes the interval log of one run to dir/name with
// startHDRLog: the batches recorded on a fresh Set across two intervals,
// the second written by stop.
func writeRunLog(t *testing.T, dir, name string, first, second []batch) string {
	t.Helper()
	set := metrics.NewSet(1, hdrTestNames)
	path := filepath.Join(dir, name)
	stop, err := startHDRLog(context.Background(), set, path, 20*time.Millisecond, nil)
	if err != nil {
		t.Fatal(err)
	}
	feed(set, first...)
	waitLines(t, path, "get.total", 1)
	feed(set, second...)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	return path
}

// testRuns writes two runs' logs, redis.hlog and valkey.hlog, to a
// temporary directory. valkey is slower on GET, has no think times and
// has PING, which redis has not.
func testRuns(t *testing.T) (redis, valkey string) {
	t.Helper()
	dir := t.TempDir()
	redis = writeRunLog(t, dir, "redis.hlog",
		[]batch{{cmd: hdrGet, n: 1000}, {cmd: hdrSet, n: 400, think: 100}},
		[]batch{{cmd: hdrGet, n: 500, scale: 1.5}, {cmd: hdrSet, n: 100}})
	valkey = writeRunLog(t, dir, "valkey.hlog",
		[]batch{{cmd: hdrGet, n: 1000, scale: 1.25}, {cmd: hdrSet, n: 400}},
		[]batch{{cmd: hdrGet, n: 500, scale: 2}, {cmd: hdrSet, n: 100}, {cmd: hdrPing, n: 10, scale: 0.1}})
	return redis, valkey
}

func TestReportTable(t *testing.T) {
	redis, _ := testRuns(t)
	stdout, stderr, code := execReport(t, redis)
	if code != exitOK || stderr != "" {
		t.Fatalf("exit %d, stderr:\n%s", code, stderr)
	}
	checkGolden(t, "report_table.golden", stdout)
}

func TestReportCompare(t *testing.T) {
	redis, valkey := testRuns(t)
	stdout, stderr, code := execReport(t, redis, "--compare", valkey)
	if code != exitOK || stderr != "" {
		t.Fatalf("exit %d, stderr:\n%s", code, stderr)
	}
	checkGolden(t, "report_compare.golden", stdout)

	named, stderr, code := execReport(t, redis, "--compare", valkey, "--names", "before, after")
	if code != exitOK || stderr != "" {
		t.Fatalf("--names: exit %d, stderr:\n%s", code, stderr)
	}
	header, body, _ := strings.Cut(named, "\n")
	_, wantBody, _ := strings.Cut(stdout, "\n")
	if f := strings.Fields(header); !slices.Equal(f, []string{"tag", "stat", "before", "after", "after/before"}) || body != wantBody {
		t.Errorf("--names before,after: header %q; output\n%s\nwant the rows of\n%s", header, named, stdout)
	}
}

func TestReportPlot(t *testing.T) {
	redis, valkey := testRuns(t)
	dir := t.TempDir()

	pngPath := filepath.Join(dir, "redis.png")
	stdout, stderr, code := execReport(t, redis, "--plot", pngPath)
	// 11 tags: more than a plot shows, so only the .total ones are drawn, and said so.
	if code != exitOK || !strings.Contains(stderr, "plotting the .total ones") || !strings.HasPrefix(stdout, "tag ") {
		t.Fatalf("exit %d, stdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	f, err := os.Open(pngPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("%s: %v", pngPath, err)
	}
	if b := img.Bounds(); b.Dx() < 100 || b.Dy() < 100 {
		t.Errorf("%s: %v, too small", pngPath, b)
	}

	svgPath := filepath.Join(dir, "cmp.svg")
	stdout, stderr, code = execReport(t, redis, "--compare", valkey, "--plot", svgPath, "--tags", `\.total$`)
	if code != exitOK || stderr != "" || !strings.HasPrefix(stdout, "tag ") {
		t.Fatalf("exit %d, stdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	svg, err := os.ReadFile(svgPath)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"<svg", "redis: get.total", "valkey: ping.total"} {
		if !bytes.Contains(svg, []byte(want)) {
			t.Errorf("%s does not contain %q", svgPath, want)
		}
	}
}

func TestReportErrors(t *testing.T) {
	redis, _ := testRuns(t)
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing.hlog")
	garbage := filepath.Join(dir, "garbage.hlog")
	writeFile(t, garbage, "this is not\nan HdrHistogram log\n")
	headerOnly := filepath.Join(dir, "empty.hlog")
	writeFile(t, headerOnly, "#[Histogram log format version 1.3]\n\"StartTimestamp\",\"Interval_Length\",\"Interval_Max\",\"Interval_Compressed_Histogram\"\n")
	badHist := filepath.Join(dir, "badhist.hlog")
	writeFile(t, badHist, "Tag=get.total,0.000,1.000,0.001,HISTFAAAAnotbase64!!\n")
	for _, tc := range []struct {
		name string
		args []string
		code int
		want []string // in stderr
	}{
		{"missing file", []string{missing}, exitUsage, []string{"respmeter: report: open " + missing + ": no such file or directory"}},
		{"missing compare", []string{redis, "--compare", missing}, exitUsage, []string{missing + ": no such file"}},
		{"garbage", []string{garbage}, exitUsage, []string{"respmeter: " + garbage + ": hdrlog: not an HdrHistogram log: line 1", `"this is not"`}},
		{"garbage compare", []string{redis, "--compare", garbage}, exitUsage, []string{garbage + ": hdrlog: not an HdrHistogram log"}},
		{"no intervals", []string{headerOnly}, exitUsage, []string{headerOnly + ": hdrlog: no intervals in log"}},
		{"bad histogram", []string{badHist}, exitUsage, []string{badHist + ": hdrlog: not an HdrHistogram log: interval 1"}},
		{"directory", []string{dir}, exitUsage, []string{dir}},
		{"no file", nil, exitUsage, []string{"takes exactly one log FILE, got 0 arguments", "Run 'respmeter report --help' for usage."}},
		{"two files", []string{redis, redis}, exitUsage, []string{"got 2 arguments"}},
		{"unknown flag", []string{redis, "--plto", "x.svg"}, exitUsage, []string{"unknown flag: --plto", "--help' for usage."}},
		{"plot format", []string{redis, "--plot", filepath.Join(dir, "p.jpg")}, exitUsage, []string{"p.jpg: the file name must end in .svg or .png"}},
		{"names without compare", []string{redis, "--names", "a,b"}, exitUsage, []string{"give --compare FILE2 too"}},
		{"one name", []string{redis, "--compare", redis, "--names", "a"}, exitUsage, []string{`--names must be two different non-empty names A,B, got "a"`}},
		{"same names", []string{redis, "--compare", redis, "--names", "a,a"}, exitUsage, []string{`got "a,a"`}},
		{"plot unwritable", []string{redis, "--plot", filepath.Join(dir, "no", "p.svg")}, exitFailure, []string{filepath.Join(dir, "no", "p.svg")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stdout, stderr, code := execReport(t, tc.args...)
			if code != tc.code {
				t.Errorf("exit %d, want %d; stderr:\n%s", code, tc.code, stderr)
			}
			for _, w := range tc.want {
				if !strings.Contains(stderr, w) {
					t.Errorf("stderr does not contain %q:\n%s", w, stderr)
				}
			}
			// Input errors are found before anything is printed.
			if tc.code == exitUsage && stdout != "" {
				t.Errorf("stdout not empty:\n%s", stdout)
			}
		})
	}
}

func TestReportHelp(t *testing.T) {
	stdout, stderr, code := execReport(t, "--help")
	if code != exitOK || stderr != "" {
		t.Fatalf("exit %d, stderr:\n%s", code, stderr)
	}
	checkGolden(t, "report_help.golden", stdout)
	for _, want := range []string{"<command>.<phase>", "microseconds", "milliseconds", "HistogramLogProcessor", "hdrhistogram-go"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("help does not mention %q", want)
		}
	}
}

func TestReportDefaultNames(t *testing.T) {
	for _, tc := range []struct{ a, b, wantA, wantB string }{
		{"runs/redis.hlog", "runs/valkey.hlog", "redis", "valkey"},
		{"x.hlog", "x.log", "x.hlog", "x.log"},
		{"a/run.hlog", "b/run.hlog", "a/run.hlog", "b/run.hlog"},
		{"run.hlog", "run.hlog", "run.hlog", "run.hlog (2)"},
		{".hlog", "b", ".hlog", "b"},
	} {
		if a, b := defaultNames(tc.a, tc.b); a != tc.wantA || b != tc.wantB {
			t.Errorf("defaultNames(%q, %q) = %q, %q; want %q, %q", tc.a, tc.b, a, b, tc.wantA, tc.wantB)
		}
	}
}

// TestReportTags: --tags keeps the tags a regular expression matches, in
// tables and plots; a bad expression is a usage error.
func TestReportTags(t *testing.T) {
	redis, _ := testRuns(t)
	all, _, _ := execReport(t, redis)
	stdout, stderr, code := execReport(t, redis, "--tags", `\.total$`)
	if code != exitOK || stderr != "" {
		t.Fatalf("exit %d, stderr:\n%s", code, stderr)
	}
	tags := func(table string) map[string]bool {
		m := map[string]bool{}
		for _, line := range strings.Split(table, "\n") {
			if f := strings.Fields(line); len(f) > 0 && (strings.Contains(f[0], ".") || f[0] == "think") {
				m[f[0]] = true
			}
		}
		return m
	}
	got := tags(stdout)
	var kept, dropped int
	for tag := range tags(all) {
		switch want := strings.HasSuffix(tag, ".total"); {
		case got[tag] && want:
			kept++
		case !got[tag] && !want:
			dropped++
		default:
			t.Errorf("tag %q kept=%v", tag, got[tag])
		}
	}
	if kept == 0 || dropped == 0 {
		t.Errorf("kept %d rows, dropped %d: the filter did nothing testable", kept, dropped)
	}
	if _, stderr, code := execReport(t, redis, "--tags", "("); code != exitUsage || !strings.Contains(stderr, "--tags") {
		t.Errorf("bad expression: exit %d, stderr %q", code, stderr)
	}
}

// TestReportJSONCSV: --json and --csv write the text table's figures (a
// log written by the proxy's own interval-log writer), --compare's too,
// and the two flags exclude each other.
func TestReportJSONCSV(t *testing.T) {
	redis, valkey := testRuns(t)
	table, _, code := execReport(t, redis)
	if code != exitOK {
		t.Fatalf("table: exit %d", code)
	}
	js, stderr, code := execReport(t, redis, "--json")
	if code != exitOK || stderr != "" {
		t.Fatalf("--json: exit %d, stderr:\n%s", code, stderr)
	}
	var doc report.LogJSON
	if err := json.Unmarshal([]byte(js), &doc); err != nil {
		t.Fatalf("--json output: %v\n%s", err, js)
	}
	if doc.Name != "redis.hlog" || doc.Unit != "seconds" || doc.Intervals == 0 {
		t.Errorf("--json header %+v", doc)
	}
	// Every figure of the text table, in seconds.
	for _, line := range strings.Split(strings.TrimSpace(table), "\n")[1:] {
		f := strings.Fields(line)
		got := doc.Tags[f[0]]
		if n, _ := strconv.ParseInt(f[1], 10, 64); int64(got["count"]) != n {
			t.Errorf("%s count: JSON %v, table %s", f[0], got["count"], f[1])
		}
		for i, k := range []string{"p50", "p90", "p99", "p99.9", "p99.99", "max"} {
			ms := fmt.Sprintf("%.3f", got[k]*1e3)
			if got[k] <= 1e-6 {
				ms = "≤1µs" // the table's floor
			}
			if ms != f[2+i] {
				t.Errorf("%s %s: JSON %v s = %s ms, table %s", f[0], k, got[k], ms, f[2+i])
			}
		}
	}

	cs, stderr, code := execReport(t, redis, "--compare", valkey, "--csv", "--names", "redis,valkey")
	if code != exitOK || stderr != "" {
		t.Fatalf("--compare --csv: exit %d, stderr:\n%s", code, stderr)
	}
	recs, err := csv.NewReader(strings.NewReader(cs)).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	// get, set and ping with 5 phases each, and think: 16 tags of 7 figures.
	if strings.Join(recs[0], ",") != "tag,stat,redis,valkey,ratio" || len(recs) != 1+16*7 {
		t.Errorf("--compare --csv: %d records, header %v", len(recs), recs[0])
	}

	if _, stderr, code := execReport(t, redis, "--json", "--csv"); code != exitUsage || !strings.Contains(stderr, "choose one") {
		t.Errorf("--json --csv: exit %d, stderr %q", code, stderr)
	}
}

// writeUntaggedLog writes an interval log without tags, as
// memtier_benchmark's --hdr-file-prefix does, holding values µs, plus
// tagged ones (tag: values) when given.
func writeUntaggedLog(t *testing.T, path string, values []int64, tagged map[string][]int64) {
	t.Helper()
	var buf bytes.Buffer
	start := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	w, err := hdrlog.NewWriter(&buf, start)
	if err != nil {
		t.Fatal(err)
	}
	write := func(tag string, vs []int64) {
		h := hdrhistogram.New(1, 3_600_000_000, 3)
		for _, v := range vs {
			_ = h.RecordValue(v)
		}
		if err := w.WriteInterval(start, start.Add(time.Second), tag, h); err != nil {
			t.Fatal(err)
		}
	}
	write("", values)
	for tag, vs := range tagged {
		write(tag, vs)
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestReportTagMap: --tag-map '(untagged)=get.total' pairs an untagged
// client log with respmeter's get.total in --compare; a rename onto a tag
// the log already has, and a malformed mapping, are usage errors.
func TestReportTagMap(t *testing.T) {
	redis, _ := testRuns(t)
	client := filepath.Join(t.TempDir(), "memtier_FULL_RUN_1.txt")
	writeUntaggedLog(t, client, []int64{300, 400, 500}, nil)

	rowOf := func(out, tag, stat string) []string {
		for _, line := range strings.Split(out, "\n") {
			if f := strings.Fields(line); len(f) == 5 && f[0] == tag && f[1] == stat {
				return f
			}
		}
		return nil
	}
	plain, stderr, code := execReport(t, client, "--compare", redis)
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if r := rowOf(plain, "get.total", "count"); r == nil || r[2] != "-" {
		t.Fatalf("without --tag-map get.total should be missing from the client log: %v\n%s", r, plain)
	}
	for _, mapping := range []string{"(untagged)=get.total", "=get.total"} {
		out, stderr, code := execReport(t, client, "--compare", redis, "--tag-map", mapping)
		if code != exitOK {
			t.Fatalf("%s: exit %d: %s", mapping, code, stderr)
		}
		if r := rowOf(out, "get.total", "count"); r == nil || r[2] != "3" || r[3] != "1500" || r[4] != "500.000" {
			t.Errorf("%s: get.total count row %v, want 3 vs 1500, ratio 500.000\n%s", mapping, r, out)
		}
		if r := rowOf(out, "(untagged)", "count"); r != nil {
			t.Errorf("%s: the untagged row is still there: %v", mapping, r)
		}
	}

	both := filepath.Join(t.TempDir(), "both.hlog")
	writeUntaggedLog(t, both, []int64{1}, map[string][]int64{"get.total": {2}})
	if _, stderr, code := execReport(t, both, "--tag-map", "=get.total"); code != exitUsage || !strings.Contains(stderr, "already") {
		t.Errorf("rename onto an existing tag: exit %d, stderr %q", code, stderr)
	}
	for _, bad := range []string{"get.total", "x=", "x=(untagged)"} {
		if _, stderr, code := execReport(t, redis, "--tag-map", bad); code != exitUsage || !strings.Contains(stderr, "--tag-map") {
			t.Errorf("--tag-map %q: exit %d, stderr %q", bad, code, stderr)
		}
	}
}

// TestReportMemtierHgrm runs memtier_benchmark 2.3.0 with
// --hdr-file-prefix against redis-server and reads its files: the .hgrm
// interval log gives the requests memtier sent (1,000 in all, 500 each
// of SET and GET) over the run's own span, not 2083 (its second column is
// the interval's end, not its length), and compares with --tag-map; the
// .txt percentile table beside it is refused with the name of the .hgrm to
// pass instead.
func TestReportMemtierHgrm(t *testing.T) {
	mt, why := redistest.FindMemtier(t)
	if mt == "" {
		t.Skip(why)
	}
	srv := redistest.Start(t)
	dir := t.TempDir()
	prefix := filepath.Join(dir, "mt")
	cmd := exec.Command(mt, "-s", "127.0.0.1", "-p", strconv.Itoa(srv.Port()), "-t", "1", "-c", "2", "-n", "500",
		"--ratio", "1:1", "--hdr-file-prefix", prefix, "--hide-histogram")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("memtier: %v\n%s", err, out)
	}
	full := prefix + "_FULL_RUN_1.hgrm"
	out, stderr, code := execReport(t, full, "--json")
	if code != exitOK {
		t.Fatalf("report %s: exit %d: %s", full, code, stderr)
	}
	var j struct {
		Start, End time.Time
		Tags       map[string]struct{ Count int64 }
	}
	if err := json.Unmarshal([]byte(out), &j); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if n := j.Tags[""].Count; n != 1000 {
		t.Errorf("count %d, want memtier's 1000 requests\n%s", n, out)
	}
	if span := j.End.Sub(j.Start); span < 0 || span > time.Minute || time.Since(j.End) > time.Hour {
		t.Errorf("the run spans %v to %v: the .hgrm's EndTimestamp column is not read as the end", j.Start, j.End)
	}
	for _, c := range []string{"SET", "GET"} {
		out, stderr, code := execReport(t, prefix+"_"+c+"_command_run_1.hgrm", "--compare", full, "--tag-map", "=total")
		if r := regexp.MustCompile(`(?m)^total +count +500 +1000 `); code != exitOK || !r.MatchString(out) {
			t.Errorf("%s against the full run: exit %d, want total count 500 vs 1000:\n%s%s", c, code, out, stderr)
		}
	}
	txt := prefix + "_FULL_RUN_1.txt"
	_, stderr, code = execReport(t, txt)
	if code != exitUsage || !strings.Contains(stderr, "memtier_benchmark's percentile table") || !strings.Contains(stderr, "pass the interval log beside it, "+full) {
		t.Errorf("report %s: exit %d, want %d naming the .hgrm: %s", txt, code, exitUsage, stderr)
	}
}
