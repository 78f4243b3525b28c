package main

import (
	"fmt"
	"io"
	"time"

	"github.com/m2n-dev/m2n/internal/conformance"
	"github.com/m2n-dev/m2n/perf"
	"github.com/m2n-dev/m2n/routespec"
	"github.com/spf13/cobra"
)

func newSoakCmd() *cobra.Command {
	var f runFlags
	var count, every int
	cmd := &cobra.Command{
		Use:   "soak [--count 1000] [flags]",
		Short: "Run many consecutive checked reshards in one job and report memory, goroutines and MPI handles (launch with mpirun)",
		Long: `soak is the RL loop's wear test: one job runs --count consecutive reshards,
each a full call (validation, agreement, schedule, transfer, check) of the
next layout pair of the conformance set in the next arrangement (disjoint,
permuted, overlapping) on the next route (flat, agbcast, hier), and reports,
per rank, the resident memory, the goroutines and the MPI requests and
communicators still held, after a warm-up and at the end. A leak shows as
growth from the first figure to the second. The job needs as many ranks as
the largest pair (16).`,
		Example: `  scripts/mpirun.sh -np 16 bin/refit soak --count 1000`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runSoak(cmd.OutOrStdout(), &f, count, every)
		},
	}
	f.register(cmd)
	cmd.Flags().IntVar(&count, "count", 1000, "reshards to run")
	cmd.Flags().IntVar(&every, "progress", 100, "log progress every this many reshards")
	for _, hide := range []string{"shape", "dtype", "src-mesh", "src-placements", "dst-mesh", "dst-placements", "src-ranks", "dst-ranks",
		"world", "iters", "warmup", "route", "pp-stages"} {
		_ = cmd.Flags().MarkHidden(hide)
	}
	return cmd
}

// soakCases returns the soak's layout pairs: the conformance pairs file's,
// in every arrangement.
func soakCases(count, world int) ([]conformance.Case, error) {
	if count < 1 {
		return nil, flagError("count", fmt.Sprint(count), fmt.Errorf("want at least 1"))
	}
	cases, err := conformance.DefaultCases(1)
	if err != nil {
		return nil, err
	}
	need := 0
	for _, c := range cases {
		need = max(need, c.World())
	}
	if world < need {
		return nil, usageError{fmt.Errorf("the largest pair needs %d ranks; this job has %d (mpirun -np %d)", need, world, need)}
	}
	return cases, nil
}

func runSoak(out io.Writer, f *runFlags, count, every int) (err error) {
	j, err := startJob(f)
	defer j.End(&err)
	if err != nil {
		return err
	}
	cases, inputErr := soakCases(count, j.World)
	if err := j.Ready(inputErr); err != nil {
		return err
	}
	f.iters, f.warmup, f.check, f.noProgress = 1, 0, true, true
	warm := min(count, 50)
	var first, last perf.Usage
	t0 := time.Now()
	for i := 0; i < count; i++ {
		if i == warm {
			if first, err = perf.MeasureUsage(); err != nil {
				return err
			}
		}
		c := cases[i%len(cases)]
		f.route = routespec.Names[(i/len(cases))%len(routespec.Names)]
		rep, err := j.measurePair(j.Session, c.Src, c.Dst, uint64(i), f, nil)
		if err != nil {
			return err
		}
		if err := checkFailures([]*perf.RunReport{rep}); err != nil {
			return fmt.Errorf("reshard %d (%v, %s): %w", i, c, f.route, err)
		}
		if j.Rank == 0 && every > 0 && (i+1)%every == 0 {
			j.Log.Info().Int("done", i+1).Int("of", count).Dur("elapsed", time.Since(t0)).Msg("soak progress")
		}
	}
	if last, err = perf.MeasureUsage(); err != nil {
		return err
	}
	if count <= warm {
		first = last
	}
	rep, err := perf.GatherSoak(j.Session, first, last)
	if err != nil || j.Rank != 0 {
		return err
	}
	rep.Count, rep.Seconds, rep.Pairs, rep.Warm = count, time.Since(t0).Seconds(), len(cases)/3, warm
	return printJSONOr(out, f.asJSON, rep, func() error { return rep.WriteText(out) })
}
