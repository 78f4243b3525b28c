package main

/*
#define M2N_NO_PROTOTYPES
#include "m2n.h"
*/
import "C"

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"unsafe"

	"github.com/m2n-dev/m2n/cuda"
	"github.com/m2n-dev/m2n/cudamem"
	"github.com/m2n-dev/m2n/dtype"
	"github.com/m2n-dev/m2n/fp8"
	"github.com/m2n-dev/m2n/mesh"
	"github.com/m2n-dev/m2n/placement"
	"github.com/m2n-dev/m2n/refit"
	"github.com/m2n-dev/m2n/reshard"
	"github.com/m2n-dev/m2n/routespec"
	"github.com/m2n-dev/m2n/session"
	"github.com/m2n-dev/m2n/transport"
)

// callEntry is a prepared call behind a handle.
type callEntry struct {
	se   *sessionEntry
	c    *refit.Call
	last *refit.Report // the last run's (m2n_call_delta_report), nil if none began
}

func (ce *callEntry) session() *sessionEntry { return ce.se }

func callOf(h C.m2n_call) (*callEntry, error) {
	return lookup[*callEntry](uint64(h), "call")
}

// sideName is a side as the Go errors name it.
func sideName(side int) string {
	if side == C.M2N_DST {
		return "destination"
	}
	return "source"
}

// tensorsOf reads n m2n_tensor descriptions.
func tensorsOf(p *C.m2n_tensor, n C.int64_t) ([]C.m2n_tensor, error) {
	switch {
	case n < 0:
		return nil, invalidf("%d tensors", n)
	case n == 0:
		return nil, nil
	case p == nil:
		return nil, invalidf("%d tensors at NULL", n)
	}
	return unsafe.Slice(p, int(n)), nil
}

// layoutOf builds one side's layout of t and the view of this rank's part.
func layoutOf(t *C.m2n_tensor, side int) (placement.Layout, placement.View, error) {
	var v placement.View
	ndim := int(t.ndim)
	if ndim < 0 || ndim > placement.MaxTensorDims {
		return placement.Layout{}, v, &reshard.FieldError{Field: "ndim", Got: strconv.Itoa(ndim), Why: fmt.Sprintf("want 0 to %d", placement.MaxTensorDims)}
	}
	if ndim > 0 && t.shape == nil {
		return placement.Layout{}, v, &reshard.FieldError{Field: "shape", Got: "NULL", Why: fmt.Sprintf("want %d sizes", ndim)}
	}
	shape := cInt64s(t.shape, ndim)
	if shape == nil {
		shape = []int64{}
	}
	field, name := "dtype", goString(t.dtype)
	if side == C.M2N_DST && t.dst_dtype != nil {
		field, name = "destination dtype", goString(t.dst_dtype)
	}
	dt, err := dtype.Parse(name)
	if err != nil {
		return placement.Layout{}, v, &reshard.FieldError{Field: field, Got: strconv.Quote(name), Why: err.Error()}
	}
	s := &t.src
	if side == C.M2N_DST {
		s = &t.dst
	}
	what := sideName(side)
	md := int(s.mesh_ndim)
	if md < 1 || md > mesh.MaxDims {
		return placement.Layout{}, v, &reshard.FieldError{Field: what + " mesh", Got: fmt.Sprintf("%d axes", md), Why: fmt.Sprintf("want 1 to %d", mesh.MaxDims)}
	}
	if s.mesh_shape == nil || s.placements == nil || s.ranks == nil {
		return placement.Layout{}, v, &reshard.FieldError{Field: what + " mesh", Got: "NULL", Why: "mesh_shape, ranks and placements are required"}
	}
	ms := cInts(s.mesh_shape, md)
	size := 1
	for _, d := range ms {
		if d < 1 || d > mesh.MaxRanks {
			return placement.Layout{}, v, &reshard.FieldError{Field: what + " mesh", Got: mesh.FormatShape(ms), Why: "every axis needs at least one rank"}
		}
		size *= d
		if size > mesh.MaxRanks {
			return placement.Layout{}, v, &reshard.FieldError{Field: what + " mesh", Got: mesh.FormatShape(ms), Why: fmt.Sprintf("more than %d ranks", mesh.MaxRanks)}
		}
	}
	m, err := mesh.New(ms, cInts(s.ranks, size))
	if err != nil {
		return placement.Layout{}, v, fmt.Errorf("%s mesh: %w", what, err)
	}
	pls := make([]placement.Placement, md)
	for i, p := range cInts(s.placements, md) {
		switch {
		case p == C.M2N_REPLICATE:
			pls[i] = placement.Replicate()
		case p >= 0:
			pls[i] = placement.Shard(p)
		default:
			return placement.Layout{}, v, &reshard.FieldError{Field: what + " placements", Got: strconv.Itoa(p), Why: fmt.Sprintf("mesh axis %d: want M2N_REPLICATE (-1) or a shard dim", i)}
		}
	}
	l, err := placement.NewLayout(shape, dt, m, pls)
	if err != nil {
		return placement.Layout{}, v, fmt.Errorf("%s layout: %w", what, err)
	}
	if s.view_strides != nil {
		v = placement.View{Offset: int64(s.view_offset), Strides: cInt64s(s.view_strides, ndim)}
	} else {
		v = placement.View{Offset: int64(s.view_offset)}
	}
	return l, v, nil
}

