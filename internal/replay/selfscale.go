package replay

// The self-scaled tensors (QuantTensor.Self): the plan quantizes their
// whole blocks in one pass each (Fuse), writes their destination scale
// tensors and checks their scales, so that a step of them needs nothing
// from the host.

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/m2n-dev/m2n/internal/checked"
	"github.com/m2n-dev/m2n/placement"
	"github.com/m2n-dev/m2n/reshard"
	"github.com/m2n-dev/m2n/reshard/program"
	"github.com/m2n-dev/m2n/strided"
)

// selfUse is how one rank's program uses a self-scaled tensor: how many of
// its messages the rank quantizes, whether the only one is the whole
// source part, and whether they are all local copies that together write
// the part, in its row-major order, into one run of the destination
// buffer starting at byte into (a part copied to itself in chunks).
type selfUse struct {
	messages int
	whole    bool
	local    bool  // every message so far is such a copy
	covered  int64 // the elements those copies write
	into     int64
}

// direct reports whether the tensor's one quantized message is its whole
// part, so that its Fuse packs that message itself.
func (u selfUse) direct() bool { return u.messages == 1 && u.whole }

// intoDst reports whether the tensor's messages are local copies of the
// whole part into one run of its destination buffer (one copy of it or
// its chunks): one Fuse of the part straight into that run, at the start,
// stands for them all.
func (u selfUse) intoDst(q QuantTensor) bool {
	return u.messages > 0 && u.local && u.covered == q.Part.Elems()
}

// selfUses returns, for every self-scaled tensor of quant (the zero value
// for the others), how p uses it.
func selfUses(p *program.Program, quant []QuantTensor) []selfUse {
	uses := make([]selfUse, len(quant))
	for t := range uses {
		uses[t].local = true
	}
	sched := p.Schedule()
	note := func(msg int32, regs []program.Region, to []program.Region) {
		if len(regs) == 0 || sched == nil || int(msg) >= len(sched.Messages) {
			return
		}
		t := int(regs[0].Tensor)
		if t >= len(quant) || !quant[t].Self {
			return
		}
		u, part, box := &uses[t], quant[t].Part, sched.Messages[msg].Box
		u.messages++
		u.whole = box.Equal(part)
		// a copy into one run of t's destination, where the part's
		// row-major order puts the box
		if len(to) != 1 || to[0].Buf != reshard.BufDst || int(to[0].Tensor) != t || !to[0].At.Contiguous() ||
			to[0].At.Run != box.Elems() || !part.Contains(box) {
			u.local = false
			return
		}
		at := to[0].At.Offset - strided.Describe(part, box, 1).Offset
		if u.messages > 1 && at != u.into {
			u.local = false
		}
		u.into = at
		u.covered += box.Elems()
	}
	for i := range p.Rounds {
		s := &p.Rounds[i]
		for _, cp := range s.Copies {
			if cp.Quant {
				note(cp.Msg, cp.From, cp.To)
			}
		}
		for _, w := range s.Sends {
			for _, pt := range w.Parts {
				if pt.Quant {
					note(pt.Msg, pt.Regions, nil)
				}
			}
		}
	}
	return uses
}

// staged reports whether self-scaled tensor t quantizes its part into
// FP8Part at the start of the step: when it is not direct and the rank
// quantizes a message of it or holds a destination scale tensor.
func staged(q QuantTensor, u selfUse) bool {
	return q.Self && !u.direct() && !u.intoDst(q) && (u.messages > 0 || !q.DstBlocks.Empty())
}

// FP8PartNeeds returns, per tensor, the bytes of the FP8Part buffer the
// replay of p must give a self-scaled tensor of quant (QuantTensor.Self;
// the other fields but the spans set): its part's element count where it
// is staged, else 0.
func FP8PartNeeds(p *program.Program, quant []QuantTensor) []int64 {
	uses := selfUses(p, quant)
	out := make([]int64, len(quant))
	for t, q := range quant {
		if staged(q, uses[t]) {
			out[t] = q.Part.Elems()
		}
	}
	return out
}

