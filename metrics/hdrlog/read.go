package hdrlog

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// Errors returned by Load, wrapped with details; test with errors.Is.
var (
	// ErrFormat reports input that is not an HdrHistogram interval log: a
	// line that is neither a comment, the legend nor an interval line, or an
	// interval whose histogram does not decode.
	ErrFormat = errors.New("hdrlog: not an HdrHistogram log")
	// ErrEmpty reports a log with no interval lines.
	ErrEmpty = errors.New("hdrlog: no intervals in log")
	// ErrTagTaken reports a Rename onto a tag the log already has.
	ErrTagTaken = errors.New("hdrlog: tag already in the log")
	// ErrPercentileTable reports memtier_benchmark's percentile table (the
	// .txt file --hdr-file-prefix writes beside the .hgrm interval log),
	// given where an interval log was expected. It wraps ErrFormat.
	ErrPercentileTable = fmt.Errorf("%w: this is memtier_benchmark's percentile table, not its interval log", ErrFormat)
)

// Untagged is the tag under which a Log keeps interval lines that have none
// (a line without "Tag=").
const Untagged = ""

// Log is an HdrHistogram interval log with each tag's intervals merged into
// one histogram. Its histograms record microseconds, as respmeter's do. A
// Log does not change after Load, so it may be read by several goroutines
// at once.
type Log struct {
	hists      map[string]*hdrhistogram.Histogram
	start, end int64 // ms since the epoch
	intervals  int
}

// Load reads an HdrHistogram interval log from r with hdrhistogram-go's
// HistogramLogReader, merging all intervals of each tag. Comment lines
// (including StartTime and BaseTime), the legend line and blank lines are
// skipped. It fails with ErrFormat, naming the line, on input that is not
// such a log (ErrPercentileTable on memtier_benchmark's percentile table),
// with ErrEmpty if there is no interval, and with r's error if reading
// fails.
//
// memtier_benchmark 2.3.0's .hgrm log has the legend
// "StartTimestamp","EndTimestamp",... and absolute times: its second
// column is the interval's end, not its length, and is read as such.
func Load(r io.Reader) (*Log, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("hdrlog: reading log: %w", err)
	}
	// HistogramLogReader silently skips lines it does not recognize, so
	// garbage would read as an empty log: check the lines first.
	endStamps, err := checkLines(data)
	if err != nil {
		return nil, err
	}
	l := &Log{hists: make(map[string]*hdrhistogram.Histogram)}
	rd := hdrhistogram.NewHistogramLogReader(bytes.NewReader(data))
	for {
		h, err := rd.NextIntervalHistogram()
		if err != nil {
			return nil, fmt.Errorf("%w: interval %d: %w", ErrFormat, l.intervals+1, err)
		}
		if h == nil {
			break
		}
		if endStamps {
			// The reader took the end for a length: end = start + end.
			h.SetEndTimeMs(h.EndTimeMs() - h.StartTimeMs())
		}
		l.add(h)
	}
	if l.intervals == 0 {
		return nil, ErrEmpty
	}
	return l, nil
}

// checkLines reports the first line of data that is not blank, a comment
// ("#..."), a legend ("\"StartTimestamp\",...") or an interval line
// ("[Tag=T,]start,length,max,histogram"), and whether the legend names the
// second column EndTimestamp (memtier_benchmark's .hgrm).
func checkLines(data []byte) (endStamps bool, err error) {
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, len(data)+1) // lines as long as the input
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimRight(sc.Text(), "\r")
		if line != "" && line[0] == '"' {
			endStamps = strings.HasPrefix(line, `"StartTimestamp","EndTimestamp",`)
		}
		if line == "" || line[0] == '#' || line[0] == '"' || isIntervalLine(line) {
			continue
		}
		if f := strings.Fields(line); len(f) > 0 && f[0] == "Value" && strings.Contains(line, "Percentile") {
			return false, ErrPercentileTable
		}
		if len(line) > 60 {
			line = line[:60] + "..."
		}
		return false, fmt.Errorf("%w: line %d is not a comment, legend or [Tag=T,]start,length,max,histogram interval: %q",
			ErrFormat, n, line)
	}
	return endStamps, sc.Err()
}

func isIntervalLine(line string) bool {
	if rest, ok := strings.CutPrefix(line, "Tag="); ok {
		_, line, ok = strings.Cut(rest, ",")
		if !ok {
			return false
		}
	}
	f := strings.SplitN(line, ",", 4)
	if len(f) != 4 || f[3] == "" {
		return false
	}
	for _, s := range f[:3] {
		if _, err := strconv.ParseFloat(s, 64); err != nil {
			return false
		}
	}
	return true
}

