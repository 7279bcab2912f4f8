package stats

import (
	"testing"
	"time"
)

func TestPercentile(t *testing.T) {
	ms := func(ns ...int) []time.Duration {
		out := make([]time.Duration, len(ns))
		for i, n := range ns {
			out[i] = time.Duration(n) * time.Millisecond
		}
		return out
	}
	ten := ms(10, 1, 9, 2, 8, 3, 7, 4, 6, 5) // unsorted on purpose
	for _, tc := range []struct {
		name string
		d    []time.Duration
		p    float64
		want time.Duration
	}{
		{"no samples give zero", nil, 0.5, 0},
		{"one sample is every percentile", ms(7), 0.99, 7 * time.Millisecond},
		{"the median of ten is the fifth by nearest rank", ten, 0.5, 5 * time.Millisecond},
		{"p95 of ten is the largest", ten, 0.95, 10 * time.Millisecond},
		{"p90 of ten is the ninth", ten, 0.9, 9 * time.Millisecond},
		{"p0 is the smallest", ten, 0, 1 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Percentile(tc.d, tc.p); got != tc.want {
				t.Fatalf("Percentile(%v, %v) = %v, want %v", tc.d, tc.p, got, tc.want)
			}
		})
	}
	if ten[0] != 10*time.Millisecond {
		t.Fatal("Percentile sorted its input in place")
	}
}
