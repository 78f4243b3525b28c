package model

import (
	"fmt"
	"slices"

	"github.com/m2n-dev/m2n/dtype"
	"github.com/m2n-dev/m2n/placement"
)

// axis is one mesh axis of a side's ranks (axes run slowest first; ranks
// are row-major over them) and what it does to the tensor: replicate it
// (dim -1) or split dim. A split follows torch.chunk (DTensor's Shard)
// unless parts gives the framework's own split: index i holds
// [parts[i].Lo, parts[i].Hi) of the dim, possibly nothing. An axis with
// parts is the only one to split its dim.
type axis struct {
	size  int
	dim   int
	parts []placement.Interval
}

func rep(n int) axis        { return axis{size: n, dim: -1} }
func shard(n, dim int) axis { return axis{size: n, dim: dim} }
func split(dim int, parts []placement.Interval) axis {
	return axis{size: len(parts), dim: dim, parts: parts}
}

// sideLayout is how one framework holds a tensor on its ranks: the axes
// over the communicator-local ranks [start, start+prod(sizes)), how each
// rank's local buffer orders the dims of its part, and the buffer's extent
// on dim 0 where the framework pads (vocabulary padding; vLLM's biases held
// whole by one rank).
type sideLayout struct {
	start int
	axes  []axis
	// rows, when above 0: every rank's buffer holds rows entries of dim 0
	// (its part first, then padding m2n leaves alone), for a tensor alone
	// in its buffer.
	rows int64
	// order, when set, is the order (outermost first) in which the
	// buffer holds the part's dims: Megatron's expert fc1 holds [gate;
	// up] where gpt-oss interleaves them. nil: row-major.
	order []int
}

// ranks returns the number of ranks the side spans.
func (s sideLayout) ranks() int {
	n := 1
	for _, a := range s.axes {
		n *= a.size
	}
	return n
}

// coords returns rank's coordinate on every axis, and false when rank is
// not one of the side's.
func (s sideLayout) coords(rank int) ([]int, bool) {
	i := rank - s.start
	if i < 0 || i >= s.ranks() {
		return nil, false
	}
	c := make([]int, len(s.axes))
	for a := len(s.axes) - 1; a >= 0; a-- {
		c[a] = i % s.axes[a].size
		i /= s.axes[a].size
	}
	return c, true
}

// box returns the box of shape that the rank at coordinates c holds:
// every split axis cuts its dim in axis order (torch.chunk nested, as
// DTensor applies mesh axes), an explicit split sets it. It panics if an
// axis has no positive size, which the side's builders never make (a
// broken invariant, not an input error).
func (s sideLayout) box(shape []int64, c []int) placement.Box {
	b := placement.Box{Lo: make([]int64, len(shape)), Hi: slices.Clone(shape)}
	for a, ax := range s.axes {
		if ax.dim < 0 {
			continue
		}
		if ax.parts != nil {
			b.Lo[ax.dim], b.Hi[ax.dim] = ax.parts[c[a]].Lo, ax.parts[c[a]].Hi
			continue
		}
		iv, err := placement.Chunk(placement.Interval{Lo: b.Lo[ax.dim], Hi: b.Hi[ax.dim]}, int64(ax.size), int64(c[a]))
		if err != nil {
			panic(fmt.Sprintf("model: chunk of a valid axis: %v", err)) // sizes are positive: a broken invariant
		}
		if iv.Empty() {
			iv = placement.Interval{Lo: b.Hi[ax.dim], Hi: b.Hi[ax.dim]}
		}
		b.Lo[ax.dim], b.Hi[ax.dim] = iv.Lo, iv.Hi
	}
	return b
}

// rankBox returns the box rank holds, and false when it is not on the side.
func (s sideLayout) rankBox(shape []int64, rank int) (placement.Box, bool) {
	c, ok := s.coords(rank)
	if !ok {
		return placement.Box{}, false
	}
	return s.box(shape, c), true
}

// chunked reports whether every explicit split equals torch.chunk of its
// dim (so that a placement layout holds the side exactly).
func (s sideLayout) chunked(shape []int64) bool {
	for _, ax := range s.axes {
		if ax.parts == nil {
			continue
		}
		for i, p := range ax.parts {
			iv, err := placement.Chunk(placement.Interval{Lo: 0, Hi: shape[ax.dim]}, int64(ax.size), int64(i))
			if err != nil || iv.Len() != p.Len() || (iv.Len() > 0 && iv.Lo != p.Lo) {
				return false
			}
		}
	}
	return true
}

