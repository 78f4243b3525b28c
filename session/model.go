package session

import (
	"context"
	"fmt"
	"sync"

	"github.com/m2n-dev/m2n/bounds"
	"github.com/m2n-dev/m2n/control"
	"github.com/m2n-dev/m2n/internal/checked"
	"github.com/m2n-dev/m2n/model"
	"github.com/m2n-dev/m2n/refit"
	"github.com/m2n-dev/m2n/reshard"
	"github.com/m2n-dev/m2n/transport"
)

// Model is a whole model prepared for refit on a session: one call per
// pipeline stage, each on the stage's own communicator and holding every
// tensor of the stage in one joint schedule (small tensors share messages,
// large ones pipeline through the staging rounds), fused weights moved in
// place through their views. Run moves one step of the whole model, the
// stages concurrently.
type Model struct {
	Layouts  *model.Layouts
	Pipeline *Pipeline
	Call     *PipelineCall
	// Specs[s] are stage s's specs with this rank's views (nil where the
	// rank is not in stage s); Index[s][i] is spec i's index in the
	// model's tensor list (a piece's: its whole tensor's, model.TensorLayout).
	Specs [][]refit.Spec
	Index [][]int

	newRun func() // starts a run's progress (OnProgress)
}

// PrepareModel splits the session into the layouts' pipeline stages and
// prepares each stage's tensors once on route (every rank of the session
// calls it with the same layouts; the session must have l.World() ranks).
func (s *Session) PrepareModel(ctx context.Context, l *model.Layouts, route reshard.Route) (*Model, error) {
	var localErr error
	if l.World() != s.size {
		localErr = fmt.Errorf("rank %d: the model's layouts need %d ranks (trainer %v, generator %v); the session has %d",
			s.rank, l.World(), l.Trainer, l.Generator, s.size)
	}
	if localErr == nil {
		localErr = s.checkLayout(l.Ranks)
	}
	ph := s.phasesOf()
	ph.mark("the program's own work")
	// one agreement on the model and its stage layout, before the stages
	// are made (Pipeline's own agreement, folded in).
	if err := s.Agree(ctx, []control.Field{{Name: "model", Value: l.Model.Name}, {Name: "trainer", Value: l.Trainer.String()},
		{Name: "generator", Value: fmt.Sprint(l.Generator)}, {Name: "model tensors", Value: fmt.Sprint(len(l.Model.Tensors))},
		layoutField(l.Ranks)}, localErr); err != nil {
		return nil, err
	}
	ph.mark("model and stage layout agreed")
	st, err := s.pipeline(l.Ranks)
	if err != nil {
		return nil, err
	}
	m := &Model{Layouts: l, Pipeline: st, Specs: make([][]refit.Spec, len(l.Stages)), Index: make([][]int, len(l.Stages))}
	index := map[string]int{}
	for i, t := range l.Model.Tensors {
		index[t.Name] = i
	}
	for si, ss := range st.Sessions {
		if ss == nil {
			continue
		}
		for _, t := range l.Stages[si].Tensors {
			sp := refit.Spec{Name: t.Name, Src: t.Src, Dst: t.Dst, Scale: t.Scale}
			if p, ok := t.Part(model.Src, ss.Rank()); ok {
				sp.Views.Src = p.View
			}
			if p, ok := t.Part(model.Dst, ss.Rank()); ok {
				sp.Views.Dst = p.View
			}
			m.Specs[si] = append(m.Specs[si], sp)
			m.Index[si] = append(m.Index[si], index[t.Whole().Name])
		}
	}
	m.Call, err = st.Prepare(ctx, func(si int) []refit.Spec { return m.Specs[si] }, route)
	if err != nil {
		st.Close()
		return nil, err
	}
	return m, nil
}

// ModelBuffers are one rank's local buffers of a model, per stage and
// side, by buffer name (a fused buffer holds several tensors' parts).
type ModelBuffers struct {
	// Src[s] and Dst[s] map stage s's buffer names to this rank's buffers.
	Src, Dst []map[string]transport.Buffer
	// Scale[s] maps the names of stage s's tensors that the generator
	// holds in FP8 (model.NewQuantized) to this rank's scale tensor of
	// each (weight_scale_inv: refit.TensorBuffers.Scale), on generator
	// ranks.
	Scale []map[string]transport.Buffer
}

