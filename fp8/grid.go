package fp8

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/m2n-dev/m2n/internal/checked"
	"github.com/m2n-dev/m2n/placement"
)

// Mode says which elements share a scale.
type Mode uint8

// The scaling modes. The zero Mode is invalid.
const (
	// Block: blocks of BlockSize x BlockSize over the last two dims
	// (DeepSeek-V3's weight format); blocks at the bottom and right edges
	// are partial. Leading dims (the experts of a 3-D expert tensor) index
	// separate matrices, each with its own blocks.
	Block Mode = iota + 1
	// Row: one scale per row of every matrix (blocks of 1 x K).
	Row
	// Tensor: one scale per matrix (per expert for 3-D tensors).
	Tensor
)

// BlockSize is the side of a Block-mode block.
const BlockSize = 128

var modeNames = [...]string{Block: "block", Row: "row", Tensor: "tensor"}

// String returns "block", "row" or "tensor".
func (m Mode) String() string {
	if m >= Block && m <= Tensor {
		return modeNames[m]
	}
	return fmt.Sprintf("mode(%d)", uint8(m))
}

// ParseMode parses "block", "row" or "tensor".
func ParseMode(s string) (Mode, error) {
	low := strings.ToLower(strings.TrimSpace(s))
	for m := Block; m <= Tensor; m++ {
		if low == modeNames[m] {
			return m, nil
		}
	}
	return 0, fmt.Errorf("unknown fp8 scaling mode %q: want block, row or tensor", s)
}

// Grid is the block grid of a tensor for a mode: which elements share a
// scale. The last two dims of the tensor are the matrix (M rows, K
// columns); they are cut into blocks of BlockRows x BlockCols, and every
// leading dim index is a matrix of its own. Blocks are named by block
// coordinates: the leading dims' indices, then the block row and block
// column. The scale tensor (weight_scale_inv) has one float32 per block,
// row-major over ScaleShape.
//
// A Grid is a small value, safe to copy and to use concurrently.
type Grid struct {
	shape      [placement.MaxTensorDims]int64
	scale      [placement.MaxTensorDims]int64
	nd         int
	mode       Mode
	rows, cols int64 // block extent over the last two dims
}

// NewGrid returns the block grid of a tensor of the given shape (2 to
// placement.MaxTensorDims dims) for mode.
func NewGrid(shape []int64, mode Mode) (Grid, error) {
	if mode < Block || mode > Tensor {
		return Grid{}, fmt.Errorf("fp8: %v is not a scaling mode (want block, row or tensor)", mode)
	}
	nd := len(shape)
	if nd < 2 || nd > placement.MaxTensorDims {
		return Grid{}, fmt.Errorf("fp8: shape %s: FP8 scaling needs 2 to %d dims (the last two are the matrix, the others index matrices)",
			placement.FormatShape(shape), placement.MaxTensorDims)
	}
	if _, ok := checked.Product(shape...); !ok {
		return Grid{}, fmt.Errorf("fp8: shape %s: element count overflows int64", placement.FormatShape(shape))
	}
	g := Grid{nd: nd, mode: mode}
	for d, n := range shape {
		if n < 0 {
			return Grid{}, fmt.Errorf("fp8: shape %s: dim %d is negative", placement.FormatShape(shape), d)
		}
		g.shape[d] = n
		g.scale[d] = n
	}
	m, k := shape[nd-2], shape[nd-1]
	switch mode {
	case Block:
		g.rows, g.cols = BlockSize, BlockSize
	case Row:
		g.rows, g.cols = 1, max(k, 1)
	case Tensor:
		g.rows, g.cols = max(m, 1), max(k, 1)
	}
	g.scale[nd-2] = ceilDiv(m, g.rows)
	g.scale[nd-1] = ceilDiv(k, g.cols)
	return g, nil
}

var errZeroGrid = errors.New("fp8: the zero Grid has no tensor (make one with NewGrid)")

func ceilDiv(a, b int64) int64 { return (a + b - 1) / b }

// NDim returns the number of tensor dims (also the scale tensor's).
func (g Grid) NDim() int { return g.nd }

// Mode returns the scaling mode.
func (g Grid) Mode() Mode { return g.mode }

// Shape returns the tensor's shape.
func (g Grid) Shape() []int64 { return slices.Clone(g.shape[:g.nd]) }

// BlockShape returns the extent of a block over the last two dims:
// 128 x 128 (Block), 1 x K (Row) or M x K (Tensor).
func (g Grid) BlockShape() (rows, cols int64) { return g.rows, g.cols }

// ScaleShape returns the shape of the scale tensor: the leading dims, then
// ceil(M/rows) and ceil(K/cols). For the conformance cases: [2 3] for a
// 256x384 tensor in blocks, [300 1] for 300x200 by rows, [1 1] for a whole
// matrix, [4 2 3] for 4 experts of 256x384 in blocks.
func (g Grid) ScaleShape() []int64 { return slices.Clone(g.scale[:g.nd]) }

