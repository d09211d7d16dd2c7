package metrics

import (
	"math/bits"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// Below hotValues, HdrHistogram's buckets at 3 significant digits (2048
// sub-buckets, lowest value 1) hold one value each, and that is where
// most of a proxy's latencies (µs) and all of its common batch sizes fall.
// Above it, up to hotLimit, bucket k (k = 1 .. hotShifts) holds the values
// [1024<<k, 2048<<k) in 1024 slots of 2^k values each (the HdrHistogram
// layout, getBucketIndex/getSubBucketIdx): where a saturated engine or
// proxy puts its latencies (2-60 ms). A loop counts the values below
// hotLimit in a small dense table of one count per HdrHistogram slot
// (hotIndex), instead of the sparse histogram, whose RecordValue is a
// binary search among the used buckets (BenchmarkRecorder: several times
// the dense count's time per value). Counting a slot instead of the value
// loses nothing: the histogram keeps only the slot either way.
const (
	hotValues = 2048
	hotShifts = 5                                 // buckets 1..5 above hotValues
	hotLimit  = hotValues << hotShifts            // 65,536: values from here go to spill
	hotSlots  = hotValues + hotShifts*hotValues/2 // 7,168 dense counts at most
	hotPage   = 32                                // slots per page of hot counts
)

// hotIndex returns the dense slot of v, 1 <= v < hotLimit: v itself below
// hotValues, else hotValues + (k-1)*1024 + the sub-bucket above 1024 of
// bucket k = bits.Len(v) - 11, v >> k being in [1024, 2048).
func hotIndex(v int64) int {
	if v < hotValues {
		return int(v)
	}
	k := bits.Len64(uint64(v)) - 11
	return hotValues + (k-1)*(hotValues/2) + int(v>>k) - hotValues/2
}

// hotValue returns the lowest value of dense slot i (hotIndex's inverse):
// a value HdrHistogram counts in the same slot as every v with
// hotIndex(v) == i.
func hotValue(i int) int64 {
	if i < hotValues {
		return int64(i)
	}
	k := (i-hotValues)/(hotValues/2) + 1
	sub := (i-hotValues)%(hotValues/2) + hotValues/2
	return int64(sub) << k
}

// rec is one distribution of one loop, as recorded since the last scrape
// took its values: values below hotLimit counted densely in hot, the
// others in the sparse histogram spill (which also takes a hot count when
// it would overflow). Both are allocated on the first value and then keep
// their size: hot holds a page of 32 one-byte counts for each 32 slots
// it has ever seen (at most 7 KiB, plus its 224-byte page table), spill
// the buckets it has held between two scrapes.
type rec struct {
	hot     *hotCounts
	spill   *hdrhistogram.PackedHistogram
	pending int64 // values recorded since the last take
}

// hotCounts are the dense counts of a rec's values below hotLimit, one per
// slot (hotIndex), in pages of hotPage counts allocated as the values
// arrive.
type hotCounts struct {
	// page[i/hotPage] is 1 + the index in counts/hotPage of the page of
	// slot i, 0 while that page has no counts.
	page   [hotSlots / hotPage]uint8
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
	if v >= hotLimit {
		_ = r.spill.RecordValue(v) // callers clamp v into the geometry: cannot fail
		return
	}
	i := hotIndex(v)
	h := r.hot
	p := h.page[i/hotPage]
	if p == 0 { // a new page: grows until every page of the slots seen has one
		h.counts = append(h.counts, make([]uint8, hotPage)...)
		p = uint8(len(h.counts) / hotPage)
		h.page[i/hotPage] = p
	}
	c := &h.counts[int(p-1)*hotPage+i%hotPage]
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
// its storage. It copies r's hot counts (at most 7 KiB) rather than
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
				_ = dst.RecordValues(hotValue(pg*hotPage+i), int64(c))
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
