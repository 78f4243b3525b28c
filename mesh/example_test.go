package mesh_test

import (
	"fmt"

	"github.com/m2n-dev/m2n/mesh"
)

// A DP2 x TP2 generator on world ranks 4-7, row-major: the TP coordinate
// varies fastest.
func ExampleInterval() {
	m, _ := mesh.Interval([]int{2, 2}, 4)
	for i := 0; i < m.Size(); i++ {
		fmt.Println("rank", m.RankAt(i), "at", m.Coord(i, nil))
	}
	fmt.Println(m)
	// Output:
	// rank 4 at [0 0]
	// rank 5 at [0 1]
	// rank 6 at [1 0]
	// rank 7 at [1 1]
	// 2x2[4-7]
}
