package plot

import (
	"encoding/json"
	"fmt"
	"image/color"
	"io"
	"math"
	"slices"

	"github.com/m2n-dev/m2n/sim"
	"github.com/m2n-dev/m2n/units"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// paperFig4 are the paper's measured single-layer times (ms) by route and
// rho: hier 10.251 / 13.834 / 9.775, flat 20.859 / - / 77.258, AG+bcast
// 222.065 / 239.649 / - (rho 8 pending in the paper).
var paperFig4 = map[string]map[int]float64{
	"hier":    {2: 10.251e-3, 4: 13.834e-3, 8: 9.775e-3},
	"flat":    {2: 20.859e-3, 8: 77.258e-3},
	"agbcast": {2: 222.065e-3, 4: 239.649e-3},
}

// SweepPoint is one measured time of refit sweep --json: a route at a
// replication rho over a number of destination domains.
type SweepPoint struct {
	Rho       int     `json:"rho"`
	Domains   int     `json:"domains"`
	Route     string  `json:"route"`
	MedianSec float64 `json:"median_s"`
}

// ReadSweep reads the points of a refit sweep --json file.
func ReadSweep(r io.Reader) ([]SweepPoint, error) {
	var sw struct {
		Rows []SweepPoint `json:"rows"`
	}
	if err := json.NewDecoder(r).Decode(&sw); err != nil {
		return nil, &sim.ConfigError{Setting: "measured", Err: fmt.Errorf("not refit sweep --json output: %w", err)}
	}
	return sw.Rows, nil
}

// RhoOptions say what Rho draws beside the simulated times and bounds:
// the destination domain count (0: the fewest in the reports), measured
// points of a sweep, and the paper's own measurements.
type RhoOptions struct {
	Domains  int
	Measured []SweepPoint
	Paper    bool
}

// rhoKey is one route at one rho.
type rhoKey struct {
	route string
	rho   int
}

// rhoData is what Rho draws: per route and rho, the simulated time, the
// bound and the measured time.
type rhoData struct {
	sim, bound, meas map[rhoKey]float64
	routes           []string
	rhos             []int
	measLabel        string
}

// Rho plots time against the destination replication rho for each route
// of single-tensor reports of o.Domains destination domains: the bound
// (dashed), the simulated time (solid) and measured points.
func Rho(reps []sim.Report, o RhoOptions) (*plot.Plot, error) {
	d, err := collectRho(reps, o)
	if err != nil {
		return nil, err
	}
	p := plot.New()
	r0 := reps[0]
	p.Title.Text = fmt.Sprintf("%s -> %s; %s (NIC %s, local %s)", shortLayout(r0.Source), rhoLayout(r0.Destination),
		r0.Cluster.Name, units.FormatRate(r0.Cluster.NetBW), units.FormatRate(r0.Cluster.LocalBW))
	p.X.Label.Text = "destination replication rho"
	p.Y.Label.Text = "time"
	p.Y.Scale = plot.LogScale{}
	p.Y.Tick.Marker = niceTicks{unit: "s"}
	p.X.Tick.Marker = intTicks(d.rhos)
	p.Legend.Top = true
	p.Legend.Left = true
	p.Add(plotter.NewGrid())
	lo, hi := math.Inf(1), 0.0
	anyMeas := false
	for _, route := range d.routes {
		l, h, m, err := d.drawRoute(p, route)
		if err != nil {
			return nil, err
		}
		lo, hi, anyMeas = math.Min(lo, l), math.Max(hi, h), anyMeas || m
	}
	rhoLegend(p, anyMeas, d.measLabel)
	p.Y.Min, p.Y.Max = lo/1.6, hi*12
	p.X.Min, p.X.Max = float64(d.rhos[0])*0.8, float64(d.rhos[len(d.rhos)-1])*1.15
	if len(d.rhos) > 1 && d.rhos[len(d.rhos)-1]/d.rhos[0] >= 4 {
		p.X.Scale = plot.LogScale{}
	}
	return p, nil
}

// collectRho gathers Rho's points.
func collectRho(reps []sim.Report, o RhoOptions) (*rhoData, error) {
	dom := o.Domains
	if dom == 0 {
		dom = math.MaxInt
		for _, r := range reps {
			dom = min(dom, max(r.DstDomains, 1))
		}
	}
	d := &rhoData{sim: map[rhoKey]float64{}, bound: map[rhoKey]float64{}, meas: map[rhoKey]float64{}, measLabel: "measured"}
	for _, r := range reps {
		if max(r.DstDomains, 1) != dom || r.Rho < 1 {
			continue
		}
		if !slices.Contains(d.rhos, r.Rho) {
			d.rhos = append(d.rhos, r.Rho)
		}
		for _, rt := range r.Routes {
			if rt.Route == "auto" {
				continue
			}
			if !slices.Contains(d.routes, rt.Route) {
				d.routes = append(d.routes, rt.Route)
			}
			k := rhoKey{rt.Route, r.Rho}
			d.sim[k], d.bound[k] = rt.Seconds, rt.BoundSeconds
			if rt.MeasuredSec > 0 {
				d.meas[k] = rt.MeasuredSec
			}
		}
	}
	if len(d.rhos) == 0 {
		return nil, inputError(fmt.Errorf("no single-tensor reports with %d destination domain(s)", dom))
	}
	slices.Sort(d.rhos)
	for _, row := range o.Measured {
		if row.Domains == dom {
			d.meas[rhoKey{row.Route, row.Rho}] = row.MedianSec
		}
	}
	if o.Paper {
		d.measLabel = "measured (paper)"
		for route, byRho := range paperFig4 {
			for rho, v := range byRho {
				d.meas[rhoKey{route, rho}] = v
			}
		}
	}
	order := []string{"flat", "agbcast", "hier"}
	slices.SortStableFunc(d.routes, func(a, b string) int { return slices.Index(order, a) - slices.Index(order, b) })
	return d, nil
}

// drawRoute draws one route's bound, simulated times and measured points,
// and returns the range of its times and whether it has measured ones.
func (d *rhoData) drawRoute(p *plot.Plot, route string) (lo, hi float64, measured bool, err error) {
	c := colorOf(route)
	var sxy, bxy, mxy plotter.XYs
	for _, rho := range d.rhos {
		k := rhoKey{route, rho}
		if v, ok := d.sim[k]; ok && v > 0 {
			sxy = append(sxy, plotter.XY{X: float64(rho), Y: v})
		}
		if v, ok := d.bound[k]; ok && v > 0 {
			bxy = append(bxy, plotter.XY{X: float64(rho), Y: v})
		}
		if v, ok := d.meas[k]; ok && v > 0 {
			mxy = append(mxy, plotter.XY{X: float64(rho), Y: v})
		}
	}
	lo, hi = math.Inf(1), 0
	for _, xy := range [][]plotter.XY{sxy, bxy, mxy} {
		for _, v := range xy {
			lo, hi = math.Min(lo, v.Y), math.Max(hi, v.Y)
		}
	}
	if len(bxy) > 0 {
		l, err := plotter.NewLine(bxy)
		if err != nil {
			return 0, 0, false, err
		}
		l.Color, l.Width, l.Dashes = c, vg.Points(1.5), []vg.Length{vg.Points(5), vg.Points(4)}
		p.Add(l)
	}
	if len(sxy) > 0 {
		l, s, err := plotter.NewLinePoints(sxy)
		if err != nil {
			return 0, 0, false, err
		}
		l.Color, l.Width = c, vg.Points(2)
		s.Color, s.Shape, s.Radius = c, draw.CircleGlyph{}, vg.Points(3)
		p.Add(l, s)
		p.Legend.Add(route, l)
	}
	if len(mxy) > 0 {
		s, err := plotter.NewScatter(mxy)
		if err != nil {
			return 0, 0, false, err
		}
		s.Color, s.Shape, s.Radius = c, draw.PyramidGlyph{}, vg.Points(4.5)
		p.Add(s)
	}
	return lo, hi, len(mxy) > 0, nil
}

// rhoLegend adds one legend entry per style, in grey.
func rhoLegend(p *plot.Plot, measured bool, measLabel string) {
	grey := color.RGBA{0x55, 0x55, 0x55, 0xff}
	if l, s, err := plotter.NewLinePoints(plotter.XYs{{X: 1, Y: 1}}); err == nil {
		l.Color, l.Width, s.Color, s.Shape, s.Radius = grey, vg.Points(2), grey, draw.CircleGlyph{}, vg.Points(3)
		p.Legend.Add("simulated", l, s)
	}
	if l, err := plotter.NewLine(plotter.XYs{{X: 1, Y: 1}}); err == nil {
		l.Color, l.Width, l.Dashes = grey, vg.Points(1.5), []vg.Length{vg.Points(5), vg.Points(4)}
		p.Legend.Add("model bound", l)
	}
	if measured {
		if s, err := plotter.NewScatter(plotter.XYs{{X: 1, Y: 1}}); err == nil {
			s.Color, s.Shape, s.Radius = grey, draw.PyramidGlyph{}, vg.Points(4.5)
			p.Legend.Add(measLabel, s)
		}
	}
}
