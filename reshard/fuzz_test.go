package reshard

import (
	"testing"

	"github.com/m2n-dev/m2n/dtype"
	"github.com/m2n-dev/m2n/mesh"
	"github.com/m2n-dev/m2n/placement"
)

// FuzzPlan derives plans from arbitrary CLI-style specs. Inputs the parsers
// or NewLayout reject are skipped; every plan that is derived must pass the
// element-by-element oracle. The seed corpus lives in testdata/fuzz/FuzzPlan.
func FuzzPlan(f *testing.F) {
	f.Add("8x4", "f32", "4", "S0", "", "2x2", "R,S0", "4-7", false)
	f.Add("10x3", "bf16", "2x2", "S0,S0", "3,0,2,1", "3", "S1", "1-3", true)
	f.Fuzz(func(t *testing.T, shape, dtypeName, srcMesh, srcPl, srcRanks, dstMesh, dstPl, dstRanks string, stripe bool) {
		src, ok := fuzzLayout(shape, dtypeName, srcMesh, srcPl, srcRanks, 0)
		if !ok {
			return
		}
		dst, ok := fuzzLayout(shape, dtypeName, dstMesh, dstPl, dstRanks, src.Mesh().Size())
		if !ok {
			return
		}
		world := 0
		for _, m := range []mesh.Mesh{src.Mesh(), dst.Mesh()} {
			for i := 0; i < m.Size(); i++ {
				world = max(world, m.RankAt(i)+1)
			}
		}
		p, err := NewPlan(src, dst, world, Options{StripeReplicas: stripe})
		if err != nil {
			t.Fatalf("%v -> %v: %v", src, dst, err)
		}
		if err := checkPlan(p); err != nil {
			t.Fatalf("%v -> %v: %v", src, dst, err)
		}
	})
}

// fuzzLayout parses one side of a fuzz input; it reports false for input
// that is invalid or too large to check quickly.
func fuzzLayout(shape, dtypeName, meshShape, pl, ranks string, start int) (placement.Layout, bool) {
	s, err := placement.ParseShape(shape)
	if err != nil {
		return placement.Layout{}, false
	}
	elems := int64(1)
	for _, d := range s {
		if d > 1<<12 {
			return placement.Layout{}, false
		}
		elems *= d
		if elems > 1<<14 {
			return placement.Layout{}, false
		}
	}
	dt, err := dtype.Parse(dtypeName)
	if err != nil {
		return placement.Layout{}, false
	}
	ms, err := mesh.ParseShape(meshShape)
	if err != nil {
		return placement.Layout{}, false
	}
	size := 1
	for _, a := range ms {
		size *= a
		if size > 64 {
			return placement.Layout{}, false
		}
	}
	var m mesh.Mesh
	if ranks == "" {
		m, err = mesh.Interval(ms, start)
	} else {
		var rs []int
		rs, err = mesh.ParseRanks(ranks)
		if err != nil {
			return placement.Layout{}, false
		}
		for _, r := range rs {
			if r > 256 {
				return placement.Layout{}, false
			}
		}
		m, err = mesh.New(ms, rs)
	}
	if err != nil {
		return placement.Layout{}, false
	}
	ps, err := placement.Parse(pl)
	if err != nil {
		return placement.Layout{}, false
	}
	l, err := placement.NewLayout(s, dt, m, ps)
	return l, err == nil
}
