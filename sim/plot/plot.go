// Package plot draws m2n's simulator reports (sim.Report, refit sim
// --json) as gonum plots: Rho (time against the destination replication,
// like the paper's Figure 4), Models (whole-model bars beside published
// figures), Links (link utilisation over time) and Scale (sim/bound
// against the ranks). A program saves the plot (refit plot writes PNGs).
//
//	reps, _ := sim.ReadReports(f)
//	p, err := plot.Rho(reps, plot.RhoOptions{Paper: true})
//	p.Save(7*vg.Inch, 4.5*vg.Inch, "rho.png")
//
// Errors about the input are *sim.ConfigError values naming the setting
// to blame: "in" (the reports), "measured", "route" or "report".
package plot

import (
	"fmt"
	"image/color"
	"math"
	"strings"

	"github.com/m2n-dev/m2n/sim"
	"gonum.org/v1/plot"
)

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

// inputError blames the reports.
func inputError(err error) error { return &sim.ConfigError{Setting: "in", Err: err} }

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
