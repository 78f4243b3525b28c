package placement_test

import (
	"fmt"

	"github.com/m2n-dev/m2n/dtype"
	"github.com/m2n-dev/m2n/mesh"
	"github.com/m2n-dev/m2n/placement"
)

// Ten rows over four ranks split as torch.chunk does: 3, 3, 3, 1.
func ExampleLayout_LocalShapeOffset() {
	m, _ := mesh.Interval([]int{4}, 0)
	l, _ := placement.NewLayout([]int64{10, 4}, dtype.F32, m, []placement.Placement{placement.Shard(0)})
	for r := 0; r < 4; r++ {
		shape, offset := l.LocalShapeOffset([]int{r})
		fmt.Printf("rank %d: shape %v offset %v\n", r, shape, offset)
	}
	// Output:
	// rank 0: shape [3 4] offset [0 0]
	// rank 1: shape [3 4] offset [3 0]
	// rank 2: shape [3 4] offset [6 0]
	// rank 3: shape [1 4] offset [9 0]
}

// Two mesh axes sharding one dim nest in mesh-axis order, and an empty shard
// reports the dim's global size as its offset, as DTensor does.
func ExampleLayout_LocalShapeOffset_nested() {
	m, _ := mesh.Interval([]int{2, 4}, 0)
	ps, _ := placement.Parse("S0,S0")
	l, _ := placement.NewLayout([]int64{5}, dtype.BF16, m, ps)
	for i := 0; i < m.Size(); i++ {
		coord := m.Coord(i, nil)
		shape, offset := l.LocalShapeOffset(coord)
		fmt.Printf("coord %v: shape %v offset %v\n", coord, shape, offset)
	}
	// Output:
	// coord [0 0]: shape [1] offset [0]
	// coord [0 1]: shape [1] offset [1]
	// coord [0 2]: shape [1] offset [2]
	// coord [0 3]: shape [0] offset [5]
	// coord [1 0]: shape [1] offset [3]
	// coord [1 1]: shape [1] offset [4]
	// coord [1 2]: shape [0] offset [5]
	// coord [1 3]: shape [0] offset [5]
}
