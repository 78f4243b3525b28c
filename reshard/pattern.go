package reshard

import (
	"encoding/hex"
	"fmt"

	"github.com/m2n-dev/m2n/placement"
)

// PatternByte returns byte k of the test pattern of global element g: a
// mix of g, so that every element differs from its neighbours and a byte
// landing in the wrong place is caught.
func PatternByte(g int64, k int) byte { return patternByte(g, k, 0) }

// patternByte is PatternByte for the tensor numbered seed: tensors with
// different seeds hold different bytes, so one landing in another's place is
// caught too.
func patternByte(g int64, k int, seed uint64) byte {
	x := uint64(g)*0x9E3779B97F4A7C15 + 0x632BE59BD9B4E019 + seed*0xD6E8FEB86659FD93
	x ^= x >> 29
	x *= 0xBF58476D1CE4E5B9
	x ^= x >> 32
	return byte(x >> (8 * (k % 8)))
}

// PoisonByte fills destination buffers before a checked run.
const PoisonByte = 0xA5

// forEachRow calls fn for every innermost row of box (global indices),
// with the row's first global linear index, its position in the box's dense
// buffer and its length in elements.
func forEachRow(shape []int64, box placement.Box, fn func(global, local, n int64)) {
	nd := len(shape)
	if box.Empty() {
		return
	}
	if nd == 0 {
		fn(0, 0, 1)
		return
	}
	n := box.Hi[nd-1] - box.Lo[nd-1]
	idx := make([]int64, nd)
	copy(idx, box.Lo)
	local := int64(0)
	for {
		g := int64(0)
		for d := 0; d < nd; d++ {
			g = g*shape[d] + idx[d]
		}
		fn(g, local, n)
		local += n
		d := nd - 2
		for ; d >= 0; d-- {
			idx[d]++
			if idx[d] < box.Hi[d] {
				break
			}
			idx[d] = box.Lo[d]
		}
		if d < 0 {
			return
		}
	}
}

// FillPattern writes the test pattern into the local buffer of rank in
// layout l. It panics if buf is not the rank's local size.
func FillPattern(l placement.Layout, rank int, buf []byte) { FillPatternSeed(l, rank, 0, buf) }

// FillPatternSeed is FillPattern for the tensor numbered seed.
func FillPatternSeed(l placement.Layout, rank int, seed uint64, buf []byte) {
	box, ok := l.RankBox(rank)
	if !ok {
		return
	}
	elem := int(l.ElemSize())
	if int64(len(buf)) != box.Elems()*int64(elem) {
		panic(fmt.Sprintf("reshard: FillPattern: %d bytes for a local size of %d", len(buf), box.Elems()*int64(elem)))
	}
	forEachRow(l.Shape(), box, func(g, local, n int64) {
		p := buf[local*int64(elem) : (local+n)*int64(elem)]
		for i := int64(0); i < n; i++ {
			for k := 0; k < elem; k++ {
				p[int(i)*elem+k] = patternByte(g+i, k, seed)
			}
		}
	})
}

// MismatchError reports the first destination element that does not hold
// the pattern.
type MismatchError struct {
	Rank      int
	Index     []int64 // global index of the element
	Want, Got []byte  // the element's bytes
	Wrong     int64   // how many elements of the rank are wrong in all
}

func (e *MismatchError) Error() string {
	return fmt.Sprintf("rank %d: element %v holds 0x%s, expected 0x%s (%d wrong elements on this rank)",
		e.Rank, e.Index, hex.EncodeToString(e.Got), hex.EncodeToString(e.Want), e.Wrong)
}

// CheckPattern compares rank's local buffer in layout l with the pattern
// and returns a *MismatchError naming the first wrong element, or nil.
func CheckPattern(l placement.Layout, rank int, buf []byte) error {
	return CheckPatternSeed(l, rank, 0, buf)
}

// CheckPatternSeed is CheckPattern for the tensor numbered seed.
func CheckPatternSeed(l placement.Layout, rank int, seed uint64, buf []byte) error {
	box, ok := l.RankBox(rank)
	if !ok {
		return nil
	}
	elem := int(l.ElemSize())
	if int64(len(buf)) != box.Elems()*int64(elem) {
		return fmt.Errorf("rank %d: buffer of %d bytes for a local size of %d", rank, len(buf), box.Elems()*int64(elem))
	}
	var first *MismatchError
	var wrong int64
	shape := l.Shape()
	forEachRow(shape, box, func(g, local, n int64) {
		p := buf[local*int64(elem) : (local+n)*int64(elem)]
		for i := int64(0); i < n; i++ {
			bad := false
			for k := 0; k < elem; k++ {
				if p[int(i)*elem+k] != patternByte(g+i, k, seed) {
					bad = true
					break
				}
			}
			if !bad {
				continue
			}
			wrong++
			if first == nil {
				first = &MismatchError{Rank: rank, Index: unravel(shape, g+i)}
				for k := 0; k < elem; k++ {
					first.Want = append(first.Want, patternByte(g+i, k, seed))
				}
				first.Got = append([]byte(nil), p[int(i)*elem:int(i+1)*elem]...)
			}
		}
	})
	if first != nil {
		first.Wrong = wrong
		return first
	}
	return nil
}

func unravel(shape []int64, g int64) []int64 {
	idx := make([]int64, len(shape))
	for d := len(shape) - 1; d >= 0; d-- {
		if shape[d] > 0 {
			idx[d] = g % shape[d]
			g /= shape[d]
		}
	}
	return idx
}
