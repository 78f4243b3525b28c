package mesh

import (
	"fmt"
	"slices"
	"strings"
)

// MaxDims is the largest number of axes a Mesh may have.
const MaxDims = 8

// MaxRanks bounds the number of ranks a Mesh may hold and the rank numbers
// themselves: every rank is in [0, MaxRanks).
const MaxRanks = 1 << 20

// Mesh is an N-D array of communicator-local ranks, stored row-major: the
// rank at coordinate (c0, c1, ..., cn-1) is Ranks()[c0*s1*...*sn-1 + ... + cn-1].
// A Mesh is immutable; the zero Mesh has no axes and no ranks and is invalid
// for every layout.
type Mesh struct {
	shape []int
	ranks []int
	// start >= 0 marks an interval mesh whose rank at index i is start+i;
	// index lookups then need no map.
	start int
	index map[int]int
}

// New returns the mesh of the given shape over an explicit list of ranks in
// row-major order. Every axis must be at least 1 long, the list must hold
// exactly prod(shape) distinct non-negative ranks, and there are at most
// MaxDims axes.
func New(shape []int, ranks []int) (Mesh, error) {
	n, err := checkShape(shape)
	if err != nil {
		return Mesh{}, err
	}
	if len(ranks) != n {
		return Mesh{}, fmt.Errorf("mesh %s holds %d ranks, got a list of %d", FormatShape(shape), n, len(ranks))
	}
	m := Mesh{shape: slices.Clone(shape), ranks: slices.Clone(ranks), start: -1}
	interval := true
	for i, r := range ranks {
		if r < 0 || r >= MaxRanks {
			return Mesh{}, fmt.Errorf("mesh rank %d is outside [0, %d)", r, MaxRanks)
		}
		if r != ranks[0]+i {
			interval = false
		}
	}
	if interval {
		m.start = ranks[0]
		return m, nil
	}
	m.index = make(map[int]int, n)
	for i, r := range ranks {
		if j, dup := m.index[r]; dup {
			return Mesh{}, fmt.Errorf("mesh repeats rank %d (positions %d and %d)", r, j, i)
		}
		m.index[r] = i
	}
	return m, nil
}

// Interval returns the mesh of the given shape over the ranks
// [start, start+prod(shape)), the common case. Like every mesh, its ranks
// must lie in [0, MaxRanks): a start so large that the last rank would not
// is an error naming it.
func Interval(shape []int, start int) (Mesh, error) {
	n, err := checkShape(shape)
	if err != nil {
		return Mesh{}, err
	}
	if start < 0 {
		return Mesh{}, fmt.Errorf("mesh start rank %d is negative", start)
	}
	if start > MaxRanks-n {
		return Mesh{}, fmt.Errorf("mesh %s from rank %d reaches rank beyond %d: ranks must lie in [0, %d)", FormatShape(shape), start, MaxRanks-1, MaxRanks)
	}
	ranks := make([]int, n)
	for i := range ranks {
		ranks[i] = start + i
	}
	return Mesh{shape: slices.Clone(shape), ranks: ranks, start: start}, nil
}

func checkShape(shape []int) (int, error) {
	if len(shape) == 0 {
		return 0, fmt.Errorf("mesh needs at least one axis")
	}
	if len(shape) > MaxDims {
		return 0, fmt.Errorf("mesh %s has %d axes, at most %d are supported", FormatShape(shape), len(shape), MaxDims)
	}
	n := 1
	for _, s := range shape {
		if s < 1 {
			return 0, fmt.Errorf("mesh %s has an axis of size %d, want at least 1", FormatShape(shape), s)
		}
		if n > MaxRanks/s {
			return 0, fmt.Errorf("mesh %s holds too many ranks (at most %d)", FormatShape(shape), MaxRanks)
		}
		n *= s
	}
	return n, nil
}

// NDim returns the number of mesh axes.
func (m Mesh) NDim() int { return len(m.shape) }

// Dim returns the length of mesh axis i, 0 <= i < NDim() (like a slice
// index, another i panics).
func (m Mesh) Dim(i int) int { return m.shape[i] }

// Shape returns a copy of the mesh's axis lengths.
func (m Mesh) Shape() []int { return slices.Clone(m.shape) }

