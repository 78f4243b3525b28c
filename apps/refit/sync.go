package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/m2n-dev/m2n/fp8"
	"github.com/m2n-dev/m2n/hier"
	"github.com/m2n-dev/m2n/internal/pattern"
	"github.com/m2n-dev/m2n/mesh"
	"github.com/m2n-dev/m2n/model"
	"github.com/m2n-dev/m2n/modelspec"
	"github.com/m2n-dev/m2n/placement"
	"github.com/m2n-dev/m2n/refit"
	"github.com/m2n-dev/m2n/reshard"
	"github.com/m2n-dev/m2n/routespec"
	"github.com/m2n-dev/m2n/session"
	"github.com/m2n-dev/m2n/transport"
	"github.com/m2n-dev/m2n/units"
	"github.com/spf13/cobra"
)

// syncFlags are the flags of `refit sync`: a model and two parallel
// configurations, and the run flags of the job.
type syncFlags struct {
	run      runFlags
	model    string
	train    string
	gen      string
	scale    int64
	layers   int
	mtp      bool
	compare  bool
	baseline bool
	buckets  string
}

func newSyncCmd() *cobra.Command {
	var f syncFlags
	cmd := &cobra.Command{
		Use:   "sync --model NAME|config.json|list.json --train tp=..,pp=..,dp=.. --gen tp=..,dp=.. [flags]",
		Short: "Refit a whole model every step: every tensor in one prepared call per pipeline stage (launch with mpirun or srun)",
		Long: `sync moves a whole model from a Megatron-style trainer to a vLLM-style
generator, step after step, the way RL weight sync does: every tensor of
the model (transformers' names and shapes, fused weights such as
linear_qkv, qkv_proj and gate_up_proj moved in place through their views)
from the trainer's layout (--train: tp, pp, cp, dp, ep, etp) to the
generator's (--gen: tp, dp, ep). Each pipeline stage is a communicator of
its own (the stage's trainers and every generator rank) and one call
prepared once, whose joint schedule fills rounds across tensors (small
tensors share messages, large ones pipeline through bounded staging);
the stages run at once.

Source ranks fill every tensor with a pattern of its global index; with
--check every element of every tensor on every destination is compared,
and the first wrong tensor, rank and index are named. Rank 0 shows the
progress of its part (bytes, rate, time left; see Progress below); at the
end the report gives the time per step, bytes per link class, per stage and
per route, the slowest rank, which tensors completed, and each rank's peak
memory beside its share of the model plus its staging.

--scale N divides the hidden and intermediate sizes and the expert counts
by N (--layers K keeps only the first K layers), so that the real models
run on CPU ranks. --compare also moves the model one call per tensor (how
the released NCCL M2N is driven) and prints both times against the whole
model's bound from the data-movement model; --baseline times a plain
exchange of the same bytes between the same pairs, interleaved, and gives
the overhead per step beyond moving the bytes.

` + progressHelp,
		Example: `  scripts/mpirun.sh -np 8 bin/refit sync --model deepseek-v3 --scale 64 --layers 4 \
      --train tp=1,pp=2,ep=2,dp=2 --gen tp=2,dp=2 --check
  scripts/mpirun.sh -np 12 bin/refit sync --model qwen3-235b-a22b --scale 16 --train tp=2,pp=2,ep=2 \
      --gen tp=4,dp=2 --dst-domain-size 4 --emulate-net-bw 200MB/s --route auto --compare --iters 3
  srun --mpi=pmix -n 256 refit sync --model deepseek-v3 --train tp=1,dp=32,pp=4,ep=16 --gen tp=8,dp=16 --device cuda`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runSync(cmd.OutOrStdout(), &f)
		},
	}
	f.run.register(cmd)
	fs := cmd.Flags()
	fs.StringVar(&f.model, "model", "", "a built-in model ("+strings.Join(model.Builtins(), ", ")+"), a HuggingFace config.json, or a JSON list of name, shape, dtype")
	fs.StringVar(&f.train, "train", "", "the trainer's parallel sizes, e.g. tp=2,pp=4,dp=4,cp=2,ep=16,etp=1 (sizes not given are 1)")
	fs.StringVar(&f.gen, "gen", "", "the generator's parallel sizes, e.g. tp=8,dp=8[,ep=64] (sizes not given are 1)")
	fs.Int64Var(&f.scale, "scale", 1, "divide the hidden and intermediate sizes and the expert counts by this")
	fs.IntVar(&f.layers, "layers", 0, "keep only the first N decoder layers (0: all)")
	fs.BoolVar(&f.mtp, "mtp", false, "include DeepSeek-V3's multi-token-prediction layer")
	fs.BoolVar(&f.compare, "compare", false, "also move the model one call per tensor, and print both against the whole model's bound")
	fs.BoolVar(&f.baseline, "baseline", false, "interleave a plain exchange of the same bytes and report the overhead per step")
	fs.StringVar(&f.buckets, "bucket-bytes", "", "with --route auto: group each stage's tensors in order into buckets of at most this size and pick each bucket's route with the model, all in one joint schedule (default: the staging bytes; 0: one route per stage)")
	for _, hide := range []string{"shape", "dtype", "src-mesh", "src-placements", "dst-mesh", "dst-placements", "src-ranks", "dst-ranks",
		"world", "pp-stages", "stripe"} {
		_ = fs.MarkHidden(hide)
	}
	_ = fs.Set("route", "auto")
	fs.Lookup("route").DefValue = "auto"
	fs.Lookup("route").Usage = "route of every stage: auto, flat, agbcast or hier"
	_ = fs.Set("iters", "3")
	fs.Lookup("iters").DefValue = "3"
	return cmd
}

