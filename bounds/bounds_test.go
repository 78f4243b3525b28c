package bounds

import (
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/m2n-dev/m2n/dtype"
	"github.com/m2n-dev/m2n/hier"
	"github.com/m2n-dev/m2n/mesh"
	"github.com/m2n-dev/m2n/placement"
	"github.com/m2n-dev/m2n/reshard"
)

// TestPaperBounds reproduces the paper's single-layer figures: B = 7168 MB,
// 16 EP sources, TP8 destination, rho in {2, 4, 8}, one domain, BN = 50
// GB/s, BL = 900 GB/s, decimal units.
func TestPaperBounds(t *testing.T) {
	fab := Fabric{NetBW: 50e9, LocalBW: 900e9}
	for _, tc := range []struct {
		rho                int
		flat, ag, hier     float64 // ms
		flatBind, hierBind string
	}{
		{2, 17.92, 143.36, 8.96, "source injection rho*B/(Ns*BN)", "source injection B/(Ns*BN)"},
		{4, 35.84, 143.36, 8.96, "source injection rho*B/(Ns*BN)", "source injection B/(Ns*BN)"},
		{8, 71.68, 143.36, 8.96, "source injection rho*B/(Ns*BN)", "source injection B/(Ns*BN)"},
	} {
		p, err := Uniform(7168e6, 16, 8, tc.rho, 1, 0)
		if err != nil {
			t.Fatal(err)
		}
		bs := Of(p, fab)
		got := map[string]Bound{}
		for _, b := range bs {
			got[b.Route] = b
		}
		for route, want := range map[string]float64{"flat": tc.flat, "agbcast": tc.ag, "hier": tc.hier} {
			if ms := got[route].Seconds * 1e3; math.Abs(ms-want) > 1e-9 {
				t.Errorf("rho %d %s: %.6f ms, want %.2f", tc.rho, route, ms, want)
			}
		}
		if got["flat"].Binding != tc.flatBind || got["hier"].Binding != tc.hierBind {
			t.Errorf("rho %d: flat bound by %q, hier by %q", tc.rho, got["flat"].Binding, got["hier"].Binding)
		}
	}
}

// TestLocalTermBinds: with slow local links the replication term binds.
func TestLocalTermBinds(t *testing.T) {
	p, _ := Uniform(1e9, 16, 8, 8, 1, 0)
	b := Of(p, Fabric{NetBW: 50e9, LocalBW: 5e9})[2]
	if b.Binding != "local replication (rho-1)*B/(K*rho*BL)" {
		t.Fatalf("binding %q", b.Binding)
	}
	want := 7 * 1e9 / (64 * 5e9)
	if math.Abs(b.Seconds-want) > 1e-12 {
		t.Errorf("%g s, want %g", b.Seconds, want)
	}
}

// bf16 is a bf16 layout of shape over the mesh of meshShape from rank
// start, with the placements pl.
func bf16(t *testing.T, shape string, meshShape []int, start int, pl string) placement.Layout {
	t.Helper()
	m, err := mesh.Interval(meshShape, start)
	l, err2 := placement.ParseLayout(shape, dtype.BF16, m, pl)
	if err := errors.Join(err, err2); err != nil {
		t.Fatal(err)
	}
	return l
}

// TestFromPlanMatchesUniform derives the problem from real layouts (4
// sources S0, DP4 x TP2 destination [R, S1], 2 domains of 4) and compares it
// with the explicit form.
func TestFromPlanMatchesUniform(t *testing.T) {
	shape := []int64{64, 32}
	src := bf16(t, placement.FormatShape(shape), []int{4}, 0, "S0")
	dst := bf16(t, placement.FormatShape(shape), []int{4, 2}, 4, "R,S1")
	p, err := reshard.NewPlan(src, dst, 12, reshard.Options{})
	if err != nil {
		t.Fatal(err)
	}
	topo, err := hier.Domains(make([]int, 12), src, dst, hier.DomainSizes{Dst: 4})
	if err != nil {
		t.Fatal(err)
	}
	got := FromPlan(p, topo, 0)
	want, _ := Uniform(float64(64*32*2), 4, 2, 4, 2, 0)
	if got.Bytes != want.Bytes || got.Sources != want.Sources || got.Rho != want.Rho || len(got.Domains) != 2 {
		t.Fatalf("got %+v, want %+v", got, want)
	}
	for i := range want.Domains {
		if got.Domains[i] != want.Domains[i] {
			t.Errorf("domain %d: %+v, want %+v", i, got.Domains[i], want.Domains[i])
		}
	}
}

