package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/m2n-dev/m2n/mesh"
	"github.com/m2n-dev/m2n/mpi"
	"github.com/m2n-dev/m2n/perf"
	"github.com/m2n-dev/m2n/placement"
	"github.com/m2n-dev/m2n/session"
	"github.com/m2n-dev/m2n/units"
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

// sweepRow is one configuration's result for one route.
type sweepRow struct {
	Rho       int     `json:"rho"`
	Domains   int     `json:"domains"`
	Route     string  `json:"route"`
	MedianSec float64 `json:"median_s"`
	BoundSec  float64 `json:"bound_s"`
	Ratio     float64 `json:"time_over_bound"`
	Binding   string  `json:"binding"`
	Check     string  `json:"check"`
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
	dt         placement.DType
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
	if sw.shape, err = placement.ParseShape(f.pair.shape); err != nil {
		return sw, flagError("shape", f.pair.shape, err)
	}
	if len(sw.shape) != 2 {
		return sw, flagError("shape", f.pair.shape, fmt.Errorf("sweep moves a 2-dim tensor"))
	}
	if sw.dt, err = placement.ParseDType(f.pair.dtype); err != nil {
		return sw, flagError("dtype", f.pair.dtype, err)
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
	defer j.end(&err)
	if err != nil {
		return err
	}
	sw, inputErr := parseSweep(f, sources, tp, rhoList, domainList, j.world)
	if err := j.agreeReady(inputErr); err != nil {
		return err
	}
	shape, dt, rhos, doms := sw.shape, sw.dt, sw.rhos, sw.doms
	var rows []sweepRow
	srcMesh, _ := mesh.Interval([]int{sources}, 0)
	src, err := placement.NewLayout(shape, dt, srcMesh, []placement.Placement{placement.Shard(0)})
	if err != nil {
		return usageError{err}
	}
	for _, rho := range rhos {
		for _, nd := range doms {
			dstMesh, _ := mesh.Interval([]int{rho, tp}, sources)
			dst, err := placement.NewLayout(shape, dt, dstMesh, []placement.Placement{placement.Replicate(), placement.Shard(1)})
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
			rep, err := func() (*perf.RunReport, error) {
				defer s.Close()
				p, err := j.newPair(s, src, dst, 0)
				if err != nil {
					return nil, err
				}
				defer p.Close()
				return j.runRoutes(p, f, nil)
			}()
			if err != nil {
				return err
			}
			for _, rr := range rep.Routes {
				rows = append(rows, sweepRow{Rho: rho, Domains: nd, Route: rr.Route, MedianSec: rr.MedianSec,
					BoundSec: rr.BoundSec, Ratio: rr.Ratio, Binding: rr.Binding, Check: rr.Check})
			}
			if j.rank == 0 {
				j.log.Info().Int("rho", rho).Int("domains", nd).Msg("configuration done")
			}
		}
	}
	if j.rank != 0 {
		return nil
	}
	if f.asJSON {
		return json.NewEncoder(out).Encode(struct {
			Shape   string     `json:"shape"`
			DType   string     `json:"dtype"`
			Sources int        `json:"sources"`
			TP      int        `json:"tp"`
			NetBW   float64    `json:"emulated_net_bw"`
			Rows    []sweepRow `json:"rows"`
		}{placement.FormatShape(shape), dt.String(), sources, tp, j.set.opts.EmulateNetBW, rows})
	}
	return writeSweep(out, src, tp, j.set.opts.EmulateNetBW, rows)
}

func writeSweep(w io.Writer, src placement.Layout, tp int, emulate float64, rows []sweepRow) error {
	fmt.Fprintf(w, "source %v; destination DP rho x TP %d [R, S1]; emulated network %s per rank\n\n", src, tp, units.FormatRate(emulate))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "rho\tdomains\troute\ttime\tbound\ttime/bound\tbinding term\tcheck\t")
	for _, r := range rows {
		fmt.Fprintf(tw, "%d\t%d\t%s\t%s\t%s\t%.2f\t%s\t%s\t\n", r.Rho, r.Domains, r.Route, units.FormatSeconds(r.MedianSec),
			units.FormatSeconds(r.BoundSec), r.Ratio, r.Binding, r.Check)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "rho\tdomains\thier/bound\thier vs flat\tgoal 0.8*rho\thier vs agbcast\t")
	type key struct{ rho, d int }
	by := map[key]map[string]sweepRow{}
	var order []key
	for _, r := range rows {
		k := key{r.Rho, r.Domains}
		if by[k] == nil {
			by[k] = map[string]sweepRow{}
			order = append(order, k)
		}
		by[k][r.Route] = r
	}
	for _, k := range order {
		h, ok := by[k]["hier"]
		if !ok {
			continue
		}
		fl, ag := by[k]["flat"], by[k]["agbcast"]
		speed := func(o sweepRow) string {
			if o.MedianSec == 0 || h.MedianSec == 0 {
				return "-"
			}
			return fmt.Sprintf("%.2fx", o.MedianSec/h.MedianSec)
		}
		fmt.Fprintf(tw, "%d\t%d\t%.2f\t%s\t%.1fx\t%s\t\n", k.rho, k.d, h.Ratio, speed(fl), 0.8*float64(k.rho), speed(ag))
	}
	return tw.Flush()
}
