package main

/*
#define M2N_NO_PROTOTYPES
#include "m2n.h"
*/
import "C"

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"unsafe"

	"github.com/m2n-dev/m2n/control"
	"github.com/m2n-dev/m2n/dtype"
	"github.com/m2n-dev/m2n/fp8"
	"github.com/m2n-dev/m2n/lora"
	"github.com/m2n-dev/m2n/model"
	"github.com/m2n-dev/m2n/modelspec"
	"github.com/m2n-dev/m2n/refit"
	"github.com/m2n-dev/m2n/reshard"
	"github.com/m2n-dev/m2n/session"
	"github.com/m2n-dev/m2n/transport"
)

// modelEntry is a prepared model behind a handle, with this rank's
// buffers and scale tensors by name.
type modelEntry struct {
	se     *sessionEntry
	m      *session.Model
	bufs   [2]map[string]modelBuffer // by side
	scales map[string]modelScale     // by session.ScaleName of the tensor
	last   []*refit.Report           // the last run's, by stage (m2n_model_delta_report)
	// loraOf, on a model of LoRA adapters (m2n_model_lora), is the model
	// they adapt, and merger what m2n_model_merge_lora merged of them.
	loraOf *modelEntry
	merger *lora.Merger
}

// modelScale is one of this rank's scale tensors of a model converted to
// FP8: the box of the tensor's block grid it holds (for a piece, Entry,
// in the whole tensor's grid).
type modelScale struct {
	Name   string  `json:"name"`
	Tensor string  `json:"tensor"`
	Of     string  `json:"of"`
	Stage  int     `json:"stage"`
	Bytes  int64   `json:"bytes"`
	Shape  []int64 `json:"shape"`
	Offset []int64 `json:"offset"`
}

// modelBuffer is one of this rank's buffers of a model.
type modelBuffer struct {
	Name    string           `json:"name"`
	Stage   int              `json:"stage"`
	DType   string           `json:"dtype"`
	Elems   int64            `json:"elems"`
	Bytes   int64            `json:"bytes"`
	Tensors []string         `json:"tensors"`
	Parts   []modelspec.Part `json:"parts"` // the parts it holds, in the stage's order
	dt      dtype.DType
}

// partsOf lists the parts of stage stg's tensors that rank (local to the
// stage) holds in buffer name on side.
func partsOf(stg *model.Stage, side model.Side, rank int, name string) []modelspec.Part {
	var out []modelspec.Part
	for _, t := range stg.Tensors {
		if p, buf, ok := modelspec.PartOf(t, side, rank); ok && buf == name {
			out = append(out, p)
		}
	}
	return out
}

func (me *modelEntry) session() *sessionEntry { return me.se }

func modelOf(h C.m2n_model) (*modelEntry, error) {
	return lookup[*modelEntry](uint64(h), "model")
}

