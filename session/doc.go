// Package session is what a program links to refit weights every step: it
// joins a group of ranks once, prepares a call once, and runs it every
// step with that step's buffers.
//
//	s, err := session.Join(mpi.World(), session.Options{Device: session.CPU})
//	defer s.Close()
//	call, err := s.Prepare(ctx, specs, hier.Hier{})  // validate, plan, schedule, agree: once
//	for step := range steps {
//		rep, err := call.Run(ctx, buffers)            // move this step's bytes
//	}
//
// Join duplicates the communicator (one for data, one for control),
// discovers each rank's domain (its host; on GPUs its NVLink domain from
// NVML; Options.Domains overrides them) and sets up the device: host
// memory over MPI, or the local rank's GPU over NCCL. Prepare derives the
// call's topology, plans, schedules and compiles this rank's program once
// (package reshard) and makes every rank agree on what it was given and on
// the schedule it built, so a rank with another layout, topology, chunk
// size or route fails every rank at once with an error naming it.
//
// Every wait is bounded by Options.Timeout, collectives included: they are
// non-blocking collectives polled against the deadline. A rank that gives
// up (a timeout, a failed transport) tells every other rank why, so each
// returns a *reshard.AbortError naming that rank and wrapping the typed
// cause (a *reshard.TimeoutError naming the rank that never came, say);
// the session is then unusable (Aborted), and mpi.Finalize ends the job
// rather than wait. Errors the ranks agreed on (*reshard.ValidationError
// wrapping a *reshard.BufferError, *reshard.AgreementError,
// *reshard.ChecksumError) keep their types on every rank and leave the
// session usable.
//
// On GPUs a call's step is replayed on the GPU's streams (package nccl's
// Replay: batched copy kernels, memcpys and one NCCL group per round and
// communicator, ordered by events), the host waiting once at the end; or,
// with Call.Launch, not at all: the step starts after the caller's event
// and hands back the event that ends it, for the consumer's stream to wait
// on, and Call.Wait collects the outcome. Call.SetDriver picks the driver:
// DriverReplay (the default), DriverGraph (the step captured once as a CUDA
// graph) or DriverHost (rounds driven from the host, which Verify needs).
//
// Pipeline stages (Session.Pipeline) are sessions of their own, one communicator per
// stage, whose calls run concurrently.
package session
