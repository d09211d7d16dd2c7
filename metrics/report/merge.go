package report

import "github.com/HdrHistogram/hdrhistogram-go"

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
