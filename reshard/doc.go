// Package reshard derives the plan that moves distributed tensors
// from one layout to another.
//
// Planning is pure and coordination-free: every rank calls NewPlan with the
// same two layouts, world size and options and gets the same Plan, in the
// same order, with the same Fingerprint, without communicating.
//
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
//
// A Route is a value that turns plans into a Schedule of messages in
// rounds: Flat (every destination straight from its source owner) and
// AllGatherBroadcast (the legacy baseline) here, the hierarchical route and
// auto in package hier. Messages are cut into chunks and rounds are bounded
// by a staging budget, so chunks pipeline through bounded memory. Package
// reshard/program compiles a schedule into one rank's Program (its rounds'
// local copies and wire operations), pure data that golden tests print.
//
// A tensor may convert in flight: a bf16 or f32 source to an fp8e4m3
// destination (ConvertsTo). Its plan and messages count destination
// (one-byte) elements; the step runtime (package refit) quantizes while it
// packs and gathers the block scales every step.
//
// Nothing here communicates or touches memory: package refit prepares a
// call (validates, plans, schedules, compiles, agrees across ranks) and
// runs it every step over a transport (package transport's contract, which
// mpi, nccl and transport/inproc implement).
package reshard
