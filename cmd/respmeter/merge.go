package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/respmeter/respmeter/internal/replay"
	"github.com/respmeter/respmeter/metrics/hdrlog"
	"github.com/respmeter/respmeter/metrics/report"
)

// newReportMergeCmd is "respmeter report merge".
func newReportMergeCmd(stdout, stderr io.Writer) *cobra.Command {
	var jsonOut bool
	var slower float64
	cmd := &cobra.Command{
		Use:   "merge FILE|DIR...",
		Short: "Merge the reports of partitioned replay workers, or several proxies' summaries and HDR logs, into one",
		Long: `Merge several reports into one.

Replay workers: the --json reports of the workers of one partitioned
replay (respmeter replay --partition I/N) give one replay report: counts,
mismatches and errors summed, per command p50/p99/p99.9 from the workers'
histograms merged (exact, never averaged percentiles), and per worker its
commands, duration, ops/s, late batches, send lag and start skew, with
the worker that limited the replay (paced: the one that sent the largest
share of its batches late, if any sent over 1% late; at speed max: the
slowest). Reports that would be counted twice are refused, naming them:
two reports of one partition, a connection replayed by two workers,
reports of different captures or partition counts. Missing partitions
are reported with the connections no worker replayed, and the merge
exits 1.

Proxies: the --summary files of several proxies give one table of
commands (count and errors summed, and each proxy's count); their HDR
logs (--hdr-log), given too, add each command's percentiles of total
time from the merged histograms. HDR logs alone give the merged table of
'respmeter report'. The same file twice is refused.

A directory stands for its .json and .hlog files (a results volume the
workers all wrote to).

Exit codes: 0 merged, 1 merged but incomplete (missing partitions), 2
usage error or reports that cannot be merged.`,
		Example: `  respmeter report merge worker-0.json worker-1.json worker-2.json worker-3.json
  respmeter report merge /results
  respmeter report merge proxy-a.json proxy-b.json proxy-a.hlog proxy-b.hlog`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) < 1 {
				return usageError(cmd, errors.New("report merge takes one or more FILEs"))
			}
			return nil
		},
		SilenceErrors: true,
		SilenceUsage:  true,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runMerge(cmd, stdout, args, jsonOut, slower)
		},
	}
	cmd.SetOut(stdout)
	cmd.SetErr(stderr)
	cmd.SetFlagErrorFunc(flagError)
	cmd.Flags().BoolVar(&jsonOut, "json", false, "write the merged report as JSON instead of text")
	cmd.Flags().Float64Var(&slower, "slower", 1.5, "list commands whose merged replayed p99 is at least this many times the captured one")
	return cmd
}

// mergeInputs are the files of a merge, by kind.
type mergeInputs struct {
	workers     []*replay.WorkerDoc
	workerNames []string
	summaries   []*proxySummary
	logs        []*hdrlog.Log
	logNames    []string
}

// proxySummary is the part of a proxy's --summary file a merge reads.
type proxySummary struct {
	name     string
	Commands map[string]struct {
		Count  int64 `json:"count"`
		Errors int64 `json:"errors"`
	} `json:"commands"`
	Run *runJSON `json:"run"`
}

// readMergeInputs reads and classifies files: a JSON object with
// "worker" is a replay report, one with "run" and "commands" a proxy
// summary, anything else must be an HDR log.
func readMergeInputs(files []string) (*mergeInputs, error) {
	in := &mergeInputs{}
	seen := map[[32]byte]string{}
	var errs []error
	for _, path := range files {
		data, err := os.ReadFile(path)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		sum := sha256.Sum256(data)
		if prev, dup := seen[sum]; dup {
			errs = append(errs, fmt.Errorf("%s and %s are the same report: it would be counted twice", prev, path))
			continue
		}
		seen[sum] = path
		if t := bytes.TrimSpace(data); len(t) > 0 && t[0] == '{' {
			var keys map[string]json.RawMessage
			if err := json.Unmarshal(data, &keys); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", path, err))
				continue
			}
			switch {
			case keys["worker"] != nil:
				var d replay.WorkerDoc
				if err := json.Unmarshal(data, &d); err != nil {
					errs = append(errs, fmt.Errorf("%s: %w", path, err))
					continue
				}
				in.workers, in.workerNames = append(in.workers, &d), append(in.workerNames, path)
			case keys["run"] != nil && keys["commands"] != nil:
				s := &proxySummary{name: path}
				if err := json.Unmarshal(data, s); err != nil {
					errs = append(errs, fmt.Errorf("%s: %w", path, err))
					continue
				}
				in.summaries = append(in.summaries, s)
			default:
				errs = append(errs, fmt.Errorf("%s: neither a replay --json report nor a proxy --summary", path))
			}
			continue
		}
		l, err := hdrlog.Load(bytes.NewReader(data))
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", path, err))
			continue
		}
		in.logs, in.logNames = append(in.logs, l), append(in.logNames, path)
	}
	if len(in.workers) > 0 && len(in.summaries) > 0 {
		errs = append(errs, errors.New("replay reports and proxy summaries cannot be merged into one report: merge them separately"))
	}
	for i, a := range in.summaries {
		for _, b := range in.summaries[:i] {
			if a.Run != nil && b.Run != nil && a.Run.PID == b.Run.PID && a.Run.Started.Equal(b.Run.Started) && a.Run.Listen == b.Run.Listen {
				errs = append(errs, fmt.Errorf("%s and %s are summaries of one proxy run (pid %d, listening on %s): it would be counted twice",
					b.name, a.name, a.Run.PID, a.Run.Listen))
			}
		}
	}
	return in, errors.Join(errs...)
}

