package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/spf13/cobra"

	"github.com/respmeter/respmeter/metrics/hdrlog"
	"github.com/respmeter/respmeter/metrics/report"
)

// reportOptions are the flags of "respmeter report".
type reportOptions struct {
	compare string   // second log; "" for a single-log table
	plot    string   // plot file, .svg or .png; "" for none
	tags    string   // regular expression selecting tags; "" for all
	names   []string // names of FILE and --compare FILE2
	tagMap  []string // FROM=TO renames, applied to both logs
	linear  bool     // linear latency axis in the plot
	json    bool     // JSON instead of the text table
	csv     bool     // CSV instead of the text table
}

// newReportCmd returns the "respmeter report" command, writing tables to
// stdout. stderr is where cobra writes its own messages (the command sets
// it as its error output); the command's errors are returned as
// *exitError, with exitUsage for bad arguments and for logs that cannot be
// opened or read (the message names the file) and exitFailure for a plot
// that cannot be written.
func newReportCmd(stdout, stderr io.Writer) *cobra.Command {
	var o reportOptions
	cmd := &cobra.Command{
		Use:   "report FILE [--compare FILE2] [--plot OUT.svg|OUT.png] [--names A,B] [--json|--csv]",
		Short: "Summarize, compare or plot HdrHistogram interval logs",
		Long: `Read an HdrHistogram interval log, such as the one the proxy writes, merge
the intervals of each tag and print one row of latency percentiles per tag:
count, p50, p90, p99, p99.9, p99.99 and max.

Tags are <command>.<phase>: get.total, get.upstream, get.proxy, get.service,
get.queue and so on for every command seen (get.injected for the delays of
fault injection rules, over the commands they delayed), plus think for the
clients' think time between a reply and their next request. Untagged intervals are shown as
(untagged).

Units: the log's histograms hold microseconds (respmeter records whole
microseconds, 1 µs .. 1 h, 3 significant digits); the tables and plots show
milliseconds with 3 decimals. Each percentile is the highest value
equivalent to it at the histogram's precision.

With --compare FILE2, print the two logs side by side instead: for every tag
of either log, one row per figure with FILE's value, FILE2's value and their
ratio FILE2/FILE (above 1: FILE2 is slower, or for count did more). The
columns are named after the files' base names without extension, or after
--names.

With --json or --csv, write the same figures machine-readable instead of
the text table, latencies in seconds (as /stats and proxy --summary; the
log's whole microseconds / 10^6, in the shortest form that reads back
exactly). --json: {"name", "start", "end", "intervals", "unit": "seconds",
"tags": {TAG: {"count", "p50", "p90", "p99", "p99.9", "p99.99", "max"}}},
latencies left out of an empty tag; with --compare {"a": ..., "b": ...,
"ratios": {TAG: {FIGURE: B/A}}}, a ratio left out where the table shows "-".
--csv: the header tag,count,p50_seconds,...,max_seconds and one row per
tag; with --compare the long form tag,stat,A,B,ratio. Empty cells stand
for "-".

--tag-map FROM=TO renames tag FROM to TO in each log that has it, before
--tags and the comparison: memtier_benchmark's --hdr-file-prefix logs have
no tags, so --tag-map '(untagged)=get.total' (or '=get.total') pairs such a
client-side log with respmeter's get.total. Repeatable. memtier's interval
log is PREFIX_FULL_RUN_1.hgrm (or PREFIX_GET_command_run_1.hgrm per
command); the .txt beside it is a percentile table, which report refuses.

With --plot, also write the latency-by-percentile distribution of every tag
(of both logs with --compare) as SVG or PNG, chosen by the extension, in the
style of HdrHistogram's plotter: the latency axis on a log scale (--linear:
linear from 0), a colour per tag, a dash pattern and a marker per log.

The log is HdrHistogram's interval log format (version 1.3), so it can also be
read by HdrHistogram's HistogramLogProcessor (its default
-outputValueUnitRatio 1000000 turns microseconds into seconds; use 1000 for
milliseconds), HdrHistogramVisualizer and hdrhistogram-go's
HistogramLogReader. Its Interval_Max column is in seconds, as hdrhistogram-go
writes it; the histograms themselves are microseconds.

'respmeter report merge FILE...' merges the logs of several proxies or
replay workers, their --summary files or partitioned replay reports into
one (see its --help).

Exit codes: 0 success, 1 the plot could not be written, 2 usage error or a log
that cannot be opened or read.`,
		Example: `  respmeter report run.hlog
  respmeter report redis.hlog --compare valkey.hlog
  respmeter report a.hlog --compare b.hlog --names before,after --plot cmp.svg
  respmeter report memtier_FULL_RUN_1.hgrm --compare run.hlog --tag-map '(untagged)=get.total'
  respmeter report run.hlog --json > run.json
  respmeter report redis.hlog --compare valkey.hlog --csv > cmp.csv`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usageError(cmd, fmt.Errorf("%s takes exactly one log FILE, got %d arguments", cmd.CommandPath(), len(args)))
			}
			return nil
		},
		SilenceErrors: true,
		SilenceUsage:  true,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runReport(cmd, stdout, args[0], o)
		},
	}
	cmd.SetOut(stdout)
	cmd.SetErr(stderr)
	cmd.SetFlagErrorFunc(flagError)
	cmd.AddCommand(newReportMergeCmd(stdout, stderr))
	fl := cmd.Flags()
	fl.StringVar(&o.compare, "compare", "", "second log `FILE2` to compare FILE with, side by side with ratios FILE2/FILE")
	fl.StringVar(&o.plot, "plot", "", "also write a percentile-distribution plot to `OUT`; .svg or .png")
	fl.StringVar(&o.tags, "tags", "", "only tags matching this regular `EXPR` (e.g. '^get\\.' or '\\.total$'); a plot of more than 10 tags defaults to '\\.total$'")
	fl.BoolVar(&o.linear, "linear", false, "with --plot, a linear latency axis from 0 instead of the log scale")
	fl.StringArrayVar(&o.tagMap, "tag-map", nil, "rename tag `FROM=TO` in both logs (FROM (untagged) or empty: intervals without a tag); repeatable")
	fl.BoolVar(&o.json, "json", false, "write the figures as JSON (latencies in seconds) instead of the text table")
	fl.BoolVar(&o.csv, "csv", false, "write the figures as CSV (latencies in seconds) instead of the text table")
	fl.StringSliceVar(&o.names, "names", nil, "names of FILE and FILE2 with --compare, as `A,B` (default: the files' base names)")
	return cmd
}

