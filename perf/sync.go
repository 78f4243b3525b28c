package perf

import (
	"context"
	"fmt"
	"time"

	"github.com/m2n-dev/m2n/bounds"
	"github.com/m2n-dev/m2n/model"
	"github.com/m2n-dev/m2n/refit"
	"github.com/m2n-dev/m2n/session"
	"github.com/rs/zerolog"
)

// SyncReport is what refit sync prints: the model, the time per step,
// bytes per link class, per stage and per route, the slowest rank, the
// check, which tensors completed, and each rank's memory and handles.
type SyncReport struct {
	Model     string `json:"model"`
	Trainer   string `json:"trainer"`
	Generator string `json:"generator"`
	World     int    `json:"world"`
	Tensors   int    `json:"tensors"`
	Params    int64  `json:"params"`
	Bytes     int64  `json:"bytes"`
	// FP8 is the scaling mode of the tensors the generator receives in FP8,
	// FP8Tensors how many, DstBytes the model's bytes as the generator
	// holds them (each tensor once, FP8 where converted).
	FP8        string         `json:"fp8_scale,omitempty"`
	FP8Tensors int            `json:"fp8_tensors,omitempty"`
	DstBytes   int64          `json:"dst_bytes"`
	Routes     []string       `json:"routes"` // per stage
	Iters      int            `json:"iters"`
	MedianSec  float64        `json:"median_s"`
	MinSec     float64        `json:"min_s"`
	MaxSec     float64        `json:"max_s"`
	StepsSec   []float64      `json:"steps_s"` // the first 1024 timed steps
	GBps       float64        `json:"model_gbps"`
	Check      string         `json:"check"`
	Completed  int            `json:"completed"`
	Failed     []string       `json:"failed,omitempty"`
	Links      [3]int64       `json:"bytes_by_link"` // network, local, self; sent, summed over ranks
	Stages     []StageReport  `json:"stages"`
	Slowest    int            `json:"slowest_rank"`
	Ranks      []SyncRank     `json:"ranks"`
	Fabric     bounds.Fabric  `json:"fabric"`
	EmulatedBW float64        `json:"emulated_net_bw,omitempty"`
	Bounds     []bounds.Bound `json:"bounds"`
	Compare    *CompareRun    `json:"compare,omitempty"`
	Delta      *DeltaReport   `json:"delta,omitempty"` // in delta mode: against full syncs
	Baseline   *baselineRun   `json:"baseline,omitempty"`
}

// StageReport is one pipeline stage's part of a SyncReport.
type StageReport struct {
	Stage     int     `json:"stage"`
	Route     string  `json:"route"`
	Tensors   int     `json:"tensors"`
	Bytes     int64   `json:"bytes"`
	Rounds    int     `json:"rounds"`
	MedianSec float64 `json:"median_s"` // the stage call's time, slowest rank
}

// SyncRank is one rank's footprint.
type SyncRank struct {
	Rank    int    `json:"rank"`
	Role    string `json:"role"`
	Share   int64  `json:"share_bytes"`   // its part of the model, both sides
	Staging int64  `json:"staging_bytes"` // what its programs stage, every stage
	Scratch int64  `json:"scratch_bytes"` // whole-tensor scratch (agbcast)
	Bound   int64  `json:"staging_bound"` // the staging option, per stage it is in
	Base    int64  `json:"rss_start"`     // resident memory after joining, before the model
	Peak    int64  `json:"rss_peak"`
	Sent    int64  `json:"sent"`
	Recv    int64  `json:"recv"`
	// MPI requests pending and communicators held, live Go heap and
	// goroutines, after the first timed step and after the last: a long
	// run must keep them flat.
	Requests      [2]int64 `json:"mpi_requests"`
	Comms         [2]int64 `json:"mpi_comms"`
	Heap          [2]int64 `json:"heap"`
	Goroutines    [2]int64 `json:"goroutines"`
	PeakAfterWarm int64    `json:"rss_peak_first_step"`
	// Leaked is what the rank holds once the model is closed beyond what
	// it held before: MPI communicators and pending requests (both 0).
	Leaked [2]int64 `json:"mpi_comms_requests_leaked"`
}

// CompareRun is the model moved one call per tensor beside one batched
// call and the whole model's bound.
type CompareRun struct {
	PerTensorSec float64 `json:"per_tensor_median_s"`
	BatchedSec   float64 `json:"batched_median_s"`
	BoundSec     float64 `json:"bound_s"`
	BoundRoute   string  `json:"bound_route"`
	Speedup      float64 `json:"batched_speedup"`
	OverBound    float64 `json:"batched_over_bound"`
}

