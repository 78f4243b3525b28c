package plot

import (
	"fmt"
	"image/color"
	"math"
	"slices"

	"github.com/m2n-dev/m2n/sim"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// ScaleTarget is the sim/bound the scale plot marks (issue 25's target).
const ScaleTarget = 1.15

// Scale draws sim/bound against the world's ranks, one line per route and
// series: reports of one problem at growing ranks (refit sim --json, a
// report per rank count, for example a whole model with the trainer's and
// generator's dp growing), grouped by model (or "tensor") and cluster. A
// dotted line marks 1 (the bound) and a dashed one ScaleTarget. route
// picks one route ("" or "all": every route in the reports). A series
// needs reports at two rank counts at least.
func Scale(reps []sim.Report, route string) (*plot.Plot, error) {
	type key struct{ series, route string }
	pts := map[key]plotter.XYs{}
	var keys []key
	ranks := map[int]bool{}
	sawRoute := false
	for i, r := range reps {
		if r.World < 1 {
			return nil, inputError(fmt.Errorf("report %d has no world size", i+1))
		}
		series := r.Model
		if series == "" {
			series = "tensor"
		}
		series += " on " + r.Cluster.Name
		for _, rr := range r.Routes {
			if route != "" && route != "all" && rr.Route != route {
				continue
			}
			sawRoute = true
			if !(rr.BoundSeconds > 0) || !(rr.Seconds > 0) {
				continue
			}
			k := key{series, rr.Route}
			if _, ok := pts[k]; !ok {
				keys = append(keys, k)
			}
			pts[k] = append(pts[k], plotter.XY{X: float64(r.World), Y: rr.Seconds / rr.BoundSeconds})
			ranks[r.World] = true
		}
	}
	if !sawRoute {
		return nil, &sim.ConfigError{Setting: "route", Err: fmt.Errorf("no such route %q in the reports", route)}
	}
	if len(ranks) < 2 {
		return nil, inputError(fmt.Errorf("the reports have %d rank count(s) with a bound; the scale plot wants reports at two or more", len(ranks)))
	}
	p := plot.New()
	p.Title.Text = "Simulated time over the model's bound, against the ranks"
	p.X.Label.Text = "ranks (trainer + generator)"
	p.Y.Label.Text = "sim / bound"
	p.X.Scale = plot.LogScale{}
	var ticks intTicks
	for n := range ranks {
		ticks = append(ticks, n)
	}
	slices.Sort(ticks)
	p.X.Tick.Marker = ticks
	p.X.Min, p.X.Max = float64(ticks[0])/1.15, float64(ticks[len(ticks)-1])*1.15
	p.Legend.Top = true
	p.Legend.Left = true
	p.Add(plotter.NewGrid())
	hi := ScaleTarget
	many := len(keys) > 1
	for i, k := range keys {
		xy := pts[k]
		slices.SortFunc(xy, func(a, b plotter.XY) int {
			switch {
			case a.X < b.X:
				return -1
			case a.X > b.X:
				return 1
			}
			return 0
		})
		for _, q := range xy {
			hi = math.Max(hi, q.Y)
		}
		l, s, err := plotter.NewLinePoints(xy)
		if err != nil {
			return nil, inputError(err)
		}
		c := colorOf(k.route)
		if many && i > 0 && k.route == keys[0].route {
			c = color.RGBA{R: c.R / 2, G: c.G / 2, B: c.B / 2, A: 0xff}
		}
		l.Color, l.Width, s.Color = c, vg.Points(1.5), c
		label := k.route
		if many {
			label = k.route + ", " + k.series
		}
		p.Add(l, s)
		p.Legend.Add(label, l, s)
	}
	for _, ref := range []struct {
		y      float64
		label  string
		dashes []vg.Length
	}{{1, "the bound", []vg.Length{vg.Points(1), vg.Points(3)}}, {ScaleTarget, fmt.Sprintf("target %.2fx", ScaleTarget), []vg.Length{vg.Points(5), vg.Points(4)}}} {
		l, err := plotter.NewLine(plotter.XYs{{X: p.X.Min, Y: ref.y}, {X: p.X.Max, Y: ref.y}})
		if err != nil {
			return nil, inputError(err)
		}
		l.Color, l.Width, l.Dashes = color.Gray{Y: 0x60}, vg.Points(1), ref.dashes
		p.Add(l)
		p.Legend.Add(ref.label, l)
	}
	p.Y.Min, p.Y.Max = 0.9, hi*1.08
	if !many {
		p.Title.Text += " (" + keys[0].series + ")"
	}
	return p, nil
}