// selfStart emits, at the start of the step, the Fuse of every staged
// self-scaled tensor into its FP8Part, and of every one copied to itself
// (intoDst) straight into its destination. With several, they spread over
// the compute stream and Options.FuseStreams-1 side streams, each kernel
// onto the stream with the least queued (the larger first, a kernel
// counted as at least fuseFloor elements: a small one costs about a
// round of a large one's), so that one kernel's tail overlaps the next
// one's start and small tensors' kernels run side by side; the compute
// stream waits for the side streams' before anything else.
func (bd *builder) selfStart() error {
	bd.uses = selfUses(bd.p, bd.b.Quant)
	var ops []QuantOp
	for t, q := range bd.b.Quant {
		var dst uint64
		switch {
		case q.Self && bd.uses[t].intoDst(q):
			d := bd.b.Tensors[t][1]
			end, ok := checked.Add(bd.uses[t].into, q.Part.Elems())
			if !ok || bd.uses[t].into < 0 || end > d.Len || d.Addr == 0 {
				return fmt.Errorf("replay: rank %d, tensor %s: its part's %d E4M3 bytes at byte %d of a destination of %d", bd.p.Rank, bd.tensor(t), q.Part.Elems(), bd.uses[t].into, d.Len)
			}
			dst = d.Addr + uint64(bd.uses[t].into)
		case staged(q, bd.uses[t]):
			if need := q.Part.Elems(); q.FP8Part.Len < need || q.FP8Part.Addr == 0 {
				return fmt.Errorf("replay: rank %d, tensor %s: an FP8 part buffer of %d bytes for a part of %d elements", bd.p.Rank, bd.tensor(t), q.FP8Part.Len, need)
			}
			dst = q.FP8Part.Addr
		default:
			continue
		}
		fu, err := bd.fuseOp(t, dst)
		if err != nil {
			return err
		}
		ops = append(ops, fu)
	}
	n := min(bd.opts.FuseStreams, len(ops))
	if n < 2 {
		for _, fu := range ops {
			bd.quantize(0, fu)
		}
		return nil
	}
	slices.SortStableFunc(ops, func(a, b QuantOp) int { return cmp.Compare(b.Box.Elems(), a.Box.Elems()) })
	streams := make([]Stream, n)
	for k := range streams {
		streams[k] = Compute
		if k > 0 {
			streams[k] = Side + Stream(k-1)
		}
	}
	fork := bd.event()
	bd.emit(Cmd{Kind: Record, Stream: Compute, Event: fork})
	for _, s := range streams[1:] {
		bd.emit(Cmd{Kind: Wait, Stream: s, Event: fork})
	}
	load := make([]int64, n) // elements queued on each stream
	for _, fu := range ops {
		k := 0
		for j := range load {
			if load[j] < load[k] {
				k = j
			}
		}
		load[k] += max(fu.Box.Elems(), fuseFloor)
		bd.stream = streams[k]
		bd.quantize(0, fu)
	}
	bd.stream = Compute
	for _, s := range streams[1:] {
		done := bd.event()
		bd.emit(Cmd{Kind: Record, Stream: s, Event: done})
		bd.emit(Cmd{Kind: Wait, Stream: Compute, Event: done})
	}
	return nil
}

// fuseFloor is the least a Fuse counts for when selfStart spreads them
// over streams, in elements: on an H200 a fused kernel of one round (a
// 128x1024 key weight, or 32 times its bytes) took 11-13 us, the time of
// about 8 MB of a large tensor's (bench/results/h200-fp8-streams.txt).
const fuseFloor = 4 << 20

