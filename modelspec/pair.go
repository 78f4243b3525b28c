package modelspec

import (
	"errors"
	"fmt"
	"slices"
	"strconv"

	"github.com/m2n-dev/m2n/dtype"
	"github.com/m2n-dev/m2n/mesh"
	"github.com/m2n-dev/m2n/pipeline"
	"github.com/m2n-dev/m2n/placement"
)

// This file reads one tensor's reshard from the words of its layouts, as
// refit plan, run, bound and sim take them.

// ErrRequired is the cause of an *Error (Value "") for a part of a Pair
// that is missing: the shape, or a side's mesh or placements.
var ErrRequired = errors.New("required")

// Side is one side of a reshard in words: its mesh shape ("4x2"), one
// placement per mesh axis ("S0,R" or "Shard(0),Replicate()") and its ranks
// in mesh order ("8-15" or "8,3,5,1"; "" for an interval of ranks).
type Side struct{ Mesh, Placements, Ranks string }

// Layout lays a tensor of shape and dt out on the side; without Ranks the
// mesh is the interval of ranks from start. Errors are *Error naming the
// part with prefix ("src-", "dst-" or ""): prefix+"mesh",
// prefix+"placements" or prefix+"ranks", or "shape" (its Value as
// placement.FormatShape writes it) for a shape whose bytes or strides do
// not fit an int64 in dt, so that a shape too large for its dtype is not
// blamed on the placements.
func (s Side) Layout(shape []int64, dt dtype.DType, start int, prefix string) (placement.Layout, error) {
	bad := func(field, value string, err error) (placement.Layout, error) {
		return placement.Layout{}, &Error{Field: field, Value: value, Err: err}
	}
	if err := shapeFits(shape, dt); err != nil {
		return bad("shape", placement.FormatShape(shape), err)
	}
	ms, err := mesh.ParseShape(s.Mesh)
	if err != nil {
		return bad(prefix+"mesh", s.Mesh, err)
	}
	ps, err := placement.Parse(s.Placements)
	if err != nil {
		return bad(prefix+"placements", s.Placements, err)
	}
	var m mesh.Mesh
	if s.Ranks == "" {
		if m, err = mesh.Interval(ms, start); err != nil {
			return bad(prefix+"mesh", s.Mesh, err)
		}
	} else {
		ranks, err := mesh.ParseRanks(s.Ranks)
		if err != nil {
			return bad(prefix+"ranks", s.Ranks, err)
		}
		if m, err = mesh.New(ms, ranks); err != nil {
			return bad(prefix+"ranks", s.Ranks, err)
		}
	}
	l, err := placement.NewLayout(shape, dt, m, ps)
	if err != nil {
		return bad(prefix+"placements", s.Placements, err)
	}
	return l, nil
}

// shapeFits checks what the shape and dtype alone must satisfy (their
// bytes and strides fit an int64), on a one-rank mesh.
func shapeFits(shape []int64, dt dtype.DType) error {
	one, err := mesh.Interval([]int{1}, 0)
	if err != nil {
		return err
	}
	_, err = placement.NewLayout(shape, dt, one, []placement.Placement{placement.Replicate()})
	return err
}

// Pair is one tensor resharded from a source layout to a destination
// layout, in words.
type Pair struct {
	// Shape is the global shape ("7168x2048", "scalar": placement.ParseShape)
	// and DType its element type ("bf16": dtype.Parse).
	Shape, DType string
	Src, Dst     Side
	// World is the communicator's size; 0: the highest rank of the
	// meshes, plus one.
	World int
}

// tensor parses the shape and the dtype.
func (p Pair) tensor() ([]int64, dtype.DType, error) {
	shape, err := placement.ParseShape(p.Shape)
	if err != nil {
		return nil, 0, &Error{Field: "shape", Value: p.Shape, Err: err}
	}
	dt, err := dtype.Parse(p.DType)
	if err != nil {
		return nil, 0, &Error{Field: "dtype", Value: p.DType, Err: err}
	}
	return shape, dt, nil
}