// TestChooseLatency: a tiny tensor goes flat (hier's extra stages cost more
// than they save); a large replicated one goes hier; with rho = 1 and one
// domain the tie goes to flat.
func TestChoose(t *testing.T) {
	fab := Fabric{NetBW: 50e9, LocalBW: 900e9, Latency: 20e-6}
	tiny, _ := Uniform(4096, 16, 8, 8, 1, 16<<20)
	if c := Choose(tiny, fab); c.Route != "flat" {
		t.Errorf("tiny tensor: %s (%s)", c.Route, c.Why)
	}
	big, _ := Uniform(7168e6, 16, 8, 8, 1, 16<<20)
	if c := Choose(big, fab); c.Route != "hier" {
		t.Errorf("large tensor: %s (%s)", c.Route, c.Why)
	}
	one, _ := Uniform(7168e6, 16, 8, 1, 1, 16<<20)
	if c := Choose(one, Fabric{NetBW: 50e9, LocalBW: 900e9}); c.Route != "flat" {
		t.Errorf("rho 1: %s (%s)", c.Route, c.Why)
	}
}

// TestFabricValidate is issue 17 case 9's --latency -1s: the model accepted
// negative latencies and predicted negative times. Auto now refuses such a
// fabric, naming the field and the value.
func TestFabricValidate(t *testing.T) {
	good := Fabric{NetBW: 50e9, LocalBW: 900e9}
	if err := good.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		f    Fabric
		want string
	}{
		{Fabric{NetBW: 50e9, LocalBW: 900e9, Latency: -1}, "latency -1 s, want a non-negative, finite time"},
		{Fabric{NetBW: 50e9, LocalBW: 900e9, Latency: math.NaN()}, "latency NaN s"},
		{Fabric{NetBW: 50e9, LocalBW: 900e9, Latency: math.Inf(1)}, "latency +Inf s"},
		{Fabric{NetBW: 0, LocalBW: 900e9}, "network bandwidth 0 bytes/s, want a positive, finite rate"},
		{Fabric{NetBW: -5, LocalBW: 900e9}, "network bandwidth -5 bytes/s"},
		{Fabric{NetBW: 50e9, LocalBW: math.Inf(1)}, "local bandwidth +Inf bytes/s"},
		{Fabric{NetBW: 50e9, LocalBW: math.NaN()}, "local bandwidth NaN bytes/s"},
	} {
		err := tc.f.Validate()
		var fe *reshard.FieldError
		if !errors.As(err, &fe) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: Validate() = %v, want %q", tc.f, err, tc.want)
		}
	}
	src := bf16(t, "8x4", []int{2}, 0, "S0")
	dst := bf16(t, "8x4", []int{2}, 2, "S1")
	p, err := reshard.NewPlan(src, dst, 4, reshard.Options{})
	if err != nil {
		t.Fatal(err)
	}
	opts := reshard.DefaultScheduleOptions
	if _, err := (Auto{Fabric: Fabric{NetBW: 50e9, LocalBW: 900e9, Latency: -1}}).Schedule([]*reshard.Plan{p}, reshard.Topology{}, opts); err == nil ||
		!strings.Contains(err.Error(), "latency -1 s") {
		t.Errorf("Auto with a negative latency: %v", err)
	}
	if _, err := (Auto{Fabric: good}).Schedule([]*reshard.Plan{p}, reshard.Topology{Domain: []int{0}}, opts); err == nil || !strings.Contains(err.Error(), "topology") {
		t.Errorf("Auto with a short topology: %v", err)
	}
	s, err := (Auto{Fabric: good}).Schedule([]*reshard.Plan{p}, reshard.Topology{}, opts)
	if err != nil || s == nil {
		t.Fatal(err)
	}
	c := (Auto{Fabric: good}).Choose([]*reshard.Plan{p}, reshard.Topology{}, opts)
	for _, b := range c.Bounds {
		if !(b.Predicted >= 0) {
			t.Errorf("%s predicts %g s", b.Route, b.Predicted)
		}
	}
	if _, err := Uniform(math.NaN(), 16, 8, 8, 1, 0); err == nil {
		t.Error("Uniform accepted NaN bytes")
	}
	if _, err := Uniform(1e9, 16, 8, 8, 1, math.Inf(1)); err == nil {
		t.Error("Uniform accepted an infinite chunk")
	}
	if err := (Problem{Bytes: -1}).Validate(); err == nil {
		t.Error("negative bytes accepted")
	}
}

