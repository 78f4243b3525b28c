package main

import (
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/m2n-dev/m2n/dtype"
	"github.com/m2n-dev/m2n/mpi"
	"github.com/m2n-dev/m2n/perf"
	"github.com/m2n-dev/m2n/placement"
	"github.com/m2n-dev/m2n/session"
	"github.com/spf13/cobra"
)

func newSweepCmd() *cobra.Command {
	var f runFlags
	var sources, tp int
	var rhos, domains string
	cmd := &cobra.Command{
		Use:   "sweep [flags]",
		Short: "Time flat, agbcast and hier against their model bounds over replication and domain counts (launch with mpirun)",
		Long: `sweep is the single-layer benchmark of the paper, scaled to one job: a tensor
on --sources ranks sharded on dim 0 (EP-like) moves to a destination of
TP --tp ranks sharded on dim 1, replicated rho times (DP rho, placements
[R, S1]), for every rho of --rhos and every destination domain count of
--domains. Each configuration uses ranks 0..sources+tp*rho-1 of the job; the
others idle. Every route is timed (median of --iters after --warmup) and
compared with its bound from the data-movement model, computed from the
emulated network rate and the local bandwidth measured in the same job.

Run it with --emulate-net-bw (default 50MB/s) so that the traffic between
domains is capped as a network would cap it; sources sit in domains of their
own. The table ends with hier's speedup over flat (the model predicts rho)
and over agbcast.`,
		Example: `  scripts/mpirun.sh -np 20 bin/refit sweep
  scripts/mpirun.sh -np 20 bin/refit sweep --shape 4096x4096 --rhos 2,4,8 --domains 1,2 --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runSweep(cmd.OutOrStdout(), &f, sources, tp, rhos, domains)
		},
	}
	f.register(cmd)
	fs := cmd.Flags()
	fs.IntVar(&sources, "sources", 2, "source ranks (placement S0)")
	fs.IntVar(&tp, "tp", 2, "destination TP degree (placement S1)")
	fs.StringVar(&rhos, "rhos", "2,4,8", "destination replication factors to run")
	fs.StringVar(&domains, "domains", "1,2", "destination domain counts to run")
	for flag, v := range map[string]string{"shape": "2048x4096", "dtype": "bf16", "route": "all", "iters": "3",
		"chunk-bytes": "512KiB", "staging-bytes": "4MiB", "emulate-net-bw": "50MB/s"} {
		if err := fs.Set(flag, v); err != nil {
			panic(err)
		}
		fs.Lookup(flag).DefValue = v
	}
	for _, hide := range []string{"src-mesh", "src-placements", "dst-mesh", "dst-placements", "src-ranks", "dst-ranks", "world",
		"dst-domain-size", "src-domain-size"} {
		_ = fs.MarkHidden(hide)
	}
	return cmd
}

func parseInts(flag, s string) ([]int, error) {
	var out []int
	for _, p := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(p))
		if err != nil || n < 1 {
			return nil, flagError(flag, s, fmt.Errorf("want positive integers like 2,4,8"))
		}
		out = append(out, n)
	}
	return out, nil
}

// sweepInput is what the sweep's own flags resolve to.
type sweepInput struct {
	shape      []int64
	dt         dtype.DType
	rhos, doms []int
}

// parseSweep reads the sweep's flags; every error names the flag.
func parseSweep(f *runFlags, sources, tp int, rhoList, domainList string, world int) (sweepInput, error) {
	var sw sweepInput
	var err error
	if sw.rhos, err = parseInts("rhos", rhoList); err != nil {
		return sw, err
	}
	if sw.doms, err = parseInts("domains", domainList); err != nil {
		return sw, err
	}
	if sources < 1 || tp < 1 {
		return sw, usageError{fmt.Errorf("--sources %d --tp %d: want at least 1 each", sources, tp)}
	}
	if sw.shape, err = placement.ParseShape(f.pair.Shape); err != nil {
		return sw, flagError("shape", f.pair.Shape, err)
	}
	if len(sw.shape) != 2 {
		return sw, flagError("shape", f.pair.Shape, fmt.Errorf("sweep moves a 2-dim tensor"))
	}
	if sw.dt, err = dtype.Parse(f.pair.DType); err != nil {
		return sw, flagError("dtype", f.pair.DType, err)
	}
	need := 0
	for _, rho := range sw.rhos {
		need = max(need, sources+tp*rho)
		for _, d := range sw.doms {
			if rho%d != 0 {
				return sw, usageError{fmt.Errorf("--rhos %s --domains %s: rho %d does not split over %d domains", rhoList, domainList, rho, d)}
			}
		}
	}
	if world < need {
		return sw, usageError{fmt.Errorf("the largest configuration needs %d ranks; this job has %d (mpirun -np %d)", need, world, need)}
	}
	return sw, nil
}

func runSweep(out io.Writer, f *runFlags, sources, tp int, rhoList, domainList string) (err error) {
	j, err := startJob(f)
	defer j.End(&err)
	if err != nil {
		return err
	}
	sw, inputErr := parseSweep(f, sources, tp, rhoList, domainList, j.World)
	if err := j.Ready(inputErr); err != nil {
		return err
	}
	shape, dt, rhos, doms := sw.shape, sw.dt, sw.rhos, sw.doms
	rep := perf.SweepReport{Shape: placement.FormatShape(shape), DType: dt.String(), Sources: sources, TP: tp, NetBW: j.set.opts.EmulateNetBW}
	for _, rho := range rhos {
		for _, nd := range doms {
			src, dst, err := perf.SweepLayouts(shape, dt, sources, tp, rho)
			if err != nil {
				return usageError{err}
			}
			// a session per configuration: its destination domains.
			opts := j.set.opts
			opts.Domains.Dst = tp * rho / nd
			s, err := session.Join(mpi.World(), opts)
			if err != nil {
				return err
			}
			rr, err := func() (*perf.RunReport, error) {
				defer s.Close()
				return j.measurePair(s, src, dst, 0, f, nil)
			}()
			if err != nil {
				return err
			}
			rep.Add(rho, nd, rr)
			if j.Rank == 0 {
				j.Log.Info().Int("rho", rho).Int("domains", nd).Msg("configuration done")
			}
		}
	}
	if j.Rank != 0 {
		return nil
	}
	return printJSONOr(out, f.asJSON, &rep, func() error { return rep.WriteText(out) })
}
