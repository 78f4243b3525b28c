package fp8

import (
	"encoding/binary"
	"errors"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/m2n-dev/m2n/dtype"
	"github.com/m2n-dev/m2n/placement"
	"github.com/m2n-dev/m2n/strided"
)

// FuzzQuantize quantizes a random tensor (shape, mode, dtype and values
// from the inputs; raw overwrites the first elements with arbitrary bit
// patterns, so NaNs and infinities come too) whole, and again cut into
// random strided source regions whose partial amaxes are combined, and
// compares both with the float64 reference of the rule, bit for bit:
// elements, scales, and the first non-finite element's index. The seed
// corpus is in testdata/fuzz/FuzzQuantize.
func FuzzQuantize(f *testing.F) {
	f.Add(uint64(1), uint8(0), uint8(0), uint32(0), []byte(nil))
	f.Add(uint64(2), uint8(1), uint8(1), uint32(0x3FFFF), []byte{0x80, 0x7F}) // f32
	f.Fuzz(func(t *testing.T, seed uint64, kind, modeSel uint8, dims uint32, raw []byte) {
		dt := dtype.BF16
		if kind&1 != 0 {
			dt = dtype.F32
		}
		mode := Mode(1 + modeSel%3)
		shape := []int64{1 + int64(dims>>2&0x1FF)%272, 1 + int64(dims>>11&0x1FF)%272}
		if b := dims & 3; b != 0 {
			shape = append([]int64{int64(b)}, shape...)
		}
		r := rand.New(rand.NewPCG(seed, uint64(kind)))
		src := genValues(r, dt, shape, kind>>1)
		copy(src, raw)
		checkQuantize(t, r, dt, shape, mode, src)
	})
}

// checkQuantize compares Quantize, and a distributed quantization over
// random regions, with the reference.
func checkQuantize(t *testing.T, r *rand.Rand, dt dtype.DType, shape []int64, mode Mode, src []byte) {
	t.Helper()
	want, wantScales, bad := refQuantize(shape, mode, refDecode(dt, src))
	q, err := Quantize(dt, shape, mode, src)
	if bad >= 0 {
		var nf *NonFiniteError
		if !errors.As(err, &nf) || nf.Flat != bad {
			t.Fatalf("%v %v %v: first non-finite element at flat %d; Quantize: %v", placement.FormatShape(shape), dt, mode, bad, err)
		}
		g, _ := NewGrid(shape, mode)
		all := placement.Box{Lo: make([]int64, len(shape)), Hi: shape}
		if err := g.CheckFinite(Dense(dt, src, all)); !errors.As(err, &nf) || nf.Flat != bad {
			t.Fatalf("%v %v %v: first non-finite element at flat %d; CheckFinite: %v", placement.FormatShape(shape), dt, mode, bad, err)
		}
		return
	}
	if err != nil {
		t.Fatalf("%v %v %v: %v", placement.FormatShape(shape), dt, mode, err)
	}
	for i := range want {
		if q.Data[i] != want[i] {
			t.Fatalf("%v %v %v: element %d: %#02x, reference %#02x", placement.FormatShape(shape), dt, mode, i, q.Data[i], want[i])
		}
	}
	for i := range wantScales {
		if float64(q.Scales[i]) != wantScales[i] {
			t.Fatalf("%v %v %v: scale %d: %v, reference %v", placement.FormatShape(shape), dt, mode, i, q.Scales[i], wantScales[i])
		}
	}
	checkDistributed(t, r, dt, q, src)
}

