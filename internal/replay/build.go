package replay

import (
	"fmt"

	"github.com/m2n-dev/m2n/reshard"
	"github.com/m2n-dev/m2n/reshard/program"
	"github.com/m2n-dev/m2n/strided"
)

// Build makes the plan of one step of program p over the buffers b. It
// checks every region against its buffer, since kernels cannot: an error
// names the rank, the round, the tensor and the operation.
func Build(p *program.Program, b Buffers, opts Options) (*Plan, error) {
	if len(b.Tensors) != len(p.Full) {
		return nil, fmt.Errorf("replay: rank %d: %d tensors' buffers for a program of %d tensors", p.Rank, len(b.Tensors), len(p.Full))
	}
	if opts.MemcpyMin == 0 {
		opts.MemcpyMin = DefaultMemcpyMin
	}
	if opts.FuseStreams == 0 {
		opts.FuseStreams = DefaultFuseStreams
	}
	if opts.FuseStreams < 1 || opts.FuseStreams > MaxFuseStreams {
		return nil, fmt.Errorf("replay: rank %d: %d streams for the fused FP8 kernels (1 to %d)", p.Rank, opts.FuseStreams, MaxFuseStreams)
	}
	bd := &builder{p: p, b: b, opts: opts, pl: &Plan{Done: make([][]int, len(p.Rounds)), Quant: b.Quant}}
	if err := bd.build(); err != nil {
		return nil, err
	}
	return bd.pl, nil
}

type builder struct {
	p       *program.Program
	b       Buffers
	opts    Options
	pl      *Plan
	unpacks map[int]int // round -> its unpack batch
	stream  Stream      // where launch emits: Compute, or Side
	side    []sideCopy  // copies on the side stream not joined yet
	uses    []selfUse   // by tensor: how the self-scaled ones are used
}

// sideCopy is a round's copies on the side stream: the event that marks
// their end and the bytes they read and write.
type sideCopy struct {
	done   int
	rd, wr spans
}

func (bd *builder) event() int {
	bd.pl.Events++
	return bd.pl.Events - 1
}

func (bd *builder) emit(c Cmd) { bd.pl.Cmds = append(bd.pl.Cmds, c) }

func (bd *builder) build() error {
	p, st := bd.p, &bd.pl.Stats
	bd.unpacks = map[int]int{}
	if err := bd.selfStart(); err != nil {
		return err
	}
	var pending []int
	for i := range p.Rounds {
		s := &p.Rounds[i]
		drained := 0
		for drained < len(pending) && p.Rounds[pending[drained]].Index <= s.Index-2 {
			drained++
		}
		if err := bd.join(i, pending[:drained]); err != nil {
			return err
		}
		for _, d := range pending[:drained] {
			bd.drain(d)
		}
		pending = pending[drained:]
		for _, cp := range s.Copies {
			st.Sent[reshard.LinkSelf] += cp.Bytes
			st.Recv[reshard.LinkSelf] += cp.Bytes
			st.Messages++
		}
		// The round's copies come before its packs and groups when a send
		// may read what they write (a leader forwards what it copied), or a
		// receive write what they read; otherwise they run on the side
		// stream, so that the groups start at once and the next round's
		// packs need not wait for them.
		later, sp, err := bd.copiesAfter(i)
		if err != nil {
			return err
		}
		if !later {
			if err := bd.copies(i); err != nil {
				return err
			}
		}
		if len(s.Sends)+len(s.Recvs) > 0 {
			st.Rounds++
			posted, err := bd.wires(i)
			if err != nil {
				return err
			}
			if posted {
				pending = append(pending, i)
			}
		}
		if later {
			fork, done := bd.event(), bd.event()
			bd.emit(Cmd{Kind: Record, Stream: Compute, Event: fork, Round: i})
			bd.emit(Cmd{Kind: Wait, Stream: Side, Event: fork, Round: i})
			bd.stream = Side
			err := bd.copies(i)
			bd.stream = Compute
			if err != nil {
				return err
			}
			bd.emit(Cmd{Kind: Record, Stream: Side, Event: done, Round: i})
			bd.side = append(bd.side, sideCopy{done: done, rd: sp.copyRd, wr: sp.copyWr})
		}
	}
	for _, i := range pending {
		bd.drain(i)
	}
	for _, sc := range bd.side {
		bd.emit(Cmd{Kind: Wait, Stream: Compute, Event: sc.done, Round: len(p.Rounds) - 1})
	}
	bd.side = nil
	return bd.selfEnd()
}

