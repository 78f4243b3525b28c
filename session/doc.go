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
// Pipeline stages (Stages) are sessions of their own, one communicator per
// stage, whose calls run concurrently.
package session
