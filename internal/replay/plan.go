// Package replay turns one rank's compiled program (a reshard.Program) and
// the addresses of its buffers into the commands that run a whole step on
// a GPU's streams with no host wait between rounds: batched copies, device
// memcpys, NCCL groups, and the events that order them across a compute
// stream and the network and local communicators' streams. It is pure Go:
// package refit/gpu executes a Plan on real streams (or captures it as a CUDA
// graph), and Simulate runs plans of every rank on the CPU in adversarial
// interleavings, so that the ordering is tested where there is no GPU.
//
// The ordering mirrors refit.HostDriver, the round-by-round host driver,
// with events in place of host waits. For each of the program's rounds
// (round k, staging slot k mod 2), on the compute stream:
//
//   - wait for the groups of every posted round k-2 or earlier and
//     unpack what they staged: their sends have read staging slot k mod 2
//     and their receives filled it, and a round's forwarding sends read data
//     received at least two rounds earlier (the schedule guarantees it);
//   - the round's local copies, in waves: a copy that reads bytes an earlier
//     copy of the wave writes, or writes bytes one reads, starts a new wave
//     (a launch after it);
//   - the packs of its staged sends, then an event;
//
// and on each communicator's stream, after that event, one group of the
// round's sends and receives over that communicator, then an event the
// compute stream waits on when it drains the round. Every stream's work
// joins the compute stream by the end, so the compute stream's completion is
// the step's.
package replay

import (
	"fmt"
	"slices"

	"github.com/m2n-dev/m2n/refit"
	"github.com/m2n-dev/m2n/reshard"
	"github.com/m2n-dev/m2n/reshard/program"
	"github.com/m2n-dev/m2n/strided"
)

// Stream names one of the three streams a plan runs on.
type Stream uint8

const (
	// Compute runs the copies, packs and unpacks (the Memory's stream).
	Compute Stream = iota
	// Net runs the groups of the communicator between domains.
	Net
	// Local runs the groups of the communicator inside a domain.
	Local
	// Side runs the local copies of a round that nothing of the round
	// waits for, beside everything else; the compute stream joins it
	// before an operation that touches their bytes, and at the end.
	Side
)

func (s Stream) String() string {
	switch s {
	case Compute:
		return "compute"
	case Net:
		return "net"
	case Local:
		return "local"
	case Side:
		return "side"
	}
	return fmt.Sprintf("stream(%d)", uint8(s))
}

// Span is a buffer: its device address and its length in bytes. The zero
// Span is no buffer.
type Span struct {
	Addr uint64
	Len  int64
}

// Buffers are the addresses a plan is built for: the step's tensor buffers
// and the replay's own staging and scratch (sized by NeedsOf).
type Buffers struct {
	// Tensors[t] are tensor t's source and destination buffers on this
	// rank (the zero Span where the rank holds no part).
	Tensors [][2]Span
	// Full[t] is tensor t's whole-tensor scratch, where the program needs
	// one.
	Full []Span
	// Staging[slot][dir] is the staging of rounds of that parity, for sends
	// (dir 0) and receives (dir 1).
	Staging [2][2]Span
	// Scratch holds the local copies whose two sides cut their bytes into
	// regions that do not pair up, packed and unpacked through it.
	Scratch Span
}

// Needs is the memory a program's replay needs beyond the tensor buffers.
type Needs struct {
	Staging [2][2]int64
	Full    []int64
	Scratch int64
}

// NeedsOf returns what a program's replay needs.
func NeedsOf(p *program.Program) Needs {
	n := Needs{Staging: p.Staging, Full: slices.Clone(p.Full)}
	for i := range p.Rounds {
		var s int64
		for _, cp := range p.Rounds[i].Copies {
			if !pairs(cp) {
				s += cp.Bytes
			}
		}
		n.Scratch = max(n.Scratch, s)
	}
	return n
}

// pairs reports whether a copy's regions pair up one to one (equal byte
// counts), so that each pair is one strided copy.
func pairs(cp program.Copy) bool {
	if len(cp.From) != len(cp.To) {
		return false
	}
	for i := range cp.From {
		if cp.From[i].At.Bytes() != cp.To[i].At.Bytes() {
			return false
		}
	}
	return true
}

// Copy is one item of a batched copy: the bytes SrcAt describes in the
// buffer at Src to the places DstAt describes in the buffer at Dst, in
// packed order.
type Copy struct {
	Dst   uint64
	DstAt strided.Desc
	Src   uint64
	SrcAt strided.Desc
}

// P2P is one point-to-point operation of a group: Len bytes at Addr sent to
// or received from Peer.
type P2P struct {
	Peer int
	Send bool
	Addr uint64
	Len  int64
}

// Kind is what a command does.
type Kind uint8

const (
	// Wait makes the stream wait for the last record of Event queued
	// before it (none: no wait).
	Wait Kind = iota
	// Record records Event on the stream.
	Record
	// Batch launches Batches[Batch] in one batched-copy launch.
	Batch
	// Memcpy copies Len contiguous bytes from Src to Dst.
	Memcpy
	// Group posts Ops as one NCCL group on the stream's communicator.
	Group
)