// join makes the compute stream wait for the side copies whose bytes round
// i (or the unpacks of the rounds it drains) touches: a side copy's writes
// that the round reads or writes, or its reads that the round writes.
func (bd *builder) join(i int, drained []int) error {
	if len(bd.side) == 0 {
		return nil
	}
	sp, err := bd.roundSpans(i)
	if err != nil {
		return err
	}
	unpacked := spans{}
	for _, d := range drained {
		dsp, err := bd.roundSpans(d)
		if err != nil {
			return err
		}
		for _, v := range dsp.recvWr {
			unpacked.insert(v)
		}
	}
	keep := bd.side[:0]
	for _, sc := range bd.side {
		touched := false
		for _, v := range sc.wr {
			touched = touched || sp.copyRd.overlaps(v) || sp.sendRd.overlaps(v) || sp.copyWr.overlaps(v) ||
				sp.recvWr.overlaps(v) || unpacked.overlaps(v)
		}
		for _, v := range sc.rd {
			touched = touched || sp.copyWr.overlaps(v) || sp.recvWr.overlaps(v) || unpacked.overlaps(v)
		}
		if touched {
			bd.emit(Cmd{Kind: Wait, Stream: Compute, Event: sc.done, Round: i})
			continue
		}
		keep = append(keep, sc)
	}
	bd.side = keep
	return nil
}

// drain makes the compute stream wait for round i's groups and unpacks what
// they staged.
func (bd *builder) drain(i int) {
	for _, e := range bd.pl.Done[i] {
		bd.emit(Cmd{Kind: Wait, Stream: Compute, Event: e, Round: i})
	}
	if k, ok := bd.unpacks[i]; ok {
		bd.launch(i, k)
	}
}

// launch emits batch k, splitting off as memcpys the items that are one
// large contiguous run on both sides.
func (bd *builder) launch(round, k int) {
	items := bd.pl.Batches[k]
	keep := items[:0]
	var big []Copy
	for _, it := range items {
		if bd.opts.MemcpyMin > 0 && it.SrcAt.Contiguous() && it.DstAt.Contiguous() && it.SrcAt.Run >= bd.opts.MemcpyMin {
			big = append(big, it)
			continue
		}
		keep = append(keep, it)
	}
	bd.pl.Batches[k] = keep
	if len(keep) > 0 {
		bd.emit(Cmd{Kind: Batch, Stream: bd.stream, Batch: k, Round: round})
	}
	for _, it := range big {
		bd.emit(Cmd{Kind: Memcpy, Stream: bd.stream, Dst: it.Dst + uint64(it.DstAt.Offset), Src: it.Src + uint64(it.SrcAt.Offset), Len: it.SrcAt.Run, Round: round})
	}
}

// newBatch adds an empty batch and returns its index.
func (bd *builder) newBatch() int {
	bd.pl.Batches = append(bd.pl.Batches, nil)
	return len(bd.pl.Batches) - 1
}

// add appends an item to batch k, merging it into the previous item when
// both are contiguous and it continues that item on both sides, in the same
// buffers: a memcpy must not span two allocations (the driver refuses it),
// however adjacent their addresses.
func (bd *builder) add(k int, c Copy) {
	if c.SrcAt.Bytes() == 0 {
		return
	}
	items := bd.pl.Batches[k]
	if n := len(items); n > 0 && c.SrcAt.Contiguous() && c.DstAt.Contiguous() {
		last := &items[n-1]
		if last.SrcAt.Contiguous() && last.DstAt.Contiguous() && last.Src == c.Src && last.Dst == c.Dst &&
			last.Src+uint64(last.SrcAt.Offset+last.SrcAt.Run) == c.Src+uint64(c.SrcAt.Offset) &&
			last.Dst+uint64(last.DstAt.Offset+last.DstAt.Run) == c.Dst+uint64(c.DstAt.Offset) {
			last.SrcAt.Run += c.SrcAt.Run
			last.DstAt.Run += c.SrcAt.Run
			return
		}
	}
	bd.pl.Batches[k] = append(items, c)
}

// region resolves a region of this rank's buffers and checks it lies inside
// its buffer.
func (bd *builder) region(round int, op string, r program.Region) (uint64, error) {
	var sp Span
	kind := "source"
	switch r.Buf {
	case reshard.BufSrc:
		sp = bd.b.Tensors[r.Tensor][0]
	case reshard.BufDst:
		sp, kind = bd.b.Tensors[r.Tensor][1], "destination"
	case reshard.BufFull:
		if int(r.Tensor) < len(bd.b.Full) {
			sp = bd.b.Full[r.Tensor]
		}
		kind = "whole-tensor scratch"
	}
	if end := extent(r.At); end > sp.Len || (sp.Addr == 0 && end > 0) {
		return 0, fmt.Errorf("replay: rank %d, round %d, tensor %s: %s: %s region %v reaches byte %d of a %d-byte buffer",
			bd.p.Rank, round, bd.tensor(int(r.Tensor)), op, kind, r.At, end, sp.Len)
	}
	return sp.Addr, nil
}

