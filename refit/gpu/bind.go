package gpu

// Binding a step to its buffers: the commands, the batched copies' item
// tables, the staging and scratch, and the graph capture.

import (
	"errors"
	"fmt"
	"slices"

	"github.com/m2n-dev/m2n/cuda"
	"github.com/m2n-dev/m2n/cudamem"
	"github.com/m2n-dev/m2n/internal/replay"
	"github.com/m2n-dev/m2n/nccl"
	"github.com/m2n-dev/m2n/refit"
	"github.com/m2n-dev/m2n/reshard"
	"github.com/m2n-dev/m2n/transport"
)

func (r *Replay) buffers() []cudamem.Buffer {
	out := append([]cudamem.Buffer{r.scratch}, r.full...)
	for _, s := range r.staging {
		out = append(out, s[:]...)
	}
	return out
}

// unbind drops the bound step: the graph and the item tables.
func (r *Replay) unbind() error {
	var errs []error
	if r.graph != nil {
		errs = append(errs, r.graph.Destroy())
		r.graph = nil
	}
	if r.arena.Ptr != 0 {
		errs = append(errs, r.ctx.Free(r.arena.Ptr))
		r.arena = cudamem.Buffer{}
	}
	r.plan, r.key, r.launches, r.groups = nil, nil, nil, nil
	return errors.Join(errs...)
}

func (r *Replay) alloc(n int64) (cudamem.Buffer, error) {
	if n <= 0 {
		return cudamem.Buffer{}, nil
	}
	p, err := r.ctx.Alloc(int(n))
	if err != nil {
		return cudamem.Buffer{}, fmt.Errorf("gpu: rank %d: replay memory of %d bytes: %w", r.prog.Rank, n, err)
	}
	return cudamem.Buffer{Ptr: p, N: n}, nil
}

// allocate makes the staging and scratch the program needs.
func (r *Replay) allocate() error {
	var err error
	for slot := range r.staging {
		for dir := range r.staging[slot] {
			if r.staging[slot][dir], err = r.alloc(r.needs.Staging[slot][dir]); err != nil {
				return err
			}
		}
	}
	r.full = make([]cudamem.Buffer, len(r.needs.Full))
	for t, n := range r.needs.Full {
		if r.full[t], err = r.alloc(n); err != nil {
			return err
		}
	}
	if r.scratch, err = r.alloc(r.needs.Scratch); err != nil {
		return err
	}
	r.allocated = true
	return nil
}

func span(b cudamem.Buffer) replay.Span { return replay.Span{Addr: uint64(b.Ptr), Len: b.N} }

// keyWords is how many words of a binding's key a tensor takes: the
// address and length of its source, destination and scale buffers.
const keyWords = 6

// keyOf returns the addresses and lengths of bufs, checking that they are
// device memory.
func (r *Replay) keyOf(bufs []refit.TensorBuffers) ([]uint64, error) {
	if len(bufs) != len(r.prog.Full) {
		return nil, fmt.Errorf("gpu: rank %d: %d buffer pairs for a program of %d tensors", r.prog.Rank, len(bufs), len(r.prog.Full))
	}
	key := r.keyBuf[:0]
	for i := range bufs {
		for side, b := range []transport.Buffer{bufs[i].Src, bufs[i].Dst, bufs[i].Scale} {
			if b == nil {
				key = append(key, 0, 0)
				continue
			}
			d, ok := b.(cudamem.Buffer)
			if !ok {
				return nil, fmt.Errorf("gpu: rank %d, tensor %d: %s buffer %T is not device memory", r.prog.Rank, i, [...]string{"source", "destination", "scale"}[side], b)
			}
			key = append(key, uint64(d.Ptr), uint64(d.N))
		}
	}
	r.keyBuf = key
	return key, nil
}

// bindStep binds the step to in's buffers and loads its FP8 scales.
func (r *Replay) bindStep(in refit.StepInput) error {
	if err := r.loadQuant(in.Quant); err != nil {
		return err
	}
	return r.bind(in.Bufs)
}

