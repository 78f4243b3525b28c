package reshard

import (
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"slices"
	"time"

	"github.com/m2n-dev/m2n/placement"
	"github.com/m2n-dev/m2n/strided"
)

// TensorBuffers are one rank's buffers for one tensor of a schedule: Src in
// the source layout (nil when the rank is not in the source mesh) and Dst in
// the destination layout (nil when not in the destination mesh). Each must be
// exactly the rank's local size, and they must not overlap.
//
// Scale is, for a tensor converted to FP8 in flight (Spec.Scale) on a rank
// of its destination mesh, the buffer that receives the rank's scale tensor
// every step: exactly Spec.ScaleBytes(rank) bytes, one little-endian
// float32 (weight_scale_inv) per block of Spec.ScaleBlocks(rank),
// row-major. It is nil everywhere else (and may be nil or empty for a
// destination part that is empty). Prepared.Run writes it; Executor.Run
// does not touch it.
type TensorBuffers struct {
	Src, Dst Buffer
	Scale    Buffer
}

// Stats counts what one rank moved in one Run.
type Stats struct {
	// Sent and Recv count bytes by link class; LinkSelf counts local copies.
	Sent, Recv [numLinkClasses]int64
	// Packed counts bytes that went through staging (packed before a send
	// or unpacked after a receive) rather than straight from or into a
	// tensor buffer.
	Packed   int64
	Messages int
	Rounds   int
	// SentSums and RecvSums hold, with Executor.Verify, the CRC-32C of
	// every message this rank sent (or copied) and received, by the
	// message's index in the schedule.
	SentSums, RecvSums []Checksum
}

// Checksum is the CRC-32C (Castagnoli) of one message's bytes.
type Checksum struct {
	Message int32
	CRC     uint32
}

// castagnoli is the CRC-32C table.
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Add accumulates o into s.
func (s *Stats) Add(o Stats) {
	for c := range s.Sent {
		s.Sent[c] += o.Sent[c]
		s.Recv[c] += o.Recv[c]
	}
	s.Packed += o.Packed
	s.Messages += o.Messages
	s.Rounds += o.Rounds
}

// Executor runs compiled programs on one rank over a Transport, with
// buffers from a Memory. It keeps its staging and scratch memory between
// runs; Close frees them. It is not safe for concurrent use: run one
// program at a time (a rank in several pipeline stages has one Executor per
// stage).
type Executor struct {
	T   Transport
	Mem Memory
	// Timeout bounds every wait for a round; 0 waits forever. A round that
	// times out fails the run with a *TimeoutError naming the peers still
	// owed; the caller must then Abort the transport.
	Timeout time.Duration
	// Verify makes the run checksum (CRC-32C) every message on both sides,
	// into Stats.SentSums and Stats.RecvSums, for the caller to compare
	// across ranks (see Prepared.Run). The memory must implement
	// RegionReader.
	Verify bool

	// Quant holds, per tensor of the program's schedule, what the run
	// needs to pack a tensor converted to FP8 (Part.Quant, Copy.Quant):
	// its grid and the global scales of the blocks this rank's source part
	// touches, loaded into Mem, which must be a QuantMemory. Prepared.Run
	// fills it every step (after the amax exchange) and clears it after.
	Quant []TensorQuant

	// Progress, if set, is called after every step of a run completes,
	// with the bytes this rank has moved so far in the run (sent,
	// received and copied) and the tensors it is done with. Under a
	// Runner it is called once, at the end.
	Progress func(bytes int64, tensors int)

	// Runner, if set, runs whole programs in place of the round-by-round
	// driver when Verify is off (Verify needs the host to read every
	// message): package nccl's Replay, which queues every round of a step
	// on the GPU's streams and waits once. Staging and scratch are then
	// the runner's own.
	Runner ProgramRunner

	// staging, grown on demand and kept between runs: [slot][0 send, 1 recv]
	staging [2][2]Buffer
	// scratch holds whole-tensor buffers (BufFull) kept between runs, by
	// tensor index.
	scratch []Buffer
}

// ProgramRunner runs a whole compiled program on its own (see
// Executor.Runner). RunProgram has Executor.Run's contract: it returns when
// every operation of the program has completed and every byte this rank
// receives is in place, with the same Stats (less the checksums); a round
// that does not complete within the runner's timeout is a *TimeoutError
// naming the rank, the round and its peers, after which the caller must
// Abort the transport.
type ProgramRunner interface {
	RunProgram(ctx context.Context, p *Program, bufs []TensorBuffers) (Stats, error)
}

