package reshard

import (
	"fmt"

	"github.com/m2n-dev/m2n/internal/checked"
	"github.com/m2n-dev/m2n/placement"
)

// SplitBox cuts a nonempty box into sub-boxes of at most maxBytes each (but
// never less than one element), in row-major order of their corners. It cuts
// along the outermost dim whose slices fit: with inner(d) the bytes of one
// index of dim d, it finds the outermost d with inner(d) <= maxBytes, walks
// the dims before d one index at a time, and cuts dim d into runs of
// maxBytes/inner(d) indices. The parts are boxes, so each side of a transfer
// describes them with Describe.
//
// The number of parts is computed first (CountChunks) and SplitBox returns
// an error instead of parts when the arguments are bad (elem or maxBytes
// below 1, an empty or malformed box) or when the box would be cut into
// more than MaxMessages parts, naming the count.
func SplitBox(b placement.Box, elem, maxBytes int64) ([]placement.Box, error) {
	sp, err := planSplit(b, elem, maxBytes)
	if err != nil {
		return nil, err
	}
	if sp.count > MaxMessages {
		return nil, &FieldError{Field: "chunk bytes", Got: fmt.Sprint(maxBytes),
			Want: fmt.Sprintf("a chunk that cuts box %v into at most %d parts", b, MaxMessages),
			Why:  fmt.Sprintf("%d-byte elements in chunks of at most %d bytes make %d parts", elem, maxBytes, sp.count)}
	}
	nd := len(b.Lo)
	if sp.count == 1 {
		return []placement.Box{b}, nil
	}
	n := int(sp.count)
	out := make([]placement.Box, 0, n)
	buf := make([]int64, 2*nd*n) // one allocation holds every part's bounds
	cut, step := sp.cut, sp.step
	idx := make([]int64, cut)
	copy(idx, b.Lo[:cut])
	for {
		for lo := b.Lo[cut]; lo < b.Hi[cut]; {
			hi := lo + min(step, b.Hi[cut]-lo)
			sub := placement.Box{Lo: buf[0:nd:nd], Hi: buf[nd : 2*nd : 2*nd]}
			buf = buf[2*nd:]
			copy(sub.Lo, b.Lo)
			copy(sub.Hi, b.Hi)
			for d := 0; d < cut; d++ {
				sub.Lo[d], sub.Hi[d] = idx[d], idx[d]+1
			}
			sub.Lo[cut], sub.Hi[cut] = lo, hi
			out = append(out, sub)
			lo = hi
		}
		if !b.Next(idx) {
			return out, nil
		}
	}
}

// CountChunks returns how many parts SplitBox(b, elem, maxBytes) cuts b
// into, without making them, or the error SplitBox would return for bad
// arguments. A count that overflows int64 is an error too; a count above
// MaxMessages is not (SplitBox refuses it, CountChunks reports it).
func CountChunks(b placement.Box, elem, maxBytes int64) (int64, error) {
	sp, err := planSplit(b, elem, maxBytes)
	return sp.count, err
}

// split is how SplitBox cuts a box: along dim cut in runs of step indices,
// every dim before cut one index at a time, into count parts.
type split struct {
	cut   int
	step  int64
	count int64
}

func planSplit(b placement.Box, elem, maxBytes int64) (split, error) {
	if elem < 1 {
		return split{}, &FieldError{Field: "element size", Got: fmt.Sprintf("%d bytes", elem), Want: "at least 1",
			Why: fmt.Sprintf("splitting box %v into chunks counts bytes per element", b)}
	}
	if maxBytes < 1 {
		return split{}, &FieldError{Field: "chunk bytes", Got: fmt.Sprint(maxBytes), Want: "at least 1",
			Why: fmt.Sprintf("box %v cannot be cut into chunks of %d bytes", b, maxBytes)}
	}
	elems, err := b.CheckedElems()
	if err != nil {
		return split{}, fmt.Errorf("reshard: split: %w", err)
	}
	nd := len(b.Lo)
	if nd == 0 {
		return split{count: 1}, nil
	}
	if elems == 0 {
		return split{}, fmt.Errorf("reshard: split of box %v: the box is empty", b)
	}
	if total, ok := checked.Mul(elems, elem); ok && total <= maxBytes {
		return split{count: 1}, nil
	}
	// inner = bytes of one index of dim d; fits tells whether it is at most
	// maxBytes (an inner that overflows int64 does not).
	cut := nd - 1
	inner, fits := elem, true
	for d := nd - 1; d >= 0; d-- {
		if fits && inner <= maxBytes {
			cut = d
		} else {
			break
		}
		var ok bool
		if inner, ok = checked.Mul(inner, b.Hi[d]-b.Lo[d]); !ok {
			fits = false
		}
	}
	// cut is the outermost dim whose one index fits (nd-1 if none does);
	// recompute its inner.
	in := elem
	for d := nd - 1; d > cut; d-- {
		in *= b.Hi[d] - b.Lo[d] // fits: it is at most maxBytes
	}
	step := max(1, maxBytes/in)
	ext := b.Hi[cut] - b.Lo[cut]
	runs := ext / step
	if ext%step != 0 {
		runs++
	}
	count := runs
	for d := 0; d < cut; d++ {
		var ok bool
		if count, ok = checked.Mul(count, b.Hi[d]-b.Lo[d]); !ok {
			return split{}, &FieldError{Field: "chunk bytes", Got: fmt.Sprint(maxBytes),
				Want: fmt.Sprintf("a chunk that cuts box %v into at most %d parts", b, MaxMessages),
				Why:  fmt.Sprintf("%d-byte elements in chunks of at most %d bytes make more parts than an int64 counts", elem, maxBytes)}
		}
	}
	return split{cut: cut, step: step, count: count}, nil
}
