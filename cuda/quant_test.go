package cuda

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/m2n-dev/m2n/cuda/kernels"
	"github.com/m2n-dev/m2n/dtype"
	"github.com/m2n-dev/m2n/fp8"
	"github.com/m2n-dev/m2n/placement"
	"github.com/m2n-dev/m2n/strided"
)

// TestQuantKernelsOnCPU runs the FP8 kernels' source, compiled for the CPU,
// on every QuantCase (the torch conformance cases whole and cut, and random
// boxes of random tensors) and compares the partial amaxes and the
// quantized bytes with package fp8, bit for bit. TestGPUQuantize runs the
// same cases on a GPU.
func TestQuantKernelsOnCPU(t *testing.T) {
	n := 120
	if testing.Short() {
		n = 30
	}
	cases, err := QuantCases(rand.New(rand.NewPCG(11, 12)), n, "../testdata/fp8")
	if err != nil {
		t.Fatal(err)
	}
	used := map[string]int{}
	for i, c := range cases {
		grid := []int{maxGridBlocks, 3, 1}[i%3]
		got, err := emuQuant(c, quantAmax, grid, used)
		if err != nil {
			t.Fatalf("%v: amax: %v", c, err)
		}
		for j, v := range c.Amax {
			if math.Float32bits(got[j]) != math.Float32bits(v) {
				t.Fatalf("%v: amax of window block %d is %v, fp8 says %v", c, j, got[j], v)
			}
		}
		for _, mode := range []uint64{divMidpoint, divFMA} {
			out, err := emuPackMode(c, grid, mode, used)
			if err != nil {
				t.Fatalf("%v: quantize (division mode %d): %v", c, mode, err)
			}
			if i := firstDiff(out, c.Want); i >= 0 {
				t.Fatalf("%v (division mode %d): byte %d is %#02x, fp8 says %#02x", c, mode, i, out[i], c.Want[i])
			}
		}
	}
	for _, name := range quantKernels() {
		if used[name] == 0 && !testing.Short() && !strings.HasPrefix(name, "m2n_fquant_") { // TestFusedKernelsOnCPU's
			t.Errorf("no case used %s: %v", name, used)
		}
	}
	t.Logf("%d cases match package fp8 bit for bit; kernels used: %v", len(cases), used)
}

func firstDiff(a, b []byte) int {
	if len(a) != len(b) {
		return min(len(a), len(b))
	}
	for i := range a {
		if a[i] != b[i] {
			return i
		}
	}
	return -1
}

// emuQuant runs the amax kernel of a case through the emulator on at most
// maxBlocks blocks and returns the window.
func emuQuant(c QuantCase, kind quantKind, maxBlocks int, used map[string]int) ([]float32, error) {
	src, freeSrc := kernels.Alloc(len(c.Src))
	defer freeSrc()
	copy(src, c.Src)
	win, freeWin := kernels.Alloc(4 * len(c.Amax))
	defer freeWin()
	p, err := planQuant(quantRequest{kind: kind, grid: c.Grid, dtype: c.DType, src: addrOf(src), at: c.At, box: c.Box, win: addrOf(win), blocks: c.Blocks})
	if err != nil {
		return nil, err
	}
	if err := emulate(p, maxBlocks, used); err != nil {
		return nil, err
	}
	out := make([]float32, len(c.Amax))
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(win[4*i:]))
	}
	return out, nil
}

// emuPack runs the quantize kernel of a case through the emulator, its
// quotients made exact the default way, and returns the bytes it wrote
// (checking it wrote nothing else).
func emuPack(c QuantCase, maxBlocks int, used map[string]int) ([]byte, error) {
	return emuPackMode(c, maxBlocks, divMode(quantPack), used)
}

// emuPackMode is emuPack with the quotients made exact by division mode
// mode (quantPlan.divMode).
func emuPackMode(c QuantCase, maxBlocks int, mode uint64, used map[string]int) ([]byte, error) {
	src, freeSrc := kernels.Alloc(len(c.Src))
	defer freeSrc()
	copy(src, c.Src)
	win, freeWin := kernels.Alloc(4 * len(c.Scales))
	defer freeWin()
	for i, s := range c.Scales {
		binary.LittleEndian.PutUint32(win[4*i:], math.Float32bits(s))
	}
	dst, freeDst := kernels.Alloc(c.DstOff + len(c.Want) + 8)
	defer freeDst()
	for i := range dst {
		dst[i] = 0xA5
	}
	p, err := planQuant(quantRequest{kind: quantPack, grid: c.Grid, dtype: c.DType, src: addrOf(src), at: c.At, box: c.Box,
		win: addrOf(win), blocks: c.Blocks, dst: addrOf(dst) + DevicePtr(c.DstOff), divMode: mode})
	if err != nil {
		return nil, err
	}
	if err := emulate(p, maxBlocks, used); err != nil {
		return nil, err
	}
	if !bytes.Equal(dst[:c.DstOff], bytes.Repeat([]byte{0xA5}, c.DstOff)) ||
		!bytes.Equal(dst[c.DstOff+len(c.Want):], bytes.Repeat([]byte{0xA5}, 8)) {
		return nil, errWroteOutside
	}
	return append([]byte(nil), dst[c.DstOff:c.DstOff+len(c.Want)]...), nil
}

var errWroteOutside = &kernelError{"the kernel wrote outside its destination"}

type kernelError struct{ s string }

func (e *kernelError) Error() string { return e.s }

func emulate(p quantPlan, maxBlocks int, used map[string]int) error {
	if p.items == 0 {
		return nil
	}
	used[p.name]++
	return kernels.EmulateQuant(p.name, p.paramBytes(), p.grid(maxBlocks), blockThreads)
}

