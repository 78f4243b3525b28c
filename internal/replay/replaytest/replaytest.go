// Package replaytest runs conformance cases through replay plans on the
// CPU: every rank's program compiled as for NCCL, its buffers in a
// simulated heap, its plan built over them and all ranks' plans simulated
// together (replay.Simulate) in a random interleaving, then every
// destination element checked. The heap decides how copies run: GoHeap
// copies with the host oracle; package nccl's tests run the batched
// kernel's source itself.
package replaytest

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/m2n-dev/m2n/fp8"
	"github.com/m2n-dev/m2n/hier"
	"github.com/m2n-dev/m2n/internal/replay"
	"github.com/m2n-dev/m2n/pattern"
	"github.com/m2n-dev/m2n/placement"
	"github.com/m2n-dev/m2n/reshard"
	"github.com/m2n-dev/m2n/reshard/program"
	"github.com/m2n-dev/m2n/transport"
	"github.com/m2n-dev/m2n/transport/transporttest"
)

// Heap is simulated device memory: one address space for every rank.
type Heap interface {
	replay.Memory
	// Alloc returns n bytes (n may be 0: the zero Span).
	Alloc(n int64) (replay.Span, error)
	// Write and Read move bytes between host slices and the heap.
	Write(sp replay.Span, b []byte) error
	Read(sp replay.Span, b []byte) error
}

// Env is one case's set-up.
type Env struct {
	Topo     reshard.Topology
	Opts     reshard.ScheduleOptions
	Coalesce int64
	// Padded places every part in a larger buffer through a view, as
	// transporttest.Env.Padded does.
	Padded bool
	// Runs is how many steps each rank queues back to back (events and
	// staging reused), at least 1.
	Runs int
	// MemcpyMin is replay.Options.MemcpyMin.
	MemcpyMin int64
	// FP8, for a case whose destination is fp8e4m3 (Case.FP8), is the
	// scaling mode: the sources hold pattern.FillFloats' values, each
	// source rank's scales of its blocks (those of quantizing the whole
	// tensor at once, as the runtime's amax exchange gives them) lie in
	// the heap, and every destination byte is checked against quantizing
	// the whole tensor (pattern.CheckFP8).
	FP8 fp8.Mode
	// Self, with FP8, has the plans scale a case themselves where its
	// layouts allow (fp8.Grid.ScalesLocal; replay.QuantTensor.Self), as a
	// device driver does: the scale windows, the destination scale
	// tensors and the check flag lie in the heap, and every destination
	// rank's scale tensor is checked too. NaN puts a NaN into one source
	// element of such a case, and RunCase then checks that every rank
	// holding it flags it (its Check flag at 0x7F800000 or above).
	Self, NaN bool
}

// DomainTopology returns the topology of c's world on one host, with c's
// destination ranks cut into domains domains of equal size (the last one
// smaller where they do not divide); the test fails if there is none.
func DomainTopology(t testing.TB, c transporttest.Case, domains int) reshard.Topology {
	t.Helper()
	n := c.Dst.Mesh().Size()
	topo, err := hier.Domains(make([]int, c.World()), c.Src, c.Dst, hier.DomainSizes{Dst: (n + domains - 1) / domains})
	if err != nil {
		t.Fatal(err)
	}
	return topo
}

