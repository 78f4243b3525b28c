package bounds

import (
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/m2n-dev/m2n/hier"
	"github.com/m2n-dev/m2n/placement"
	"github.com/m2n-dev/m2n/reshard"
	"github.com/m2n-dev/m2n/units"
)

// FromLayouts is the Problem of resharding src to dst over world ranks,
// every rank on a host of its own so that the domain sizes alone group
// them (hier.DomainSizes; a zero Dst puts every destination rank in one
// domain), as refit bound derives it from layouts.
func FromLayouts(src, dst placement.Layout, world int, stripe bool, sizes hier.DomainSizes, chunk float64) (Problem, error) {
	plan, err := reshard.NewPlan(src, dst, world, reshard.Options{StripeReplicas: stripe})
	if err != nil {
		return Problem{}, err
	}
	host := make([]int, world)
	for r := range host {
		host[r] = r
	}
	if sizes.Dst == 0 {
		sizes.Dst = dst.Mesh().Size()
	}
	topo, err := hier.Domains(host, src, dst, sizes)
	if err != nil {
		return Problem{}, err
	}
	return FromPlan(plan, topo, chunk), nil
}

// WriteTable prints p, the fabric and every route's bound of c as refit
// bound prints them: the problem's figures, one row per route (its bound,
// the binding term, the other terms and the time predicted with startup,
// in milliseconds with two decimals, the paper's precision) and auto's
// reason.
func WriteTable(w io.Writer, p Problem, fab Fabric, c Choice) error {
	ranks := 0
	for _, d := range p.Domains {
		ranks += d.Ranks
	}
	fmt.Fprintf(w, "B = %s (%.0f bytes), Ns = %d, rho = %d, %d destination ranks in %d domain(s); BN = %s, BL = %s\n\n",
		units.FormatDecimalBytes(p.Bytes, 6), p.Bytes, p.Sources, p.Rho, ranks, len(p.Domains), units.FormatRate(fab.NetBW), units.FormatRate(fab.LocalBW))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "route\tbound\tbinding term\tother terms\tpredicted with startup")
	for _, b := range c.Bounds {
		other := ""
		for _, t := range b.Terms {
			if t.Name != b.Binding {
				if other != "" {
					other += "; "
				}
				other += fmt.Sprintf("%s %s", t.Name, formatMs(t.Seconds))
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", b.Route, formatMs(b.Seconds), b.Binding, other, formatMs(b.Predicted))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "\nauto: %s\n", c.Why)
	return err
}

// formatMs renders seconds as milliseconds with two decimals (8.96 ms).
func formatMs(s float64) string { return fmt.Sprintf("%.2f ms", s*1e3) }
