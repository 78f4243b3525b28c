package refit

import (
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"slices"
	"time"

	"github.com/m2n-dev/m2n/control"
	"github.com/m2n-dev/m2n/reshard"
	"github.com/m2n-dev/m2n/reshard/program"
	"github.com/m2n-dev/m2n/strided"
	"github.com/m2n-dev/m2n/transport"
)

// hostDriver (NewHostDriver) moves a compiled program's steps round by round from the
// host, over a Transport and a Memory: it does each round's local copies,
// packs what it stages, posts the round's operations, and completes the
// round two behind, unpacking and checksumming as it goes. It is the
// driver of every call on CPUs, and on GPUs of the calls the host must see
// (Verify reads every message back; FP8 quantizes while packing). It keeps
// its staging and scratch between steps; Close frees them. It is not safe
// for concurrent use (the runtime runs one step at a time).
type hostDriver struct {
	prog    *program.Program
	t       transport.Transport
	mem     transport.Memory
	timeout time.Duration
	// staging, grown on demand and kept between steps: [slot][0 send, 1 recv]
	staging [2][2]transport.Buffer
	// scratch holds whole-tensor buffers (BufFull) kept between steps, by
	// tensor index.
	scratch []transport.Buffer
	// local is the bounce buffer of local copies that cannot go straight
	// from source to destination, grown on demand and kept between steps:
	// an allocation per copy would cost a device allocation and free (which
	// waits for the device) per tensor on a GPU.
	local transport.Buffer
}

// NewHostDriver returns the host driver of program p over t and mem;
// timeout bounds every wait for a round (0: none), and a round that times
// out fails the step with a *control.TimeoutError naming the peers still owed
// (the caller must then abort the transport).
func NewHostDriver(p *program.Program, t transport.Transport, mem transport.Memory, timeout time.Duration) (Driver, error) {
	h, err := newHostDriver(p, t, mem, timeout)
	if err != nil {
		return nil, err
	}
	return h, nil
}

func newHostDriver(p *program.Program, t transport.Transport, mem transport.Memory, timeout time.Duration) (*hostDriver, error) {
	if t.Rank() != p.Rank || t.Size() != p.World {
		return nil, fmt.Errorf("refit: program of rank %d of %d on a transport of rank %d of %d", p.Rank, p.World, t.Rank(), t.Size())
	}
	return &hostDriver{prog: p, t: t, mem: mem, timeout: timeout}, nil
}

// Name returns "host".
func (h *hostDriver) Name() string { return string(DriverHost) }

// Move implements Driver: it returns when every operation of the program
// has completed and every byte this rank receives is in place. With
// in.Verify the memory must be a transport.RegionReader; a program that
// converts to FP8 needs in.quant and a transport.QuantMemory.
func (h *hostDriver) Move(ctx context.Context, in StepInput) (Stats, error) {
	var st Stats
	p, bufs := h.prog, in.Bufs
	if len(bufs) != len(p.Full) {
		return st, fmt.Errorf("refit: %d buffer pairs for a program of %d tensors", len(bufs), len(p.Full))
	}
	if len(p.Rounds) == 0 {
		return st, nil
	}
	d := hostStep{h: h, p: p, in: in, bufs: bufs, st: &st}
	if in.Verify {
		var ok bool
		if d.reader, ok = h.mem.(transport.RegionReader); !ok {
			return st, fmt.Errorf("refit: Verify needs a memory that can read regions back (%T cannot)", h.mem)
		}
	}
	if err := d.prepare(); err != nil {
		return st, err
	}
	err := twoDeep(p, func(i int) (inflight, bool, error) {
		f, err := d.start(&p.Rounds[i])
		return f, f.pending != nil, err
	}, func(f inflight) error { return d.complete(ctx, f) }, d.progress)
	if err != nil {
		return st, err
	}
	return st, h.mem.Sync()
}