// explicitDim returns the dim that the side's framework splits its own way
// (not as torch.chunk), or -1.
func (s sideLayout) explicitDim(shape []int64) int {
	if s.chunked(shape) {
		return -1
	}
	for _, ax := range s.axes {
		if ax.parts != nil {
			return ax.dim
		}
	}
	return -1
}

// layout returns the side as a placement layout over shape, on the ranks
// [start, ...): axes of size 1 dropped (one replicated axis stays when all
// are 1). The side must be chunked.
func (s sideLayout) layout(name string, shape []int64, dt dtype.DType) (placement.Layout, error) {
	var ms []int
	var ps []placement.Placement
	for _, a := range s.axes {
		if a.size > 1 {
			ms = append(ms, a.size)
			ps = append(ps, placementOf(a))
		}
	}
	if len(ms) == 0 {
		ms, ps = []int{1}, []placement.Placement{placement.Replicate()}
	}
	return newLayout(name, shape, dt, ms, ps, nil, s.start)
}

func placementOf(a axis) placement.Placement {
	if a.dim < 0 {
		return placement.Replicate()
	}
	return placement.Shard(a.dim)
}

// pieces cuts a tensor that one framework splits otherwise than
// torch.chunk (vocabulary padding, vLLM's uneven expert split, Megatron's
// linear_qkv slices when TP exceeds the query groups) into pieces along
// that dim: at every boundary of either side's parts. Within a piece every
// axis that splits the dim holds one index, so each side of the piece is a
// plain placement layout over the axes left, on the ranks that hold it.
// It returns each piece's interval and its two layouts.
func pieces(t Tensor, src, dst sideLayout, dt [2]dtype.DType) ([]piece, error) {
	shape := t.LayoutShape
	d := src.explicitDim(shape)
	if dd := dst.explicitDim(shape); d < 0 || (dd >= 0 && dd != d) {
		if d < 0 {
			d = dd
		} else if dd >= 0 {
			return nil, fmt.Errorf("tensor %s: the trainer splits dim %d and the generator dim %d their own way; m2n cuts a tensor along one dim", t.Name, d, dd)
		}
	}
	cuts := []int64{0, shape[d]}
	for _, s := range []sideLayout{src, dst} {
		for r := 0; r < s.ranks(); r++ {
			b, _ := s.rankBox(shape, s.start+r)
			cuts = append(cuts, b.Lo[d], b.Hi[d])
		}
	}
	slices.Sort(cuts)
	cuts = slices.Compact(cuts)
	var out []piece
	for i := 0; i+1 < len(cuts); i++ {
		lo, hi := cuts[i], cuts[i+1]
		if lo >= hi || hi > shape[d] {
			continue
		}
		p := piece{dim: d, lo: lo, hi: hi}
		ps := slices.Clone(shape)
		ps[d] = hi - lo
		for side, s := range []sideLayout{src, dst} {
			l, err := s.restricted(t.Name, shape, ps, d, lo, hi, dt[side])
			if err != nil {
				return nil, err
			}
			p.layouts[side] = l
		}
		out = append(out, p)
	}
	return out, nil
}

// piece is rows [lo, hi) of dim of a tensor's layout shape, and its
// trainer and generator layouts over the piece's own shape.
type piece struct {
	dim     int
	lo, hi  int64
	layouts [2]placement.Layout
}

// restricted returns the side's layout of the piece [lo, hi) of dim d: the
// ranks whose part covers it (every axis that splits d fixed at the one
// index that holds it) over the axes left, in rank order.
func (s sideLayout) restricted(name string, shape, pieceShape []int64, d int, lo, hi int64, dt dtype.DType) (placement.Layout, error) {
	var ms []int
	var ps []placement.Placement
	for _, a := range s.axes {
		if a.dim != d && a.size > 1 {
			ms = append(ms, a.size)
			ps = append(ps, placementOf(a))
		}
	}
	want := 1
	for _, n := range ms {
		want *= n
	}
	var ranks []int
	for r := 0; r < s.ranks(); r++ {
		b, _ := s.rankBox(shape, s.start+r)
		if b.Lo[d] <= lo && hi <= b.Hi[d] {
			ranks = append(ranks, s.start+r)
		}
	}
	if len(ranks) != want {
		return placement.Layout{}, fmt.Errorf("tensor %s: rows [%d, %d) of dim %d are held by %d ranks, want %d (a framework rule m2n cannot lay out)",
			name, lo, hi, d, len(ranks), want)
	}
	if len(ms) == 0 {
		ms, ps = []int{1}, []placement.Placement{placement.Replicate()}
	}
	return newLayout(name, pieceShape, dt, ms, ps, ranks, 0)
}
