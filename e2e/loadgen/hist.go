package loadgen

import (
	"math"
	"math/bits"
	"sync/atomic"
	"time"
)

// Histogram records durations in log-linear buckets, the scheme of
// HdrHistogram: values below 2^histBits nanoseconds are exact, and above
// that every power of two is split into 2^(histBits-1) buckets, so a
// reported percentile is within 1/2^(histBits-1) (0.8%) of the true
// value. Memory is fixed (about 40 KiB) however many values are
// recorded, and Record is lock-free, so workers share one histogram.
type Histogram struct {
	counts [histBuckets]atomic.Uint64
	n      atomic.Uint64
	sum    atomic.Uint64
	max    atomic.Uint64
	min    atomic.Uint64 // stored as ^value so the zero value means "none yet"
}

const (
	histBits = 8
	histHalf = 1 << (histBits - 1)
	// Values up to 2^histMaxExp ns (about 18 minutes) have their own
	// buckets; anything longer lands in the last one.
	histMaxExp  = 40
	histBuckets = 1<<histBits + (histMaxExp-histBits)*histHalf
)

func bucketOf(v uint64) int {
	if v < 1<<histBits {
		return int(v)
	}
	e := bits.Len64(v) - histBits // >= 1: how far v is shifted to keep its top histBits bits
	if e > histMaxExp-histBits {
		return histBuckets - 1
	}
	m := v >> e // in [histHalf, 2*histHalf)
	return 1<<histBits + (e-1)*histHalf + int(m-histHalf)
}

// bucketHigh is the largest value that falls into bucket i.
func bucketHigh(i int) uint64 {
	if i < 1<<histBits {
		return uint64(i)
	}
	i -= 1 << histBits
	e := i/histHalf + 1
	m := uint64(i%histHalf + histHalf)
	return (m+1)<<e - 1
}

// Record adds one duration; negative durations count as zero.
func (h *Histogram) Record(d time.Duration) {
	v := uint64(max(d, 0))
	h.counts[bucketOf(v)].Add(1)
	h.n.Add(1)
	h.sum.Add(v)
	for {
		cur := h.max.Load()
		if v <= cur || h.max.CompareAndSwap(cur, v) {
			break
		}
	}
	for {
		cur := h.min.Load()
		if (cur != 0 && v >= ^cur) || h.min.CompareAndSwap(cur, ^v) {
			break
		}
	}
}

// Merge adds every value recorded in o.
func (h *Histogram) Merge(o *Histogram) {
	for i := range o.counts {
		if c := o.counts[i].Load(); c > 0 {
			h.counts[i].Add(c)
		}
	}
	h.n.Add(o.n.Load())
	h.sum.Add(o.sum.Load())
	if m := o.max.Load(); m > h.max.Load() {
		h.max.Store(m)
	}
	if m := o.min.Load(); m != 0 && (h.min.Load() == 0 || ^m < ^h.min.Load()) {
		h.min.Store(m)
	}
}

// Count is how many values were recorded.
func (h *Histogram) Count() uint64 { return h.n.Load() }

// Max is the largest value recorded.
func (h *Histogram) Max() time.Duration { return time.Duration(h.max.Load()) }

// Min is the smallest value recorded, 0 when there is none.
func (h *Histogram) Min() time.Duration {
	if m := h.min.Load(); m != 0 {
		return time.Duration(^m)
	}
	return 0
}

// Mean is the average of the recorded values.
func (h *Histogram) Mean() time.Duration {
	n := h.n.Load()
	if n == 0 {
		return 0
	}
	return time.Duration(h.sum.Load() / n)
}

// Quantile returns the value at quantile q (0.99 for p99): the highest
// value equivalent to the bucket holding the ceil(q*n)-th smallest value,
// capped at the true maximum. It is 0 for an empty histogram.
func (h *Histogram) Quantile(q float64) time.Duration {
	n := h.n.Load()
	if n == 0 {
		return 0
	}
	rank := uint64(math.Ceil(q * float64(n)))
	rank = min(max(rank, 1), n)
	var seen uint64
	for i := range h.counts {
		seen += h.counts[i].Load()
		if seen >= rank {
			return time.Duration(min(bucketHigh(i), h.max.Load()))
		}
	}
	return h.Max()
}

// Summary is a histogram's usual percentiles.
type Summary struct {
	Count                       uint64
	Min, Mean, Max              time.Duration
	P50, P90, P99, P999, P99_99 time.Duration
}

// Summarize returns the percentiles reports use.
func (h *Histogram) Summarize() Summary {
	return Summary{
		Count: h.Count(), Min: h.Min(), Mean: h.Mean(), Max: h.Max(),
		P50: h.Quantile(0.50), P90: h.Quantile(0.90), P99: h.Quantile(0.99),
		P999: h.Quantile(0.999), P99_99: h.Quantile(0.9999),
	}
}