// RegionReader is a Memory that can read a strided region of one of its
// buffers into host memory (for checksums).
type RegionReader interface {
	ReadRegion(dst []byte, src Buffer, at strided.Desc) error
}

// ReadRegion implements RegionReader.
func (HostMemory) ReadRegion(dst []byte, src Buffer, at strided.Desc) error {
	return HostMemory{}.Pack(HostBuffer(dst), 0, src, at)
}

// TimeoutError reports a wait that did not complete in time: a round of
// the data movement, or a collective of a call.
type TimeoutError struct {
	Rank    int
	Phase   string // what waited: "round 3", "agreement", ...; "" for a round
	Round   int
	After   time.Duration
	Peers   []int    // the ranks this rank still waits for (all of the round's peers if the transport cannot tell)
	Tensors []string // the tensors the round carries
}

func (e *TimeoutError) Error() string {
	if e.Phase != "" {
		return fmt.Sprintf("rank %d: timed out after %v waiting for ranks %v in the %s", e.Rank, e.After, e.Peers, e.Phase)
	}
	return fmt.Sprintf("rank %d: timed out after %v waiting for ranks %v in round %d (tensors %v)",
		e.Rank, e.After, e.Peers, e.Round, e.Tensors)
}

// ErrTimeout matches every *TimeoutError with errors.Is.
var ErrTimeout = errors.New("reshard: timed out")

// Is makes errors.Is(err, ErrTimeout) true.
func (e *TimeoutError) Is(target error) bool { return target == ErrTimeout }

// Incompleter is a Pending that can say which peers' operations have not
// completed yet.
type Incompleter interface {
	Incomplete() []int
}

// inflight is a posted step.
type inflight struct {
	st      *Step
	index   int // the step's index in the program
	pending Pending
	stage   Buffer // the round's receive staging
}

// Run executes a compiled program. bufs holds this rank's buffers, one
// entry per tensor of the program's schedule. It returns when every
// operation of the program has completed and every byte this rank
// receives is in place.
func (e *Executor) Run(ctx context.Context, p *Program, bufs []TensorBuffers) (Stats, error) {
	var st Stats
	if e.T.Rank() != p.Rank || e.T.Size() != p.World {
		return st, fmt.Errorf("reshard: program of rank %d of %d on a transport of rank %d of %d", p.Rank, p.World, e.T.Rank(), e.T.Size())
	}
	if len(bufs) != len(p.Full) {
		return st, fmt.Errorf("reshard: %d buffer pairs for a program of %d tensors", len(bufs), len(p.Full))
	}
	if len(p.Steps) == 0 {
		return st, nil
	}
	if e.Runner != nil && !e.Verify {
		st, err := e.Runner.RunProgram(ctx, p, bufs)
		if err == nil && e.Progress != nil {
			bytes, tensors := p.Moved()
			e.Progress(bytes, tensors)
		}
		return st, err
	}
	d := driver{e: e, p: p, bufs: bufs, st: &st}
	if e.Verify {
		var ok bool
		if d.reader, ok = e.Mem.(RegionReader); !ok {
			return st, fmt.Errorf("reshard: Verify needs a memory that can read regions back (%T cannot)", e.Mem)
		}
	}
	if err := d.prepare(); err != nil {
		return st, err
	}
	var queue []inflight
	for i := range p.Steps {
		s := &p.Steps[i]
		for len(queue) > 0 && queue[0].st.Round <= s.Round-2 {
			if err := d.complete(ctx, queue[0]); err != nil {
				return st, err
			}
			d.progress(queue[0].index)
			queue = queue[1:]
		}
		f, err := d.start(s)
		if err != nil {
			return st, err
		}
		f.index = i
		if f.pending != nil {
			queue = append(queue, f)
		} else {
			d.progress(i)
		}
	}
	for _, f := range queue {
		if err := d.complete(ctx, f); err != nil {
			return st, err
		}
		d.progress(f.index)
	}
	return st, e.Mem.Sync()
}

