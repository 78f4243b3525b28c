package cuda_test

import (
	"bytes"
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/m2n-dev/m2n/cuda"
	"github.com/m2n-dev/m2n/cuda/nvrtc"
	"github.com/m2n-dev/m2n/dtype"
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
	g := newQuantGPU(t)
	ctx, s, upload, download := g.ctx, g.s, g.upload, g.download
	cases, err := cuda.QuantCases(rand.New(rand.NewPCG(21, 22)), 400, "../testdata/fp8")
	if err != nil {
		t.Fatal(err)
	}
	buf := func(n int) cuda.DevicePtr { return gputest.Alloc(t, ctx, max(n, 1)) }
	f32s := func(v []float32) []byte {
		b := make([]byte, 4*len(v))
		for i, x := range v {
			binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
		}
		return b
	}
	for _, c := range cases {
		src := buf(len(c.Src))
		upload(src, c.Src)
		reg := cuda.FP8Region{DType: c.DType, Src: src, At: strided.Desc(c.At), Box: c.Box}
		win := buf(4 * len(c.Amax))
		upload(win, make([]byte, 4*len(c.Amax)))
		if err := cuda.BlockAmax(s, c.Grid, cuda.FP8Window{Blocks: c.Blocks, Values: win}, reg); err != nil {
			t.Fatalf("%v: %v", c, err)
		}
		got := make([]byte, 4*len(c.Amax))
		download(got, win)
		if want := f32s(c.Amax); !bytes.Equal(got, want) {
			t.Fatalf("%v: amaxes differ from fp8's:\n got %v\nwant %v", c, decode(got), c.Amax)
		}
		upload(win, f32s(c.Scales))
		dst := buf(c.DstOff + len(c.Want) + 8)
		poison := bytes.Repeat([]byte{0xA5}, c.DstOff+len(c.Want)+8)
		upload(dst, poison)
		if err := cuda.PackQuantize(s, c.Grid, dst+cuda.DevicePtr(c.DstOff), reg, cuda.FP8Window{Blocks: c.Blocks, Values: win}); err != nil {
			t.Fatalf("%v: %v", c, err)
		}
		out := make([]byte, len(poison))
		download(out, dst)
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

// quantGPU is what the quantize tests run on: device 0's context and a
// stream of its own, with copies that wait for the stream's work first.
type quantGPU struct {
	t   *testing.T
	ctx *cuda.Context
	s   *cuda.Stream
}

// newQuantGPU skips t where CUDA or NVRTC is not available.
func newQuantGPU(t *testing.T) *quantGPU {
	t.Helper()
	ctx := gputest.Context(t)
	gputest.SkipIfNotAvailable(t, nvrtc.Load(), nvrtc.ErrNotAvailable)
	return &quantGPU{t, ctx, gputest.Stream(t, ctx)}
}

// upload copies src to dst after the stream's work, as Memory.Upload.
func (g *quantGPU) upload(dst cuda.DevicePtr, src []byte) {
	g.t.Helper()
	if err := g.s.Synchronize(); err != nil {
		g.t.Fatal(err)
	}
	if err := g.ctx.CopyHtoD(dst, src); err != nil {
		g.t.Fatal(err)
	}
}

// download copies src to dst after the stream's work.
func (g *quantGPU) download(dst []byte, src cuda.DevicePtr) {
	g.t.Helper()
	if err := g.s.Synchronize(); err != nil {
		g.t.Fatal(err)
	}
	if err := g.ctx.CopyDtoH(dst, src); err != nil {
		g.t.Fatal(err)
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
	g := newQuantGPU(t)
	ctx, s, upload, download := g.ctx, g.s, g.upload, g.download
	run := func(dt dtype.DType, shape []int64, src []byte, scale float32, value func(i int) float32) {
		t.Helper()
		g, err := fp8.NewGrid(shape, fp8.Tensor)
		if err != nil {
			t.Fatal(err)
		}
		n := int(shape[0] * shape[1])
		sb := gputest.Alloc(t, ctx, len(src))
		upload(sb, src)
		win := gputest.Alloc(t, ctx, 4)
		upload(win, binary.LittleEndian.AppendUint32(nil, math.Float32bits(scale)))
		dst := gputest.Alloc(t, ctx, n)
		all := placement.Box{Lo: []int64{0, 0}, Hi: shape}
		blocks, err := g.Blocks(all)
		if err != nil {
			t.Fatal(err)
		}
		reg := cuda.FP8Region{DType: dt, Src: sb, At: strided.Desc{Run: int64(len(src))}, Box: all}
		if err := cuda.PackQuantize(s, g, dst, reg, cuda.FP8Window{Blocks: blocks, Values: win}); err != nil {
			t.Fatal(err)
		}
		got := make([]byte, n)
		download(got, dst)
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
		run(dtype.BF16, []int64{256, 256}, bf, s, bfValue)
	}
	const n = 1 << 26
	f := make([]byte, 4*n)
	for _, low := range []uint32{0, 1, 63} {
		for i := range n {
			binary.LittleEndian.PutUint32(f[4*i:], uint32(i)<<6+low)
		}
		value := func(i int) float32 { return math.Float32frombits(uint32(i)<<6 + low) }
		for _, s := range []float32{1, 3} {
			run(dtype.F32, []int64{1 << 14, 1 << 12}, f, s, value)
		}
	}
	t.Logf("%d bfloat16 patterns under %d scales and %d float32 patterns under 2 match package fp8", 1<<16, len(scales), 3*n)
}
