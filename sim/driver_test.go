package sim_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/m2n-dev/m2n/dtype"
	"github.com/m2n-dev/m2n/internal/testutil/layouttest"
	"github.com/m2n-dev/m2n/modelspec"
	"github.com/m2n-dev/m2n/placement"
	"github.com/m2n-dev/m2n/reshard"
	"github.com/m2n-dev/m2n/routespec"
	"github.com/m2n-dev/m2n/sim"
)

func layout(t *testing.T, shape string, m []int, start int, pl string) placement.Layout {
	t.Helper()
	return layouttest.Layout(t, shape, dtype.BF16, layouttest.Interval(t, m, start), pl)
}

func paperConfig(t *testing.T) sim.Config {
	c, _ := sim.Preset("gb200-nvl72")
	c.NetLatency, c.LocalLatency, c.CopyBW = 0, 0, 0
	routes, _ := routespec.List("all,auto", false)
	return sim.Config{Cluster: c, Schedule: reshard.ScheduleOptions{ChunkBytes: 16 << 20, StagingBytes: 256 << 20}, Routes: routes, Bins: 8, Series: true,
		Problem: sim.Problem{Src: layout(t, "256x2000x7000", []int{16}, 0, "S0"), Dst: layout(t, "256x2000x7000", []int{8, 8}, 16, "R,S1")}}
}

// TestSimulatePaperLayer: the paper's single layer at rho 8 on GB200
// simulates within its bounds (flat, agbcast and hier at the paper's 71.68,
// 143.36 and 8.96 ms), and auto picks hier.
func TestSimulatePaperLayer(t *testing.T) {
	rep, err := sim.Simulate(paperConfig(t))
	if err != nil {
		t.Fatal(err)
	}
	if rep.Rho != 8 || rep.World != 80 || rep.DstDomains != 1 || len(rep.Routes) != 4 {
		t.Fatalf("rho %d, world %d, %d domains, %d routes", rep.Rho, rep.World, rep.DstDomains, len(rep.Routes))
	}
	want := map[string]float64{"flat": 71.68e-3, "agbcast": 143.36e-3, "hier": 8.96e-3}
	for _, r := range rep.Routes[:3] {
		if b := want[r.Route]; math.Abs(r.BoundSeconds-b) > 1e-9*b || r.Seconds < r.BoundSeconds || r.Series == nil {
			t.Errorf("%s: bound %g (want %g), simulated %g", r.Route, r.BoundSeconds, b, r.Seconds)
		}
	}
	if a := rep.Routes[3]; a.Chosen != "hier" || a.Why == "" {
		t.Errorf("auto chose %s: %s", a.Chosen, a.Why)
	}
	var text strings.Builder
	if err := rep.WriteText(&text, false); err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"cluster gb200-nvl72", "auto:hier", "8.96 ms", "auto: ", "link use:"} {
		if !strings.Contains(text.String(), w) {
			t.Errorf("the text lacks %q:\n%s", w, text.String())
		}
	}
	var buf bytes.Buffer
	if err := json.NewEncoder(&buf).Encode(rep); err != nil {
		t.Fatal(err)
	}
	back, err := sim.ReadReports(&buf)
	if err != nil || len(back) != 1 || back[0].Routes[2].BoundSeconds != rep.Routes[2].BoundSeconds {
		t.Errorf("ReadReports: %v", err)
	}
}