// syncReport is what rank 0 prints.
type syncReport struct {
	Model     string `json:"model"`
	Trainer   string `json:"trainer"`
	Generator string `json:"generator"`
	World     int    `json:"world"`
	Tensors   int    `json:"tensors"`
	Params    int64  `json:"params"`
	Bytes     int64  `json:"bytes"`
	// FP8 is the scaling mode of the tensors the generator receives in FP8
	// (--dst-dtype e4m3), FP8Tensors how many, DstBytes the model's bytes as
	// the generator holds them (each tensor once, FP8 where converted).
	FP8        string        `json:"fp8_scale,omitempty"`
	FP8Tensors int           `json:"fp8_tensors,omitempty"`
	DstBytes   int64         `json:"dst_bytes"`
	Routes     []string      `json:"routes"` // per stage
	Iters      int           `json:"iters"`
	MedianSec  float64       `json:"median_s"`
	MinSec     float64       `json:"min_s"`
	MaxSec     float64       `json:"max_s"`
	StepsSec   []float64     `json:"steps_s"` // the first 1024 timed steps
	GBps       float64       `json:"model_gbps"`
	Check      string        `json:"check"`
	Completed  int           `json:"completed"`
	Failed     []string      `json:"failed,omitempty"`
	Links      [3]int64      `json:"bytes_by_link"` // network, local, self; sent, summed over ranks
	Stages     []stageReport `json:"stages"`
	Slowest    int           `json:"slowest_rank"`
	Ranks      []syncRank    `json:"ranks"`
	Fabric     hier.Fabric   `json:"fabric"`
	EmulatedBW float64       `json:"emulated_net_bw,omitempty"`
	Bounds     []hier.Bound  `json:"bounds"`
	Compare    *compareRun   `json:"compare,omitempty"`
	Baseline   *baselineRun  `json:"baseline,omitempty"`
}

type stageReport struct {
	Stage     int     `json:"stage"`
	Route     string  `json:"route"`
	Tensors   int     `json:"tensors"`
	Bytes     int64   `json:"bytes"`
	Rounds    int     `json:"rounds"`
	MedianSec float64 `json:"median_s"` // the stage call's time, slowest rank
}