// specsOf builds the call's specs; errors name the rank, the tensor and
// the field.
func specsOf(ts []C.m2n_tensor, rank int) ([]refit.Spec, error) {
	specs := make([]refit.Spec, len(ts))
	for i := range ts {
		t := &ts[i]
		name := goString(t.name)
		specs[i].Name = name
		var err error
		if specs[i].Src, specs[i].Views.Src, err = layoutOf(t, C.M2N_SRC); err == nil {
			specs[i].Dst, specs[i].Views.Dst, err = layoutOf(t, C.M2N_DST)
		}
		if err == nil {
			specs[i].Scale, err = scaleOf(t.scale)
		}
		if err != nil {
			return nil, fmt.Errorf("rank %d, tensor %q (%d): %w", rank, name, i, err)
		}
	}
	return specs, nil
}

// scaleOf reads m2n_tensor.scale.
func scaleOf(s C.int32_t) (fp8.Mode, error) {
	switch s {
	case C.M2N_SCALE_NONE:
		return 0, nil
	case C.M2N_SCALE_BLOCK:
		return fp8.Block, nil
	case C.M2N_SCALE_ROW:
		return fp8.Row, nil
	case C.M2N_SCALE_TENSOR:
		return fp8.Tensor, nil
	}
	return 0, &reshard.FieldError{Field: "scale", Got: strconv.Itoa(int(s)), Why: "want M2N_SCALE_NONE, BLOCK, ROW or TENSOR (0 to 3)"}
}

//export m2n_tensor_scale
func m2n_tensor_scale(t *C.m2n_tensor, rank C.int32_t, held *C.int32_t, shape, offset, bytes *C.int64_t) (rc C.int) {
	defer recovered(&rc)
	if t == nil || held == nil {
		return result(invalidf("m2n_tensor_scale: t and held must not be NULL"))
	}
	specs, err := specsOf(unsafe.Slice(t, 1), int(rank))
	if err != nil {
		return result(&argError{msg: err.Error(), err: err})
	}
	box, ok, err := specs[0].ScaleBlocks(int(rank))
	if err != nil {
		return result(&argError{msg: fmt.Sprintf("tensor %q: %v", specs[0].Name, err), err: err})
	}
	*held = 0
	if bytes != nil {
		*bytes = 0
	}
	if !ok {
		return C.M2N_OK
	}
	*held = 1
	n := min(len(box.Lo), int(t.ndim)) // the grid has the tensor's dims
	if shape != nil {
		copy(unsafe.Slice(shape, n), toC(box.Shape()[:n]))
	}
	if offset != nil {
		copy(unsafe.Slice(offset, n), toC(box.Lo[:n]))
	}
	if bytes != nil {
		*bytes = C.int64_t(4 * box.Elems())
	}
	return C.M2N_OK
}

