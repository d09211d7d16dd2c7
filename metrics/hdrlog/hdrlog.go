// Package hdrlog writes respmeter's latency histograms as an HdrHistogram
// interval log (Writer) and reads such logs back (Load), the text format of HdrHistogram's HistogramLogWriter (see its
// javadoc and the "Histogram log format" section of the HdrHistogram README).
// Such a log is read by hdrhistogram-go's NewHistogramLogReader, by
// HdrHistogram's HistogramLogProcessor and by HdrHistogramVisualizer, and by
// respmeter's own metrics/report package.
//
// A log written by Writer looks like
//
//	#[Histogram log format version 1.3]
//	#[StartTime: 1700000000 (seconds since epoch), 2023-11-14T22:13:20Z]
//	#[BaseTime: 1700000000 (seconds since epoch)]
//	"StartTimestamp","Interval_Length","Interval_Max","Interval_Compressed_Histogram"
//	Tag=get.total,0.000000,1.000000,0.000415,HISTFAAAA...
//
// with one line per interval and tag. Tags name a command and phase,
// "<command>.<phase>" such as get.total or get.upstream. Timestamps are
// seconds relative to BaseTime, with millisecond resolution. The histograms
// record microseconds, as all of respmeter's do (package metrics), so a
// reader must divide values by 1e6 to get seconds (HistogramLogProcessor
// -outputValueUnitRatio 1e6, which is its default, made for nanoseconds to
// milliseconds) or by 1e3 to get milliseconds. The Interval_Max
// column is written by hdrhistogram-go, which always divides the maximum by
// 1e6 (its "ms:ns" ratio, not settable): for microsecond histograms that
// column is therefore in seconds. Readers ignore it and decode the
// histograms.
//
// The package does not lock: a Writer and the histograms passed to it must
// not be used concurrently with its methods.
package hdrlog

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// Errors returned by WriteInterval, wrapped with details; test with errors.Is.
var (
	// ErrTag reports a tag the format cannot carry: one containing a comma,
	// a space or a line break.
	ErrTag = errors.New("hdrlog: invalid tag")
	// ErrInterval reports an interval that ends before it starts, or starts
	// before the log's base time (the format has no negative offsets).
	ErrInterval = errors.New("hdrlog: invalid interval")
)

// Writer writes an HdrHistogram interval log to an io.Writer. It does not
// buffer: each call issues one Write per line, so wrap a file in a
// bufio.Writer (and flush it) when writing many intervals. A Writer is not
// safe for concurrent use.
type Writer struct {
	lw     *hdrhistogram.HistogramLogWriter
	baseMs int64 // BaseTime, whole seconds since the epoch, in ms
}

// NewWriter writes the log header to w and returns a Writer for the
// intervals: the format version, StartTime and BaseTime comments and the
// legend line, as HistogramLogWriter's outputLogFormatVersion,
// outputStartTime, outputBaseTime and outputLegend write them. Both times are
// start truncated to a whole second (that is how hdrhistogram-go writes
// them); interval timestamps are offsets from that BaseTime. It returns the
// error of the first failed write.
func NewWriter(w io.Writer, start time.Time) (*Writer, error) {
	baseMs := start.Unix() * 1000
	lw := hdrhistogram.NewHistogramLogWriter(w)
	lw.SetBaseTime(baseMs)
	for _, f := range []func() error{
		lw.OutputLogFormatVersion,
		func() error { return lw.OutputStartTime(baseMs) },
		func() error { return lw.OutputBaseTime(baseMs) },
		lw.OutputLegend,
	} {
		if err := f(); err != nil {
			return nil, fmt.Errorf("hdrlog: writing header: %w", err)
		}
	}
	return &Writer{lw: lw, baseMs: baseMs}, nil
}

