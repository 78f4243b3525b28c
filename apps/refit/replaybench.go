package main

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/m2n-dev/m2n/fp8"
	"github.com/m2n-dev/m2n/internal/cpuprof"
	"github.com/m2n-dev/m2n/model"
	"github.com/m2n-dev/m2n/mpi"
	"github.com/m2n-dev/m2n/perf"
	"github.com/m2n-dev/m2n/refit"
	"github.com/m2n-dev/m2n/session"
	"github.com/m2n-dev/m2n/spmd"
	"github.com/spf13/cobra"
)

type replayBenchFlags struct {
	iters    int
	bigIters int
	drivers  string
	models   string
	scale    int64
	layers   int
	noExpert bool
	check    bool
	timeout  time.Duration
	device   string
	fp8      string
	profile  string
}

func newReplayBenchCmd() *cobra.Command {
	var f replayBenchFlags
	cmd := &cobra.Command{
		Use:   "replay-bench [--iters 2000] [--big-iters 10] [--drivers host,replay,graph] [--models deepseek-v3,qwen3-235b-a22b] [--scale 4]",
		Short: "Time prepared GPU calls on each driver against their bounds, on one GPU (launch with mpirun -np 1)",
		Long: `replay-bench measures prepared calls on one GPU, with both meshes on the one
rank (so every byte is a local copy), on each driver in the same run:

  host    the round-by-round host driver (refit.NewHostDriver), the driver
          before the replay, which --verify still uses
  replay  the whole step queued on the streams, one host wait at the end
  graph   the same step captured once as a CUDA graph and launched

Cases, each against its bound measured in the same run:

  64x64 bf16            one 8 KiB tensor per call: per-call time (goal: under
                        8 us), against a device memcpy of the same bytes
                        and a stream synchronize, timed the same way
  1000 x 64x64 bf16     1000 such tensors in one call: time per tensor (goal:
                        under 1 us), against one memcpy of all their bytes
  ..., Launch (host)    both small cases on replay and graph again, timing
                        only the host's part of Launch (the caller orders
                        its streams on the returned event; the Wait after
                        each is not timed), against queuing a memcpy of the
                        same bytes: what the host pays per step when it does
                        not wait
  expert                DeepSeek-V3's 7 GiB expert tensor (256x2048x7168 bf16):
                        against a device memcpy of the same bytes (goal 97%);
                        and into a destination whose rows are padded (strided:
                        the batched copy kernel), against the same memcpy
  model                 every tensor of each --models model scaled by --scale
                        (fused weights through their views), colocated: the
                        model's bytes over the step's time against the copy
                        bandwidth of the expert's memcpy
  model ... fp8 MODE    with --fp8, each model again into vLLM's FP8
                        generator (model.NewQuantized): the weights vLLM
                        quantizes arrive in float8_e4m3fn with their scales,
                        quantized in flight, checked bit for bit; beside the
                        bf16 row of the same model, against the traffic bound
                        (the bytes the step reads and writes at the copy's
                        rate, less than the bf16 step's by half the quantized
                        weights' bytes)

Times are host wall clock per call (median of --iters, or --big-iters for
the expert and models, after a warm-up), each call's Run returning once
every byte is in place. Each driver's destinations are poisoned and checked
after its timed calls (every element of the small cases and models; a
sample of the expert unless --check). It needs about 22 GiB of GPU memory
for the expert and twice the scaled model's bytes.`,
		Example: `  scripts/mpirun.sh -np 1 .devbin/refit replay-bench
  scripts/mpirun.sh -np 1 .devbin/refit replay-bench --models deepseek-v3 --scale 8 --no-expert`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runReplayBench(cmd.OutOrStdout(), &f)
		},
	}
	fs := cmd.Flags()
	fs.IntVar(&f.iters, "iters", 2000, "timed calls of the 64x64 case (a tenth of them for 1000 tensors)")
	fs.IntVar(&f.bigIters, "big-iters", 10, "timed calls of the expert tensor and the models")
	fs.StringVar(&f.drivers, "drivers", "host,replay,graph", "drivers to time, in order")
	fs.StringVar(&f.models, "models", "deepseek-v3,qwen3-235b-a22b", "models to sync colocated (comma list; empty: none)")
	fs.Int64Var(&f.scale, "scale", 4, "divide the models' hidden and intermediate sizes and expert counts by this")
	fs.IntVar(&f.layers, "layers", 0, "keep only the first N decoder layers (0: all)")
	fs.BoolVar(&f.noExpert, "no-expert", false, "skip the 7 GiB expert tensor")
	fs.BoolVar(&f.check, "check", false, "check every element of the expert tensor too (slow: it reads 7 GiB back)")
	fs.DurationVar(&f.timeout, "timeout", time.Minute, "bound on every wait")
	fs.StringVar(&f.fp8, "fp8", "", "also time each model into an FP8 generator with these scales: block, row or tensor (default: bf16 only)")
	fs.StringVar(&f.profile, "cpuprofile", "", "write a CPU profile of the timed cases to this file (go tool pprof reads it)")
	fs.StringVar(&f.device, "device", "cuda", "cuda, or cpu to try the benchmark's set-up and checks on host memory (host driver only)")
	_ = fs.MarkHidden("device")
	return cmd
}

func runReplayBench(out io.Writer, f *replayBenchFlags) (err error) {
	opt := perf.ReplayOptions{Iters: f.iters, BigIters: f.bigIters, Scale: f.scale, Layers: f.layers, NoExpert: f.noExpert, Check: f.check}
	for _, d := range strings.Split(f.drivers, ",") {
		dv, err := refit.ParseDriver(strings.TrimSpace(d))
		if err != nil {
			return flagError("drivers", f.drivers, err)
		}
		opt.Drivers = append(opt.Drivers, dv)
	}
	for _, c := range []struct {
		flag string
		n    int
	}{{"iters", f.iters}, {"big-iters", f.bigIters}} {
		if c.n < 1 || c.n > maxIterations {
			return flagError(c.flag, fmt.Sprint(c.n), fmt.Errorf("want 1 to %d timed calls", maxIterations))
		}
	}
	if f.models != "" {
		for _, m := range strings.Split(f.models, ",") {
			m = strings.TrimSpace(m)
			if _, err := model.Load(m, model.LoadOptions{Scale: f.scale, Layers: f.layers}); err != nil {
				return flagError("models", f.models, err)
			}
			opt.Models = append(opt.Models, m)
		}
	}
	if f.fp8 != "" {
		if opt.FP8, err = fp8.ParseMode(f.fp8); err != nil {
			return flagError("fp8", f.fp8, err)
		}
	}
	dev, err := session.ParseDevice(f.device)
	if err != nil {
		return flagError("device", f.device, err)
	}
	if _, err := mpi.Init(mpi.ThreadMultiple); err != nil {
		return err
	}
	defer spmd.Finish(&err)
	world := mpi.World()
	spmd.SetRank(world.Rank())
	if world.Size() != 1 {
		return usageError{fmt.Errorf("replay-bench runs on one rank and one GPU (mpirun -np 1); this job has %d", world.Size())}
	}
	s, err := session.Join(world, session.Options{Device: dev, Timeout: f.timeout})
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, s.Close()) }()
	b, err := perf.NewReplay(s, opt)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "%s\n\n", b.Describe())
	stop, err := cpuprof.Start(f.profile)
	if err != nil {
		return flagError("cpuprofile", f.profile, err)
	}
	defer stop()
	rows, err := b.Run()
	if err != nil {
		return err
	}
	return perf.WriteReplay(out, rows)
}
