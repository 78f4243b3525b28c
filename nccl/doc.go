// Package nccl is m2n's binding to NCCL, opened with dlopen (libnccl.so.2,
// or the file M2N_NCCL_PATH names), so building needs no NCCL: the
// communicators that carry a reshard's device-to-device traffic, one per
// pipeline stage, bootstrapped over MPI.
//
//	ctx := ... // the rank's *cuda.Context (device primary context)
//	comm, err := nccl.Bootstrap(mpiComm, &nccl.Config{Context: ctx})
//	if errors.Is(err, nccl.ErrNotAvailable) { ... } // no NCCL here
//	defer comm.Destroy()
//	err = nccl.Group(func() error {
//		if err := comm.Send(sendBuf, n, peer, stream); err != nil {
//			return err
//		}
//		return comm.Recv(recvBuf, n, peer, stream)
//	})
//	err = stream.Synchronize()
//
// Counts are bytes (ncclUint8). Streams are CUDA driver streams
// (cuda.Stream; nil is the default stream).
//
// Threads: NCCL keeps a group and its last error per OS thread and picks the
// device from the thread's current context. Every call here runs on a locked
// thread with the communicator's Config.Context made current; GroupStart
// keeps the goroutine locked until GroupEnd.
//
// Non-blocking communicators (Config.NonBlocking) return from InitRank,
// Split and GroupEnd while NCCL still works: errors matching ErrInProgress
// say so, and WaitReady polls until done, aborting on its context's end.
//
// Replay runs a compiled reshard program's whole step on the GPU's streams
// (batched copies, memcpys, one group per communicator and round, ordered by
// events), the host waiting once at the end (RunProgram, a
// reshard.ProgramRunner) or not at all (Launch after the caller's event,
// then Wait); ReplayOptions.Graph captures the step as a CUDA graph.
// Package internal/replay builds its commands and simulates them on the CPU.
//
// Errors are *Error values naming the call, with NCCL's last error message:
// "nccl: ncclCommInitRankConfig: invalid usage ...: <detail>".
package nccl