// syncRank is one rank's footprint.
type syncRank struct {
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

type compareRun struct {
	PerTensorSec float64 `json:"per_tensor_median_s"`
	BatchedSec   float64 `json:"batched_median_s"`
	BoundSec     float64 `json:"bound_s"`
	BoundRoute   string  `json:"bound_route"`
	Speedup      float64 `json:"batched_speedup"`
	OverBound    float64 `json:"batched_over_bound"`
}

type baselineRun struct {
	PlainSec    float64 `json:"plain_median_s"`
	StepSec     float64 `json:"step_median_s"`
	OverheadSec float64 `json:"overhead_per_step_s"`
}

// syncInput is what sync's own flags resolve to.
type syncInput struct {
	layouts *model.Layouts
	route   string
	buckets int64 // auto's bucket size; 0: one route per stage
}

func (f *syncFlags) input(world int, mode fp8.Mode) (syncInput, error) {
	var in syncInput
	if f.model == "" || f.train == "" || f.gen == "" {
		return in, usageError{fmt.Errorf("--model, --train and --gen are required (e.g. --model deepseek-v3 --train tp=1,pp=4,ep=16 --gen tp=8,dp=16)")}
	}
	routes, err := f.run.routes()
	if err != nil {
		return in, err
	}
	if len(routes) != 1 {
		return in, flagError("route", f.run.route, fmt.Errorf("sync moves the model on one route: auto, flat, agbcast or hier"))
	}
	in.route = routes[0]
	in.buckets = f.run.settingsStaging()
	if f.buckets != "" {
		if in.buckets, err = units.ParseBytes(f.buckets); err != nil {
			return in, flagError("bucket-bytes", f.buckets, err)
		}
	}
	if in.layouts, err = modelLayouts(modelspec.Spec{Model: f.model, Train: f.train, Gen: f.gen, Scale: f.scale, Layers: f.layers, MTP: f.mtp, FP8: mode}); err != nil {
		return in, err
	}
	tr, gen := in.layouts.Trainer, in.layouts.Generator
	if w := in.layouts.World(); w != world {
		return in, usageError{fmt.Errorf("--train %s --gen %s need %d ranks (trainer %d, generator %d); this job has %d (mpirun -np %d)",
			f.train, f.gen, w, tr.Ranks(), gen.Ranks(), world, w)}
	}
	return in, nil
}

func runSync(out io.Writer, f *syncFlags) (err error) {
	j, err := startJob(&f.run)
	defer j.end(&err)
	if err != nil {
		return err
	}
	in, inputErr := f.input(j.world, j.set.fp8)
	if err := j.agreeReady(inputErr); err != nil {
		return err
	}
	l := in.layouts
	ctx := context.Background()
	start, err := measureUsage()
	if err != nil {
		return err
	}
	// the fabric: measured local bandwidth when emulating.
	fabric := j.set.fabric
	routeOn := func(f hier.Fabric) (reshard.Route, error) {
		o := j.set.routeOpts(f)
		if in.route == "auto" {
			o.Buckets = in.buckets
		}
		return routespec.Parse(in.route, o)
	}
	if err := j.checkModelMemory(l, in.route); err != nil {
		return err
	}
	if j.set.measure {
		// auto chooses on the local bandwidth measured here, before the
		// model is prepared (once).
		if fabric.LocalBW, err = j.generatorLocalBW(l); err != nil {
			return err
		}
	}
	route, err := routeOn(fabric)
	if err != nil {
		return err
	}
	m, err := j.s.PrepareModel(ctx, l, route)
	if err != nil {
		return err
	}
	var bufs *session.ModelBuffers
	release := func() { // the model and its buffers, once
		if m != nil {
			if bufs != nil {
				m.Free(bufs)
			}
			m.Close()
			m = nil
		}
	}
	defer release()
	var emuErr error
	for si, c := range m.Call.Calls {
		if c != nil && emuErr == nil {
			emuErr = j.checkEmulation(m.Stages.Sessions[si], c.Schedule(), l.Stages[si].Members)
		}
	}
	if err := j.agreeReady(emuErr); err != nil {
		return err
	}
	if bufs, err = m.Alloc(); err != nil {
		return err
	}
	if err := inSteps(j.s, "model set-up (filling the sources)", func() error { return fillModel(m, bufs, j.set.fp8 != 0) }); err != nil {
		return err
	}
	rep := &syncReport{Model: l.Model.Name, Trainer: l.Trainer.String(), Generator: fmt.Sprint(l.Generator), World: j.world,
		Tensors: len(l.Model.Tensors), Params: l.Model.Params(), Bytes: l.Model.Bytes(), Iters: f.run.iters, Fabric: fabric,
		EmulatedBW: j.set.opts.EmulateNetBW}
	for _, st := range l.Stages {
		for _, t := range st.Tensors {
			rep.DstBytes += t.Dst.Bytes()
			if t.Scale != 0 {
				rep.FP8Tensors++
				rep.FP8 = t.Scale.String()
			}
		}
	}
	for si := range l.Stages {
		rep.Routes = append(rep.Routes, "")
		rep.Stages = append(rep.Stages, stageReport{Stage: si, Tensors: len(l.Stages[si].Tensors)})
	}
	bar, stepStarts := j.syncProgress(m, f.run.warmup+f.run.iters, f.run.asJSON)
	var times timings
	stageTimes := make([]timings, len(l.Stages))
	var last []*refit.Report
	var slowRank int
	var warm usage
	var warmPeak int64
	checkMsg := "" // this rank's first wrong element, in any step
	for it := 0; it < f.run.warmup+f.run.iters; it++ {
		if f.run.check || it == 0 {
			if err := inSteps(j.s, "poison of the destinations", func() error { return poisonModel(m, bufs) }); err != nil {
				return err
			}
		}
		if err := j.barrier(); err != nil {
			return err
		}
		stepStarts(it)
		t0 := time.Now()
		reps, err := m.Run(ctx, bufs)
		if err != nil {
			for _, ss := range m.Stages.Sessions { // the first stage that aborted, for quiet
				if ss != nil {
					j.noteFailure(ss, err)
				}
			}
			return err
		}
		el := time.Since(t0).Seconds()
		all, err := gatherInt64s(j.s, []int64{int64(el * 1e9)})
		if err != nil {
			return err
		}
		slowest := 0.0
		for r, v := range all {
			if s := float64(v) / 1e9; s > slowest {
				slowest, slowRank = s, r
			}
		}
		per := make([]float64, len(l.Stages))
		for si, r := range reps {
			if r != nil {
				per[si] = r.Seconds
			}
		}
		if per, err = maxOverEach(j.s, per); err != nil {
			return err
		}
		if it >= f.run.warmup {
			times.add(slowest)
			for si, x := range per {
				stageTimes[si].add(x)
			}
		}
		if it == f.run.warmup {
			if warm, err = measureUsage(); err != nil {
				return err
			}
			warmPeak = peakRSS()
		}
		last = reps
		// --check checks every step, the warm-up included, as refit run
		// does: the destinations are poisoned before each, so a byte
		// wrong in one step fails the check even where a later step
		// would have overwritten it.
		if f.run.check {
			err := inSteps(j.s, "check (comparing every destination element)", func() error {
				if checkMsg != "" {
					return nil
				}
				if err := checkModel(m, bufs, j.set.fp8 != 0); err != nil {
					checkMsg = fmt.Sprintf("%v, in %s", err, stepName(it, f.run.warmup))
					j.log.Error().Err(err).Str("when", stepName(it, f.run.warmup)).Msg("check failed")
				}
				return nil
			})
			if err != nil {
				return err
			}
		}
	}
	bar.finish()
	rep.StepsSec = times.first()
	rep.MedianSec, rep.MinSec, rep.MaxSec = times.median(), times.min, times.max
	rep.GBps = float64(l.Model.Bytes()) / rep.MedianSec / 1e9
	rep.Slowest = slowRank
	for si := range rep.Stages {
		rep.Stages[si].MedianSec = stageTimes[si].median()
	}
	if err := j.syncAccounting(m, last, start, warm, warmPeak, rep); err != nil {
		return err
	}
	first, err := firstMessage(j.s, checkMsg)
	if err != nil {
		return err
	}
	switch {
	case !f.run.check:
		rep.Check = "not checked"
	case first == "":
		rep.Check = "passed"
	default:
		rep.Check = "FAILED: " + first
	}
	rep.Bounds = modelBounds(m, fabric, float64(j.set.opts.ChunkBytes))
	if f.compare {
		if rep.Compare, err = j.comparePerTensor(m, bufs, f.run.iters, in.route, rep); err != nil {
			return err
		}
	}
	if f.baseline {
		if rep.Baseline, err = j.syncBaseline(m, bufs, f.run.iters); err != nil {
			return err
		}
	}
	// what the job holds once the model is closed: what it held before.
	release()
	if err := j.leakedAfterClose(start, rep); err != nil {
		return err
	}
	if j.rank == 0 {
		if f.run.asJSON {
			err = json.NewEncoder(out).Encode(rep)
		} else {
			err = writeSyncReport(out, rep)
		}
		if err != nil {
			return err
		}
	}
	if strings.HasPrefix(rep.Check, "FAILED") {
		return jobError{fmt.Errorf("check failed: %s", strings.TrimPrefix(rep.Check, "FAILED: "))}
	}
	return nil
}

// checkModelMemory makes every rank compare what the model will take of
// its memory with what it has, before anything is planned or mapped
// (session.CheckMemory, as refit run's buffers do): its buffers of every
// stage (fused ones whole), their scale tensors, the staging bound of
// each stage it is in (and agbcast's whole-tensor scratch), the atomic
// shadows, host copies on GPUs, and the plans and schedules of its stages
// (session.CallFootprint). A model too large for the ranks fails here on
// every rank, naming the rank, what it needs and what is available,
// instead of mapping terabytes or failing later on a symptom (a schedule
// with too many messages).
func (j *job) checkModelMemory(l *model.Layouts, route string) error {
	src, dst := l.RankBytes(j.rank)
	opts := j.s.Options()
	fp := session.Footprint{Tensor: fmt.Sprintf("model %s (%d tensors)", l.Model.Name, len(l.Model.Tensors)), Buffers: addSat(src, dst)}
	if opts.Device == session.GPU {
		fp.HostCopies = fp.Buffers // eachPart's host copies, to fill and check
	}
	if opts.Atomic {
		fp.Staging = addSat(fp.Staging, dst)
	}
	if j.set.measure {
		fp.Buffers = addSat(fp.Buffers, 16<<20) // localBandwidth's two buffers
	}
	for _, st := range l.Stages {
		r := st.LocalRank(j.rank)
		if r < 0 {
			continue
		}
		fp.Staging = addSat(fp.Staging, opts.StagingBytes)
		var specs []refit.Spec
		for _, t := range st.Tensors {
			sp := refit.Spec{Name: t.Name, Src: t.Src, Dst: t.Dst, Scale: t.Scale}
			specs = append(specs, sp)
			if n, err := sp.ScaleBytes(r); err == nil && t.Scale != 0 && t.Dst.Mesh().Contains(r) {
				fp.Buffers = addSat(fp.Buffers, n)
			}
			if route == "agbcast" {
				fp.Staging = addSat(fp.Staging, t.Src.Bytes())
			}
		}
		c := j.s.CallFootprint(specs)
		fp.Plan, fp.Schedule = addSat(fp.Plan, c.Plan), addSat(fp.Schedule, c.Schedule)
	}
	return j.s.CheckMemory(refit.WithPhase(context.Background(), "memory check before the model's buffers"), fp)
}

// stepName names step it of a run whose first warmup steps warm up.
func stepName(it, warmup int) string {
	if it < warmup {
		return fmt.Sprintf("warm-up step %d", it)
	}
	return fmt.Sprintf("step %d", it-warmup)
}

// syncProgress returns rank 0's progress over steps of the model, by
// bytes (by steps where the bytes of all steps overflow), and the
// function that starts step it.
func (j *job) syncProgress(m *session.Model, steps int, asJSON bool) (*progress, func(it int)) {
	bytes, tensors := m.Total()
	what := fmt.Sprintf("rank 0: %d tensors x %d steps", tensors, steps)
	if bytes <= 0 || int64(steps) > math.MaxInt64/bytes {
		p := j.newProgress(what, int64(steps), "steps", asJSON)
		return p, func(it int) { p.set(int64(it)) }
	}
	p := j.newProgress(what, bytes*int64(steps), "bytes", asJSON)
	if p == nil {
		return nil, func(int) {}
	}
	var base int64
	m.OnProgress(func(b int64, _ int) { p.set(base + b) })
	return p, func(it int) { base = int64(it) * bytes; p.set(base) }
}

// fillModel writes every tensor's pattern (its global index in the model)
// into this rank's source parts, through their views: finite values
// (pattern.FillFloats) when the model converts to FP8.
func fillModel(m *session.Model, b *session.ModelBuffers, floats bool) error {
	return eachPart(m, b, model.Src, func(t *model.TensorLayout, rank int, seed uint64, buf []byte, v model.Part) error {
		if floats {
			return pattern.FillFloats(t.Src, rank, seed, buf, v.View)
		}
		return pattern.Fill(t.Src, rank, seed, buf, v.View)
	}, true)
}

// poisonModel fills this rank's destination parts and scale tensors with
// the poison.
func poisonModel(m *session.Model, b *session.ModelBuffers) error {
	for si, ss := range m.Stages.Sessions {
		if ss == nil || si >= len(b.Scale) {
			continue
		}
		for _, x := range b.Scale[si] {
			h := bytes.Repeat([]byte{pattern.Poison}, int(x.Len()))
			if err := ss.Memory().Upload(x, h); err != nil {
				return err
			}
		}
	}
	return eachPart(m, b, model.Dst, func(t *model.TensorLayout, rank int, _ uint64, buf []byte, v model.Part) error {
		return pattern.PoisonPart(t.Dst, rank, buf, v.View)
	}, true)
}

// checkModel checks every element of this rank's destination parts (and
// the scale tensor of every part it receives in FP8, against quantizing
// the whole tensor at once); the first wrong one is named with its tensor.
func checkModel(m *session.Model, b *session.ModelBuffers, floats bool) error {
	return eachPart(m, b, model.Dst, func(t *model.TensorLayout, rank int, seed uint64, buf []byte, v model.Part) error {
		var err error
		switch {
		case t.Scale != 0:
			var scales []byte
			if scales, err = modelScales(m, b, t, rank); err == nil {
				err = pattern.CheckFP8(t.Src.DType(), t.Dst, t.Scale, rank, seed, buf, v.View, scales)
			}
		case floats:
			err = pattern.CheckFloats(t.Dst, rank, seed, buf, v.View)
		default:
			err = pattern.Check(t.Dst, rank, seed, buf, v.View)
		}
		// named with the world rank: the stage's is local to its
		// communicator.
		switch e := err.(type) {
		case *pattern.MismatchError:
			e.Tensor, e.Rank = t.Name, jobRank
		case *pattern.ScaleMismatchError:
			e.Tensor, e.Rank = t.Name, jobRank
		}
		return err
	}, false)
}

// modelScales returns the host bytes of this rank's scale tensor of t (a
// tensor it receives in FP8), rank being its rank in t's stage.
func modelScales(m *session.Model, b *session.ModelBuffers, t *model.TensorLayout, rank int) ([]byte, error) {
	for si, st := range m.Layouts.Stages {
		ss := m.Stages.Sessions[si]
		if ss == nil || ss.Rank() != rank || !slices.Contains(st.Tensors, t) {
			continue
		}
		x := b.Scale[si][t.Name]
		if x == nil {
			return nil, fmt.Errorf("rank %d: no scale buffer for %s", rank, t.Name)
		}
		if hb, ok := x.(transport.HostBuffer); ok {
			return hb, nil
		}
		h := make([]byte, x.Len())
		return h, ss.Memory().Download(h, x)
	}
	return nil, fmt.Errorf("rank %d: tensor %s is in none of this rank's stages", rank, t.Name)
}

// eachPart calls fn for every tensor part this rank holds on side, with
// the host bytes of the buffer that holds it (the buffer itself on CPUs;
// on GPUs a host copy, written back after fn when write is set).
func eachPart(m *session.Model, b *session.ModelBuffers, side model.Side, fn func(*model.TensorLayout, int, uint64, []byte, model.Part) error, write bool) error {
	for si, ss := range m.Stages.Sessions {
		if ss == nil {
			continue
		}
		bufs := b.Src[si]
		if side == model.Dst {
			bufs = b.Dst[si]
		}
		host := map[string][]byte{}
		get := func(name string) ([]byte, error) {
			if h, ok := host[name]; ok {
				return h, nil
			}
			x := bufs[name]
			if hb, ok := x.(transport.HostBuffer); ok {
				host[name] = hb
				return hb, nil
			}
			h := make([]byte, x.Len())
			if err := ss.Memory().Download(h, x); err != nil {
				return nil, err
			}
			host[name] = h
			return h, nil
		}
		for i, t := range m.Layouts.Stages[si].Tensors {
			p, ok := t.Part(side, ss.Rank())
			if !ok {
				continue
			}
			h, err := get(p.Buffer)
			if err != nil {
				return err
			}
			if err := fn(t, ss.Rank(), uint64(m.Index[si][i]), h, p); err != nil {
				return fmt.Errorf("stage %d: %w", si, err)
			}
		}
		if write {
			for name, h := range host {
				if _, ok := bufs[name].(transport.HostBuffer); !ok {
					if err := ss.Memory().Upload(bufs[name], h); err != nil {
						return err
					}
				}
			}
		}
	}
	return nil
}

// generatorLocalBW measures the local bandwidth among the generator
// ranks (localBandwidth) over a probe call of the world session whose
// destinations are the generator's ranks (so its domains are the model's
// generator domains); every rank of the job takes part and learns it.
func (j *job) generatorLocalBW(l *model.Layouts) (float64, error) {
	first, err := mesh.Interval([]int{1}, 0)
	if err != nil {
		return 0, err
	}
	gens, err := mesh.Interval([]int{l.Generator.Ranks()}, l.Trainer.Ranks())
	if err != nil {
		return 0, err
	}
	src, err := placement.ParseLayout("1", placement.F32, first, "R")
	if err != nil {
		return 0, err
	}
	dst, err := placement.ParseLayout("1", placement.F32, gens, "R")
	if err != nil {
		return 0, err
	}
	call, err := j.s.Prepare(context.Background(), []refit.Spec{{Name: "local-bandwidth probe", Src: src, Dst: dst}}, reshard.Flat{})
	if err != nil {
		return 0, err
	}
	defer call.Close()
	return localBandwidth(j.s, call, gens.Ranks())
}

// leakedAfterClose gathers what each rank still holds once the model is
// closed beyond what it held before it (MPI communicators and pending
// requests): a job must give back what it made.
func (j *job) leakedAfterClose(start usage, rep *syncReport) error {
	now, err := measureUsage()
	if err != nil {
		return err
	}
	all, err := gatherInt64s(j.s, []int64{now.comms - start.comms, now.requests - start.requests})
	if err != nil {
		return err
	}
	for r := range rep.Ranks {
		rep.Ranks[r].Leaked = [2]int64{all[2*r], all[2*r+1]}
	}
	return nil
}

// modelBounds is every route's bound for the whole model: each stage's
// problem (its tensors together), the stages combined (they run at once
// into the same generator domains).
func modelBounds(m *session.Model, f hier.Fabric, chunk float64) []hier.Bound {
	var probs []hier.Problem
	for si, c := range m.Call.Calls {
		if c == nil {
			// every rank knows every stage's layouts: plan them here too.
			st := m.Layouts.Stages[si]
			var plans []*reshard.Plan
			for _, t := range st.Tensors {
				p, err := reshard.NewPlan(t.Src, t.Dst, len(st.Members), reshard.Options{})
				if err != nil {
					return nil
				}
				plans = append(plans, p)
			}
			probs = append(probs, hier.ProblemOf(plans, stageTopology(m, si), chunk))
			continue
		}
		probs = append(probs, hier.ProblemOf(c.Plans(), c.Topology(), chunk))
	}
	return hier.Bounds(hier.Combine(probs...), f)
}

// stageTopology is stage si's topology as a rank outside it sees it: every
// rank knows the layouts; the domains are the generator's, taken from the
// stage this rank is in.
func stageTopology(m *session.Model, si int) reshard.Topology {
	for sj, c := range m.Call.Calls {
		if c == nil {
			continue
		}
		// the generator ranks sit at the same local ranks in every stage.
		mine, theirs := m.Layouts.Stages[sj], m.Layouts.Stages[si]
		topo := c.Topology()
		dom := make([]int, len(theirs.Members))
		for r := range dom {
			if r < theirs.Trainers {
				dom[r] = -1 - r // a trainer domain of its own
				continue
			}
			dom[r] = topo.Domain[mine.Trainers+r-theirs.Trainers]
		}
		return reshard.Topology{Domain: dom}
	}
	return reshard.Topology{}
}

// syncAccounting fills the report's bytes by link class and stage, the
// stages' routes, and every rank's memory and handles.
func (j *job) syncAccounting(m *session.Model, reps []*refit.Report, start, warm usage, warmPeak int64, rep *syncReport) error {
	end, err := measureUsage()
	if err != nil {
		return err
	}
	var st refit.Stats
	stageBytes := make([]int64, len(m.Layouts.Stages))
	stageRounds := make([]int64, len(m.Layouts.Stages))
	var staging, scratch, bound int64
	for si, r := range reps {
		if r == nil {
			continue
		}
		st.Add(r.Stats)
		stageBytes[si] = r.Stats.Sent[reshard.LinkNetwork] + r.Stats.Sent[reshard.LinkLocal] + r.Stats.Sent[reshard.LinkSelf]
		c := m.Call.Calls[si]
		p := c.Program()
		stageRounds[si] = int64(c.Schedule().Rounds)
		staging += max(p.Staging[0][0], p.Staging[1][0]) + max(p.Staging[0][1], p.Staging[1][1])
		for _, n := range p.Full {
			scratch += n
		}
		bound += m.Stages.Sessions[si].Options().StagingBytes
	}
	src, dst := m.Layouts.RankBytes(j.rank)
	mine := []int64{st.Sent[reshard.LinkNetwork], st.Sent[reshard.LinkLocal], st.Sent[reshard.LinkSelf],
		src + dst, staging, scratch, bound, start.rss, peakRSS(), st.Sent[0] + st.Sent[1], st.Recv[0] + st.Recv[1],
		warm.requests, end.requests, warm.comms, end.comms, warm.heap, end.heap, warm.goroutines, end.goroutines, warmPeak}
	mine = append(mine, stageBytes...)
	mine = append(mine, stageRounds...)
	all, err := gatherInt64s(j.s, mine)
	if err != nil {
		return err
	}
	n := len(mine)
	ns := len(m.Layouts.Stages)
	for r := 0; r < j.world; r++ {
		v := all[r*n:]
		for c := 0; c < 3; c++ {
			rep.Links[c] += v[c]
		}
		role := "generator"
		if srcB, _ := m.Layouts.RankBytes(r); srcB > 0 {
			role = "trainer"
		}
		rep.Ranks = append(rep.Ranks, syncRank{Rank: r, Role: role, Share: v[3], Staging: v[4], Scratch: v[5], Bound: v[6],
			Base: v[7], Peak: v[8], Sent: v[9], Recv: v[10], Requests: [2]int64{v[11], v[12]}, Comms: [2]int64{v[13], v[14]},
			Heap: [2]int64{v[15], v[16]}, Goroutines: [2]int64{v[17], v[18]}, PeakAfterWarm: v[19]})
		const fixed = 20
		for si := 0; si < ns; si++ {
			rep.Stages[si].Bytes += v[fixed+si]
			rep.Stages[si].Rounds = max(rep.Stages[si].Rounds, int(v[fixed+ns+si]))
		}
	}
	for si, c := range m.Call.Calls {
		if c != nil {
			rep.Routes[si] = c.Schedule().Route
		}
	}
	// every rank knows its own stages' routes; take each stage's from a
	// rank in it (the generators are in all).
	routes, err := refit.Exchange(context.Background(), j.s.Collective(), []byte(strings.Join(rep.Routes, ",")))
	if err != nil {
		return err
	}
	for _, b := range routes {
		for si, r := range strings.Split(string(b), ",") {
			if r != "" && si < len(rep.Routes) {
				rep.Routes[si] = r
			}
		}
	}
	for si := range rep.Stages {
		rep.Stages[si].Route = rep.Routes[si]
	}
	// each stage's completed and failed tensors, from a rank in it (every
	// rank of a stage agreed on them).
	var lists []string
	for si := range m.Layouts.Stages {
		r := reps[si]
		if r == nil {
			lists = append(lists, "")
			continue
		}
		lists = append(lists, fmt.Sprintf("%d:%s", len(r.Completed), strings.Join(r.Failed, "|")))
	}
	got, err := refit.Exchange(context.Background(), j.s.Collective(), []byte(strings.Join(lists, ",")))
	if err != nil {
		return err
	}
	per := make([]string, len(m.Layouts.Stages))
	for _, b := range got {
		for si, x := range strings.Split(string(b), ",") {
			if x != "" && si < len(per) {
				per[si] = x
			}
		}
	}
	for _, x := range per {
		n, failed, _ := strings.Cut(x, ":")
		k, _ := strconv.Atoi(n)
		rep.Completed += k
		if failed != "" {
			rep.Failed = append(rep.Failed, strings.Split(failed, "|")...)
		}
	}
	return nil
}

// peakRSS reads this process's peak resident memory (VmHWM).
func peakRSS() int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			f := strings.Fields(rest)
			if len(f) > 0 {
				kb, _ := strconv.ParseInt(f[0], 10, 64)
				return kb << 10
			}
		}
	}
	return 0
}

