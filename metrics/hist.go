package metrics

import (
	"iter"
	"math/bits"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// histReader is what Durations and Counts read from their histogram, which
// is either a dense copy (Set.Snapshot) or a Set's sparse cumulative
// histogram (views: the Prometheus collector, /stats, the table). Both
// share HdrHistogram's geometry, so they give the same values to the bit.
type histReader interface {
	TotalCount() int64
	ValueAtPercentile(pct float64) int64 // pct in 0-100
	Max() int64
}

// histOf returns dense if set, else sparse if set, else nil.
func histOf(dense *hdrhistogram.Histogram, sparse *hdrhistogram.PackedHistogram) histReader {
	switch {
	case dense != nil:
		return dense
	case sparse != nil:
		return sparse
	}
	return nil
}

// histBuckets returns the non-empty buckets of dense, else of sparse, in
// ascending order, as (lowest equivalent value, count) pairs.
func histBuckets(dense *hdrhistogram.Histogram, sparse *hdrhistogram.PackedHistogram) iter.Seq2[int64, int64] {
	return func(yield func(int64, int64) bool) {
		switch {
		case dense != nil:
			for _, bar := range dense.Distribution() {
				if bar.Count > 0 && !yield(bar.From, bar.Count) {
					return
				}
			}
		case sparse != nil:
			sparse.ForEachBucket(yield)
		}
	}
}

// highestEquivalent returns the highest value counted in the bucket whose
// lowest value is v, for the geometries of this package (lowest value 1, 3
// significant digits: 2048 sub-buckets, so buckets of width 1 below 2048 and
// of width 2^k from 1024·2^k up). It is hdrhistogram-go's
// highestEquivalentValue, unexported there, and the To of its Bar
// (TestHighestEquivalent compares the two).
func highestEquivalent(v int64) int64 {
	const subBucketMask = 2047 // sub-bucket count - 1
	k := bits.Len64(uint64(v|subBucketMask)) - 11
	return v + 1<<k - 1
}

// swapBuf is a loop's swap buffer: a scrape moves one command's (or
// shard's, or the per-loop distributions') new values into it under the
// loop's lock, and merges them into the Set's cumulative histograms after
// releasing the lock. One per loop, reused by every command, so it only
// ever grows to the largest single distribution of that loop.
type swapBuf struct {
	durs  [max(int(NumPhases), numExtra)]rec // duration geometry
	batch rec                                // batch geometry
}

// drain adds the swap buffer slot to the cumulative histogram *acc and,
// if ivl is not nil, to the interval histogram *ivl (see Set.Interval),
// each allocated with newFn's geometry if nil, then resets slot. The
// caller holds the Set's merge lock, not the loop's.
func drain(slot *rec, acc, ivl **hdrhistogram.PackedHistogram, newFn func() *hdrhistogram.PackedHistogram) {
	if slot.pending == 0 {
		return
	}
	for _, dst := range [2]**hdrhistogram.PackedHistogram{acc, ivl} {
		if dst == nil {
			continue
		}
		if *dst == nil {
			*dst = newFn()
		}
		slot.addTo(*dst)
	}
	slot.reset()
}