// baselineRun is a plain exchange of the model's bytes beside its steps.
type baselineRun struct {
	PlainSec    float64 `json:"plain_median_s"`
	StepSec     float64 `json:"step_median_s"`
	OverheadSec float64 `json:"overhead_per_step_s"`
}

// SyncConfig says how Sync runs a model's steps: Warmup untimed steps,
// then Iters timed ones (a step's time is the slowest rank's); Check
// poisons the destinations before every step and checks every element
// of every tensor after it; Floats fills the sources with finite values
// (a generator in FP8 refuses NaNs). Progress, when set, hears of the
// bytes moved (done of total; by steps where the bytes of every step
// overflow); Failed hears of a step's error on each of the rank's stage
// sessions (refit decides from them who reports an abort). WorldRank is
// this process's rank in the job, which check failures name. In delta
// mode (the session's Options.Delta) Change gives each tensor's fraction
// of elements that every step after the first changes, each step runs as
// a delta step and as a full sync (SyncReport.Delta), and Check poisons
// the destinations once, before the first.
type SyncConfig struct {
	Warmup, Iters int
	Check, Floats bool
	Change        func(tensor string) float64
	Progress      func(done, total int64, unit string)
	Failed        func(stage *session.Session, err error)
	WorldRank     int
	Log           zerolog.Logger
}

// Sync runs the steps of model m (laid out as l) with buffers b, whose
// sources FillModel filled, on the world session s (every rank of the
// job calls it), and reports them: times, the check, every rank's
// traffic, memory and handles, and the model's bounds on fabric with
// chunk bytes. start is this rank's usage before the model.
func Sync(s *session.Session, l *model.Layouts, m *session.Model, b *session.ModelBuffers, start Usage, fabric bounds.Fabric, c SyncConfig) (*SyncReport, error) {
	rep := newSyncReport(s, l, c.Iters)
	rep.Fabric = fabric
	run := syncRun{s: s, l: l, m: m, b: b, c: c, stages: make([]timings, len(l.Stages))}
	run.progress()
	for it := 0; it < c.Warmup+c.Iters; it++ {
		if err := run.step(it); err != nil {
			return nil, err
		}
	}
	rep.StepsSec = run.times.First()
	rep.MedianSec, rep.MinSec, rep.MaxSec = run.times.Median(), run.times.Min(), run.times.Max()
	rep.GBps = float64(l.Model.Bytes()) / rep.MedianSec / 1e9
	rep.Slowest = run.slowRank
	for si := range rep.Stages {
		rep.Stages[si].MedianSec = run.stages[si].Median()
	}
	if err := accountSync(s, l, m, run.last, start, run.warm, run.warmPeak, rep); err != nil {
		return nil, err
	}
	first, err := firstMessage(s, run.checkMsg)
	if err != nil {
		return nil, err
	}
	rep.Check = checkResult(c.Check, first)
	rep.Bounds = m.Bounds(fabric, float64(s.Options().ChunkBytes))
	if s.Options().Delta {
		if rep.Delta, err = run.deltaReport(); err != nil {
			return nil, err
		}
	}
	return rep, nil
}

// newSyncReport is the report's description of the model.
func newSyncReport(s *session.Session, l *model.Layouts, iters int) *SyncReport {
	rep := &SyncReport{Model: l.Model.Name, Trainer: l.Trainer.String(), Generator: fmt.Sprint(l.Generator), World: s.Size(),
		Tensors: len(l.Model.Tensors), Params: l.Model.Params(), Bytes: l.Model.Bytes(), Iters: iters, EmulatedBW: s.Options().EmulateNetBW}
	for si, st := range l.Stages {
		for _, t := range st.Tensors {
			rep.DstBytes += t.Dst.Bytes()
			if t.Scale != 0 {
				rep.FP8Tensors++
				rep.FP8 = t.Scale.String()
			}
		}
		rep.Routes = append(rep.Routes, "")
		rep.Stages = append(rep.Stages, StageReport{Stage: si, Tensors: len(st.Tensors)})
	}
	return rep
}

// syncRun is Sync's state across steps.
type syncRun struct {
	s        *session.Session
	l        *model.Layouts
	m        *session.Model
	b        *session.ModelBuffers
	c        SyncConfig
	times    timings
	full     timings // delta mode: the full syncs
	updates  uint64  // delta mode: the updates applied
	stages   []timings
	last     []*refit.Report
	slowRank int
	warm     Usage
	warmPeak int64
	checkMsg string // this rank's first wrong element, in any step
	base     int64  // the progress of the steps before this one
	perStep  int64  // the progress of a step (bytes, or 1)
}