// checkDistributed cuts the tensor into a random grid of regions, each held
// strided inside a padded buffer of its own; gathers partial amaxes per
// region, combines them, and packs every region quantized: the bytes and
// every region's scale window must equal the whole tensor's.
func checkDistributed(t *testing.T, r *rand.Rand, dt dtype.DType, whole Quantized, src []byte) {
	t.Helper()
	g := whole.Grid
	shape := g.Shape()
	nd := len(shape)
	esz := int64(dt.Size())
	cuts := make([][]int64, nd)
	for d, n := range shape {
		cuts[d] = randomCuts(r, n)
	}
	var regions []placement.Box
	forEachCell(cuts, func(b placement.Box) { regions = append(regions, b) })
	global, err := g.NewWindow(g.All())
	if err != nil {
		t.Fatal(err)
	}
	type held struct {
		reg Region
		win Window
	}
	hs := make([]held, len(regions))
	for i, box := range regions {
		// The region sits at a random place in a buffer with padding
		// around every dim.
		pad := make([]int64, nd)
		for d := range pad {
			pad[d] = int64(r.IntN(3))
		}
		bufShape := make([]int64, nd)
		for d := range bufShape {
			bufShape[d] = box.Hi[d] - box.Lo[d] + pad[d]
		}
		buf := make([]byte, numElems(bufShape)*esz+int64(r.IntN(5)))
		off := make([]int64, nd)
		for d := range off {
			off[d] = int64(r.IntN(int(pad[d]) + 1))
		}
		at := describeIn(bufShape, off, box, esz)
		if w := box.Hi[nd-1] - box.Lo[nd-1]; r.IntN(4) == 0 && w%2 == 0 {
			// the same bytes in runs of half a row: segments end mid-row
			at.Run /= 2
			at.Count = append(at.Count, 2)
			at.Stride = append(at.Stride, at.Run)
		}
		copyBox(buf, at, src, shape, box, esz)
		reg := Region{DType: dt, Data: buf, At: at, Box: box}
		w, err := g.WindowFor(box)
		if err != nil {
			t.Fatal(err)
		}
		if err := g.Amax(w, reg); err != nil {
			t.Fatalf("region %v: %v", box, err)
		}
		if err := global.MaxWith(w); err != nil {
			t.Fatal(err)
		}
		hs[i] = held{reg, w}
	}
	if err := global.ToScales(); err != nil {
		t.Fatal(err)
	}
	for _, h := range hs {
		if err := h.win.CopyFrom(global); err != nil {
			t.Fatal(err)
		}
		out := make([]byte, h.reg.Box.Elems())
		if err := g.Pack(out, h.reg, h.win); err != nil {
			t.Fatalf("region %v: %v", h.reg.Box, err)
		}
		i := 0
		forEachIndex(h.reg.Box, func(idx []int64) {
			flat := flatIndex(shape, idx)
			if out[i] != whole.Data[flat] {
				t.Fatalf("%v %v, region %v at %v: %#02x, whole tensor %#02x", placement.FormatShape(shape), g.Mode(), h.reg.Box, h.reg.At, out[i], whole.Data[flat])
			}
			i++
		})
		sb, _ := g.Blocks(h.reg.Box)
		j := 0
		forEachIndex(sb, func(idx []int64) {
			if v := h.win.Values[j]; v != whole.Scales[flatIndex(g.ScaleShape(), idx)] {
				t.Fatalf("region %v: scale of block %v is %v, whole tensor %v", h.reg.Box, idx, v, whole.Scales[flatIndex(g.ScaleShape(), idx)])
			}
			j++
		})
	}
}

// randomCuts returns sorted cut points 0 = c0 < ... < ck = n, a few of them
// at or next to multiples of BlockSize.
func randomCuts(r *rand.Rand, n int64) []int64 {
	c := []int64{0}
	for at := int64(0); at < n; {
		step := 1 + int64(r.IntN(int(min(n, 200))))
		if r.IntN(3) == 0 {
			step = (at/BlockSize+1)*BlockSize - at + int64(r.IntN(3)) - 1
		}
		at = min(n, at+max(step, 1))
		c = append(c, at)
	}
	return c
}

// forEachCell calls fn with every box of the grid the cuts make.
func forEachCell(cuts [][]int64, fn func(placement.Box)) {
	nd := len(cuts)
	k := make([]int, nd)
	for {
		b := placement.Box{Lo: make([]int64, nd), Hi: make([]int64, nd)}
		for d := range nd {
			b.Lo[d], b.Hi[d] = cuts[d][k[d]], cuts[d][k[d]+1]
		}
		fn(b)
		d := nd - 1
		for ; d >= 0; d-- {
			k[d]++
			if k[d] < len(cuts[d])-1 {
				break
			}
			k[d] = 0
		}
		if d < 0 {
			return
		}
	}
}

// describeIn returns where box's elements sit in a dense row-major buffer
// of shape buf, with the box's corner at element off of it: one run per box
// row, stepping through every outer dim (no merging, so that descriptors
// with many dims are exercised too).
func describeIn(buf, off []int64, box placement.Box, esz int64) strided.Desc {
	nd := len(buf)
	stride := make([]int64, nd)
	s := esz
	for d := nd - 1; d >= 0; d-- {
		stride[d] = s
		s *= buf[d]
	}
	at := strided.Desc{Run: (box.Hi[nd-1] - box.Lo[nd-1]) * esz}
	for d := range nd {
		at.Offset += off[d] * stride[d]
	}
	for d := range nd - 1 {
		at.Count = append(at.Count, box.Hi[d]-box.Lo[d])
		at.Stride = append(at.Stride, stride[d])
	}
	return at
}