func (k Kind) String() string {
	return [...]string{"wait", "record", "batch", "memcpy", "group"}[k]
}

// Cmd is one command on one stream.
type Cmd struct {
	Kind     Kind
	Stream   Stream
	Event    int
	Batch    int
	Dst, Src uint64
	Len      int64
	Ops      []P2P
	// Round is the index in the program's Rounds of the round the command
	// belongs to.
	Round int
}

// Plan is one rank's step as stream commands, in the order the host queues
// them.
type Plan struct {
	Cmds    []Cmd
	Batches [][]Copy
	// Events is the number of distinct events the commands use.
	Events int
	// Done[i] are the events whose completion means round i's groups are
	// done (one per communicator the round uses; none for a round of local
	// copies only).
	Done [][]int
	// Stats is what the step moves, as the host driver counts it.
	Stats refit.Stats
}

// DefaultMemcpyMin is the size from which a contiguous local copy runs as a
// device memcpy rather than as an item of a batched copy: large enough that
// the launch between memcpys costs nothing beside the copy, and past the
// batched kernel's ~96% of a copy.
const DefaultMemcpyMin = 64 << 20

// Options configure Build.
type Options struct {
	// Class says which communicator carries the operations with a peer;
	// nil takes each wire's class from the program.
	Class func(peer int) reshard.LinkClass
	// MemcpyMin: contiguous copies of at least this many bytes (after
	// merging copies that continue one another) run as memcpys; 0 takes
	// DefaultMemcpyMin, negative never.
	MemcpyMin int64
}

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
	bd := &builder{p: p, b: b, opts: opts, pl: &Plan{Done: make([][]int, len(p.Rounds))}}
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
	return nil
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

// extent returns one past the last byte a descriptor touches (0 when it
// describes none).
func extent(at strided.Desc) int64 {
	if at.Bytes() == 0 {
		return 0
	}
	end := at.Offset + at.Run
	for i, c := range at.Count {
		end += (c - 1) * at.Stride[i]
	}
	return end
}

// ival is a half-open address interval.
type ival struct{ lo, hi uint64 }

// spans is a set of addresses, kept as sorted disjoint intervals.
type spans []ival

func (s spans) overlaps(q ival) bool {
	i, _ := slices.BinarySearchFunc(s, q.lo, func(v ival, lo uint64) int {
		if v.hi <= lo {
			return -1
		}
		return 1
	})
	return i < len(s) && s[i].lo < q.hi
}

func (s *spans) insert(q ival) {
	if q.lo >= q.hi {
		return
	}
	v := *s
	i, _ := slices.BinarySearchFunc(v, q.lo, func(x ival, lo uint64) int {
		if x.hi < lo {
			return -1
		}
		return 1
	})
	j := i
	for j < len(v) && v[j].lo <= q.hi {
		q.lo, q.hi = min(q.lo, v[j].lo), max(q.hi, v[j].hi)
		j++
	}
	*s = slices.Replace(v, i, j, q)
}

func span(base uint64, at strided.Desc) ival {
	if at.Bytes() == 0 {
		return ival{}
	}
	return ival{base + uint64(at.Offset), base + uint64(extent(at))}
}

// roundSpansOf are the bytes of one round: what its copies read and write,
// what its sends read (directly or through packs) and what its receives
// write (directly or through unpacks).
type roundSpansOf struct {
	copyRd, copyWr, sendRd, recvWr spans
}

// roundSpans returns round i's spans.
func (bd *builder) roundSpans(i int) (roundSpansOf, error) {
	s := &bd.p.Rounds[i]
	var sp roundSpansOf
	for _, cp := range s.Copies {
		for _, side := range []struct {
			regions []program.Region
			into    *spans
		}{{cp.From, &sp.copyRd}, {cp.To, &sp.copyWr}} {
			for _, r := range side.regions {
				a, err := bd.region(s.Index, "local copy", r)
				if err != nil {
					return sp, err
				}
				side.into.insert(span(a, r.At))
			}
		}
	}
	for dir, list := range [][]program.Wire{s.Sends, s.Recvs} {
		into := &sp.sendRd
		if dir == 1 {
			into = &sp.recvWr
		}
		for wi := range list {
			w := &list[wi]
			regions := []program.Region{w.Region}
			if w.Mode == program.WireStaged {
				regions = regions[:0]
				for _, pt := range w.Parts {
					regions = append(regions, pt.Regions...)
				}
			}
			for _, r := range regions {
				a, err := bd.region(s.Index, fmt.Sprintf("operation with rank %d", w.Peer), r)
				if err != nil {
					return sp, err
				}
				into.insert(span(a, r.At))
			}
		}
	}
	return sp, nil
}

