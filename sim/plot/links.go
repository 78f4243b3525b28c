package plot

import (
	"fmt"
	"image/color"
	"math"
	"strings"

	"github.com/m2n-dev/m2n/sim"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// Links draws link utilisation over time for one route of one report
// (report counts from 1): each link class's mean over the links that
// carried bytes, the busiest link of each class and the critical path's
// binding link.
func Links(reps []sim.Report, route string, report int) (*plot.Plot, error) {
	if report < 1 || report > len(reps) {
		return nil, &sim.ConfigError{Setting: "report", Value: fmt.Sprint(report), Err: fmt.Errorf("the input has %d reports", len(reps))}
	}
	r := reps[report-1]
	var rt *sim.RouteReport
	for i := range r.Routes {
		if r.Routes[i].Route == route {
			rt = &r.Routes[i]
		}
	}
	if rt == nil {
		return nil, &sim.ConfigError{Setting: "route", Value: route, Err: fmt.Errorf("report %d has no such route", report)}
	}
	if rt.Series == nil || len(rt.Series.Lines) == 0 {
		return nil, inputError(fmt.Errorf("route %s has no utilisation series (refit sim --json with --bins > 0)", route))
	}
	p := plot.New()
	p.Title.Text = fmt.Sprintf("Link utilisation, %s: %s -> %s, %s", route, meshOnly(r.Source), meshOnly(r.Destination), r.Cluster.Name)
	p.Legend.TextStyle.Font.Size = vg.Points(8)
	p.Legend.ThumbnailWidth = vg.Points(24)
	p.Legend.XOffs = -vg.Points(4)
	unit, scale := "ms", 1e3
	if rt.Seconds >= 2 {
		unit, scale = "s", 1
	}
	p.X.Label.Text = "time (" + unit + ")"
	p.Y.Label.Text = "share of link capacity"
	p.Y.Min, p.Y.Max = 0, 1+0.075*float64(len(rt.Series.Lines))
	p.Legend.Top = true
	p.Add(plotter.NewGrid())
	palette := []color.RGBA{{0x1f, 0x77, 0xb4, 0xff}, {0xff, 0x7f, 0x0e, 0xff}, {0x2c, 0xa0, 0x2c, 0xff}, {0xd6, 0x27, 0x28, 0xff},
		{0x94, 0x67, 0xbd, 0xff}, {0x8c, 0x56, 0x4b, 0xff}, {0xe3, 0x77, 0xc2, 0xff}, {0x7f, 0x7f, 0x7f, 0xff}}
	bin := rt.Series.BinSeconds
	for i, line := range rt.Series.Lines {
		xy := make(plotter.XYs, 0, 2*len(line.Util))
		for k, u := range line.Util {
			// steps: each bin is flat over its width
			x0 := float64(k) * bin * scale
			x1 := math.Min(float64(k+1)*bin, rt.Seconds) * scale
			xy = append(xy, plotter.XY{X: x0, Y: u}, plotter.XY{X: x1, Y: u})
		}
		l, err := plotter.NewLine(xy)
		if err != nil {
			return nil, err
		}
		l.Color = palette[i%len(palette)]
		l.Width = vg.Points(1.5)
		if !strings.Contains(line.Name, "mean of") {
			l.Dashes = []vg.Length{vg.Points(4), vg.Points(2)}
			l.Width = vg.Points(1.2)
		}
		p.Add(l)
		p.Legend.Add(strings.Replace(line.Name, " links)", ")", 1), l)
	}
	p.X.Min, p.X.Max = 0, rt.Seconds*scale
	return p, nil
}