// ScaleName is the name FP8 checkpoints give a weight's scale tensor:
// "...weight" becomes "...weight_scale_inv"; another name gets
// "_scale_inv" appended.
func ScaleName(tensor string) string { return tensor + "_scale_inv" }

// Alloc allocates this rank's buffers of every stage it is in from the
// session's memory (their contents unspecified), and the scale tensors of
// the tensors it receives in FP8.
func (m *Model) Alloc() (*ModelBuffers, error) {
	b := &ModelBuffers{Src: make([]map[string]transport.Buffer, len(m.Specs)), Dst: make([]map[string]transport.Buffer, len(m.Specs)),
		Scale: make([]map[string]transport.Buffer, len(m.Specs))}
	for si, ss := range m.Pipeline.Sessions {
		if ss == nil {
			continue
		}
		stg := m.Layouts.Stages[si]
		for side, into := range []*[]map[string]transport.Buffer{&b.Src, &b.Dst} {
			(*into)[si] = map[string]transport.Buffer{}
			for _, buf := range stg.Buffers(model.Side(side), ss.Rank()) {
				x, err := ss.Memory().Alloc(buf.Bytes())
				if err != nil {
					m.Free(b)
					return nil, fmt.Errorf("rank %d, stage %d: buffer %s of %d bytes: %w", ss.Rank(), si, buf.Name, buf.Bytes(), err)
				}
				(*into)[si][buf.Name] = x
			}
		}
		b.Scale[si] = map[string]transport.Buffer{}
		for _, sp := range m.Specs[si] {
			n, err := sp.ScaleBytes(ss.Rank())
			if err != nil {
				m.Free(b)
				return nil, fmt.Errorf("rank %d, stage %d: scales of %s: %w", ss.Rank(), si, sp.Name, err)
			}
			if sp.Scale == 0 || !sp.Dst.Mesh().Contains(ss.Rank()) {
				continue
			}
			x, err := ss.Memory().Alloc(n)
			if err != nil {
				m.Free(b)
				return nil, fmt.Errorf("rank %d, stage %d: scales of %s (%d bytes): %w", ss.Rank(), si, sp.Name, n, err)
			}
			b.Scale[si][sp.Name] = x
		}
	}
	return b, nil
}

// Free releases buffers from Alloc.
func (m *Model) Free(b *ModelBuffers) {
	for si, ss := range m.Pipeline.Sessions {
		if ss == nil {
			continue
		}
		for _, side := range [][]map[string]transport.Buffer{b.Src, b.Dst, b.Scale} {
			if si >= len(side) {
				continue
			}
			for _, x := range side[si] {
				ss.Memory().Free(x)
			}
		}
	}
}

// Tensors returns stage si's buffers for its call, one TensorBuffers per
// spec: each tensor's part is its buffer by name (through its view).
func (m *Model) Tensors(si int, b *ModelBuffers) []refit.TensorBuffers {
	ss := m.Pipeline.Sessions[si]
	if ss == nil {
		return nil
	}
	out := make([]refit.TensorBuffers, len(m.Specs[si]))
	for i, t := range m.Layouts.Stages[si].Tensors {
		if p, ok := t.Part(model.Src, ss.Rank()); ok {
			out[i].Src = b.Src[si][p.Buffer]
		}
		if p, ok := t.Part(model.Dst, ss.Rank()); ok {
			out[i].Dst = b.Dst[si][p.Buffer]
		}
		if si < len(b.Scale) {
			out[i].Scale = b.Scale[si][t.Name]
		}
	}
	return out
}

// Run moves one step of the whole model, every stage this rank is in at
// once, and returns the reports by stage.
func (m *Model) Run(ctx context.Context, b *ModelBuffers) ([]*refit.Report, error) {
	if m.newRun != nil {
		m.newRun()
	}
	return m.Call.Run(ctx, func(si int) []refit.TensorBuffers { return m.Tensors(si, b) })
}

