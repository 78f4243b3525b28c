// Package mpi is a thin binding to the MPI C library and the only package
// of m2n that touches MPI's C API. It needs cgo and pkg-config: by default
// it builds against OpenMPI (pkg-config ompi-c, from Debian's
// libopenmpi-dev); with the build tag mpich, against MPICH (pkg-config
// mpich). There is deliberately no stub for CGO_ENABLED=0.
//
// # Use
//
// A program launched by mpirun initializes MPI once, works on World or on
// communicators derived from it, and finalizes:
//
//	provided, err := mpi.Init(mpi.ThreadMultiple)
//	if err != nil { ... }
//	if provided < mpi.ThreadMultiple { ... serialize MPI calls ... }
//	defer mpi.Finalize()
//	w := mpi.World()
//
//	// Even and odd ranks each gather one 8-byte record per member.
//	half, err := w.Split(w.Rank()%2, w.Rank())
//	defer half.Free()
//	all := make([]byte, half.Size()*8)
//	err = half.Allgather(record[:8], all)
//
//	// Point to point: post the receive and the send, then wait for both.
//	right, left := (w.Rank()+1)%w.Size(), (w.Rank()+w.Size()-1)%w.Size()
//	r1, err := w.Irecv(in, left, tag)
//	r2, err := w.Isend(out, right, tag)
//	err = errors.Join(r1.Wait(), r2.Wait())
//
// # Errors
//
// Init sets MPI_ERRORS_RETURN on MPI_COMM_WORLD, and every communicator this
// package creates gets it too, so a failing MPI call returns an error
// naming the call ("mpi: MPI_Isend: ...") with MPI's message, rather
// than aborting the job. Arguments that break a documented contract are
// rejected before MPI is called with an error wrapping ErrInvalid. Rank and
// Size panic on failure, which only happens on a nil or freed communicator
// or outside Init..Finalize.
//
// Returning errors does not make every error recoverable: MPI only
// promises that argument checks leave the library usable. For example,
// after a receive of a small message fails with MPI_ERR_TRUNCATE (a buffer
// shorter than the message), OpenMPI 4.1 sometimes stops delivering later
// messages between those two ranks. Treat errors from communication itself
// as fatal for the job.
//
// # Large buffers
//
// MPI counts are C ints, so no single call can move 2^31 bytes or more. This
// package splits instead of using derived datatypes: every []byte passed to
// Isend, Irecv and Bcast is cut into pieces of at most 1 GiB,
// each moved by its own MPI call. For point-to-point operations the pieces
// are separate messages with the same (peer, tag); MPI delivers messages
// between two ranks on one communicator and tag in order, and a receiver of
// exactly len(buf) bytes splits identically, so the pieces match up. One
// *Request then stands for several MPI requests. Hence a receive must have
// the sender's exact length, and a nonblocking receive of more than one
// piece cannot use AnySource or AnyTag. When Allgather's total exceeds 1
// GiB it runs as one chunked Bcast per rank; the nonblocking collectives
// (Iallgather, Iallgatherv) serve small control messages and refuse more.
//
// # Memory
//
// Blocking calls pass Go memory to C only for the duration of the call, as
// cgo allows. Nonblocking calls (Isend, Irecv) leave MPI holding the buffer
// after they return, so the Request pins it with runtime.Pinner until Wait
// or Test sees it complete, or Cancel withdraws it. Empty buffers are
// passed to MPI as a nil pointer with count 0.
//
// # Threads
//
// MPI's thread level, chosen at Init, says which threads may call MPI; Go
// moves goroutines between OS threads, so each level asks this of callers:
//
//   - ThreadMultiple: any goroutine may call this package at any time. Ask
//     for it when goroutines overlap communication; OpenMPI 4.1 over its
//     shared-memory and TCP transports provides it.
//   - a lower level (QueryThread's String names it: MPI_THREAD_SERIALIZED,
//     _FUNNELED or _SINGLE, which Init may provide though ThreadMultiple
//     was asked for): calls must never overlap, and for the funneled and
//     single levels come only from the OS thread that called Init
//     (runtime.LockOSThread in that goroutine). Package session refuses
//     such a level.
//
// Blocking calls (Wait, Bcast, Allgather) hold their OS thread while they
// block; the Go runtime starts other threads for the remaining goroutines.
// Values of this package (Comm, Request) are not otherwise synchronized: a
// Request must not be used from two goroutines at once, and Free must not
// race with other uses of its Comm.
//
// Only what m2n uses is bound: the session bounds every wait, so beyond
// the set-up collectives (Bcast, Allgather, Split, Dup) the binding offers
// the nonblocking calls, whose requests it polls (Test) against a
// deadline.
//
// # Launching
//
// Programs using this package run under mpirun. Tests use
// internal/testutil/mpitest, which re-executes the test binary under mpirun with the
// flags this project needs (see mpitest.Command).
package mpi
