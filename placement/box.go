package placement

import (
	"fmt"
	"slices"
	"strings"
)

// Interval is the half-open index range [Lo, Hi) along one tensor dim.
type Interval struct{ Lo, Hi int64 }

// Len returns Hi-Lo.
func (iv Interval) Len() int64 { return iv.Hi - iv.Lo }

// Empty reports whether the interval holds no index.
func (iv Interval) Empty() bool { return iv.Hi <= iv.Lo }

// Intersect returns the common part of two intervals; it may be empty.
func (iv Interval) Intersect(o Interval) Interval {
	return Interval{max(iv.Lo, o.Lo), min(iv.Hi, o.Hi)}
}

// Box is an N-D half-open region of a global tensor: index i lies in the box
// when Lo[d] <= i[d] < Hi[d] for every dim d. A box of a 0-dim tensor has no
// dims and holds the tensor's single element.
type Box struct {
	Lo, Hi []int64
}

// NDim returns the number of dims.
func (b Box) NDim() int { return len(b.Lo) }

// Shape returns the extent of every dim.
func (b Box) Shape() []int64 {
	s := make([]int64, len(b.Lo))
	for d := range s {
		s[d] = b.Hi[d] - b.Lo[d]
	}
	return s
}

// Elems returns the number of elements in the box (1 for a 0-dim box).
func (b Box) Elems() int64 {
	n := int64(1)
	for d := range b.Lo {
		n *= b.Hi[d] - b.Lo[d]
	}
	return n
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

// Contains reports whether the box holds global index idx.
func (b Box) Contains(idx []int64) bool {
	for d := range b.Lo {
		if idx[d] < b.Lo[d] || idx[d] >= b.Hi[d] {
			return false
		}
	}
	return true
}

// Equal reports whether two boxes have the same bounds.
func (b Box) Equal(o Box) bool { return slices.Equal(b.Lo, o.Lo) && slices.Equal(b.Hi, o.Hi) }

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
