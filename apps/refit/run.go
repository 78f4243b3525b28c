package main

import (
	"errors"
	"fmt"
	"io"

	"github.com/m2n-dev/m2n/mesh"
	"github.com/m2n-dev/m2n/modelspec"
	"github.com/m2n-dev/m2n/perf"
	"github.com/m2n-dev/m2n/pipeline"
	"github.com/m2n-dev/m2n/placement"
	"github.com/m2n-dev/m2n/session"
	"github.com/spf13/cobra"
)

func newRunCmd() *cobra.Command {
	var f runFlags
	cmd := &cobra.Command{
		Use:   "run --shape S --src-mesh M --src-placements P --dst-mesh M --dst-placements P [flags]",
		Short: "Reshard a tensor between ranks for real (launch with mpirun or srun)",
		Long: `run is the SPMD job: launched with W ranks, the source ranks fill their
shards with a pattern of the global element index, the destination ranks
poison theirs, and each route moves the tensor for real over MPI. With
--check every destination element is compared and the job exits non-zero
naming the first wrong rank, index, expected and got values.

It prints, per route, the time per iteration (median over the timed
iterations, after warm-up; each iteration's time is the slowest rank's),
the model's bound for the route and the ratio, the bytes each rank sent and
received by link class (network: between domains; local: inside one), and
the achieved bandwidth. Ranks outside both meshes idle. Source ranks default
to 0..M-1 and destination ranks to M..M+N-1.

Routes:
  flat     each destination receives every byte it needs from its source owner
  agbcast  legacy baseline: all-gather on the sources, chain broadcast to all
           destinations, each keeps its slice
  hier     NCCL M2N's route: one network copy per destination domain to a
           leader, a ring between domains, local fan-out, chunked pipeline
  auto     the route the data-movement model predicts fastest, and why

Domains are hosts (MPI's shared-memory split) unless --src-domain-size or
--dst-domain-size group the ranks otherwise; with --emulate-net-bw the
traffic between domains is capped per rank, so that the routes' schedules
show on one machine.

With --dst-dtype e4m3 the destination is FP8 (float8_e4m3fn), quantized
while packing from a bf16 or f32 source, bit for bit as torch quantizes
the whole tensor, with a float32 scale per block (--fp8-scale block:
128x128 over the last two dims; row; tensor) delivered beside it in the
destination's layout; the sources then hold finite values, and --check
compares every byte and scale with quantizing the whole tensor at once.
Network bytes halve (from bf16). agbcast cannot carry it; auto leaves it
out.

Every rank must be started with the same flags: the ranks agree on them
first, and a rank with other flags, or flags that do not parse, fails every
rank at once with a message naming it. Every wait is bounded by --timeout;
a rank that gives up names the ranks it waited for and stops the others.

` + progressHelp,
		Example: `  mpirun -np 8 refit run --shape 4096x4096 --dtype bf16 --src-mesh 4 --src-placements S0 \
      --dst-mesh 2x2 --dst-placements R,S1 --route all --check
  mpirun -np 20 refit run --shape 2048x4096 --dtype bf16 --src-mesh 4 --src-placements S0 \
      --dst-mesh 8x2 --dst-placements R,S1 --dst-domain-size 8 --emulate-net-bw 50MB/s --route all
  srun --mpi=pmix -n 16 refit run --shape 256x2048x7168 --dtype bf16 --src-mesh 8 \
      --src-placements S0 --dst-mesh 2x4 --dst-placements R,S1 --route auto --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runJob(cmd.OutOrStdout(), &f, nil)
		},
	}
	f.register(cmd)
	return cmd
}

// runJob runs `refit run`; extra, if not nil, runs after the routes on every
// rank and may add to the report (refit bench adds its baseline).
func runJob(out io.Writer, f *runFlags, extra func(j *job, p *perf.Pair, rep *perf.RunReport) error) (err error) {
	j, err := startJob(f)
	defer j.End(&err)
	if err != nil {
		return err
	}
	if f.ppStages > 0 {
		return j.runStages(out, f)
	}
	src, dst, world, err := f.pair.layouts()
	dst = j.set.dstOf(dst)
	if err == nil && (world > j.World || (f.pair.World != 0 && world != j.World)) {
		err = usageError{fmt.Errorf("the meshes need a communicator of %d ranks; this job has %d (mpirun -np %d)", world, j.World, world)}
	}
	if err := j.Ready(err); err != nil {
		return err
	}
	p, err := j.newPair(j.Session, src, dst, 0)
	if err != nil {
		return err
	}
	defer p.Close()
	rep, err := j.runRoutes(j.Session, p, f, nil)
	if err != nil {
		return err
	}
	if extra != nil {
		if err := extra(j, p, rep); err != nil {
			return err
		}
	}
	if j.Rank == 0 {
		if err := printReport(out, f.asJSON, rep); err != nil {
			return err
		}
	}
	return checkFailures([]*perf.RunReport{rep})
}

// runStages runs one reshard per pipeline stage, each on its stage's
// session (its own communicator), all stages at once, and prints every
// stage's report on world rank 0.
func (j *job) runStages(out io.Writer, f *runFlags) error {
	l, perStage, err := f.stageLayout(j.World, j.set)
	if err := j.Ready(err); err != nil {
		return err
	}
	st, err := j.Session.Pipeline(l)
	if err != nil {
		return err
	}
	defer st.Close()
	all, err := perf.RunStages(j.Session, st, func(s int, ss *session.Session) (*perf.RunReport, error) {
		src, dst, err := perStage(s)
		if err != nil {
			return nil, err
		}
		return j.measurePair(ss, src, dst, uint64(s), f, l.Members(s))
	}, j.NoteFailure)
	if err != nil {
		return err
	}
	if j.Rank == 0 {
		for _, rep := range all {
			if !f.asJSON {
				fmt.Fprintf(out, "== stage %d of %d: world ranks %s\n", *rep.Stage, f.ppStages, mesh.FormatRanks(rep.Members))
			}
			if err := printReport(out, f.asJSON, rep); err != nil {
				return err
			}
		}
	}
	return checkFailures(all)
}

// stageLayout reads the stage layout of --pp-stages (modelspec.Pair.Stages)
// and returns it with a function that gives stage s's layouts, local to
// its communicator.
func (f *runFlags) stageLayout(world int, set settings) (pipeline.Layout, func(s int) (placement.Layout, placement.Layout, error), error) {
	l, stage, err := f.pair.Stages(f.ppStages, world)
	var e *modelspec.Error
	switch {
	case errors.Is(err, modelspec.ErrRequired):
		return l, nil, usageError{fmt.Errorf("--src-mesh, --src-placements, --dst-mesh and --dst-placements are required")}
	case errors.As(err, &e) && e.Field == "pp-stages":
		return l, nil, usageError{fmt.Errorf("--pp-stages %s %w", e.Value, e.Err)}
	case err != nil:
		return l, nil, pairError(err)
	}
	perStage := func(s int) (placement.Layout, placement.Layout, error) {
		src, dst, err := stage(s)
		if err == nil && dst.NDim() > 0 {
			dst = set.dstOf(dst)
		}
		return src, dst, pairError(err)
	}
	return l, perStage, nil
}