// NumBlocks returns the number of blocks: the scale tensor's element count.
func (g Grid) NumBlocks() int64 {
	n := int64(1)
	for _, s := range g.scale[:g.nd] {
		n *= s // fits: at most the element count, checked in NewGrid
	}
	return n
}

// All returns the box of every block: [0, ScaleShape()).
func (g Grid) All() placement.Box {
	return placement.Box{Lo: make([]int64, g.nd), Hi: g.ScaleShape()}
}

// checkBox reports an error unless box is a box of the tensor.
func (g Grid) checkBox(what string, box placement.Box) error {
	if g.nd == 0 {
		return errZeroGrid
	}
	if len(box.Lo) != g.nd || len(box.Hi) != g.nd {
		return fmt.Errorf("fp8: %s %v has %d dims, the tensor %s has %d", what, box, len(box.Lo), placement.FormatShape(g.shape[:g.nd]), g.nd)
	}
	for d := range g.nd {
		if box.Lo[d] < 0 || box.Hi[d] < box.Lo[d] || box.Hi[d] > g.shape[d] {
			return fmt.Errorf("fp8: %s %v is not inside the tensor %s (dim %d)", what, box, placement.FormatShape(g.shape[:g.nd]), d)
		}
	}
	return nil
}

// Blocks returns the box of block coordinates that the element box touches:
// every block holding at least one of its elements. For a destination
// rank's local box it is the part of the scale tensor the rank holds: where
// a shard boundary cuts a block, both ranks hold that block's scale. An
// empty box touches no block (the result is empty too). The box must lie
// inside the tensor.
func (g Grid) Blocks(box placement.Box) (placement.Box, error) {
	if err := g.checkBox("box", box); err != nil {
		return placement.Box{}, err
	}
	out := placement.Box{Lo: make([]int64, g.nd), Hi: make([]int64, g.nd)}
	g.blocks(box, out.Lo, out.Hi)
	return out, nil
}

// blocks writes the block box of an element box inside the tensor.
func (g Grid) blocks(box placement.Box, lo, hi []int64) {
	nd := g.nd
	for d := range nd - 2 {
		lo[d], hi[d] = box.Lo[d], box.Hi[d]
	}
	lo[nd-2], hi[nd-2] = box.Lo[nd-2]/g.rows, ceilDiv(box.Hi[nd-2], g.rows)
	lo[nd-1], hi[nd-1] = box.Lo[nd-1]/g.cols, ceilDiv(box.Hi[nd-1], g.cols)
	if box.Empty() {
		hi[nd-1] = lo[nd-1]
	}
}

// BlockBox returns the box of elements that the blocks of a block box
// cover, clipped to the tensor (edge blocks are partial).
func (g Grid) BlockBox(blocks placement.Box) (placement.Box, error) {
	if g.nd == 0 {
		return placement.Box{}, errZeroGrid
	}
	if len(blocks.Lo) != g.nd || len(blocks.Hi) != g.nd {
		return placement.Box{}, fmt.Errorf("fp8: block box %v has %d dims, the tensor has %d", blocks, len(blocks.Lo), g.nd)
	}
	out := placement.Box{Lo: make([]int64, g.nd), Hi: make([]int64, g.nd)}
	for d := range g.nd {
		if blocks.Lo[d] < 0 || blocks.Hi[d] < blocks.Lo[d] || blocks.Hi[d] > g.scale[d] {
			return placement.Box{}, fmt.Errorf("fp8: block box %v is not inside the block grid %s (dim %d)", blocks, placement.FormatShape(g.scale[:g.nd]), d)
		}
		b := int64(1)
		switch d {
		case g.nd - 2:
			b = g.rows
		case g.nd - 1:
			b = g.cols
		}
		out.Lo[d] = min(blocks.Lo[d]*b, g.shape[d])
		out.Hi[d] = min(blocks.Hi[d]*b, g.shape[d])
	}
	return out, nil
}

// Window holds one float32 per block of a box of blocks: amaxes while they
// are gathered, then scales. Values[i] belongs to the i-th block of Blocks
// in row-major order. The whole scale tensor is a Window over Grid.All().
type Window struct {
	Blocks placement.Box
	Values []float32
}

// NewWindow returns a Window over blocks with every value 0 (the identity
// of an amax).
func (g Grid) NewWindow(blocks placement.Box) (Window, error) {
	if _, err := g.BlockBox(blocks); err != nil {
		return Window{}, err
	}
	return Window{Blocks: cloneBox(blocks), Values: make([]float32, blocks.Elems())}, nil
}

// WindowFor returns a zeroed Window over the blocks that box touches: what a
// rank holding box gathers amaxes into, or receives scales in.
func (g Grid) WindowFor(box placement.Box) (Window, error) {
	b, err := g.Blocks(box)
	if err != nil {
		return Window{}, err
	}
	return Window{Blocks: b, Values: make([]float32, b.Elems())}, nil
}

func cloneBox(b placement.Box) placement.Box {
	return placement.Box{Lo: slices.Clone(b.Lo), Hi: slices.Clone(b.Hi)}
}