//export m2n_tensor_part
func m2n_tensor_part(t *C.m2n_tensor, side C.int32_t, rank C.int32_t, held *C.int32_t, shape, offset, bytes *C.int64_t) (rc C.int) {
	defer recovered(&rc)
	if t == nil || held == nil {
		return result(invalidf("m2n_tensor_part: t and held must not be NULL"))
	}
	if side != C.M2N_SRC && side != C.M2N_DST {
		return result(invalidf("m2n_tensor_part: side %d: want M2N_SRC (0) or M2N_DST (1)", side))
	}
	l, _, err := layoutOf(t, int(side))
	if err != nil {
		return result(&argError{msg: fmt.Sprintf("tensor %q: %v", goString(t.name), err), err: err})
	}
	*held = 0
	if bytes != nil {
		*bytes = 0
	}
	m := l.Mesh()
	if !m.Contains(int(rank)) {
		return C.M2N_OK
	}
	*held = 1
	sh, off := l.LocalShapeOffset(m.Coord(m.Index(int(rank)), nil))
	n := int(t.ndim)
	if shape != nil {
		copy(unsafe.Slice(shape, n), toC(sh))
	}
	if offset != nil {
		copy(unsafe.Slice(offset, n), toC(off))
	}
	if bytes != nil {
		*bytes = C.int64_t(l.LocalBytes(int(rank)))
	}
	return C.M2N_OK
}

func toC(v []int64) []C.int64_t {
	out := make([]C.int64_t, len(v))
	for i, x := range v {
		out[i] = C.int64_t(x)
	}
	return out
}

// routeOf reads a route string of m2n.h (package routespec's grammar;
// empty is hier).
func routeOf(s string) (reshard.Route, error) {
	spec := strings.TrimSpace(s)
	if spec == "" || strings.HasPrefix(spec, ":") {
		spec = "hier" + spec
	}
	r, err := routespec.Parse(spec, routespec.Options{Fabric: routespec.DefaultFabric()})
	if err != nil {
		return nil, &reshard.FieldError{Field: "route", Got: strconv.Quote(s), Why: err.Error()}
	}
	return r, nil
}

//export m2n_call_prepare
func m2n_call_prepare(h C.m2n_session, tp *C.m2n_tensor, n C.int64_t, route *C.char, out *C.m2n_call) (rc C.int) {
	defer recovered(&rc)
	se, err := sessionOf(h)
	if err != nil {
		return result(err)
	}
	if out == nil {
		return result(invalidf("m2n_call_prepare: out is NULL"))
	}
	*out = 0
	se.mu.Lock()
	defer se.mu.Unlock()
	rank := se.s.Rank()
	// What only this rank can find wrong goes through an agreement, so
	// that every rank fails with it at once.
	var specs []refit.Spec
	ts, localErr := tensorsOf(tp, n)
	if localErr != nil {
		localErr = fmt.Errorf("rank %d: %w", rank, localErr)
	} else {
		specs, localErr = specsOf(ts, rank)
	}
	r, rerr := routeOf(goString(route))
	if rerr != nil && localErr == nil {
		localErr = fmt.Errorf("rank %d: %w", rank, rerr)
	}
	ctx := context.Background()
	if err := se.s.Agree(ctx, nil, localErr); err != nil {
		return result(err)
	}
	c, err := se.s.Prepare(ctx, specs, r)
	if err != nil {
		return result(err)
	}
	ce := &callEntry{se: se, c: c}
	ch := register(ce)
	se.calls[ch] = ce
	*out = C.m2n_call(ch)
	return C.M2N_OK
}

