package cuda

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"slices"
	"testing"
	"unsafe"

	"github.com/m2n-dev/m2n/cuda/kernels"
	"github.com/m2n-dev/m2n/strided"
)

func TestNormalize(t *testing.T) {
	cases := []struct {
		d    strided.Desc
		run  uint64
		dims []dim
	}{
		{strided.Desc{Run: 8}, 8, nil},
		// Whole rows of a 4x8 matrix: one run.
		{strided.Desc{Run: 8, Count: []int64{4}, Stride: []int64{8}}, 32, nil},
		// A 2x3x4 box of a 5x3x4 tensor: the inner two merge into the run.
		{strided.Desc{Run: 4, Count: []int64{2, 3}, Stride: []int64{12, 4}}, 24, nil},
		// Pitched rows stay; a count-1 dimension disappears.
		{strided.Desc{Run: 4, Count: []int64{1, 6}, Stride: []int64{999, 8}}, 4, []dim{{6, 8}}},
		// Two outer dims that are contiguous with each other merge.
		{strided.Desc{Run: 4, Count: []int64{2, 3}, Stride: []int64{24, 8}}, 4, []dim{{6, 8}}},
		{strided.Desc{Run: 4, Count: []int64{2, 3}, Stride: []int64{100, 8}}, 4, []dim{{2, 100}, {3, 8}}},
	}
	for _, c := range cases {
		run, dims := normalize(c.d)
		if run != c.run || !slices.Equal(dims, c.dims) {
			t.Errorf("normalize(%+v) = %d, %v; want %d, %v", c.d, run, dims, c.run, c.dims)
		}
	}
}

func TestPlanBenchShapes(t *testing.T) {
	// The benchmark's shapes: rows of 256 B, 4 KiB, 64 KiB at twice their
	// width apart, 1 GiB in all, from 256-byte aligned buffers.
	for _, c := range []struct {
		row                      int64
		team, chunks, chunkElems uint64
		grid                     int // with 792 resident blocks
	}{
		{256, 16, 1, 16, 792},
		{4096, 256, 1, 256, 792},
		{65536, 256, 4, 1024, 65536},
	} {
		rows := int64(1<<30) / c.row
		desc := strided.Desc{Run: c.row, Count: []int64{rows}, Stride: []int64{2 * c.row}}
		p, err := planCopy(1<<40, strided.Desc{Run: desc.Bytes()}, 1<<41, desc)
		if err != nil {
			t.Fatal(err)
		}
		if p.width != 16 || uint64(1)<<p.teamShift != c.team || p.chunksPerRow != c.chunks ||
			p.chunkElems != c.chunkElems || p.rows != uint64(rows) ||
			len(p.src.count) != 1 || len(p.dst.count) != 1 || p.grid(792) != c.grid {
			t.Errorf("row %d: plan %+v", c.row, p)
		}
	}
}

func TestPlanWidth(t *testing.T) {
	for _, c := range []struct {
		dst, src DevicePtr
		d        strided.Desc
		width    int
	}{
		{256, 512, strided.Desc{Run: 32, Count: []int64{4}, Stride: []int64{64}}, 16},
		{256, 512, strided.Desc{Offset: 8, Run: 32, Count: []int64{4}, Stride: []int64{64}}, 8},
		{256, 512, strided.Desc{Run: 32, Count: []int64{4}, Stride: []int64{36}}, 4},
		{258, 512, strided.Desc{Run: 32, Count: []int64{4}, Stride: []int64{64}}, 2},
		{256, 512, strided.Desc{Run: 33, Count: []int64{4}, Stride: []int64{64}}, 1},
	} {
		p, err := planCopy(c.dst, strided.Desc{Run: c.d.Bytes()}, c.src, c.d)
		if err != nil {
			t.Fatal(err)
		}
		if p.width != c.width {
			t.Errorf("%+v: width %d, want %d", c, p.width, c.width)
		}
	}
}

func TestPlanErrors(t *testing.T) {
	d := strided.Desc{Run: 4, Count: []int64{3}, Stride: []int64{8}}
	if _, err := planCopy(0, strided.Desc{Run: 11}, 0, d); !errors.Is(err, strided.ErrInvalid) {
		t.Errorf("size mismatch: got %v", err)
	}
	overlap := strided.Desc{Run: 4, Count: []int64{3}, Stride: []int64{2}}
	if _, err := planCopy(0, overlap, 0, strided.Desc{Run: 12}); !errors.Is(err, strided.ErrInvalid) {
		t.Errorf("overlapping destination: got %v", err)
	}
	if _, err := planCopy(0, strided.Desc{Run: 12}, 0, overlap); err != nil {
		t.Errorf("overlapping source is fine: got %v", err)
	}
	p, err := planCopy(0, strided.Desc{Run: 0}, 0, strided.Desc{Run: 4, Count: []int64{0}, Stride: []int64{4}})
	if err != nil || p.items != 0 {
		t.Errorf("empty: plan %+v, %v", p, err)
	}
}