// TestSimulateForms: pipeline stages and a whole model simulate, a stage
// per pipeline stage.
func TestSimulateForms(t *testing.T) {
	c := paperConfig(t)
	c.Routes = []string{"hier"}
	c.Problem = sim.Problem{Src: layout(t, "64x2000x70", []int{4}, 0, "S0"), Dst: layout(t, "64x2000x70", []int{2, 2}, 4, "R,S1"), PPStages: 2}
	rep, err := sim.Simulate(c)
	if err != nil || rep.Stages != 2 || rep.World != 12 || len(rep.Routes[0].Parts) != 2 {
		t.Fatalf("pipeline: %v %+v", err, rep)
	}
	l, err := modelspec.Spec{Model: "llama-3.1-70b", Scale: 16, Layers: 4, Train: "tp=2,pp=2,dp=2", Gen: "tp=4,dp=2"}.Layouts()
	if err != nil {
		t.Fatal(err)
	}
	c.Problem = sim.Problem{Model: l}
	c.PerTensor = true
	if rep, err = sim.Simulate(c); err != nil || rep.Stages != 2 || rep.Model == "" || len(rep.Routes[0].Tensors) == 0 {
		t.Fatalf("model: %v %+v", err, rep)
	}
}

// TestSimulateErrorsNameTheSetting: a setting that cannot be used is a
// *ConfigError naming it.
func TestSimulateErrorsNameTheSetting(t *testing.T) {
	for _, tc := range []struct {
		edit    func(*sim.Config)
		setting string
		want    string
	}{
		{func(c *sim.Config) { c.Problem.World = 3 }, "world", "the meshes reach rank 79"},
		{func(c *sim.Config) { c.Problem.DstDomain = 100 }, "dst-domain-size", "a gb200-nvl72 domain has 72 GPUs"},
		{func(c *sim.Config) { c.Problem.SrcDomain = -1 }, "src-domain-size", "want a positive number"},
		{func(c *sim.Config) { c.Problem.PPStages = -2 }, "pp-stages", "want a positive number"},
		{func(c *sim.Config) { c.Measured = &sim.Measured{World: 5} }, "measured", "the run had 5 ranks, these layouts need 80"},
	} {
		c := paperConfig(t)
		tc.edit(&c)
		_, err := sim.Simulate(c)
		var ce *sim.ConfigError
		if !errors.As(err, &ce) || ce.Setting != tc.setting || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v", tc.setting, err)
		}
	}
}

func TestReadMeasured(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`{"world": 2, "domains": [0, 0], "routes": []}`, "0 routes"},
		{`{"stage": 0, "world": 2}`, "pipeline stages"},
		{`not json`, "not a refit run --json report"},
	} {
		if _, err := sim.ReadMeasured(strings.NewReader(tc.in)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v", tc.in, err)
		}
	}
	m, err := sim.ReadMeasured(strings.NewReader(`{"world": 2, "domains": [0, 1], "emulated_net_bw": 5e7, "fabric": {"LocalBW": 1e9, "Latency": 2e-5}, "routes": [{"route": "flat", "median_s": 0.1}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if c, ok := m.Cluster(); !ok || c.NetBW != 5e7 || c.DomainGPUs != 1 || c.Validate() != nil {
		t.Errorf("emulated cluster %+v, %v", c, ok)
	}
}

// TestAnchors: the published configurations have their anchors, FP8 apart
// from BF16, and others none.
func TestAnchors(t *testing.T) {
	if a := sim.AnchorsFor("DeepSeek-V3", 128, 128, false); len(a) == 0 || a[0].Seconds != 1.447 {
		t.Errorf("DeepSeek-V3 128+128: %v, want nccl_m2n's 1.447 s first", a)
	}
	if a := sim.AnchorsFor("Kimi-K2", 256, 128, true); len(a) != 1 || a[0].Source != "Perplexity" {
		t.Errorf("Kimi-K2 256 -> 128 FP8: %v, want Perplexity's 1.3 s", a)
	}
	if a := sim.AnchorsFor("Kimi-K2", 256, 128, false); a != nil {
		t.Errorf("Kimi-K2 in BF16: %v, want none (Perplexity's figure is with FP8)", a)
	}
	if s := sim.AnchorsFor("DeepSeek-V3", 256, 256, false)[0].String(); s != "NeMo-RL 1.93 s-2.59 s (PP16 EP16 -> TP32 DP8, GB200)" {
		t.Errorf("NeMo-RL anchor reads %q", s)
	}
}