// RunCase runs case c on route over heap and checks every destination
// element, with r choosing the interleaving.
func RunCase(heap Heap, env Env, c transporttest.Case, route reshard.Route, r *rand.Rand) error {
	world := c.World()
	plan, err := reshard.NewPlan(c.Src, c.Dst, world, reshard.Options{})
	if err != nil {
		return err
	}
	sched, err := route.Schedule([]*reshard.Plan{plan}, env.Topo, env.Opts)
	if err != nil {
		return err
	}
	self := false
	if env.FP8 != 0 && env.Self {
		g, err := fp8.NewGrid(c.Src.Shape(), env.FP8)
		if err != nil {
			return err
		}
		if self, err = g.ScalesLocal(c.Src, c.Dst, world); err != nil {
			return err
		}
	}
	states := make([]rankState, world)
	plans := make([][]*replay.Plan, world)
	for rank := range world {
		st := &states[rank]
		bufs, err := st.setUp(heap, env, c, rank, self)
		if err != nil {
			return err
		}
		prog, err := program.Compile(sched, rank, program.CompileOptions{Views: []program.TensorViews{st.views}, CoalesceBytes: env.Coalesce})
		if err != nil {
			return err
		}
		if self {
			if st.self, err = selfScales(heap, c, env.FP8, rank, prog, st.views, &bufs, st.self.nan); err != nil {
				return err
			}
		}
		if err := allocNeeds(heap, replay.NeedsOf(prog), &bufs); err != nil {
			return err
		}
		topo := env.Topo
		pl, err := replay.Build(prog, bufs, replay.Options{
			Class:     func(peer int) reshard.LinkClass { return topo.Class(rank, peer) },
			MemcpyMin: env.MemcpyMin,
		})
		if err != nil {
			return err
		}
		for range max(env.Runs, 1) {
			plans[rank] = append(plans[rank], pl)
		}
	}
	if err := replay.Simulate(plans, heap, r); err != nil {
		return err
	}
	for rank := range world {
		st := &states[rank]
		if st.got == nil {
			continue
		}
		if err := heap.Read(st.dst, st.got); err != nil {
			return err
		}
		if self && env.NaN {
			continue // the flags are what a NaN run checks
		}
		if err := checkDst(c, env.FP8, rank, st.got, st.views.Dst, env.Padded); err != nil {
			return fmt.Errorf("%s: %w", sched.Route, err)
		}
	}
	for rank := range world {
		if err := states[rank].self.check(heap, c, env.FP8, rank, env.NaN); err != nil {
			return fmt.Errorf("%s: %w", sched.Route, err)
		}
	}
	return nil
}

// rankState is one simulated rank's side of a case: its views, its
// destination buffer and what it read back, its self-scaling state.
type rankState struct {
	views program.TensorViews
	dst   replay.Span
	got   []byte
	self  selfState
}

// setUp allocates and fills in heap rank's source part (with its scales
// where they are exchanged, self false) and poisons its destination part,
// and returns the buffers.
func (st *rankState) setUp(heap Heap, env Env, c transporttest.Case, rank int, self bool) (replay.Buffers, error) {
	var bufs replay.Buffers
	bufs.Tensors = make([][2]replay.Span, 1)
	part := func(l placement.Layout) (placement.View, int64, error) {
		box, _ := l.RankBox(rank)
		if !env.Padded || box.Empty() {
			return placement.View{}, l.LocalBytes(rank), nil
		}
		v := transporttest.PaddedView(box.Shape())
		ext, err := v.Extent(box.Shape())
		return v, (ext + 4) * l.ElemSize(), err
	}
	if c.Src.Mesh().Contains(rank) {
		v, n, err := part(c.Src)
		if err != nil {
			return bufs, err
		}
		st.views.Src = v
		host := make([]byte, n)
		fill := pattern.Fill
		if env.FP8 != 0 {
			fill = pattern.FillFloats
		}
		if env.FP8 != 0 && !self {
			if bufs.Quant, err = loadScales(heap, c, env.FP8, rank); err != nil {
				return bufs, err
			}
		}
		if err := fill(c.Src, rank, 0, host, v); err != nil {
			return bufs, err
		}
		if self && env.NaN {
			if st.self.nan, err = poisonNaN(c, rank, host, v); err != nil {
				return bufs, err
			}
		}
		if bufs.Tensors[0][0], err = heap.Alloc(n); err != nil {
			return bufs, err
		}
		if err := heap.Write(bufs.Tensors[0][0], host); err != nil {
			return bufs, err
		}
	}
	if c.Dst.Mesh().Contains(rank) {
		v, n, err := part(c.Dst)
		if err != nil {
			return bufs, err
		}
		st.views.Dst = v
		st.got = make([]byte, n)
		for i := range st.got {
			st.got[i] = pattern.Poison
		}
		if st.dst, err = heap.Alloc(n); err != nil {
			return bufs, err
		}
		if err := heap.Write(st.dst, st.got); err != nil {
			return bufs, err
		}
		bufs.Tensors[0][1] = st.dst
	}
	return bufs, nil
}