// bufferOf turns one m2n_buffer into a transport.Buffer (nil for none) for a
// session on dev, checking its memory and dtype against the layout's. The
// error, if any, is this rank's alone (the caller refuses the step with it).
func bufferOf(b *C.m2n_buffer, dev session.Device, dt dtype.DType, rank int, tensor, side string, want int64) (transport.Buffer, error) {
	bad := func(format string, args ...any) error {
		return &refit.BufferError{Rank: rank, Tensor: tensor, Side: side, Why: fmt.Sprintf(format, args...), Want: want, Got: -1}
	}
	if b.memory == C.M2N_MEMORY_NONE {
		return nil, nil
	}
	n := int64(b.bytes)
	switch {
	case n < 0:
		return nil, bad("has %d bytes", n)
	case n > 0 && b.data == nil:
		return nil, bad("is NULL with %d bytes", n)
	}
	if b.dtype != nil {
		got, err := dtype.Parse(goString(b.dtype))
		if err != nil {
			return nil, bad("has dtype %q, which m2n does not know", goString(b.dtype))
		}
		if got != dt {
			return nil, bad("has dtype %v, the tensor's is %v", got, dt)
		}
	}
	switch b.memory {
	case C.M2N_MEMORY_HOST:
		if dev != session.CPU {
			return nil, bad("is host memory, but the session's device is %s (NCCL moves device memory)", dev)
		}
		if n == 0 {
			return transport.HostBuffer{}, nil
		}
		return transport.HostBuffer(unsafe.Slice((*byte)(b.data), n)), nil
	case C.M2N_MEMORY_CUDA:
		if dev != session.GPU {
			return nil, bad("is CUDA device memory, but the session's device is %s", dev)
		}
		return cudamem.Buffer{Ptr: cuda.DevicePtr(uintptr(b.data)), N: n}, nil
	}
	return nil, bad("has memory %d: want M2N_MEMORY_NONE, HOST or CUDA", b.memory)
}

// syncStream waits, on a GPU session, for the caller's work on stream (0:
// all the GPU's work) before a step reads or writes its buffers.
func syncStream(s *session.Session, stream C.uintptr_t) error {
	m, ok := s.Memory().(*cudamem.Memory)
	if !ok {
		return nil
	}
	if stream == 0 {
		return m.Ctx.Synchronize()
	}
	return m.Ctx.SynchronizeStream(uintptr(stream))
}

//export m2n_call_run
func m2n_call_run(h C.m2n_call, bp *C.m2n_tensor_buffers, n C.int64_t, stream C.uintptr_t, report *C.m2n_report, completed *C.uint8_t) (rc C.int) {
	defer recovered(&rc)
	if report != nil {
		*report = C.m2n_report{}
	}
	ce, err := callOf(h)
	if err != nil {
		return result(usedAfterClose(uint64(h), "call", "m2n_call_run", err))
	}
	ce.se.mu.Lock()
	defer ce.se.mu.Unlock()
	ce.last = nil
	s := ce.se.s
	specs := ce.c.Specs()
	rank, dev := s.Rank(), s.Options().Device
	ctx := context.Background()
	var localErr error
	bufs := make([]refit.TensorBuffers, len(specs))
	switch {
	case int(n) != len(specs):
		localErr = fmt.Errorf("rank %d: %d buffer pairs for a call of %d tensors", rank, n, len(specs))
	case n > 0 && bp == nil:
		localErr = fmt.Errorf("rank %d: buffers is NULL", rank)
	}
	if localErr == nil && n > 0 {
		in := unsafe.Slice(bp, int(n))
		for i, sp := range specs {
			if bufs[i].Src, localErr = bufferOf(&in[i].src, dev, sp.Src.DType(), rank, sp.Name, "source", sp.Src.LocalBytes(rank)); localErr != nil {
				break
			}
			if bufs[i].Dst, localErr = bufferOf(&in[i].dst, dev, sp.Dst.DType(), rank, sp.Name, "destination", sp.Dst.LocalBytes(rank)); localErr != nil {
				break
			}
			want, _ := sp.ScaleBytes(rank)
			if bufs[i].Scale, localErr = bufferOf(&in[i].scale, dev, dtype.F32, rank, sp.Name, "scale", want); localErr != nil {
				break
			}
		}
	}
	if localErr == nil {
		if err := syncStream(s, stream); err != nil {
			localErr = fmt.Errorf("rank %d: waiting for stream %#x: %w", rank, uintptr(stream), err)
		}
	}
	if localErr != nil {
		return result(ce.c.Refuse(ctx, localErr))
	}
	var rep *refit.Report
	if dev == session.CPU {
		offThread(func() { rep, err = ce.c.Run(ctx, bufs) })
	} else {
		rep, err = ce.c.Run(ctx, bufs)
	}
	ce.last = rep
	fillReport(report, []*refit.Report{rep})
	if completed != nil && rep != nil {
		done := map[string]bool{}
		for _, name := range rep.Completed {
			done[name] = true
		}
		out := unsafe.Slice(completed, len(specs))
		for i, sp := range specs {
			out[i] = 0
			if done[sp.Name] {
				out[i] = 1
			}
		}
	}
	return result(err)
}

