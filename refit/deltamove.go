package refit

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"hash/crc32"

	"github.com/m2n-dev/m2n/delta"
	"github.com/m2n-dev/m2n/reshard"
	"github.com/m2n-dev/m2n/reshard/program"
	"github.com/m2n-dev/m2n/strided"
	"github.com/m2n-dev/m2n/transport"
)

// deltaStep is one delta step of a call in progress (see Delta mode).
type deltaStep struct {
	dc     *deltaCall
	h      *hostDriver
	hs     hostStep // the dense path's helpers, for wires that go raw
	p      *program.Program
	in     StepInput
	st     *Stats
	atomic bool
	raw    bool // wires whose regions changed throughout may go dense (not Atomic, not Verify)
}

// rawBit marks, in a wire's announced length, a wire that goes dense: its
// bytes as a dense step moves them (the wire's own Bytes, below 2^62).
const rawBit = 1 << 62

// deltaRound is a round whose encodings are posted.
type deltaInflight struct {
	ri      int // its index in the program
	pending transport.Pending
	lens    []int64 // per receive wire, the bytes its sender announced
	idle    bool    // its wait is an idle one (idleRound)
}

// idleRound reports whether a round whose wires move enc encoded bytes,
// against dense bytes for a dense step, and none of them dense (raw
// false), waits idly (transport.WithIdleWaits): where its encodings are
// at most an eighth of the dense bytes, which the wait need not hurry
// while the peers encode and apply, rather than a transfer to keep moving.
func idleRound(enc, dense int64, raw bool) bool { return !raw && 8*enc <= dense }

// move moves one delta step of h's program: it returns when every
// encoding this rank receives is applied (or, atomic, checked and kept).
func (dc *deltaCall) move(ctx context.Context, h *hostDriver, in StepInput, atomic bool) (Stats, error) {
	var st Stats
	p := h.prog
	d := deltaStep{dc: dc, h: h, p: p, in: in, st: &st, atomic: atomic, raw: !atomic && !in.Verify}
	d.hs = hostStep{h: h, p: p, in: in, bufs: in.Bufs, st: &st}
	if d.raw {
		if err := d.hs.prepare(); err != nil { // the dense staging
			return st, err
		}
	}
	dc.enc.UpdatePrev = dc.updatesPrev(atomic)
	for i := range dc.encs {
		dc.encs[i] = dc.encs[i][:0]
		dc.dense[i] = 0
	}
	dc.pending, dc.rawSent = dc.pending[:0], dc.rawSent[:0]
	progress := hostStep{h: h, p: p, in: in}
	err := twoDeep(p, func(ri int) (deltaInflight, bool, error) {
		f, err := d.start(ctx, ri)
		return f, f.pending != nil, err
	}, func(f deltaInflight) error { return d.complete(ctx, f) }, progress.progress)
	if err != nil {
		return st, err
	}
	return st, h.mem.Sync()
}

// host returns the host bytes of the buffer region r lies in.
func (d *deltaStep) host(r program.Region) (transport.HostBuffer, error) {
	b := d.in.Bufs[r.Tensor].Src
	if r.Buf == reshard.BufDst {
		b = d.in.Bufs[r.Tensor].Dst
	}
	hb, ok := b.(transport.HostBuffer)
	if !ok {
		return nil, fmt.Errorf("refit: rank %d, tensor %s: delta mode needs host buffers, got %T", d.p.Rank, d.p.Schedule().TensorName(int(r.Tensor)), b)
	}
	return hb, nil
}

