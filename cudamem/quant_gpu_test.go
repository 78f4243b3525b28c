package cudamem_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"testing"

	"github.com/m2n-dev/m2n/cuda/nvrtc"
	"github.com/m2n-dev/m2n/cudamem"
	"github.com/m2n-dev/m2n/dtype"
	"github.com/m2n-dev/m2n/fp8"
	"github.com/m2n-dev/m2n/internal/testutil/gputest"
	"github.com/m2n-dev/m2n/placement"
	"github.com/m2n-dev/m2n/strided"
)

// TestGPUAmaxNonFinite: a NaN shows in its block's amax, and
// FirstNonFinite names it.
func TestGPUAmaxNonFinite(t *testing.T) {
	ctx := gputest.Context(t)
	gputest.SkipIfNotAvailable(t, nvrtc.Load(), nvrtc.ErrNotAvailable)
	mem := newMemory(t, ctx)
	shape := []int64{300, 200}
	g, _ := fp8.NewGrid(shape, fp8.Block)
	host := make([]byte, 2*300*200)
	for i := range 300 * 200 {
		binary.LittleEndian.PutUint16(host[2*i:], 0x3F80) // 1.0
	}
	binary.LittleEndian.PutUint16(host[2*(150*200+170):], 0x7FC0) // NaN at [150 170]
	binary.LittleEndian.PutUint16(host[2*(290*200+3):], 0xFF80)   // -Inf at [290 3]
	src := cudamem.Buffer{Ptr: gputest.Alloc(t, ctx, len(host)), N: int64(len(host))}
	if err := mem.Upload(src, host); err != nil {
		t.Fatal(err)
	}
	all := placement.Box{Lo: []int64{0, 0}, Hi: shape}
	reg := cudamem.FP8Region{DType: dtype.BF16, Src: src, At: strided.Desc{Run: int64(len(host))}, Box: all}
	win := cudamem.Buffer{Ptr: gputest.Alloc(t, ctx, 4*6), N: 4 * 6}
	if err := mem.Upload(win, make([]byte, 24)); err != nil {
		t.Fatal(err)
	}
	if err := mem.BlockAmax(g, cudamem.FP8Window{Blocks: g.All(), Values: win}, reg); err != nil {
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
	if err := cudamem.FirstNonFinite(mem, g, reg); !errors.As(err, &nf) || nf.Flat != 150*200+170 {
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

// TestGPUFusedQuantizeMemory: Memory.FusedQuantize of a whole tensor gives
// fp8.Quantize's bytes and scales, a NaN or infinity a non-finite scale of
// its block, and a box that cuts a block is refused.
func TestGPUFusedQuantizeMemory(t *testing.T) {
	ctx := gputest.Context(t)
	gputest.SkipIfNotAvailable(t, nvrtc.Load(), nvrtc.ErrNotAvailable)
	mem := newMemory(t, ctx)
	shape := []int64{300, 200}
	g, _ := fp8.NewGrid(shape, fp8.Block)
	host := make([]byte, 2*300*200)
	for i := range 300 * 200 {
		binary.LittleEndian.PutUint16(host[2*i:], uint16(0x3F80+i%97)) // 1.0 and up
	}
	want, err := fp8.Quantize(dtype.BF16, shape, fp8.Block, host)
	if err != nil {
		t.Fatal(err)
	}
	src := cudamem.Buffer{Ptr: gputest.Alloc(t, ctx, len(host)), N: int64(len(host))}
	win := cudamem.Buffer{Ptr: gputest.Alloc(t, ctx, 4*6), N: 4 * 6}
	dst := cudamem.Buffer{Ptr: gputest.Alloc(t, ctx, 300*200), N: 300 * 200}
	all := placement.Box{Lo: []int64{0, 0}, Hi: shape}
	run := func() ([]byte, fp8.Window) {
		t.Helper()
		if err := mem.Upload(src, host); err != nil {
			t.Fatal(err)
		}
		reg := cudamem.FP8Region{DType: dtype.BF16, Src: src, At: strided.Desc{Run: int64(len(host))}, Box: all}
		if err := mem.FusedQuantize(g, dst, 0, reg, cudamem.FP8Window{Blocks: g.All(), Values: win}); err != nil {
			t.Fatal(err)
		}
		out, sc := make([]byte, 300*200), make([]byte, 24)
		if err := mem.Download(out, dst); err != nil {
			t.Fatal(err)
		}
		if err := mem.Download(sc, win); err != nil {
			t.Fatal(err)
		}
		return out, fp8.Window{Blocks: g.All(), Values: decode(sc)}
	}
	out, w := run()
	if !bytes.Equal(out, want.Data) {
		t.Error("FusedQuantize's bytes differ from fp8.Quantize's")
	}
	for i, s := range w.Values {
		if math.Float32bits(s) != math.Float32bits(want.Scales[i]) {
			t.Errorf("block %d: scale %v, fp8 says %v", i, s, want.Scales[i])
		}
	}
	binary.LittleEndian.PutUint16(host[2*(150*200+170):], 0x7FC0) // NaN in block (1, 1)
	binary.LittleEndian.PutUint16(host[2*(290*200+3):], 0xFF80)   // -Inf in block (2, 0)
	_, w = run()
	if !math.IsNaN(float64(w.Values[3])) || !math.IsInf(float64(w.Values[4]), 1) || w.Values[0] != want.Scales[0] {
		t.Errorf("scales %v: want NaN in block (1, 1) and +Inf in block (2, 0)", w.Values)
	}
	cut := placement.Box{Lo: []int64{0, 0}, Hi: []int64{100, 200}}
	reg := cudamem.FP8Region{DType: dtype.BF16, Src: src, At: strided.Desc{Run: 2 * 100 * 200}, Box: cut}
	if err := mem.FusedQuantize(g, dst, 0, reg, cudamem.FP8Window{Blocks: g.All(), Values: win}); err == nil {
		t.Error("a box that cuts blocks was accepted")
	}
}
