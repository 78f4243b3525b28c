package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/m2n-dev/m2n/mpi"
	"github.com/m2n-dev/m2n/reshard/transporttest"
	"github.com/spf13/cobra"
)

// soakPairs are the layouts the soak cycles through: the conformance pairs
// (testdata/reshard_pairs.txt).
const soakPairs = `
8 | f32 | 4 | S0 | 2 | S0
8 | f32 | 2 | S0 | 4 | S0
10 | f32 | 4 | S0 | 3 | S0
5 | f32 | 8 | S0 | 3 | S0
0x4 | f32 | 4 | S0 | 2 | S1
7x5 | f32 | 4 | S0 | 4 | S1
4x3 | f32 | 2 | R | 3 | S0
5 | f32 | 2x2 | S0,S0 | 4 | S0
13x2 | f32 | 4x2 | S0,S0 | 2x4 | S0,S0
8x8x8 | f32 | 2x2x2 | S0,S1,S2 | 2x2x2 | S2,S1,S0
12 | i32 | 2x3 | S0,R | 3x2 | R,S0
16x8 | bf16 | 4 | S0 | 2x2 | R,S1
256x64x32 | bf16 | 8 | S0 | 2x4 | R,S1
`

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

// usage is one rank's footprint at one moment.
type usage struct {
	rss        int64
	heap       int64 // live Go heap after a collection
	goroutines int64
	requests   int64
	comms      int64
}

func measureUsage() (usage, error) {
	runtime.GC()
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return usage{}, err
	}
	fs := strings.Fields(string(b))
	pages, _ := strconv.ParseInt(fs[1], 10, 64)
	req, comms := mpi.Live()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return usage{rss: pages * int64(os.Getpagesize()), heap: int64(ms.HeapAlloc), goroutines: int64(runtime.NumGoroutine()),
		requests: req, comms: comms}, nil
}

func runSoak(out io.Writer, f *runFlags, count, every int) (err error) {
	if count < 1 {
		return flagError("count", fmt.Sprint(count), fmt.Errorf("want at least 1"))
	}
	set, err := f.settings()
	if err != nil {
		return err
	}
	pairs, err := transporttest.ParsePairs(strings.NewReader(soakPairs), "soak pairs")
	if err != nil {
		return err
	}
	cases, err := transporttest.Cases(pairs)
	if err != nil {
		return err
	}
	need := 0
	for _, c := range cases {
		need = max(need, c.World())
	}
	j, err := startJob(f, set)
	defer j.end(&err)
	if err != nil {
		return err
	}
	if j.world < need {
		return usageError{fmt.Errorf("the largest pair needs %d ranks; this job has %d (mpirun -np %d)", need, j.world, need)}
	}
	f.iters, f.warmup, f.check = 1, 0, true
	warm := min(count, 50)
	var first, last usage
	t0 := time.Now()
	for i := 0; i < count; i++ {
		if i == warm {
			if first, err = measureUsage(); err != nil {
				return err
			}
		}
		c := cases[i%len(cases)]
		route := routeNames[(i/len(cases))%len(routeNames)]
		cfg, err := j.newConfig(j.comm, c.Src, c.Dst, false, uint64(i))
		if err != nil {
			return err
		}
		rep, err := cfg.runRoutes([]string{route}, f)
		cfg.close()
		if err != nil {
			return err
		}
		if err := checkFailures([]*runReport{rep}); err != nil {
			return fmt.Errorf("reshard %d (%v, %s): %w", i, c, route, err)
		}
		if j.rank == 0 && every > 0 && (i+1)%every == 0 {
			j.log.Info().Int("done", i+1).Int("of", count).Dur("elapsed", time.Since(t0)).Msg("soak progress")
		}
	}
	if last, err = measureUsage(); err != nil {
		return err
	}
	if count <= warm {
		first = last
	}
	mine := []int64{first.rss, last.rss, first.goroutines, last.goroutines, first.requests, last.requests, first.comms, last.comms,
		first.heap, last.heap}
	all := make([]int64, len(mine)*j.world)
	if err := j.comm.Allgather(int64Bytes(mine), int64Bytes(all)); err != nil {
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
		count, len(pairs), strings.Join(routeNames, ", "), el.Round(time.Millisecond), float64(el.Milliseconds())/float64(count))
	fmt.Fprintf(out, "per rank after reshard %d and after reshard %d:\n\n", warm, count)
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "rank\tRSS\tRSS after\tGo heap\theap after\tgoroutines\tafter\tpending requests\tafter\tcommunicators\tafter\t")
	var maxGrowth, maxHeap int64
	for r := 0; r < j.world; r++ {
		v := all[r*len(mine):]
		maxGrowth = max(maxGrowth, v[1]-v[0])
		maxHeap = max(maxHeap, v[9]-v[8])
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t\n", r, formatBytes(v[0]), formatBytes(v[1]),
			formatBytes(v[8]), formatBytes(v[9]), v[2], v[3], v[4], v[5], v[6], v[7])
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(out, "\nlargest growth: RSS %s, live Go heap %s\n", formatBytes(maxGrowth), formatBytes(maxHeap))
	return nil
}
