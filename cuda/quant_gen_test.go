package cuda

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"

	"github.com/m2n-dev/m2n/dtype"
	"github.com/m2n-dev/m2n/fp8"
	"github.com/m2n-dev/m2n/fp8/fp8test"
	"github.com/m2n-dev/m2n/placement"
	"github.com/m2n-dev/m2n/strided"
)

// FP8 kernel cases for the tests, here (through the CPU emulator) and in
// the GPU tests of package cuda_test (exported from a _test file, so only
// tests see them).

// QuantCase is one check of the FP8 kernels: a source buffer holding box
// Box of a tensor where At says, a window of blocks, and what package fp8
// computes for them on the host, which the kernels must reproduce bit for
// bit.
type QuantCase struct {
	Name   string
	Grid   fp8.Grid
	DType  dtype.DType
	Src    []byte // the source buffer
	At     strided.Desc
	Box    placement.Box
	Blocks placement.Box // the window: the blocks Box touches, sometimes with a margin
	Scales []float32     // the window's scales: those of the whole tensor
	Amax   []float32     // fp8.Grid.Amax of the region into a zeroed window
	Want   []byte        // fp8.Grid.Pack of the region with Scales
	DstOff int           // where in the destination buffer the E4M3 bytes start
}

func (c QuantCase) String() string {
	return fmt.Sprintf("%s: %s %v %v box %v at %+v, window %v, destination +%d",
		c.Name, placement.FormatShape(c.Grid.Shape()), c.DType, c.Grid.Mode(), c.Box, c.At, c.Blocks, c.DstOff)
}

// QuantCases returns the torch conformance cases of dir (each whole and
// cut into boxes) and n random cases: 2-D and 3-D tensors, every mode, bf16
// and f32, boxes at random places in padded buffers, with alignments that
// exercise every vector width.
func QuantCases(r *rand.Rand, n int, dir string) ([]QuantCase, error) {
	f, err := fp8test.Load(dir)
	if err != nil {
		return nil, err
	}
	var out []QuantCase
	for _, c := range f.Cases {
		full := placement.Box{Lo: make([]int64, len(c.Shape)), Hi: c.Shape}
		boxes := []placement.Box{full}
		for range 3 {
			boxes = append(boxes, randomBox(r, c.Shape))
		}
		for i, box := range boxes {
			qc, err := makeQuantCase(r, c.String()+fmt.Sprintf("#%d", i), c.DType, c.Shape, c.Mode, c.Input, box, i == 0)
			if err != nil {
				return nil, err
			}
			out = append(out, qc)
		}
	}
	for i := range n {
		shape := []int64{1 + int64(r.IntN(300)), 1 + int64(r.IntN(300))}
		if r.IntN(3) == 0 {
			shape = append([]int64{1 + int64(r.IntN(3))}, shape...)
		}
		dt := []dtype.DType{dtype.BF16, dtype.F32}[r.IntN(2)]
		mode := fp8.Mode(1 + r.IntN(3))
		data := fp8test.Random(r, dt, shape, randomSpread)
		qc, err := makeQuantCase(r, fmt.Sprintf("random#%d", i), dt, shape, mode, data, randomBox(r, shape), r.IntN(4) == 0)
		if err != nil {
			return nil, err
		}
		out = append(out, qc)
	}
	return out, nil
}