// progress makes the model's progress reach c.Progress.
func (r *syncRun) progress() {
	if r.c.Progress == nil {
		return
	}
	bytes, _ := r.m.Total()
	steps := int64(r.c.Warmup + r.c.Iters)
	if bytes <= 0 || steps > (1<<62)/bytes {
		r.perStep = 1
		return
	}
	r.perStep = bytes
	r.m.OnProgress(func(b int64, _ int) { r.c.Progress(r.base+b, steps*bytes, "bytes") })
}

// step runs step it: poison (when checking, and at the first), the step,
// the slowest rank's time and each stage's, and the check.
func (r *syncRun) step(it int) error {
	s, c := r.s, r.c
	delta := s.Options().Delta && c.Change != nil
	if c.Check && !delta || it == 0 {
		if err := inSteps(s, "poison of the destinations", func() error { return poisonModel(r.m, r.b) }); err != nil {
			return err
		}
	}
	if delta && it > 0 {
		r.updates++
		if err := inSteps(s, "the sources' update", func() error { return changeModel(r.m, r.b, r.updates, c.Change) }); err != nil {
			return err
		}
	}
	if err := s.Barrier(context.Background()); err != nil {
		return err
	}
	steps := int64(c.Warmup + c.Iters)
	r.base = int64(it) * r.perStep
	if c.Progress != nil && r.perStep == 1 {
		c.Progress(int64(it), steps, "steps")
	}
	t0 := time.Now()
	reps, err := r.m.Run(context.Background(), r.b)
	if err != nil {
		for si := range r.m.StageCount() {
			if ss := r.m.Session(si); ss != nil && c.Failed != nil {
				c.Failed(ss, err)
			}
		}
	}
	slowest, slowRank, err := stepOver(s, r.m, time.Since(t0).Seconds(), err)
	if err != nil {
		return err
	}
	per := make([]float64, len(r.l.Stages))
	for si, rp := range reps {
		if rp != nil {
			per[si] = rp.Seconds
		}
	}
	if per, err = maxOverEach(s, per); err != nil {
		return err
	}
	if it >= c.Warmup {
		r.times.Add(slowest)
		r.slowRank = slowRank
		for si, x := range per {
			r.stages[si].Add(x)
		}
	}
	if it == c.Warmup {
		if r.warm, err = MeasureUsage(); err != nil {
			return err
		}
		r.warmPeak = peakRSS()
	}
	r.last = reps
	if delta && it > 0 {
		sec, err := r.fullStep()
		if err != nil {
			return err
		}
		if it >= c.Warmup {
			r.full.Add(sec)
		}
	}
	if c.Check {
		return r.check(it)
	}
	return nil
}

// check checks every step, the warm-up included: the destinations are
// poisoned before each, so a byte wrong in one step fails the check even
// where a later step would have overwritten it.
func (r *syncRun) check(it int) error {
	return inSteps(r.s, "check (comparing every destination element)", func() error {
		if r.checkMsg != "" {
			return nil
		}
		var steps uint64 // updates the sources had: none outside delta mode
		if r.s.Options().Delta && r.c.Change != nil {
			steps = r.updates
		}
		if err := checkModel(r.m, r.b, r.c.Floats, steps, r.c.Change, r.c.WorldRank); err != nil {
			when := iterationName(it, r.c.Warmup, "step")
			r.checkMsg = fmt.Sprintf("%v, in %s", err, when)
			r.c.Log.Error().Err(err).Str("when", when).Msg("check failed")
		}
		return nil
	})
}

// GeneratorLocalBandwidth measures the local bandwidth among the
// generator ranks of layouts l (localBandwidth) over a probe call of the
// world session s whose destinations are the generator's ranks (so its
// domains are the model's generator domains); every rank of s takes
// part and learns it. A model is best prepared after it (auto chooses its
// routes on the fabric).
func GeneratorLocalBandwidth(s *session.Session, l *model.Layouts) (float64, error) {
	probe, gens, err := probeSpec(l)
	if err != nil {
		return 0, err
	}
	call, err := s.Prepare(context.Background(), probe, refitFlat)
	if err != nil {
		return 0, err
	}
	defer call.Close()
	return localBandwidth(s, call, gens)
}

// Leaked gathers what each rank holds beyond what it held at start (MPI
// communicators and pending requests), once the model is closed, into
// the report's ranks.
func Leaked(s *session.Session, start Usage, rep *SyncReport) error {
	now, err := MeasureUsage()
	if err != nil {
		return err
	}
	all, err := gather(s, "report gathering", []int64{now.Comms - start.Comms, now.Requests - start.Requests})
	if err != nil {
		return err
	}
	for r := range rep.Ranks {
		rep.Ranks[r].Leaked = [2]int64{all[2*r], all[2*r+1]}
	}
	return nil
}
