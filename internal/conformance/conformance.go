// Package conformance holds the reshard conformance cases every transport
// and route runs: the layout pairs of reshard_pairs.txt (embedded, so that
// programs such as refit soak use the same file as the tests) in several
// rank arrangements.
package conformance

import (
	"bufio"
	_ "embed"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"

	"github.com/m2n-dev/m2n/dtype"
	"github.com/m2n-dev/m2n/mesh"
	"github.com/m2n-dev/m2n/placement"
)

//go:embed reshard_pairs.txt
var pairsFile string

//go:embed fp8_pairs.txt
var fp8PairsFile string

// FP8Pairs returns the pairs a conversion to FP8 in flight runs on: every
// pair of the conformance pairs file whose tensor has 2 or 3 dims (FP8
// scales need a matrix), each in its own dtype and, if that is not bf16,
// in bf16 as well (the file holds few bf16 pairs), then the pairs of
// fp8_pairs.txt, whose shard boundaries cut 128x128 blocks.
func FP8Pairs() ([]Pair, error) {
	pairs, err := DefaultPairs()
	if err != nil {
		return nil, err
	}
	var out []Pair
	for _, p := range pairs {
		shape, err := placement.ParseShape(p.Shape)
		if err != nil {
			return nil, fmt.Errorf("reshard_pairs.txt:%d: %w", p.Line, err)
		}
		if len(shape) < 2 || len(shape) > 3 || (p.DType != "bf16" && p.DType != "f32") {
			continue
		}
		out = append(out, p)
		if p.DType != "bf16" {
			q := p
			q.DType = "bf16"
			out = append(out, q)
		}
	}
	extra, err := ParsePairs(strings.NewReader(fp8PairsFile), "fp8_pairs.txt")
	if err != nil {
		return nil, err
	}
	return append(out, extra...), nil
}

// FP8 returns the case with its destination in fp8e4m3: the tensor
// converts in flight.
func (c Case) FP8() Case {
	c.Dst = c.Dst.WithDType(dtype.FP8E4M3)
	return c
}

// DefaultPairs returns the pairs of the conformance pairs file.
func DefaultPairs() ([]Pair, error) {
	return ParsePairs(strings.NewReader(pairsFile), "reshard_pairs.txt")
}

// DefaultCases returns every pair of the conformance pairs file in every
// arrangement (Arrangements), after checking that the file holds at least
// min pairs (a truncated file fails loudly instead of testing less).
func DefaultCases(min int) ([]Case, error) {
	pairs, err := DefaultPairs()
	if err != nil {
		return nil, err
	}
	if len(pairs) < min {
		return nil, fmt.Errorf("reshard_pairs.txt holds %d pairs, want at least %d", len(pairs), min)
	}
	return Cases(pairs)
}

// Pair is one line of the conformance pairs file.
type Pair struct {
	Line                                         int
	Shape, DType, SrcMesh, SrcPl, DstMesh, DstPl string
}

func (p Pair) String() string {
	return fmt.Sprintf("%s %s %s %s -> %s %s", p.Shape, p.DType, p.SrcMesh, p.SrcPl, p.DstMesh, p.DstPl)
}

// ParsePairs reads a pairs file from r: one case a line, fields "shape |
// dtype | source mesh | source placements | destination mesh | destination
// placements", '#' comments; name is used in errors.
func ParsePairs(r io.Reader, path string) ([]Pair, error) {
	var out []Pair
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fs := strings.Split(line, "|")
		if len(fs) != 6 {
			return nil, fmt.Errorf("%s:%d: %d fields, want 6", path, n, len(fs))
		}
		for i := range fs {
			fs[i] = strings.TrimSpace(fs[i])
		}
		out = append(out, Pair{Line: n, Shape: fs[0], DType: fs[1], SrcMesh: fs[2], SrcPl: fs[3], DstMesh: fs[4], DstPl: fs[5]})
	}
	return out, sc.Err()
}

// Arrangement places a pair's meshes on communicator ranks.
type Arrangement string