// TestFP8AutoSkipsAgbcast: auto leaves agbcast out for a call that
// converts (and says so), choosing the fastest of the others.
func TestFP8AutoSkipsAgbcast(t *testing.T) {
	src := bf16(t, "1024x1024", []int{2}, 0, "S0")
	dst := bf16(t, "1024x1024", []int{16}, 2, "R").WithDType(dtype.FP8E4M3)
	conv, err := reshard.NewPlan(src, dst, 18, reshard.Options{})
	if err != nil {
		t.Fatal(err)
	}
	auto := Auto{Fabric: Fabric{NetBW: 1e9, LocalBW: 1e12}}
	c := auto.Choose([]*reshard.Plan{conv}, reshard.Topology{}, reshard.DefaultScheduleOptions)
	if c.Route == "agbcast" || !strings.Contains(c.Why, "agbcast left out") {
		t.Errorf("auto picked %s for a converting call: %s", c.Route, c.Why)
	}
	// the filter: leaving out the winner picks the best of the others.
	p := ProblemOf([]*reshard.Plan{conv}, reshard.Topology{}, float64(reshard.DefaultScheduleOptions.ChunkBytes))
	best := Choose(p, auto.Fabric)
	other := choose(p, auto.Fabric, func(r string) bool { return r != best.Route })
	for _, b := range other.Bounds {
		if b.Route != best.Route && b.Predicted < predicted(other.Bounds, other.Route) {
			t.Errorf("without %s, auto picked %s although %s predicts less", best.Route, other.Route, b.Route)
		}
	}
	if other.Route == best.Route {
		t.Errorf("the filter left %s in", best.Route)
	}
}

func predicted(bs []Bound, route string) float64 {
	for _, b := range bs {
		if b.Route == route {
			return b.Predicted
		}
	}
	return -1
}

// TestCombineSlowestPart: two calls on disjoint sources, one with three
// times the other's bytes on as many sources, bound hier's and flat's
// source injection by the larger call (3 units over 4 sources), not by the
// mean (4 units over 8 sources).
func TestCombineSlowestPart(t *testing.T) {
	fab := Fabric{NetBW: 1, LocalBW: 1}
	small, _ := Uniform(1, 4, 8, 2, 1, 0)
	large, _ := Uniform(3, 4, 8, 2, 1, 0)
	c := Combine(small, large)
	if c.Bytes != 4 || c.Sources != 8 || len(c.Parts) != 2 {
		t.Fatalf("combined %+v", c)
	}
	bs := Of(c, fab)
	for _, b := range bs {
		var src float64
		for _, term := range b.Terms {
			if strings.HasPrefix(term.Name, "source injection") {
				src = term.Seconds
			}
		}
		want := map[string]float64{"flat": 2 * 3.0 / 4, "hier": 3.0 / 4}[b.Route]
		if want != 0 && src != want {
			t.Errorf("%s: source injection %g s, want %g (the larger call's)", b.Route, src, want)
		}
	}
	// a combination of combinations keeps every call.
	if cc := Combine(c, small); len(cc.Parts) != 3 {
		t.Errorf("nested combination: %d parts, want 3", len(cc.Parts))
	}
}