// TestParamsLayout checks the marshalled parameter block against the layout
// in kernels/params.h, field by field.
func TestParamsLayout(t *testing.T) {
	p := copyPlan{
		width: 4,
		src:   planSide{base: 0x1000, count: []uint64{2, 3}, stride: []uint64{40, 8}},
		dst:   planSide{base: 0x2000, count: []uint64{6}, stride: []uint64{4}},
		rows:  6, runElems: 1, chunkElems: 1, chunksPerRow: 1, items: 6, teamShift: 0,
	}
	b := p.paramBytes()
	if len(b) != kernels.ParamsSize || kernels.ParamsSize != 2*(2+2*kernelDims)*8+6*8 {
		t.Fatalf("parameter block is %d bytes, emulator wants %d", len(b), kernels.ParamsSize)
	}
	u := func(off int) uint64 { return binary.LittleEndian.Uint64(b[off:]) }
	side := (2 + 2*kernelDims) * 8
	want := map[int]uint64{
		0: 0x1000, 8: 2, 16: 2, 24: 3, 16 + 8*kernelDims: 40, 24 + 8*kernelDims: 8,
		side: 0x2000, side + 8: 1, side + 16: 6, side + 16 + 8*kernelDims: 4,
		2 * side: 6, 2*side + 8: 1, 2*side + 16: 1, 2*side + 24: 1, 2*side + 32: 6, 2*side + 40: 0,
	}
	for off, v := range want {
		if got := u(off); got != v {
			t.Errorf("byte %d: %d, want %d", off, got, v)
		}
	}
}

// emuCopy runs a plan through the kernel source compiled for the CPU on at
// most maxBlocks blocks: the grid a launch uses with enough of them, one or
// a few to make the grid-stride loop wrap.
func emuCopy(t *testing.T, p copyPlan, maxBlocks int) {
	t.Helper()
	if p.items == 0 {
		return
	}
	grid := clampGrid(p.blocksNeeded(), maxBlocks)
	if err := kernels.Emulate(p.width, p.paramBytes(), grid, blockThreads); err != nil {
		t.Fatal(err)
	}
}

func addr(b []byte) DevicePtr { return DevicePtr(uintptr(unsafe.Pointer(&b[0]))) }

// TestKernelsOnCPU checks Pack, Unpack and StridedCopy plans, run by the real
// kernel source on the CPU, against the host oracle for random descriptors.
func TestKernelsOnCPU(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	n := 400
	if testing.Short() {
		n = 100
	}
	widthsSeen := map[int]int{}
	for i := range n {
		sd, sLen := RandomBox(r)
		total := sd.Bytes()
		dd, dLen := RandomDisjoint(r, total)
		if r.IntN(3) == 0 {
			// Same box shape on the other side, often the common case.
			dd, dLen = RandomBox(r)
			if dd.Bytes() != total || dd.CheckDisjoint() != nil {
				dd, dLen = RandomDisjoint(r, total)
			}
		}
		src, freeSrc := kernels.Alloc(int(sLen) + 1)
		dst, freeDst := kernels.Alloc(int(max(dLen, total)) + 1)
		for j := range src {
			src[j] = byte(r.Uint32())
		}
		for j := range dst {
			dst[j] = byte(r.Uint32())
		}
		check := func(op string, p copyPlan, err error, oracle func(want []byte) error) {
			t.Helper()
			if err != nil {
				t.Fatalf("case %d %s: %v", i, op, err)
			}
			if p.items > 0 {
				widthsSeen[p.width]++
			}
			want := slices.Clone(dst)
			if err := oracle(want); err != nil {
				t.Fatalf("case %d %s: oracle: %v", i, op, err)
			}
			emuCopy(t, p, []int{maxGridBlocks, 3, 1}[i%3])
			if !bytes.Equal(dst, want) {
				t.Fatalf("case %d %s: src %+v dst %+v: kernel and oracle differ (plan %+v)", i, op, sd, dd, p)
			}
		}
		p, err := planCopy(addr(dst), strided.Desc{Run: total}, addr(src), sd)
		check("Pack", p, err, func(want []byte) error { return hostPack(want, src, sd) })
		p, err = planCopy(addr(dst), dd, addr(src), strided.Desc{Run: total})
		check("Unpack", p, err, func(want []byte) error { return hostUnpack(want, dd, src) })
		p, err = planCopy(addr(dst), dd, addr(src), sd)
		check("StridedCopy", p, err, func(want []byte) error { return hostCopy(want, dd, src, sd) })
		freeSrc()
		freeDst()
	}
	for _, w := range widths {
		if widthsSeen[w] == 0 && !testing.Short() {
			t.Errorf("no case used the %d-byte kernel: %v", w, widthsSeen)
		}
	}
	t.Logf("kernel widths used: %v", widthsSeen)
}

func TestCheckDescKernelDims(t *testing.T) {
	if err := checkDesc(strided.Desc{Run: 4, Count: make([]int64, maxDims), Stride: make([]int64, maxDims)}); err != nil {
		t.Errorf("%d outer dims: %v", maxDims, err)
	}
	if err := checkDesc(strided.Desc{Run: 4, Count: make([]int64, maxDims+1), Stride: make([]int64, maxDims+1)}); !errors.Is(err, strided.ErrInvalid) {
		t.Errorf("%d outer dims: got %v, want strided.ErrInvalid", maxDims+1, err)
	}
}