// twoDeep runs the rounds of p in order, at most two schedule rounds
// deep: a round stages in slot Index%2, so before it starts a round it
// completes every round still in flight whose Index is two or more
// below, whose slot the new round reuses. start starts round i and says
// whether it left anything in flight (F) for complete; progress is called
// with a round's index once the round is complete. The rounds left in
// flight are completed at the end. The host and the delta moves share it.
func twoDeep[F any](p *program.Program, start func(i int) (F, bool, error), complete func(F) error, progress func(i int)) error {
	type posted struct {
		i int
		f F
	}
	var queue []posted
	for i := range p.Rounds {
		for len(queue) > 0 && p.Rounds[queue[0].i].Index <= p.Rounds[i].Index-2 {
			if err := complete(queue[0].f); err != nil {
				return err
			}
			progress(queue[0].i)
			queue = queue[1:]
		}
		f, pending, err := start(i)
		if err != nil {
			return err
		}
		if pending {
			queue = append(queue, posted{i, f})
		} else {
			progress(i)
		}
	}
	for _, q := range queue {
		if err := complete(q.f); err != nil {
			return err
		}
		progress(q.i)
	}
	return nil
}

// inflight is a posted round.
type inflight struct {
	st      *program.Round
	pending transport.Pending
	staging transport.Buffer // the round's receive staging
}

// hostStep is one step of a hostDriver in progress.
type hostStep struct {
	h      *hostDriver
	p      *program.Program
	in     StepInput
	bufs   []TensorBuffers
	st     *Stats
	reader transport.RegionReader
	full   []transport.Buffer
	moved  int64 // bytes of the steps completed so far
	done   int   // tensors done so far
	byStep []int // tensors done after each step (for Progress)
}

// progress reports round i's completion to the step's Progress.
func (d *hostStep) progress(i int) {
	if d.in.Progress == nil {
		return
	}
	if d.byStep == nil {
		d.byStep = make([]int, len(d.p.Rounds))
		for _, k := range d.p.Done {
			if k >= 0 {
				d.byStep[k]++
			}
		}
	}
	s := &d.p.Rounds[i]
	for _, c := range s.Copies {
		d.moved += c.Bytes
	}
	for _, list := range [][]program.Wire{s.Sends, s.Recvs} {
		for _, w := range list {
			d.moved += w.Bytes
		}
	}
	d.done += d.byStep[i]
	d.in.Progress(d.moved, d.done)
}

// prepare sizes the staging and the scratch the program needs, reusing
// what earlier runs allocated.
func (d *hostStep) prepare() error {
	h, p := d.h, d.p
	for slot := range h.staging {
		for dir := range h.staging[slot] {
			need := p.Staging[slot][dir]
			if b := h.staging[slot][dir]; need == 0 || (b != nil && b.Len() >= need) {
				continue
			}
			if b := h.staging[slot][dir]; b != nil {
				h.mem.Free(b)
				h.staging[slot][dir] = nil
			}
			b, err := h.mem.Alloc(need)
			if err != nil {
				return fmt.Errorf("refit: staging of %d bytes: %w", need, err)
			}
			h.staging[slot][dir] = b
		}
	}
	for len(h.scratch) < len(p.Full) {
		h.scratch = append(h.scratch, nil)
	}
	d.full = make([]transport.Buffer, len(p.Full))
	for t, n := range p.Full {
		if n == 0 {
			continue
		}
		if b := h.scratch[t]; b != nil && b.Len() == n {
			d.full[t] = b
			continue
		}
		if b := h.scratch[t]; b != nil {
			h.mem.Free(b)
			h.scratch[t] = nil
		}
		b, err := h.mem.Alloc(n)
		if err != nil {
			return fmt.Errorf("refit: scratch for tensor %s (%d bytes): %w", p.Schedule().TensorName(t), n, err)
		}
		d.full[t], h.scratch[t] = b, b
	}
	return nil
}

func (d *hostStep) buf(r program.Region) transport.Buffer {
	switch r.Buf {
	case reshard.BufSrc:
		return d.bufs[r.Tensor].Src
	case reshard.BufDst:
		return d.bufs[r.Tensor].Dst
	}
	return d.full[r.Tensor]
}