// RunSchedule compiles rank's part of s with dense views and runs it: a
// convenience for tests and one-off moves; a program that runs every step
// compiles once (Compile, or Prepare).
func (e *Executor) RunSchedule(ctx context.Context, s *Schedule, bufs []TensorBuffers) (Stats, error) {
	if e.T.Size() != s.World() {
		return Stats{}, fmt.Errorf("reshard: schedule for %d ranks on a communicator of %d", s.World(), e.T.Size())
	}
	needs, err := partNeeds(s, e.T.Rank(), nil)
	if err != nil {
		return Stats{}, err
	}
	if err := checkBuffers(s, e.T.Rank(), needs, bufs); err != nil {
		return Stats{}, err
	}
	p, err := Compile(s, e.T.Rank(), CompileOptions{MaxInPlace: MaxInPlace(e.T)})
	if err != nil {
		return Stats{}, err
	}
	return e.Run(ctx, p, bufs)
}

// driver is one Run in progress.
type driver struct {
	e      *Executor
	p      *Program
	bufs   []TensorBuffers
	st     *Stats
	reader RegionReader
	full   []Buffer
	moved  int64 // bytes of the steps completed so far
	done   int   // tensors done so far
	byStep []int // tensors done after each step (for Progress)
}

// progress reports step i's completion to the executor's Progress.
func (d *driver) progress(i int) {
	if d.e.Progress == nil {
		return
	}
	if d.byStep == nil {
		d.byStep = make([]int, len(d.p.Steps))
		for _, k := range d.p.Done {
			if k >= 0 {
				d.byStep[k]++
			}
		}
	}
	s := &d.p.Steps[i]
	for _, c := range s.Copies {
		d.moved += c.Bytes
	}
	for _, list := range [][]Wire{s.Sends, s.Recvs} {
		for _, w := range list {
			d.moved += w.Bytes
		}
	}
	d.done += d.byStep[i]
	d.e.Progress(d.moved, d.done)
}

// prepare sizes the staging and the scratch the program needs, reusing
// what earlier runs allocated.
func (d *driver) prepare() error {
	e, p := d.e, d.p
	for slot := range e.staging {
		for dir := range e.staging[slot] {
			need := p.Staging[slot][dir]
			if b := e.staging[slot][dir]; need == 0 || (b != nil && b.Len() >= need) {
				continue
			}
			if b := e.staging[slot][dir]; b != nil {
				e.Mem.Free(b)
				e.staging[slot][dir] = nil
			}
			b, err := e.Mem.Alloc(need)
			if err != nil {
				return fmt.Errorf("reshard: staging of %d bytes: %w", need, err)
			}
			e.staging[slot][dir] = b
		}
	}
	for len(e.scratch) < len(p.Full) {
		e.scratch = append(e.scratch, nil)
	}
	d.full = make([]Buffer, len(p.Full))
	for t, n := range p.Full {
		if n == 0 {
			continue
		}
		if b := e.scratch[t]; b != nil && b.Len() == n {
			d.full[t] = b
			continue
		}
		if b := e.scratch[t]; b != nil {
			e.Mem.Free(b)
			e.scratch[t] = nil
		}
		b, err := e.Mem.Alloc(n)
		if err != nil {
			return fmt.Errorf("reshard: scratch for tensor %s (%d bytes): %w", tensorName(p.sched, t), n, err)
		}
		d.full[t], e.scratch[t] = b, b
	}
	return nil
}

func (d *driver) buf(r Region) Buffer {
	switch r.Buf {
	case BufSrc:
		return d.bufs[r.Tensor].Src
	case BufDst:
		return d.bufs[r.Tensor].Dst
	}
	return d.full[r.Tensor]
}

// bufStage names, in a Region the driver checksums, the staging buffer
// passed to sum.
const bufStage BufKind = 255

// sum returns the CRC-32C of the bytes of regions (a region of bufStage is
// in stage).
func (d *driver) sum(regs []Region, stage Buffer) (uint32, error) {
	var crc uint32
	for _, r := range regs {
		b := make([]byte, r.At.Bytes())
		buf := stage
		if r.Buf != bufStage {
			buf = d.buf(r)
		}
		if err := d.reader.ReadRegion(b, buf, r.At); err != nil {
			return 0, err
		}
		crc = crc32.Update(crc, castagnoli, b)
	}
	return crc, nil
}