// runReport is the body of "respmeter report FILE".
func runReport(cmd *cobra.Command, stdout io.Writer, file string, o reportOptions) error {
	// Check the whole command line before reading anything.
	if o.linear && o.plot == "" {
		return usageError(cmd, errors.New("--linear shapes the plot: give --plot OUT too"))
	}
	if o.json && o.csv {
		return usageError(cmd, errors.New("--json and --csv: choose one output format"))
	}
	if o.plot != "" {
		if ext := strings.ToLower(filepath.Ext(o.plot)); ext != ".svg" && ext != ".png" {
			return usageError(cmd, fmt.Errorf("--plot %s: the file name must end in .svg or .png", o.plot))
		}
	}
	var tagRe *regexp.Regexp
	if o.tags != "" {
		re, err := regexp.Compile(o.tags)
		if err != nil {
			return usageError(cmd, fmt.Errorf("--tags %q: %v", o.tags, err))
		}
		tagRe = re
	}
	renames, err := parseTagMap(o.tagMap)
	if err != nil {
		return usageError(cmd, err)
	}
	var nameA, nameB string
	switch {
	case cmd.Flags().Changed("names") && o.compare == "":
		return usageError(cmd, errors.New("--names names the two logs of --compare; give --compare FILE2 too"))
	case cmd.Flags().Changed("names"):
		for i := range o.names {
			o.names[i] = strings.TrimSpace(o.names[i])
		}
		if len(o.names) != 2 || o.names[0] == "" || o.names[1] == "" || o.names[0] == o.names[1] {
			return usageError(cmd, fmt.Errorf("--names must be two different non-empty names A,B, got %q", strings.Join(o.names, ",")))
		}
		nameA, nameB = o.names[0], o.names[1]
	case o.compare != "":
		nameA, nameB = defaultNames(file, o.compare)
	}

	a, err := loadLog(file, tagRe, renames)
	if err != nil {
		return err
	}
	if o.compare == "" {
		var err error
		switch {
		case o.json:
			err = report.WriteJSON(stdout, a, filepath.Base(file))
		case o.csv:
			err = report.WriteCSV(stdout, a)
		default:
			err = report.Table(stdout, a)
		}
		if err != nil {
			return failure(fmt.Errorf("writing the table: %w", err))
		}
		return writePlot(cmd, o, tagRe, map[string]*hdrlog.Log{filepath.Base(file): a})
	}
	b, err := loadLog(o.compare, tagRe, renames)
	if err != nil {
		return err
	}
	switch {
	case o.json:
		err = report.WriteCompareJSON(stdout, a, b, nameA, nameB)
	case o.csv:
		err = report.WriteCompareCSV(stdout, a, b, nameA, nameB)
	default:
		err = report.Compare(stdout, a, b, nameA, nameB)
	}
	if err != nil {
		return failure(fmt.Errorf("writing the comparison: %w", err))
	}
	return writePlot(cmd, o, tagRe, map[string]*hdrlog.Log{nameA: a, nameB: b})
}