// check reports an error unless w is well formed: as many values as blocks.
func (w Window) check() error {
	if len(w.Blocks.Lo) != len(w.Blocks.Hi) {
		return fmt.Errorf("fp8: window box %v is malformed", w.Blocks)
	}
	for d := range w.Blocks.Lo {
		if w.Blocks.Hi[d] < w.Blocks.Lo[d] {
			return fmt.Errorf("fp8: window box %v is malformed (dim %d)", w.Blocks, d)
		}
	}
	if n := w.Blocks.Elems(); int64(len(w.Values)) != n {
		return fmt.Errorf("fp8: window over blocks %v has %d values, want %d", w.Blocks, len(w.Values), n)
	}
	return nil
}

// contains reports whether every block of b (lo, hi) lies in w; an empty b
// lies anywhere.
func (w Window) contains(lo, hi []int64) bool {
	if len(lo) != len(w.Blocks.Lo) {
		return false
	}
	for d := range lo {
		if hi[d] <= lo[d] {
			return true
		}
	}
	for d := range lo {
		if lo[d] < w.Blocks.Lo[d] || hi[d] > w.Blocks.Hi[d] {
			return false
		}
	}
	return true
}

// Index returns the position in Values of the block at block coordinates
// coord, and whether the window holds it.
func (w Window) Index(coord []int64) (int, bool) {
	if len(coord) != len(w.Blocks.Lo) {
		return 0, false
	}
	i := int64(0)
	for d, c := range coord {
		if c < w.Blocks.Lo[d] || c >= w.Blocks.Hi[d] {
			return 0, false
		}
		i = i*(w.Blocks.Hi[d]-w.Blocks.Lo[d]) + c - w.Blocks.Lo[d]
	}
	return int(i), true
}

// MaxWith combines another window of amaxes into w: for every block both
// hold, w's value becomes the larger of the two. Owners of a block's parts
// call it on the partial amaxes they exchange, in any order and grouping
// (max is associative and commutative), so every rank ends with the global
// amax.
func (w Window) MaxWith(o Window) error {
	return w.combine(o, func(dst, src []float32) {
		for j, v := range src {
			dst[j] = max(dst[j], v)
		}
	})
}

// CopyFrom sets the value of every block of w that o holds to o's value:
// how a destination rank fills its local scale tensor from scales it
// received, or from the whole tensor's.
func (w Window) CopyFrom(o Window) error {
	return w.combine(o, func(dst, src []float32) { copy(dst, src) })
}

// combine calls fn on the runs of values of the blocks w and o share, w's
// run first: the trailing dims that both windows and the shared box span
// in full merge into one run, so that windows of one block per row (row
// scales) or of the same blocks combine in long runs.
func (w Window) combine(o Window, fn func(dst, src []float32)) error {
	if err := w.check(); err != nil {
		return err
	}
	if err := o.check(); err != nil {
		return err
	}
	nd := len(w.Blocks.Lo)
	if len(o.Blocks.Lo) != nd {
		return fmt.Errorf("fp8: windows of %d and %d dims", nd, len(o.Blocks.Lo))
	}
	if nd == 0 {
		return nil
	}
	var lo, hi [placement.MaxTensorDims]int64
	for d := range nd {
		lo[d] = max(w.Blocks.Lo[d], o.Blocks.Lo[d])
		hi[d] = min(w.Blocks.Hi[d], o.Blocks.Hi[d])
		if hi[d] <= lo[d] {
			return nil
		}
	}
	// k is the outermost dim of the run: the dims after it are spanned in
	// full by both windows and the shared box, so the run is contiguous in
	// both.
	k := nd - 1
	for k > 0 && lo[k] == w.Blocks.Lo[k] && lo[k] == o.Blocks.Lo[k] &&
		hi[k] == w.Blocks.Hi[k] && hi[k] == o.Blocks.Hi[k] {
		k--
	}
	n := int64(1)
	for d := k; d < nd; d++ {
		n *= hi[d] - lo[d]
	}
	// Walk the shared blocks run by run (an odometer over the dims before k).
	var c [placement.MaxTensorDims]int64
	copy(c[:nd], lo[:nd])
	for {
		wi, _ := w.Index(c[:nd])
		oi, _ := o.Index(c[:nd])
		fn(w.Values[wi:int64(wi)+n], o.Values[oi:int64(oi)+n])
		if !nextRow(c[:k+1], lo[:k+1], hi[:k+1]) {
			return nil
		}
	}
}

// ToScales replaces every amax in w by its block's scale (ScaleOf), in
// place. It refuses a NaN, infinite or negative amax: a partial amax that
// saw a non-finite weight has already failed (Grid.Amax reports it).
func (w Window) ToScales() error {
	for i, a := range w.Values {
		if !(a >= 0 && a <= math.MaxFloat32) {
			return fmt.Errorf("fp8: amax %v of block %d of window %v is not a finite non-negative number", a, i, w.Blocks)
		}
		w.Values[i] = ScaleOf(a)
	}
	return nil
}