// start does a step's local copies and posts its operations.
func (d *driver) start(s *Step) (inflight, error) {
	e, st := d.e, d.st
	for i := range s.Copies {
		cp := &s.Copies[i]
		sent, err := d.copyLocal(cp)
		if err != nil {
			return inflight{}, err
		}
		st.Sent[LinkSelf] += cp.Bytes
		st.Recv[LinkSelf] += cp.Bytes
		st.Messages++
		if e.Verify {
			if err := e.Mem.Sync(); err != nil {
				return inflight{}, err
			}
			a := sent // a converting copy's bytes exist only once quantized
			if !cp.Quant {
				if a, err = d.sum(cp.From, nil); err != nil {
					return inflight{}, err
				}
			}
			b, err := d.sum(cp.To, nil)
			if err != nil {
				return inflight{}, err
			}
			st.SentSums = append(st.SentSums, Checksum{cp.Msg, a})
			st.RecvSums = append(st.RecvSums, Checksum{cp.Msg, b})
		}
	}
	if len(s.Sends)+len(s.Recvs) == 0 {
		return inflight{}, nil
	}
	slot := s.Round % 2
	sendStage, recvStage := e.staging[slot][0], e.staging[slot][1]
	ops := make([]Op, 0, len(s.Sends)+len(s.Recvs))
	for i := range s.Recvs {
		w := &s.Recvs[i]
		ops = append(ops, d.op(w, false, recvStage))
		st.Recv[w.Class] += w.Bytes
		st.Messages += len(w.Parts)
		if w.Mode == WireStaged {
			st.Packed += w.Bytes
		}
	}
	for i := range s.Sends {
		w := &s.Sends[i]
		if w.Mode == WireStaged {
			off := w.StageOff
			for _, pt := range w.Parts {
				if pt.Quant {
					if err := d.packQuant(sendStage, off, pt.Msg, pt.Regions[0]); err != nil {
						return inflight{}, err
					}
					off += d.p.sched.Messages[pt.Msg].Bytes
					continue
				}
				for _, r := range pt.Regions {
					if err := e.Mem.Pack(sendStage, off, d.buf(r), r.At); err != nil {
						return inflight{}, err
					}
					off += r.At.Bytes()
				}
			}
			st.Packed += w.Bytes
		}
		if e.Verify {
			if err := e.Mem.Sync(); err != nil {
				return inflight{}, err
			}
			off := w.StageOff
			for _, pt := range w.Parts {
				n := d.p.sched.Messages[pt.Msg].Bytes
				var crc uint32
				var err error
				if pt.Quant {
					// the FP8 bytes exist only in the staging
					crc, err = d.sum([]Region{{Buf: bufStage, At: strided.Desc{Offset: off, Run: n}}}, sendStage)
				} else {
					crc, err = d.sum(pt.Regions, nil)
				}
				if err != nil {
					return inflight{}, err
				}
				off += n
				st.SentSums = append(st.SentSums, Checksum{pt.Msg, crc})
			}
		}
		ops = append(ops, d.op(w, true, sendStage))
		st.Sent[w.Class] += w.Bytes
		st.Messages += len(w.Parts)
	}
	if err := e.Mem.Sync(); err != nil {
		return inflight{}, err
	}
	pend, err := e.T.Start(ops)
	if err != nil {
		return inflight{}, fmt.Errorf("rank %d, round %d: %w", d.p.Rank, s.Round, err)
	}
	st.Rounds++
	return inflight{st: s, pending: pend, stage: recvStage}, nil
}

// op turns a wire operation into the transport's.
func (d *driver) op(w *Wire, send bool, stage Buffer) Op {
	switch w.Mode {
	case WireDirect:
		return Op{Peer: w.Peer, Send: send, Buf: d.buf(w.Region), Off: w.Region.At.Offset, Len: w.Bytes}
	case WireInPlace:
		return Op{Peer: w.Peer, Send: send, Buf: d.buf(w.Region), Len: w.Bytes, InPlace: true, At: w.Region.At}
	}
	return Op{Peer: w.Peer, Send: send, Buf: stage, Off: w.StageOff, Len: w.Bytes}
}