// loadOptionsOf parses "scale=N,layers=L,mtp=1".
func loadOptionsOf(s string) (model.LoadOptions, error) {
	var o model.LoadOptions
	for _, kv := range strings.Split(s, ",") {
		kv = strings.TrimSpace(kv)
		if kv == "" {
			continue
		}
		k, v, _ := strings.Cut(kv, "=")
		if k == "fp8" {
			continue // fp8Of reads it
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err == nil && n < 0 {
			err = fmt.Errorf("negative")
		}
		switch k {
		case "scale":
			o.Scale = n
		case "layers":
			o.Layers = int(n)
		case "mtp":
			o.MTP = n != 0
		default:
			err = fmt.Errorf("unknown key (want scale, layers, mtp or fp8)")
		}
		if err != nil {
			return o, &reshard.FieldError{Field: "load", Got: strconv.Quote(kv), Why: err.Error()}
		}
	}
	return o, nil
}

// fp8Of reads the fp8=MODE option of load ("" for none).
func fp8Of(load string) (fp8.Mode, error) {
	for _, kv := range strings.Split(load, ",") {
		if k, v, _ := strings.Cut(strings.TrimSpace(kv), "="); k == "fp8" {
			m, err := fp8.ParseMode(v)
			if err != nil {
				return 0, &reshard.FieldError{Field: "load", Got: strconv.Quote(kv), Why: err.Error()}
			}
			return m, nil
		}
	}
	return 0, nil
}

// layoutsOf loads and lays out a model.
func layoutsOf(spec, trainer, generator, load string) (*model.Layouts, error) {
	lo, err := loadOptionsOf(load)
	if err != nil {
		return nil, err
	}
	mode, err := fp8Of(load)
	if err != nil {
		return nil, err
	}
	m, err := model.Load(spec, lo)
	if err != nil {
		return nil, &reshard.FieldError{Field: "model", Got: strconv.Quote(spec), Why: err.Error()}
	}
	tr, err := model.ParseTrainer(trainer)
	if err != nil {
		return nil, &reshard.FieldError{Field: "trainer", Got: strconv.Quote(trainer), Why: err.Error()}
	}
	gen, err := model.ParseGenerator(generator)
	if err != nil {
		return nil, &reshard.FieldError{Field: "generator", Got: strconv.Quote(generator), Why: err.Error()}
	}
	return model.NewQuantized(m, tr, gen, mode)
}

//export m2n_model_prepare
func m2n_model_prepare(h C.m2n_session, spec, trainer, generator, load, route *C.char, out *C.m2n_model) (rc C.int) {
	defer recovered(&rc)
	se, err := sessionOf(h)
	if err != nil {
		return result(err)
	}
	if out == nil {
		return result(invalidf("m2n_model_prepare: out is NULL"))
	}
	*out = 0
	se.mu.Lock()
	defer se.mu.Unlock()
	rank := se.s.Rank()
	l, localErr := layoutsOf(goString(spec), goString(trainer), goString(generator), goString(load))
	r, rerr := routeOf(goString(route))
	if localErr == nil {
		localErr = rerr
	}
	if localErr != nil {
		localErr = fmt.Errorf("rank %d: %w", rank, localErr)
	}
	ctx := context.Background()
	if err := se.s.Agree(ctx, nil, localErr); err != nil {
		return result(err)
	}
	me, err := newModelEntry(se, l, r)
	if err != nil {
		return result(err)
	}
	mh := register(me)
	se.models[mh] = me
	*out = C.m2n_model(mh)
	return C.M2N_OK
}

// newModelEntry prepares layouts l on route r over the session of se
// (every rank agreed on them) and lists this rank's buffers and scale
// tensors of them.
func newModelEntry(se *sessionEntry, l *model.Layouts, r reshard.Route) (*modelEntry, error) {
	rank := se.s.Rank()
	m, err := se.s.PrepareModel(context.Background(), l, r)
	if err != nil {
		return nil, err
	}
	me := &modelEntry{se: se, m: m}
	for side := range 2 {
		me.bufs[side] = map[string]modelBuffer{}
	}
	for si, ss := range m.Pipeline.Sessions {
		if ss == nil {
			continue
		}
		for side := range 2 {
			for _, b := range l.Stages[si].Buffers(model.Side(side), ss.Rank()) {
				if old, dup := me.bufs[side][b.Name]; dup {
					// never so for the built-in layouts; refuse rather than alias.
					m.Close()
					return nil, fmt.Errorf("rank %d: model buffer %q is in stages %d and %d", rank, b.Name, old.Stage, si)
				}
				me.bufs[side][b.Name] = modelBuffer{Name: b.Name, Stage: si, DType: b.DType.String(), Elems: b.Elems, Bytes: b.Bytes(),
					Tensors: b.Tensors, Parts: partsOf(l.Stages[si], model.Side(side), ss.Rank(), b.Name), dt: b.DType}
			}
		}
	}
	me.scales = map[string]modelScale{}
	for si, ss := range m.Pipeline.Sessions {
		if ss == nil {
			continue
		}
		for i, sp := range m.Specs[si] {
			box, ok, err := sp.ScaleBlocks(ss.Rank())
			if err != nil || !ok {
				continue // a spec that does not convert, or this rank holds none of it
			}
			name := session.ScaleName(sp.Name)
			t := l.Stages[si].Tensors[i] // Specs[si] follow the stage's entries
			me.scales[name] = modelScale{Name: name, Tensor: sp.Name, Of: t.Whole().Name, Stage: si, Bytes: 4 * box.Elems(), Shape: box.Shape(),
				Offset: gridOffset(t, sp, box.Lo)}
		}
	}
	return me, nil
}

// gridOffset moves a piece's scale box corner into its whole tensor's
// block grid: along the piece's dim by its origin in blocks.
func gridOffset(t *model.TensorLayout, sp refit.Spec, lo []int64) []int64 {
	out := slices.Clone(lo)
	if t.Origin == nil {
		return out
	}
	g, err := sp.NewGrid()
	if err != nil {
		return out
	}
	rows, cols := g.BlockShape()
	nd := len(out)
	for d, o := range t.Origin {
		switch {
		case o == 0:
		case d == nd-2:
			out[d] += o / rows
		case d == nd-1:
			out[d] += o / cols
		default:
			out[d] += o
		}
	}
	return out
}

// refreshEntry is a tensor this generator rank holds that needs the
// generator's post-load step after every step (model.Tensor.Refresh).
type refreshEntry struct {
	Tensor string `json:"tensor"`
	Buffer string `json:"buffer"`
	Stage  int    `json:"stage"`
	Why    string `json:"why"`
}

// refreshOf lists the tensors of this rank's generator buffers that need
// the generator's post-load step, in model order.
func refreshOf(me *modelEntry) []refreshEntry {
	out := []refreshEntry{}
	seen := map[string]bool{}
	for si, ss := range me.m.Pipeline.Sessions {
		if ss == nil {
			continue
		}
		for _, t := range me.m.Layouts.Stages[si].Tensors {
			w := t.Whole()
			if w.Refresh == "" || seen[w.Name] {
				continue
			}
			if p, ok := t.Part(model.Dst, ss.Rank()); ok {
				seen[w.Name] = true
				out = append(out, refreshEntry{Tensor: w.Name, Buffer: p.Buffer, Stage: si, Why: w.Refresh})
			}
		}
	}
	return out
}

// byStage lists m's values by stage, then name (key gives both).
func byStage[T any](m map[string]T, key func(T) (int, string)) []T {
	out := make([]T, 0, len(m))
	for _, v := range m {
		out = append(out, v)
	}
	sort.Slice(out, func(i, j int) bool {
		si, ni := key(out[i])
		sj, nj := key(out[j])
		if si != sj {
			return si < sj
		}
		return ni < nj
	})
	return out
}

func bufferKey(b modelBuffer) (int, string) { return b.Stage, b.Name }
func scaleKey(x modelScale) (int, string)   { return x.Stage, x.Name }

//export m2n_model_describe
func m2n_model_describe(h C.m2n_model, buf *C.char, n C.size_t, needed *C.size_t) (rc C.int) {
	defer recovered(&rc)
	return locked(uint64(h), "model", func(me *modelEntry) error {
		l := me.m.Layouts
		js, err := json.Marshal(map[string]any{
			"model": l.Model.Name, "trainer": l.Trainer.String(), "generator": fmt.Sprint(l.Generator),
			"world": l.World(), "stages": len(l.Stages), "tensors": len(l.Model.Tensors),
			"params": l.Model.Params(), "bytes": l.Model.Bytes(),
			"src": byStage(me.bufs[0], bufferKey), "dst": byStage(me.bufs[1], bufferKey), "scale": byStage(me.scales, scaleKey),
			"refresh": refreshOf(me),
		})
		if err != nil {
			return err
		}
		describeOut(js, buf, n, needed)
		return nil
	})
}

// modelBuffers maps named C buffers (sources, destinations, scales) onto
// the model's stages.
func (me *modelEntry) modelBuffers(named [2][]C.m2n_named_buffer, scales []C.m2n_named_buffer) (*session.ModelBuffers, error) {
	s := me.se.s
	rank, dev := s.Rank(), s.Options().Device
	stages := len(me.m.Layouts.Stages)
	mb := &session.ModelBuffers{Src: make([]map[string]transport.Buffer, stages), Dst: make([]map[string]transport.Buffer, stages),
		Scale: make([]map[string]transport.Buffer, stages)}
	for si := range stages {
		mb.Src[si], mb.Dst[si], mb.Scale[si] = map[string]transport.Buffer{}, map[string]transport.Buffer{}, map[string]transport.Buffer{}
	}
	for i := range scales {
		name := goString(scales[i].name)
		info, ok := me.scales[name]
		if !ok {
			return nil, &refit.BufferError{Rank: rank, Tensor: name, Side: "scale", Why: "is not one of this rank's scale tensors of the model (see m2n_model_describe)", Got: -1}
		}
		if _, dup := mb.Scale[info.Stage][info.Tensor]; dup {
			return nil, &refit.BufferError{Rank: rank, Tensor: name, Side: "scale", Why: "is given twice", Want: info.Bytes, Got: -1}
		}
		b, err := bufferOf(&scales[i].buffer, dev, dtype.F32, rank, info.Tensor, "scale", info.Bytes)
		if err != nil {
			return nil, err
		}
		if b != nil && b.Len() != info.Bytes {
			return nil, &refit.BufferError{Rank: rank, Tensor: info.Tensor, Side: "scale", Why: "has another size", Want: info.Bytes, Got: b.Len()}
		}
		if b != nil {
			mb.Scale[info.Stage][info.Tensor] = b
		}
	}
	for side, list := range named {
		into := mb.Src
		if side == 1 {
			into = mb.Dst
		}
		what := sideName(side)
		for i := range list {
			name := goString(list[i].name)
			info, ok := me.bufs[side][name]
			if !ok {
				return nil, &refit.BufferError{Rank: rank, Tensor: name, Side: what, Why: "is not one of this rank's buffers of the model (see m2n_model_describe)", Got: -1}
			}
			if _, dup := into[info.Stage][name]; dup {
				return nil, &refit.BufferError{Rank: rank, Tensor: name, Side: what, Why: "is given twice", Want: info.Bytes, Got: -1}
			}
			b, err := bufferOf(&list[i].buffer, dev, info.dt, rank, name, what, info.Bytes)
			if err != nil {
				return nil, err
			}
			if b != nil && b.Len() != info.Bytes {
				return nil, &refit.BufferError{Rank: rank, Tensor: name, Side: what, Why: "has another size", Want: info.Bytes, Got: b.Len()}
			}
			if b != nil {
				into[info.Stage][name] = b
			}
		}
	}
	return mb, nil
}

func namedOf(p *C.m2n_named_buffer, n C.int64_t) ([]C.m2n_named_buffer, error) {
	switch {
	case n < 0:
		return nil, fmt.Errorf("%d named buffers", n)
	case n == 0:
		return nil, nil
	case p == nil:
		return nil, fmt.Errorf("%d named buffers at NULL", n)
	}
	return unsafe.Slice(p, int(n)), nil
}

//export m2n_model_run
func m2n_model_run(h C.m2n_model, src *C.m2n_named_buffer, nsrc C.int64_t, dst *C.m2n_named_buffer, ndst C.int64_t,
	scale *C.m2n_named_buffer, nscale C.int64_t, stream C.uintptr_t, report *C.m2n_report) (rc C.int) {
	defer recovered(&rc)
	if report != nil {
		*report = C.m2n_report{}
	}
	me, err := modelOf(h)
	if err != nil {
		return result(usedAfterClose(uint64(h), "model", "m2n_model_run", err))
	}
	me.se.mu.Lock()
	defer me.se.mu.Unlock()
	me.last = nil
	rank := me.se.s.Rank()
	var named [2][]C.m2n_named_buffer
	var scales []C.m2n_named_buffer
	var localErr error
	if named[0], localErr = namedOf(src, nsrc); localErr == nil {
		if named[1], localErr = namedOf(dst, ndst); localErr == nil {
			scales, localErr = namedOf(scale, nscale)
		}
	}
	if localErr != nil {
		localErr = fmt.Errorf("rank %d: %w", rank, localErr)
	}
	var mb *session.ModelBuffers
	if localErr == nil {
		mb, localErr = me.modelBuffers(named, scales)
	}
	if localErr == nil {
		if err := syncStream(me.se.s, stream); err != nil {
			localErr = fmt.Errorf("rank %d: waiting for stream %#x: %w", rank, uintptr(stream), err)
		}
	}
	// One agreement over the whole session first: the stages run on
	// communicators of their own, so a rank's bad buffer would otherwise
	// fail its stages only.
	ctx := context.Background()
	if err := me.se.s.Agree(ctx, nil, localErr); err != nil {
		return result(err)
	}
	var reps []*refit.Report
	if me.se.s.Options().Device == session.CPU {
		offThread(func() { reps, err = me.m.Run(ctx, mb) })
	} else {
		reps, err = me.m.Run(ctx, mb)
	}
	me.last = reps
	fillReport(report, reps)
	completed, cerr := me.modelCompleted(ctx, reps)
	if err == nil {
		err = cerr
	}
	if report != nil && cerr == nil {
		report.completed = C.int64_t(completed)
		every := 0
		for _, st := range me.m.Layouts.Stages {
			every += len(st.Tensors)
		}
		report.failed = C.int64_t(every - completed)
	}
	return result(err)
}

// modelCompleted counts the model's tensors that completed in every stage,
// the same on every rank: each rank reports the stages it is in (a trainer
// rank its own, a generator rank every one), in one small exchange over
// the whole session, and each stage counts once (a failed exchange aborts
// the session, as any collective of it does).
func (me *modelEntry) modelCompleted(ctx context.Context, reps []*refit.Report) (int, error) {
	stages := len(me.m.Layouts.Stages)
	mine := make([]byte, 8*stages)
	for si := range stages {
		v := int64(-1) // not in this stage, or no report
		if si < len(reps) && reps[si] != nil {
			v = int64(len(reps[si].Completed))
		}
		binary.LittleEndian.PutUint64(mine[8*si:], uint64(v))
	}
	all, err := control.Exchange(control.WithPhase(ctx, "model completion count"), me.se.s.Collective(), mine)
	if err != nil {
		return 0, err // the session aborted (the exchange is bounded, and ends on a peer's notice)
	}
	total := 0
	for si := range stages {
		for _, b := range all {
			if len(b) == 8*stages {
				if v := int64(binary.LittleEndian.Uint64(b[8*si:])); v >= 0 {
					total += int(v)
					break
				}
			}
		}
	}
	return total, nil
}

//export m2n_model_refuse
func m2n_model_refuse(h C.m2n_model, why *C.char) (rc C.int) {
	defer recovered(&rc)
	me, err := modelOf(h)
	if err != nil {
		return result(usedAfterClose(uint64(h), "model", "m2n_model_refuse", err))
	}
	me.se.mu.Lock()
	defer me.se.mu.Unlock()
	reason := goString(why)
	if reason == "" {
		reason = "refused the step"
	}
	return result(me.se.s.Agree(context.Background(), nil, fmt.Errorf("rank %d: %s", me.se.s.Rank(), reason)))
}

//export m2n_model_close
func m2n_model_close(h C.m2n_model) (rc C.int) {
	defer recovered(&rc)
	me, err := modelOf(h)
	if err != nil {
		return result(err)
	}
	forget(uint64(h))
	me.se.mu.Lock()
	defer me.se.mu.Unlock()
	delete(me.se.models, uint64(h))
	me.se.closedHandle(uint64(h))
	return result(me.m.Close())
}