// encode writes into out (at least the region's MaxEncodedLen bytes) the
// encoding of region id for a send or copy that reads it: what the
// region arrived in, for a forwarded one; else its source bytes against
// prev, kept when more sends read it.
func (d *deltaStep) encode(id int, out []byte) (int, error) {
	dc := d.dc
	if kept := dc.encs[id]; len(kept) > 0 {
		return copy(out, kept), nil
	}
	r := dc.plan.regions[id]
	cur, err := d.host(r)
	if err != nil {
		return 0, err
	}
	prev, at := dc.prev[r.Tensor], r.At
	if r.Buf != reshard.BufSrc {
		prev = nil // a forwarded region that arrived dense: it goes on dense, encoded
	}
	if dc.plan.quant[id] >= 0 {
		if err := dc.quantize(&d.hs, id); err != nil {
			return 0, err
		}
		cur, at = dc.codes[id][1], dc.plan.encAt(id)
		if prev, err = dc.rebase(id, dc.enc.UpdatePrev); err != nil {
			return 0, err
		}
	}
	n, err := dc.enc.Encode(prev, cur, at, dc.plan.elems[id], out)
	if err != nil {
		return 0, fmt.Errorf("refit: rank %d, tensor %s: %w", d.p.Rank, d.p.Schedule().TensorName(int(r.Tensor)), err)
	}
	if dc.plan.reads[id] > 1 {
		dc.encs[id] = append(dc.encs[id][:0], out[:n]...)
	}
	return n, nil
}

// deliver takes encoding enc of destination region id: applied in
// place, or, atomic, checked and kept for the commit; kept too where a
// later send forwards it.
func (d *deltaStep) deliver(id int, enc []byte) error {
	dc := d.dc
	r := dc.plan.regions[id]
	elem := dc.plan.elems[id]
	if d.atomic {
		if err := delta.Check(enc, r.At, elem); err != nil {
			return err
		}
		dc.encs[id] = append(dc.encs[id][:0], enc...)
		dc.pending = append(dc.pending, id)
		return nil
	}
	dst, err := d.host(r)
	if err != nil {
		return err
	}
	if err := dc.rescaleDst(dst, id); err != nil {
		return err
	}
	if err := delta.Apply(dst, r.At, elem, enc); err != nil {
		return err
	}
	if dc.plan.keep[id] {
		dc.encs[id] = append(dc.encs[id][:0], enc...)
	}
	return nil
}

func (d *deltaStep) sum(b []byte) uint32 { return crc32.Update(tagSeed(d.in.Tag), castagnoli, b) }

// copies does round ri's local copies: encoded and delivered on the spot.
func (d *deltaStep) copies(ri int) error {
	dc, st, s := d.dc, d.st, &d.p.Rounds[ri]
	for k, ft := range dc.plan.rounds[ri].copies {
		cp := &s.Copies[k]
		need, err := delta.MaxEncodedLen(dc.plan.encAt(ft[0]), dc.plan.elems[ft[0]])
		if err != nil {
			return err
		}
		if int64(cap(dc.scratch)) < need {
			dc.scratch = make([]byte, need)
		}
		n, err := d.encode(ft[0], dc.scratch[:need])
		if err != nil {
			return err
		}
		enc := dc.scratch[:n]
		if err := d.deliver(ft[1], enc); err != nil {
			return fmt.Errorf("refit: rank %d, round %d, local copy of tensor %s: %w", d.p.Rank, s.Index, d.p.Schedule().TensorName(int(cp.To[0].Tensor)), err)
		}
		st.Sent[reshard.LinkSelf] += int64(n)
		st.Recv[reshard.LinkSelf] += int64(n)
		st.DenseSent[reshard.LinkSelf] += cp.Bytes
		st.Messages++
		if d.in.Verify {
			st.sentSums = append(st.sentSums, checksum{cp.Msg, d.sum(enc)})
			st.recvSums = append(st.recvSums, checksum{cp.Msg, d.sum(enc)})
		}
	}
	return nil
}

