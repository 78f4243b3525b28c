package placement

import (
	"fmt"
	"math"
	"math/big"
	"slices"
	"strconv"
	"strings"

	"github.com/m2n-dev/m2n/dtype"
	"github.com/m2n-dev/m2n/internal/checked"
	"github.com/m2n-dev/m2n/mesh"
)

// MaxTensorDims is the largest number of dims a global tensor may have.
const MaxTensorDims = 8

// Layout is how one process group holds a global tensor: its global shape,
// element type, the mesh of ranks that hold it and one placement per mesh
// axis. It is immutable once built by NewLayout, and every rank's local
// shape and global offset follow PyTorch DTensor exactly
// (torch.distributed.tensor._utils._compute_local_shape_and_global_offset).
type Layout struct {
	shape      []int64
	dtype      dtype.DType
	mesh       mesh.Mesh
	placements []Placement

	// axes[d] lists, in mesh-axis order, the mesh axes that shard tensor dim d.
	axes [][]int
	// parts[d] holds the nested torch.chunk parts of dim d, indexed by the
	// row-major index of a coordinate restricted to axes[d].
	parts [][]Interval
}

// NewLayout validates and builds a layout. The shape has 0 to MaxTensorDims
// non-negative dims; there is one placement per mesh axis; every Shard dim
// lies inside the shape.
//
// Every size derived from a layout must fit in an int64 of bytes: NewLayout
// rejects a shape whose span in bytes, the product of its dims (a dim of 0
// counting as 1, so that row strides fit too) times the element size,
// overflows int64, with an error naming the shape, the dtype and the span.
// Elems, Bytes, LocalBytes and every box, offset and stride inside the
// tensor therefore fit.
func NewLayout(shape []int64, dt dtype.DType, m mesh.Mesh, placements []Placement) (Layout, error) {
	if len(shape) > MaxTensorDims {
		return Layout{}, fmt.Errorf("shape %s has %d dims, at most %d are supported", FormatShape(shape), len(shape), MaxTensorDims)
	}
	for _, s := range shape {
		if s < 0 {
			return Layout{}, fmt.Errorf("shape %s has a negative dim %d", FormatShape(shape), s)
		}
	}
	if !dt.Valid() {
		return Layout{}, fmt.Errorf("invalid dtype %v", dt)
	}
	if _, ok := span(shape, int64(dt.Size())); !ok {
		return Layout{}, fmt.Errorf("shape %s of %s is too large: it spans %s bytes (%d-byte elements), more than an int64 holds (%d)",
			FormatShape(shape), dt, bigSpan(shape, int64(dt.Size())), dt.Size(), int64(math.MaxInt64))
	}
	if m.NDim() == 0 {
		return Layout{}, fmt.Errorf("layout needs a mesh")
	}
	if len(placements) != m.NDim() {
		return Layout{}, fmt.Errorf("%d placements [%s] for a %d-axis mesh %s: want one per mesh axis",
			len(placements), Format(placements), m.NDim(), mesh.FormatShape(m.Shape()))
	}
	l := Layout{
		shape:      slices.Clone(shape),
		dtype:      dt,
		mesh:       m,
		placements: slices.Clone(placements),
		axes:       make([][]int, len(shape)),
		parts:      make([][]Interval, len(shape)),
	}
	for a, p := range placements {
		switch p.kind {
		case kindReplicate:
		case kindShard:
			if p.dim < 0 || p.dim >= len(shape) {
				return Layout{}, fmt.Errorf("placement %s on mesh axis %d: shard dim %d is out of range for a %d-dim tensor %s",
					p, a, p.dim, len(shape), FormatShape(shape))
			}
			l.axes[p.dim] = append(l.axes[p.dim], a)
		default:
			return Layout{}, fmt.Errorf("placement on mesh axis %d has unknown kind %d", a, p.kind)
		}
	}
	for d := range shape {
		l.parts[d] = nestedChunks(shape[d], l.axes[d], m)
	}
	return l, nil
}

// nestedChunks splits [0, n) over the given mesh axes in order, each axis
// applying torch.chunk to every interval the previous one left. Its
// arguments are valid by construction (n >= 0, axes of at least one index).
func nestedChunks(n int64, axes []int, m mesh.Mesh) []Interval {
	parts := []Interval{{0, n}}
	for _, a := range axes {
		k := int64(m.Dim(a))
		next := make([]Interval, 0, len(parts)*int(k))
		for _, iv := range parts {
			for r := int64(0); r < k; r++ {
				next = append(next, chunk(iv.Lo, iv.Len(), k, r))
			}
		}
		parts = next
	}
	return parts
}