// plotTagLimit is how many tags a plot shows before it keeps only the
// ".total" ones (unless --tags chose): beyond that the lines and the
// legend cannot be told apart.
const plotTagLimit = 10

// tagRename is one --tag-map FROM=TO.
type tagRename struct{ from, to string }

// parseTagMap parses --tag-map values FROM=TO; FROM "(untagged)" or ""
// names the untagged intervals, TO must be a tag.
func parseTagMap(vals []string) ([]tagRename, error) {
	var out []tagRename
	for _, v := range vals {
		from, to, ok := strings.Cut(v, "=")
		from, to = strings.TrimSpace(from), strings.TrimSpace(to)
		if !ok || to == "" || to == "(untagged)" {
			return nil, fmt.Errorf("--tag-map %q: want FROM=TO, TO a tag such as get.total", v)
		}
		if from == "(untagged)" {
			from = hdrlog.Untagged
		}
		out = append(out, tagRename{from, to})
	}
	return out, nil
}

// loadLog reads the interval log at path and applies renames in order.
// Its errors name path and are usage errors (exit 2): the input is what is
// wrong.
func loadLog(path string, tagRe *regexp.Regexp, renames []tagRename) (*hdrlog.Log, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, &exitError{code: exitUsage, err: fmt.Errorf("report: %w", err)}
	}
	defer f.Close()
	l, err := hdrlog.Load(f)
	if errors.Is(err, hdrlog.ErrPercentileTable) {
		hgrm := strings.TrimSuffix(path, filepath.Ext(path)) + ".hgrm"
		return nil, &exitError{code: exitUsage, err: fmt.Errorf("%s: %w; pass the interval log beside it, %s", path, err, hgrm)}
	}
	if err != nil {
		return nil, &exitError{code: exitUsage, err: fmt.Errorf("%s: %w", path, err)}
	}
	for _, r := range renames {
		if l, err = l.Rename(r.from, r.to); err != nil {
			return nil, &exitError{code: exitUsage, err: fmt.Errorf("%s: --tag-map: %w", path, err)}
		}
	}
	if tagRe != nil {
		l = l.Filter(tagRe.MatchString)
	}
	return l, nil
}

// writePlot writes the plot of logs to path, if path is not empty.
func writePlot(cmd *cobra.Command, o reportOptions, tagRe *regexp.Regexp, logs map[string]*hdrlog.Log) error {
	path := o.plot
	if path == "" {
		return nil
	}
	if tagRe == nil {
		n := 0
		for _, l := range logs {
			n = max(n, len(l.Tags()))
		}
		if n > plotTagLimit {
			fmt.Fprintf(cmd.ErrOrStderr(), "report: %d tags; plotting the .total ones (choose others with --tags)\n", n)
			for name, l := range logs {
				logs[name] = l.Filter(func(t string) bool { return strings.HasSuffix(t, ".total") })
			}
		}
	}
	if err := report.Plot(path, logs, report.PlotOptions{Linear: o.linear}); err != nil {
		return failure(err)
	}
	return nil
}

// defaultNames names two logs for the comparison: their base names without
// extension ("runs/redis.hlog" is "redis"), or, where those are equal, the
// base names, then the paths as given; the same path twice gives "FILE" and
// "FILE (2)".
func defaultNames(a, b string) (string, string) {
	stem := func(p string) string {
		base := filepath.Base(p)
		if s := strings.TrimSuffix(base, filepath.Ext(base)); s != "" {
			return s
		}
		return base
	}
	for _, name := range []func(string) string{stem, filepath.Base, func(p string) string { return p }} {
		if na, nb := name(a), name(b); na != nb {
			return na, nb
		}
	}
	return a, b + " (2)"
}
