package plot_test

import (
	"errors"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/m2n-dev/m2n/dtype"
	"github.com/m2n-dev/m2n/mesh"
	"github.com/m2n-dev/m2n/placement"
	"github.com/m2n-dev/m2n/reshard"
	"github.com/m2n-dev/m2n/sim"
	"github.com/m2n-dev/m2n/sim/plot"
	"gonum.org/v1/plot/vg"
)

// reports simulates a small tensor at rho 2 and 4 on every route.
func reports(t *testing.T) []sim.Report {
	t.Helper()
	var out []sim.Report
	c, _ := sim.Preset("gb200-nvl72")
	for _, rho := range []int{2, 4} {
		src, _ := mesh.Interval([]int{4}, 0)
		dst, _ := mesh.Interval([]int{rho, 2}, 4)
		s, _ := placement.ParseLayout("64x2000x70", dtype.BF16, src, "S0")
		d, _ := placement.ParseLayout("64x2000x70", dtype.BF16, dst, "R,S1")
		rep, err := sim.Simulate(sim.Config{Cluster: c, Schedule: reshard.ScheduleOptions{ChunkBytes: 1 << 20, StagingBytes: 8 << 20},
			Routes: []string{"flat", "agbcast", "hier"}, Bins: 16, Series: true, Problem: sim.Problem{Src: s, Dst: d}})
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, *rep)
	}
	return out
}

// TestPlots draws every kind and saves it as a PNG; errors about the
// input name the setting to blame.
func TestPlots(t *testing.T) {
	reps := reports(t)
	dir := t.TempDir()
	rho, err := plot.Rho(reps, plot.RhoOptions{Paper: true, Measured: []plot.SweepPoint{{Rho: 2, Domains: 1, Route: "hier", MedianSec: 1e-3}}})
	if err != nil {
		t.Fatal(err)
	}
	links, err := plot.Links(reps, "hier", 2)
	if err != nil {
		t.Fatal(err)
	}
	for name, p := range map[string]interface {
		Save(w, h vg.Length, file string) error
	}{"rho.png": rho, "links.png": links} {
		savePNG(t, p, filepath.Join(dir, name))
	}
	for _, tc := range []struct {
		err     error
		setting string
		want    string
	}{
		{second(plot.Models(reps)), "in", "not a model report"},
		{second(plot.Links(reps, "hier", 3)), "report", "the input has 2 reports"},
		{second(plot.Links(reps, "auto", 1)), "route", "no such route"},
		{second(plot.Rho(reps, plot.RhoOptions{Domains: 5})), "in", "no single-tensor reports with 5 destination domain(s)"},
		{second(plot.ReadSweep(strings.NewReader("nope"))), "measured", "not refit sweep --json output"},
	} {
		var ce *sim.ConfigError
		if !errors.As(tc.err, &ce) || ce.Setting != tc.setting || !strings.Contains(tc.err.Error(), tc.want) {
			t.Errorf("%v, want a %s error containing %q", tc.err, tc.setting, tc.want)
		}
	}
}

func second[T any](_ T, err error) error { return err }

// savePNG saves p as a PNG file and checks that it reads back as an image
// of plot size.
func savePNG(t *testing.T, p interface {
	Save(w, h vg.Length, file string) error
}, file string) {
	t.Helper()
	if err := p.Save(7*vg.Inch, 4.5*vg.Inch, file); err != nil {
		t.Fatal(err)
	}
	fh, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(fh)
	fh.Close()
	if err != nil || img.Bounds().Dx() < 300 {
		t.Errorf("%s: not a plot (%v)", file, err)
	}
}

// TestPlotScale draws sim/bound against the ranks (the two reports have 8
// and 12 ranks) for one route and for all, and names the setting to blame.
func TestPlotScale(t *testing.T) {
	reps := reports(t)
	dir := t.TempDir()
	for _, route := range []string{"hier", "all"} {
		p, err := plot.Scale(reps, route)
		if err != nil {
			t.Fatal(err)
		}
		savePNG(t, p, filepath.Join(dir, route+".png"))
	}
	for _, tc := range []struct {
		err     error
		setting string
		want    string
	}{
		{second(plot.Scale(reps[:1], "hier")), "in", "1 rank count(s)"},
		{second(plot.Scale(reps, "nope")), "route", "no such route"},
	} {
		var ce *sim.ConfigError
		if !errors.As(tc.err, &ce) || ce.Setting != tc.setting || !strings.Contains(tc.err.Error(), tc.want) {
			t.Errorf("%v, want a %s error containing %q", tc.err, tc.setting, tc.want)
		}
	}
}