// Chunk returns part r of k of the interval as torch.chunk cuts it: with
// c = ceil(len/k), part r is [lo+r*c, lo+min(len, r*c+c)), or the empty
// interval [hi, hi) when r*c >= len. It is not a balanced split: 10 over 4
// gives 3,3,3,1 and 2 over 8 gives 1,1,0,0,0,0,0,0.
//
// The arithmetic cannot overflow: every interval whose length fits in an
// int64 splits exactly, up to [0, math.MaxInt64). Chunk returns an error
// naming the value when k < 1, when r lies outside [0, k), when Hi < Lo, or
// when Hi-Lo overflows int64.
func Chunk(iv Interval, k, r int64) (Interval, error) {
	if k < 1 {
		return Interval{}, fmt.Errorf("placement: chunk of %v into %d parts: want at least 1 part", iv, k)
	}
	if r < 0 || r >= k {
		return Interval{}, fmt.Errorf("placement: part %d of %d parts of %v: want a part in [0, %d)", r, k, iv, k)
	}
	if iv.Hi < iv.Lo {
		return Interval{}, fmt.Errorf("placement: interval %v runs backwards (Hi < Lo)", iv)
	}
	n := uint64(iv.Hi) - uint64(iv.Lo) // exact: Hi >= Lo
	if n > math.MaxInt64 {
		return Interval{}, fmt.Errorf("placement: interval %v is longer than an int64 holds", iv)
	}
	return chunk(iv.Lo, int64(n), k, r), nil
}

// chunk is Chunk on [lo, lo+n) for n >= 0, k >= 1, 0 <= r < k, with
// lo+n fitting in an int64. No intermediate value exceeds lo+n.
func chunk(lo, n, k, r int64) Interval {
	c := n / k // ceil(n/k) without forming n+k-1
	if n%k != 0 {
		c++
	}
	start, ok := checked.Mul(r, c)
	if !ok || start >= n {
		return Interval{lo + n, lo + n}
	}
	return Interval{lo + start, lo + start + min(c, n-start)}
}

// span returns the product of the dims of shape, a dim of 0 counting as 1,
// times elem, and whether it fits in an int64.
func span(shape []int64, elem int64) (int64, bool) {
	p := elem
	for _, s := range shape {
		var ok bool
		if p, ok = checked.Mul(p, max(s, 1)); !ok {
			return 0, false
		}
	}
	return p, true
}

// bigSpan renders span(shape, elem) exactly, for messages about spans that
// do not fit.
func bigSpan(shape []int64, elem int64) string {
	p := big.NewInt(elem)
	for _, s := range shape {
		p.Mul(p, big.NewInt(max(s, 1)))
	}
	return p.String()
}

// Shape returns a copy of the global shape.
func (l Layout) Shape() []int64 { return slices.Clone(l.shape) }

// NDim returns the number of tensor dims.
func (l Layout) NDim() int { return len(l.shape) }

// DType returns the element type.
func (l Layout) DType() dtype.DType { return l.dtype }

// WithDType returns the layout with another element type: the same shape,
// mesh, placements and parts (a destination of a tensor converted in
// flight, say). It panics on an invalid dtype.
func (l Layout) WithDType(dt dtype.DType) Layout {
	if !dt.Valid() {
		panic(fmt.Sprintf("placement: WithDType(%v)", dt))
	}
	l.dtype = dt
	return l
}

// ElemSize returns the element size in bytes.
func (l Layout) ElemSize() int64 { return int64(l.dtype.Size()) }

// Mesh returns the mesh.
func (l Layout) Mesh() mesh.Mesh { return l.mesh }

// Placements returns a copy of the placements, one per mesh axis.
func (l Layout) Placements() []Placement { return slices.Clone(l.placements) }

// Elems returns the number of elements of the global tensor. It fits in an
// int64: NewLayout rejects larger shapes.
func (l Layout) Elems() int64 {
	n := int64(1)
	for _, s := range l.shape {
		n *= s // cannot overflow: NewLayout checked the span
	}
	return n
}

// Bytes returns the size of the global tensor in bytes. It fits in an
// int64: NewLayout rejects larger shapes.
func (l Layout) Bytes() int64 { return l.Elems() * l.ElemSize() }

// NumParts returns how many parts tensor dim d is cut into.
func (l Layout) NumParts(d int) int { return len(l.parts[d]) }

// Part returns part j of tensor dim d: the interval held by the
// coordinates whose restriction to the mesh axes that shard dim d (in
// mesh-axis order), read as a row-major index, is j. Parts are in
// ascending order of Lo; empty parts are [hi, hi) of their parent
// interval.
func (l Layout) Part(d, j int) Interval { return l.parts[d][j] }

