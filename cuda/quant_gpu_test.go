package cuda_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/m2n-dev/m2n/cuda"
	"github.com/m2n-dev/m2n/cuda/nvrtc"
	"github.com/m2n-dev/m2n/fp8"
	"github.com/m2n-dev/m2n/internal/testutil/gputest"
	"github.com/m2n-dev/m2n/placement"
	"github.com/m2n-dev/m2n/strided"
)

// TestGPUQuantize runs BlockAmax and PackQuantize on the GPU over the same
// cases as TestQuantKernelsOnCPU (the torch conformance cases whole and cut
// into boxes, and random boxes of random tensors; more of them) and
// compares the partial amaxes and the E4M3 bytes with package fp8 bit for
// bit. It skips where there is no GPU.
func TestGPUQuantize(t *testing.T) {
	ctx := gputest.Context(t)
	gputest.SkipIfNotAvailable(t, nvrtc.Load(), nvrtc.ErrNotAvailable)
	mem, err := cuda.NewMemory(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close()
	cases, err := cuda.QuantCases(rand.New(rand.NewPCG(21, 22)), 400, "../testdata/fp8")
	if err != nil {
		t.Fatal(err)
	}
	buf := func(n int) cuda.Buffer {
		return cuda.Buffer{Ptr: gputest.Alloc(t, ctx, n), N: int64(max(n, 1))}
	}
	f32s := func(v []float32) []byte {
		b := make([]byte, 4*len(v))
		for i, x := range v {
			binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
		}
		return b
	}
	for _, c := range cases {
		src := buf(len(c.Src))
		if err := mem.Upload(src, c.Src); err != nil {
			t.Fatal(err)
		}
		reg := cuda.FP8Region{DType: c.DType, Src: src, At: strided.Desc(c.At), Box: c.Box}
		win := buf(4 * len(c.Amax))
		if err := mem.Upload(win, make([]byte, 4*len(c.Amax))); err != nil {
			t.Fatal(err)
		}
		if err := mem.BlockAmax(c.Grid, cuda.FP8Window{Blocks: c.Blocks, Values: win}, reg); err != nil {
			t.Fatalf("%v: %v", c, err)
		}
		got := make([]byte, 4*len(c.Amax))
		if err := mem.Download(got, win); err != nil {
			t.Fatal(err)
		}
		if want := f32s(c.Amax); !bytes.Equal(got, want) {
			t.Fatalf("%v: amaxes differ from fp8's:\n got %v\nwant %v", c, decode(got), c.Amax)
		}
		if err := mem.Upload(win, f32s(c.Scales)); err != nil {
			t.Fatal(err)
		}
		dst := buf(c.DstOff + len(c.Want) + 8)
		poison := bytes.Repeat([]byte{0xA5}, c.DstOff+len(c.Want)+8)
		if err := mem.Upload(dst, poison); err != nil {
			t.Fatal(err)
		}
		if err := mem.PackQuantize(c.Grid, dst, int64(c.DstOff), reg, cuda.FP8Window{Blocks: c.Blocks, Values: win}); err != nil {
			t.Fatalf("%v: %v", c, err)
		}
		out := make([]byte, len(poison))
		if err := mem.Download(out, dst); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(out[:c.DstOff], poison[:c.DstOff]) || !bytes.Equal(out[c.DstOff+len(c.Want):], poison[:8]) {
			t.Fatalf("%v: PackQuantize wrote outside its destination", c)
		}
		for i, b := range out[c.DstOff : c.DstOff+len(c.Want)] {
			if b != c.Want[i] {
				t.Fatalf("%v: byte %d is %#02x, fp8 says %#02x", c, i, b, c.Want[i])
			}
		}
	}
	t.Logf("%d cases match package fp8 bit for bit on the GPU", len(cases))
}

// TestGPUAmaxNonFinite: a NaN shows in its block's amax, and
// FirstNonFinite names it.
func TestGPUAmaxNonFinite(t *testing.T) {
	ctx := gputest.Context(t)
	gputest.SkipIfNotAvailable(t, nvrtc.Load(), nvrtc.ErrNotAvailable)
	mem, err := cuda.NewMemory(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close()
	shape := []int64{300, 200}
	g, _ := fp8.NewGrid(shape, fp8.Block)
	host := make([]byte, 2*300*200)
	for i := range 300 * 200 {
		binary.LittleEndian.PutUint16(host[2*i:], 0x3F80) // 1.0
	}
	binary.LittleEndian.PutUint16(host[2*(150*200+170):], 0x7FC0) // NaN at [150 170]
	binary.LittleEndian.PutUint16(host[2*(290*200+3):], 0xFF80)   // -Inf at [290 3]
	src := cuda.Buffer{Ptr: gputest.Alloc(t, ctx, len(host)), N: int64(len(host))}
	if err := mem.Upload(src, host); err != nil {
		t.Fatal(err)
	}
	all := placement.Box{Lo: []int64{0, 0}, Hi: shape}
	reg := cuda.FP8Region{DType: placement.BF16, Src: src, At: strided.Desc{Run: int64(len(host))}, Box: all}
	win := cuda.Buffer{Ptr: gputest.Alloc(t, ctx, 4*6), N: 4 * 6}
	if err := mem.Upload(win, make([]byte, 24)); err != nil {
		t.Fatal(err)
	}
	if err := mem.BlockAmax(g, cuda.FP8Window{Blocks: g.All(), Values: win}, reg); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 24)
	if err := mem.Download(got, win); err != nil {
		t.Fatal(err)
	}
	w := fp8.Window{Blocks: g.All(), Values: decode(got)}
	if !math.IsNaN(float64(w.Values[3])) || !math.IsInf(float64(w.Values[4]), 1) || w.Values[0] != 1 {
		t.Errorf("amaxes %v: want NaN in block (1, 1) and +Inf in block (2, 0)", w.Values)
	}
	if w.ToScales() == nil {
		t.Error("ToScales accepted a NaN amax")
	}
	var nf *fp8.NonFiniteError
	if err := cuda.FirstNonFinite(mem, g, reg); !errors.As(err, &nf) || nf.Flat != 150*200+170 {
		t.Errorf("FirstNonFinite: %v, want element [150 170]", err)
	}
}

func decode(b []byte) []float32 {
	v := make([]float32, len(b)/4)
	for i := range v {
		v[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return v
}

// TestGPUQuantizeEveryPattern converts float bit patterns by the
// thousands of millions through the quantize-pack kernel (on Hopper, the
// hardware's cvt.rn.satfinite.e4m3x2 behind the reciprocal multiply) and
// compares every byte with fp8.QuantizeValue: every bfloat16 pattern
// under several scales, and the float32 patterns i<<6, i<<6+1 and
// i<<6+63 for every i below 2^26 (every sign, exponent and midpoint of
// E4M3's rounding, and the neighbours of each) under scales 1 and 3.
func TestGPUQuantizeEveryPattern(t *testing.T) {
	ctx := gputest.Context(t)
	gputest.SkipIfNotAvailable(t, nvrtc.Load(), nvrtc.ErrNotAvailable)
	mem, err := cuda.NewMemory(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close()
	run := func(dt placement.DType, shape []int64, src []byte, scale float32, value func(i int) float32) {
		t.Helper()
		g, err := fp8.NewGrid(shape, fp8.Tensor)
		if err != nil {
			t.Fatal(err)
		}
		n := int(shape[0] * shape[1])
		sb := cuda.Buffer{Ptr: gputest.Alloc(t, ctx, len(src)), N: int64(len(src))}
		if err := mem.Upload(sb, src); err != nil {
			t.Fatal(err)
		}
		win := cuda.Buffer{Ptr: gputest.Alloc(t, ctx, 4), N: 4}
		if err := mem.Upload(win, binary.LittleEndian.AppendUint32(nil, math.Float32bits(scale))); err != nil {
			t.Fatal(err)
		}
		dst := cuda.Buffer{Ptr: gputest.Alloc(t, ctx, n), N: int64(n)}
		all := placement.Box{Lo: []int64{0, 0}, Hi: shape}
		blocks, err := g.Blocks(all)
		if err != nil {
			t.Fatal(err)
		}
		reg := cuda.FP8Region{DType: dt, Src: sb, At: strided.Desc{Run: int64(len(src))}, Box: all}
		if err := mem.PackQuantize(g, dst, 0, reg, cuda.FP8Window{Blocks: blocks, Values: win}); err != nil {
			t.Fatal(err)
		}
		got := make([]byte, n)
		if err := mem.Download(got, dst); err != nil {
			t.Fatal(err)
		}
		for i, b := range got {
			x := value(i)
			if want := fp8.QuantizeValue(x, scale); b != want {
				t.Fatalf("%v %#08x / %v: the GPU gives %#02x, fp8 %#02x", dt, math.Float32bits(x), scale, b, want)
			}
		}
	}
	bf := make([]byte, 2<<16)
	for i := range 1 << 16 {
		binary.LittleEndian.PutUint16(bf[2*i:], uint16(i))
	}
	bfValue := func(i int) float32 { return math.Float32frombits(uint32(i) << 16) }
	scales := []float32{1, 3, 0.7, 1e-3, 448 / 3.3895314e38, 2.5e-38}
	for _, s := range scales {
		run(placement.BF16, []int64{256, 256}, bf, s, bfValue)
	}
	const n = 1 << 26
	f := make([]byte, 4*n)
	for _, low := range []uint32{0, 1, 63} {
		for i := range n {
			binary.LittleEndian.PutUint32(f[4*i:], uint32(i)<<6+low)
		}
		value := func(i int) float32 { return math.Float32frombits(uint32(i)<<6 + low) }
		for _, s := range []float32{1, 3} {
			run(placement.F32, []int64{1 << 14, 1 << 12}, f, s, value)
		}
	}
	t.Logf("%d bfloat16 patterns under %d scales and %d float32 patterns under 2 match package fp8", 1<<16, len(scales), 3*n)
}