// add merges the decoded interval h, which it may keep.
func (l *Log) add(h *hdrhistogram.Histogram) {
	if l.intervals == 0 || h.StartTimeMs() < l.start {
		l.start = h.StartTimeMs()
	}
	if l.intervals == 0 || h.EndTimeMs() > l.end {
		l.end = h.EndTimeMs()
	}
	l.intervals++
	tag := h.Tag()
	m, ok := l.hists[tag]
	switch {
	case !ok:
		l.hists[tag] = h
	case covers(m, h):
		m.Merge(h)
	default: // widen the layout so that nothing is dropped
		w := hdrhistogram.New(
			min(m.LowestTrackableValue(), h.LowestTrackableValue()),
			max(m.HighestTrackableValue(), h.HighestTrackableValue()),
			int(max(m.SignificantFigures(), h.SignificantFigures())))
		w.Merge(m)
		w.Merge(h)
		l.hists[tag] = w
	}
}

// covers reports whether m's layout holds all of h's values at h's precision.
func covers(m, h *hdrhistogram.Histogram) bool {
	return m.LowestTrackableValue() <= h.LowestTrackableValue() &&
		m.HighestTrackableValue() >= h.HighestTrackableValue() &&
		m.SignificantFigures() >= h.SignificantFigures()
}

// Filter returns a Log holding only the tags keep accepts (histograms are
// shared, not copied).
func (l *Log) Filter(keep func(tag string) bool) *Log {
	out := &Log{hists: make(map[string]*hdrhistogram.Histogram), start: l.start, end: l.end, intervals: l.intervals}
	for t, h := range l.hists {
		if keep(t) {
			out.hists[t] = h
		}
	}
	return out
}

// Rename returns a Log whose tag from (Untagged for intervals without a
// tag, as memtier_benchmark's --hdr-file-prefix logs have) is called to, so
// that it pairs with another log's to in Compare; the histograms are
// shared, not copied. A log without from is returned as is. It fails with
// ErrTagTaken when the log has both from and to, a different tag.
func (l *Log) Rename(from, to string) (*Log, error) {
	h, ok := l.hists[from]
	if !ok || from == to {
		return l, nil
	}
	if _, taken := l.hists[to]; taken {
		return nil, fmt.Errorf("%w: %q renamed to %q", ErrTagTaken, shownTag(from), shownTag(to))
	}
	out := l.Filter(func(t string) bool { return t != from })
	out.hists[to] = h
	return out, nil
}

// shownTag returns tag as messages show it: Untagged is "(untagged)".
func shownTag(tag string) string {
	if tag == Untagged {
		return "(untagged)"
	}
	return tag
}

// Tags returns the log's tags, sorted; Untagged ("") sorts first.
func (l *Log) Tags() []string {
	tags := make([]string, 0, len(l.hists))
	for t := range l.hists {
		tags = append(tags, t)
	}
	slices.Sort(tags)
	return tags
}

// Histogram returns the merged histogram of tag's intervals, in
// microseconds, or nil if the log has no such tag. It belongs to the Log:
// do not modify it.
func (l *Log) Histogram(tag string) *hdrhistogram.Histogram { return l.hists[tag] }

// Intervals returns the number of interval lines read, over all tags.
func (l *Log) Intervals() int { return l.intervals }

// Start returns the earliest interval start time, to the millisecond.
func (l *Log) Start() time.Time { return time.UnixMilli(l.start) }

// End returns the latest interval end time, to the millisecond.
func (l *Log) End() time.Time { return time.UnixMilli(l.end) }

// Merge returns one Log holding all the intervals of logs (of several
// proxies or replay workers): each tag's histograms merged into one. The
// merge is exact (HdrHistogram adds counts bucket by bucket), so its
// percentiles are those of one histogram of all the values, never an
// average of the logs' percentiles. logs are not changed.
func Merge(logs ...*Log) *Log {
	out := &Log{hists: make(map[string]*hdrhistogram.Histogram)}
	for _, l := range logs {
		for tag, h := range l.hists {
			c := hdrhistogram.Import(h.Export())
			c.SetTag(tag)
			c.SetStartTimeMs(l.start)
			c.SetEndTimeMs(l.end)
			out.add(c)
		}
		// add counted one interval per tag; the log had l.intervals.
		out.intervals += l.intervals - len(l.hists)
	}
	return out
}
