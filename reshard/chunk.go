package reshard

import (
	"slices"

	"github.com/m2n-dev/m2n/placement"
)

// SplitBox cuts a nonempty box into sub-boxes of at most maxBytes each (but
// never less than one element), in row-major order of their corners. It cuts
// along the outermost dim whose slices fit: with inner(d) the bytes of one
// index of dim d, it finds the outermost d with inner(d) <= maxBytes, walks
// the dims before d one index at a time, and cuts dim d into runs of
// maxBytes/inner(d) indices. The parts are boxes, so each side of a transfer
// describes them with Describe.
func SplitBox(b placement.Box, elem, maxBytes int64) []placement.Box {
	nd := b.NDim()
	if b.Elems()*elem <= maxBytes || nd == 0 {
		return []placement.Box{b}
	}
	// inner[d] = bytes of one index of dim d.
	inner := make([]int64, nd)
	acc := elem
	for d := nd - 1; d >= 0; d-- {
		inner[d] = acc
		acc *= b.Hi[d] - b.Lo[d]
	}
	cut := nd - 1
	for d := 0; d < nd; d++ {
		if inner[d] <= maxBytes {
			cut = d
			break
		}
	}
	step := max(1, maxBytes/inner[cut])
	var out []placement.Box
	idx := slices.Clone(b.Lo[:cut])
	for {
		for lo := b.Lo[cut]; lo < b.Hi[cut]; lo += step {
			sub := placement.Box{Lo: slices.Clone(b.Lo), Hi: slices.Clone(b.Hi)}
			for d := 0; d < cut; d++ {
				sub.Lo[d], sub.Hi[d] = idx[d], idx[d]+1
			}
			sub.Lo[cut], sub.Hi[cut] = lo, min(lo+step, b.Hi[cut])
			out = append(out, sub)
		}
		d := cut - 1
		for ; d >= 0; d-- {
			idx[d]++
			if idx[d] < b.Hi[d] {
				break
			}
			idx[d] = b.Lo[d]
		}
		if d < 0 {
			return out
		}
	}
}
