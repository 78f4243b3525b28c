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
// thread with the communicator's Config.Context made current; Group keeps
// the goroutine locked from the group's start to its end.
//
// Non-blocking communicators (Config.NonBlocking) return from InitRank,
// Split and Group while NCCL still works: errors matching ErrInProgress
// say so, and WaitReady polls until done, aborting on its context's end.
//
// Transport is the transport.Transport of a rank's GPU over two
// communicators (network and local traffic, each on a stream of its own);
// PostGroup posts a prepared GroupOps in one call, for the replay driver
// (package refit/gpu), which runs a whole step on the streams.
//
// Errors are *Error values naming the call, with NCCL's last error message:
// "nccl: ncclCommInitRankConfig: invalid usage ...: <detail>".
package nccl
