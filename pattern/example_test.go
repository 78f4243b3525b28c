package pattern_test

import (
	"fmt"

	"github.com/m2n-dev/m2n/dtype"
	"github.com/m2n-dev/m2n/mesh"
	"github.com/m2n-dev/m2n/pattern"
	"github.com/m2n-dev/m2n/placement"
)

// Rank 1's shard of a 4x4 bf16 tensor (columns 2-3), filled as a source
// fills it and checked as a destination that received it checks it: a
// flipped bit is named with its element's global index.
func ExampleCheck() {
	ranks, _ := mesh.Interval([]int{2}, 0)
	l, _ := placement.ParseLayout("4x4", dtype.BF16, ranks, "S1")
	part := make([]byte, l.LocalBytes(1))
	if err := pattern.Fill(l, 1, 7, part, placement.View{}); err != nil { // tensor 7's pattern
		panic(err)
	}
	fmt.Println(pattern.Check(l, 1, 7, part, placement.View{}))
	part[5] ^= 1 // byte 1 of the part's element [1, 0]: the tensor's [1, 2]
	fmt.Println(pattern.Check(l, 1, 7, part, placement.View{}))
	// Output:
	// <nil>
	// rank 1: element [1 2] holds 0x01bf, expected 0x01be (1 wrong elements on this rank)
}