// SetVersion gives the model's next step version v (at least 1) on every
// stage this rank is in (refit.Call.SetVersion): every rank of the
// session gives the same, and each stage's ranks agree on it as the step
// begins.
func (m *Model) SetVersion(v uint64) error {
	for _, c := range m.Call.Calls {
		if c != nil {
			if err := c.SetVersion(v); err != nil {
				return err
			}
		}
	}
	return nil
}

// Held returns the version of the model this rank's buffers hold
// (refit.Held): the lowest of its stages' versions, verified and intact
// only where every stage's is.
func (m *Model) Held() refit.Held {
	var h refit.Held
	first := true
	for _, c := range m.Call.Calls {
		if c == nil {
			continue
		}
		ch := c.Held()
		if first {
			h, first = ch, false
			continue
		}
		h.Version = min(h.Version, ch.Version)
		h.Verified = h.Verified && ch.Verified
		h.Intact = h.Intact && ch.Intact
	}
	return h
}

// Resync makes the model's next step a full sync on every stage this rank
// is in (refit.Call.Resync): for a session in delta mode, every element
// sent dense. One rank asking is enough: each stage's ranks agree on it as
// the step begins. It does nothing on a session not in delta mode.
func (m *Model) Resync() {
	for _, c := range m.Call.Calls {
		if c != nil {
			c.Resync()
		}
	}
}

// OnProgress sets fn to be called as this rank's stages progress through
// a run, with the bytes moved and tensors done so far in the run, summed
// over its stages (which run concurrently: fn must be safe for that; it is
// called with a lock held, so keep it short). Total gives the ends.
func (m *Model) OnProgress(fn func(bytes int64, tensors int)) {
	var mu sync.Mutex
	last := make([][2]int64, len(m.Call.Calls))
	var bytes, tensors int64
	for si, c := range m.Call.Calls {
		if c == nil {
			continue
		}
		if fn == nil {
			c.OnProgress(nil)
			continue
		}
		c.OnProgress(func(b int64, t int) {
			mu.Lock()
			defer mu.Unlock()
			bytes += b - last[si][0]
			tensors += int64(t) - last[si][1]
			last[si] = [2]int64{b, int64(t)}
			fn(bytes, int(tensors))
		})
	}
	m.newRun = func() {
		mu.Lock()
		clear(last)
		mu.Unlock()
	}
}

// Total returns what this rank moves in one run of the model, summed over
// its stages: bytes sent, received and copied, and tensors taken part in.
func (m *Model) Total() (bytes int64, tensors int) {
	for _, c := range m.Call.Calls {
		if c != nil {
			b, t := c.Bytes()
			bytes += b
			tensors += t
		}
	}
	return bytes, tensors
}

// Close frees the stages' calls and sessions.
func (m *Model) Close() error {
	m.Call.Close()
	return m.Pipeline.Close()
}

// The methods below are what programs read of a prepared model: the
// fields above stay for the C ABI, which reads them today, but a program
// should not need to reach into Stages or Call.

// StageCount returns the model's pipeline stages (every rank knows them
// all, whether or not it is in them).
func (m *Model) StageCount() int { return len(m.Layouts.Stages) }

// Session returns this rank's session of stage si (its communicator:
// ranks local to the stage), or nil where the rank is not in the stage.
func (m *Model) Session(si int) *Session { return m.Pipeline.Sessions[si] }

// StageCall returns stage si's prepared call, or nil where this rank is
// not in the stage.
func (m *Model) StageCall(si int) *refit.Call { return m.Call.Calls[si] }

// StageSpecs returns stage si's specs with this rank's views (nil where
// the rank is not in the stage), in the stage's tensor order.
func (m *Model) StageSpecs(si int) []refit.Spec { return m.Specs[si] }

// Routes returns the route each stage's call runs (its schedule's route:
// "auto:hier" where auto chose), "" for the stages this rank is not in.
func (m *Model) Routes() []string {
	out := make([]string, m.StageCount())
	for si, c := range m.Call.Calls {
		if c != nil {
			out[si] = c.Schedule().Route
		}
	}
	return out
}