// start does round ri's copies, encodes its sends, exchanges the
// encodings' lengths with its peers and posts the encodings.
func (d *deltaStep) start(ctx context.Context, ri int) (deltaInflight, error) {
	dc, st, s := d.dc, d.st, &d.p.Rounds[ri]
	if err := d.copies(ri); err != nil {
		return deltaInflight{}, err
	}
	if len(s.Sends)+len(s.Recvs) == 0 {
		return deltaInflight{ri: ri}, nil
	}
	dr := &dc.plan.rounds[ri]
	slot := s.Index % 2
	send, recv := dc.staging[slot][0], dc.staging[slot][1]
	sent := make([]int64, len(s.Sends))
	for j := range s.Sends {
		w, dw := &s.Sends[j], &dr.sends[j]
		if raw, err := d.rawSend(ri, j); err != nil || raw {
			if err != nil {
				return deltaInflight{}, err
			}
			sent[j] = w.Bytes | rawBit
			st.Sent[w.Class] += w.Bytes
			st.DenseSent[w.Class] += w.Bytes
			st.Messages += len(w.Parts)
			continue
		}
		off := dw.off
		for k, id := range dw.ids {
			n, err := d.encode(id, send[off:dw.off+dw.max])
			if err != nil {
				return deltaInflight{}, err
			}
			if d.in.Verify {
				st.sentSums = append(st.sentSums, checksum{w.Parts[k].Msg, d.sum(send[off : off+int64(n)])})
			}
			off += int64(n)
		}
		sent[j] = off - dw.off
		st.Sent[w.Class] += sent[j]
		st.DenseSent[w.Class] += w.Bytes
		st.Packed += sent[j]
		st.Messages += len(w.Parts)
	}
	lens, err := d.exchangeLengths(ctx, ri, sent)
	if err != nil {
		return deltaInflight{}, err
	}
	ops := make([]transport.Op, 0, len(s.Sends)+len(s.Recvs))
	raw, enc, dense := false, int64(0), int64(0)
	for j := range s.Recvs {
		enc, dense = enc+lens[j]&^rawBit, dense+s.Recvs[j].Bytes
		w := &s.Recvs[j]
		op := transport.Op{Peer: w.Peer, Tag: d.in.Tag, Buf: recv, Off: dr.recvs[j].off, Len: lens[j]}
		if lens[j]&rawBit != 0 {
			op, raw = d.hs.op(w, false, d.h.staging[slot][1]), true
		}
		ops = append(ops, op)
		st.Recv[w.Class] += op.Len
		st.Messages += len(w.Parts)
	}
	for j := range s.Sends {
		enc, dense = enc+sent[j]&^rawBit, dense+s.Sends[j].Bytes
		op := transport.Op{Peer: s.Sends[j].Peer, Send: true, Tag: d.in.Tag, Buf: send, Off: dr.sends[j].off, Len: sent[j]}
		if sent[j]&rawBit != 0 {
			op, raw = d.hs.op(&s.Sends[j], true, d.h.staging[slot][0]), true
		}
		ops = append(ops, op)
	}
	pend, err := d.h.t.Start(ops)
	if err != nil {
		return deltaInflight{}, fmt.Errorf("rank %d, round %d: %w", d.p.Rank, s.Index, err)
	}
	st.Rounds++
	return deltaInflight{ri: ri, pending: pend, lens: lens, idle: idleRound(enc, dense, raw)}, nil
}