// maxOverEach returns, element by element, the largest of every rank's v.
func maxOverEach(s *session.Session, v []float64) ([]float64, error) {
	out := make([]float64, len(v))
	for i, x := range v {
		m, err := maxOver(s, x)
		if err != nil {
			return nil, err
		}
		out[i] = m
	}
	return out, nil
}

// comparePerTensor moves the model one call per tensor (every tensor of a
// stage prepared once as a call of its own, run one after another each
// step, the stages at once) and compares it with the batched call and
// the whole model's bound.
func (j *job) comparePerTensor(m *session.Model, b *session.ModelBuffers, iters int, routeName string, rep *syncReport) (*compareRun, error) {
	ctx := context.Background()
	calls := make([][]*refit.Call, len(m.Specs))
	defer func() {
		for _, cs := range calls {
			for _, c := range cs {
				c.Close()
			}
		}
	}()
	// each tensor's call on the sync's route (auto: the route the model
	// picks for that tensor alone).
	r, err := routespec.Parse(routeName, j.set.routeOpts(rep.Fabric))
	if err != nil {
		return nil, err
	}
	for si, ss := range m.Stages.Sessions {
		if ss == nil {
			continue
		}
		for _, sp := range m.Specs[si] {
			c, err := ss.Prepare(ctx, []refit.Spec{sp}, r)
			if err != nil {
				return nil, err
			}
			calls[si] = append(calls[si], c)
		}
	}
	var times timings
	for it := 0; it < iters+1; it++ {
		if err := j.barrier(); err != nil {
			return nil, err
		}
		t0 := time.Now()
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
				defer endOnPanic()
				for i, c := range cs {
					if _, err := c.Run(ctx, tb[i:i+1]); err != nil {
						errs[si] = fmt.Errorf("stage %d, tensor %s: %w", si, m.Specs[si][i].Name, err)
						break
					}
				}
				done <- si
			}()
		}
		for ; n > 0; n-- {
			<-done
		}
		for _, e := range errs {
			if e != nil {
				return nil, e
			}
		}
		slow, err := maxOver(j.s, time.Since(t0).Seconds())
		if err != nil {
			return nil, err
		}
		if it > 0 {
			times.add(slow)
		}
	}
	cr := &compareRun{PerTensorSec: times.median(), BatchedSec: rep.MedianSec}
	cr.Speedup = cr.PerTensorSec / cr.BatchedSec
	// the bound of the route the sync ran; for auto, the least bound of
	// any route.
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