func (bd *builder) tensor(t int) string {
	if s := bd.p.Schedule(); s != nil && t < len(s.TensorNames) && s.TensorNames[t] != "" {
		return fmt.Sprintf("%q", s.TensorNames[t])
	}
	return fmt.Sprint(t)
}

// wires emits round i's packs, groups and events, and prepares its unpack
// batch for the drain. It reports whether the round posted any group.
func (bd *builder) wires(i int) (bool, error) {
	p, s, st := bd.p, &bd.p.Rounds[i], &bd.pl.Stats
	slot := s.Index % 2
	var ops [2][]P2P // by communicator: network, local
	var packs, unpacks []Copy
	var quants []QuantOp
	for dir, list := range [][]program.Wire{s.Recvs, s.Sends} {
		send := dir == 1
		for wi := range list {
			w := &list[wi]
			what := "receive from"
			if send {
				what = "send to"
				st.Sent[w.Class] += w.Bytes
			} else {
				st.Recv[w.Class] += w.Bytes
			}
			st.Messages += len(w.Parts)
			op := fmt.Sprintf("%s rank %d", what, w.Peer)
			var addr uint64
			switch w.Mode {
			case program.WireDirect:
				a, err := bd.region(s.Index, op, w.Region)
				if err != nil {
					return false, err
				}
				if w.Region.At.Run != w.Bytes {
					return false, fmt.Errorf("replay: rank %d, round %d: %s: a direct operation of %d bytes over a region of %d",
						p.Rank, s.Index, op, w.Bytes, w.Region.At.Run)
				}
				addr = a + uint64(w.Region.At.Offset)
			case program.WireStaged:
				sp := bd.b.Staging[slot][1-dir]
				if w.StagingOff < 0 || w.StagingOff+w.Bytes > sp.Len {
					return false, fmt.Errorf("replay: rank %d, round %d: %s: staging [%d, %d) outside %d bytes",
						p.Rank, s.Index, op, w.StagingOff, w.StagingOff+w.Bytes, sp.Len)
				}
				addr = sp.Addr + uint64(w.StagingOff)
				st.Packed += w.Bytes
				off := w.StagingOff
				for _, pt := range w.Parts {
					if send && pt.Quant {
						q, cp, n, err := bd.quantOp(s.Index, op, pt.Msg, pt.Regions, sp.Addr+uint64(off))
						if err != nil {
							return false, err
						}
						off += n
						if off > w.StagingOff+w.Bytes {
							return false, fmt.Errorf("replay: rank %d, round %d: %s: parts of more than %d bytes", p.Rank, s.Index, op, w.Bytes)
						}
						if cp != nil {
							packs = append(packs, *cp)
						} else {
							quants = append(quants, *q)
						}
						continue
					}
					for _, r := range pt.Regions {
						a, err := bd.region(s.Index, op, r)
						if err != nil {
							return false, err
						}
						n := r.At.Bytes()
						if off+n > w.StagingOff+w.Bytes {
							return false, fmt.Errorf("replay: rank %d, round %d: %s: parts of more than %d bytes", p.Rank, s.Index, op, w.Bytes)
						}
						at := strided.Desc{Offset: off, Run: n}
						if send {
							packs = append(packs, Copy{Dst: sp.Addr, DstAt: at, Src: a, SrcAt: r.At})
						} else {
							unpacks = append(unpacks, Copy{Dst: a, DstAt: r.At, Src: sp.Addr, SrcAt: at})
						}
						off += n
					}
				}
			default:
				return false, fmt.Errorf("replay: rank %d, round %d: %s: %s operations cannot be replayed (NCCL moves contiguous bytes only)",
					p.Rank, s.Index, op, w.Mode)
			}
			if w.Bytes == 0 {
				continue
			}
			class := w.Class
			if bd.opts.Class != nil {
				class = bd.opts.Class(w.Peer)
			}
			c := 0
			if class != reshard.LinkNetwork {
				c = 1
			}
			ops[c] = append(ops[c], P2P{Peer: w.Peer, Send: send, Addr: addr, Len: w.Bytes})
		}
	}
	return bd.post(i, packs, unpacks, quants, ops), nil
}

