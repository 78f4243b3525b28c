package cuda_test

import (
	"bytes"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/m2n-dev/m2n/cuda"
	"github.com/m2n-dev/m2n/internal/testutil/gputest"
	"github.com/m2n-dev/m2n/strided"
)

// gpuBatch is a random batch of copies between two device buffers and its
// expected result, computed with the host oracle.
type gpuBatch struct {
	copies   []cuda.BatchCopy
	src, dst []byte // host images; dst is the expected result
}

func randomBatch(r *rand.Rand, srcBase, dstBase cuda.DevicePtr, n int) gpuBatch {
	var b gpuBatch
	var srcLen, dstLen int64
	type part struct {
		sd, dd     strided.Desc
		soff, doff int64
		sl, dl     int64
	}
	var parts []part
	for range n {
		sd, sl := cuda.RandomBox(r)
		total := sd.Bytes()
		dd, dl := cuda.RandomDisjoint(r, total)
		switch r.IntN(4) {
		case 0:
			dd, dl = strided.Desc{Run: total}, total
		case 1:
			sd, sl = strided.Desc{Run: total}, total
		}
		parts = append(parts, part{sd, dd, srcLen, dstLen, sl, dl})
		srcLen += (sl + 31) &^ 15
		dstLen += (dl + 31) &^ 15
	}
	b.src = make([]byte, srcLen+16)
	b.dst = make([]byte, dstLen+16)
	for i := range b.src {
		b.src[i] = byte(r.Uint32())
	}
	for i := range b.dst {
		b.dst[i] = byte(r.Uint32())
	}
	for _, p := range parts {
		b.copies = append(b.copies, cuda.BatchCopy{Dst: dstBase + cuda.DevicePtr(p.doff), DstDesc: p.dd, Src: srcBase + cuda.DevicePtr(p.soff), SrcDesc: p.sd})
	}
	return b
}

// TestGPUBatch runs random batches (every width, packs, unpacks and
// strided copies of very different sizes in one launch) through the
// batched kernel on the device, and compares every byte with the host
// oracle; then replays one batch in a captured graph.
func TestGPUBatch(t *testing.T) {
	ctx := gputest.Context(t)
	s := gputest.Stream(t, ctx)
	r := rand.New(rand.NewPCG(3, 4))
	const arena = 64 << 20
	srcDev := gputest.Alloc(t, ctx, arena)
	dstDev := gputest.Alloc(t, ctx, arena)
	items := 0
	for bi := range 40 {
		b := randomBatch(r, srcDev, dstDev, 1+r.IntN(200))
		if len(b.src) > arena || len(b.dst) > arena {
			continue
		}
		want := slices.Clone(b.dst)
		for _, c := range b.copies {
			if err := cuda.HostStridedCopy(want[c.Dst-dstDev:], c.DstDesc, b.src[c.Src-srcDev:], c.SrcDesc); err != nil {
				t.Fatal(err)
			}
		}
		if err := ctx.CopyHtoD(srcDev, b.src); err != nil {
			t.Fatal(err)
		}
		if err := ctx.CopyHtoD(dstDev, b.dst); err != nil {
			t.Fatal(err)
		}
		table, l, err := ctx.BatchTable(b.copies)
		if err != nil {
			t.Fatal(err)
		}
		if len(table) > 0 {
			l.Table = gputest.Alloc(t, ctx, len(table))
			if err := ctx.CopyHtoD(l.Table, table); err != nil {
				t.Fatal(err)
			}
		}
		graphed := bi == 7 && cuda.HasGraphs()
		if graphed {
			g, err := s.Capture(func() error { return l.Launch(s) })
			if err != nil {
				t.Fatal(err)
			}
			defer g.Destroy()
			if err := g.Launch(s); err != nil {
				t.Fatal(err)
			}
		} else if err := l.Launch(s); err != nil {
			t.Fatal(err)
		}
		if err := s.Synchronize(); err != nil {
			t.Fatal(err)
		}
		got := make([]byte, len(b.dst))
		if err := ctx.CopyDtoH(got, dstDev); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("batch %d of %d copies (graph %v): device and oracle differ", bi, len(b.copies), graphed)
		}
		items += l.Count
	}
	t.Logf("%d items in 40 batches match the oracle (one batch from a captured graph: %v)", items, cuda.HasGraphs())
}
