package lora

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/m2n-dev/m2n/dtype"
	"github.com/m2n-dev/m2n/fp8"
	"github.com/m2n-dev/m2n/placement"
	"github.com/m2n-dev/m2n/strided"
)

// Matrix is one rank's part of a matrix taking part in a merge, as the
// runtime holds it: the tensor's layout on the rank's side (over its
// layout shape, a row-major reshape of the matrix whose last dim is the
// matrix's columns), the rank (the layout communicator's), the host bytes
// of the buffer that holds the part and the view that places the part in
// them. For a piece of a larger tensor (model.TensorLayout.Origin),
// Origin is the piece's corner in Whole, the whole tensor's layout shape;
// both nil for a whole tensor. A weight the generator holds in
// float8_e4m3fn (Layout's dtype) also gives Scales, the float32 scales
// (weight_scale_inv, little-endian) of the blocks its part touches, in
// row-major order of fp8.Grid.WindowFor of the part's box, over Mode's
// grid of Layout's shape: as refit delivers them.
type Matrix struct {
	Layout placement.Layout
	Rank   int
	Buf    []byte
	View   placement.View
	Origin []int64
	Whole  []int64
	Scales []byte
	Mode   fp8.Mode
}

// segment is one run of a part within one row of its matrix: row i,
// columns [j, j+n), at byte off of the buffer.
type segment struct {
	i, j, n int64
	off     int64
}

// rect is the rows [i0, i1) and columns [j0, j1) that a part covers.
type rect struct{ i0, i1, j0, j1 int64 }

func (r rect) rows() int64 { return r.i1 - r.i0 }
func (r rect) cols() int64 { return r.j1 - r.j0 }

// segments returns m's part as row segments of its matrix, in buffer
// order, and the rectangle they cover; an error if the part is not a
// rectangle of the matrix (every merge operand is: frameworks split
// whole rows or whole columns) or its buffer is too small. A rank that
// holds nothing returns no segments.
func (m Matrix) segments() ([]segment, rect, error) {
	box, ok := m.Layout.RankBox(m.Rank)
	if !ok || box.Empty() {
		return nil, rect{}, nil
	}
	shape := box.Shape()
	whole, origin := m.Whole, m.Origin
	if whole == nil {
		whole, origin = m.Layout.Shape(), make([]int64, len(shape))
	}
	nd := len(whole)
	if nd < 2 || len(origin) != nd || len(shape) != nd {
		return nil, rect{}, fmt.Errorf("lora: a matrix part of %d dims (whole %s), want at least 2", len(shape), placement.FormatShape(whole))
	}
	cols := whole[nd-1]
	elem := m.Layout.ElemSize()
	if err := m.View.Validate(shape); err != nil {
		return nil, rect{}, fmt.Errorf("rank %d: %w", m.Rank, err)
	}
	d := strided.DescribeView(box, box, elem, m.View)
	if err := d.Fits(int64(len(m.Buf))); err != nil {
		return nil, rect{}, fmt.Errorf("rank %d: a buffer of %d bytes for its part: %w", m.Rank, len(m.Buf), err)
	}
	rowLen := shape[nd-1]
	perRun := d.Run / elem / rowLen // innermost rows in one run
	var segs []segment
	r := rect{i0: math.MaxInt64, j0: math.MaxInt64}
	row := int64(0) // innermost rows of the box so far
	idx := make([]int64, nd)
	d.ForEachRun(func(off int64) {
		for k := int64(0); k < perRun; k++ {
			// the row's index over the box's outer dims, then its global
			// linear index in the whole tensor
			q := row
			for x := nd - 2; x >= 0; x-- {
				idx[x] = q%shape[x] + box.Lo[x] + origin[x]
				q /= shape[x]
			}
			idx[nd-1] = box.Lo[nd-1] + origin[nd-1]
			g := int64(0)
			for x := range nd {
				g = g*whole[x] + idx[x]
			}
			s := segment{i: g / cols, j: g % cols, n: rowLen, off: off + k*rowLen*elem}
			segs = append(segs, s)
			r.i0, r.i1 = min(r.i0, s.i), max(r.i1, s.i+1)
			r.j0, r.j1 = min(r.j0, s.j), max(r.j1, s.j+s.n)
			row++
		}
	})
	if n := box.Elems(); r.rows()*r.cols() != n {
		return nil, rect{}, fmt.Errorf("rank %d: its part (%d elements) is not a rectangle of the %d-column matrix (rows [%d, %d), columns [%d, %d))",
			m.Rank, n, cols, r.i0, r.i1, r.j0, r.j1)
	}
	return segs, r, nil
}

// dense reads m's part into a row-major float32 matrix over its rectangle.
func (m Matrix) dense() ([]float32, rect, error) {
	segs, r, err := m.segments()
	if err != nil || len(segs) == 0 {
		return nil, r, err
	}
	out := make([]float32, r.rows()*r.cols())
	dt := m.Layout.DType()
	for _, s := range segs {
		at := (s.i-r.i0)*r.cols() + (s.j - r.j0)
		if err := toFloat(dt, m.Buf[s.off:], out[at:at+s.n]); err != nil {
			return nil, r, err
		}
	}
	return out, r, nil
}

// toFloat converts len(out) elements of dtype dt at b to float32.
func toFloat(dt dtype.DType, b []byte, out []float32) error {
	switch dt {
	case dtype.BF16:
		for k := range out {
			out[k] = math.Float32frombits(uint32(binary.LittleEndian.Uint16(b[2*k:])) << 16)
		}
	case dtype.F32:
		for k := range out {
			out[k] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*k:]))
		}
	default:
		return fmt.Errorf("lora: a merge of %s weights (bf16, f32 and fp8e4m3 are merged)", dt)
	}
	return nil
}

// fromFloat stores v as dtype dt at b: bf16 rounded to nearest even (NaNs
// kept NaN), as torch's float-to-bfloat16 conversion rounds.
func fromFloat(dt dtype.DType, v []float32, b []byte) {
	switch dt {
	case dtype.BF16:
		for k, x := range v {
			u := math.Float32bits(x)
			var h uint16
			if x != x {
				h = uint16(u>>16) | 0x40
			} else {
				h = uint16((u + 0x7FFF + (u>>16)&1) >> 16)
			}
			binary.LittleEndian.PutUint16(b[2*k:], h)
		}
	case dtype.F32:
		for k, x := range v {
			binary.LittleEndian.PutUint32(b[4*k:], math.Float32bits(x))
		}
	}
}