// fuseOp is the Fuse of self-scaled tensor t's whole part into the bytes
// at dst.
func (bd *builder) fuseOp(t int, dst uint64) (QuantOp, error) {
	q := bd.b.Quant[t]
	if need := 4 * q.Blocks.Elems(); q.Scales.Len < need || q.Scales.Addr == 0 {
		return QuantOp{}, fmt.Errorf("replay: rank %d, tensor %s: a scale window of %d bytes for %d blocks", bd.p.Rank, bd.tensor(t), q.Scales.Len, q.Blocks.Elems())
	}
	a, err := bd.region(0, "FP8 quantize of the source part", program.Region{Tensor: int32(t), Buf: reshard.BufSrc, At: q.PartAt})
	if err != nil {
		return QuantOp{}, err
	}
	return QuantOp{Tensor: t, Box: q.Part, Src: a, SrcAt: q.PartAt, Dst: dst, Fused: true}, nil
}

// fusedAtStart reports whether local copy cp is one that selfStart's
// Fuse of its tensor's whole part into the destination already made.
func (bd *builder) fusedAtStart(cp program.Copy) bool {
	if !cp.Quant || len(cp.From) == 0 {
		return false
	}
	t := int(cp.From[0].Tensor)
	return t < len(bd.b.Quant) && bd.b.Quant[t].Self && bd.uses[t].intoDst(bd.b.Quant[t])
}

// selfMessage resolves a quantized message of self-scaled tensor t, whose
// E4M3 bytes go to dst: the part's Fuse where it is direct, else a copy
// of the message's box from FP8Part (row-major over the part).
func (bd *builder) selfMessage(t int, box placement.Box, dst uint64) (*QuantOp, *Copy, error) {
	q := bd.b.Quant[t]
	if bd.uses[t].direct() {
		fu, err := bd.fuseOp(t, dst)
		return &fu, nil, err
	}
	if !q.Part.Contains(box) {
		return nil, nil, fmt.Errorf("replay: rank %d, tensor %s: a message of box %v outside its source part %v", bd.p.Rank, bd.tensor(t), box, q.Part)
	}
	c := Copy{Src: q.FP8Part.Addr, SrcAt: strided.Describe(q.Part, box, 1), Dst: dst, DstAt: strided.Desc{Run: box.Elems()}}
	return nil, &c, nil
}

// selfEnd emits, at the end of the step, the copies of the self-scaled
// tensors' destination scale tensors out of their windows (one batch) and
// the Check of their windows.
func (bd *builder) selfEnd() error {
	any := false
	k := -1
	for t, q := range bd.b.Quant {
		if !q.Self {
			continue
		}
		any = true
		if q.DstBlocks.Empty() {
			continue
		}
		if !q.Blocks.Contains(q.DstBlocks) {
			return fmt.Errorf("replay: rank %d, tensor %s: destination scale blocks %v outside the part's %v", bd.p.Rank, bd.tensor(t), q.DstBlocks, q.Blocks)
		}
		n := 4 * q.DstBlocks.Elems()
		if q.ScaleDst.Len < n || q.ScaleDst.Addr == 0 {
			return fmt.Errorf("replay: rank %d, tensor %s: a scale tensor of %d bytes for %d blocks", bd.p.Rank, bd.tensor(t), q.ScaleDst.Len, q.DstBlocks.Elems())
		}
		if k < 0 {
			k = bd.newBatch()
		}
		bd.add(k, Copy{Src: q.Scales.Addr, SrcAt: strided.Describe(q.Blocks, q.DstBlocks, 4), Dst: q.ScaleDst.Addr, DstAt: strided.Desc{Run: n}})
	}
	last := max(len(bd.p.Rounds)-1, 0)
	if k >= 0 {
		bd.launch(last, k)
	}
	if !any {
		return nil
	}
	if bd.b.Flag.Len < 4 || bd.b.SelfScales.Len == 0 {
		return fmt.Errorf("replay: rank %d: self-scaled tensors without their windows (%d bytes) or a flag (%d bytes)", bd.p.Rank, bd.b.SelfScales.Len, bd.b.Flag.Len)
	}
	bd.emit(Cmd{Kind: Check, Stream: Compute, Src: bd.b.SelfScales.Addr, Len: bd.b.SelfScales.Len, Dst: bd.b.Flag.Addr, Round: last})
	return nil
}
