package hier

import (
	"testing"

	"github.com/m2n-dev/m2n/dtype"
	"github.com/m2n-dev/m2n/mesh"
	"github.com/m2n-dev/m2n/placement"
	"github.com/m2n-dev/m2n/reshard"
)

func layoutOf(t *testing.T, shape []int64, ms []int, ranks []int, pl string) placement.Layout {
	t.Helper()
	m, err := mesh.New(ms, ranks)
	if err != nil {
		t.Fatal(err)
	}
	ps, _ := placement.Parse(pl)
	l, err := placement.NewLayout(shape, dtype.BF16, m, ps)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// samePlans returns n plans of the same reshard, src to dst over world
// ranks: a call of n tensors of one layout.
func samePlans(t *testing.T, src, dst placement.Layout, world, n int) []*reshard.Plan {
	t.Helper()
	plans := make([]*reshard.Plan, n)
	for i := range plans {
		p, err := reshard.NewPlan(src, dst, world, reshard.Options{})
		if err != nil {
			t.Fatal(err)
		}
		plans[i] = p
	}
	return plans
}