// expandDirs replaces each directory among paths with its *.json and
// *.hlog files, sorted: a results volume where every worker wrote.
func expandDirs(paths []string) ([]string, error) {
	var out []string
	for _, p := range paths {
		if fi, err := os.Stat(p); err != nil || !fi.IsDir() {
			out = append(out, p)
			continue
		}
		var found []string
		for _, pat := range []string{"*.json", "*.hlog"} {
			m, err := filepath.Glob(filepath.Join(p, pat))
			if err != nil {
				return nil, err
			}
			found = append(found, m...)
		}
		if len(found) == 0 {
			return nil, fmt.Errorf("%s: no .json or .hlog files", p)
		}
		sort.Strings(found)
		out = append(out, found...)
	}
	return out, nil
}

func runMerge(cmd *cobra.Command, stdout io.Writer, files []string, jsonOut bool, slower float64) error {
	files, err := expandDirs(files)
	if err != nil {
		return &exitError{code: exitUsage, err: err}
	}
	in, err := readMergeInputs(files)
	if err != nil {
		return &exitError{code: exitUsage, err: err}
	}
	var logs *hdrlog.Log
	if len(in.logs) > 0 {
		logs = hdrlog.Merge(in.logs...)
	}
	switch {
	case len(in.workers) > 0:
		m, err := replay.Merge(in.workers, in.workerNames)
		if err != nil {
			return &exitError{code: exitUsage, err: err}
		}
		if jsonOut {
			if err := writeIndentedJSON(stdout, m); err != nil {
				return failure(err)
			}
		} else {
			writeMergedReplay(stdout, m, slower)
			if logs != nil {
				fmt.Fprintf(stdout, "\nmerged HDR logs (%s):\n", strings.Join(in.logNames, ", "))
				if err := report.Table(stdout, logs); err != nil {
					return failure(err)
				}
			}
		}
		if len(m.Missing) > 0 || len(m.Unreplayed) > 0 {
			return failure(fmt.Errorf("merge incomplete: partitions %v of %d missing, %d connections not replayed: %s",
				m.Missing, m.Count, len(m.Unreplayed), joinNames(m.Unreplayed)))
		}
		return nil
	case len(in.summaries) > 0:
		t := mergeSummaries(in.summaries, logs)
		if jsonOut {
			err = writeIndentedJSON(stdout, t)
		} else {
			err = t.write(stdout)
		}
		if err != nil {
			return failure(err)
		}
		return nil
	default:
		if jsonOut {
			err = report.WriteJSON(stdout, logs, "merged")
		} else {
			err = report.Table(stdout, logs)
		}
		if err != nil {
			return failure(err)
		}
		return nil
	}
}

func writeIndentedJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// writeMergedReplay writes a merged replay report: the replay report of
// the whole, then the workers.
func writeMergedReplay(out io.Writer, m *replay.Merged, slower float64) {
	fmt.Fprintf(out, "merged %d of %d partitions (by %s)\n", len(m.Workers), m.Count, m.By)
	writeReplayReport(out, m.Report, slower)
	fmt.Fprintln(out)
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "partition\tconnections\tcommands\tseconds\tops/s\tlate batches\tsend lag p99 µs\tstart skew ms\tconn errors\treport\t")
	var minSkew, maxSkew int64
	skews := 0
	for _, w := range m.Workers {
		skew := "-"
		if w.StartSkewUS != nil {
			s := *w.StartSkewUS
			skew = fmt.Sprintf("%.3f", float64(s)/1e3)
			if skews == 0 || s < minSkew {
				minSkew = s
			}
			if skews == 0 || s > maxSkew {
				maxSkew = s
			}
			skews++
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%.3f\t%.0f\t%d of %d\t%d\t%s\t%d\t%s\t\n", w.Partition, w.Connections, w.Commands,
			w.Seconds, w.OpsPerSec, w.LateBatches, w.Batches, w.SendLagP99, skew, w.ConnErrors, w.Name)
	}
	_ = tw.Flush()
	if skews > 0 {
		fmt.Fprintf(out, "start skew: %.3f to %.3f ms by each worker's clock (add the clocks' offsets: chronyc tracking)\n",
			float64(minSkew)/1e3, float64(maxSkew)/1e3)
	}
	fmt.Fprintf(out, "bottleneck: %s\n", m.Why)
	if len(m.Missing) > 0 || len(m.Unreplayed) > 0 {
		fmt.Fprintf(out, "INCOMPLETE: partitions %v missing; connections never replayed: %s\n", m.Missing, joinNames(m.Unreplayed))
	}
}

// summaryTable is the merge of several proxies' summaries.
type summaryTable struct {
	Proxies []string `json:"proxies"`
	// Commands by name: counts and errors summed, each proxy's count,
	// and the merged HDR logs' percentiles of total time (seconds) when
	// logs were given.
	Commands map[string]*summaryRow `json:"commands"`
	Total    int64                  `json:"total"`
}

type summaryRow struct {
	Count    int64              `json:"count"`
	Errors   int64              `json:"errors"`
	PerProxy []int64            `json:"per_proxy"`
	Total    map[string]float64 `json:"total_seconds,omitempty"` // p50, p99, p99.9
}

// mergeSummaries sums the summaries' commands and takes percentiles from
// logs (nil: none).
func mergeSummaries(sums []*proxySummary, logs *hdrlog.Log) *summaryTable {
	t := &summaryTable{Commands: map[string]*summaryRow{}}
	for i, s := range sums {
		t.Proxies = append(t.Proxies, s.name)
		for name, c := range s.Commands {
			r := t.Commands[name]
			if r == nil {
				r = &summaryRow{PerProxy: make([]int64, len(sums))}
				t.Commands[name] = r
			}
			r.Count += c.Count
			r.Errors += c.Errors
			r.PerProxy[i] = c.Count
			t.Total += c.Count
		}
	}
	if logs != nil {
		for name, r := range t.Commands {
			if h := logs.Histogram(name + ".total"); h != nil && h.TotalCount() > 0 {
				r.Total = map[string]float64{}
				for _, p := range []struct {
					k string
					q float64
				}{{"p50", 50}, {"p99", 99}, {"p99.9", 99.9}} {
					r.Total[p.k] = float64(h.ValueAtQuantile(p.q)) / 1e6
				}
			}
		}
	}
	return t
}

func (t *summaryTable) write(out io.Writer) error {
	names := make([]string, 0, len(t.Commands))
	for n := range t.Commands {
		names = append(names, n)
	}
	sort.Slice(names, func(i, j int) bool {
		a, b := t.Commands[names[i]].Count, t.Commands[names[j]].Count
		return a > b || a == b && names[i] < names[j]
	})
	fmt.Fprintf(out, "merged %d proxies: %d commands\n", len(t.Proxies), t.Total)
	for i, p := range t.Proxies {
		fmt.Fprintf(out, "  [%d] %s\n", i+1, p)
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	head := "command\tcount\terrors\tp50 ms\tp99 ms\tp99.9 ms\t"
	for i := range t.Proxies {
		head += fmt.Sprintf("[%d]\t", i+1)
	}
	fmt.Fprintln(tw, head)
	for _, n := range names {
		r := t.Commands[n]
		line := fmt.Sprintf("%s\t%d\t%d\t", n, r.Count, r.Errors)
		for _, k := range []string{"p50", "p99", "p99.9"} {
			if v, ok := r.Total[k]; ok {
				line += fmt.Sprintf("%.3f\t", v*1e3)
			} else {
				line += "-\t"
			}
		}
		for _, c := range r.PerProxy {
			line += fmt.Sprintf("%d\t", c)
		}
		fmt.Fprintln(tw, line)
	}
	return tw.Flush()
}