// fillReport sums reports (one per pipeline stage; nil entries skipped)
// into out, if out is not NULL.
func fillReport(out *C.m2n_report, reps []*refit.Report) {
	if out == nil {
		return
	}
	*out = C.m2n_report{}
	for _, r := range reps {
		if r == nil {
			continue
		}
		st := r.Stats
		out.completed += C.int64_t(len(r.Completed))
		out.failed += C.int64_t(len(r.Failed))
		out.seconds = C.double(max(float64(out.seconds), r.Seconds))
		out.sent_network += C.int64_t(st.Sent[reshard.LinkNetwork])
		out.sent_local += C.int64_t(st.Sent[reshard.LinkLocal])
		out.recv_network += C.int64_t(st.Recv[reshard.LinkNetwork])
		out.recv_local += C.int64_t(st.Recv[reshard.LinkLocal])
		out.copied += C.int64_t(st.Sent[reshard.LinkSelf])
		out.packed += C.int64_t(st.Packed)
		out.messages += C.int64_t(st.Messages)
		out.rounds += C.int64_t(st.Rounds)
	}
}

//export m2n_call_refuse
func m2n_call_refuse(h C.m2n_call, tensor C.int64_t, side C.int32_t, why *C.char) (rc C.int) {
	defer recovered(&rc)
	ce, err := callOf(h)
	if err != nil {
		return result(usedAfterClose(uint64(h), "call", "m2n_call_refuse", err))
	}
	ce.se.mu.Lock()
	defer ce.se.mu.Unlock()
	rank := ce.se.s.Rank()
	specs := ce.c.Specs()
	reason := goString(why)
	if reason == "" {
		reason = "refused the step"
	}
	var cause error = fmt.Errorf("rank %d: %s", rank, reason)
	if tensor >= 0 && int(tensor) < len(specs) {
		sp := specs[tensor]
		l := sp.Src
		if side == C.M2N_DST {
			l = sp.Dst
		}
		cause = &refit.BufferError{Rank: rank, Tensor: sp.Name, Side: sideName(int(side)), Why: reason, Want: l.LocalBytes(rank), Got: -1}
	}
	return result(ce.c.Refuse(context.Background(), cause))
}

//export m2n_call_tensors
func m2n_call_tensors(h C.m2n_call, n *C.int64_t) (rc C.int) {
	defer recovered(&rc)
	ce, err := callOf(h)
	if err != nil {
		return result(err)
	}
	if n == nil {
		return result(invalidf("m2n_call_tensors: n is NULL"))
	}
	*n = C.int64_t(len(ce.c.Specs()))
	return C.M2N_OK
}

//export m2n_call_describe
func m2n_call_describe(h C.m2n_call, buf *C.char, n C.size_t, needed *C.size_t) (rc C.int) {
	defer recovered(&rc)
	return locked(uint64(h), "call", func(ce *callEntry) error {
		sc := ce.c.Schedule()
		names := make([]string, 0, len(ce.c.Specs()))
		for _, sp := range ce.c.Specs() {
			names = append(names, sp.Name)
		}
		js, err := json.Marshal(map[string]any{
			"route": sc.Route, "note": sc.Note, "fingerprint": fmt.Sprintf("%016x", ce.c.Fingerprint()),
			"rounds": sc.Rounds, "messages": len(sc.Messages), "tensors": names,
		})
		if err != nil {
			return err
		}
		describeOut(js, buf, n, needed)
		return nil
	})
}

//export m2n_call_close
func m2n_call_close(h C.m2n_call) (rc C.int) {
	defer recovered(&rc)
	ce, err := callOf(h)
	if err != nil {
		return result(err)
	}
	forget(uint64(h))
	ce.se.mu.Lock()
	defer ce.se.mu.Unlock()
	delete(ce.se.calls, uint64(h))
	ce.se.closedHandle(uint64(h))
	ce.c.Close()
	return C.M2N_OK
}