// exchangeLengths sends every send wire's encoded length (sent) to its
// peer and returns what every receive wire's peer announced, each
// checked against the most its messages encode to.
func (d *deltaStep) exchangeLengths(ctx context.Context, ri int, sent []int64) ([]int64, error) {
	s, dr := &d.p.Rounds[ri], &d.dc.plan.rounds[ri]
	nr := len(s.Recvs)
	buf := make(transport.HostBuffer, 8*(nr+len(s.Sends)))
	ops := make([]transport.Op, 0, nr+len(s.Sends))
	for j := range s.Recvs {
		ops = append(ops, transport.Op{Peer: s.Recvs[j].Peer, Tag: d.in.Tag, Buf: buf, Off: int64(8 * j), Len: 8})
	}
	for j := range s.Sends {
		binary.LittleEndian.PutUint64(buf[8*(nr+j):], uint64(sent[j])) // rawBit included
		ops = append(ops, transport.Op{Peer: s.Sends[j].Peer, Send: true, Tag: d.in.Tag, Buf: buf, Off: int64(8 * (nr + j)), Len: 8})
	}
	pend, err := d.h.t.Start(ops)
	if err != nil {
		return nil, fmt.Errorf("rank %d, round %d, encoded lengths: %w", d.p.Rank, s.Index, err)
	}
	// the lengths come once the peers have encoded: the wait leaves them
	// the CPU (an idle wait)
	if err := d.h.wait(transport.WithIdleWaits(ctx), d.p, s, pend); err != nil {
		return nil, err
	}
	lens := make([]int64, nr)
	for j := range s.Recvs {
		n := binary.LittleEndian.Uint64(buf[8*j:])
		dw := &dr.recvs[j]
		if n&rawBit != 0 {
			if w := &s.Recvs[j]; !d.raw || n&^rawBit != uint64(w.Bytes) {
				return nil, fmt.Errorf("rank %d, round %d: rank %d announces %d dense bytes for a wire of %d (dense wires: %v)", d.p.Rank, s.Index, w.Peer, n&^rawBit, w.Bytes, d.raw)
			}
			lens[j] = int64(n)
			continue
		}
		if n < uint64(delta.HeaderLen*len(dw.ids)) || n > uint64(dw.max) {
			return nil, fmt.Errorf("rank %d, round %d: rank %d announces %d bytes of encodings for %d messages that encode to %d to %d bytes",
				d.p.Rank, s.Index, s.Recvs[j].Peer, n, len(dw.ids), delta.HeaderLen*len(dw.ids), dw.max)
		}
		lens[j] = int64(n)
	}
	return lens, nil
}

// complete waits for a posted round and delivers every encoding it
// received. With Verify, an encoding that does not parse or apply is not
// this rank's error: its checksum, which cannot match the sender's, fails
// the step on every rank.
func (d *deltaStep) complete(ctx context.Context, f deltaInflight) error {
	s, dr := &d.p.Rounds[f.ri], &d.dc.plan.rounds[f.ri]
	if f.idle {
		ctx = transport.WithIdleWaits(ctx)
	}
	if err := d.h.wait(ctx, d.p, s, f.pending); err != nil {
		return err
	}
	recv := d.dc.staging[s.Index%2][1]
	for j := range s.Recvs {
		w, dw := &s.Recvs[j], &dr.recvs[j]
		if f.lens[j]&rawBit != 0 {
			if err := d.rawArrived(w, dw, d.h.staging[s.Index%2][1]); err != nil {
				return err
			}
			continue
		}
		buf := recv[dw.off : dw.off+f.lens[j]]
		at := 0
		for k, id := range dw.ids {
			n, err := delta.EncodedLen(buf[at:])
			if err == nil {
				err = d.deliver(id, buf[at:at+n])
			}
			if err == nil && k == len(dw.ids)-1 && at+n != len(buf) {
				err = fmt.Errorf("%d bytes after the last encoding", len(buf)-at-n)
			}
			if err != nil && !d.in.Verify {
				t := d.p.Schedule().TensorName(int(d.dc.plan.regions[id].Tensor))
				return fmt.Errorf("refit: rank %d, round %d, tensor %s from rank %d: %w", d.p.Rank, s.Index, t, w.Peer, err)
			}
			if err != nil {
				n = len(buf) - at // the rest, whose sum cannot match
			}
			if d.in.Verify {
				d.st.recvSums = append(d.st.recvSums, checksum{w.Parts[k].Msg, d.sum(buf[at : at+n])})
			}
			at += n
		}
	}
	return nil
}

