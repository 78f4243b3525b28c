package reshard_test

import (
	"fmt"

	"github.com/m2n-dev/m2n/dtype"
	"github.com/m2n-dev/m2n/mesh"
	"github.com/m2n-dev/m2n/placement"
	"github.com/m2n-dev/m2n/reshard"
)

// The paper's Example A: four source ranks hold 8x4 rows in Shard(0); four
// destination ranks form DP2 x TP2 with [Replicate, Shard(0)]. Each
// destination TP slot gathers two adjacent source shards, and both DP
// replicas need them.
func ExampleNewPlan() {
	shape := []int64{8, 4}
	trainer, _ := mesh.Interval([]int{4}, 0)
	generator, _ := mesh.Interval([]int{2, 2}, 4)
	src, _ := placement.NewLayout(shape, dtype.F32, trainer, []placement.Placement{placement.Shard(0)})
	dst, _ := placement.NewLayout(shape, dtype.F32, generator, []placement.Placement{placement.Replicate(), placement.Shard(0)})
	plan, err := reshard.NewPlan(src, dst, 8, reshard.Options{})
	if err != nil {
		panic(err)
	}
	for i := range plan.Len() {
		t := plan.Transfer(i)
		fmt.Printf("rank %d -> rank %d: rows %d:%d (%d bytes) lands at byte %d\n",
			t.Src, t.Dst, t.Box.Lo[0], t.Box.Hi[0], t.DstAt.Bytes(), t.DstAt.Offset)
	}
	// Output:
	// rank 0 -> rank 4: rows 0:2 (32 bytes) lands at byte 0
	// rank 1 -> rank 4: rows 2:4 (32 bytes) lands at byte 32
	// rank 2 -> rank 5: rows 4:6 (32 bytes) lands at byte 0
	// rank 3 -> rank 5: rows 6:8 (32 bytes) lands at byte 32
	// rank 0 -> rank 6: rows 0:2 (32 bytes) lands at byte 0
	// rank 1 -> rank 6: rows 2:4 (32 bytes) lands at byte 32
	// rank 2 -> rank 7: rows 4:6 (32 bytes) lands at byte 0
	// rank 3 -> rank 7: rows 6:8 (32 bytes) lands at byte 32
}

// A transfer of a strided box: row shards to column shards. Source rank 0 sends its left
// 4x4 block, four runs of 8 bytes 16 bytes apart in its buffer, which land
// as one 32-byte run at the start of destination rank 2's buffer.
func ExamplePlan_Transfer() {
	shape := []int64{8, 8}
	a, _ := mesh.Interval([]int{2}, 0)
	b, _ := mesh.Interval([]int{2}, 2)
	src, _ := placement.NewLayout(shape, dtype.BF16, a, []placement.Placement{placement.Shard(0)})
	dst, _ := placement.NewLayout(shape, dtype.BF16, b, []placement.Placement{placement.Shard(1)})
	plan, _ := reshard.NewPlan(src, dst, 4, reshard.Options{})
	t := plan.Transfer(0)
	fmt.Println(t.Box, "source", t.SrcAt, "destination", t.DstAt)
	// Output:
	// [0:4, 0:4) source @0 run 8 x [4/16] destination @0 run 32
}