const (
	// Disjoint puts the source on [0, M) and the destination on [M, M+N).
	Disjoint Arrangement = "disjoint"
	// Permuted draws both rank lists from a fixed shuffle of [0, M+N).
	Permuted Arrangement = "permuted"
	// Overlapping starts the destination mesh inside the source mesh, so
	// some ranks hold both a source and a destination buffer.
	Overlapping Arrangement = "overlapping"
	// Colocated puts both meshes on the same ranks from 0, the destination
	// in reverse order (colocated training and generation): every rank
	// holds both buffers and most data still crosses ranks. It is not in
	// Arrangements; small jobs (two GPUs) use it.
	Colocated Arrangement = "colocated"
)

// Arrangements lists every arrangement.
var Arrangements = []Arrangement{Disjoint, Permuted, Overlapping}

// Case is a pair in one arrangement.
type Case struct {
	Pair
	Arrangement Arrangement
	Src, Dst    placement.Layout
}

// World returns the ranks the case needs.
func (c Case) World() int {
	w := 0
	for _, m := range []mesh.Mesh{c.Src.Mesh(), c.Dst.Mesh()} {
		for i := 0; i < m.Size(); i++ {
			w = max(w, m.RankAt(i)+1)
		}
	}
	return w
}

func (c Case) String() string {
	return fmt.Sprintf("line %d %s [%s: src %s, dst %s]", c.Line, c.Pair, c.Arrangement,
		mesh.FormatRanks(c.Src.Mesh().Ranks()), mesh.FormatRanks(c.Dst.Mesh().Ranks()))
}

// Layouts builds the pair's layouts in an arrangement.
func (p Pair) Layouts(a Arrangement) (Case, error) {
	shape, err := placement.ParseShape(p.Shape)
	if err != nil {
		return Case{}, err
	}
	dt, err := dtype.Parse(p.DType)
	if err != nil {
		return Case{}, err
	}
	sm, err := mesh.ParseShape(p.SrcMesh)
	if err != nil {
		return Case{}, err
	}
	dm, err := mesh.ParseShape(p.DstMesh)
	if err != nil {
		return Case{}, err
	}
	m, n := prod(sm), prod(dm)
	var srcRanks, dstRanks []int
	switch a {
	case Disjoint:
		srcRanks, dstRanks = seq(0, m), seq(m, n)
	case Permuted:
		perm := rand.New(rand.NewPCG(uint64(p.Line), 7)).Perm(m + n)
		srcRanks, dstRanks = perm[:m], perm[m:]
	case Overlapping:
		start := m / 2
		srcRanks, dstRanks = seq(0, m), seq(start, n)
	case Colocated:
		srcRanks, dstRanks = seq(0, m), seq(0, n)
		for i, j := 0, n-1; i < j; i, j = i+1, j-1 {
			dstRanks[i], dstRanks[j] = dstRanks[j], dstRanks[i]
		}
	default:
		return Case{}, fmt.Errorf("unknown arrangement %q", a)
	}
	build := func(ms []int, ranks []int, pl string) (placement.Layout, error) {
		mm, err := mesh.New(ms, ranks)
		if err != nil {
			return placement.Layout{}, err
		}
		ps, err := placement.Parse(pl)
		if err != nil {
			return placement.Layout{}, err
		}
		return placement.NewLayout(shape, dt, mm, ps)
	}
	c := Case{Pair: p, Arrangement: a}
	if c.Src, err = build(sm, srcRanks, p.SrcPl); err != nil {
		return Case{}, err
	}
	if c.Dst, err = build(dm, dstRanks, p.DstPl); err != nil {
		return Case{}, err
	}
	return c, nil
}

// Cases expands every pair into every arrangement.
func Cases(pairs []Pair) ([]Case, error) {
	var out []Case
	for _, p := range pairs {
		for _, a := range Arrangements {
			c, err := p.Layouts(a)
			if err != nil {
				return nil, fmt.Errorf("line %d: %w", p.Line, err)
			}
			out = append(out, c)
		}
	}
	return out, nil
}

func prod(s []int) int {
	n := 1
	for _, v := range s {
		n *= v
	}
	return n
}

func seq(start, n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = start + i
	}
	return out
}
