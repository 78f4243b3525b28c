package fp8

import (
	"fmt"

	"github.com/m2n-dev/m2n/dtype"
	"github.com/m2n-dev/m2n/internal/checked"
	"github.com/m2n-dev/m2n/placement"
	"github.com/m2n-dev/m2n/strided"
)

// maxRunDims is the most outer dims a strided.Desc may have here.
const maxRunDims = 16

// Region is a box of a tensor as one rank holds it: Box is where it lies in
// the global tensor, and its elements, in row-major order of Box, sit in
// Data where At says. A transfer's source is a Region: Data the rank's
// local buffer, At the transfer's SrcAt, Box the transfer's Box.
type Region struct {
	DType dtype.DType // BF16 or F32
	Data  []byte
	At    strided.Desc
	Box   placement.Box
}

// Dense returns the Region of a rank's whole local part when it is dense
// and row-major in data: box is the part's global box.
func Dense(dt dtype.DType, data []byte, box placement.Box) Region {
	n := box.Elems() * int64(dt.Size())
	return Region{DType: dt, Data: data, At: strided.Desc{Run: n}, Box: box}
}

// elemSize returns the byte size of a source dtype, or an error naming it.
func elemSize(dt dtype.DType) (int64, error) {
	switch dt {
	case dtype.BF16:
		return 2, nil
	case dtype.F32:
		return 4, nil
	}
	return 0, fmt.Errorf("fp8: source dtype %v: FP8 quantization takes bf16 or f32", dt)
}

// check validates a region against the grid and returns its element count
// and element size.
func (g Grid) check(r Region) (elems, esz int64, err error) {
	if esz, err = elemSize(r.DType); err != nil {
		return 0, 0, err
	}
	if elems, err = g.checkAt(r, esz); err != nil {
		return 0, 0, err
	}
	return elems, esz, nil
}

// checkAt validates a region of esz-byte elements (r.DType names them in
// errors) against the grid and returns its element count.
func (g Grid) checkAt(r Region, esz int64) (elems int64, err error) {
	if err := g.checkBox("region box", r.Box); err != nil {
		return 0, err
	}
	elems = r.Box.Elems() // inside the tensor, so it fits
	want := elems * esz
	at := r.At
	if len(at.Count) != len(at.Stride) || len(at.Count) > maxRunDims {
		return 0, fmt.Errorf("fp8: region %v: descriptor %+v has %d counts and %d strides (at most %d)", r.Box, at, len(at.Count), len(at.Stride), maxRunDims)
	}
	if at.Offset < 0 || at.Run < 0 {
		return 0, fmt.Errorf("fp8: region %v: descriptor %+v has a negative offset or run", r.Box, at)
	}
	total, last := at.Run, at.Offset
	ok := true
	for i, c := range at.Count {
		if c < 0 || at.Stride[i] < 0 {
			return 0, fmt.Errorf("fp8: region %v: descriptor %+v has a negative count or stride (dim %d)", r.Box, at, i)
		}
		var ok1, ok2 bool
		var step int64
		total, ok1 = checked.Mul(total, c)
		step, ok2 = checked.Mul(max(c-1, 0), at.Stride[i])
		last, ok = checked.Add(last, step)
		if !ok1 || !ok2 || !ok {
			return 0, fmt.Errorf("fp8: region %v: descriptor %+v overflows int64", r.Box, at)
		}
	}
	if total != want {
		return 0, fmt.Errorf("fp8: region %v of %v holds %d bytes, its descriptor %+v describes %d", r.Box, r.DType, want, at, total)
	}
	if want == 0 {
		return 0, nil
	}
	if at.Run%esz != 0 {
		return 0, fmt.Errorf("fp8: region %v: descriptor run of %d bytes is not a whole number of %v elements", r.Box, at.Run, r.DType)
	}
	if end, ok := checked.Add(last, at.Run); !ok || end > int64(len(r.Data)) {
		return 0, fmt.Errorf("fp8: region %v: descriptor %+v reaches byte %d of a %d-byte buffer", r.Box, at, end, len(r.Data))
	}
	return elems, nil
}

// segment is a piece of a region that is contiguous in the source, lies in
// one box row and one block: n elements at data, packed at element pos of
// the region's row-major order, in block win of the window.
type segment struct {
	data   []byte
	n      int64
	pos    int64
	win    int64 // index of the block in the window's values
	slot   int64 // the block's column among the region's block columns
	served int64 // elements of the region in this block
}

// runs steps through a strided.Desc descriptor's runs.
type runs struct {
	at   strided.Desc
	idx  [maxRunDims]int64
	off  int64 // byte offset of the next unread byte of the current run
	left int64 // bytes left in the current run
}

func (it *runs) init(at strided.Desc) {
	it.at = at
	it.idx = [maxRunDims]int64{}
	it.off, it.left = at.Offset, at.Run
}

