package seccomp

import (
	"slices"
	"testing"
)

func TestKeepLastBoundsTheWatchsLists(t *testing.T) {
	for _, tc := range []struct {
		in   []int
		n    int
		want []int
	}{
		{nil, 3, nil},
		{[]int{1, 2}, 3, []int{1, 2}},
		{[]int{1, 2, 3}, 3, []int{1, 2, 3}},
		{[]int{1, 2, 3, 4, 5}, 3, []int{3, 4, 5}},
	} {
		if got := keepLast(slices.Clone(tc.in), tc.n); !slices.Equal(got, tc.want) {
			t.Errorf("keepLast(%v, %d) = %v, want %v", tc.in, tc.n, got, tc.want)
		}
	}
}
