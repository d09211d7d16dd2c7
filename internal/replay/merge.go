package replay

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// WorkerDoc is a replay's JSON report ("respmeter replay --json"): the
// Report's fields, and under "worker" what a merge of several workers'
// reports needs (Merge).
type WorkerDoc struct {
	*Report
	Worker WorkerInfo `json:"worker"`
}

// WorkerInfo says which share of which capture a replay replayed, and
// holds its histograms so that merged percentiles are exact.
type WorkerInfo struct {
	// Partition is "I/N" ("0/1" for a replay of the whole capture).
	Partition string `json:"partition"`
	// By is ByConnection or BySlot.
	By string `json:"partition_by"`
	// Speed is the replay's speed factor, 0 for max.
	Speed float64 `json:"speed"`
	// CaptureStart is the capture's start (Unix ns): workers of one
	// replay loaded the same capture.
	CaptureStart int64 `json:"capture_start_unix_ns"`
	// Captured names (ConnName) all the capture's connections, in the
	// workload's order; Replayed those this worker replayed (all or part
	// of: BySlot).
	Captured []string `json:"captured_connections"`
	Replayed []string `json:"replayed_connections"`
	// Histograms holds per command its captured, replayed and from-send
	// latencies (µs), and SendLag the send lag (µs), each in
	// HdrHistogram's compressed encoding, base64 ("HISTF...").
	Histograms map[string]EncodedHistograms `json:"histograms"`
	SendLag    string                       `json:"send_lag_histogram"`
}

// EncodedHistograms are one command's histograms, encoded.
type EncodedHistograms struct {
	Captured string `json:"captured"`
	Replayed string `json:"replayed"`
	Sent     string `json:"sent"`
}

// NewWorkerDoc returns rep's document as the replay of partition p of a
// capture that started at captureStart (Unix ns), whose connections are
// all (Partition.Select), at speed (0: max).
func NewWorkerDoc(rep *Report, p Partition, speed float64, captureStart int64, all []string, part []string) (*WorkerDoc, error) {
	d := &WorkerDoc{Report: rep, Worker: WorkerInfo{
		Partition: p.String(), By: p.By, Speed: speed, CaptureStart: captureStart,
		Captured: all, Replayed: part, Histograms: map[string]EncodedHistograms{},
	}}
	enc := func(h *hdrhistogram.Histogram) (string, error) {
		b, err := h.Encode(hdrhistogram.V2CompressedEncodingCookieBase)
		return string(b), err
	}
	var errs []error
	for name, s := range rep.PerCommand {
		var e EncodedHistograms
		var err1, err2, err3 error
		e.Captured, err1 = enc(s.captured)
		e.Replayed, err2 = enc(s.replayed)
		e.Sent, err3 = enc(s.sent)
		errs = append(errs, err1, err2, err3)
		d.Worker.Histograms[name] = e
	}
	var err error
	d.Worker.SendLag, err = enc(rep.lag)
	if err = errors.Join(append(errs, err)...); err != nil {
		return nil, fmt.Errorf("replay: encoding histograms: %w", err)
	}
	return d, nil
}

// WorkerRow is one worker in a merged report.
type WorkerRow struct {
	Name        string  `json:"name"` // the report's file
	Partition   string  `json:"partition"`
	Connections int     `json:"connections"`
	Commands    int64   `json:"commands"`
	Seconds     float64 `json:"duration_seconds"`
	OpsPerSec   float64 `json:"ops_per_second"`
	Batches     int64   `json:"batches"`
	LateBatches int64   `json:"late_batches"`
	LatePercent float64 `json:"late_percent"`
	SendLagP99  int64   `json:"send_lag_p99_us"`
	// StartSkewUS is the worker's measured start skew (Start.SkewUS),
	// nil when it was not given a start time.
	StartSkewUS *int64 `json:"start_skew_us,omitempty"`
	ConnErrors  int    `json:"connection_errors"`
}

// Merged is the merge of several workers' reports of one partitioned
// replay.
type Merged struct {
	// Report sums the workers' counts; its percentiles come from the
	// merged histograms (never from averaged percentiles); its duration
	// is the longest worker's; samples and connection errors are the
	// workers' (errors prefixed with the worker's partition).
	Report  *Report     `json:"report"`
	Workers []WorkerRow `json:"workers"`
	// Count is the number of partitions (N) and By the mode.
	Count int    `json:"partitions"`
	By    string `json:"partition_by"`
	// Missing lists the partition indexes no report was given for;
	// Unreplayed the connections that no worker replayed (all of the
	// missing partitions' by connection). A merge with either is
	// incomplete: its totals cover part of the capture.
	Missing    []int    `json:"missing_partitions,omitempty"`
	Unreplayed []string `json:"unreplayed_connections,omitempty"`
	// Bottleneck is the index in Workers of the worker that limited the
	// replay, -1 for none; Why says why.
	Bottleneck int    `json:"bottleneck"`
	Why        string `json:"bottleneck_why"`
}

