package gpu

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"unsafe"

	"github.com/m2n-dev/m2n/cuda"
	"github.com/m2n-dev/m2n/cuda/kernels"
	"github.com/m2n-dev/m2n/fp8"
	"github.com/m2n-dev/m2n/hier"
	"github.com/m2n-dev/m2n/internal/replay"
	"github.com/m2n-dev/m2n/internal/replay/replaytest"
	"github.com/m2n-dev/m2n/reshard"
	"github.com/m2n-dev/m2n/strided"
	"github.com/m2n-dev/m2n/transport/transporttest"
)

// emuHeap is simulated device memory in C memory, whose copies run the
// batched kernel's source on the CPU, item by item, through the same
// conversion (batchCopies, cuda.EmulateBatch, the item table) a Replay uses.
type emuHeap struct {
	bufs   []emuBuf
	items  int
	quants int
	fuses  int
}

type emuBuf struct {
	b    []byte
	free func()
}

func (h *emuHeap) close() {
	for _, b := range h.bufs {
		b.free()
	}
}

func (h *emuHeap) Alloc(n int64) (replay.Span, error) {
	if n == 0 {
		return replay.Span{}, nil
	}
	b, free := kernels.Alloc(int(n))
	h.bufs = append(h.bufs, emuBuf{b, free})
	return replay.Span{Addr: uint64(uintptr(unsafe.Pointer(&b[0]))), Len: n}, nil
}

// at returns the bytes from addr to the end of its buffer.
func (h *emuHeap) at(addr uint64) ([]byte, error) {
	for _, b := range h.bufs {
		base := uint64(uintptr(unsafe.Pointer(&b.b[0])))
		if addr >= base && addr < base+uint64(len(b.b)) {
			return b.b[addr-base:], nil
		}
	}
	return nil, fmt.Errorf("address %#x is in no buffer", addr)
}

// inside checks that a region lies in one buffer before a kernel touches
// it.
func (h *emuHeap) inside(addr uint64, at strided.Desc) error {
	b, err := h.at(addr)
	if err != nil {
		return err
	}
	end := at.Offset + at.Run
	for i, c := range at.Count {
		end += (c - 1) * at.Stride[i]
	}
	if at.Bytes() > 0 && end > int64(len(b)) {
		return fmt.Errorf("region %v at %#x runs past its buffer", at, addr)
	}
	return nil
}

func (h *emuHeap) Copy(c replay.Copy) error {
	if err := h.inside(c.Src, c.SrcAt); err != nil {
		return err
	}
	if err := h.inside(c.Dst, c.DstAt); err != nil {
		return err
	}
	n, err := cuda.EmulateBatch(batchCopies([]replay.Copy{c}), 4, 2)
	h.items += n
	return err
}

// Quantize runs the FP8 kernels' source on the CPU, through the same
// planning a Replay's launch uses (cuda.EmulateFP8).
func (h *emuHeap) Quantize(t replay.QuantTensor, q replay.QuantOp) error {
	return h.quantize("PackQuantize", t, q)
}

// Fuse runs the fused kernel's source on the CPU (cuda.EmulateFP8).
func (h *emuHeap) Fuse(t replay.QuantTensor, q replay.QuantOp) error {
	h.fuses++
	return h.quantize("FusedQuantize", t, q)
}

func (h *emuHeap) quantize(op string, t replay.QuantTensor, q replay.QuantOp) error {
	if err := h.inside(q.Src, q.SrcAt); err != nil {
		return err
	}
	if err := h.inside(q.Dst, strided.Desc{Run: q.Box.Elems()}); err != nil {
		return err
	}
	if err := h.inside(t.Scales.Addr, strided.Desc{Run: 4 * t.Blocks.Elems()}); err != nil {
		return err
	}
	h.quants++
	return cuda.EmulateFP8(op, t.Grid, cuda.DevicePtr(q.Dst),
		cuda.FP8Region{DType: t.DType, Src: cuda.DevicePtr(q.Src), At: q.SrcAt, Box: q.Box},
		cuda.FP8Window{Blocks: t.Blocks, Values: cuda.DevicePtr(t.Scales.Addr)}, 3)
}

// Check runs a Replay's Check as it queues it (checkArgs): the flag
// zeroed, then the amax kernel's source over the windows.
func (h *emuHeap) Check(src uint64, n int64, flag uint64) error {
	if err := h.inside(src, strided.Desc{Run: n}); err != nil {
		return err
	}
	if err := replaytest.Bytes(h.at).Write(replay.Span{Addr: flag, Len: 4}, make([]byte, 4)); err != nil {
		return err
	}
	g, reg, win, err := checkArgs(src, n, flag)
	if err != nil {
		return err
	}
	return cuda.EmulateFP8("BlockAmax", g, 0, reg, win, 3)
}

func (h *emuHeap) Memcpy(dst, src uint64, n int64) error {
	return replaytest.Bytes(h.at).Memcpy(dst, src, n)
}

func (h *emuHeap) Write(sp replay.Span, b []byte) error { return replaytest.Bytes(h.at).Write(sp, b) }

func (h *emuHeap) Read(sp replay.Span, b []byte) error { return replaytest.Bytes(h.at).Read(sp, b) }