// makeQuantCase cuts box out of a dense tensor into a padded buffer and
// computes the host results. dense keeps the box dense at offset 0.
func makeQuantCase(r *rand.Rand, name string, dt dtype.DType, shape []int64, mode fp8.Mode, data []byte, box placement.Box, dense bool) (QuantCase, error) {
	whole, err := fp8.Quantize(dt, shape, mode, data)
	if err != nil {
		return QuantCase{}, err
	}
	g := whole.Grid
	nd := len(shape)
	esz := int64(dt.Size())
	// The buffer: the box padded in every dim; often 16-byte friendly.
	bufShape := make([]int64, nd)
	off := make([]int64, nd)
	for d := range nd {
		ext := box.Hi[d] - box.Lo[d]
		pad := int64(0)
		if !dense {
			pad = int64(r.IntN(3))
			if d == nd-1 && r.IntN(2) == 0 {
				pad = (8 - ext%8) % 8 // rows of a multiple of 8 elements
				if r.IntN(2) == 0 {
					pad += 8
				}
			}
		}
		bufShape[d] = ext + pad
		off[d] = int64(r.IntN(int(pad) + 1))
		if d == nd-1 && pad >= 8 && r.IntN(2) == 0 {
			off[d] = 8 * int64(r.IntN(int(pad)/8+1)) // keep the row start aligned
			off[d] = min(off[d], pad)
		}
	}
	lead := int64(0)
	if !dense && r.IntN(2) == 0 {
		lead = esz * int64(r.IntN(4)) // misalign the whole buffer
	}
	n := esz
	for _, s := range bufShape {
		n *= s
	}
	src := make([]byte, lead+n+int64(r.IntN(8)))
	at := strided.Desc{Offset: lead, Run: (box.Hi[nd-1] - box.Lo[nd-1]) * esz}
	stride := esz
	strides := make([]int64, nd)
	for d := nd - 1; d >= 0; d-- {
		strides[d] = stride
		stride *= bufShape[d]
	}
	for d := range nd {
		at.Offset += off[d] * strides[d]
	}
	for d := range nd - 1 {
		at.Count = append(at.Count, box.Hi[d]-box.Lo[d])
		at.Stride = append(at.Stride, strides[d])
	}
	// copy the box's rows in
	k := 0
	at.ForEachRun(func(o int64) {
		idx := rowIndex(box, k)
		flat := int64(0)
		for d, i := range idx {
			flat = flat*shape[d] + i
		}
		copy(src[o:o+at.Run], data[flat*esz:flat*esz+at.Run])
		k++
	})
	blocks, err := g.Blocks(box)
	if err != nil {
		return QuantCase{}, err
	}
	if !blocks.Empty() && r.IntN(3) == 0 {
		scale := g.ScaleShape()
		for d := range nd {
			blocks.Lo[d] = max(0, blocks.Lo[d]-int64(r.IntN(2)))
			blocks.Hi[d] = min(scale[d], blocks.Hi[d]+int64(r.IntN(2)))
		}
	}
	all, err := g.NewWindow(g.All())
	if err != nil {
		return QuantCase{}, err
	}
	copy(all.Values, whole.Scales)
	scales, err := g.NewWindow(blocks)
	if err != nil {
		return QuantCase{}, err
	}
	if err := scales.CopyFrom(all); err != nil {
		return QuantCase{}, err
	}
	amax, err := g.NewWindow(blocks)
	if err != nil {
		return QuantCase{}, err
	}
	reg := fp8.Region{DType: dt, Data: src, At: at, Box: box}
	if err := g.Amax(amax, reg); err != nil {
		return QuantCase{}, err
	}
	want := make([]byte, box.Elems())
	if err := g.Pack(want, reg, scales); err != nil {
		return QuantCase{}, err
	}
	return QuantCase{Name: name, Grid: g, DType: dt, Src: src, At: at, Box: box, Blocks: blocks,
		Scales: scales.Values, Amax: amax.Values, Want: want, DstOff: r.IntN(3) * 8 * r.IntN(2)}, nil
}

// rowIndex returns the first global index of row k of box.
func rowIndex(box placement.Box, k int) []int64 {
	nd := len(box.Lo)
	idx := make([]int64, nd)
	idx[nd-1] = box.Lo[nd-1]
	for d := nd - 2; d >= 0; d-- {
		n := int(box.Hi[d] - box.Lo[d])
		idx[d] = box.Lo[d] + int64(k%n)
		k /= n
	}
	return idx
}

// randomBox returns a random nonempty box of shape, its edges often on or
// next to multiples of 128.
func randomBox(r *rand.Rand, shape []int64) placement.Box {
	nd := len(shape)
	b := placement.Box{Lo: make([]int64, nd), Hi: make([]int64, nd)}
	for d, n := range shape {
		lo := int64(r.IntN(int(n)))
		if r.IntN(3) == 0 {
			lo = min(n-1, 128*int64(r.IntN(int(n)/128+1)))
		}
		hi := lo + 1 + int64(r.IntN(int(n-lo)))
		b.Lo[d], b.Hi[d] = lo, hi
	}
	return b
}

// randomSpread is how the random cases' values vary: magnitudes by region,
// some zeros and subnormals.
var randomSpread = fp8test.Spread{Exp: 30, Period: 61, Levels: 9, Specials: true}

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
	// rows longer than a team holds (256 lanes of M2N_FREGS vectors), which
	// the fused kernels read a second time, in three vector widths
	for _, c := range []struct {
		dt    dtype.DType
		shape []int64
	}{{dtype.BF16, []int64{3, 20000}}, {dtype.BF16, []int64{2, 2999}}, {dtype.F32, []int64{2, 9000}}} {
		for _, mode := range []fp8.Mode{fp8.Row, fp8.Block} {
			box := placement.Box{Lo: make([]int64, 2), Hi: c.shape}
			if err := add(fmt.Sprintf("long rows %v %v", c.shape, mode), c.dt, c.shape, mode, fp8test.Random(r, c.dt, c.shape, randomSpread), box, true); err != nil {
				return nil, err
			}
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