// bufStaging names, in a Region the driver checksums, the staging buffer
// passed to sum.
const bufStaging reshard.BufKind = 255

// sum returns the CRC-32C of the bytes of regions (a region of bufStaging is
// in staging).
func (d *hostStep) sum(regs []program.Region, staging transport.Buffer) (uint32, error) {
	crc := tagSeed(d.in.Tag)
	for _, r := range regs {
		b := make([]byte, r.At.Bytes())
		buf := staging
		if r.Buf != bufStaging {
			buf = d.buf(r)
		}
		if err := d.reader.ReadRegion(b, buf, r.At); err != nil {
			return 0, err
		}
		crc = crc32.Update(crc, castagnoli, b)
	}
	return crc, nil
}

// start does a round's local copies and posts its operations.
func (d *hostStep) start(s *program.Round) (inflight, error) {
	h, st := d.h, d.st
	for i := range s.Copies {
		cp := &s.Copies[i]
		sent, err := d.copyLocal(cp)
		if err != nil {
			return inflight{}, err
		}
		st.Sent[reshard.LinkSelf] += cp.Bytes
		st.Recv[reshard.LinkSelf] += cp.Bytes
		st.Messages++
		if d.in.Verify {
			if err := h.mem.Sync(); err != nil {
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
			st.sentSums = append(st.sentSums, checksum{cp.Msg, a})
			st.recvSums = append(st.recvSums, checksum{cp.Msg, b})
		}
	}
	if len(s.Sends)+len(s.Recvs) == 0 {
		return inflight{}, nil
	}
	slot := s.Index % 2
	sendStaging, recvStaging := h.staging[slot][0], h.staging[slot][1]
	ops := make([]transport.Op, 0, len(s.Sends)+len(s.Recvs))
	for i := range s.Recvs {
		w := &s.Recvs[i]
		ops = append(ops, d.op(w, false, recvStaging))
		st.Recv[w.Class] += w.Bytes
		st.Messages += len(w.Parts)
		if w.Mode == program.WireStaged {
			st.Packed += w.Bytes
		}
	}
	for i := range s.Sends {
		w := &s.Sends[i]
		if w.Mode == program.WireStaged {
			off := w.StagingOff
			for _, pt := range w.Parts {
				if pt.Quant {
					if err := d.packQuant(sendStaging, off, pt.Msg, pt.Regions[0]); err != nil {
						return inflight{}, err
					}
					off += d.p.Schedule().Messages[pt.Msg].Bytes
					continue
				}
				for _, r := range pt.Regions {
					if err := h.mem.Pack(sendStaging, off, d.buf(r), r.At); err != nil {
						return inflight{}, err
					}
					off += r.At.Bytes()
				}
			}
			st.Packed += w.Bytes
		}
		if d.in.Verify {
			if err := h.mem.Sync(); err != nil {
				return inflight{}, err
			}
			off := w.StagingOff
			for _, pt := range w.Parts {
				n := d.p.Schedule().Messages[pt.Msg].Bytes
				var crc uint32
				var err error
				if pt.Quant {
					// the FP8 bytes exist only in the staging
					crc, err = d.sum([]program.Region{{Buf: bufStaging, At: strided.Desc{Offset: off, Run: n}}}, sendStaging)
				} else {
					crc, err = d.sum(pt.Regions, nil)
				}
				if err != nil {
					return inflight{}, err
				}
				off += n
				st.sentSums = append(st.sentSums, checksum{pt.Msg, crc})
			}
		}
		ops = append(ops, d.op(w, true, sendStaging))
		st.Sent[w.Class] += w.Bytes
		st.Messages += len(w.Parts)
	}
	if err := h.mem.Sync(); err != nil {
		return inflight{}, err
	}
	pend, err := h.t.Start(ops)
	if err != nil {
		return inflight{}, fmt.Errorf("rank %d, round %d: %w", d.p.Rank, s.Index, err)
	}
	st.Rounds++
	return inflight{st: s, pending: pend, staging: recvStaging}, nil
}

// op turns a wire operation into the transport's.
func (d *hostStep) op(w *program.Wire, send bool, staging transport.Buffer) transport.Op {
	switch w.Mode {
	case program.WireDirect:
		return transport.Op{Peer: w.Peer, Send: send, Tag: d.in.Tag, Buf: d.buf(w.Region), Off: w.Region.At.Offset, Len: w.Bytes}
	case program.WireInPlace:
		return transport.Op{Peer: w.Peer, Send: send, Tag: d.in.Tag, Buf: d.buf(w.Region), Len: w.Bytes, InPlace: true, At: w.Region.At}
	}
	return transport.Op{Peer: w.Peer, Send: send, Tag: d.in.Tag, Buf: staging, Off: w.StagingOff, Len: w.Bytes}
}

// wait waits for posted round s of program p, bounded by the driver's
// timeout: a round that times out is a *control.TimeoutError naming the peers
// still owed and the tensors the round carries.
func (h *hostDriver) wait(ctx context.Context, p *program.Program, s *program.Round, pending transport.Pending) error {
	wctx, cancel := ctx, context.CancelFunc(func() {})
	if h.timeout > 0 {
		wctx, cancel = context.WithTimeout(ctx, h.timeout)
	}
	err := pending.Wait(wctx)
	cancel()
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) && h.timeout > 0 && ctx.Err() == nil {
			// a process stopped in the wait as long as the timeout saw
			// its deadline pass without its poll having seen the pause
			// (the stop fell between the poll and the deadline's test):
			// the poll says so now, before the peers are blamed.
			if err := transport.PollOnce(ctx); err != nil {
				return err
			}
			te := &control.TimeoutError{Rank: p.Rank, Round: s.Index, After: h.timeout, Peers: s.Peers()}
			if inc, ok := pending.(transport.Incompleter); ok {
				if te.Peers = inc.Incomplete(); len(te.Peers) == 0 {
					return nil // it completed as its deadline passed
				}
			}
			for _, list := range [][]program.Wire{s.Sends, s.Recvs} {
				for _, w := range list {
					for _, pt := range w.Parts {
						t := p.Schedule().TensorName(int(p.Schedule().Messages[pt.Msg].Tensor))
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
		return fmt.Errorf("rank %d, round %d: %w", p.Rank, s.Index, err)
	}
	return nil
}

// complete waits for a posted step, unpacks what it staged and checksums
// what it received.
func (d *hostStep) complete(ctx context.Context, f inflight) error {
	h, s := d.h, f.st
	if err := d.h.wait(ctx, d.p, s, f.pending); err != nil {
		return err
	}
	for i := range s.Recvs {
		w := &s.Recvs[i]
		if w.Mode == program.WireStaged {
			off := w.StagingOff
			for _, pt := range w.Parts {
				for _, r := range pt.Regions {
					if err := h.mem.Unpack(d.buf(r), r.At, f.staging, off); err != nil {
						return err
					}
					off += r.At.Bytes()
				}
			}
		}
		if d.in.Verify {
			if w.Mode == program.WireStaged {
				if err := h.mem.Sync(); err != nil {
					return err
				}
			}
			for _, pt := range w.Parts {
				crc, err := d.sum(pt.Regions, nil)
				if err != nil {
					return err
				}
				d.st.recvSums = append(d.st.recvSums, checksum{pt.Msg, crc})
			}
		}
	}
	return nil
}

// Close releases the driver's staging and scratch memory.
func (h *hostDriver) Close() error {
	for i, b := range h.scratch {
		if b != nil {
			h.mem.Free(b)
			h.scratch[i] = nil
		}
	}
	if h.local != nil {
		h.mem.Free(h.local)
		h.local = nil
	}
	for i := range h.staging {
		for j := range h.staging[i] {
			if h.staging[i][j] != nil {
				h.mem.Free(h.staging[i][j])
				h.staging[i][j] = nil
			}
		}
	}
	return nil
}

// copyLocal performs a message from this rank to itself. For a converting
// copy under Verify it returns the CRC-32C of the FP8 bytes it made.
func (d *hostStep) copyLocal(cp *program.Copy) (uint32, error) {
	mem := d.h.mem
	if cp.Quant && len(cp.To) == 1 && cp.To[0].At.Contiguous() && !d.in.Verify {
		// quantize straight into the destination
		return 0, d.packQuant(d.buf(cp.To[0]), cp.To[0].At.Offset, cp.Msg, cp.From[0])
	}
	if !cp.Quant && len(cp.From) == 1 && len(cp.To) == 1 {
		return 0, mem.Copy(d.buf(cp.To[0]), cp.To[0].At, d.buf(cp.From[0]), cp.From[0].At)
	}
	tmp, err := d.h.localBuffer(cp.Bytes)
	if err != nil {
		return 0, err
	}
	var crc uint32
	if cp.Quant {
		if err := d.packQuant(tmp, 0, cp.Msg, cp.From[0]); err != nil {
			return 0, err
		}
		if d.in.Verify {
			if err := mem.Sync(); err != nil {
				return 0, err
			}
			if crc, err = d.sum([]program.Region{{Buf: bufStaging, At: strided.Desc{Run: cp.Bytes}}}, tmp); err != nil {
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

// localBuffer returns the local bounce buffer, at least n bytes long. The
// copies that use it run one after another on the memory's stream, so one
// buffer serves them all.
func (h *hostDriver) localBuffer(n int64) (transport.Buffer, error) {
	if h.local != nil && h.local.Len() >= n {
		return h.local, nil
	}
	if h.local != nil {
		if err := h.mem.Sync(); err != nil { // the copies still reading it
			return nil, err
		}
		h.mem.Free(h.local)
		h.local = nil
	}
	b, err := h.mem.Alloc(n)
	if err != nil {
		return nil, fmt.Errorf("refit: bounce buffer of a local copy (%d bytes): %w", n, err)
	}
	h.local = b
	return b, nil
}

// packQuant quantizes the source region r of converting message msg (its
// box) into dst at off, with the tensor's scales from the step's
// Quant.
func (d *hostStep) packQuant(dst transport.Buffer, off int64, msg int32, r program.Region) error {
	m := &d.p.Schedule().Messages[msg]
	name := d.p.Schedule().TensorName(int(r.Tensor))
	qm, ok := d.h.mem.(transport.QuantMemory)
	if !ok {
		return fmt.Errorf("refit: rank %d, tensor %q converts to FP8, but memory %T cannot quantize (it is not a QuantMemory)", d.p.Rank, name, d.h.mem)
	}
	if int(r.Tensor) >= len(d.in.Quant) || d.in.Quant[r.Tensor].Grid.NDim() == 0 {
		return fmt.Errorf("refit: rank %d, tensor %q converts to FP8, but the executor has no scales for it (a converting program runs through a prepared call, which exchanges the scales)", d.p.Rank, name)
	}
	tq := &d.in.Quant[r.Tensor]
	if err := qm.QuantPack(tq.Grid, dst, off, transport.QuantRegion{DType: tq.DType, Buf: d.buf(r), At: r.At, Box: m.Box}, tq.Scales); err != nil {
		return fmt.Errorf("refit: rank %d, tensor %q: quantizing box %v: %w", d.p.Rank, name, m.Box, err)
	}
	return nil
}

// tagSeed is the CRC-32C every message checksum of a step starts from: the
// call's identity on the wire, so that the bytes of another call or step
// never verify.
func tagSeed(tag int32) uint32 {
	b := [4]byte{byte(tag), byte(tag >> 8), byte(tag >> 16), byte(tag >> 24)}
	return crc32.Update(0, castagnoli, b[:])
}
