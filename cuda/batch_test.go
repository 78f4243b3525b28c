package cuda

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/m2n-dev/m2n/cuda/kernels"
	"github.com/m2n-dev/m2n/strided"
)

// TestBatchOnCPU runs random batches (packs, unpacks, strided copies of
// random boxes, every element width, items of very different sizes) through
// the batched kernel's source on the CPU, on grids small enough that blocks
// wrap over the virtual blocks and large enough that they do not, and
// compares every byte with the host oracle applied copy by copy.
func TestBatchOnCPU(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	batches := 60
	if testing.Short() {
		batches = 15
	}
	items, widthsSeen := 0, map[int]int{}
	for bi := range batches {
		n := 1 + r.IntN(12)
		type side struct {
			d   strided.Desc
			off int64 // in its arena
			len int64
		}
		var srcs, dsts []side
		var srcLen, dstLen int64
		for range n {
			sd, sl := RandomBox(r)
			total := sd.Bytes()
			dd, dl := RandomDisjoint(r, total)
			switch r.IntN(4) {
			case 0:
				dd, dl = strided.Desc{Run: total}, total // a pack
			case 1:
				sd, sl = strided.Desc{Run: total}, total // an unpack
				dd, dl = RandomDisjoint(r, total)
			}
			srcs = append(srcs, side{sd, srcLen, sl})
			dsts = append(dsts, side{dd, dstLen, dl})
			srcLen += sl + int64(r.IntN(32))
			dstLen += dl + int64(r.IntN(32))
		}
		src, freeSrc := kernels.Alloc(int(srcLen) + 1)
		dst, freeDst := kernels.Alloc(int(dstLen) + 1)
		for i := range src {
			src[i] = byte(r.Uint32())
		}
		for i := range dst {
			dst[i] = byte(r.Uint32())
		}
		want := slices.Clone(dst)
		var copies []BatchCopy
		for i := range srcs {
			s, d := srcs[i], dsts[i]
			copies = append(copies, BatchCopy{Dst: addr(dst) + DevicePtr(d.off), DstDesc: d.d, Src: addr(src) + DevicePtr(s.off), SrcDesc: s.d})
			if err := hostCopy(want[d.off:d.off+d.len], d.d, src[s.off:s.off+s.len], s.d); err != nil {
				t.Fatalf("batch %d copy %d: oracle: %v", bi, i, err)
			}
		}
		b, err := planBatch(copies)
		if err != nil {
			t.Fatalf("batch %d: %v", bi, err)
		}
		for _, p := range b.plans {
			widthsSeen[p.width]++
		}
		ran, err := EmulateBatch(copies, []int{4, 264}[bi%2], []int{1, 3, maxGridBlocks}[bi%3])
		if err != nil {
			t.Fatal(err)
		}
		if ran != b.len() {
			t.Fatalf("batch %d: EmulateBatch ran %d items, the plan has %d", bi, ran, b.len())
		}
		items += ran
		if !bytes.Equal(dst, want) {
			t.Fatalf("batch %d of %d copies: kernel and oracle differ", bi, n)
		}
		freeSrc()
		freeDst()
	}
	t.Logf("%d batches, %d items, widths %v", batches, items, widthsSeen)
}

// TestBatchMerge: contiguous copies that continue one another on both sides
// become one item; a gap on either side, or a strided side, starts a new
// one; empty copies vanish.
func TestBatchMerge(t *testing.T) {
	src, freeSrc := kernels.Alloc(4096)
	defer freeSrc()
	dst, freeDst := kernels.Alloc(4096)
	defer freeDst()
	for i := range src {
		src[i] = byte(i * 7)
	}
	s, d := addr(src), addr(dst)
	copies := []BatchCopy{
		{Dst: d, DstDesc: strided.Desc{Run: 100}, Src: s, SrcDesc: strided.Desc{Run: 100}},
		{Dst: d + 100, DstDesc: strided.Desc{Run: 28}, Src: s, SrcDesc: strided.Desc{Offset: 100, Run: 28}},                                  // continues both
		{Dst: d, DstDesc: strided.Desc{Offset: 128, Run: 72}, Src: s + 128, SrcDesc: strided.Desc{Run: 72}},                                  // continues both
		{Dst: d + 200, DstDesc: strided.Desc{Run: 0}, Src: s, SrcDesc: strided.Desc{Run: 4, Count: []int64{0}, Stride: []int64{8}}},          // empty
		{Dst: d + 200, DstDesc: strided.Desc{Run: 56}, Src: s + 208, SrcDesc: strided.Desc{Run: 56}},                                         // a gap in the source
		{Dst: d + 256, DstDesc: strided.Desc{Run: 64}, Src: s + 264, SrcDesc: strided.Desc{Run: 32, Count: []int64{2}, Stride: []int64{32}}}, // one run after merging dims
		{Dst: d + 320, DstDesc: strided.Desc{Run: 64}, Src: s + 400, SrcDesc: strided.Desc{Run: 16, Count: []int64{4}, Stride: []int64{32}}}, // strided
		{Dst: d + 384, DstDesc: strided.Desc{Run: 16}, Src: s + 528, SrcDesc: strided.Desc{Run: 16}},                                         // after a strided copy: new
	}
	b, err := planBatch(copies)
	if err != nil {
		t.Fatal(err)
	}
	if b.len() != 4 || b.bytes != 100+28+72+56+64+64+16 {
		t.Fatalf("%d items of %d bytes, want 4 items of 400 bytes", b.len(), b.bytes)
	}
	want := make([]byte, 4096)
	for _, c := range copies {
		if err := hostCopy(want[c.Dst-d:], c.DstDesc, src[c.Src-s:], c.SrcDesc); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := EmulateBatch(copies, 8, maxGridBlocks); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(dst, want) {
		t.Fatal("merged batch and oracle differ")
	}
	if _, err := planBatch([]BatchCopy{copies[0], {Dst: d, DstDesc: strided.Desc{Run: 8}, Src: s, SrcDesc: strided.Desc{Run: 9}}}); !errors.Is(err, strided.ErrInvalid) {
		t.Errorf("a copy of 9 bytes into 8: %v", err)
	}
}