// Size returns the number of ranks in the mesh.
func (m Mesh) Size() int { return len(m.ranks) }

// Ranks returns a copy of the mesh's ranks in row-major order.
func (m Mesh) Ranks() []int { return slices.Clone(m.ranks) }

// RankAt returns the rank at row-major index i, 0 <= i < Size() (like a
// slice index, another i panics).
func (m Mesh) RankAt(i int) int { return m.ranks[i] }

// IsInterval reports whether the mesh's ranks are [start, start+Size()) in
// order, and returns start.
func (m Mesh) IsInterval() (start int, ok bool) { return m.start, m.start >= 0 }

// Index returns the row-major index of rank in the mesh, or -1 if the mesh
// does not hold it.
func (m Mesh) Index(rank int) int {
	if m.start >= 0 {
		if rank >= m.start && rank < m.start+len(m.ranks) {
			return rank - m.start
		}
		return -1
	}
	if i, ok := m.index[rank]; ok {
		return i
	}
	return -1
}

// Contains reports whether the mesh holds rank.
func (m Mesh) Contains(rank int) bool { return m.Index(rank) >= 0 }

// Coord writes the coordinate of row-major index i, 0 <= i < Size(), into
// dst (grown as needed) and returns it. Another i gives no meaningful
// coordinate; use Index to map a rank that may lie outside the mesh.
func (m Mesh) Coord(i int, dst []int) []int {
	dst = slices.Grow(dst[:0], len(m.shape))[:len(m.shape)]
	for a := len(m.shape) - 1; a >= 0; a-- {
		dst[a] = i % m.shape[a]
		i /= m.shape[a]
	}
	return dst
}

// IndexOf returns the row-major index of a coordinate. It panics if the
// coordinate has the wrong length or lies outside the mesh.
func (m Mesh) IndexOf(coord []int) int {
	if len(coord) != len(m.shape) {
		panic(fmt.Sprintf("mesh: coordinate %v for a %d-axis mesh", coord, len(m.shape)))
	}
	i := 0
	for a, c := range coord {
		if c < 0 || c >= m.shape[a] {
			panic(fmt.Sprintf("mesh: coordinate %v outside mesh %s", coord, FormatShape(m.shape)))
		}
		i = i*m.shape[a] + c
	}
	return i
}

// Validate checks that every rank of the mesh lies in a communicator of
// world ranks, [0, world).
func (m Mesh) Validate(world int) error {
	if len(m.shape) == 0 {
		return fmt.Errorf("mesh is empty")
	}
	for _, r := range m.ranks {
		if r >= world {
			return fmt.Errorf("mesh %s reaches rank %d, outside a communicator of %d ranks", m, r, world)
		}
	}
	return nil
}

// Equal reports whether two meshes have the same shape and ranks.
func (m Mesh) Equal(o Mesh) bool {
	return slices.Equal(m.shape, o.shape) && slices.Equal(m.ranks, o.ranks)
}

// String renders the mesh as its shape and ranks, e.g. "2x2[4-7]" or
// "2x2[7,5,6,4]".
func (m Mesh) String() string {
	return FormatShape(m.shape) + "[" + FormatRanks(m.ranks) + "]"
}

// FormatShape renders axis lengths as "4x2".
func FormatShape(shape []int) string {
	var b strings.Builder
	for i, s := range shape {
		if i > 0 {
			b.WriteByte('x')
		}
		fmt.Fprint(&b, s)
	}
	return b.String()
}

// FormatRanks renders a rank list compactly, folding ascending runs of three
// or more into ranges: [0 1 2 3 8 5] gives "0-3,8,5".
func FormatRanks(ranks []int) string {
	var b strings.Builder
	for i := 0; i < len(ranks); {
		j := i
		for j+1 < len(ranks) && ranks[j+1] == ranks[j]+1 {
			j++
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		switch {
		case j-i >= 2:
			fmt.Fprintf(&b, "%d-%d", ranks[i], ranks[j])
		case j == i+1:
			fmt.Fprintf(&b, "%d,%d", ranks[i], ranks[j])
		default:
			fmt.Fprint(&b, ranks[i])
		}
		i = j + 1
	}
	return b.String()
}
