package perf

import "testing"

// TestTimingsBounded is 23.12's memory: a summary of a billion
// iterations' times keeps a bounded reservoir, adds without allocating
// once it is full, and keeps an exact count, min and max and a median
// within the reservoir's error.
func TestTimingsBounded(t *testing.T) {
	var tm timings
	const n = 3_000_000
	for i := range n {
		tm.Add(float64(i % 1000))
	}
	if len(tm.sample) != keepSamples || len(tm.head) != keepHead || tm.Count() != n {
		t.Fatalf("kept %d samples and %d in order of %d", len(tm.sample), len(tm.head), tm.Count())
	}
	if tm.Min() != 0 || tm.Max() != 999 || tm.Mean() != 499.5 {
		t.Errorf("min %g, max %g, mean %g", tm.Min(), tm.Max(), tm.Mean())
	}
	if m := tm.Median(); m < 470 || m > 530 {
		t.Errorf("median %g of a uniform 0..999", m)
	}
	if a := testing.AllocsPerRun(1000, func() { tm.Add(1) }); a != 0 {
		t.Errorf("add allocates %v times a call", a)
	}
	var empty timings
	if empty.Median() != 0 || empty.Mean() != 0 {
		t.Errorf("an empty summary has median %g, mean %g", empty.Median(), empty.Mean())
	}
}
