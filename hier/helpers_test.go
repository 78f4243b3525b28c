package hier

import (
	"testing"

	"github.com/m2n-dev/m2n/dtype"
	"github.com/m2n-dev/m2n/mesh"
	"github.com/m2n-dev/m2n/placement"
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