// TestReplayOnCPU runs the conformance cases (and colocated pairs) through
// replay plans whose copies are the batched kernel's source compiled for
// the CPU, driven by the item tables a Replay uploads, all ranks' streams
// simulated together: the whole device path but the driver and NCCL calls
// themselves, where there is no GPU.
func TestReplayOnCPU(t *testing.T) {
	cases, err := transporttest.DefaultCases(13)
	if err != nil {
		t.Fatal(err)
	}
	colocated, err := transporttest.ColocatedCases(transporttest.ParsePairs(strings.NewReader("7x5 | bf16 | 2 | S0 | 2 | S1\n8x4 | f32 | 1 | S0 | 2 | S0\n256x64x32 | bf16 | 2 | S0 | 2 | S2\n"), "colocated"))
	if err != nil {
		t.Fatal(err)
	}
	cases = append(cases, colocated...)
	type variant struct {
		route    reshard.Route
		domains  int
		padded   bool
		coalesce int64
	}
	variants := []variant{{reshard.Flat, 1, false, 0}, {reshard.AllGatherBroadcast, 1, false, 0},
		{hier.Hier{}, 2, false, 0}, {hier.Hier{}, 2, true, 1 << 10}}
	if testing.Short() {
		variants = variants[2:]
	}
	heap := &emuHeap{}
	defer heap.close()
	runs := 0
	for ci, c := range cases {
		for vi, v := range variants {
			topo := replaytest.DomainTopology(t, c, v.domains)
			env := replaytest.Env{Topo: topo, Opts: reshard.ScheduleOptions{ChunkBytes: 4 << 10, StagingBytes: 32 << 10},
				Coalesce: v.coalesce, Padded: v.padded}
			r := rand.New(rand.NewPCG(uint64(ci), uint64(vi)))
			if err := replaytest.RunCase(heap, env, c, v.route, r); err != nil {
				t.Fatalf("%v, %s over %d domains (views %v, coalesce %d): %v", c, v.route.Name(), v.domains, v.padded, v.coalesce, err)
			}
			runs++
		}
		heap.close()
		heap.bufs = slices.Delete(heap.bufs, 0, len(heap.bufs))
	}
	t.Logf("%d reshards simulated with the batched kernel on the CPU (%d items), checked element by element", runs, heap.items)
}

// TestReplayFP8OnCPU runs FP8 conformance cases through replay plans whose
// Quantize, Fuse and Check commands run the FP8 kernels' source compiled
// for the CPU, as a Replay launches them, with the scales in the heap:
// every E4M3 byte checked against quantizing the whole tensor, with the
// scales exchanged and, where the layouts allow, computed by the plan
// (replaytest.Env.Self: its scale tensors checked too, and a NaN flagged).
func TestReplayFP8OnCPU(t *testing.T) {
	cases, err := transporttest.FP8Cases()
	if err != nil {
		t.Fatal(err)
	}
	if testing.Short() {
		cases = cases[:min(len(cases), 24)]
	}
	local, err := transporttest.ColocatedCases(transporttest.ParsePairs(strings.NewReader(
		"300x260 | bf16 | 1 | S0 | 1 | S0\n256x256 | bf16 | 2 | R | 2 | R\n256x256 | f32 | 2 | R | 2 | S1\n"), "colocated"))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range local {
		cases = append(cases, c.FP8())
	}
	heap := &emuHeap{}
	defer heap.close()
	runs := 0
	for ci, c := range cases {
		for mi, mode := range []fp8.Mode{fp8.Block, fp8.Row} {
			for vi, v := range []struct {
				route   reshard.Route
				domains int
				chunk   int64
				self    bool
				nan     bool
			}{{reshard.Flat, 1, 4 << 10, false, false}, {hier.Hier{}, 2, 4 << 10, false, false},
				{reshard.Flat, 1, 4 << 10, true, false}, {reshard.Flat, 1, 1 << 20, true, false}, {reshard.Flat, 1, 1 << 20, true, true}} {
				env := replaytest.Env{Topo: replaytest.DomainTopology(t, c, v.domains),
					Opts: reshard.ScheduleOptions{ChunkBytes: v.chunk, StagingBytes: max(32<<10, 8*v.chunk)}, FP8: mode, Self: v.self, NaN: v.nan}
				r := rand.New(rand.NewPCG(uint64(ci), uint64(10*mi+vi)))
				if err := replaytest.RunCase(heap, env, c, v.route, r); err != nil {
					t.Fatalf("%v, %v scales, %s over %d domains (self %v, NaN %v): %v", c, mode, v.route.Name(), v.domains, v.self, v.nan, err)
				}
				runs++
			}
		}
		heap.close()
		heap.bufs = slices.Delete(heap.bufs, 0, len(heap.bufs))
	}
	if heap.quants == 0 || heap.fuses == 0 {
		t.Fatalf("%d quantize launches, %d of them fused: both kinds must run", heap.quants, heap.fuses)
	}
	t.Logf("%d FP8 reshards simulated with the FP8 kernels on the CPU (%d quantize launches, %d fused), checked byte by byte", runs, heap.quants, heap.fuses)
}
