package spmd

import (
	"errors"
	"fmt"
	"os"
	"runtime/debug"

	"github.com/m2n-dev/m2n/launcher"
	"github.com/m2n-dev/m2n/mpi"
)

// Printed is an error already printed on this rank: Finish does not print
// it again, nor should the program.
type Printed struct{ Err error }

func (e Printed) Error() string { return e.Err.Error() }
func (e Printed) Unwrap() error { return e.Err }

// End releases the session and finishes MPI (see Finish); it does nothing
// for the nil Job of an Init that failed. Deferred first, it also turns a
// panic of this rank into a message and the end of the job
// (InternalError), so that no rank waits for it and no Go trace reaches
// the user. A job that succeeded here waits for every rank first (see
// closingBarrier); an error another rank prints becomes a Printed.
func (j *Job) End(err *error) {
	if p := recover(); p != nil {
		InternalError(p)
	}
	defer func() { // and of its own steps
		if p := recover(); p != nil {
			InternalError(p)
		}
	}()
	if *err != nil {
		launcher.Failing.Store(true)
	}
	if j == nil {
		return
	}
	if *err != nil && j.quiet(*err) {
		*err = Printed{*err} // another rank prints the cause
	}
	if *err == nil && j.Session != nil {
		*err = j.closingBarrier()
	}
	if j.Session != nil {
		// a session that aborted after the command's last error (or with
		// none) says why here, so that the job does not end unexplained.
		if cerr := j.Session.Close(); cerr != nil && *err == nil {
			*err = cerr
			if j.quiet(cerr) {
				*err = Printed{cerr}
			}
		}
	}
	Finish(err)
}

// Finish ends an MPI job: the error is printed before MPI is finalized, so
// that the message is out before any rank exits (the launcher may kill the
// others as soon as one exits non-zero): once by rank 0 for an error every
// rank agreed on, else by the rank that has it (of an abort, by the first
// rank to abort: see quiet), as "program: message" (launcher.Program,
// describe). An error already printed (Printed) is not printed again; the
// error is a Printed afterwards. Then MPI is finalized, bounded by the
// job's timeout (launcher.Finalize; after a session aborted, it ends the
// job instead: mpi.MarkFailed). End calls it; a program that starts MPI
// itself defers it (and calls SetRank).
func Finish(err *error) {
	var pe Printed
	if *err != nil {
		launcher.Failing.Store(true)
	}
	if *err != nil && !errors.As(*err, &pe) {
		if !agreed(*err) || rank <= 0 {
			launcher.Spoke()
			fmt.Fprintf(os.Stderr, "%s: %s\n", launcher.Program, describe(*err))
		}
		*err = Printed{*err}
	}
	stopAt("finalize")
	launcher.Finalize(timeout, rank, *err != nil)
}

// InternalError prints a panic (p) of this rank once, on one line (the
// trace only with M2N_LOG_LEVEL=debug), and ends the job, so that no rank
// waits for this one and no Go trace reaches the user. End calls it; a
// program defers a recover into it in main, for panics outside a job.
func InternalError(p any) {
	launcher.Spoke()
	fmt.Fprintf(os.Stderr, "%s: rank %d: internal error: %v; ending the job\n", launcher.Program, rank, p)
	if os.Getenv("M2N_LOG_LEVEL") == "debug" {
		os.Stderr.Write(debug.Stack())
	}
	if !mpi.Initialized() || mpi.Finalized() {
		os.Exit(3)
	}
	mpi.Abort(nil, 3)
}
