package program

import (
	"bytes"
	"flag"
	"math/rand/v2"
	"path/filepath"
	"testing"

	"github.com/m2n-dev/m2n/internal/testutil/goldentest"
	"github.com/m2n-dev/m2n/internal/testutil/layouttest"
	"github.com/m2n-dev/m2n/placement"
	"github.com/m2n-dev/m2n/reshard"
	"github.com/m2n-dev/m2n/strided"
)

// TestGoldenPrograms renders the compiled programs of Example A's
// destination rank and of a source rank that sends strided boxes, on the
// flat route, with and without coalescing, and with a destination view; a
// change shows as a diff of testdata/program_*.txt (-rewrite accepts it).
func TestGoldenPrograms(t *testing.T) {
	tests := []struct {
		file           string
		shape, dtype   string
		srcMesh, srcPl string
		dstMesh, dstPl string
		rank           int
		opts           CompileOptions
		chunk          int64
	}{
		{"program_example_a_rank4.txt", "8x4", "f32", "4", "S0", "2x2", "R,S0", 4, CompileOptions{}, 0},
		{"program_columns_rank0.txt", "16x8", "bf16", "4", "S0", "2x2", "R,S1", 0, CompileOptions{}, 0},
		{"program_columns_rank0_inplace.txt", "16x8", "bf16", "4", "S0", "2x2", "R,S1", 0, CompileOptions{MaxInPlace: 1 << 30}, 0},
		{"program_columns_rank0_coalesced.txt", "16x8", "bf16", "4", "S0", "4", "S1", 0, CompileOptions{CoalesceBytes: 64}, 8},
		{"program_columns_rank5_view.txt", "16x8", "bf16", "4", "S0", "2x2", "R,S1", 5,
			CompileOptions{Views: []TensorViews{{Dst: placement.View{Offset: 10, Strides: []int64{6, 1}}}}}, 0},
	}
	for _, tc := range tests {
		t.Run(tc.file, func(t *testing.T) {
			src := layout(t, tc.shape, tc.dtype, tc.srcMesh, tc.srcPl, 0)
			dst := layout(t, tc.shape, tc.dtype, tc.dstMesh, tc.dstPl, src.Mesh().Size())
			p, err := reshard.NewPlan(src, dst, 8, reshard.Options{})
			if err != nil {
				t.Fatal(err)
			}
			chunk := tc.chunk
			if chunk == 0 {
				chunk = 32
			}
			s, err := reshard.Flat.Schedule([]*reshard.Plan{p}, reshard.Topology{}, reshard.ScheduleOptions{ChunkBytes: chunk, StagingBytes: 8 * 64})
			if err != nil {
				t.Fatal(err)
			}
			prog, err := Compile(s, tc.rank, tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			var got bytes.Buffer
			if _, err := prog.WriteTo(&got); err != nil {
				t.Fatal(err)
			}
			goldentest.Check(t, filepath.Join("testdata", tc.file), got.Bytes(), *rewrite, "program", "./reshard/program")
		})
	}
}

// TestDescribeViewDense checks DescribeView against Describe for the
// default view, and against an element-by-element walk of a random view.
func TestDescribeViewDense(t *testing.T) {
	rnd := rand.New(rand.NewPCG(7, 9))
	for it := 0; it < 2000; it++ {
		nd := 1 + rnd.IntN(4)
		local := placement.Box{Lo: make([]int64, nd), Hi: make([]int64, nd)}
		sub := placement.Box{Lo: make([]int64, nd), Hi: make([]int64, nd)}
		for d := 0; d < nd; d++ {
			local.Lo[d] = int64(rnd.IntN(5))
			local.Hi[d] = local.Lo[d] + 1 + int64(rnd.IntN(5))
			sub.Lo[d] = local.Lo[d] + int64(rnd.IntN(int(local.Hi[d]-local.Lo[d])))
			sub.Hi[d] = sub.Lo[d] + 1 + int64(rnd.IntN(int(local.Hi[d]-sub.Lo[d])))
		}
		elem := int64(1 << rnd.IntN(4))
		a, b := strided.Describe(local, sub, elem), strided.DescribeView(local, sub, elem, placement.View{})
		if a.String() != b.String() {
			t.Fatalf("dense: %v != %v", a, b)
		}
		// a padded view: walk every element and compare the byte offsets.
		shape := local.Shape()
		v := placement.View{Offset: int64(rnd.IntN(7)), Strides: make([]int64, nd)}
		acc := int64(1)
		for d := nd - 1; d >= 0; d-- {
			v.Strides[d] = acc
			pad := int64(0)
			if d < nd-1 || rnd.IntN(2) == 0 {
				pad = int64(rnd.IntN(3))
			}
			if d == nd-1 {
				pad = 0
			}
			acc = acc*shape[d] + pad*acc
		}
		got := strided.DescribeView(local, sub, elem, v)
		var want []int64
		idx := make([]int64, nd)
		copy(idx, sub.Lo)
		for {
			off := v.Offset
			for d := 0; d < nd; d++ {
				off += (idx[d] - local.Lo[d]) * v.Strides[d]
			}
			want = append(want, off*elem)
			if !sub.Next(idx) {
				break
			}
		}
		var offs []int64
		got.ForEachRun(func(at int64) {
			for k := int64(0); k < got.Run; k += elem {
				offs = append(offs, at+k)
			}
		})
		if len(offs) != len(want) {
			t.Fatalf("view %v of %v in %v: %d elements, want %d (%v)", v, sub, local, len(offs), len(want), got)
		}
		for i := range offs {
			if offs[i] != want[i] {
				t.Fatalf("view %v of %v in %v: element %d at %d, want %d (%v)", v, sub, local, i, offs[i], want[i], got)
			}
		}
	}
}

var rewrite = flag.Bool("rewrite", false, "rewrite the golden files in testdata/ with the current output")

// layout builds a layout from refit's spellings on the mesh of ranks
// first, first+1, ...; the test fails on error.
func layout(t testing.TB, shape, dtype, meshShape, placements string, first int) placement.Layout {
	t.Helper()
	m := layouttest.Interval(t, layouttest.MeshShape(t, meshShape), first)
	return layouttest.Layout(t, shape, layouttest.DType(t, dtype), m, placements)
}
