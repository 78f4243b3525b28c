package reshard

import (
	"context"
	"fmt"
)

// TensorBuffers are one rank's buffers for one tensor of a schedule: Src in
// the source layout (nil when the rank is not in the source mesh) and Dst in
// the destination layout (nil when not in the destination mesh). Each must be
// exactly the rank's local size, and they must not overlap.
type TensorBuffers struct {
	Src, Dst Buffer
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
}

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

// Executor runs schedules on one rank over a Transport, with buffers from a
// Memory. It is not safe for concurrent use; run one schedule at a time.
type Executor struct {
	T   Transport
	Mem Memory

	// staging, grown on demand and kept between runs: [slot][0 send, 1 recv]
	staging [2][2]Buffer
	// scratch holds whole-tensor buffers (BufFull) kept between runs, by
	// tensor index.
	scratch []Buffer
}

// roundWork is what this rank does in one round.
type roundWork struct {
	round  int
	copies []*Message
	sends  []*Message
	recvs  []*Message
}

// inflight is a posted round and the receives to unpack once it completes.
type inflight struct {
	round   int
	pending Pending
	unpacks []unpack
	stage   Buffer // the round's receive staging
}

type unpack struct {
	to  []Segment
	off int64 // in the round's receive staging
}

// Run executes this rank's part of the schedule. bufs holds one entry per
// tensor of the schedule. It returns when every message this rank sends or
// receives has completed and every byte it receives is in place.
func (e *Executor) Run(ctx context.Context, s *Schedule, bufs []TensorBuffers) (Stats, error) {
	var st Stats
	rank := e.T.Rank()
	if e.T.Size() != s.World() {
		return st, fmt.Errorf("reshard: schedule for %d ranks on a communicator of %d", s.World(), e.T.Size())
	}
	if err := checkBuffers(s, rank, bufs); err != nil {
		return st, err
	}
	work := rankWork(s, rank)
	if len(work) == 0 {
		return st, nil
	}
	full, err := e.allocFull(s, rank, work)
	if err != nil {
		return st, err
	}
	resolve := func(sg Segment) Buffer {
		switch sg.Buf {
		case BufSrc:
			return bufs[sg.Tensor].Src
		case BufDst:
			return bufs[sg.Tensor].Dst
		}
		return full[sg.Tensor]
	}
	maxInPlace := int64(0)
	if ip, ok := e.T.(InPlaceTransport); ok {
		maxInPlace = ip.MaxInPlaceBytes()
	}
	// inPlace reports whether a message's one strided segment can go to
	// the transport as it is.
	inPlace := func(segs []Segment, n int64) bool {
		return len(segs) == 1 && n <= maxInPlace && n > 0
	}
	var queue []inflight
	complete := func(f inflight) error {
		if err := f.pending.Wait(ctx); err != nil {
			return fmt.Errorf("rank %d, round %d: %w", rank, f.round, err)
		}
		for _, u := range f.unpacks {
			if err := e.scatter(u.to, f.stage, u.off, resolve); err != nil {
				return err
			}
		}
		return nil
	}
	for _, w := range work {
		for len(queue) > 0 && queue[0].round <= w.round-2 {
			if err := complete(queue[0]); err != nil {
				return st, err
			}
			queue = queue[1:]
		}
		for _, m := range w.copies {
			if err := e.copyLocal(m, resolve); err != nil {
				return st, err
			}
			st.Sent[LinkSelf] += m.Bytes
			st.Recv[LinkSelf] += m.Bytes
		}
		if len(w.sends)+len(w.recvs) == 0 {
			continue
		}
		slot := w.round % 2
		// size the round's staging first: buffers in flight are never
		// reallocated.
		var recvNeed, sendNeed int64
		for _, m := range w.recvs {
			if _, _, ok := direct(m.To, resolve); !ok && !inPlace(m.To, m.Bytes) {
				recvNeed += m.Bytes
			}
		}
		for _, m := range w.sends {
			if _, _, ok := direct(m.From, resolve); !ok && !inPlace(m.From, m.Bytes) {
				sendNeed += m.Bytes
			}
		}
		recvStage, err := e.stage(slot, 1, recvNeed, s.RoundBytes)
		if err != nil {
			return st, err
		}
		sendStage, err := e.stage(slot, 0, sendNeed, s.RoundBytes)
		if err != nil {
			return st, err
		}
		var ops []Op
		var unpacks []unpack
		var recvOff, sendOff int64
		for _, m := range w.recvs {
			if buf, off, ok := direct(m.To, resolve); ok {
				ops = append(ops, Op{Peer: m.Src, Buf: buf, Off: off, Len: m.Bytes})
			} else if inPlace(m.To, m.Bytes) {
				ops = append(ops, Op{Peer: m.Src, Buf: resolve(m.To[0]), Len: m.Bytes, InPlace: true, At: m.To[0].At})
			} else {
				ops = append(ops, Op{Peer: m.Src, Buf: recvStage, Off: recvOff, Len: m.Bytes})
				unpacks = append(unpacks, unpack{to: m.To, off: recvOff})
				recvOff += m.Bytes
				st.Packed += m.Bytes
			}
			st.Recv[m.Class] += m.Bytes
		}
		for _, m := range w.sends {
			if buf, off, ok := direct(m.From, resolve); ok {
				ops = append(ops, Op{Peer: m.Dst, Send: true, Buf: buf, Off: off, Len: m.Bytes})
			} else if inPlace(m.From, m.Bytes) {
				ops = append(ops, Op{Peer: m.Dst, Send: true, Buf: resolve(m.From[0]), Len: m.Bytes, InPlace: true, At: m.From[0].At})
			} else {
				if err := e.gather(sendStage, sendOff, m.From, resolve); err != nil {
					return st, err
				}
				ops = append(ops, Op{Peer: m.Dst, Send: true, Buf: sendStage, Off: sendOff, Len: m.Bytes})
				sendOff += m.Bytes
				st.Packed += m.Bytes
			}
			st.Sent[m.Class] += m.Bytes
		}
		if err := e.Mem.Sync(); err != nil {
			return st, err
		}
		p, err := e.T.Start(ops)
		if err != nil {
			return st, fmt.Errorf("rank %d, round %d: %w", rank, w.round, err)
		}
		queue = append(queue, inflight{round: w.round, pending: p, unpacks: unpacks, stage: recvStage})
		st.Messages += len(w.sends) + len(w.recvs)
		st.Rounds++
	}
	for _, f := range queue {
		if err := complete(f); err != nil {
			return st, err
		}
	}
	return st, e.Mem.Sync()
}

