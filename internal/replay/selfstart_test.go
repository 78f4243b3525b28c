package replay_test

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"

	"github.com/m2n-dev/m2n/dtype"
	"github.com/m2n-dev/m2n/fp8"
	"github.com/m2n-dev/m2n/internal/replay"
	"github.com/m2n-dev/m2n/internal/replay/replaytest"
	"github.com/m2n-dev/m2n/mesh"
	"github.com/m2n-dev/m2n/pattern"
	"github.com/m2n-dev/m2n/placement"
	"github.com/m2n-dev/m2n/reshard"
	"github.com/m2n-dev/m2n/reshard/program"
	"github.com/m2n-dev/m2n/strided"
)

// TestSelfStartStreams: several self-scaled tensors of one step, each
// copied to itself on one rank (one of them in chunks), are Fuse'd at the
// start over as many streams as Options.FuseStreams gives (1, 4, and the
// default, capped by the tensor count), and under every interleaving
// Simulate draws the bytes and scale tensors are those of quantizing each
// whole tensor (the compute stream waits for the side streams' Fuses
// before it reads a window). Build refuses a count out of range.
func TestSelfStartStreams(t *testing.T) {
	m, err := mesh.New([]int{1}, []int{0})
	if err != nil {
		t.Fatal(err)
	}
	shapes := [][]int64{{512, 256}, {384, 128}, {130, 300}, {256, 640}}
	var plans []*reshard.Plan
	var srcs, dsts []placement.Layout
	for _, sh := range shapes {
		s, err := placement.ParseLayout(fmtShape(sh), dtype.BF16, m, "S0")
		if err != nil {
			t.Fatal(err)
		}
		d, err := placement.ParseLayout(fmtShape(sh), dtype.FP8E4M3, m, "S0")
		if err != nil {
			t.Fatal(err)
		}
		p, err := reshard.NewPlan(s, d, 1, reshard.Options{})
		if err != nil {
			t.Fatal(err)
		}
		plans, srcs, dsts = append(plans, p), append(srcs, s), append(dsts, d)
	}
	// 64 KiB chunks: the first tensor's 128 KiB of FP8 go in two copies
	sched, err := reshard.Flat.Schedule(plans, reshard.Topology{}, reshard.ScheduleOptions{ChunkBytes: 64 << 10, StagingBytes: 8 * 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	prog, err := program.Compile(sched, 0, program.CompileOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, fs := range []int{0, 1, 4} {
		t.Run(fmt.Sprintf("FuseStreams=%d", fs), func(t *testing.T) { selfStartOn(t, fs, shapes, prog, srcs, dsts) })
	}
	if _, err := replay.Build(prog, replay.Buffers{Tensors: make([][2]replay.Span, len(shapes))}, replay.Options{FuseStreams: replay.MaxFuseStreams + 1}); err == nil || !strings.Contains(err.Error(), "streams for the fused FP8 kernels") {
		t.Fatalf("Build with %d fuse streams: %v, want it refused", replay.MaxFuseStreams+1, err)
	}
}

// selfStartOn builds and simulates TestSelfStartStreams's step with fs
// fuse streams.
func selfStartOn(t *testing.T, fs int, shapes [][]int64, prog *program.Program, srcs, dsts []placement.Layout) {
	want := fs
	if fs == 0 {
		want = replay.DefaultFuseStreams
	}
	want = min(want, len(shapes))
	for seed := range uint64(8) {
		heap := &replaytest.GoHeap{}
		var bufs replay.Buffers
		var windows int64
		for i := range shapes {
			g, err := fp8.NewGrid(shapes[i], fp8.Block)
			if err != nil {
				t.Fatal(err)
			}
			box, _ := srcs[i].RankBox(0)
			blocks, _ := g.Blocks(box)
			windows += 4 * blocks.Elems()
			host := make([]byte, srcs[i].LocalBytes(0))
			if err := pattern.FillFloats(srcs[i], 0, uint64(i), host, placement.View{}); err != nil {
				t.Fatal(err)
			}
			src := mustAlloc(t, heap, int64(len(host)))
			dst := mustAlloc(t, heap, dsts[i].LocalBytes(0))
			if err := heap.Write(src, host); err != nil {
				t.Fatal(err)
			}
			bufs.Tensors = append(bufs.Tensors, [2]replay.Span{src, dst})
			bufs.Quant = append(bufs.Quant, replay.QuantTensor{Grid: g, DType: dtype.BF16, Blocks: blocks, Self: true,
				Part: box, PartAt: strided.Describe(box, box, 2), DstBlocks: blocks, ScaleDst: mustAlloc(t, heap, 4*blocks.Elems())})
		}
		bufs.SelfScales = mustAlloc(t, heap, windows)
		off := uint64(0)
		for i := range bufs.Quant {
			n := 4 * bufs.Quant[i].Blocks.Elems()
			bufs.Quant[i].Scales = replay.Span{Addr: bufs.SelfScales.Addr + off, Len: n}
			off += uint64(n)
		}
		bufs.Flag = mustAlloc(t, heap, 4)
		for _, n := range replay.FP8PartNeeds(prog, bufs.Quant) {
			if n != 0 {
				t.Fatalf("FP8 part buffers %v, want none: every tensor is copied to itself", replay.FP8PartNeeds(prog, bufs.Quant))
			}
		}
		needs := replay.NeedsOf(prog)
		bufs.Scratch = mustAlloc(t, heap, needs.Scratch)
		for slot := range needs.Staging {
			for dir := range needs.Staging[slot] {
				bufs.Staging[slot][dir] = mustAlloc(t, heap, needs.Staging[slot][dir])
			}
		}
		pl, err := replay.Build(prog, bufs, replay.Options{FuseStreams: fs})
		if err != nil {
			t.Fatal(err)
		}
		on := map[replay.Stream]int{}
		for _, c := range pl.Cmds {
			if c.Kind == replay.Fuse {
				on[c.Stream]++
			}
			if c.Kind == replay.Quantize {
				t.Fatal("a Quantize command in a step of self-scaled tensors")
			}
		}
		total := 0
		for k := range want {
			s := replay.Compute
			if k > 0 {
				s = replay.Side + replay.Stream(k-1)
			}
			if on[s] == 0 {
				t.Fatalf("Fuses by stream %v: none on the %s stream, want them spread over %d streams", on, s, want)
			}
			total += on[s]
		}
		if total != len(shapes) || len(on) != want {
			t.Fatalf("Fuses by stream %v, want one a tensor over %d streams", on, want)
		}
		if err := replay.Simulate([][]*replay.Plan{{pl}}, heap, rand.New(rand.NewPCG(seed, 7))); err != nil {
			t.Fatal(err)
		}
		for i, tb := range bufs.Tensors {
			got := make([]byte, tb[1].Len)
			scales := make([]byte, bufs.Quant[i].ScaleDst.Len)
			if err := heap.Read(tb[1], got); err != nil {
				t.Fatal(err)
			}
			if err := heap.Read(bufs.Quant[i].ScaleDst, scales); err != nil {
				t.Fatal(err)
			}
			if err := pattern.CheckFP8(dtype.BF16, dsts[i], fp8.Block, 0, uint64(i), got, placement.View{}, scales); err != nil {
				t.Fatalf("seed %d, tensor %d %v: %v", seed, i, shapes[i], err)
			}
		}
	}
}

func mustAlloc(t *testing.T, h *replaytest.GoHeap, n int64) replay.Span {
	t.Helper()
	sp, err := h.Alloc(n)
	if err != nil {
		t.Fatal(err)
	}
	return sp
}

func fmtShape(s []int64) string {
	parts := make([]string, len(s))
	for i, n := range s {
		parts[i] = strconv.FormatInt(n, 10)
	}
	return strings.Join(parts, "x")
}