// syncBaseline times a plain exchange of the model's bytes (every stage's
// pairs at once, one contiguous message per pair over the stage's
// transport), interleaved with steps of the model, and returns the
// overhead per step beyond moving the bytes.
func (j *job) syncBaseline(m *session.Model, b *session.ModelBuffers, iters int) (*baselineRun, error) {
	pxs := make([]*plainExchange, len(m.Call.Calls))
	defer func() {
		for _, px := range pxs {
			if px != nil {
				px.free()
			}
		}
	}()
	for si, c := range m.Call.Calls {
		if c == nil {
			continue
		}
		px, err := newPlainExchange(m.Stages.Sessions[si].Memory(), c.Schedule(), m.Stages.Sessions[si].Rank())
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
				defer endOnPanic()
				errs <- px.run(m.Call.Calls[si].Transport(), j.s.Options().Timeout)
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
	timeIt := func(fn func() error) (float64, error) {
		if err := j.barrier(); err != nil {
			return 0, err
		}
		t0 := time.Now()
		if err := fn(); err != nil {
			return 0, err
		}
		return maxOver(j.s, time.Since(t0).Seconds())
	}
	var plainT, stepT timings
	for it := 0; it < iters+1; it++ {
		pt, err := timeIt(plainAll)
		if err != nil {
			return nil, err
		}
		st, err := timeIt(func() error { _, err := m.Run(context.Background(), b); return err })
		if err != nil {
			return nil, err
		}
		if it > 0 {
			plainT.add(pt)
			stepT.add(st)
		}
	}
	br := &baselineRun{PlainSec: plainT.median(), StepSec: stepT.median()}
	br.OverheadSec = br.StepSec - br.PlainSec
	return br, nil
}

func writeSyncReport(w io.Writer, r *syncReport) error {
	fmt.Fprintf(w, "model %s: %d tensors, %d parameters, %s\n", r.Model, r.Tensors, r.Params, units.FormatBytes(r.Bytes))
	fmt.Fprintf(w, "trainer %s -> generator %s, world %d\n", r.Trainer, r.Generator, r.World)
	if r.FP8Tensors > 0 {
		fmt.Fprintf(w, "generator in FP8: %d tensors (every 2-D and 3-D bf16 weight) as e4m3 with %s scales, the others as they are: %s as the generator holds it\n",
			r.FP8Tensors, r.FP8, units.FormatBytes(r.DstBytes))
	}
	if r.EmulatedBW > 0 {
		fmt.Fprintf(w, "emulated network %s per rank between domains; model fabric: network %s, local %s (measured)\n",
			units.FormatRate(r.EmulatedBW), units.FormatRate(r.Fabric.NetBW), units.FormatRate(r.Fabric.LocalBW))
	}
	fmt.Fprintf(w, "\n%s per step (median of %d; min %s, max %s), %.2f GB/s of model; slowest rank %d; check %s; %d tensors completed\n",
		units.FormatSeconds(r.MedianSec), r.Iters, units.FormatSeconds(r.MinSec), units.FormatSeconds(r.MaxSec), r.GBps, r.Slowest, r.Check, r.Completed)
	if len(r.Failed) > 0 {
		fmt.Fprintf(w, "failed: %v\n", r.Failed)
	}
	fmt.Fprintf(w, "bytes sent, all ranks: network %s, local %s, self copy %s\n", units.FormatBytes(r.Links[0]), units.FormatBytes(r.Links[1]), units.FormatBytes(r.Links[2]))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "\nstage\troute\ttensors\tbytes\trounds\ttime\t")
	for _, s := range r.Stages {
		fmt.Fprintf(tw, "%d\t%s\t%d\t%s\t%d\t%s\t\n", s.Stage, s.Route, s.Tensors, units.FormatBytes(s.Bytes), s.Rounds, units.FormatSeconds(s.MedianSec))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "rank\trole\tshare\tstaging\tscratch\tstaging bound\tRSS start\tpeak RSS\tpeak - start\tshare+staging+scratch\tpeak after step 1\tGo heap step 1 -> end\tMPI requests\tgoroutines\t")
	for _, x := range r.Ranks {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s -> %s\t%d -> %d\t%d -> %d\t\n", x.Rank, x.Role, units.FormatBytes(x.Share), units.FormatBytes(x.Staging),
			units.FormatBytes(x.Scratch), units.FormatBytes(x.Bound), units.FormatBytes(x.Base), units.FormatBytes(x.Peak), units.FormatBytes(x.Peak-x.Base),
			units.FormatBytes(x.Share+x.Staging+x.Scratch), units.FormatBytes(x.PeakAfterWarm), units.FormatBytes(x.Heap[0]), units.FormatBytes(x.Heap[1]),
			x.Requests[0], x.Requests[1], x.Goroutines[0], x.Goroutines[1])
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	for _, b := range r.Bounds {
		fmt.Fprintf(w, "bound %-8s %s (%s binds)\n", b.Route, units.FormatSeconds(b.Seconds), b.Binding)
	}
	if c := r.Compare; c != nil {
		fmt.Fprintf(w, "\none call per tensor: %s per step; one batched call: %s (%.2fx faster); whole-model bound (%s) %s: batched is %.2fx the bound\n",
			units.FormatSeconds(c.PerTensorSec), units.FormatSeconds(c.BatchedSec), c.Speedup, c.BoundRoute, units.FormatSeconds(c.BoundSec), c.OverBound)
	}
	if b := r.Baseline; b != nil {
		fmt.Fprintf(w, "\nplain exchange of the same bytes: %s per step; sync %s; overhead %s per step\n",
			units.FormatSeconds(b.PlainSec), units.FormatSeconds(b.StepSec), units.FormatSeconds(b.OverheadSec))
	}
	return nil
}