// complete waits for a posted step, unpacks what it staged and checksums
// what it received.
func (d *driver) complete(ctx context.Context, f inflight) error {
	e, s := d.e, f.st
	wctx, cancel := ctx, context.CancelFunc(func() {})
	if e.Timeout > 0 {
		wctx, cancel = context.WithTimeout(ctx, e.Timeout)
	}
	err := f.pending.Wait(wctx)
	cancel()
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) && e.Timeout > 0 && ctx.Err() == nil {
			te := &TimeoutError{Rank: d.p.Rank, Round: s.Round, After: e.Timeout, Peers: peersOf(s)}
			if inc, ok := f.pending.(Incompleter); ok {
				te.Peers = inc.Incomplete()
			}
			for _, list := range [][]Wire{s.Sends, s.Recvs} {
				for _, w := range list {
					for _, pt := range w.Parts {
						t := tensorName(d.p.sched, int(d.p.sched.Messages[pt.Msg].Tensor))
						if !slices.Contains(te.Tensors, t) {
							te.Tensors = append(te.Tensors, t)
						}
					}
				}
			}
			return te
		}
		if cause := context.Cause(ctx); cause != nil && ctx.Err() != nil {
			return cause
		}
		return fmt.Errorf("rank %d, round %d: %w", d.p.Rank, s.Round, err)
	}
	for i := range s.Recvs {
		w := &s.Recvs[i]
		if w.Mode == WireStaged {
			off := w.StageOff
			for _, pt := range w.Parts {
				for _, r := range pt.Regions {
					if err := e.Mem.Unpack(d.buf(r), r.At, f.stage, off); err != nil {
						return err
					}
					off += r.At.Bytes()
				}
			}
		}
		if e.Verify {
			if w.Mode == WireStaged {
				if err := e.Mem.Sync(); err != nil {
					return err
				}
			}
			for _, pt := range w.Parts {
				crc, err := d.sum(pt.Regions, nil)
				if err != nil {
					return err
				}
				d.st.RecvSums = append(d.st.RecvSums, Checksum{pt.Msg, crc})
			}
		}
	}
	return nil
}

// tensorName names tensor i of a schedule in errors: its TensorNames entry
// if the schedule has one, else "tensor i".
func tensorName(s *Schedule, i int) string {
	if s != nil && i < len(s.TensorNames) && s.TensorNames[i] != "" {
		return s.TensorNames[i]
	}
	return fmt.Sprintf("tensor %d", i)
}

// Close releases the executor's staging and scratch memory.
func (e *Executor) Close() {
	for i, b := range e.scratch {
		if b != nil {
			e.Mem.Free(b)
			e.scratch[i] = nil
		}
	}
	for i := range e.staging {
		for j := range e.staging[i] {
			if e.staging[i][j] != nil {
				e.Mem.Free(e.staging[i][j])
				e.staging[i][j] = nil
			}
		}
	}
}

// copyLocal performs a message from this rank to itself. For a converting
// copy under Verify it returns the CRC-32C of the FP8 bytes it made.
func (d *driver) copyLocal(cp *Copy) (uint32, error) {
	mem := d.e.Mem
	if cp.Quant && len(cp.To) == 1 && cp.To[0].At.Contiguous() && !d.e.Verify {
		// quantize straight into the destination
		return 0, d.packQuant(d.buf(cp.To[0]), cp.To[0].At.Offset, cp.Msg, cp.From[0])
	}
	if !cp.Quant && len(cp.From) == 1 && len(cp.To) == 1 {
		return 0, mem.Copy(d.buf(cp.To[0]), cp.To[0].At, d.buf(cp.From[0]), cp.From[0].At)
	}
	tmp, err := mem.Alloc(cp.Bytes)
	if err != nil {
		return 0, err
	}
	defer mem.Free(tmp)
	var crc uint32
	if cp.Quant {
		if err := d.packQuant(tmp, 0, cp.Msg, cp.From[0]); err != nil {
			return 0, err
		}
		if d.e.Verify {
			if err := mem.Sync(); err != nil {
				return 0, err
			}
			if crc, err = d.sum([]Region{{Buf: bufStage, At: strided.Desc{Run: cp.Bytes}}}, tmp); err != nil {
				return 0, err
			}
		}
	} else {
		off := int64(0)
		for _, r := range cp.From {
			if err := mem.Pack(tmp, off, d.buf(r), r.At); err != nil {
				return 0, err
			}
			off += r.At.Bytes()
		}
	}
	off := int64(0)
	for _, r := range cp.To {
		if err := mem.Unpack(d.buf(r), r.At, tmp, off); err != nil {
			return 0, err
		}
		off += r.At.Bytes()
	}
	return crc, nil
}

