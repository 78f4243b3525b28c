// Package mpitest runs Go tests as real multi-process MPI jobs, and holds
// the one place where m2n says how to start mpirun.
//
// A test calls Run with a rank count and a body:
//
//	func TestAllgather(t *testing.T) {
//		mpitest.Run(t, 4, func(t mpitest.T, c *mpi.Comm) {
//			got := make([]byte, c.Size())
//			if err := c.Allgather([]byte{byte(c.Rank())}, got); err != nil {
//				t.Fatal(err)
//			}
//		})
//	}
//
// Under plain `go test` (the parent), Run re-executes the test binary under
// mpirun (see Command) with -test.run selecting only this test and an
// environment variable marking the child run, waits for the job, and fails
// the test with the job's output, each line tagged with its rank, if any
// rank failed, the job hung past its timeout, or a rank never ran the body.
// In the child, Run initializes MPI with ThreadMultiple, runs the body on
// every rank with mpi.World, and finalizes MPI.
//
// Failure in the body (t.Error, t.Fatal, a panic) makes that rank's process
// exit non-zero, so mpirun does too. Messages from T carry the rank. A rank
// that failed waits a grace period (5 s, M2N_MPITEST_GRACE) for the others to
// finish their bodies, then aborts the job, so that a peer stuck waiting for
// it cannot hang the test; a panicking rank aborts at once.
//
// Environment:
//
//   - M2N_MPIRUN: the mpirun to use (default: mpirun on PATH).
//   - M2N_MPIRUN_FLAGS: replaces DefaultFlags (split at spaces), which are
//     OpenMPI's; set it empty for MPICH's mpiexec.
//   - M2N_MPITEST_TIMEOUT: per-job timeout, a Go duration or seconds
//     (default 120s; also capped by the test binary's -timeout).
//   - M2N_SKIP_MPI=1: skip, instead of fail, tests that need mpirun when it
//     is not installed.
//
// Body code must be deterministic across ranks about which collective calls
// it makes, as any MPI program; a Run call in a test that mpirun's child
// does not select is skipped over, so a test may call Run several times.
package mpitest