// Merge merges the reports of the workers of one partitioned replay;
// names name them (their files) in errors and rows. It refuses reports
// that would be counted twice or do not belong together: different
// partition counts, modes or captures, two reports of one partition, a
// connection replayed by two workers (by connection), or a report
// without histograms; each error names the reports and connections.
// Missing partitions are not an error: Merged.Missing and Unreplayed
// name them.
func Merge(docs []*WorkerDoc, names []string) (*Merged, error) {
	if len(docs) == 0 {
		return nil, errors.New("merge: no reports")
	}
	var errs []error
	first := docs[0].Worker
	parts := make([]Partition, len(docs))
	byIndex := map[int]int{}
	for i, d := range docs {
		w := d.Worker
		p, err := ParsePartition(w.Partition, w.By)
		switch {
		case d.Report == nil || w.Histograms == nil || w.SendLag == "":
			errs = append(errs, fmt.Errorf("%s: not a replay report with histograms (respmeter replay --json)", names[i]))
			continue
		case err != nil:
			errs = append(errs, fmt.Errorf("%s: %w", names[i], err))
			continue
		case p.Count != parts[0].Count && i > 0 || p.By != first.By:
			errs = append(errs, fmt.Errorf("%s: partition %s by %s, but %s is %s by %s: not one replay",
				names[i], w.Partition, w.By, names[0], first.Partition, first.By))
			continue
		case w.CaptureStart != first.CaptureStart || !slices.Equal(w.Captured, first.Captured):
			errs = append(errs, fmt.Errorf("%s and %s replayed different captures (started %d and %d ns, %d and %d connections)",
				names[0], names[i], first.CaptureStart, w.CaptureStart, len(first.Captured), len(w.Captured)))
			continue
		}
		parts[i] = p
		if j, dup := byIndex[p.Index]; dup {
			errs = append(errs, fmt.Errorf("%s and %s are both partition %s: their commands would be counted twice", names[j], names[i], p))
			continue
		}
		byIndex[p.Index] = i
	}
	if first.By == ByConnection {
		seen := map[string]int{}
		for i, d := range docs {
			for _, c := range d.Worker.Replayed {
				if j, dup := seen[c]; dup {
					errs = append(errs, fmt.Errorf("connection %s was replayed by %s (%s) and %s (%s)",
						c, names[j], docs[j].Worker.Partition, names[i], d.Worker.Partition))
					continue
				}
				seen[c] = i
			}
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}

	m := &Merged{Count: parts[0].Count, By: first.By, Bottleneck: -1}
	for k := range m.Count {
		if _, ok := byIndex[k]; !ok {
			m.Missing = append(m.Missing, k)
		}
	}
	replayed := map[string]bool{}
	for _, d := range docs {
		for _, c := range d.Worker.Replayed {
			replayed[c] = true
		}
	}
	for _, c := range first.Captured {
		if !replayed[c] {
			m.Unreplayed = append(m.Unreplayed, c)
		}
	}

	rep := &Report{PerCommand: map[string]*CommandStats{}, lag: hdrhistogram.New(1, histMax, 3)}
	decode := func(name, s string) (*hdrhistogram.Histogram, error) {
		h, err := hdrhistogram.Decode([]byte(s))
		if err != nil {
			return nil, fmt.Errorf("%s: histogram: %w", name, err)
		}
		return h, nil
	}
	for i, d := range docs {
		r := d.Report
		rep.Commands += r.Commands
		rep.Skipped += r.Skipped
		rep.Mismatches += r.Mismatches
		rep.NewErrors += r.NewErrors
		rep.GoneErrors += r.GoneErrors
		rep.Batches += r.Batches
		rep.LateBatches += r.LateBatches
		rep.Connections += r.Connections
		rep.DurationSeconds = max(rep.DurationSeconds, r.DurationSeconds)
		rep.MismatchSamples = appendSamples(rep.MismatchSamples, r.MismatchSamples)
		rep.NewErrorSamples = appendSamples(rep.NewErrorSamples, r.NewErrorSamples)
		rep.GoneErrSamples = appendSamples(rep.GoneErrSamples, r.GoneErrSamples)
		for _, e := range r.ConnErrors {
			rep.ConnErrors = append(rep.ConnErrors, fmt.Sprintf("worker %s: %s", d.Worker.Partition, e))
		}
		lag, err := decode(names[i], d.Worker.SendLag)
		if err != nil {
			return nil, err
		}
		rep.lag.Merge(lag)
		for name, cs := range r.PerCommand {
			eh, ok := d.Worker.Histograms[name]
			if !ok {
				return nil, fmt.Errorf("%s: no histograms for command %s", names[i], name)
			}
			s := rep.stats(name)
			s.Count += cs.Count
			s.Mismatches += cs.Mismatches
			s.NewErrors += cs.NewErrors
			s.GoneErrors += cs.GoneErrors
			for _, x := range []struct {
				dst *hdrhistogram.Histogram
				enc string
			}{{s.captured, eh.Captured}, {s.replayed, eh.Replayed}, {s.sent, eh.Sent}} {
				h, err := decode(names[i], x.enc)
				if err != nil {
					return nil, err
				}
				if dropped := x.dst.Merge(h); dropped > 0 {
					return nil, fmt.Errorf("%s: %s: %d values outside the merged histogram's range", names[i], name, dropped)
				}
			}
		}
		row := WorkerRow{Name: names[i], Partition: d.Worker.Partition, Connections: r.Connections,
			Commands: r.Commands, Seconds: r.DurationSeconds, Batches: r.Batches, LateBatches: r.LateBatches,
			SendLagP99: r.SendLagP99US, ConnErrors: len(r.ConnErrors)}
		if r.DurationSeconds > 0 {
			row.OpsPerSec = float64(r.Commands) / r.DurationSeconds
		}
		if r.Batches > 0 {
			row.LatePercent = 100 * float64(r.LateBatches) / float64(r.Batches)
		}
		if r.Start != nil {
			skew := r.Start.SkewUS
			row.StartSkewUS = &skew
		}
		m.Workers = append(m.Workers, row)
	}
	rep.finish()
	m.Report = rep
	order := make([]int, len(m.Workers)) // the rows in partition order
	for i := range order {
		order[i] = i
	}
	sort.Slice(order, func(a, b int) bool { return parts[order[a]].Index < parts[order[b]].Index })
	rows := make([]WorkerRow, len(order))
	for i, k := range order {
		rows[i] = m.Workers[k]
	}
	m.Workers = rows
	m.Bottleneck, m.Why = bottleneck(m.Workers, first.Speed)
	return m, nil
}

// lateShare is the share of late batches past which a replayer was the
// bottleneck (as the replay report warns).
const lateShare = 0.01

// bottleneck names the worker that limited the replay: paced (speed > 0),
// the one that sent the largest share of its batches late, if any sent
// more than 1% late; at speed max, the one that took longest (the
// replay's duration is its).
func bottleneck(ws []WorkerRow, speed float64) (int, string) {
	if len(ws) == 0 {
		return -1, ""
	}
	if speed == 0 {
		b := 0
		for i, w := range ws {
			if w.Seconds > ws[b].Seconds {
				b = i
			}
		}
		return b, fmt.Sprintf("worker %s, the slowest (%.3f s): at speed max it sets the duration", ws[b].Partition, ws[b].Seconds)
	}
	b := -1
	for i, w := range ws {
		if w.Batches > 0 && float64(w.LateBatches) > lateShare*float64(w.Batches) && (b < 0 || w.LatePercent > ws[b].LatePercent) {
			b = i
		}
	}
	if b < 0 {
		return -1, fmt.Sprintf("none: no worker sent more than %.0f%% of its batches more than %v late", 100*lateShare, LateAfter)
	}
	var others []string
	for i, w := range ws {
		if i != b {
			others = append(others, fmt.Sprintf("%s %.1f%%", w.Partition, w.LatePercent))
		}
	}
	why := fmt.Sprintf("worker %s sent %.1f%% of its batches more than %v late (send lag p99 %d µs)", ws[b].Partition, ws[b].LatePercent, LateAfter, ws[b].SendLagP99)
	if len(others) > 0 {
		why += "; others " + strings.Join(others, ", ")
	}
	return b, why
}

func appendSamples(dst, src []Sample) []Sample {
	return append(dst, src[:min(len(src), max(maxSamples-len(dst), 0))]...)
}