// packQuant quantizes the source region r of converting message msg (its
// box) into dst at off, with the tensor's scales from the executor's
// Quant.
func (d *driver) packQuant(dst Buffer, off int64, msg int32, r Region) error {
	m := &d.p.sched.Messages[msg]
	name := tensorName(d.p.sched, int(r.Tensor))
	qm, ok := d.e.Mem.(QuantMemory)
	if !ok {
		return fmt.Errorf("reshard: rank %d, tensor %q converts to FP8, but memory %T cannot quantize (it is not a QuantMemory)", d.p.Rank, name, d.e.Mem)
	}
	if int(r.Tensor) >= len(d.e.Quant) || d.e.Quant[r.Tensor].Grid.NDim() == 0 {
		return fmt.Errorf("reshard: rank %d, tensor %q converts to FP8, but the executor has no scales for it (run the call through Prepared.Run)", d.p.Rank, name)
	}
	tq := &d.e.Quant[r.Tensor]
	if err := qm.QuantPack(tq.Grid, dst, off, QuantRegion{DType: tq.DType, Buf: d.buf(r), At: r.At, Box: m.Box}, tq.Scales); err != nil {
		return fmt.Errorf("reshard: rank %d, tensor %q: quantizing box %v: %w", d.p.Rank, name, m.Box, err)
	}
	return nil
}

// partNeed is what one side of one tensor needs of this rank's buffer:
// whether the rank holds a part, the bytes the buffer must have (exactly,
// for a dense part; at least, for a view), and where the part's bytes sit
// in it (for the aliasing check).
type partNeed struct {
	in    bool
	want  int64
	exact bool
	at    strided.Desc // the whole part through its view
}

// partNeeds derives, once, what this rank's buffers must be for the
// schedule's tensors under views (nil: dense).
func partNeeds(s *Schedule, rank int, views []TensorViews) ([][2]partNeed, error) {
	out := make([][2]partNeed, len(s.Plans))
	for i, p := range s.Plans {
		var tv TensorViews
		if i < len(views) {
			tv = views[i]
		}
		for side, l := range []placement.Layout{p.Src(), p.Dst()} {
			v := tv.Src
			if side == 1 {
				v = tv.Dst
			}
			box, in := l.RankBox(rank)
			n := partNeed{in: in, exact: v.Dense()}
			if !in {
				out[i][side] = n
				continue
			}
			n.want = l.LocalBytes(rank)
			if !n.exact {
				ext, err := v.Extent(box.Shape())
				if err != nil {
					return nil, &BufferError{Rank: rank, Tensor: tensorName(s, i), Side: sideName(side), Why: err.Error(), Got: -1}
				}
				n.want = ext * l.ElemSize()
			}
			if !box.Empty() {
				n.at = strided.DescribeView(box, box, l.ElemSize(), v)
			}
			out[i][side] = n
		}
	}
	return out, nil
}

// checkBuffers validates one rank's buffers against what the parts need.
func checkBuffers(s *Schedule, rank int, needs [][2]partNeed, bufs []TensorBuffers) error {
	if len(bufs) != len(needs) {
		return fmt.Errorf("reshard: %d buffer pairs for a schedule of %d tensors", len(bufs), len(needs))
	}
	for i := range needs {
		for side, b := range []Buffer{bufs[i].Src, bufs[i].Dst} {
			n := needs[i][side]
			name := sideName(side)
			switch {
			case n.in && b == nil:
				return &BufferError{Rank: rank, Tensor: tensorName(s, i), Side: name, Why: "is missing (the rank is in the mesh)", Want: n.want, Got: -1}
			case !n.in && b != nil && b.Len() != 0:
				return &BufferError{Rank: rank, Tensor: tensorName(s, i), Side: name, Why: "is given but the rank is not in the mesh", Want: 0, Got: b.Len()}
			case n.in && b.Len() < n.want:
				return &BufferError{Rank: rank, Tensor: tensorName(s, i), Side: name, Why: "is too short", Want: n.want, Got: b.Len()}
			case n.in && n.exact && b.Len() > n.want:
				return &BufferError{Rank: rank, Tensor: tensorName(s, i), Side: name, Why: "is too long", Want: n.want, Got: b.Len()}
			}
		}
	}
	return nil
}

// BufferError reports a local buffer that does not match its layout.
type BufferError struct {
	Rank      int
	Tensor    string // the tensor's name
	Side      string // "source" or "destination"
	Why       string
	Want, Got int64 // bytes; Got is -1 for a missing buffer
}

func (e *BufferError) Error() string {
	if e.Got < 0 {
		return fmt.Sprintf("rank %d, tensor %q: %s buffer %s (want %d bytes)", e.Rank, e.Tensor, e.Side, e.Why, e.Want)
	}
	return fmt.Sprintf("rank %d, tensor %q: %s buffer %s: %d bytes, the layout needs %d", e.Rank, e.Tensor, e.Side, e.Why, e.Got, e.Want)
}
