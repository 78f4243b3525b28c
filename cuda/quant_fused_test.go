package cuda

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/m2n-dev/m2n/cuda/kernels"
	"github.com/m2n-dev/m2n/dtype"
	"github.com/m2n-dev/m2n/fp8"
	"github.com/m2n-dev/m2n/placement"
	"github.com/m2n-dev/m2n/strided"
)

// TestFusedKernelsOnCPU runs the fused amax-quantize-pack kernels' source,
// compiled for the CPU, on every FusedCase and compares the scales they
// write and the E4M3 bytes with package fp8 (fp8.Quantize of the whole
// tensor), bit for bit; window blocks outside the box stay untouched.
func TestFusedKernelsOnCPU(t *testing.T) {
	n := 500
	if testing.Short() {
		n = 100
	}
	cases, err := FusedCases(rand.New(rand.NewPCG(24, 2)), n, "../testdata/fp8")
	if err != nil {
		t.Fatal(err)
	}
	used := map[string]int{}
	for i, c := range cases {
		restore := SetFusedGridCap([]int{maxGridBlocks, 3, 1}[i%3]) // several rounds per block
		for _, mode := range []uint64{divMidpoint, divBracket, divFMA} {
			if err := checkFused(c, maxGridBlocks, mode, used); err != nil {
				restore()
				t.Fatalf("division mode %d: %v", mode, err)
			}
		}
		restore()
	}
	for _, name := range quantKernels() {
		if strings.HasPrefix(name, "m2n_fquant_") && used[name] == 0 && !testing.Short() {
			t.Errorf("no case used %s: %v", name, used)
		}
	}
	small, large := 0, 0
	for k := range 9 {
		if 1<<k <= 32 {
			small += used[fmt.Sprintf("team of %d", 1<<k)]
		} else {
			large += used[fmt.Sprintf("team of %d", 1<<k)]
		}
	}
	if !testing.Short() && (small == 0 || large == 0) {
		t.Errorf("teams of a warp or less in %d cases, larger teams in %d: want both", small, large)
	}
	t.Logf("%d cases match package fp8 bit for bit; kernels and teams used: %v", len(cases), used)
}

// checkFused runs the fused kernel of a case through the emulator on at
// most maxBlocks blocks and compares its window and bytes with the case's.
func checkFused(c QuantCase, maxBlocks int, mode uint64, used map[string]int) error {
	src, freeSrc := kernels.Alloc(len(c.Src))
	defer freeSrc()
	copy(src, c.Src)
	win, freeWin := kernels.Alloc(4 * len(c.Scales))
	defer freeWin()
	const poison = 0xA5A5A5A5
	for i := range c.Scales {
		binary.LittleEndian.PutUint32(win[4*i:], poison)
	}
	dst, freeDst := kernels.Alloc(c.DstOff + len(c.Want) + 8)
	defer freeDst()
	for i := range dst {
		dst[i] = 0xA5
	}
	p, err := planQuant(quantRequest{kind: quantFused, grid: c.Grid, dtype: c.DType, src: addrOf(src), at: c.At, box: c.Box,
		win: addrOf(win), blocks: c.Blocks, dst: addrOf(dst) + DevicePtr(c.DstOff), divMode: mode})
	if err != nil {
		return fmt.Errorf("%v: %w", c, err)
	}
	if err := emulate(p, maxBlocks, used); err != nil {
		return fmt.Errorf("%v: %w", c, err)
	}
	if p.items > 0 {
		used[fmt.Sprintf("team of %d", 1<<p.teamShift)]++
	}
	if !bytes.Equal(dst[:c.DstOff], bytes.Repeat([]byte{0xA5}, c.DstOff)) ||
		!bytes.Equal(dst[c.DstOff+len(c.Want):], bytes.Repeat([]byte{0xA5}, 8)) {
		return fmt.Errorf("%v: %w", c, errWroteOutside)
	}
	if i := firstDiff(dst[c.DstOff:c.DstOff+len(c.Want)], c.Want); i >= 0 {
		return fmt.Errorf("%v (%s): byte %d is %#02x, fp8 says %#02x", c, p.name, i, dst[c.DstOff+i], c.Want[i])
	}
	touched, err := c.Grid.Blocks(c.Box)
	if err != nil {
		return err
	}
	w := fp8.Window{Blocks: c.Blocks, Values: c.Scales}
	for k := range c.Scales {
		got := binary.LittleEndian.Uint32(win[4*k:])
		want := uint32(poison)
		if inBlocks(touched, w, k) {
			want = math.Float32bits(c.Scales[k])
		}
		if got != want {
			return fmt.Errorf("%v (%s): window value %d is %#08x, want %#08x", c, p.name, k, got, want)
		}
	}
	return nil
}

