package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/m2n-dev/m2n/bounds"
	"github.com/m2n-dev/m2n/control"
	"github.com/m2n-dev/m2n/fp8"
	"github.com/m2n-dev/m2n/launcher"
	"github.com/m2n-dev/m2n/model"
	"github.com/m2n-dev/m2n/modelspec"
	"github.com/m2n-dev/m2n/perf"
	"github.com/m2n-dev/m2n/routespec"
	"github.com/m2n-dev/m2n/session"
	"github.com/m2n-dev/m2n/spmd"
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
	changes  string // --change-model
	lora     loraFlags
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
	fs.StringVar(&f.train, "train", "", "the trainer's parallel sizes, e.g. tp=2,pp=4,dp=4,cp=2,ep=16,etp=1 (keys: "+model.TrainerKeys+"; sizes not given are 1)")
	fs.StringVar(&f.gen, "gen", "", "the generator's parallel sizes, e.g. tp=8,dp=8[,ep=64] (keys: "+model.GeneratorKeys+"; sizes not given are 1)")
	fs.Int64Var(&f.scale, "scale", 1, "divide the hidden and intermediate sizes and the expert counts by this")
	fs.IntVar(&f.layers, "layers", 0, "keep only the first N decoder layers (0: all)")
	fs.BoolVar(&f.mtp, "mtp", false, "include DeepSeek-V3's multi-token-prediction layer")
	fs.BoolVar(&f.compare, "compare", false, "also move the model one call per tensor, and print both against the whole model's bound")
	fs.BoolVar(&f.baseline, "baseline", false, "interleave a plain exchange of the same bytes and report the overhead per step")
	fs.StringVar(&f.changes, "change-model", "", "with --delta: each tensor changes the fraction of its elements this change model (testdata/change-model.json, lr 1e-6) measured for its kind, instead of --change")
	fs.StringVar(&f.buckets, "bucket-bytes", "", "with --route auto: group each stage's tensors in order into buckets of at most this size and pick each bucket's route with the model, all in one joint schedule (default: the staging bytes; 0: one route per stage)")
	f.lora.register(fs)
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

// syncInput is what sync's own flags resolve to.
type syncInput struct {
	layouts *model.Layouts
	route   string
	buckets int64 // auto's bucket size; 0: one route per stage
	// adapters, with --lora, are the LoRA adapters of layouts' model,
	// laid out on the same trainer and generator.
	adapters *model.Layouts
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
	if f.lora.rank != 0 {
		in.adapters, err = f.loraLayouts(in.layouts)
	}
	return in, err
}

func runSync(out io.Writer, f *syncFlags) (err error) {
	j, err := startJob(&f.run)
	defer j.End(&err)
	if err != nil {
		return err
	}
	in, inputErr := f.input(j.World, j.set.fp8)
	if err := j.Ready(inputErr); err != nil {
		return err
	}
	start, err := perf.MeasureUsage()
	if err != nil {
		return err
	}
	prepStart := time.Now()
	m, fabric, err := j.prepareModel(in)
	if err != nil {
		return err
	}
	prepared := time.Since(prepStart)
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
	if bufs, err = m.Alloc(); err != nil {
		return err
	}
	if err := perf.FillModel(j.Session, m, bufs, j.set.fp8 != 0 || in.adapters != nil); err != nil {
		return err
	}
	if in.adapters != nil {
		return j.syncLoRA(out, in, m, bufs, f)
	}
	rep, err := j.syncSteps(in.layouts, m, bufs, start, fabric, f)
	if err != nil {
		return err
	}
	if err := j.syncExtras(m, bufs, in, rep, f); err != nil {
		return err
	}
	// what the job holds once the model is closed: what it held before.
	release()
	if err := perf.Leaked(j.Session, start, rep); err != nil {
		return err
	}
	if j.Rank == 0 {
		if err := printJSONOr(out, f.run.asJSON, rep, func() error { return rep.WriteText(out) }); err != nil {
			return err
		}
	}
	if linked, took, phases := j.Session.Linked(); linked && spmd.Rank() == 0 && !f.run.asJSON {
		// each job's rank 0: the cost of a (re)join beside a step.
		step := time.Duration(rep.MedianSec * float64(time.Second))
		fmt.Fprintf(out, "two jobs (%s): joined in %v (merge, token, session set-up), model prepared in %v, step %v (median): join+prepare %.1f steps\n  phases: %s\n",
			map[bool]string{true: "trainer", false: "generator"}[j.Rank == 0], took.Round(time.Microsecond),
			prepared.Round(time.Microsecond), step.Round(time.Microsecond), (took+prepared).Seconds()/max(step.Seconds(), 1e-9), phases)
	}
	if strings.HasPrefix(rep.Check, "FAILED") {
		return jobError{fmt.Errorf("check failed: %s", strings.TrimPrefix(rep.Check, "FAILED: "))}
	}
	return nil
}