// copiesAfter reports whether round i's copies may run on the side stream,
// after its packs and groups: it has both, no byte its copies write is a
// byte its sends read, and no byte its copies read is a byte its receives
// write. It returns the round's spans.
func (bd *builder) copiesAfter(i int) (bool, roundSpansOf, error) {
	s := &bd.p.Rounds[i]
	if len(s.Copies) == 0 || len(s.Sends)+len(s.Recvs) == 0 {
		return false, roundSpansOf{}, nil
	}
	sp, err := bd.roundSpans(i)
	if err != nil {
		return false, sp, err
	}
	for _, v := range sp.copyWr {
		if sp.sendRd.overlaps(v) {
			return false, sp, nil
		}
	}
	for _, v := range sp.copyRd {
		if sp.recvWr.overlaps(v) {
			return false, sp, nil
		}
	}
	return true, sp, nil
}

// copies emits round i's local copies in waves.
func (bd *builder) copies(i int) error {
	s := &bd.p.Rounds[i]
	if len(s.Copies) == 0 {
		return nil
	}
	// an op is one or more items that read rd and write wr.
	type op struct {
		items  []Copy
		rd, wr []ival
	}
	var ops []op
	scratch := uint64(0)
	for _, cp := range s.Copies {
		from := make([]uint64, len(cp.From))
		to := make([]uint64, len(cp.To))
		for k, r := range cp.From {
			a, err := bd.region(s.Index, "local copy", r)
			if err != nil {
				return err
			}
			from[k] = a
		}
		for k, r := range cp.To {
			a, err := bd.region(s.Index, "local copy", r)
			if err != nil {
				return err
			}
			to[k] = a
		}
		if pairs(cp) {
			o := op{}
			for k := range cp.From {
				c := Copy{Dst: to[k], DstAt: cp.To[k].At, Src: from[k], SrcAt: cp.From[k].At}
				o.items = append(o.items, c)
				o.rd = append(o.rd, span(c.Src, c.SrcAt))
				o.wr = append(o.wr, span(c.Dst, c.DstAt))
			}
			ops = append(ops, o)
			continue
		}
		// through the scratch: pack every source region, then unpack into
		// every destination region (the second op reads what the first
		// wrote, so it lands in a later wave).
		if bd.b.Scratch.Len < int64(scratch)+cp.Bytes {
			return fmt.Errorf("replay: rank %d, round %d: local copy scratch of %d bytes, the round needs %d",
				bd.p.Rank, s.Index, bd.b.Scratch.Len, int64(scratch)+cp.Bytes)
		}
		base := bd.b.Scratch.Addr + scratch
		pack, unpack := op{}, op{}
		off := int64(0)
		for k, r := range cp.From {
			c := Copy{Dst: base, DstAt: strided.Desc{Offset: off, Run: r.At.Bytes()}, Src: from[k], SrcAt: r.At}
			pack.items = append(pack.items, c)
			pack.rd = append(pack.rd, span(c.Src, c.SrcAt))
			pack.wr = append(pack.wr, span(c.Dst, c.DstAt))
			off += r.At.Bytes()
		}
		off = 0
		for k, r := range cp.To {
			c := Copy{Dst: to[k], DstAt: r.At, Src: base, SrcAt: strided.Desc{Offset: off, Run: r.At.Bytes()}}
			unpack.items = append(unpack.items, c)
			unpack.rd = append(unpack.rd, span(c.Src, c.SrcAt))
			unpack.wr = append(unpack.wr, span(c.Dst, c.DstAt))
			off += r.At.Bytes()
		}
		if off != cp.Bytes {
			return fmt.Errorf("replay: rank %d, round %d: local copy of %d bytes writes %d", bd.p.Rank, s.Index, cp.Bytes, off)
		}
		scratch += uint64(cp.Bytes)
		ops = append(ops, pack, unpack)
	}
	k := -1
	var rd, wr spans
	for _, o := range ops {
		conflict := false
		for _, r := range o.rd {
			conflict = conflict || wr.overlaps(r)
		}
		for _, w := range o.wr {
			conflict = conflict || rd.overlaps(w)
		}
		if k < 0 || conflict {
			if k >= 0 {
				bd.launch(i, k)
			}
			k = bd.newBatch()
			rd, wr = nil, nil
		}
		for _, c := range o.items {
			bd.add(k, c)
		}
		for _, r := range o.rd {
			rd.insert(r)
		}
		for _, w := range o.wr {
			wr.insert(w)
		}
	}
	bd.launch(i, k)
	return nil
}

// wires emits round i's packs, groups and events, and prepares its unpack
// batch for the drain. It reports whether the round posted any group.
func (bd *builder) wires(i int) (bool, error) {
	p, s, st := bd.p, &bd.p.Rounds[i], &bd.pl.Stats
	slot := s.Index % 2
	var ops [2][]P2P // by communicator: network, local
	var packs, unpacks []Copy
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
	if len(packs) > 0 {
		k := bd.newBatch()
		for _, c := range packs {
			bd.add(k, c)
		}
		bd.launch(i, k)
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
		return false, nil
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
	return true, nil
}
