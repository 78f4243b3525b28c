package plot

import (
	"fmt"
	"image/color"
	"math"
	"slices"
	"strings"

	"github.com/m2n-dev/m2n/sim"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// published is a published whole-model weight-sync time.
type published struct {
	model, train, gen string // as refit sim --model reports them
	label             string
	figures           []publishedFigure
}

type publishedFigure struct {
	name    string
	seconds float64
	route   string // the route it is compared with
}

// publishedTimes are the configurations issue 13 names, with their figures.
var publishedTimes = []published{
	{model: "deepseek-v3", train: "tp=1,pp=4,cp=1,dp=32,ep=16,etp=1", gen: "tp=8,dp=16,ep=1", label: "DeepSeek-V3 128+128",
		figures: []publishedFigure{{"NCCL M2N hierarchical", 1.447, "hier"}, {"NCCL M2N direct", 3.838, "flat"},
			{"paper: M2N", 2.77, "hier"}, {"paper: AG+bcast", 5.78, "agbcast"}}},
	{model: "qwen3-235b-a22b", train: "tp=2,pp=4,cp=2,dp=4,ep=16,etp=1", gen: "tp=8,dp=8,ep=1", label: "Qwen3-235B 64+64",
		figures: []publishedFigure{{"NCCL M2N hierarchical", 0.989, "hier"}, {"NCCL M2N direct", 2.175, "flat"}}},
	{model: "deepseek-v3", train: "tp=1,pp=16,cp=1,dp=16,ep=16,etp=1", gen: "tp=32,dp=8,ep=1", label: "DeepSeek-V3 NeMo-RL 256+256",
		figures: []publishedFigure{{"NeMo-RL (1.9-2.8 s)", 2.35, ""}}},
}

// publishedFor finds the published figures of a model report.
func publishedFor(r sim.Report) (published, bool) {
	for _, p := range publishedTimes {
		if strings.EqualFold(r.Model, p.model) && r.Source == "trainer "+p.train && r.Destination == "generator "+p.gen {
			return p, true
		}
	}
	return published{}, false
}

// Models draws whole-model bars per route, one group per configuration
// (reports of refit sim --model), beside the published figures of that
// configuration where some are known; times on a log scale.
func Models(reps []sim.Report) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = "Whole-model weight sync: simulated routes (solid) and published figures (outlined)"
	p.Y.Label.Text = "time"
	p.Y.Scale = plot.LogScale{}
	p.Y.Tick.Marker = niceTicks{unit: "s"}
	p.Legend.Top = true
	p.Legend.Left = true
	p.Add(plotter.NewGrid())
	var names []string
	type bar struct {
		group int
		name  string
		v     float64
		c     color.Color
		hatch bool
	}
	var bars []bar
	series := []string{}
	for gi, r := range reps {
		if r.Model == "" {
			return nil, inputError(fmt.Errorf("report %d is not a model report (refit sim --model)", gi+1))
		}
		label := fmt.Sprintf("%s\n%s\n%s", r.Model, strings.TrimPrefix(r.Source, "trainer "), strings.TrimPrefix(r.Destination, "generator "))
		pub, ok := publishedFor(r)
		if ok {
			label = pub.label
		}
		label += "\n" + r.Cluster.Name
		names = append(names, label)
		for _, rt := range r.Routes {
			bars = append(bars, bar{gi, "simulated " + rt.Route, rt.Seconds, colorOf(rt.Route), false})
		}
		for _, fig := range pub.figures {
			bars = append(bars, bar{gi, "published: " + fig.name, fig.seconds, publishedColor(fig.name), true})
		}
	}
	lo, hi := math.Inf(1), 0.0
	for _, b := range bars {
		if !slices.Contains(series, b.name) {
			series = append(series, b.name)
		}
		lo, hi = math.Min(lo, b.v), math.Max(hi, b.v)
	}
	floor := lo / 3
	perGroup := map[int]int{}
	for _, b := range bars {
		perGroup[b.group]++
	}
	seen := map[int]int{}
	legend := map[string]bool{}
	for _, b := range bars {
		n := perGroup[b.group]
		width := 0.8 / float64(n)
		x0 := float64(b.group) - 0.4 + width*float64(seen[b.group])
		seen[b.group]++
		poly, err := plotter.NewPolygon(plotter.XYs{{X: x0, Y: floor}, {X: x0 + width*0.9, Y: floor}, {X: x0 + width*0.9, Y: b.v}, {X: x0, Y: b.v}})
		if err != nil {
			return nil, err
		}
		poly.Color = b.c
		poly.LineStyle.Width = vg.Points(0.5)
		if b.hatch {
			poly.LineStyle.Width = vg.Points(1.5)
			poly.LineStyle.Color = color.Black
		}
		p.Add(poly)
		if !legend[b.name] {
			legend[b.name] = true
			p.Legend.Add(b.name, poly)
		}
		lbl, err := plotter.NewLabels(plotter.XYLabels{XYs: []plotter.XY{{X: x0 + width*0.45, Y: b.v * 1.08}}, Labels: []string{formatTick(roundSig(b.v), "s")}})
		if err == nil {
			lbl.TextStyle[0].Font.Size = vg.Points(6)
			lbl.TextStyle[0].XAlign = draw.XCenter
			p.Add(lbl)
		}
	}
	p.NominalX(names...)
	p.X.Min, p.X.Max = -0.6, float64(len(names))-0.4
	p.Y.Min, p.Y.Max = floor, hi*25
	p.Legend.TextStyle.Font.Size = vg.Points(8)
	return p, nil
}

// publishedColor gives each published figure a colour of its own.
func publishedColor(name string) color.RGBA {
	switch {
	case strings.Contains(name, "hierarchical"):
		return color.RGBA{0x9e, 0xc9, 0xe8, 0xff}
	case strings.Contains(name, "direct"):
		return color.RGBA{0xf4, 0xa5, 0xa5, 0xff}
	case strings.Contains(name, "AG+bcast"):
		return color.RGBA{0xcc, 0xcc, 0xcc, 0xff}
	case strings.Contains(name, "paper"):
		return color.RGBA{0x6b, 0xae, 0xd6, 0xff}
	}
	return color.RGBA{0xfd, 0xd0, 0xa2, 0xff}
}

func roundSig(v float64) float64 {
	if v <= 0 {
		return v
	}
	e := math.Pow(10, math.Floor(math.Log10(v))-2)
	return math.Round(v/e) * e
}