// prepareModel checks the model's memory on every rank, measures the
// generator's local bandwidth when emulating (auto chooses on it), and
// prepares the model once, refusing schedules the emulated network cannot
// carry within the timeout. It returns the model and the fabric.
func (j *job) prepareModel(in syncInput) (*session.Model, bounds.Fabric, error) {
	l, fabric := in.layouts, j.set.Fabric
	fp := j.Session.ModelFootprint(l, in.route == "agbcast")
	if j.set.MeasureLocal {
		fp.Buffers += 16 << 20 // the two buffers of the local-bandwidth probe (perf)
	}
	if err := j.Session.CheckMemory(control.WithPhase(context.Background(), "memory check before the model's buffers"), fp); err != nil {
		return nil, fabric, err
	}
	if j.set.MeasureLocal {
		var err error
		if fabric.LocalBW, err = perf.GeneratorLocalBandwidth(j.Session, l); err != nil {
			return nil, fabric, err
		}
	}
	o := j.set.routeOpts(fabric)
	if in.route == "auto" {
		o.Buckets = in.buckets
	}
	route, err := routespec.Parse(in.route, o)
	if err != nil {
		return nil, fabric, err
	}
	m, err := j.Session.PrepareModel(context.Background(), l, route)
	if err != nil {
		return nil, fabric, err
	}
	var emuErr error
	for si := range m.StageCount() {
		if c := m.StageCall(si); c != nil && emuErr == nil {
			emuErr = j.checkEmulation(m.Session(si), c.Schedule(), l.Stages[si].Members)
		}
	}
	if err := j.Ready(emuErr); err != nil {
		m.Close()
		return nil, fabric, err
	}
	return m, fabric, nil
}

// syncSteps runs the model's steps (perf.Sync) with rank 0's progress.
func (j *job) syncSteps(l *model.Layouts, m *session.Model, b *session.ModelBuffers, start perf.Usage, fabric bounds.Fabric, f *syncFlags) (*perf.SyncReport, error) {
	_, tensors := m.Total()
	var bar *launcher.Progress
	defer func() { bar.Finish() }()
	change, err := perf.Changes(f.changes, f.run.change)
	if err := j.Ready(err); err != nil {
		return nil, err
	}
	return perf.Sync(j.Session, l, m, b, start, fabric, perf.SyncConfig{Warmup: f.run.warmup, Iters: f.run.iters, Check: f.run.check, Change: change,
		Floats: j.set.fp8 != 0, WorldRank: j.Rank, Log: j.Log, Failed: j.NoteFailure,
		Progress: func(done, total int64, unit string) {
			if bar == nil {
				bar = j.newProgress(fmt.Sprintf("rank 0: %d tensors x %d steps", tensors, f.run.warmup+f.run.iters), total, unit, f.run.asJSON)
			}
			bar.Set(done)
		}})
}

// syncExtras runs what --compare and --baseline ask for.
func (j *job) syncExtras(m *session.Model, b *session.ModelBuffers, in syncInput, rep *perf.SyncReport, f *syncFlags) error {
	var err error
	if f.compare {
		// each tensor's call on the sync's route (auto: the route the
		// model picks for that tensor alone).
		route, perr := routespec.Parse(in.route, j.set.routeOpts(rep.Fabric))
		if perr != nil {
			return perr
		}
		if rep.Compare, err = perf.ComparePerTensor(j.Session, m, b, f.run.iters, route, in.route, rep); err != nil {
			return err
		}
	}
	if f.baseline {
		rep.Baseline, err = perf.SyncBaseline(j.Session, m, b, f.run.iters)
	}
	return err
}
