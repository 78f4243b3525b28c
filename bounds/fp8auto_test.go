package bounds_test

import (
	"strings"
	"testing"

	"github.com/m2n-dev/m2n/bounds"
	"github.com/m2n-dev/m2n/mesh"
	"github.com/m2n-dev/m2n/placement"
	"github.com/m2n-dev/m2n/reshard"
)

// TestFP8AutoSkipsAgbcast: auto leaves agbcast out for a call that
// converts (and says so), choosing the fastest of the others.
func TestFP8AutoSkipsAgbcast(t *testing.T) {
	src, err := placement.ParseLayout("1024x1024", placement.BF16, mustInterval(t, []int{2}, 0), "S0")
	if err != nil {
		t.Fatal(err)
	}
	dst, err := placement.ParseLayout("1024x1024", placement.FP8E4M3, mustInterval(t, []int{16}, 2), "R")
	if err != nil {
		t.Fatal(err)
	}
	conv, err := reshard.NewPlan(src, dst, 18, reshard.Options{})
	if err != nil {
		t.Fatal(err)
	}
	auto := bounds.Auto{Fabric: bounds.Fabric{NetBW: 1e9, LocalBW: 1e12}}
	c := auto.Choose([]*reshard.Plan{conv}, reshard.Topology{}, reshard.DefaultScheduleOptions)
	if c.Route == "agbcast" || !strings.Contains(c.Why, "agbcast left out") {
		t.Errorf("auto picked %s for a converting call: %s", c.Route, c.Why)
	}
	// the filter: leaving out the winner picks the best of the others.
	p := bounds.ProblemOf([]*reshard.Plan{conv}, reshard.Topology{}, float64(reshard.DefaultScheduleOptions.ChunkBytes))
	best := bounds.Choose(p, auto.Fabric)
	other := bounds.ChooseAmong(p, auto.Fabric, func(r string) bool { return r != best.Route })
	for _, b := range other.Bounds {
		if b.Route != best.Route && b.Predicted < predicted(other.Bounds, other.Route) {
			t.Errorf("without %s, auto picked %s although %s predicts less", best.Route, other.Route, b.Route)
		}
	}
	if other.Route == best.Route {
		t.Errorf("the filter left %s in", best.Route)
	}
}

func predicted(bs []bounds.Bound, route string) float64 {
	for _, b := range bs {
		if b.Route == route {
			return b.Predicted
		}
	}
	return -1
}

func mustInterval(t *testing.T, shape []int, start int) mesh.Mesh {
	t.Helper()
	m, err := mesh.Interval(shape, start)
	if err != nil {
		t.Fatal(err)
	}
	return m
}