// allocNeeds allocates on heap the staging, full-tensor and scratch
// buffers a rank's program needs, into bufs.
func allocNeeds(heap Heap, needs replay.Needs, bufs *replay.Buffers) error {
	var err error
	for slot := range needs.Staging {
		for dir := range needs.Staging[slot] {
			if bufs.Staging[slot][dir], err = heap.Alloc(needs.Staging[slot][dir]); err != nil {
				return err
			}
		}
	}
	for _, n := range needs.Full {
		sp, err := heap.Alloc(n)
		if err != nil {
			return err
		}
		bufs.Full = append(bufs.Full, sp)
	}
	bufs.Scratch, err = heap.Alloc(needs.Scratch)
	return err
}

// loadScales writes into the heap the scales of the blocks rank's source
// part of c touches, as the amax exchange gives them (those of quantizing
// the whole tensor), and returns the buffers' Quant.
func loadScales(heap Heap, c transporttest.Case, mode fp8.Mode, rank int) ([]replay.QuantTensor, error) {
	box, _ := c.Src.RankBox(rank)
	_, w, err := pattern.WantFP8(c.Src.DType(), c.Src.Shape(), mode, box, 0)
	if err != nil {
		return nil, err
	}
	g, err := fp8.NewGrid(c.Src.Shape(), mode)
	if err != nil {
		return nil, err
	}
	sp, err := heap.Alloc(4 * int64(len(w.Values)))
	if err != nil {
		return nil, err
	}
	if err := heap.Write(sp, w.AppendBits(nil)); err != nil {
		return nil, err
	}
	return []replay.QuantTensor{{Grid: g, DType: c.Src.DType(), Blocks: w.Blocks, Scales: sp}}, nil
}

// checkDst checks a destination rank's bytes got against the pattern (or,
// with mode set, against quantizing the whole tensor: the plan moves the
// E4M3 bytes only, so the scale tensor checked is the expected one, which
// the runtime writes) and, with padded views, that no byte outside the
// view changed.
func checkDst(c transporttest.Case, mode fp8.Mode, rank int, got []byte, view placement.View, padded bool) error {
	dst := c.Dst
	if mode != 0 {
		box, _ := dst.RankBox(rank)
		_, w, err := pattern.WantFP8(c.Src.DType(), dst.Shape(), mode, box, 0)
		if err != nil {
			return err
		}
		if err := pattern.CheckFP8(c.Src.DType(), dst, mode, rank, 0, got, view, w.AppendBits(nil)); err != nil {
			return err
		}
	} else if err := pattern.Check(dst, rank, 0, got, view); err != nil {
		return err
	}
	if !padded {
		return nil
	}
	keep := slices.Clone(got)
	if err := pattern.PoisonPart(dst, rank, keep, view); err != nil {
		return err
	}
	for i, b := range keep {
		if b != pattern.Poison {
			return fmt.Errorf("rank %d: byte %d outside the destination view changed", rank, i)
		}
	}
	return nil
}

// GoHeap is a Heap of Go byte slices at made-up addresses, copying with
// the host oracle (transport.HostMemory).
type GoHeap struct {
	bufs []goBuf
	next uint64
}

type goBuf struct {
	base uint64
	b    []byte
}

// Alloc implements Heap: buffers sit 4 KiB apart, so that an access past a
// buffer's end finds no buffer.
func (h *GoHeap) Alloc(n int64) (replay.Span, error) {
	if n == 0 {
		return replay.Span{}, nil
	}
	if h.next == 0 {
		h.next = 1 << 20
	}
	base := h.next
	h.next += (uint64(n) + 8191) &^ 4095
	h.bufs = append(h.bufs, goBuf{base: base, b: make([]byte, n)})
	return replay.Span{Addr: base, Len: n}, nil
}

// at returns the bytes from addr to the end of its buffer.
func (h *GoHeap) at(addr uint64) ([]byte, error) {
	i, _ := slices.BinarySearchFunc(h.bufs, addr, func(b goBuf, a uint64) int {
		if b.base+uint64(len(b.b)) <= a {
			return -1
		}
		return 1
	})
	if i == len(h.bufs) || h.bufs[i].base > addr {
		return nil, fmt.Errorf("replaytest: address %#x is in no buffer", addr)
	}
	return h.bufs[i].b[addr-h.bufs[i].base:], nil
}

// Copy implements replay.Memory.
func (h *GoHeap) Copy(c replay.Copy) error {
	d, err := h.at(c.Dst)
	if err != nil {
		return err
	}
	s, err := h.at(c.Src)
	if err != nil {
		return err
	}
	return transport.HostMemory{}.Copy(transport.HostBuffer(d), c.DstAt, transport.HostBuffer(s), c.SrcAt)
}

