package cuda

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"

	"github.com/m2n-dev/m2n/dtype"
	"github.com/m2n-dev/m2n/fp8"
	"github.com/m2n-dev/m2n/fp8/fp8test"
	"github.com/m2n-dev/m2n/placement"
)

// FusedCases returns cases for the fused kernels (FusedQuantize): boxes
// that hold every block they touch whole, so that each block's scale is the
// box's own. The torch conformance cases of dir whole and as the whole
// blocks of random boxes (fp8.Grid.SplitWhole), and n random tensors of
// every mode and both source dtypes, with shapes often multiples of 128
// and boxes on block edges. A case's Scales are then both what the kernel
// must write into the window (for the blocks the box touches) and what its
// bytes Want were packed with.
func FusedCases(r *rand.Rand, n int, dir string) ([]QuantCase, error) {
	f, err := fp8test.Load(dir)
	if err != nil {
		return nil, err
	}
	var out []QuantCase
	add := func(name string, dt dtype.DType, shape []int64, mode fp8.Mode, data []byte, box placement.Box, dense bool) error {
		g, err := fp8.NewGrid(shape, mode)
		if err != nil {
			return err
		}
		whole, _, err := g.SplitWhole(box)
		if err != nil || whole.Empty() {
			return err
		}
		qc, err := makeQuantCase(r, name, dt, shape, mode, data, whole, dense)
		if err != nil {
			return err
		}
		out = append(out, qc)
		return nil
	}
	for _, c := range f.Cases {
		full := placement.Box{Lo: make([]int64, len(c.Shape)), Hi: c.Shape}
		boxes := []placement.Box{full, randomBox(r, c.Shape), randomBox(r, c.Shape)}
		for i, box := range boxes {
			if err := add(c.String()+fmt.Sprintf("#%d", i), c.DType, c.Shape, c.Mode, c.Input, box, i == 0); err != nil {
				return nil, err
			}
		}
	}
	for i := range n {
		dim := func() int64 {
			if r.IntN(2) == 0 {
				return 128 * (1 + int64(r.IntN(3)))
			}
			return 1 + int64(r.IntN(400))
		}
		shape := []int64{dim(), dim()}
		if r.IntN(3) == 0 {
			shape = append([]int64{1 + int64(r.IntN(3))}, shape...)
		}
		dt := []dtype.DType{dtype.BF16, dtype.F32}[r.IntN(2)]
		mode := fp8.Mode(1 + r.IntN(3))
		box := randomBox(r, shape)
		if r.IntN(3) == 0 {
			box = placement.Box{Lo: make([]int64, len(shape)), Hi: shape}
		}
		if err := add(fmt.Sprintf("random#%d", i), dt, shape, mode, fp8test.Random(r, dt, shape, randomSpread), box, r.IntN(4) == 0); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// FusedPattern is a whole tensor of bit patterns for the fused kernels.
type FusedPattern struct {
	DType dtype.DType
	Shape []int64
	Data  []byte
}

// FusedPatterns returns a bf16 tensor of 512 x 4096 elements, the finite
// bfloat16 patterns (every one but the infinities and NaNs, which stand as
// zeros) in 32 copies, each copy in its own random order, so that every
// pattern is quantized under 32 block scales in Block mode (16 per row in
// Row mode); and a float32 tensor of rows x 4096 of random patterns
// (exponents across the whole range, non-finite ones as zeros).
func FusedPatterns(r *rand.Rand, f32Rows int) (bf16, f32 FusedPattern) {
	bf16 = FusedPattern{DType: dtype.BF16, Shape: []int64{512, 4096}, Data: make([]byte, 2*512*4096)}
	perm := make([]uint16, 1<<16)
	for c := range 32 {
		for i := range perm {
			perm[i] = uint16(i)
		}
		r.Shuffle(len(perm), func(i, j int) { perm[i], perm[j] = perm[j], perm[i] })
		for i, v := range perm {
			if v&0x7F80 == 0x7F80 {
				v = 0
			}
			binary.LittleEndian.PutUint16(bf16.Data[2*(c<<16+i):], v)
		}
	}
	f32 = FusedPattern{DType: dtype.F32, Shape: []int64{int64(f32Rows), 4096}, Data: make([]byte, 4*f32Rows*4096)}
	for i := range f32Rows * 4096 {
		v := r.Uint32()
		if v&0x7F800000 == 0x7F800000 {
			v = 0
		}
		binary.LittleEndian.PutUint32(f32.Data[4*i:], v)
	}
	return
}
