// Package reshard derives and runs the plan that moves a distributed tensor
// from one layout to another.
//
// Planning is pure and coordination-free: every rank calls NewPlan with the
// same two layouts, world size and options and gets the same Plan, in the
// same order, with the same Fingerprint, without communicating.
//
//	src, _ := placement.NewLayout(shape, placement.BF16, trainerMesh, []placement.Placement{placement.Shard(0)})
//	dst, _ := placement.NewLayout(shape, placement.BF16, generatorMesh, []placement.Placement{placement.Replicate(), placement.Shard(1)})
//	plan, err := reshard.NewPlan(src, dst, worldSize, reshard.Options{})
//	for _, i := range plan.Recvs(myRank) {
//		t := plan.Transfer(int(i)) // t.Src sends t.Box; t.DstAt says where it lands
//	}
//
// A Transfer names the one source rank that sends a box to a destination
// rank, and describes where the box's bytes sit in both local buffers as a
// Strided descriptor (offset, contiguous run, counts and strides of the
// outer dims), never as a list of runs. Replicated source regions have one
// deterministic owner, or are striped over their replicas with
// Options.StripeReplicas. Intersections come from sweeping each dim's sorted
// split points, so planning costs tens of nanoseconds per transfer at any
// scale, and a plan costs a few dozen bytes per transfer.
package reshard