// ModelPart is one tensor part this rank holds, on one side of one
// stage, with the host bytes of the buffer that holds it: Part.View places
// the part in Bytes. Index is the tensor's index in the model's tensor
// list (a seed for test patterns). Scale, on the destination side of a
// tensor the generator receives in FP8, is the host bytes of the part's
// scale tensor.
type ModelPart struct {
	Stage, Rank int // Rank is the stage's (local to its communicator)
	Tensor      *model.TensorLayout
	Index       int
	Part        model.Part
	Bytes       []byte
	Scale       []byte
}

// EachPart calls fn for every tensor part this rank holds on side, stage
// by stage, with the host bytes of its buffer: the buffer itself on CPUs;
// on GPUs a copy downloaded once per buffer, uploaded back after fn for
// every part of the stage when write is set (fn must then only write its
// own part's bytes: fused buffers hold several). It stops at the first
// error, naming the stage.
func (m *Model) EachPart(b *ModelBuffers, side model.Side, write bool, fn func(ModelPart) error) error {
	for si, ss := range m.Pipeline.Sessions {
		if ss == nil {
			continue
		}
		bufs, scales := b.Src[si], map[string]transport.Buffer(nil)
		if side == model.Dst {
			bufs = b.Dst[si]
			if si < len(b.Scale) {
				scales = b.Scale[si]
			}
		}
		host := map[string]hostCopy{} // by buffer name, or scale: and the tensor's
		for i, t := range m.Layouts.Stages[si].Tensors {
			p, ok := t.Part(side, ss.Rank())
			if !ok {
				continue
			}
			h, err := hostBytes(ss, p.Buffer, bufs[p.Buffer], host)
			if err != nil {
				return fmt.Errorf("stage %d: %w", si, err)
			}
			mp := ModelPart{Stage: si, Rank: ss.Rank(), Tensor: t, Index: m.Index[si][i], Part: p, Bytes: h}
			if x := scales[t.Name]; x != nil {
				if mp.Scale, err = hostBytes(ss, "scale:"+t.Name, x, host); err != nil {
					return fmt.Errorf("stage %d: %w", si, err)
				}
			}
			if err := fn(mp); err != nil {
				return fmt.Errorf("stage %d: %w", si, err)
			}
		}
		if write {
			for _, h := range host {
				if _, ok := h.buf.(transport.HostBuffer); !ok {
					if err := ss.Memory().Upload(h.buf, h.bytes); err != nil {
						return fmt.Errorf("stage %d: %w", si, err)
					}
				}
			}
		}
	}
	return nil
}

// hostCopy is a buffer and its host bytes.
type hostCopy struct {
	buf   transport.Buffer
	bytes []byte
}

// hostBytes returns the host bytes of x, named key: x itself in host
// memory, else a copy downloaded once (kept in host).
func hostBytes(s *Session, key string, x transport.Buffer, host map[string]hostCopy) ([]byte, error) {
	if h, ok := host[key]; ok {
		return h.bytes, nil
	}
	if x == nil {
		return nil, fmt.Errorf("rank %d: no buffer %s", s.rank, key)
	}
	h := hostCopy{buf: x}
	if hb, ok := x.(transport.HostBuffer); ok {
		h.bytes = hb
	} else {
		h.bytes = make([]byte, x.Len())
		if err := s.Memory().Download(h.bytes, x); err != nil {
			return nil, err
		}
	}
	host[key] = h
	return h.bytes, nil
}

// ModelMemory is what a rank's calls of a model hold beside its buffers,
// over the stages it is in: the staging its programs allocate (the
// larger of the two in-flight rounds' slots, sends and receives), the
// whole-tensor scratch (agbcast) and the staging bound of each stage
// (Options.StagingBytes).
type ModelMemory struct {
	Staging, Scratch, Bound int64
}

// Memory returns what this rank's calls of the model hold (ModelMemory).
func (m *Model) Memory() ModelMemory {
	var mm ModelMemory
	for si, c := range m.Call.Calls {
		if c == nil {
			continue
		}
		p := c.Program()
		mm.Staging += max(p.Staging[0][0], p.Staging[1][0]) + max(p.Staging[0][1], p.Staging[1][1])
		for _, n := range p.Full {
			mm.Scratch += n
		}
		mm.Bound += m.Pipeline.Sessions[si].Options().StagingBytes
	}
	return mm
}