// bind builds the step for bufs unless it is bound to them already.
func (r *Replay) bind(bufs []refit.TensorBuffers) error {
	key, err := r.keyOf(bufs)
	if err != nil {
		return err
	}
	if r.plan != nil && slices.Equal(key, r.key) {
		return nil
	}
	if r.inflight {
		// the bound step's tables and graph may still be in use.
		if err := r.streams[replay.Compute].Synchronize(); err != nil {
			return err
		}
		r.inflight = false
	}
	if err := r.unbind(); err != nil {
		return err
	}
	if !r.allocated {
		if err := r.allocate(); err != nil {
			return err
		}
	}
	b := replay.Buffers{Tensors: make([][2]replay.Span, len(bufs)), Scratch: span(r.scratch), Quant: slices.Clone(r.quant)}
	for i := range bufs {
		k := key[keyWords*i:]
		b.Tensors[i] = [2]replay.Span{{Addr: k[0], Len: int64(k[1])}, {Addr: k[2], Len: int64(k[3])}}
		if i < len(b.Quant) && b.Quant[i].Self {
			b.Quant[i].ScaleDst = replay.Span{Addr: k[4], Len: int64(k[5])}
		}
	}
	r.selfBuffers(&b)
	for _, f := range r.full {
		b.Full = append(b.Full, span(f))
	}
	for slot := range r.staging {
		for dir := range r.staging[slot] {
			b.Staging[slot][dir] = span(r.staging[slot][dir])
		}
	}
	topo, rank := r.t.Topology(), r.t.Rank()
	memcpyMin := r.opts.MemcpyMin
	if r.opts.Graph {
		// a memcpy captured as a graph node ran at 65% of the same memcpy on
		// a stream (7 GiB on an H200, bench/results/h200-replay-bench.txt);
		// in a graph every copy goes through the batched kernel.
		memcpyMin = -1
	}
	plan, err := replay.Build(r.prog, b, replay.Options{
		Class:       func(peer int) reshard.LinkClass { return topo.Class(rank, peer) },
		MemcpyMin:   memcpyMin,
		FuseStreams: r.opts.FuseStreams,
	})
	if err != nil {
		return err
	}
	if err := r.tables(plan); err != nil {
		_ = r.unbind()
		return err
	}
	r.groups = make([]*nccl.GroupOps, len(plan.Cmds))
	r.hasNCCL = false
	for i, c := range plan.Cmds {
		if c.Kind != replay.Group {
			continue
		}
		ops := make([]nccl.P2P, len(c.Ops))
		for k, o := range c.Ops {
			ops[k] = nccl.P2P{Peer: o.Peer, Send: o.Send, Ptr: cuda.DevicePtr(o.Addr), Bytes: o.Len}
		}
		r.groups[i] = nccl.NewGroupOps(ops)
		r.hasNCCL = true
	}
	if err := r.ensureSides(plan); err != nil {
		_ = r.unbind()
		return err
	}
	for len(r.events) < plan.Events {
		e, err := r.ctx.NewEvent(false)
		if err != nil {
			_ = r.unbind()
			return err
		}
		r.events = append(r.events, e)
	}
	r.plan, r.key = plan, slices.Clone(key)
	if r.opts.Graph {
		r.graphErr = r.capture()
	}
	return nil
}

// batchCopies turns a batch's items into the cuda package's copies.
func batchCopies(items []replay.Copy) []cuda.BatchCopy {
	out := make([]cuda.BatchCopy, len(items))
	for i, c := range items {
		out[i] = cuda.BatchCopy{
			Dst: cuda.DevicePtr(c.Dst), DstDesc: c.DstAt,
			Src: cuda.DevicePtr(c.Src), SrcDesc: c.SrcAt,
		}
	}
	return out
}

// tables plans every batch and uploads their item tables, one after
// another, to one device buffer.
func (r *Replay) tables(plan *replay.Plan) error {
	var all []byte
	type at struct {
		off    int
		count  int
		blocks uint64
	}
	where := make([]at, len(plan.Batches))
	for k, items := range plan.Batches {
		table, l, err := r.ctx.BatchTable(batchCopies(items))
		if err != nil {
			return fmt.Errorf("gpu: rank %d: batch %d: %w", r.prog.Rank, k, err)
		}
		where[k] = at{off: len(all), count: l.Count, blocks: l.Blocks}
		all = append(all, table...)
	}
	r.launches = make([]cuda.BatchLaunch, len(plan.Batches))
	if len(all) == 0 {
		return nil
	}
	buf, err := r.alloc(int64(len(all)))
	if err != nil {
		return err
	}
	r.arena = buf
	if err := r.ctx.CopyHtoD(buf.Ptr, all); err != nil {
		return err
	}
	for k, w := range where {
		r.launches[k] = cuda.BatchLaunch{Table: buf.Ptr + cuda.DevicePtr(w.off), Count: w.count, Blocks: w.blocks}
	}
	return nil
}

// capture records the bound step as a graph; on failure the step runs
// from its commands.
func (r *Replay) capture() error {
	if len(r.ext) < len(r.events) {
		for len(r.ext) < len(r.events) {
			e, err := r.ctx.NewEvent(false)
			if err != nil {
				return err
			}
			r.ext = append(r.ext, e)
		}
	}
	cs := r.streams[replay.Compute]
	g, err := cs.Capture(func() error { return r.issue(true) })
	if err != nil {
		return err
	}
	r.graph = g
	return nil
}
