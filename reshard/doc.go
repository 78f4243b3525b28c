// Package reshard derives and runs the plan that moves distributed tensors
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
// by a staging budget, so chunks pipeline through bounded memory. Compile
// turns a schedule into one rank's Program (its rounds' local copies and
// wire operations, with its views applied, small messages between a pair
// coalesced, staging offsets fixed), pure data that golden tests print; an
// Executor drives a Program over a Transport (MPI, NCCL, or the in-process
// transport of package inproc) and a Memory (host memory, or a GPU's).
//
// A tensor may convert in flight: a bf16 or f32 source to an fp8e4m3
// destination (ConvertsTo; Spec.Scale says which elements share a scale).
// Its plan and messages count destination (one-byte) elements, its senders
// quantize while they pack through a QuantMemory (package fp8 on the host,
// package cuda's kernels on a GPU), and Prepared.Run gathers the global
// block scales every step before a byte moves and writes each
// destination's scale tensor (TensorBuffers.Scale).
//
// Prepare is what a program does once per call: it validates every input,
// plans, schedules and compiles, and makes every rank agree on what it was
// given and on the schedule it built; Prepared.Run moves one step's data,
// with a buffer check agreed before a byte moves, optional checksums and
// atomic commit, and a report of which tensors completed. Errors keep
// their types across ranks (EncodeError, DecodeError). Package session
// wires all this over MPI or NCCL, with every wait bounded (see the
// Example of Prepare).
package reshard
