package lora

import (
	"github.com/m2n-dev/m2n/dtype"
	"github.com/m2n-dev/m2n/mesh"
	"github.com/m2n-dev/m2n/placement"
)

type layoutT = placement.Layout

// layout2 is a rows x cols bf16 matrix whole on one rank.
func layout2(rows, cols int64) placement.Layout {
	m, _ := mesh.Interval([]int{1}, 0)
	l, err := placement.NewLayout([]int64{rows, cols}, dtype.BF16, m, []placement.Placement{placement.Replicate()})
	if err != nil {
		panic(err)
	}
	return l
}
