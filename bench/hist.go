package bench

import (
	"math/bits"
	"time"
)

// subBits sets the histogram's precision: 2^subBits buckets per power of two, so a value
// is placed within 1/2^subBits (about 3%) of itself, as in an HDR histogram.
const (
	subBits    = 5
	subCount   = 1 << subBits
	numBuckets = 2*subCount + (64-subBits-1)*subCount
)

// Histogram is a log-linear latency histogram (HDR-style): exact below 64 ns, then 32
// buckets per power of two. The zero value is ready; it is not safe for concurrent use
// (give each goroutine its own and Merge them).
type Histogram struct {
	counts [numBuckets]uint64
	total  uint64
	max    uint64
}

func bucketOf(v uint64) int {
	if v < 2*subCount {
		return int(v)
	}
	shift := bits.Len64(v) - subBits - 1
	top := v >> shift // in [subCount, 2*subCount)
	return 2*subCount + (shift-1)*subCount + int(top-subCount)
}

// bucketMid returns a representative value (the middle) of bucket i.
func bucketMid(i int) uint64 {
	if i < 2*subCount {
		return uint64(i)
	}
	shift := (i-2*subCount)/subCount + 1
	top := uint64((i-2*subCount)%subCount + subCount)
	lo := top << shift
	return lo + (uint64(1)<<shift)/2
}

// Record adds one observation.
func (h *Histogram) Record(d time.Duration) {
	v := uint64(max(d, 0))
	h.counts[bucketOf(v)]++
	h.total++
	h.max = max(h.max, v)
}

// Merge adds o's observations to h.
func (h *Histogram) Merge(o *Histogram) {
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.total += o.total
	h.max = max(h.max, o.max)
}

// Count is the number of observations.
func (h *Histogram) Count() uint64 { return h.total }

// Max is the largest observation, exactly.
func (h *Histogram) Max() time.Duration { return time.Duration(h.max) }

// Quantile returns the value below which a fraction q (0..1) of the observations fall,
// within the bucket precision; 0 when empty.
func (h *Histogram) Quantile(q float64) time.Duration {
	if h.total == 0 {
		return 0
	}
	rank := uint64(q*float64(h.total) + 0.5)
	rank = min(max(rank, 1), h.total)
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			return time.Duration(min(bucketMid(i), h.max))
		}
	}
	return time.Duration(h.max)
}
