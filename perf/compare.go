package perf

import (
	"context"
	"fmt"

	"github.com/m2n-dev/m2n/refit"
	"github.com/m2n-dev/m2n/reshard"
	"github.com/m2n-dev/m2n/session"
)

// ComparePerTensor moves model m one call per tensor, as the released
// NCCL M2N is driven: every tensor of a stage prepared once as a call of
// its own on route (auto: the route the model picks for that tensor
// alone), run one after another each step, the stages at once, iters
// timed steps after one that warms up, on the world session s. It
// compares them with the batched call's time in rep and the whole
// model's bound of the route (named routeName; for auto the least bound
// of any route).
func ComparePerTensor(s *session.Session, m *session.Model, b *session.ModelBuffers, iters int, route reshard.Route, routeName string, rep *SyncReport) (*CompareRun, error) {
	calls := make([][]*refit.Call, m.StageCount())
	defer func() {
		for _, cs := range calls {
			for _, c := range cs {
				c.Close()
			}
		}
	}()
	for si := range m.StageCount() {
		ss := m.Session(si)
		if ss == nil {
			continue
		}
		for _, sp := range m.StageSpecs(si) {
			c, err := ss.Prepare(context.Background(), []refit.Spec{sp}, route)
			if err != nil {
				return nil, err
			}
			calls[si] = append(calls[si], c)
		}
	}
	var times timings
	for it := 0; it < iters+1; it++ {
		sec, err := timeAll(s, func() error { return runEach(m, b, calls) })
		if err != nil {
			return nil, err
		}
		if it > 0 {
			times.Add(sec)
		}
	}
	cr := &CompareRun{PerTensorSec: times.Median(), BatchedSec: rep.MedianSec}
	cr.Speedup = cr.PerTensorSec / cr.BatchedSec
	for _, bd := range rep.Bounds {
		if bd.Route == routeName || (routeName == "auto" && (cr.BoundSec == 0 || bd.Seconds < cr.BoundSec)) {
			cr.BoundSec, cr.BoundRoute = bd.Seconds, bd.Route
		}
	}
	if cr.BoundSec > 0 {
		cr.OverBound = cr.BatchedSec / cr.BoundSec
	}
	return cr, nil
}

// runEach runs every stage's per-tensor calls one after another, the
// stages at once, and returns the first error.
func runEach(m *session.Model, b *session.ModelBuffers, calls [][]*refit.Call) error {
	errs := make([]error, len(calls))
	done := make(chan int, len(calls))
	n := 0
	for si, cs := range calls {
		if len(cs) == 0 {
			continue
		}
		n++
		tb := m.Tensors(si, b)
		go func() {
			defer recovered()
			defer func() { done <- si }()
			for i, c := range cs {
				if _, err := c.Run(context.Background(), tb[i:i+1]); err != nil {
					errs[si] = fmt.Errorf("stage %d, tensor %s: %w", si, m.StageSpecs(si)[i].Name, err)
					return
				}
			}
		}()
	}
	for ; n > 0; n-- {
		<-done
	}
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	return nil
}

// SyncBaseline times a plain exchange of model m's bytes (every stage's
// pairs at once, one contiguous message per pair over the stage's
// transport: plainExchange), interleaved with steps of the model, iters
// timed after one pair that warms up, and returns the overhead per step
// beyond moving the bytes.
func SyncBaseline(s *session.Session, m *session.Model, b *session.ModelBuffers, iters int) (*baselineRun, error) {
	pxs := make([]*plainExchange, m.StageCount())
	defer func() {
		for _, px := range pxs {
			if px != nil {
				px.Free()
			}
		}
	}()
	for si := range m.StageCount() {
		c, ss := m.StageCall(si), m.Session(si)
		if c == nil {
			continue
		}
		px, err := newPlainExchange(ss.Memory(), c.Schedule(), ss.Rank())
		if err != nil {
			return nil, err
		}
		pxs[si] = px
	}
	plainAll := func() error {
		errs := make(chan error, len(pxs))
		n := 0
		for si, px := range pxs {
			if px == nil {
				continue
			}
			n++
			go func() {
				defer recovered()
				errs <- px.Run(m.StageCall(si).Transport(), s.Options().Timeout)
			}()
		}
		var first error
		for ; n > 0; n-- {
			if err := <-errs; err != nil && first == nil {
				first = err
			}
		}
		return first
	}
	step := func() error { _, err := m.Run(context.Background(), b); return err }
	var plainT, stepT timings
	for it := 0; it < iters+1; it++ {
		pt, err := timeAll(s, plainAll)
		if err != nil {
			return nil, err
		}
		st, err := timeAll(s, step)
		if err != nil {
			return nil, err
		}
		if it > 0 {
			plainT.Add(pt)
			stepT.Add(st)
		}
	}
	br := &baselineRun{PlainSec: plainT.Median(), StepSec: stepT.Median()}
	br.OverheadSec = br.StepSec - br.PlainSec
	return br, nil
}
