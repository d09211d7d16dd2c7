package metrics

import (
	"github.com/HdrHistogram/hdrhistogram-go"
)

// Below hotValues, HdrHistogram's buckets at 3 significant digits (2048
// sub-buckets, lowest value 1) hold one value each, and that is where
// most of a proxy's latencies (µs) and all of its common batch sizes fall.
// A loop counts those values in a small dense table instead of the sparse
// histogram, whose RecordValue is a binary search among the used buckets
// (BenchmarkRecorder: several times the dense count's time per value).
const (
	hotValues = 2048
	hotPage   = 16 // values per page of hot counts
)

// rec is one distribution of one loop, as recorded since the last scrape
// took its values: values below hotValues counted densely in hot, the
// others in the sparse histogram spill (which also takes a hot count when
// it would overflow). Both are allocated on the first value and then keep
// their size: hot holds a page of 16 one-byte counts for each 16 values
// it has ever seen (at most 2 KiB, plus its 128-byte page table), spill
// the buckets it has held between two scrapes.
type rec struct {
	hot     *hotCounts
	spill   *hdrhistogram.PackedHistogram
	pending int64 // values recorded since the last take
}

// hotCounts are the dense counts of a rec's values below hotValues, in
// pages of hotPage counts allocated as the values arrive.
type hotCounts struct {
	// page[v/hotPage] is 1 + the index in counts/hotPage of the page of
	// value v, 0 while v's page has no counts.
	page   [hotValues / hotPage]uint8
	counts []uint8
}

// record adds the value v, within newFn's geometry (>= 1), allocating the
// rec's storage on first use (not steady state).
func (r *rec) record(v int64, newFn func() *hdrhistogram.PackedHistogram) {
	if r.spill == nil {
		r.spill = newFn()
		r.hot = &hotCounts{}
	}
	r.pending++
	if v >= hotValues {
		_ = r.spill.RecordValue(v) // callers clamp v into the geometry: cannot fail
		return
	}
	h := r.hot
	p := h.page[v/hotPage]
	if p == 0 { // a new page: grows until every page of the values seen has one
		h.counts = append(h.counts, make([]uint8, hotPage)...)
		p = uint8(len(h.counts) / hotPage)
		h.page[v/hotPage] = p
	}
	c := &h.counts[int(p-1)*hotPage+int(v%hotPage)]
	if *c == 255 { // would overflow: move the 256 values to spill
		_ = r.spill.RecordValues(v, 256)
		*c = 0
		return
	}
	*c++
}

// takeFrom moves the values r recorded since it was last taken, if any,
// into s, which must be empty (a loop's swap buffer: the caller holds the
// loop's lock, and drains s after releasing it), and resets r, which keeps
// its storage. It copies r's hot counts (at most 2 KiB) rather than
// adding them to a histogram, so that the loop waits for a copy only.
func (s *rec) takeFrom(r *rec, newFn func() *hdrhistogram.PackedHistogram) {
	if r.pending == 0 {
		return
	}
	if s.spill == nil {
		s.spill = newFn()
		s.hot = &hotCounts{}
	}
	s.hot.page = r.hot.page
	s.hot.counts = append(s.hot.counts[:0], r.hot.counts...)
	clear(r.hot.counts)
	if r.spill.TotalCount() > 0 {
		s.spill.Merge(r.spill) // same geometry: nothing is dropped
		r.spill.Reset()
	}
	s.pending, r.pending = r.pending, 0
}

// addTo adds the values of r, which must have dst's geometry, to dst; r is
// not changed.
func (r *rec) addTo(dst *hdrhistogram.PackedHistogram) {
	for pg, p := range r.hot.page {
		if p == 0 {
			continue
		}
		for i, c := range r.hot.counts[int(p-1)*hotPage : int(p)*hotPage] {
			if c != 0 {
				_ = dst.RecordValues(int64(pg*hotPage+i), int64(c))
			}
		}
	}
	if r.spill.TotalCount() > 0 {
		dst.Merge(r.spill)
	}
}

// reset empties r, keeping its storage.
func (r *rec) reset() {
	clear(r.hot.counts)
	r.spill.Reset()
	r.pending = 0
}
