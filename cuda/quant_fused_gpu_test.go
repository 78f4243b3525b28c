package cuda_test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/m2n-dev/m2n/cuda"
	"github.com/m2n-dev/m2n/fp8"
	"github.com/m2n-dev/m2n/internal/testutil/gputest"
	"github.com/m2n-dev/m2n/placement"
	"github.com/m2n-dev/m2n/strided"
)

// TestGPUFusedQuantize runs FusedQuantize on the GPU over the cases of
// TestFusedKernelsOnCPU (more of them) and compares the scales and E4M3
// bytes with package fp8 bit for bit; window blocks outside the box and
// destination bytes outside its range stay untouched. It skips where there
// is no GPU.
func TestGPUFusedQuantize(t *testing.T) {
	g := newQuantGPU(t)
	cases, err := cuda.FusedCases(rand.New(rand.NewPCG(24, 4)), 1500, "../testdata/fp8")
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range cases {
		// a third with grids of 1 and 3 blocks, which loop over several
		// rounds of items (and of the shared amax slots)
		restore := cuda.SetFusedGridCap([]int{1 << 22, 3, 1}[i%3])
		err := g.fused(c)
		restore()
		if err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("%d cases match package fp8 bit for bit on the GPU", len(cases))
}

// TestGPUFusedEveryPattern quantizes every finite bfloat16 pattern under 32
// block scales, and 2^24 random float32 patterns, through the fused kernels
// (on Hopper the hardware's cvt.rn.satfinite.e4m3x2 behind the corrected
// reciprocal multiply) in every mode, compared with fp8.Quantize of the
// whole tensor bit for bit.
func TestGPUFusedEveryPattern(t *testing.T) {
	g := newQuantGPU(t)
	bf, f := cuda.FusedPatterns(rand.New(rand.NewPCG(24, 5)), 4096)
	for _, mode := range []fp8.Mode{fp8.Block, fp8.Row, fp8.Tensor} {
		for _, in := range []cuda.FusedPattern{bf, f} {
			q, err := fp8.Quantize(in.DType, in.Shape, mode, in.Data)
			if err != nil {
				t.Fatal(err)
			}
			all := placement.Box{Lo: []int64{0, 0}, Hi: in.Shape}
			c := cuda.QuantCase{Name: fmt.Sprintf("patterns/%v", mode), Grid: q.Grid, DType: in.DType, Src: in.Data,
				At: strided.Desc{Run: int64(len(in.Data))}, Box: all, Blocks: q.Grid.All(), Scales: q.Scales, Want: q.Data}
			if err := g.fused(c); err != nil {
				t.Fatal(err)
			}
		}
	}
	t.Logf("%d bfloat16 patterns under 32 block scales and %d float32 patterns match package fp8 in every mode", 1<<16, len(f.Data)/4)
}

// fused runs one case through FusedQuantize and compares.
func (g *quantGPU) fused(c cuda.QuantCase) error {
	t := g.t
	buf := func(n int) cuda.DevicePtr { return gputest.Alloc(t, g.ctx, max(n, 1)) }
	src := buf(len(c.Src))
	g.upload(src, c.Src)
	poisonWin := bytes.Repeat([]byte{0xA5}, 4*len(c.Scales))
	win := buf(len(poisonWin))
	g.upload(win, poisonWin)
	dst := buf(c.DstOff + len(c.Want) + 8)
	poison := bytes.Repeat([]byte{0xA5}, c.DstOff+len(c.Want)+8)
	g.upload(dst, poison)
	reg := cuda.FP8Region{DType: c.DType, Src: src, At: strided.Desc(c.At), Box: c.Box}
	if err := cuda.FusedQuantize(g.s, c.Grid, dst+cuda.DevicePtr(c.DstOff), reg, cuda.FP8Window{Blocks: c.Blocks, Values: win}); err != nil {
		return fmt.Errorf("%v: %w", c, err)
	}
	out := make([]byte, len(poison))
	g.download(out, dst)
	if !bytes.Equal(out[:c.DstOff], poison[:c.DstOff]) || !bytes.Equal(out[c.DstOff+len(c.Want):], poison[:8]) {
		return fmt.Errorf("%v: FusedQuantize wrote outside its destination", c)
	}
	for i, b := range out[c.DstOff : c.DstOff+len(c.Want)] {
		if b != c.Want[i] {
			return fmt.Errorf("%v: byte %d is %#02x, fp8 says %#02x", c, i, b, c.Want[i])
		}
	}
	got := make([]byte, len(poisonWin))
	g.download(got, win)
	touched, err := c.Grid.Blocks(c.Box)
	if err != nil {
		return err
	}
	w := fp8.Window{Blocks: c.Blocks, Values: c.Scales}
	for k, s := range c.Scales {
		want := uint32(0xA5A5A5A5)
		if coord := windowCoord(w, k); inside(coord, touched) {
			want = math.Float32bits(s)
		}
		if v := binary.LittleEndian.Uint32(got[4*k:]); v != want {
			return fmt.Errorf("%v: window value %d is %#08x, want %#08x", c, k, v, want)
		}
	}
	return nil
}

func windowCoord(w fp8.Window, k int) []int64 {
	nd := len(w.Blocks.Lo)
	c := make([]int64, nd)
	for d := nd - 1; d >= 0; d-- {
		n := int(w.Blocks.Hi[d] - w.Blocks.Lo[d])
		c[d] = w.Blocks.Lo[d] + int64(k%n)
		k /= n
	}
	return c
}

func inside(c []int64, b placement.Box) bool {
	for d := range c {
		if c[d] < b.Lo[d] || c[d] >= b.Hi[d] {
			return false
		}
	}
	return true
}
