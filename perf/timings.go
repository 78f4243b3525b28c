package perf

import "sort"

// keepSamples is how many samples a timings keeps for its median: exact
// up to that many, a uniform sample of them beyond.
const keepSamples = 4096

// keepHead is how many of the first samples a timings keeps in order, for
// reports that list them (refit sync's steps_s).
const keepHead = 1024

// timings summarises per-iteration times in bounded memory, however many
// iterations run: the count, min, max and mean exactly, the median
// exactly up to keepSamples samples and from a uniform reservoir of them
// beyond, and the first keepHead samples in order. The zero value is
// empty; Add is allocation-free once the reservoir is full. Every rank
// that adds the same times summarises them alike.
type timings struct {
	n        int64
	min, max float64
	sum      float64
	sample   []float64 // the reservoir (Vitter's algorithm R)
	head     []float64
	rng      uint64
}

// Add records one iteration's time.
func (t *timings) Add(x float64) {
	if t.n == 0 || x < t.min {
		t.min = x
	}
	if t.n == 0 || x > t.max {
		t.max = x
	}
	t.n++
	t.sum += x
	if len(t.head) < keepHead {
		t.head = append(t.head, x)
	}
	if len(t.sample) < keepSamples {
		t.sample = append(t.sample, x)
		return
	}
	// keep x with probability keepSamples/n, in place of a random sample:
	// a deterministic generator, so that every rank summarises alike.
	t.rng = t.rng*6364136223846793005 + 1442695040888963407
	if j := (t.rng >> 1) % uint64(t.n); j < keepSamples {
		t.sample[j] = x
	}
}

// Count returns how many times were added.
func (t *timings) Count() int64 { return t.n }

// Min returns the least time, 0 for none.
func (t *timings) Min() float64 { return t.min }

// Max returns the greatest time, 0 for none.
func (t *timings) Max() float64 { return t.max }

// Median returns the median of the times (of the reservoir beyond
// keepSamples), 0 for none.
func (t *timings) Median() float64 { return median(t.sample) }

// Mean returns the mean, 0 for none.
func (t *timings) Mean() float64 {
	if t.n == 0 {
		return 0
	}
	return t.sum / float64(t.n)
}

// First returns the first keepHead (1024) times, in order.
func (t *timings) First() []float64 { return append([]float64(nil), t.head...) }

// median returns the median of v, 0 for none.
func median(v []float64) float64 {
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	if len(s) == 0 {
		return 0
	}
	if len(s)%2 == 0 {
		return (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return s[len(s)/2]
}