// copyBox copies box's elements of the dense tensor src into buf where at
// says.
func copyBox(buf []byte, at strided.Desc, src []byte, shape []int64, box placement.Box, esz int64) {
	var packed []byte
	forEachIndex(box, func(idx []int64) {
		f := flatIndex(shape, idx) * esz
		packed = append(packed, src[f:f+esz]...)
	})
	var it runs
	it.init(at)
	for k := int64(0); k < int64(len(packed)); k += at.Run {
		if it.left == 0 {
			it.advance()
		}
		copy(buf[it.off:it.off+at.Run], packed[k:k+at.Run])
		it.left = 0
	}
}

// forEachIndex calls fn with every index of box in row-major order.
func forEachIndex(box placement.Box, fn func([]int64)) {
	if box.Empty() {
		return
	}
	idx := append([]int64(nil), box.Lo...)
	for {
		fn(idx)
		if !box.Next(idx) {
			return
		}
	}
}

func flatIndex(shape, idx []int64) int64 {
	f := int64(0)
	for d, i := range idx {
		f = f*shape[d] + i
	}
	return f
}

// genValues returns raw values for a tensor: mostly spread over a range
// below 448 * 2^E for a random E (so that blocks with an element of
// magnitude 448 * 2^E have the scale 2^E, and midpoints between E4M3
// values times 2^E are exact ties), with specials mixed in: zeros of both
// signs, bfloat16 and float32 subnormals, the smallest normals, the
// largest finite values, E4M3 midpoints and limits times 2^E, and tiny
// values that quantize to zero or to E4M3 subnormals. dist varies the mix.
func genValues(r *rand.Rand, dt dtype.DType, shape []int64, dist uint8) []byte {
	n := numElems(shape)
	esz := dt.Size()
	out := make([]byte, n*int64(esz))
	e := r.IntN(250) - 130 // 448 * 2^e stays a finite bfloat16 for e <= 119
	if dist%4 == 1 {
		e = -133 + r.IntN(8) // subnormal territory
	} else if dist%4 == 2 {
		e = 112 + r.IntN(8) // near the top
	}
	special := 0.05 + 0.3*float64(dist>>2%4)/3
	p2 := math.Ldexp(1, e)
	for i := range n {
		var v float64
		if r.Float64() < special {
			switch r.IntN(12) {
			case 0:
				v = 0
			case 1:
				v = math.Copysign(0, -1)
			case 2:
				v = math.Ldexp(float64(1+r.IntN(127)), -133) // bfloat16 subnormal
			case 3:
				v = math.Ldexp(float64(1+r.IntN(1<<23)), -149) // float32 subnormal
			case 4:
				v = 0x1p-126
			case 5:
				v = float64(math.MaxFloat32) // rounds to bfloat16's largest below
			case 6:
				c := r.IntN(126)
				v = (refValues[c] + refValues[c+1]) / 2 * p2 // a tie
			case 7:
				v = []float64{448, 464, 480, 447, 449, 1}[r.IntN(6)] * p2
			case 8:
				v = math.Ldexp(1+r.Float64(), e-r.IntN(24)) // E4M3 subnormals and zeros
			case 9:
				v = refValues[r.IntN(127)] * p2 // exact E4M3 values
			default:
				v = 448 * p2
			}
		} else {
			v = (r.Float64()*2 - 1) * 448 * p2
		}
		if r.IntN(2) == 0 {
			v = -v
		}
		f := float32(v) // round to float32 (then truncate to bf16 below)
		if dt == dtype.BF16 {
			u := math.Float32bits(f)
			u += 0x7FFF + (u>>16)&1 // round to nearest even
			if u&0x7F800000 == 0x7F800000 {
				u = math.Float32bits(f) &^ 0xFFFF // keep it finite
			}
			binary.LittleEndian.PutUint16(out[int64(i)*2:], uint16(u>>16))
		} else {
			binary.LittleEndian.PutUint32(out[int64(i)*4:], math.Float32bits(f))
		}
	}
	return out
}

// TestQuantizeRandom runs the fuzz body on a fixed set of seeds, so that
// plain go test covers every mode, dtype and mix.
func TestQuantizeRandom(t *testing.T) {
	n := 60
	if testing.Short() {
		n = 12
	}
	r := rand.New(rand.NewPCG(7, 8))
	for i := range n {
		dt := []dtype.DType{dtype.BF16, dtype.F32}[i%2]
		mode := Mode(1 + i/2%3)
		shape := []int64{1 + int64(r.IntN(300)), 1 + int64(r.IntN(300))}
		if i%5 == 0 {
			shape = append([]int64{1 + int64(r.IntN(3))}, shape...)
		}
		src := genValues(r, dt, shape, uint8(i))
		checkQuantize(t, r, dt, shape, mode, src)
	}
}

func numElems(shape []int64) int64 {
	n := int64(1)
	for _, s := range shape {
		n *= s
	}
	return n
}
