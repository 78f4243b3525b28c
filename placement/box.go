package placement

import (
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/m2n-dev/m2n/internal/checked"
)

// Interval is the half-open index range [Lo, Hi) along one tensor dim.
type Interval struct{ Lo, Hi int64 }

// Len returns Hi-Lo. The intervals of a Layout have Lo <= Hi, and Hi-Lo
// fits in an int64 for every interval with 0 <= Lo <= Hi.
func (iv Interval) Len() int64 { return iv.Hi - iv.Lo }

// String renders the interval as "[lo:hi)".
func (iv Interval) String() string { return fmt.Sprintf("[%d:%d)", iv.Lo, iv.Hi) }

// Empty reports whether the interval holds no index.
func (iv Interval) Empty() bool { return iv.Hi <= iv.Lo }

// Box is an N-D half-open region of a global tensor: index i lies in the box
// when Lo[d] <= i[d] < Hi[d] for every dim d. A box of a 0-dim tensor has no
// dims and holds the tensor's single element.
type Box struct {
	Lo, Hi []int64
}

// Shape returns the extent of every dim.
func (b Box) Shape() []int64 {
	s := make([]int64, len(b.Lo))
	for d := range s {
		s[d] = b.Hi[d] - b.Lo[d]
	}
	return s
}

// Elems returns the number of elements in the box (1 for a 0-dim box, 0
// for an empty one). Every box inside a Layout's tensor has a count that
// fits in an int64; for any other box whose count overflows, Elems
// saturates at math.MaxInt64 (CheckedElems reports it as an error).
func (b Box) Elems() int64 {
	n, err := b.CheckedElems()
	if err != nil {
		return math.MaxInt64
	}
	return n
}

// CheckedElems returns the number of elements in the box, or an error
// naming the box when its dims disagree in number (len(Lo) != len(Hi)) or
// the count overflows int64. An empty box (Hi <= Lo in some dim) has 0.
func (b Box) CheckedElems() (int64, error) {
	if len(b.Lo) != len(b.Hi) {
		return 0, fmt.Errorf("placement: box with %d lower and %d upper bounds", len(b.Lo), len(b.Hi))
	}
	if b.Empty() {
		return 0, nil
	}
	n := int64(1)
	for d := range b.Lo {
		ext := uint64(b.Hi[d]) - uint64(b.Lo[d]) // exact: Hi > Lo
		var ok bool
		if ext > math.MaxInt64 {
			ok = false
		} else {
			n, ok = checked.Mul(n, int64(ext))
		}
		if !ok {
			return 0, fmt.Errorf("placement: box %v holds more elements than an int64 counts", b)
		}
	}
	return n, nil
}

// Empty reports whether the box holds no element.
func (b Box) Empty() bool {
	for d := range b.Lo {
		if b.Hi[d] <= b.Lo[d] {
			return true
		}
	}
	return false
}

// Contains reports whether every element of o lies in b (an empty o lies
// in every box; boxes of other ranks never contain one another).
func (b Box) Contains(o Box) bool {
	if o.Empty() {
		return true
	}
	if len(o.Lo) != len(b.Lo) {
		return false
	}
	for d := range o.Lo {
		if o.Lo[d] < b.Lo[d] || o.Hi[d] > b.Hi[d] {
			return false
		}
	}
	return true
}

// Equal reports whether two boxes have the same bounds.
func (b Box) Equal(o Box) bool { return slices.Equal(b.Lo, o.Lo) && slices.Equal(b.Hi, o.Hi) }

// Next advances idx, a point of b in its first len(idx) dims, to the next
// one in row-major order. After the last point it puts idx back at b.Lo
// and reports false (with no dims, at once).
func (b Box) Next(idx []int64) bool {
	for d := len(idx) - 1; d >= 0; d-- {
		idx[d]++
		if idx[d] < b.Hi[d] {
			return true
		}
		idx[d] = b.Lo[d]
	}
	return false
}

// String renders the box as "[0:4, 2:6)".
func (b Box) String() string {
	var s strings.Builder
	s.WriteByte('[')
	for d := range b.Lo {
		if d > 0 {
			s.WriteString(", ")
		}
		fmt.Fprintf(&s, "%d:%d", b.Lo[d], b.Hi[d])
	}
	s.WriteString(")")
	return s.String()
}

// Split cuts a nonempty box into n parts of near-equal size along its
// outermost dim that has at least n indices (or, if none has, into one part
// per index of its longest dim). Parts are in order; fewer than n come
// back when the box is too small. A box with no dims or no elements, or
// n <= 1, comes back whole.
func (b Box) Split(n int) []Box {
	nd := len(b.Lo)
	if n <= 1 || nd == 0 || len(b.Hi) != nd || b.Empty() {
		return []Box{b}
	}
	dim, best := -1, int64(0)
	for d := 0; d < nd; d++ {
		ext := b.Hi[d] - b.Lo[d]
		if ext >= int64(n) {
			dim = d
			break
		}
		if ext > best {
			best, dim = ext, d
		}
	}
	ext := b.Hi[dim] - b.Lo[dim]
	parts := min(int64(n), ext)
	out := make([]Box, 0, parts)
	// ext*j/parts without forming ext*j: ext = q*parts + rem.
	q, rem := ext/parts, ext%parts
	at := func(j int64) int64 { return b.Lo[dim] + q*j + rem*j/parts }
	for j := int64(0); j < parts; j++ {
		lo, hi := at(j), at(j+1)
		sub := Box{Lo: append([]int64(nil), b.Lo...), Hi: append([]int64(nil), b.Hi...)}
		sub.Lo[dim], sub.Hi[dim] = lo, hi
		out = append(out, sub)
	}
	return out
}
