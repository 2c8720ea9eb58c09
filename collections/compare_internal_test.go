package collections

import (
	"math"
	"testing"
)

func TestCmpIntFloat(t *testing.T) {
	const p53 = 1 << 53
	for _, tc := range []struct {
		i    int64
		f    float64
		want int
	}{
		{0, 0, 0},
		{1, 1.5, -1},
		{2, 1.5, 1},
		{-1, -1.5, 1},
		{-2, -1.5, -1},
		{p53, p53, 0},
		{p53 + 1, p53, 1},
		{p53 + 1, p53 + 2, -1},
		{math.MaxInt64, 1 << 63, -1},
		{math.MinInt64, -(1 << 63), 0},
		{math.MinInt64, math.Inf(-1), 1},
		{math.MaxInt64, math.Inf(1), -1},
		{math.MinInt64, -1e300, 1},
		{0, math.NaN(), 0},
	} {
		if got := cmpIntFloat(tc.i, tc.f); got != tc.want {
			t.Errorf("cmpIntFloat(%d, %g)=%d, want %d", tc.i, tc.f, got, tc.want)
		}
	}
}