// inBlocks reports whether window position k is a block of touched.
func inBlocks(touched placement.Box, w fp8.Window, k int) bool {
	nd := len(w.Blocks.Lo)
	for d := nd - 1; d >= 0; d-- {
		n := int(w.Blocks.Hi[d] - w.Blocks.Lo[d])
		b := w.Blocks.Lo[d] + int64(k%n)
		k /= n
		if b < touched.Lo[d] || b >= touched.Hi[d] {
			return false
		}
	}
	return true
}

// TestFusedPlan checks the fused launch of the common case and that boxes
// cutting a block are refused.
func TestFusedPlan(t *testing.T) {
	g, err := fp8.NewGrid([]int64{512, 1024}, fp8.Block)
	if err != nil {
		t.Fatal(err)
	}
	box := placement.Box{Lo: []int64{128, 256}, Hi: []int64{512, 1024}}
	at := strided.Describe(box, box, 2)
	blocks, _ := g.Blocks(box)
	p, err := planQuant(quantRequest{kind: quantFused, grid: g, dtype: dtype.BF16, src: 1 << 20, at: at, box: box, win: 1 << 30, blocks: blocks, dst: 1 << 40})
	if err != nil {
		t.Fatal(err)
	}
	// 3 block rows x 6 block columns, a block per item and thread block
	if p.name != "m2n_fquant_bf16_8" || p.items != 18 || p.groups != 3 || p.chunks != 6 || p.grid(1) != 18 {
		t.Errorf("fused plan %+v", p)
	}
	if p.teamShift != 8 {
		t.Errorf("a 128x128 bf16 block takes a team of %d threads, want the whole block of 256", 1<<p.teamShift)
	}
	// Row scaling of 256 B rows: 16 vectors a row, teams of 2 lanes of
	// 8 vectors each, 128 rows per thread block.
	gr, err := fp8.NewGrid([]int64{512, 128}, fp8.Row)
	if err != nil {
		t.Fatal(err)
	}
	all := placement.Box{Lo: []int64{0, 0}, Hi: []int64{512, 128}}
	p, err = planQuant(quantRequest{kind: quantFused, grid: gr, dtype: dtype.BF16, src: 1 << 20, at: strided.Describe(all, all, 2), box: all, win: 1 << 30, blocks: gr.All(), dst: 1 << 40})
	if err != nil {
		t.Fatal(err)
	}
	if p.items != 512 || p.teamShift != 1 || p.grid(1) != 4 {
		t.Errorf("row-scaled fused plan %+v", p)
	}
	// 128x128 bf16 blocks of 16-byte vectors fit the registers exactly
	if 128*128/8 != blockThreads*fusedRegs {
		t.Errorf("a 128x128 bf16 block is %d vectors, the registers hold %d", 128*128/8, blockThreads*fusedRegs)
	}
	cut := placement.Box{Lo: []int64{100, 256}, Hi: []int64{512, 1024}}
	if _, err := planQuant(quantRequest{kind: quantFused, grid: g, dtype: dtype.BF16, src: 1 << 20, at: strided.Describe(cut, cut, 2), box: cut, win: 1 << 30, blocks: g.All(), dst: 1 << 40}); err == nil {
		t.Error("a box that cuts blocks was accepted")
	}
	names, sources := kernels.StridedHeaders()
	for i, n := range names {
		if n == "quant.h" && !strings.Contains(sources[i], fmt.Sprintf("#define M2N_FREGS %d\n", fusedRegs)) {
			t.Errorf("quant.h does not keep %d vectors per thread (fusedRegs)", fusedRegs)
		}
	}
}