// Quantize implements replay.Memory with the host oracle
// (transport.HostMemory.QuantPack).
func (h *GoHeap) Quantize(t replay.QuantTensor, q replay.QuantOp) error {
	return Bytes(h.at).Quantize(t, q)
}

// Fuse implements replay.Memory with the host oracle (Bytes.Fuse).
func (h *GoHeap) Fuse(t replay.QuantTensor, q replay.QuantOp) error { return Bytes(h.at).Fuse(t, q) }

// Check implements replay.Memory.
func (h *GoHeap) Check(src uint64, n int64, flag uint64) error {
	return Bytes(h.at).Check(src, n, flag)
}

// Memcpy implements replay.Memory.
func (h *GoHeap) Memcpy(dst, src uint64, n int64) error { return Bytes(h.at).Memcpy(dst, src, n) }

// Write implements Heap.
func (h *GoHeap) Write(sp replay.Span, b []byte) error { return Bytes(h.at).Write(sp, b) }

// Read implements Heap.
func (h *GoHeap) Read(sp replay.Span, b []byte) error { return Bytes(h.at).Read(sp, b) }

// Bytes finds the bytes from an address to the end of its buffer: with it
// a simulated heap (this package's GoHeap, or one in C memory) has its
// Memcpy, Write and Read.
type Bytes func(addr uint64) ([]byte, error)

// Memcpy copies n bytes from src to dst.
func (at Bytes) Memcpy(dst, src uint64, n int64) error {
	d, err := at(dst)
	if err != nil {
		return err
	}
	s, err := at(src)
	if err != nil {
		return err
	}
	if int64(len(d)) < n || int64(len(s)) < n {
		return fmt.Errorf("replaytest: memcpy of %d bytes from %#x to %#x runs past a buffer", n, src, dst)
	}
	copy(d[:n], s[:n])
	return nil
}

// Quantize runs q with the host oracle (transport.HostMemory.QuantPack),
// reading t's scales from the heap.
func (at Bytes) Quantize(t replay.QuantTensor, q replay.QuantOp) error {
	w, err := at.readWindow(t)
	if err != nil {
		return err
	}
	return at.pack(t, q, w)
}

// readWindow reads t's window of scales from the heap.
func (at Bytes) readWindow(t replay.QuantTensor) (fp8.Window, error) {
	w, err := t.Grid.NewWindow(t.Blocks)
	if err != nil {
		return w, err
	}
	bits := make([]byte, 4*len(w.Values))
	if err := at.Read(t.Scales, bits); err != nil {
		return w, err
	}
	return w, w.ReadBits(bits)
}

// pack quantizes q's region into q.Dst with the scales of w, by the host
// oracle (transport.HostMemory.QuantPack).
func (at Bytes) pack(t replay.QuantTensor, q replay.QuantOp, w fp8.Window) error {
	src, err := at(q.Src)
	if err != nil {
		return err
	}
	dst, err := at(q.Dst)
	if err != nil {
		return err
	}
	r := transport.QuantRegion{DType: t.DType, Buf: transport.HostBuffer(src), At: q.SrcAt, Box: q.Box}
	return transport.HostMemory{}.QuantPack(t.Grid, transport.HostBuffer(dst), 0, r, transport.Scales{Window: w})
}

// Write copies b to sp.Addr.
func (at Bytes) Write(sp replay.Span, b []byte) error {
	if len(b) == 0 {
		return nil
	}
	d, err := at(sp.Addr)
	if err != nil {
		return err
	}
	if len(d) < len(b) {
		return fmt.Errorf("replaytest: write of %d bytes at %#x runs past a buffer", len(b), sp.Addr)
	}
	copy(d, b)
	return nil
}

// Read copies len(b) bytes from sp.Addr into b.
func (at Bytes) Read(sp replay.Span, b []byte) error {
	if len(b) == 0 {
		return nil
	}
	s, err := at(sp.Addr)
	if err != nil {
		return err
	}
	if len(s) < len(b) {
		return fmt.Errorf("replaytest: read of %d bytes at %#x runs past a buffer", len(b), sp.Addr)
	}
	copy(b, s)
	return nil
}
