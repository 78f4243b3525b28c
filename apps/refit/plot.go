package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"image/color"
	"io"
	"math"
	"os"
	"slices"
	"strings"

	"github.com/m2n-dev/m2n/units"
	"github.com/spf13/cobra"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

func newPlotCmd() *cobra.Command {
	var f plotFlags
	cmd := &cobra.Command{
		Use:   "plot rho|models|links --in FILE [flags]",
		Short: "Draw PNG plots from refit sim --json (time against rho, whole-model bars, link utilisation)",
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
          hier) of one report (--report, default the first).`,
		Example: `  for rho in 2 4 8; do refit sim --shape 256x2000x7000 --dtype bf16 --src-mesh 16 --src-placements S0 \
      --dst-mesh ${rho}x8 --dst-placements R,S1 --latency 0 --local-latency 0 --copy-bw 0 --json; done > fig4.jsonl
  refit plot rho --in fig4.jsonl --paper --out docs/sim-rho-paper.png
  refit plot links --in fig4.jsonl --route hier --out docs/sim-links.png`,
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
	fs.StringVar(&f.route, "route", "hier", "links: the route whose utilisation to draw")
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

// readSimReports reads refit sim --json objects, one after another.
func readSimReports(path string) ([]simReport, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, flagError("in", path, err)
	}
	defer fh.Close()
	dec := json.NewDecoder(fh)
	var out []simReport
	for {
		var r simReport
		if err := dec.Decode(&r); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return nil, flagError("in", path, fmt.Errorf("report %d is not refit sim --json output: %w", len(out)+1, err))
		}
		out = append(out, r)
	}
	if len(out) == 0 {
		return nil, flagError("in", path, fmt.Errorf("no refit sim --json reports"))
	}
	return out, nil
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
	reps, err := readSimReports(f.in)
	if err != nil {
		return err
	}
	var p *plot.Plot
	switch kind {
	case "rho":
		p, err = plotRho(reps, f)
	case "models":
		p, err = plotModels(reps, f)
	case "links":
		p, err = plotLinks(reps, f)
	default:
		return usageError{fmt.Errorf("unknown plot %q: want rho, models or links", kind)}
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

// routeColor gives each route its colour in every plot.
var routeColor = map[string]color.RGBA{
	"flat":    {R: 0xd6, G: 0x27, B: 0x28, A: 0xff},
	"agbcast": {R: 0x7f, G: 0x7f, B: 0x7f, A: 0xff},
	"hier":    {R: 0x1f, G: 0x77, B: 0xb4, A: 0xff},
	"auto":    {R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff},
}

func colorOf(route string) color.RGBA {
	if c, ok := routeColor[route]; ok {
		return c
	}
	return color.RGBA{R: 0x94, G: 0x67, B: 0xbd, A: 0xff}
}

// niceTicks label a log axis at 1, 2 and 5 times powers of ten, in the
// axis's unit.
type niceTicks struct{ unit string }

func (t niceTicks) Ticks(lo, hi float64) []plot.Tick {
	var out []plot.Tick
	if lo <= 0 {
		lo = hi / 1e3
	}
	for e := math.Floor(math.Log10(lo)) - 1; e <= math.Ceil(math.Log10(hi))+1; e++ {
		for _, m := range []float64{1, 2, 5} {
			v := m * math.Pow(10, e)
			if v < lo*0.999 || v > hi*1.001 {
				continue
			}
			out = append(out, plot.Tick{Value: v, Label: formatTick(v, t.unit)})
		}
	}
	return out
}

func formatTick(v float64, unit string) string {
	if unit == "s" {
		switch {
		case v >= 1:
			return fmt.Sprintf("%g s", v)
		case v >= 1e-3:
			return fmt.Sprintf("%g ms", math.Round(v*1e6)/1e3)
		}
		return fmt.Sprintf("%g us", math.Round(v*1e9)/1e3)
	}
	return fmt.Sprintf("%g", v)
}

// paperFig4 are the paper's measured single-layer times (ms) by route and
// rho: hier 10.251 / 13.834 / 9.775, flat 20.859 / - / 77.258, AG+bcast
// 222.065 / 239.649 / - (rho 8 pending in the paper).
var paperFig4 = map[string]map[int]float64{
	"hier":    {2: 10.251e-3, 4: 13.834e-3, 8: 9.775e-3},
	"flat":    {2: 20.859e-3, 8: 77.258e-3},
	"agbcast": {2: 222.065e-3, 4: 239.649e-3},
}

// sweepFile is the part of refit sweep --json the rho plot reads.
type sweepFile struct {
	Rows []struct {
		Rho       int     `json:"rho"`
		Domains   int     `json:"domains"`
		Route     string  `json:"route"`
		MedianSec float64 `json:"median_s"`
	} `json:"rows"`
}

func plotRho(reps []simReport, f *plotFlags) (*plot.Plot, error) {
	dom := f.domains
	if dom == 0 {
		dom = math.MaxInt
		for _, r := range reps {
			dom = min(dom, max(r.DstDomains, 1))
		}
	}
	type key struct {
		route string
		rho   int
	}
	sim, bound, meas := map[key]float64{}, map[key]float64{}, map[key]float64{}
	var routes []string
	var rhos []int
	for _, r := range reps {
		if max(r.DstDomains, 1) != dom || r.Rho < 1 {
			continue
		}
		if !slices.Contains(rhos, r.Rho) {
			rhos = append(rhos, r.Rho)
		}
		for _, rt := range r.Routes {
			if rt.Route == "auto" {
				continue
			}
			if !slices.Contains(routes, rt.Route) {
				routes = append(routes, rt.Route)
			}
			k := key{rt.Route, r.Rho}
			sim[k], bound[k] = rt.Seconds, rt.BoundSeconds
			if rt.MeasuredSec > 0 {
				meas[k] = rt.MeasuredSec
			}
		}
	}
	if len(rhos) == 0 {
		return nil, flagError("in", f.in, fmt.Errorf("no single-tensor reports with %d destination domain(s)", dom))
	}
	slices.Sort(rhos)
	if f.measured != "" {
		b, err := os.ReadFile(f.measured)
		if err != nil {
			return nil, flagError("measured", f.measured, err)
		}
		var sw sweepFile
		if err := json.Unmarshal(b, &sw); err != nil {
			return nil, flagError("measured", f.measured, fmt.Errorf("not refit sweep --json output: %w", err))
		}
		for _, row := range sw.Rows {
			if row.Domains == dom {
				meas[key{row.Route, row.Rho}] = row.MedianSec
			}
		}
	}
	measLabel := "measured"
	if f.paper {
		measLabel = "measured (paper)"
		for route, byRho := range paperFig4 {
			for rho, v := range byRho {
				meas[key{route, rho}] = v
			}
		}
	}
	p := plot.New()
	r0 := reps[0]
	p.Title.Text = fmt.Sprintf("%s -> %s; %s (NIC %s, local %s)", shortLayout(r0.Source), rhoLayout(r0.Destination),
		r0.Cluster.Name, units.FormatRate(r0.Cluster.NetBW), units.FormatRate(r0.Cluster.LocalBW))
	p.X.Label.Text = "destination replication rho"
	p.Y.Label.Text = "time"
	p.Y.Scale = plot.LogScale{}
	p.Y.Tick.Marker = niceTicks{unit: "s"}
	p.X.Tick.Marker = intTicks(rhos)
	p.Legend.Top = true
	p.Legend.Left = true
	p.Add(plotter.NewGrid())
	order := []string{"flat", "agbcast", "hier"}
	slices.SortStableFunc(routes, func(a, b string) int { return slices.Index(order, a) - slices.Index(order, b) })
	lo, hi := math.Inf(1), 0.0
	anyMeas := false
	for _, route := range routes {
		c := colorOf(route)
		var sxy, bxy, mxy plotter.XYs
		for _, rho := range rhos {
			k := key{route, rho}
			if v, ok := sim[k]; ok && v > 0 {
				sxy = append(sxy, plotter.XY{X: float64(rho), Y: v})
			}
			if v, ok := bound[k]; ok && v > 0 {
				bxy = append(bxy, plotter.XY{X: float64(rho), Y: v})
			}
			if v, ok := meas[k]; ok && v > 0 {
				mxy = append(mxy, plotter.XY{X: float64(rho), Y: v})
			}
		}
		for _, xy := range [][]plotter.XY{sxy, bxy, mxy} {
			for _, v := range xy {
				lo, hi = math.Min(lo, v.Y), math.Max(hi, v.Y)
			}
		}
		if len(bxy) > 0 {
			l, err := plotter.NewLine(bxy)
			if err != nil {
				return nil, err
			}
			l.Color, l.Width, l.Dashes = c, vg.Points(1.5), []vg.Length{vg.Points(5), vg.Points(4)}
			p.Add(l)
		}
		if len(sxy) > 0 {
			l, s, err := plotter.NewLinePoints(sxy)
			if err != nil {
				return nil, err
			}
			l.Color, l.Width = c, vg.Points(2)
			s.Color, s.Shape, s.Radius = c, draw.CircleGlyph{}, vg.Points(3)
			p.Add(l, s)
			p.Legend.Add(route, l)
		}
		if len(mxy) > 0 {
			s, err := plotter.NewScatter(mxy)
			if err != nil {
				return nil, err
			}
			s.Color, s.Shape, s.Radius = c, draw.PyramidGlyph{}, vg.Points(4.5)
			p.Add(s)
			anyMeas = true
		}
	}
	// one legend entry per style, in grey
	grey := color.RGBA{0x55, 0x55, 0x55, 0xff}
	if l, s, err := plotter.NewLinePoints(plotter.XYs{{X: 1, Y: 1}}); err == nil {
		l.Color, l.Width, s.Color, s.Shape, s.Radius = grey, vg.Points(2), grey, draw.CircleGlyph{}, vg.Points(3)
		p.Legend.Add("simulated", l, s)
	}
	if l, err := plotter.NewLine(plotter.XYs{{X: 1, Y: 1}}); err == nil {
		l.Color, l.Width, l.Dashes = grey, vg.Points(1.5), []vg.Length{vg.Points(5), vg.Points(4)}
		p.Legend.Add("model bound", l)
	}
	if anyMeas {
		if s, err := plotter.NewScatter(plotter.XYs{{X: 1, Y: 1}}); err == nil {
			s.Color, s.Shape, s.Radius = grey, draw.PyramidGlyph{}, vg.Points(4.5)
			p.Legend.Add(measLabel, s)
		}
	}
	p.Y.Min, p.Y.Max = lo/1.6, hi*12
	p.X.Min, p.X.Max = float64(rhos[0])*0.8, float64(rhos[len(rhos)-1])*1.15
	if len(rhos) > 1 && rhos[len(rhos)-1]/rhos[0] >= 4 {
		p.X.Scale = plot.LogScale{}
	}
	return p, nil
}

// meshOnly renders a layout as its mesh and placements: "8x8 R,S1".
func meshOnly(s string) string {
	if i := strings.Index(s, " on "); i >= 0 {
		return shortLayout(s[i+4:])
	}
	return s
}

// rhoLayout renders a destination layout with its replicating mesh axis as
// rho: "256x2000x7000 bf16 on 2x8[16-31] R,S1" -> "rho x 8 R,S1".
func rhoLayout(s string) string {
	i := strings.Index(s, " on ")
	j := strings.Index(s, "[")
	if i < 0 || j < i {
		return shortLayout(s)
	}
	dims := strings.SplitN(s[i+4:j], "x", 2)
	rest := shortLayout(s[j:])
	if len(dims) == 2 {
		return "rho x " + dims[1] + rest
	}
	return shortLayout(s[i+4:])
}

// intTicks labels the given integers.
type intTicks []int

func (t intTicks) Ticks(lo, hi float64) []plot.Tick {
	var out []plot.Tick
	for _, v := range t {
		out = append(out, plot.Tick{Value: float64(v), Label: fmt.Sprint(v)})
	}
	return out
}

// shortLayout trims a layout's rank list: "256x2000x7000 bf16 on 16 S0".
func shortLayout(s string) string {
	if i := strings.Index(s, "["); i >= 0 {
		if j := strings.Index(s[i:], "]"); j >= 0 {
			return s[:i] + s[i+j+1:]
		}
	}
	return s
}

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
func publishedFor(r simReport) (published, bool) {
	for _, p := range publishedTimes {
		if strings.EqualFold(r.Model, p.model) && r.Source == "trainer "+p.train && r.Destination == "generator "+p.gen {
			return p, true
		}
	}
	return published{}, false
}

func plotModels(reps []simReport, f *plotFlags) (*plot.Plot, error) {
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
			return nil, flagError("in", f.in, fmt.Errorf("report %d is not a model report (refit sim --model)", gi+1))
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

func plotLinks(reps []simReport, f *plotFlags) (*plot.Plot, error) {
	if f.report < 1 || f.report > len(reps) {
		return nil, flagError("report", fmt.Sprint(f.report), fmt.Errorf("the input has %d reports", len(reps)))
	}
	r := reps[f.report-1]
	var rt *simRouteJS
	for i := range r.Routes {
		if r.Routes[i].Route == f.route {
			rt = &r.Routes[i]
		}
	}
	if rt == nil {
		return nil, flagError("route", f.route, fmt.Errorf("report %d has no such route", f.report))
	}
	if rt.Series == nil || len(rt.Series.Lines) == 0 {
		return nil, flagError("in", f.in, fmt.Errorf("route %s has no utilisation series (refit sim --json with --bins > 0)", f.route))
	}
	p := plot.New()
	p.Title.Text = fmt.Sprintf("Link utilisation, %s: %s -> %s, %s", f.route, meshOnly(r.Source), meshOnly(r.Destination), r.Cluster.Name)
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
