package reshard

import (
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"slices"
	"time"
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

// Executor runs schedules on one rank over a Transport, with buffers from a
// Memory. It is not safe for concurrent use; run one schedule at a time.
type Executor struct {
	T   Transport
	Mem Memory
	// Timeout bounds every wait for a round; 0 waits forever. A round that
	// times out fails the run with a *TimeoutError naming the peers still
	// owed; the caller must then Abort the transport.
	Timeout time.Duration
	// Verify makes the run checksum (CRC-32C) every message on both sides,
	// into Stats.SentSums and Stats.RecvSums, for the caller to compare
	// across ranks (see Refit). The memory must implement RegionReader.
	Verify bool

	// staging, grown on demand and kept between runs: [slot][0 send, 1 recv]
	staging [2][2]Buffer
	// scratch holds whole-tensor buffers (BufFull) kept between runs, by
	// tensor index.
	scratch []Buffer
}

// roundWork is what this rank does in one round; the lists hold indices
// into Schedule.Messages.
type roundWork struct {
	round  int
	copies []int
	sends  []int
	recvs  []int
}

// RegionReader is a Memory that can read a strided region of one of its
// buffers into host memory (for checksums).
type RegionReader interface {
	ReadRegion(dst []byte, src Buffer, at Strided) error
}

// ReadRegion implements RegionReader.
func (HostMemory) ReadRegion(dst []byte, src Buffer, at Strided) error {
	return HostMemory{}.Pack(HostBuffer(dst), 0, src, at)
}

// TimeoutError reports a round that did not complete in time.
type TimeoutError struct {
	Rank    int
	Round   int
	After   time.Duration
	Peers   []int    // the ranks this rank still waits for (all of the round's peers if the transport cannot tell)
	Tensors []string // the tensors the round carries
}

func (e *TimeoutError) Error() string {
	return fmt.Sprintf("rank %d: round %d did not complete in %v: still waiting for ranks %v (tensors %v)",
		e.Rank, e.Round, e.After, e.Peers, e.Tensors)
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

// inflight is a posted round and the receives to unpack once it completes.
type inflight struct {
	round   int
	pending Pending
	unpacks []unpack
	stage   Buffer // the round's receive staging
	peers   []int  // every peer of the round
	msgs    []int  // the round's messages
	recvs   []int  // the round's received messages, to checksum
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
	var reader RegionReader
	if e.Verify {
		var ok bool
		if reader, ok = e.Mem.(RegionReader); !ok {
			return st, fmt.Errorf("reshard: Verify needs a memory that can read regions back (%T cannot)", e.Mem)
		}
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
	maxInPlace := MaxInPlace(e.T)
	// inPlace reports whether a message's one strided segment can go to
	// the transport as it is.
	inPlace := func(segs []Segment, n int64) bool {
		return len(segs) == 1 && n <= maxInPlace && n > 0
	}
	sum := func(segs []Segment) (uint32, error) {
		var crc uint32
		for _, sg := range segs {
			b := make([]byte, sg.At.Bytes())
			if err := reader.ReadRegion(b, resolve(sg), sg.At); err != nil {
				return 0, err
			}
			crc = crc32.Update(crc, castagnoli, b)
		}
		return crc, nil
	}
	var queue []inflight
	complete := func(f inflight) error {
		wctx, cancel := ctx, context.CancelFunc(func() {})
		if e.Timeout > 0 {
			wctx, cancel = context.WithTimeout(ctx, e.Timeout)
		}
		err := f.pending.Wait(wctx)
		cancel()
		if err != nil {
			if errors.Is(err, context.DeadlineExceeded) && e.Timeout > 0 && ctx.Err() == nil {
				te := &TimeoutError{Rank: rank, Round: f.round, After: e.Timeout, Peers: f.peers}
				if inc, ok := f.pending.(Incompleter); ok {
					te.Peers = inc.Incomplete()
				}
				for _, i := range f.msgs {
					if t := tensorName(s, s.Messages[i].Tensor); !slices.Contains(te.Tensors, t) {
						te.Tensors = append(te.Tensors, t)
					}
				}
				return te
			}
			return fmt.Errorf("rank %d, round %d: %w", rank, f.round, err)
		}
		for _, u := range f.unpacks {
			if err := e.scatter(u.to, f.stage, u.off, resolve); err != nil {
				return err
			}
		}
		if e.Verify {
			for _, i := range f.recvs {
				crc, err := sum(s.Messages[i].To)
				if err != nil {
					return err
				}
				st.RecvSums = append(st.RecvSums, Checksum{int32(i), crc})
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
		for _, i := range w.copies {
			m := &s.Messages[i]
			if err := e.copyLocal(m, resolve); err != nil {
				return st, err
			}
			st.Sent[LinkSelf] += m.Bytes
			st.Recv[LinkSelf] += m.Bytes
			if e.Verify {
				if err := e.Mem.Sync(); err != nil {
					return st, err
				}
				a, err := sum(m.From)
				if err != nil {
					return st, err
				}
				b, err := sum(m.To)
				if err != nil {
					return st, err
				}
				st.SentSums = append(st.SentSums, Checksum{int32(i), a})
				st.RecvSums = append(st.RecvSums, Checksum{int32(i), b})
			}
		}
		if len(w.sends)+len(w.recvs) == 0 {
			continue
		}
		slot := w.round % 2
		// size the round's staging first: buffers in flight are never
		// reallocated.
		var recvNeed, sendNeed int64
		for _, i := range w.recvs {
			if m := &s.Messages[i]; !directOrInPlace(m.To, m.Bytes, resolve, inPlace) {
				recvNeed += m.Bytes
			}
		}
		for _, i := range w.sends {
			if m := &s.Messages[i]; !directOrInPlace(m.From, m.Bytes, resolve, inPlace) {
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
		var peers []int
		for _, i := range w.recvs {
			m := &s.Messages[i]
			if !slices.Contains(peers, m.Src) {
				peers = append(peers, m.Src)
			}
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
		for _, i := range w.sends {
			m := &s.Messages[i]
			if !slices.Contains(peers, m.Dst) {
				peers = append(peers, m.Dst)
			}
			if e.Verify {
				if err := e.Mem.Sync(); err != nil {
					return st, err
				}
				crc, err := sum(m.From)
				if err != nil {
					return st, err
				}
				st.SentSums = append(st.SentSums, Checksum{int32(i), crc})
			}
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
		slices.Sort(peers)
		queue = append(queue, inflight{round: w.round, pending: p, unpacks: unpacks, stage: recvStage, peers: peers,
			msgs: append(slices.Clone(w.sends), w.recvs...), recvs: w.recvs})
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

func directOrInPlace(segs []Segment, n int64, resolve func(Segment) Buffer, inPlace func([]Segment, int64) bool) bool {
	_, _, ok := direct(segs, resolve)
	return ok || inPlace(segs, n)
}

// tensorName names tensor i of a schedule in errors: its TensorNames entry
// if the schedule has one, else "tensor i".
func tensorName(s *Schedule, i int) string {
	if i < len(s.TensorNames) && s.TensorNames[i] != "" {
		return s.TensorNames[i]
	}
	return fmt.Sprintf("tensor %d", i)
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
			w.copies = append(w.copies, i)
		case m.Src == rank:
			w.sends = append(w.sends, i)
		default:
			w.recvs = append(w.recvs, i)
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
		for _, list := range [][]int{w.copies, w.sends, w.recvs} {
			for _, i := range list {
				m := &s.Messages[i]
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