// Bounds returns every route's data-movement bound for the whole model
// (hier.Bounds): each stage's tensors as one problem, the stages combined
// (they run at once into the same generator domains). Every rank returns
// the same: the stages a rank is not in are planned here from their
// layouts, on the generator domains of a stage it is in. It returns nil
// where a stage does not plan.
func (m *Model) Bounds(f bounds.Fabric, chunk float64) []bounds.Bound {
	var probs []bounds.Problem
	for si, c := range m.Call.Calls {
		if c != nil {
			probs = append(probs, bounds.ProblemOf(c.Plans(), c.Topology(), chunk))
			continue
		}
		st := m.Layouts.Stages[si]
		var plans []*reshard.Plan
		for _, t := range st.Tensors {
			p, err := reshard.NewPlan(t.Src, t.Dst, len(st.Members), reshard.Options{})
			if err != nil {
				return nil
			}
			plans = append(plans, p)
		}
		probs = append(probs, bounds.ProblemOf(plans, m.stageTopology(si), chunk))
	}
	return bounds.Of(bounds.Combine(probs...), f)
}

// stageTopology is stage si's topology as a rank outside it sees it: the
// generator's domains, taken from a stage this rank is in (the generator
// ranks sit at the same local ranks in every stage), and a domain of its
// own for each trainer rank.
func (m *Model) stageTopology(si int) reshard.Topology {
	for sj, c := range m.Call.Calls {
		if c == nil {
			continue
		}
		mine, theirs := m.Layouts.Stages[sj], m.Layouts.Stages[si]
		topo := c.Topology()
		dom := make([]int, len(theirs.Members))
		for r := range dom {
			if r < theirs.Trainers {
				dom[r] = -1 - r
				continue
			}
			dom[r] = topo.Domain[mine.Trainers+r-theirs.Trainers]
		}
		return reshard.Topology{Domain: dom}
	}
	return reshard.Topology{}
}

// ModelFootprint estimates what a model of layouts l will take of this
// rank's memory beside what the session holds, before anything is
// prepared, for CheckMemory: its buffers of every stage it is in (fused
// ones whole) and their FP8 scale tensors, the staging bound of each of
// those stages (and, with scratch, each stage's whole tensors, as agbcast
// gathers them), atomic shadows, host copies on GPUs (to fill and check
// the buffers from the host), and the stages' plans and schedules
// (CallFootprint).
func (s *Session) ModelFootprint(l *model.Layouts, scratch bool) Footprint {
	src, dst := l.RankBytes(s.rank)
	fp := Footprint{Tensor: fmt.Sprintf("model %s (%d tensors)", l.Model.Name, len(l.Model.Tensors)), Buffers: checked.SatSum(src, dst)}
	if s.opts.Device == GPU {
		fp.HostCopies = fp.Buffers
	}
	if s.opts.Atomic {
		fp.Staging = checked.SatSum(fp.Staging, dst)
	}
	for _, st := range l.Stages {
		r := st.LocalRank(s.rank)
		if r < 0 {
			continue
		}
		fp.Staging = checked.SatSum(fp.Staging, s.opts.StagingBytes)
		var specs []refit.Spec
		for _, t := range st.Tensors {
			sp := refit.Spec{Name: t.Name, Src: t.Src, Dst: t.Dst, Scale: t.Scale}
			specs = append(specs, sp)
			if n, err := sp.ScaleBytes(r); err == nil && t.Scale != 0 && t.Dst.Mesh().Contains(r) {
				fp.Buffers = checked.SatSum(fp.Buffers, n)
			}
			if scratch {
				fp.Staging = checked.SatSum(fp.Staging, t.Src.Bytes())
			}
		}
		c := s.CallFootprint(specs)
		fp.Plan, fp.Schedule = checked.SatSum(fp.Plan, c.Plan), checked.SatSum(fp.Schedule, c.Schedule)
	}
	return fp
}
