package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/m2n-dev/m2n/sim"
	simplot "github.com/m2n-dev/m2n/sim/plot"
	"github.com/spf13/cobra"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/vg"
)

func newPlotCmd() *cobra.Command {
	var f plotFlags
	cmd := &cobra.Command{
		Use:   "plot rho|models|links|scale --in FILE [flags]",
		Short: "Draw PNG plots from refit sim --json (time against rho, whole-model bars, link utilisation, sim/bound against ranks)",
		Long: `plot draws one figure, as a PNG, from the JSON that refit sim --json prints
(one object per line; a file may hold many):

  rho     time against the destination replication rho for each route, like
          the paper's Figure 4: the model's bound (dashed), the simulated time
          (solid), and measured points where there are some (the measured_s
          of refit sim --measured, a refit sweep --json file given with
          --measured, or with --paper the paper's own measurements of its
          single-layer experiment). Reports of several domain counts are
          filtered by --domains (default: the fewest).
  models  whole-model bars per route, one group per configuration (refit sim
          --model reports), beside the published figure for that
          configuration where one is known (NCCL M2N's release, the paper,
          NeMo-RL); times on a log scale.
  links   link utilisation over time for one run: each link class's mean over
          the links that carried bytes, the busiest link of each class and
          the critical path's binding link, for one route (--route, default
          hier) of one report (--report, default the first).
  scale   sim/bound against the world's ranks: reports of one problem at
          growing rank counts (a refit sim --json per count), one line per
          route (--route, default hier; all for every route) and per model
          and cluster, beside the bound (1) and issue 25's 1.15x target.`,
		Example: `  for rho in 2 4 8; do refit sim --shape 256x2000x7000 --dtype bf16 --src-mesh 16 --src-placements S0 \
      --dst-mesh ${rho}x8 --dst-placements R,S1 --latency 0 --local-latency 0 --copy-bw 0 --json; done > fig4.jsonl
  refit plot rho --in fig4.jsonl --paper --out docs/sim-rho-paper.png
  refit plot links --in fig4.jsonl --route hier --out docs/sim-links.png
  for n in 256 512 1024; do refit sim --model deepseek-v3 --train tp=1,dp=$((n/8)),pp=4,ep=16 --gen tp=8,dp=$((n/16)) \
      --src-domain-size 64 --dst-domain-size 64 --stripe --route hier --bins 0 --json; done > scale.jsonl
  refit plot scale --in scale.jsonl --out docs/sim-scale.png`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runPlot(cmd.OutOrStdout(), args[0], &f)
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&f.in, "in", "", "refit sim --json output (JSON objects, one per line)")
	fs.StringVar(&f.out, "out", "", "the PNG to write")
	fs.StringVar(&f.measured, "measured", "", "rho: a refit sweep --json file of measured times")
	fs.BoolVar(&f.paper, "paper", false, "rho: add the paper's measured single-layer times (GB200, 7168 MB)")
	fs.IntVar(&f.domains, "domains", 0, "rho: the destination domain count to plot (default: the fewest in the input)")
	fs.StringVar(&f.route, "route", "hier", "links: the route whose utilisation to draw; scale: the route to draw (all: every route)")
	fs.IntVar(&f.report, "report", 1, "links: which report of the input to draw (1 is the first)")
	fs.StringVar(&f.title, "title", "", "the figure's title (default: from the input)")
	fs.Float64Var(&f.width, "width", 7, "width in inches")
	fs.Float64Var(&f.height, "height", 4.5, "height in inches")
	return cmd
}

type plotFlags struct {
	in, out, measured string
	paper             bool
	domains           int
	route             string
	report            int
	title             string
	width, height     float64
}

func runPlot(w io.Writer, kind string, f *plotFlags) error {
	if f.in == "" || f.out == "" {
		return usageError{fmt.Errorf("--in and --out are required")}
	}
	if !strings.HasSuffix(strings.ToLower(f.out), ".png") {
		return flagError("out", f.out, fmt.Errorf("plot writes PNG: name the file .png"))
	}
	if f.width <= 0 || f.height <= 0 {
		return usageError{fmt.Errorf("--width %g --height %g: want positive sizes", f.width, f.height)}
	}
	var reps []sim.Report
	if err := readFile(f.in, func(r io.Reader) (err error) { reps, err = sim.ReadReports(r); return }); err != nil {
		return flagError("in", f.in, err)
	}
	p, err := f.draw(kind, reps)
	var ce *sim.ConfigError
	if errors.As(err, &ce) {
		value := map[string]string{"in": f.in, "measured": f.measured, "route": f.route, "report": fmt.Sprint(f.report)}[ce.Setting]
		return flagError(ce.Setting, value, ce.Err)
	}
	if err != nil {
		return err
	}
	if f.title != "" {
		p.Title.Text = f.title
	}
	if err := p.Save(vg.Length(f.width)*vg.Inch, vg.Length(f.height)*vg.Inch, f.out); err != nil {
		return fmt.Errorf("writing %s: %w", f.out, err)
	}
	_, err = fmt.Fprintf(w, "wrote %s\n", f.out)
	return err
}

// draw draws plot kind of reps (package sim/plot).
func (f *plotFlags) draw(kind string, reps []sim.Report) (*plot.Plot, error) {
	switch kind {
	case "rho":
		o := simplot.RhoOptions{Domains: f.domains, Paper: f.paper}
		if f.measured != "" {
			if err := readFile(f.measured, func(r io.Reader) (err error) { o.Measured, err = simplot.ReadSweep(r); return }); err != nil {
				var ce *sim.ConfigError
				if !errors.As(err, &ce) {
					err = &sim.ConfigError{Setting: "measured", Err: err}
				}
				return nil, err
			}
		}
		return simplot.Rho(reps, o)
	case "models":
		return simplot.Models(reps)
	case "links":
		return simplot.Links(reps, f.route, f.report)
	case "scale":
		return simplot.Scale(reps, f.route)
	}
	return nil, usageError{fmt.Errorf("unknown plot %q: want rho, models, links or scale", kind)}
}

// readFile opens path and reads it with read.
func readFile(path string, read func(io.Reader) error) error {
	fh, err := os.Open(path)
	if err != nil {
		return err
	}
	defer fh.Close()
	return read(fh)
}