// PartIndex returns, for the mesh coordinate coord, the index j of the
// part of dim d it holds (Part(d, j)).
func (l Layout) PartIndex(d int, coord []int) int {
	j := 0
	for _, a := range l.axes[d] {
		j = j*l.mesh.Dim(a) + coord[a]
	}
	return j
}

// localBox returns the region of the global tensor that the rank at mesh
// coordinate coord holds. An empty region has Lo = Hi in some dim.
func (l Layout) localBox(coord []int) Box {
	b := Box{Lo: make([]int64, len(l.shape)), Hi: make([]int64, len(l.shape))}
	for d := range l.shape {
		iv := l.parts[d][l.PartIndex(d, coord)]
		b.Lo[d], b.Hi[d] = iv.Lo, iv.Hi
	}
	return b
}

// LocalShapeOffset returns the local shape and global offset of the rank at
// mesh coordinate coord exactly as DTensor reports them: a dim whose local
// size is 0 reports the dim's global size as its offset.
func (l Layout) LocalShapeOffset(coord []int) (shape, offset []int64) {
	shape = make([]int64, len(l.shape))
	offset = make([]int64, len(l.shape))
	for d := range l.shape {
		iv := l.parts[d][l.PartIndex(d, coord)]
		shape[d] = iv.Len()
		offset[d] = iv.Lo
		if shape[d] == 0 {
			offset[d] = l.shape[d]
		}
	}
	return shape, offset
}

// RankBox returns the region that rank holds, and false if the mesh does
// not hold rank.
func (l Layout) RankBox(rank int) (Box, bool) {
	i := l.mesh.Index(rank)
	if i < 0 {
		return Box{}, false
	}
	return l.localBox(l.mesh.Coord(i, nil)), true
}

// LocalBytes returns the size in bytes of rank's local buffer, 0 if the mesh
// does not hold rank. It is at most Bytes(), so it fits in an int64.
func (l Layout) LocalBytes(rank int) int64 {
	b, ok := l.RankBox(rank)
	if !ok {
		return 0
	}
	return b.Elems() * l.ElemSize()
}

// Replication returns how many ranks hold each element: the product of the
// mesh axes that replicate.
func (l Layout) Replication() int {
	r := 1
	for a, p := range l.placements {
		if p.kind == kindReplicate {
			r *= l.mesh.Dim(a)
		}
	}
	return r
}

// String renders the layout as "16x8 bf16 on 2x2[4-7] R,S1".
func (l Layout) String() string {
	return fmt.Sprintf("%s %s on %s %s", FormatShape(l.shape), l.dtype, l.mesh, Format(l.placements))
}

// ParseShape parses a global tensor shape: dims joined by 'x' such as
// "7168x2048" or "256x2048x7168"; "scalar" (or "[]") is the 0-dim shape.
// Dims are non-negative integers; 0 is allowed. A shape whose span (the
// product of its dims, a dim of 0 counting as 1) overflows int64 is an
// error naming the span: no dtype makes it a valid layout (NewLayout then
// checks the span in bytes).
func ParseShape(s string) ([]int64, error) {
	s = strings.TrimSpace(s)
	switch s {
	case "":
		return nil, fmt.Errorf("empty shape: want dims like 7168x2048 (or scalar)")
	case "scalar", "[]", "()":
		return []int64{}, nil
	}
	parts := strings.Split(s, "x")
	if len(parts) > MaxTensorDims {
		return nil, fmt.Errorf("shape %q has %d dims, at most %d are supported", s, len(parts), MaxTensorDims)
	}
	shape := make([]int64, len(parts))
	for i, p := range parts {
		n, err := strconv.ParseInt(strings.TrimSpace(p), 10, 64)
		if err != nil {
			return nil, fmt.Errorf("shape %q: dim %q is not an integer", s, p)
		}
		if n < 0 {
			return nil, fmt.Errorf("shape %q: dim %d is negative", s, n)
		}
		shape[i] = n
	}
	if _, ok := span(shape, 1); !ok {
		return nil, fmt.Errorf("shape %q is too large: it spans %s elements, more than an int64 holds (%d)", s, bigSpan(shape, 1), int64(math.MaxInt64))
	}
	return shape, nil
}

// FormatShape renders a tensor shape as "7168x2048", or "scalar" for 0 dims.
func FormatShape(shape []int64) string {
	if len(shape) == 0 {
		return "scalar"
	}
	parts := make([]string, len(shape))
	for i, s := range shape {
		parts[i] = strconv.FormatInt(s, 10)
	}
	return strings.Join(parts, "x")
}