// advance moves to the next run; the caller knows there is one.
func (it *runs) advance() {
	at := &it.at
	off := at.Offset
	for d := len(at.Count) - 1; d >= 0; d-- {
		it.idx[d]++
		if it.idx[d] < at.Count[d] {
			break
		}
		it.idx[d] = 0
	}
	for d, i := range it.idx[:len(at.Count)] {
		off += i * at.Stride[d]
	}
	it.off, it.left = off, at.Run
}

// walker walks a validated region segment by segment, in row-major order.
// It holds copies, not pointers, so that it and its callers' values stay on
// the stack.
type walker struct {
	nd         int
	rows, cols int64
	lo, hi     [placement.MaxTensorDims]int64 // the region's box
	data       []byte
	esz        int64
	wlo        [placement.MaxTensorDims]int64
	wstr       [placement.MaxTensorDims]int64
	runs       runs
}

func (wk *walker) init(g *Grid, r *Region, esz int64, w *Window) {
	nd := g.nd
	wk.nd, wk.rows, wk.cols = nd, g.rows, g.cols
	copy(wk.lo[:nd], r.Box.Lo)
	copy(wk.hi[:nd], r.Box.Hi)
	wk.data, wk.esz = r.Data, esz
	s := int64(1)
	for d := nd - 1; d >= 0; d-- {
		wk.wlo[d] = w.Blocks.Lo[d]
		wk.wstr[d] = s
		s *= w.Blocks.Hi[d] - w.Blocks.Lo[d]
	}
	wk.runs.init(r.At)
}

// walk calls fn for every segment in order until fn returns false. The
// region must be valid and nonempty, and the window must hold its blocks.
func (wk *walker) walk(fn func(segment) bool) {
	nd, esz, data := wk.nd, wk.esz, wk.data
	rows, cols := wk.rows, wk.cols
	lo, hi := &wk.lo, &wk.hi
	it := &wk.runs
	var seg segment
	var c [placement.MaxTensorDims]int64
	copy(c[:nd], lo[:nd])
	colLo, colHi := lo[nd-1], hi[nd-1]
	firstBcol := colLo / cols
	pos := int64(0)
	for {
		base := int64(0)
		for d := range nd - 2 {
			base += (c[d] - wk.wlo[d]) * wk.wstr[d]
		}
		brow := c[nd-2] / rows
		base += (brow - wk.wlo[nd-2]) * wk.wstr[nd-2]
		rowServed := min(hi[nd-2], (brow+1)*rows) - max(lo[nd-2], brow*rows)
		for col := colLo; col < colHi; {
			if it.left == 0 {
				it.advance()
			}
			n := min(colHi-col, it.left/esz)
			for n > 0 {
				bcol := col / cols
				bLo, bHi := bcol*cols, (bcol+1)*cols
				m := min(bHi, col+n) - col
				seg.data = data[it.off : it.off+m*esz]
				seg.n, seg.pos = m, pos
				seg.win = base + bcol - wk.wlo[nd-1]
				seg.slot = bcol - firstBcol
				seg.served = rowServed * (min(colHi, bHi) - max(colLo, bLo))
				if !fn(seg) {
					return
				}
				it.off += m * esz
				it.left -= m * esz
				pos += m
				col += m
				n -= m
			}
		}
		if !nextRow(c[:nd], lo[:nd], hi[:nd]) {
			return
		}
	}
}

// globalIndex returns the global index of element pos (row-major) of box.
func globalIndex(box placement.Box, pos int64) []int64 {
	idx := make([]int64, len(box.Lo))
	for d := len(box.Lo) - 1; d >= 0; d-- {
		n := box.Hi[d] - box.Lo[d]
		idx[d] = box.Lo[d] + pos%n
		pos /= n
	}
	return idx
}

// NonFiniteError reports a NaN or infinite element: FP8 quantization
// refuses them (a NaN weight would make its block's scale NaN). Index is
// the first one in row-major order of the region that was checked; Flat is
// its row-major position in the whole tensor, so that ranks reporting
// different regions can agree on the first (the smallest Flat).
type NonFiniteError struct {
	Index []int64
	Flat  int64
	Value float64 // NaN, +Inf or -Inf
}

// Error says which element is not finite.
func (e *NonFiniteError) Error() string {
	return fmt.Sprintf("fp8: element %v (flat index %d) is %v: FP8 quantization refuses non-finite weights", e.Index, e.Flat, e.Value)
}

func (g Grid) nonFinite(box placement.Box, pos int64, v float64) *NonFiniteError {
	idx := globalIndex(box, pos)
	flat := int64(0)
	for d, i := range idx {
		flat = flat*g.shape[d] + i
	}
	return &NonFiniteError{Index: idx, Flat: flat, Value: v}
}

// nextRow moves coordinates c to the next row of the box [lo, hi) in
// row-major order (the last dim is walked by the caller) and reports
// whether there is one.
func nextRow(c, lo, hi []int64) bool {
	for d := len(c) - 2; d >= 0; d-- {
		c[d]++
		if c[d] < hi[d] {
			return true
		}
		c[d] = lo[d]
	}
	return false
}