// WriteInterval writes one interval line: h, a histogram of microseconds
// recorded between start and end (times kept to the millisecond), under tag
// ("" writes an untagged line). For cumulative histograms pass
// Delta(cur, prev). The tag must not contain commas, spaces or line breaks
// (ErrTag); start must not be before the log's BaseTime nor after end
// (ErrInterval).
//
// WriteInterval sets h's tag and start and end times for the duration of the
// call, as HistogramLogWriter reads them from the histogram, and restores
// them before it returns; h is not otherwise changed.
func (w *Writer) WriteInterval(start, end time.Time, tag string, h *hdrhistogram.Histogram) error {
	return w.write(start, end, tag, h, func() error { return w.lw.OutputIntervalHistogram(h) })
}

// WritePackedInterval is WriteInterval for a sparse histogram, such as an
// interval of metrics.Set.Interval: it encodes h from its sparse form,
// byte for byte as WriteInterval encodes a dense histogram with the same
// geometry and counts (hdrhistogram-go's PackedHistogram.Encode), so the
// line is the same.
func (w *Writer) WritePackedInterval(start, end time.Time, tag string, h *hdrhistogram.PackedHistogram) error {
	return w.write(start, end, tag, h, func() error { return w.lw.OutputIntervalPackedHistogram(h) })
}

// logHist is the interval metadata of both histogram types, which
// HistogramLogWriter reads from the histogram.
type logHist interface {
	Tag() string
	SetTag(string)
	StartTimeMs() int64
	SetStartTimeMs(int64)
	EndTimeMs() int64
	SetEndTimeMs(int64)
}

// write checks tag and the interval, sets them on h, calls out to write the
// line and restores h's metadata.
func (w *Writer) write(start, end time.Time, tag string, h logHist, out func() error) error {
	if strings.ContainsAny(tag, ", \r\n") {
		return fmt.Errorf("%w %q: contains a comma, space or line break", ErrTag, tag)
	}
	startMs, endMs := start.UnixMilli(), end.UnixMilli()
	if startMs < w.baseMs || endMs < startMs {
		return fmt.Errorf("%w: %s..%s, base time %s", ErrInterval,
			start.UTC().Format(time.RFC3339Nano), end.UTC().Format(time.RFC3339Nano),
			time.UnixMilli(w.baseMs).UTC().Format(time.RFC3339))
	}
	oldTag, oldStart, oldEnd := h.Tag(), h.StartTimeMs(), h.EndTimeMs()
	defer func() {
		h.SetTag(oldTag)
		h.SetStartTimeMs(oldStart)
		h.SetEndTimeMs(oldEnd)
	}()
	h.SetTag(tag)
	h.SetStartTimeMs(startMs)
	h.SetEndTimeMs(endMs)
	if err := out(); err != nil {
		return fmt.Errorf("hdrlog: writing interval %q: %w", tag, err)
	}
	return nil
}

// Delta returns the interval histogram between two cumulative histograms of
// the same series: cur's counts minus prev's, in cur's layout (lowest and
// highest trackable values, significant digits). prev must be an earlier
// state of cur; if its layout differs, its values are first re-recorded in
// cur's layout (values outside cur's range are dropped). A count that would
// go negative (prev is not an earlier state of cur, say after a reset) is
// clamped to 0. A nil prev gives a copy of cur. The result is new, owned by
// the caller, with no tag and zero start and end times; cur and prev are not
// changed.
func Delta(cur, prev *hdrhistogram.Histogram) *hdrhistogram.Histogram {
	s := cur.Export() // a copy of the counts
	if prev == nil {
		return hdrhistogram.Import(s)
	}
	p := prev.Export()
	if p.LowestTrackableValue != s.LowestTrackableValue ||
		p.HighestTrackableValue != s.HighestTrackableValue ||
		p.SignificantFigures != s.SignificantFigures {
		re := hdrhistogram.Import(&hdrhistogram.Snapshot{
			LowestTrackableValue:  s.LowestTrackableValue,
			HighestTrackableValue: s.HighestTrackableValue,
			SignificantFigures:    s.SignificantFigures,
		})
		re.Merge(prev)
		p = re.Export()
	}
	for i := range min(len(s.Counts), len(p.Counts)) {
		s.Counts[i] = max(s.Counts[i]-p.Counts[i], 0)
	}
	return hdrhistogram.Import(s)
}