// Layouts returns the pair's two layouts and the communicator's size. The
// source's ranks default to 0..M-1 and the destination's to M..M+N-1.
// Errors are *Error, the first part to blame in this order: "shape"
// (ErrRequired where it is missing), "dtype", then each side's ("src-",
// then "dst-"; a missing mesh or placements is ErrRequired, see
// Side.Layout), then "world" (smaller than the meshes need).
func (p Pair) Layouts() (src, dst placement.Layout, world int, err error) {
	if p.Shape == "" {
		return src, dst, 0, &Error{Field: "shape", Err: ErrRequired}
	}
	shape, dt, err := p.tensor()
	if err != nil {
		return src, dst, 0, err
	}
	start := 0
	for i, side := range []Side{p.Src, p.Dst} {
		prefix := [2]string{"src-", "dst-"}[i]
		switch {
		case side.Mesh == "":
			return src, dst, 0, &Error{Field: prefix + "mesh", Err: ErrRequired}
		case side.Placements == "":
			return src, dst, 0, &Error{Field: prefix + "placements", Err: ErrRequired}
		}
		l, err := side.Layout(shape, dt, start, prefix)
		if err != nil {
			return src, dst, 0, err
		}
		if i == 0 {
			src, start = l, l.Mesh().Size()
		} else {
			dst = l
		}
	}
	world = slices.Max(append(src.Mesh().Ranks(), dst.Mesh().Ranks()...)) + 1
	if p.World != 0 {
		if p.World < world {
			return src, dst, 0, &Error{Field: "world", Value: strconv.Itoa(p.World), Err: fmt.Errorf("the meshes reach rank %d", world-1)}
		}
		world = p.World
	}
	return src, dst, world, nil
}

// Stages lays the pair out as a pipeline of stages (pipeline.Contiguous)
// on world ranks: stage s trains on ranks [s*M, (s+1)*M), M the source
// mesh's size, and every stage reshards to the one generator, on
// Dst.Ranks or after all trainers. It returns the layout and a function
// that lays stage s's tensor out on the ranks of the stage's own
// communicator. Src.Ranks is not used: the stages place the trainers.
// Errors are *Error as Layouts returns them (a missing mesh or placements
// of either side is ErrRequired), and "pp-stages" for a layout that does
// not fit the world (pipeline.Layout.Validate), its Err saying "with a
// 4-rank trainer stage and 8 generator ranks on 12 ranks: ...".
func (p Pair) Stages(stages, world int) (pipeline.Layout, func(s int) (src, dst placement.Layout, err error), error) {
	var l pipeline.Layout
	shape, dt, err := p.tensor()
	if err != nil {
		return l, nil, err
	}
	for _, f := range []struct{ field, v string }{{"src-mesh", p.Src.Mesh}, {"src-placements", p.Src.Placements},
		{"dst-mesh", p.Dst.Mesh}, {"dst-placements", p.Dst.Placements}} {
		if f.v == "" {
			return l, nil, &Error{Field: f.field, Err: ErrRequired}
		}
	}
	var sizes [2]int
	for i, side := range []Side{p.Src, p.Dst} {
		ms, err := mesh.ParseShape(side.Mesh)
		if err != nil {
			return l, nil, &Error{Field: [2]string{"src-mesh", "dst-mesh"}[i], Value: side.Mesh, Err: err}
		}
		sizes[i] = 1
		for _, n := range ms {
			sizes[i] *= n
		}
	}
	l = pipeline.Contiguous(stages, sizes[0], sizes[1])
	if p.Dst.Ranks != "" {
		if l.Generators, err = mesh.ParseRanks(p.Dst.Ranks); err != nil {
			return l, nil, &Error{Field: "dst-ranks", Value: p.Dst.Ranks, Err: err}
		}
	}
	if err := l.Validate(world); err != nil {
		return l, nil, &Error{Field: "pp-stages", Value: strconv.Itoa(stages),
			Err: fmt.Errorf("with a %d-rank trainer stage and %d generator ranks on %d ranks: %w", sizes[0], sizes[1], world, err)}
	}
	perStage := func(s int) (placement.Layout, placement.Layout, error) {
		src, err := Side{p.Src.Mesh, p.Src.Placements, mesh.FormatRanks(l.SrcRanks(s))}.Layout(shape, dt, 0, "src-")
		if err != nil {
			return src, src, err
		}
		dst, err := Side{p.Dst.Mesh, p.Dst.Placements, mesh.FormatRanks(l.DstRanks(s))}.Layout(shape, dt, 0, "dst-")
		return src, dst, err
	}
	return l, perStage, nil
}
