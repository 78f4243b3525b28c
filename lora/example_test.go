package lora_test

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/m2n-dev/m2n/dtype"
	"github.com/m2n-dev/m2n/lora"
	"github.com/m2n-dev/m2n/mesh"
	"github.com/m2n-dev/m2n/placement"
)

// A generator rank holds rows [2, 4) of a 4x3 f32 weight (tp=2, rank 1)
// and a rank-1 adapter: B's rows it needs, A whole. Merging adds
// 0.5 x B[i] x A[j] to each of its elements; a second step with new
// adapters takes the first step's product away.
func Example() {
	m, _ := mesh.Interval([]int{2}, 0)
	wl, _ := placement.NewLayout([]int64{4, 3}, dtype.F32, m, []placement.Placement{placement.Shard(0)})
	bl, _ := placement.NewLayout([]int64{4, 1}, dtype.F32, m, []placement.Placement{placement.Shard(0)})
	al, _ := placement.NewLayout([]int64{1, 3}, dtype.F32, m, []placement.Placement{placement.Replicate()})
	f32s := func(v ...float32) []byte {
		b := make([]byte, 4*len(v))
		for i, x := range v {
			binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
		}
		return b
	}
	w := f32s(1, 1, 1, 1, 1, 1)       // rows 2 and 3 of the weight
	a, b := f32s(1, 2, 3), f32s(2, 4) // A whole; B's rows 2 and 3
	op := func(l placement.Layout, buf []byte) lora.Matrix { return lora.Matrix{Layout: l, Rank: 1, Buf: buf} }
	mg := lora.NewMerger()
	show := func() {
		v := make([]float32, 6)
		for i := range v {
			v[i] = math.Float32frombits(binary.LittleEndian.Uint32(w[4*i:]))
		}
		fmt.Println(v)
	}
	_ = mg.Merge("w", op(wl, w), op(al, a), op(bl, b), 0.5)
	show()
	_ = mg.Merge("w", op(wl, w), op(al, f32s(0, 0, 0)), op(bl, b), 0.5) // the next adapters are zero
	show()
	// Output:
	// [2 3 4 3 5 7]
	// [1 1 1 1 1 1]
}