func addrOf(b []byte) DevicePtr {
	if len(b) == 0 {
		return 0
	}
	return addr(b)
}

// TestQuantPlan checks the launch geometry of the common cases.
func TestQuantPlan(t *testing.T) {
	r := rand.New(rand.NewPCG(13, 14))
	cases, err := QuantCases(r, 0, "../testdata/fp8")
	if err != nil {
		t.Fatal(err)
	}
	c := cases[0] // aligned_256x384/block, whole and dense
	p, err := planQuant(quantRequest{kind: quantPack, grid: c.Grid, dtype: c.DType, src: 1 << 20, at: c.At, box: c.Box, win: 1 << 30, blocks: c.Blocks, dst: 1 << 40})
	if err != nil {
		t.Fatal(err)
	}
	if p.name != "m2n_quant_bf16_8" || p.rowElems != 384 || p.colShift != 7 || p.chunks != 1 || p.items != 256 || p.teamShift != 4 {
		t.Errorf("quantize plan %+v", p)
	}
	p, err = planQuant(quantRequest{kind: quantAmax, grid: c.Grid, dtype: c.DType, src: 1 << 20, at: c.At, box: c.Box, win: 1 << 30, blocks: c.Blocks})
	if err != nil {
		t.Fatal(err)
	}
	// 256 rows in groups of 8, 3 pieces of 128 columns: 96 items of 16 lanes.
	if p.name != "m2n_amax_bf16_8" || p.group != 8 || p.groups != 32 || p.chunks != 3 || p.items != 96 || p.teamShift != 4 {
		t.Errorf("amax plan %+v", p)
	}
	// Runs that do not hold whole rows are refused.
	bad := strided.Desc{Run: 2, Count: []int64{256 * 384}, Stride: []int64{4}}
	if _, err := planQuant(quantRequest{kind: quantPack, grid: c.Grid, dtype: c.DType, src: 1 << 20, at: bad, box: c.Box, win: 1 << 30, blocks: c.Blocks, dst: 1 << 40}); err == nil {
		t.Error("runs shorter than a row accepted")
	}
}

// TestQuantAmaxNonFiniteOnCPU: a NaN or infinity lands in its block's amax
// as a non-finite float32, which the host then refuses.
func TestQuantAmaxNonFiniteOnCPU(t *testing.T) {
	r := rand.New(rand.NewPCG(15, 16))
	cases, err := QuantCases(r, 0, "../testdata/fp8")
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(cases, func(c QuantCase) bool { return c.Name == "edges_300x200/block#0" }) // whole
	if i < 0 {
		t.Fatal("no case edges_300x200/block#0")
	}
	c := cases[i]
	c.Src = append([]byte(nil), c.Src...)
	binary.LittleEndian.PutUint16(c.Src[2*(150*200+170):], 0x7FC0) // NaN in block (1, 1)
	binary.LittleEndian.PutUint16(c.Src[2*(290*200+3):], 0xFF80)   // -Inf in block (2, 0)
	got, err := emuQuant(c, quantAmax, 7, map[string]int{})
	if err != nil {
		t.Fatal(err)
	}
	if !math.IsNaN(float64(got[3])) || !math.IsInf(float64(got[4]), 1) {
		t.Errorf("%v: amaxes %v, want NaN in block 3 and +Inf in block 4", c, got)
	}
}

// TestQuantLoadsMatchTheKernels: the plan sizes teams for as many vectors
// per lane as the kernels keep in flight.
func TestQuantLoadsMatchTheKernels(t *testing.T) {
	names, sources := kernels.StridedHeaders()
	want := fmt.Sprintf("#define M2N_QLOADS %d\n", quantLoads)
	for i, n := range names {
		if n == "quant.h" {
			if !strings.Contains(sources[i], want) {
				t.Fatalf("quant.h does not say %q", want)
			}
			return
		}
	}
	t.Fatal("no quant.h among the kernels' headers")
}

// TestQuantizeEveryPatternOnCPU is TestGPUQuantizeEveryPattern's bf16 half
// through the emulator: every bfloat16 bit pattern (NaNs of both signs,
// infinities, subnormals, zeros) under the same six tensor scales, each
// byte against fp8.QuantizeValue. The emulated conversion keeps a NaN's
// sign as the GPU's may, so a kernel that skips the NaN fix-up fails here.
func TestQuantizeEveryPatternOnCPU(t *testing.T) {
	shape := []int64{256, 256}
	g, err := fp8.NewGrid(shape, fp8.Tensor)
	if err != nil {
		t.Fatal(err)
	}
	src := make([]byte, 2<<16)
	for i := range 1 << 16 {
		binary.LittleEndian.PutUint16(src[2*i:], uint16(i))
	}
	all := placement.Box{Lo: []int64{0, 0}, Hi: shape}
	blocks, err := g.Blocks(all)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []float32{1, 3, 0.7, 1e-3, 448 / 3.3895314e38, 2.5e-38} {
		c := QuantCase{Name: "every bf16", Grid: g, DType: dtype.BF16, Src: src, At: strided.Desc{Run: int64(len(src))},
			Box: all, Blocks: blocks, Scales: []float32{s}, Want: make([]byte, 1<<16)}
		got, err := emuPack(c, maxGridBlocks, map[string]int{})
		if err != nil {
			t.Fatal(err)
		}
		for i, b := range got {
			x := math.Float32frombits(uint32(i) << 16)
			if want := fp8.QuantizeValue(x, s); b != want {
				t.Fatalf("bf16 %#04x / %v: the kernel gives %#02x, fp8 %#02x", i, s, b, want)
			}
		}
	}
}
