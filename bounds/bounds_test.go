package bounds

import (
	"math"
	"testing"

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

func layoutOn(t *testing.T, shape []int64, ms []int, ranks []int, pl string) placement.Layout {
	t.Helper()
	m, err := mesh.New(ms, ranks)
	if err != nil {
		t.Fatal(err)
	}
	ps, _ := placement.Parse(pl)
	l, err := placement.NewLayout(shape, placement.BF16, m, ps)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// TestFromPlanMatchesUniform derives the problem from real layouts (4
// sources S0, DP4 x TP2 destination [R, S1], 2 domains of 4) and compares it
// with the explicit form.
func TestFromPlanMatchesUniform(t *testing.T) {
	shape := []int64{64, 32}
	src := layoutOn(t, shape, []int{4}, []int{0, 1, 2, 3}, "S0")
	dst := layoutOn(t, shape, []int{4, 2}, []int{4, 5, 6, 7, 8, 9, 10, 11}, "R,S1")
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
