package mesh

import (
	"math"
	"strings"
	"testing"
)

// TestIntervalRankBound: an interval mesh's ranks lie in [0, MaxRanks) as
// New's do; a start near math.MaxInt used to wrap the ranks negative.
func TestIntervalRankBound(t *testing.T) {
	for _, start := range []int{MaxRanks - 3, MaxRanks, math.MaxInt - 1} {
		if m, err := Interval([]int{4}, start); err == nil || !strings.Contains(err.Error(), "ranks must lie in [0, 1048576)") {
			t.Errorf("Interval([4], %d) = %v, %v", start, m, err)
		}
	}
	m, err := Interval([]int{4}, MaxRanks-4)
	if err != nil || m.RankAt(3) != MaxRanks-1 {
		t.Errorf("Interval([4], MaxRanks-4) = %v, %v", m, err)
	}
}
