package perf

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/m2n-dev/m2n/model"
	"github.com/m2n-dev/m2n/pattern"
	"github.com/m2n-dev/m2n/refit"
	"github.com/m2n-dev/m2n/session"
)

// changeModel applies update number step to every source part this rank
// holds, each tensor changing the fraction change gives its name.
func changeModel(m *session.Model, b *session.ModelBuffers, step uint64, change func(string) float64) error {
	return m.EachPart(b, model.Src, true, func(p session.ModelPart) error {
		return pattern.Change(p.Tensor.Src, p.Rank, uint64(p.Index), step, change(p.Tensor.Name), p.Bytes, p.Part.View)
	})
}

// fullStep runs the step again as a full sync of the same values
// (session.Model.Resync) and returns the slowest rank's time.
func (r *syncRun) fullStep() (float64, error) {
	r.m.Resync()
	return timedRun(r.s, r.m, r.b)
}

// timedRun runs one step of model m (buffers b) after a barrier of s and
// returns the slowest rank's time.
func timedRun(s *session.Session, m *session.Model, b *session.ModelBuffers) (float64, error) {
	if err := s.Barrier(context.Background()); err != nil {
		return 0, err
	}
	t0 := time.Now()
	_, err := m.Run(context.Background(), b)
	sec, _, err := stepOver(s, m, time.Since(t0).Seconds(), err)
	return sec, err
}

// deltaReport sums the last delta step's bytes over this rank's stages
// and every rank, against the full syncs; Change is the model's fraction
// of changed elements, weighted by bytes.
func (r *syncRun) deltaReport() (*DeltaReport, error) {
	var st refit.Stats
	for _, rp := range r.last {
		if rp != nil {
			st.Add(rp.Stats)
		}
	}
	d, err := deltaReport(r.s, st, 0, r.times, r.full)
	if err != nil {
		return nil, err
	}
	var changed, all float64
	for _, t := range r.l.Model.Tensors {
		n := float64(t.Bytes())
		changed += n * r.c.Change(t.Name)
		all += n
	}
	if all > 0 {
		d.Change = changed / all
	}
	return d, nil
}

// Changes returns each tensor's fraction of elements a step changes in
// delta mode: uniform for every tensor, or, given a change-model file
// (path, testdata/change-model.json), the fraction its first run measured
// for the tensor's kind (pattern.ChangeModel.Fraction).
func Changes(path string, uniform float64) (func(tensor string) float64, error) {
	if path == "" {
		return func(string) float64 { return uniform }, nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	cm, err := pattern.ReadChangeModel(data, 0)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return cm.Fraction, nil
}
