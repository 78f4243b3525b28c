// Package pattern fills tensors with a test pattern of their global element
// index and checks it: source ranks fill their parts, destinations start
// poisoned, and after a reshard every destination element must hold its
// own global index's bytes, so a byte that lands in the wrong place, the
// wrong tensor or not at all is caught and named. Parts may sit in larger
// buffers through views (placement.View), as fused weights do.
package pattern

import (
	"encoding/hex"
	"fmt"

	"github.com/m2n-dev/m2n/placement"
)

// Poison fills destination buffers before a checked run.
const Poison = 0xA5

// Byte returns byte k of the pattern of global element g of the tensor
// numbered seed: a mix of g and seed, so that every element differs from
// its neighbours and tensors with different seeds hold different bytes.
func Byte(g int64, k int, seed uint64) byte {
	x := uint64(g)*0x9E3779B97F4A7C15 + 0x632BE59BD9B4E019 + seed*0xD6E8FEB86659FD93
	x ^= x >> 29
	x *= 0xBF58476D1CE4E5B9
	x ^= x >> 32
	return byte(x >> (8 * (k % 8)))
}

// rows calls fn for every innermost row of rank's part of l: the global
// linear index of its first element, its byte offset in the buffer the
// view v places the part in, and its length in elements. It checks that
// buf is large enough (exactly the part's size for the default view).
func rows(l placement.Layout, rank int, buf []byte, v placement.View, fn func(global, off, n int64)) error {
	box, ok := l.RankBox(rank)
	if !ok || box.Empty() {
		return nil
	}
	elem := l.ElemSize()
	shape := box.Shape()
	if err := v.Validate(shape); err != nil {
		return fmt.Errorf("rank %d: %w", rank, err)
	}
	ext, err := v.Extent(shape)
	if err != nil {
		return fmt.Errorf("rank %d: %w", rank, err)
	}
	if n := int64(len(buf)); n < ext*elem || (v.Dense() && n != ext*elem) {
		return fmt.Errorf("rank %d: a buffer of %d bytes for a part that needs %d", rank, n, ext*elem)
	}
	st := v.ResolvedStrides(shape)
	gshape := l.Shape()
	nd := len(gshape)
	if nd == 0 {
		fn(0, v.Offset*elem, 1)
		return nil
	}
	n := shape[nd-1]
	idx := make([]int64, nd)
	copy(idx, box.Lo)
	for {
		g, off := int64(0), v.Offset
		for d := 0; d < nd; d++ {
			g = g*gshape[d] + idx[d]
			off += (idx[d] - box.Lo[d]) * st[d]
		}
		fn(g, off*elem, n)
		d := nd - 2
		for ; d >= 0; d-- {
			idx[d]++
			if idx[d] < box.Hi[d] {
				break
			}
			idx[d] = box.Lo[d]
		}
		if d < 0 {
			return nil
		}
	}
}

// Fill writes the pattern of tensor seed into rank's part of l, which the
// view v places in buf (the zero View: buf is exactly the part). Ranks
// without a part do nothing.
func Fill(l placement.Layout, rank int, seed uint64, buf []byte, v placement.View) error {
	elem := int(l.ElemSize())
	return rows(l, rank, buf, v, func(g, off, n int64) {
		p := buf[off : off+n*int64(elem)]
		for i := int64(0); i < n; i++ {
			for k := 0; k < elem; k++ {
				p[int(i)*elem+k] = Byte(g+i, k, seed)
			}
		}
	})
}

// PoisonPart fills rank's part of l in buf (through the view v) with Poison,
// leaving the rest of buf alone.
func PoisonPart(l placement.Layout, rank int, buf []byte, v placement.View) error {
	elem := l.ElemSize()
	return rows(l, rank, buf, v, func(_, off, n int64) {
		p := buf[off : off+n*elem]
		for i := range p {
			p[i] = Poison
		}
	})
}

// MismatchError reports the first destination element that does not hold
// the pattern.
type MismatchError struct {
	Tensor    string  // the tensor's name, when the caller gives one
	Rank      int     // the rank that holds it
	Index     []int64 // its global index
	Want, Got []byte  // its bytes
	Wrong     int64   // how many elements of the rank's part are wrong in all
}

func (e *MismatchError) Error() string {
	of := ""
	if e.Tensor != "" {
		of = fmt.Sprintf("tensor %q, ", e.Tensor)
	}
	return fmt.Sprintf("%srank %d: element %v holds 0x%s, expected 0x%s (%d wrong elements on this rank)",
		of, e.Rank, e.Index, hex.EncodeToString(e.Got), hex.EncodeToString(e.Want), e.Wrong)
}

// Check compares rank's part of l in buf (through the view v) with the
// pattern of tensor seed and returns a *MismatchError naming the first
// wrong element, or nil.
func Check(l placement.Layout, rank int, seed uint64, buf []byte, v placement.View) error {
	elem := int(l.ElemSize())
	shape := l.Shape()
	var first *MismatchError
	var wrong int64
	err := rows(l, rank, buf, v, func(g, off, n int64) {
		p := buf[off : off+n*int64(elem)]
		for i := int64(0); i < n; i++ {
			bad := false
			for k := 0; k < elem; k++ {
				if p[int(i)*elem+k] != Byte(g+i, k, seed) {
					bad = true
					break
				}
			}
			if !bad {
				continue
			}
			wrong++
			if first == nil {
				first = &MismatchError{Rank: rank, Index: Unravel(shape, g+i)}
				for k := 0; k < elem; k++ {
					first.Want = append(first.Want, Byte(g+i, k, seed))
				}
				first.Got = append([]byte(nil), p[int(i)*elem:int(i+1)*elem]...)
			}
		}
	})
	if err != nil {
		return err
	}
	if first != nil {
		first.Wrong = wrong
		return first
	}
	return nil
}

// Unravel turns a global linear index into a row-major index of shape.
func Unravel(shape []int64, g int64) []int64 {
	idx := make([]int64, len(shape))
	for d := len(shape) - 1; d >= 0; d-- {
		if shape[d] > 0 {
			idx[d] = g % shape[d]
			g /= shape[d]
		}
	}
	return idx
}
