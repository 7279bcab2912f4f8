// Package stats summarises latency samples for the benchmarks: one
// definition of a percentile, so every table reads the same way.
package stats

import (
	"slices"
	"time"
)

// Percentile is the p-quantile of d (0 <= p <= 1) by nearest rank: the
// smallest sample at or above which at least p of the samples lie. d need
// not be sorted and is not changed. An empty d gives 0.
func Percentile(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := d
	if !slices.IsSorted(d) {
		s = slices.Clone(d)
		slices.Sort(s)
	}
	i := int(p*float64(len(s))+0.5) - 1
	return s[max(0, min(len(s)-1, i))]
}
