package perf

import (
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/m2n-dev/m2n/dtype"
	"github.com/m2n-dev/m2n/mesh"
	"github.com/m2n-dev/m2n/placement"
	"github.com/m2n-dev/m2n/units"
)

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

// SweepReport is the paper's single-layer benchmark scaled to one job
// (refit sweep --json): a tensor of Shape on Sources ranks sharded on dim
// 0 moved to TP ranks sharded on dim 1 replicated rho times, for every rho
// and destination domain count, each route against its bound at the
// emulated rate NetBW.
type SweepReport struct {
	Shape   string     `json:"shape"`
	DType   string     `json:"dtype"`
	Source  string     `json:"source,omitempty"` // the source layout
	Sources int        `json:"sources"`
	TP      int        `json:"tp"`
	NetBW   float64    `json:"emulated_net_bw"`
	Rows    []sweepRow `json:"rows"`
}

// SweepLayouts returns a sweep's layouts at replication rho: the source
// on ranks [0, sources) as Shard(0), the destination rho x tp after it as
// [Replicate, Shard(1)].
func SweepLayouts(shape []int64, dt dtype.DType, sources, tp, rho int) (src, dst placement.Layout, err error) {
	sm, err := mesh.Interval([]int{sources}, 0)
	if err != nil {
		return src, dst, err
	}
	dm, err := mesh.Interval([]int{rho, tp}, sources)
	if err != nil {
		return src, dst, err
	}
	if src, err = placement.NewLayout(shape, dt, sm, []placement.Placement{placement.Shard(0)}); err != nil {
		return src, dst, err
	}
	dst, err = placement.NewLayout(shape, dt, dm, []placement.Placement{placement.Replicate(), placement.Shard(1)})
	return src, dst, err
}

// Add records the routes of one configuration.
func (r *SweepReport) Add(rho, domains int, rep *RunReport) {
	r.Source = rep.Source
	for _, rr := range rep.Routes {
		r.Rows = append(r.Rows, sweepRow{Rho: rho, Domains: domains, Route: rr.Route, MedianSec: rr.MedianSec,
			BoundSec: rr.BoundSec, Ratio: rr.Ratio, Binding: rr.Binding, Check: rr.Check})
	}
}

// WriteText writes the sweep as refit sweep prints it: every
// configuration's routes against their bounds, then hier's speedup over
// flat (the model predicts rho) and over agbcast.
func (r *SweepReport) WriteText(w io.Writer) error {
	tp, rows := r.TP, r.Rows
	fmt.Fprintf(w, "source %s; destination DP rho x TP %d [R, S1]; emulated network %s per rank\n\n", r.Source, tp, units.FormatRate(r.NetBW))
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