// rankWork extracts this rank's messages, grouped by round.
func rankWork(s *Schedule, rank int) []roundWork {
	var out []roundWork
	for i := range s.Messages {
		m := &s.Messages[i]
		if m.Src != rank && m.Dst != rank {
			continue
		}
		if len(out) == 0 || out[len(out)-1].round != m.Round {
			out = append(out, roundWork{round: m.Round})
		}
		w := &out[len(out)-1]
		switch {
		case m.Src == m.Dst:
			w.copies = append(w.copies, m)
		case m.Src == rank:
			w.sends = append(w.sends, m)
		default:
			w.recvs = append(w.recvs, m)
		}
	}
	return out
}

// direct reports whether a message's bytes form one contiguous run of one
// buffer, which the transport can then use in place.
func direct(segs []Segment, resolve func(Segment) Buffer) (Buffer, int64, bool) {
	if len(segs) != 1 || !segs[0].At.Contiguous() {
		return nil, 0, false
	}
	return resolve(segs[0]), segs[0].At.Offset, true
}

// stage returns staging buffer [slot][dir], grown to hold need bytes (at
// least the round budget, so it is allocated once). It returns nil when
// need is 0 and nothing is allocated yet. The round that used the slot
// before has completed.
func (e *Executor) stage(slot, dir int, need, roundBytes int64) (Buffer, error) {
	b := e.staging[slot][dir]
	if need == 0 || (b != nil && b.Len() >= need) {
		return b, nil
	}
	if b != nil {
		e.Mem.Free(b)
		e.staging[slot][dir] = nil
	}
	nb, err := e.Mem.Alloc(max(need, roundBytes))
	if err != nil {
		return nil, fmt.Errorf("reshard: staging of %d bytes: %w", max(need, roundBytes), err)
	}
	e.staging[slot][dir] = nb
	return nb, nil
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

func (e *Executor) gather(dst Buffer, off int64, segs []Segment, resolve func(Segment) Buffer) error {
	for _, sg := range segs {
		if err := e.Mem.Pack(dst, off, resolve(sg), sg.At); err != nil {
			return err
		}
		off += sg.At.Bytes()
	}
	return nil
}

func (e *Executor) scatter(segs []Segment, src Buffer, off int64, resolve func(Segment) Buffer) error {
	for _, sg := range segs {
		if err := e.Mem.Unpack(resolve(sg), sg.At, src, off); err != nil {
			return err
		}
		off += sg.At.Bytes()
	}
	return nil
}

// copyLocal performs a message from this rank to itself.
func (e *Executor) copyLocal(m *Message, resolve func(Segment) Buffer) error {
	if len(m.From) == 1 && len(m.To) == 1 {
		return e.Mem.Copy(resolve(m.To[0]), m.To[0].At, resolve(m.From[0]), m.From[0].At)
	}
	tmp, err := e.Mem.Alloc(m.Bytes)
	if err != nil {
		return err
	}
	defer e.Mem.Free(tmp)
	if err := e.gather(tmp, 0, m.From, resolve); err != nil {
		return err
	}
	return e.scatter(m.To, tmp, 0, resolve)
}

// allocFull returns whole-tensor scratch for the tensors whose segments on
// this rank use it, reusing what an earlier run allocated when the size
// matches; Close frees it.
func (e *Executor) allocFull(s *Schedule, rank int, work []roundWork) ([]Buffer, error) {
	for len(e.scratch) < len(s.Plans) {
		e.scratch = append(e.scratch, nil)
	}
	full := make([]Buffer, len(s.Plans))
	need := func(segs []Segment) error {
		for _, sg := range segs {
			if sg.Buf != BufFull || full[sg.Tensor] != nil {
				continue
			}
			n := s.Plans[sg.Tensor].Src().Bytes()
			if b := e.scratch[sg.Tensor]; b != nil && b.Len() == n {
				full[sg.Tensor] = b
				continue
			}
			if b := e.scratch[sg.Tensor]; b != nil {
				e.Mem.Free(b)
				e.scratch[sg.Tensor] = nil
			}
			b, err := e.Mem.Alloc(n)
			if err != nil {
				return fmt.Errorf("reshard: scratch for tensor %d (%d bytes): %w", sg.Tensor, n, err)
			}
			full[sg.Tensor], e.scratch[sg.Tensor] = b, b
		}
		return nil
	}
	for _, w := range work {
		for _, list := range [][]*Message{w.copies, w.sends, w.recvs} {
			for _, m := range list {
				if m.Src == rank {
					if err := need(m.From); err != nil {
						return full, err
					}
				}
				if m.Dst == rank {
					if err := need(m.To); err != nil {
						return full, err
					}
				}
			}
		}
	}
	return full, nil
}

// checkBuffers validates one rank's buffers against the layouts.
func checkBuffers(s *Schedule, rank int, bufs []TensorBuffers) error {
	if len(bufs) != len(s.Plans) {
		return fmt.Errorf("reshard: %d buffer pairs for a schedule of %d tensors", len(bufs), len(s.Plans))
	}
	for i, p := range s.Plans {
		check := func(side string, b Buffer, inMesh bool, want int64) error {
			switch {
			case inMesh && b == nil:
				return &BufferError{Rank: rank, Tensor: i, Side: side, Why: "is missing (the rank is in the mesh)", Want: want, Got: -1}
			case !inMesh && b != nil && b.Len() != 0:
				return &BufferError{Rank: rank, Tensor: i, Side: side, Why: "is given but the rank is not in the mesh", Want: 0, Got: b.Len()}
			case inMesh && b.Len() != want:
				why := "is too short"
				if b.Len() > want {
					why = "is too long"
				}
				return &BufferError{Rank: rank, Tensor: i, Side: side, Why: why, Want: want, Got: b.Len()}
			}
			return nil
		}
		if err := check("source", bufs[i].Src, p.Src().Mesh().Contains(rank), p.Src().LocalBytes(rank)); err != nil {
			return err
		}
		if err := check("destination", bufs[i].Dst, p.Dst().Mesh().Contains(rank), p.Dst().LocalBytes(rank)); err != nil {
			return err
		}
	}
	return nil
}

// BufferError reports a local buffer that does not match its layout.
type BufferError struct {
	Rank, Tensor int
	Side         string // "source" or "destination"
	Why          string
	Want, Got    int64 // bytes; Got is -1 for a missing buffer
}

func (e *BufferError) Error() string {
	if e.Got < 0 {
		return fmt.Sprintf("rank %d, tensor %d: %s buffer %s (want %d bytes)", e.Rank, e.Tensor, e.Side, e.Why, e.Want)
	}
	return fmt.Sprintf("rank %d, tensor %d: %s buffer %s: %d bytes, the layout needs %d", e.Rank, e.Tensor, e.Side, e.Why, e.Got, e.Want)
}