// post emits round i's packs (and quantizes), the event that marks them
// done, and one group per communicator of its operations, and prepares its
// unpack batch for the drain. It reports whether the round posted any
// group.
func (bd *builder) post(i int, packs, unpacks []Copy, quants []QuantOp, ops [2][]P2P) bool {
	if len(packs) > 0 {
		k := bd.newBatch()
		for _, c := range packs {
			bd.add(k, c)
		}
		bd.launch(i, k)
	}
	for _, q := range quants {
		bd.quantize(i, q)
	}
	if len(unpacks) > 0 {
		k := bd.newBatch()
		for _, c := range unpacks {
			bd.add(k, c)
		}
		bd.unpacks[i] = k
	}
	if len(ops[0])+len(ops[1]) == 0 {
		if len(unpacks) > 0 {
			bd.launch(i, bd.unpacks[i]) // nothing to wait for
			delete(bd.unpacks, i)
		}
		return false
	}
	ready := bd.event()
	bd.emit(Cmd{Kind: Record, Stream: Compute, Event: ready, Round: i})
	for c, list := range ops {
		if len(list) == 0 {
			continue
		}
		stream := Net
		if c == 1 {
			stream = Local
		}
		done := bd.event()
		bd.emit(Cmd{Kind: Wait, Stream: stream, Event: ready, Round: i})
		bd.emit(Cmd{Kind: Group, Stream: stream, Ops: list, Round: i})
		bd.emit(Cmd{Kind: Record, Stream: stream, Event: done, Round: i})
		bd.pl.Done[i] = append(bd.pl.Done[i], done)
	}
	return true
}

// quantOp resolves the quantize-while-packing of message msg, whose one
// source region is regs[0], into the n bytes at dst: a Quantize with the
// step's scales, or for a self-scaled tensor its part's Fuse or a copy out
// of its FP8Part (selfMessage).
func (bd *builder) quantOp(round int, op string, msg int32, regs []program.Region, dst uint64) (q *QuantOp, cp *Copy, n int64, err error) {
	sched := bd.p.Schedule()
	if len(regs) != 1 || sched == nil || int(msg) >= len(sched.Messages) {
		return nil, nil, 0, fmt.Errorf("replay: rank %d, round %d: %s: a message converting to FP8 needs its one source region and its box (%d regions)",
			bd.p.Rank, round, op, len(regs))
	}
	r := regs[0]
	if int(r.Tensor) >= len(bd.b.Quant) || bd.b.Quant[r.Tensor].Grid.NDim() == 0 {
		return nil, nil, 0, fmt.Errorf("replay: rank %d, round %d, tensor %s: %s converts to FP8, but the buffers hold no scales for it",
			bd.p.Rank, round, bd.tensor(int(r.Tensor)), op)
	}
	qt := bd.b.Quant[r.Tensor]
	box := sched.Messages[msg].Box
	if qt.Self {
		q, cp, err = bd.selfMessage(int(r.Tensor), box, dst)
		return q, cp, box.Elems(), err
	}
	a, err := bd.region(round, op, r)
	if err != nil {
		return nil, nil, 0, err
	}
	if blocks, err := qt.Grid.Blocks(box); err != nil || !qt.Blocks.Contains(blocks) {
		return nil, nil, 0, fmt.Errorf("replay: rank %d, round %d, tensor %s: %s: the scales cover blocks %v, the message's box %v needs %v (%v)",
			bd.p.Rank, round, bd.tensor(int(r.Tensor)), op, qt.Blocks, box, blocks, err)
	}
	if need := 4 * qt.Blocks.Elems(); qt.Scales.Len < need || qt.Scales.Addr == 0 {
		return nil, nil, 0, fmt.Errorf("replay: rank %d, tensor %s: a scale window of %d bytes for %d blocks", bd.p.Rank, bd.tensor(int(r.Tensor)), qt.Scales.Len, qt.Blocks.Elems())
	}
	return &QuantOp{Tensor: int(r.Tensor), Box: box, Src: a, SrcAt: r.At, Dst: dst}, nil, box.Elems(), nil
}

// quantize emits a Quantize command on the current stream.
func (bd *builder) quantize(round int, q QuantOp) {
	bd.pl.Quants = append(bd.pl.Quants, q)
	kind := Quantize
	if q.Fused {
		kind = Fuse
	}
	bd.emit(Cmd{Kind: kind, Stream: bd.stream, Quant: len(bd.pl.Quants) - 1, Round: round})
}
