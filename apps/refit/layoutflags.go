package main

import (
	"fmt"

	"github.com/m2n-dev/m2n/mesh"
	"github.com/m2n-dev/m2n/placement"
	"github.com/spf13/pflag"
)

// pairFlags are the flags that describe a reshard: one tensor, a source
// layout and a destination layout over one communicator.
type pairFlags struct {
	shape, dtype   string
	srcMesh, srcPl string
	dstMesh, dstPl string
	srcRanks       string
	dstRanks       string
	world          int
}

func (f *pairFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&f.shape, "shape", "", "global tensor shape, e.g. 7168x2048 (scalar for 0 dims)")
	fs.StringVar(&f.dtype, "dtype", "f32", "element type: bf16 f16 f32 f64 i8 u8 i32 i64 fp8e4m3 fp8e5m2")
	fs.StringVar(&f.srcMesh, "src-mesh", "", "source mesh shape, e.g. 4 or 2x2")
	fs.StringVar(&f.srcPl, "src-placements", "", "source placements, one per mesh axis, e.g. S0 or S0,R")
	fs.StringVar(&f.dstMesh, "dst-mesh", "", "destination mesh shape, e.g. 2x2")
	fs.StringVar(&f.dstPl, "dst-placements", "", "destination placements, e.g. R,S1")
	fs.StringVar(&f.srcRanks, "src-ranks", "", "source ranks in mesh order (default 0..M-1), e.g. 0-3 or 8,3,5,1")
	fs.StringVar(&f.dstRanks, "dst-ranks", "", "destination ranks in mesh order (default M..M+N-1)")
	fs.IntVar(&f.world, "world", 0, "communicator size (default: the highest rank + 1)")
}

// layouts parses the flags into the two layouts and the world size; every
// error names the flag and its value.
func (f *pairFlags) layouts() (src, dst placement.Layout, world int, err error) {
	if f.shape == "" {
		return src, dst, 0, usageError{fmt.Errorf("--shape is required (e.g. --shape 7168x2048)")}
	}
	shape, err := placement.ParseShape(f.shape)
	if err != nil {
		return src, dst, 0, flagError("shape", f.shape, err)
	}
	dt, err := placement.ParseDType(f.dtype)
	if err != nil {
		return src, dst, 0, flagError("dtype", f.dtype, err)
	}
	src, err = buildLayout(shape, dt, "src", f.srcMesh, f.srcPl, f.srcRanks, 0)
	if err != nil {
		return src, dst, 0, err
	}
	dst, err = buildLayout(shape, dt, "dst", f.dstMesh, f.dstPl, f.dstRanks, src.Mesh().Size())
	if err != nil {
		return src, dst, 0, err
	}
	world = maxRank(src.Mesh(), dst.Mesh()) + 1
	if f.world != 0 {
		if f.world < world {
			return src, dst, 0, flagError("world", fmt.Sprint(f.world), fmt.Errorf("the meshes reach rank %d", world-1))
		}
		world = f.world
	}
	return src, dst, world, nil
}

// buildLayout builds one side's layout from its flags (prefix "src" or
// "dst"); without a rank list the mesh is the interval starting at start.
func buildLayout(shape []int64, dt placement.DType, prefix, meshFlag, plFlag, ranksFlag string, start int) (placement.Layout, error) {
	name := func(s string) string { return prefix + "-" + s }
	if meshFlag == "" {
		return placement.Layout{}, usageError{fmt.Errorf("--%s is required (e.g. --%s 4x2)", name("mesh"), name("mesh"))}
	}
	if plFlag == "" {
		return placement.Layout{}, usageError{fmt.Errorf("--%s is required (e.g. --%s S0,R)", name("placements"), name("placements"))}
	}
	return parseLayout(shape, dt, meshFlag, plFlag, ranksFlag, start, name("mesh"), name("placements"), name("ranks"))
}

// parseLayout builds a layout from the spellings of its mesh, placements and
// optional rank list, naming the given flags in errors.
func parseLayout(shape []int64, dt placement.DType, meshSpec, plSpec, ranksSpec string, start int, meshFlag, plFlag, ranksFlag string) (placement.Layout, error) {
	if err := shapeFits(shape, dt); err != nil {
		return placement.Layout{}, flagError("shape", placement.FormatShape(shape), err)
	}
	ms, err := mesh.ParseShape(meshSpec)
	if err != nil {
		return placement.Layout{}, flagError(meshFlag, meshSpec, err)
	}
	ps, err := placement.Parse(plSpec)
	if err != nil {
		return placement.Layout{}, flagError(plFlag, plSpec, err)
	}
	var m mesh.Mesh
	if ranksSpec == "" {
		m, err = mesh.Interval(ms, start)
		if err != nil {
			return placement.Layout{}, flagError(meshFlag, meshSpec, err)
		}
	} else {
		ranks, err := mesh.ParseRanks(ranksSpec)
		if err != nil {
			return placement.Layout{}, flagError(ranksFlag, ranksSpec, err)
		}
		m, err = mesh.New(ms, ranks)
		if err != nil {
			return placement.Layout{}, flagError(ranksFlag, ranksSpec, err)
		}
	}
	l, err := placement.NewLayout(shape, dt, m, ps)
	if err != nil {
		return placement.Layout{}, flagError(plFlag, plSpec, err)
	}
	return l, nil
}

func maxRank(ms ...mesh.Mesh) int {
	hi := -1
	for _, m := range ms {
		for i := 0; i < m.Size(); i++ {
			hi = max(hi, m.RankAt(i))
		}
	}
	return hi
}

// shapeFits checks what the shape and dtype alone must satisfy (their
// bytes and strides fit an int64), so that a shape too large for its
// dtype is blamed on --shape rather than on the placements.
func shapeFits(shape []int64, dt placement.DType) error {
	one, err := mesh.Interval([]int{1}, 0)
	if err != nil {
		return err
	}
	_, err = placement.NewLayout(shape, dt, one, []placement.Placement{placement.Replicate()})
	return err
}
