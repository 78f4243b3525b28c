package session

import (
	"context"
	"fmt"
	"sync"

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
	if err := s.Agree(ctx, []refit.Field{{Name: "model", Value: l.Model.Name}, {Name: "trainer", Value: l.Trainer.String()},
		{Name: "generator", Value: fmt.Sprint(l.Generator)}, {Name: "model tensors", Value: fmt.Sprint(len(l.Model.Tensors))}}, localErr); err != nil {
		return nil, err
	}
	st, err := s.Pipeline(l.Ranks)
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
	// each (weight_scale_inv: reshard.TensorBuffers.Scale), on generator
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