// rawSend decides whether send wire j of round ri goes dense, and packs
// it if so: where dense wires may go, every source region it carries
// changed at every sampled element (allChanged, decided once per region
// and step) and every forwarded one arrived dense.
func (d *deltaStep) rawSend(ri, j int) (bool, error) {
	if !d.raw {
		return false, nil
	}
	dc := d.dc
	raw := true
	for _, id := range dc.plan.rounds[ri].sends[j].ids {
		r := dc.plan.regions[id]
		if r.Buf == reshard.BufSrc && dc.dense[id] == 0 {
			cur, err := d.host(r)
			if err != nil {
				return false, err
			}
			dc.dense[id] = 2
			if dc.plan.quant[id] < 0 && allChanged(dc.prev[r.Tensor], cur, r.At, dc.plan.elems[id]) {
				dc.dense[id] = 1
				dc.rawSent = append(dc.rawSent, id)
			}
		}
		raw = raw && dc.dense[id] == 1
	}
	s := &d.p.Rounds[ri]
	w := &s.Sends[j]
	if !raw || w.Mode != program.WireStaged {
		return raw, nil
	}
	off, staging := w.StagingOff, d.h.staging[s.Index%2][0]
	for _, pt := range w.Parts {
		for _, r := range pt.Regions {
			if err := d.h.mem.Pack(staging, off, d.hs.buf(r), r.At); err != nil {
				return false, err
			}
			off += r.At.Bytes()
		}
	}
	return true, d.h.mem.Sync()
}

// rawArrived unpacks a receive wire that came dense and marks its regions
// so, for the sends that forward them.
func (d *deltaStep) rawArrived(w *program.Wire, dw *deltaWire, staging transport.Buffer) error {
	off := w.StagingOff
	for k, pt := range w.Parts {
		d.dc.dense[dw.ids[k]] = 1
		if w.Mode != program.WireStaged {
			continue
		}
		for _, r := range pt.Regions {
			if err := d.h.mem.Unpack(d.hs.buf(r), r.At, staging, off); err != nil {
				return err
			}
			off += r.At.Bytes()
		}
	}
	return nil
}

// changedThroughout reports whether every source region this rank sends
// in the call's next step, of the buffers bufs, changed at every sampled
// element (allChanged): the step would send them all dense. A rank with
// no source region says yes; one whose regions quantize to FP8 (their
// codes are compared, after quantizing), or that holds no copy yet, no.
func (dc *deltaCall) changedThroughout(bufs []TensorBuffers) bool {
	if dc.prev == nil {
		return false
	}
	for _, i := range dc.plan.sources {
		r := dc.plan.regions[i]
		if dc.plan.quant[i] >= 0 || int(r.Tensor) >= len(bufs) {
			return false
		}
		cur, ok := bufs[r.Tensor].Src.(transport.HostBuffer)
		prev := dc.prev[r.Tensor]
		if !ok || prev == nil || r.At.Fits(int64(len(cur))) != nil || r.At.Fits(int64(len(prev))) != nil {
			return false
		}
		if !allChanged(prev, cur, r.At, dc.plan.elems[i]) {
			return false
		}
	}
	return true
}

// allChanged reports whether every one of up to 64 elements sampled
// evenly over region r differs between prev and cur: a region that
// changed throughout, which its encoding would send dense anyway.
func allChanged(prev, cur []byte, r strided.Desc, elem int) bool {
	const samples = 64
	runs := r.Rows()
	if runs <= 0 || r.Run < int64(elem) {
		return false
	}
	every := max(runs/samples, 1)
	per := max(samples/runs, 1) // samples per sampled run
	perElems := r.Run / int64(elem)
	i, all := int64(0), true
	r.ForEachRun(func(off int64) {
		if !all || i%every != 0 {
			i++
			return
		}
		i++
		for k := int64(0); k < per && all; k++ {
			at := off + (k*perElems/per)*int64(elem)
			if bytes.Equal(prev[at:at+int64(elem)], cur[at:at+int64(elem)]) {
				all = false
			}
		}
	})
	return all
}
