// Package placement is the layout algebra of m2n: placements and layouts
// (of package dtype's element types), with each rank's local region
// computed exactly as PyTorch DTensor computes it.
//
// A Layout is a global shape, a dtype, a mesh and one placement per mesh
// axis. Shard(d) splits tensor dim d with torch.chunk semantics (parts of
// ceil(n/k), trailing parts possibly empty); Replicate() copies. When several
// mesh axes shard the same dim they apply in mesh-axis order, each chunking
// what the previous one left, so 5 rows on a 2x2 mesh with [S0, S0] give
// 2, 1, 1, 1 rows at offsets 0, 2, 3, 4.
//
//	m, _ := mesh.Interval([]int{4}, 0)
//	l, _ := placement.NewLayout([]int64{10, 4}, dtype.F32, m, []placement.Placement{placement.Shard(0)})
//	shape, offset := l.LocalShapeOffset([]int{3}) // [1 4] at [9 0]
//
// LocalShapeOffset reproduces DTensor's reporting, including the sentinel
// offset (the dim's global size) of an empty shard; RankBox gives the same
// region, by rank, as a half-open Box. Part and NumParts expose each dim's
// sorted parts, which the planner sweeps. Partial and strided placements
// are rejected with errors wrapping ErrUnsupported.
package placement
