package sim

import "math"

// series bins the bytes every link carries over time. The bins start 1 us
// wide; when the run outgrows them, neighbours merge and the width doubles,
// so memory stays links x bins however long the run.
type series struct {
	width float64
	n     int
	data  []float32 // [link][bin]
}

func newSeries(links, bins int) *series {
	bins = max(2, bins+bins%2) // even, so that neighbours pair up
	return &series{width: 1e-6, n: bins, data: make([]float32, links*bins)}
}

// add spreads b bytes evenly over [t0, t1) on link l.
func (s *series) add(l int32, t0, t1, b float64) {
	for t1 > s.width*float64(s.n) {
		s.double()
	}
	row := s.data[int(l)*s.n : int(l+1)*s.n]
	k0, k1 := int(t0/s.width), int(t1/s.width)
	if k1 >= s.n {
		k1 = s.n - 1
	}
	if k0 >= k1 || t1 <= t0 {
		row[min(k0, s.n-1)] += float32(b)
		return
	}
	rate := b / (t1 - t0)
	row[k0] += float32(rate * (float64(k0+1)*s.width - t0))
	for k := k0 + 1; k < k1; k++ {
		row[k] += float32(rate * s.width)
	}
	row[k1] += float32(rate * (t1 - float64(k1)*s.width))
}

func (s *series) double() {
	links := len(s.data) / s.n
	half := s.n / 2
	for l := 0; l < links; l++ {
		row := s.data[l*s.n : (l+1)*s.n]
		for i := 0; i < half; i++ {
			row[i] = row[2*i] + row[2*i+1]
		}
		clear(row[half:])
	}
	s.width *= 2
}

// utilisation returns link l's share of capacity used in each of the
// first bins bins.
func (s *series) utilisation(l int32, capacity float64, bins int) []float64 {
	out := make([]float64, bins)
	row := s.data[int(l)*s.n : int(l+1)*s.n]
	for i := range out {
		out[i] = math.Min(float64(row[i])/(capacity*s.width), 1.5)
	}
	return out
}