// TestFusedPatternsOnCPU quantizes every finite bfloat16 pattern under 32
// block scales (and random float32 patterns) through the fused kernels in
// every mode, compared with fp8.Quantize of the whole tensor: bytes and
// scales bit for bit. TestGPUFusedEveryPattern runs it on a GPU, with
// more float32 patterns.
func TestFusedPatternsOnCPU(t *testing.T) {
	rows := 64
	if testing.Short() {
		rows = 8
	}
	bf, f := FusedPatterns(rand.New(rand.NewPCG(24, 3)), rows)
	for _, mode := range []fp8.Mode{fp8.Block, fp8.Row, fp8.Tensor} {
		for _, in := range []FusedPattern{bf, f} {
			c, err := makeQuantCase(rand.New(rand.NewPCG(1, 2)), fmt.Sprintf("patterns/%v", mode), in.DType, in.Shape, mode, in.Data,
				placement.Box{Lo: []int64{0, 0}, Hi: in.Shape}, true)
			if err != nil {
				t.Fatal(err)
			}
			for _, div := range []uint64{divMidpoint, divBracket, divFMA} {
				if err := checkFused(c, 1<<20, div, map[string]int{}); err != nil {
					t.Fatalf("division mode %d: %v", div, err)
				}
			}
		}
	}
}

// TestFusedNonFiniteOnCPU: a NaN or infinity makes its block's scale
// non-finite (the host refuses the step), and only its block's.
func TestFusedNonFiniteOnCPU(t *testing.T) {
	shape := []int64{300, 200}
	g, err := fp8.NewGrid(shape, fp8.Block)
	if err != nil {
		t.Fatal(err)
	}
	src, free := kernels.Alloc(2 * 300 * 200)
	defer free()
	for i := range 300 * 200 {
		binary.LittleEndian.PutUint16(src[2*i:], 0x3F80) // 1.0
	}
	binary.LittleEndian.PutUint16(src[2*(150*200+170):], 0x7FC0) // NaN in block (1, 1)
	binary.LittleEndian.PutUint16(src[2*(290*200+3):], 0xFF80)   // -Inf in block (2, 0)
	win, freeWin := kernels.Alloc(4 * 6)
	defer freeWin()
	dst, freeDst := kernels.Alloc(300 * 200)
	defer freeDst()
	all := placement.Box{Lo: []int64{0, 0}, Hi: shape}
	p, err := planQuant(quantRequest{kind: quantFused, grid: g, dtype: dtype.BF16, src: addrOf(src), at: strided.Describe(all, all, 2),
		box: all, win: addrOf(win), blocks: g.All(), dst: addrOf(dst), divMode: divFMA})
	if err != nil {
		t.Fatal(err)
	}
	if err := emulate(p, 4, map[string]int{}); err != nil {
		t.Fatal(err)
	}
	for k := range 6 {
		s := math.Float32frombits(binary.LittleEndian.Uint32(win[4*k:]))
		switch k {
		case 3:
			if !math.IsNaN(float64(s)) {
				t.Errorf("block 3 (a NaN): scale %v", s)
			}
		case 4:
			if !math.IsInf(float64(s), 1) {
				t.Errorf("block 4 (an infinity): scale %v", s)
			}
		default:
			if s != fp8.ScaleOf(1) {
				t.Errorf("block %d: scale %v, want %v", k, s, fp8.ScaleOf(1))
			}
		}
	}
}
