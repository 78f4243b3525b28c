package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/m2n-dev/m2n/internal/conformance"
	"github.com/m2n-dev/m2n/perf"
	"github.com/m2n-dev/m2n/routespec"
	"github.com/m2n-dev/m2n/units"
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
	defer j.end(&err)
	if err != nil {
		return err
	}
	cases, inputErr := soakCases(count, j.world)
	if err := j.agreeReady(inputErr); err != nil {
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
		rep, err := func() (*perf.RunReport, error) {
			p, err := j.newPair(j.s, c.Src, c.Dst, uint64(i))
			if err != nil {
				return nil, err
			}
			defer p.Close()
			return j.runRoutes(p, f, nil)
		}()
		if err != nil {
			return err
		}
		if err := checkFailures([]*perf.RunReport{rep}); err != nil {
			return fmt.Errorf("reshard %d (%v, %s): %w", i, c, f.route, err)
		}
		if j.rank == 0 && every > 0 && (i+1)%every == 0 {
			j.log.Info().Int("done", i+1).Int("of", count).Dur("elapsed", time.Since(t0)).Msg("soak progress")
		}
	}
	if last, err = perf.MeasureUsage(); err != nil {
		return err
	}
	if count <= warm {
		first = last
	}
	mine := []int64{first.RSS, last.RSS, first.Goroutines, last.Goroutines, first.Requests, last.Requests, first.Comms, last.Comms,
		first.Heap, last.Heap}
	all, err := perf.Gather(j.s, "report gathering", mine)
	if err != nil {
		return err
	}
	if j.rank != 0 {
		return nil
	}
	el := time.Since(t0)
	if f.asJSON {
		type rankUse struct {
			Rank                              int
			RSS, RSSAfter, Heap, HeapAfter    int64
			Goroutines, GoroutinesAfter       int64
			Requests, RequestsAfter           int64
			Communicators, CommunicatorsAfter int64
		}
		var rows []rankUse
		for r := 0; r < j.world; r++ {
			v := all[r*len(mine):]
			rows = append(rows, rankUse{r, v[0], v[1], v[8], v[9], v[2], v[3], v[4], v[5], v[6], v[7]})
		}
		return json.NewEncoder(out).Encode(struct {
			Count   int
			Seconds float64
			Ranks   []rankUse
		}{count, el.Seconds(), rows})
	}
	fmt.Fprintf(out, "%d checked reshards (%d layout pairs x 3 arrangements, routes %s in turn) in %v, %.1f ms each\n",
		count, len(cases)/3, strings.Join(routespec.Names, ", "), el.Round(time.Millisecond), float64(el.Milliseconds())/float64(count))
	fmt.Fprintf(out, "per rank after reshard %d and after reshard %d:\n\n", warm, count)
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "rank\tRSS\tRSS after\tGo heap\theap after\tgoroutines\tafter\tpending requests\tafter\tcommunicators\tafter\t")
	var maxGrowth, maxHeap int64
	for r := 0; r < j.world; r++ {
		v := all[r*len(mine):]
		maxGrowth = max(maxGrowth, v[1]-v[0])
		maxHeap = max(maxHeap, v[9]-v[8])
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t\n", r, units.FormatBytes(v[0]), units.FormatBytes(v[1]),
			units.FormatBytes(v[8]), units.FormatBytes(v[9]), v[2], v[3], v[4], v[5], v[6], v[7])
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(out, "\nlargest growth: RSS %s, live Go heap %s\n", units.FormatBytes(maxGrowth), units.FormatBytes(maxHeap))
	return nil
}
