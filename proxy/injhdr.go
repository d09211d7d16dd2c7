package proxy

import (
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/respmeter/respmeter/metrics/hdrlog"
)

// hdrDist is a delay distribution recorded in an HdrHistogram interval
// log ("replay this network"): the merged histogram of one tag, as a
// table of its non-empty buckets. A draw picks a bucket with its recorded
// frequency, then a value uniform over the bucket's range (HdrHistogram's
// lowest to highest equivalent value), so that the draws' percentiles are
// the log's at its precision (3 significant digits in respmeter's logs).
type hdrDist struct {
	// cum[i] is the count of buckets 0..i; lo[i], hi[i] bound bucket i
	// in nanoseconds, inclusive.
	cum, lo, hi []int64
}

// sample draws one delay in nanoseconds. It does not allocate.
func (d *hdrDist) sample(r *rand.Rand) int64 {
	u := r.Int64N(d.cum[len(d.cum)-1]) // 0 .. total-1
	// The first bucket whose cumulative count passes u.
	i, _ := slices.BinarySearch(d.cum, u+1)
	return d.lo[i] + r.Int64N(d.hi[i]-d.lo[i]+1)
}

// hdrUnits are the value units a log's histograms may record, in ns.
var hdrUnits = map[string]int64{"ns": 1, "us": 1_000, "ms": 1_000_000}

// parseHDRDist reads a delay drawn from a recorded HdrHistogram interval
// log (vals: the delay mapping's keys):
//
//	delay: {hdr_log: last-week.hlog, tag: get.upstream, unit: us}
//
// hdr_log is the log's path (relative: to dir, the rule file's
// directory), as respmeter proxy --hdr-log or hdrhistogram-go's
// HistogramLogWriter write it; tag the tag whose intervals, merged, are
// drawn from (optional when the log has one tag; "" names untagged
// lines); unit the unit of the log's values, us (respmeter's and
// memtier_benchmark's logs; the default), ns or ms. The log is read once,
// here.
func parseHDRDist(n *yaml.Node, vals map[string]*yaml.Node, fail failFunc, dir string) (dist, error) {
	for i := 0; i+1 < len(n.Content); i += 2 {
		if k := n.Content[i]; k.Value != "hdr_log" && k.Value != "tag" && k.Value != "unit" {
			return dist{}, fail(k, "delay: unknown key %q for hdr_log (want hdr_log, tag, unit)", k.Value)
		}
	}
	pn := vals["hdr_log"]
	if pn.Kind != yaml.ScalarNode || pn.Value == "" {
		return dist{}, fail(pn, "hdr_log: want the path of an HdrHistogram interval log")
	}
	unit := int64(1_000)
	if un := vals["unit"]; un != nil {
		u, ok := hdrUnits[un.Value]
		if un.Kind != yaml.ScalarNode || !ok {
			return dist{}, fail(un, "unit: want us, ns or ms, got %q", un.Value)
		}
		unit = u
	}
	path := pn.Value
	if !filepath.IsAbs(path) {
		path = filepath.Join(dir, path)
	}
	f, err := os.Open(path)
	if err != nil {
		return dist{}, fail(pn, "hdr_log: %v", err)
	}
	defer f.Close()
	lg, err := hdrlog.Load(f)
	if err != nil {
		// The loader's error may quote the file's first odd line: only
		// its kind is said, so that a rule posted to /inject reads
		// nothing of a file that is not a log.
		why := "not an HdrHistogram interval log"
		if errors.Is(err, hdrlog.ErrEmpty) {
			why = "the log has no interval"
		}
		return dist{}, fail(pn, "hdr_log: %s: %s", path, why)
	}
	tags := lg.Tags()
	var tag string
	switch tn := vals["tag"]; {
	case tn != nil:
		if tn.Kind != yaml.ScalarNode {
			return dist{}, fail(tn, "tag: want a tag of the log")
		}
		tag = tn.Value
		if lg.Histogram(tag) == nil {
			return dist{}, fail(tn, "tag: %s has no tag %q (it has %s)", path, tag, strings.Join(quoted(tags), ", "))
		}
	case len(tags) == 1:
		tag = tags[0]
	default:
		return dist{}, fail(pn, "hdr_log: %s has %d tags (%s): name one with tag:", path, len(tags), strings.Join(quoted(tags), ", "))
	}
	d := &hdrDist{}
	for _, b := range lg.Histogram(tag).Distribution() {
		if b.Count == 0 {
			continue
		}
		var total int64
		if len(d.cum) > 0 {
			total = d.cum[len(d.cum)-1]
		}
		d.cum = append(d.cum, total+b.Count)
		d.lo = append(d.lo, b.From*unit)
		d.hi = append(d.hi, b.To*unit)
	}
	if len(d.cum) == 0 {
		return dist{}, fail(pn, "hdr_log: %s: tag %q recorded nothing", path, tag)
	}
	return dist{kind: "hdr_log", hdr: d}, nil
}

// quoted returns tags each in double quotes, for messages.
func quoted(tags []string) []string {
	out := make([]string, len(tags))
	for i, t := range tags {
		out[i] = `"` + t + `"`
	}
	return out
}
