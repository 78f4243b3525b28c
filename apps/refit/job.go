package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime/debug"
	"time"

	"github.com/m2n-dev/m2n/faults"
	"github.com/m2n-dev/m2n/launcher"
	"github.com/m2n-dev/m2n/mpi"
	"github.com/m2n-dev/m2n/refit"
	"github.com/m2n-dev/m2n/session"
	"github.com/rs/zerolog"
)

// job is one rank's part of an SPMD command: MPI, the session over the
// world, the logger and the settings every rank agreed on.
type job struct {
	flags *runFlags
	log   zerolog.Logger
	rank  int
	world int
	s     *session.Session
	set   settings

	failedIn *session.Session // the pipeline stage's session a call failed in (quiet)
}

// startJob starts MPI (bounded by the timeout: a rank whose peers are not
// MPI programs would wait in MPI_Init forever) and joins the world session
// with the settings of the flags. A rank whose flags do not parse still
// takes part, so that every rank fails at once with its message instead of
// waiting for it (session.Refuse). Once MPI is initialised it returns a job
// even with an error: defer its end right away.
func startJob(f *runFlags) (*job, error) {
	set, flagErr := f.settings()
	timeout := set.opts.Timeout
	if timeout == 0 {
		timeout = session.DefaultTimeout
	}
	launcher.OnInterrupt(func() int { return jobRank })
	if err := launcher.Init(timeout, jobRank); err != nil {
		return nil, err
	}
	if took := time.Since(launcher.Started); took > timeout && flagErr == nil {
		// every wait of the job is bounded by the timeout: a job whose
		// start-up alone outlasts it cannot run.
		flagErr = bad(set.Timeout, fmt.Errorf("MPI start-up alone took %v here, longer than the timeout, which bounds every wait of the job: give a longer one", took.Round(time.Millisecond)))
	}
	world := mpi.World()
	j := &job{flags: f, rank: world.Rank(), world: world.Size(), set: set}
	jobRank, jobTimeout = j.rank, timeout
	log, err := newLogger(f.logLevel, j.rank)
	if err != nil && flagErr == nil {
		flagErr = err
	}
	j.log = log
	set.opts.Agree = agreedFields(f.cmd)
	if flagErr == nil {
		if at, ok, ferr := faults.Transport(j.rank); ferr != nil {
			flagErr = usageError{ferr}
		} else if ok {
			set.opts.WrapTransport = at
		}
	}
	j.set = set
	if flagErr != nil {
		opts := set.opts
		opts.Device = session.CPU
		// the variables Join reads itself must not fail this rank's
		// options too (unresolved, they would differ from the others'
		// and hide flagErr behind "ranks disagree: chunk bytes 0").
		for _, v := range sessionVars {
			_ = os.Unsetenv(v)
		}
		err := session.Refuse(world, opts, flagErr)
		var ab *refit.AbortError
		if errors.As(err, &ab) {
			return j, err // not agreed: a peer never came
		}
		return j, refused{err}
	}
	stopHere("join")
	if j.s, err = session.Join(world, set.opts); err != nil {
		var ve *refit.ValidationError
		if errors.As(err, &ve) {
			return j, refused{err} // a rank's input: named with its rank
		}
		return j, err
	}
	return j, nil
}

// sessionVars are the variables session.Join reads and checks itself.
var sessionVars = []string{"M2N_GPU_DRIVER", "M2N_MEMCPY_MIN"}

// refused is the error every rank returns when a rank's input was bad:
// the agreed *reshard.ValidationError carrying that rank's usage error.
type refused struct{ err error }

func (e refused) Error() string { return e.err.Error() }
func (e refused) Unwrap() error { return e.err }

// end releases the session and finishes MPI (see finish); it does nothing
// for a job that never started. Deferred first, it also turns a panic of
// this rank into a message and the end of the job, so that no rank waits
// for it and no Go trace reaches the user.
func (j *job) end(err *error) {
	if p := recover(); p != nil {
		internalError(p)
	}
	defer func() { // and of its own steps
		if p := recover(); p != nil {
			internalError(p)
		}
	}()
	if *err != nil {
		launcher.Failing.Store(true)
	}
	if j == nil {
		return
	}
	if *err != nil && j.quiet(*err) {
		*err = printedError{*err} // another rank prints the cause
	}
	if *err == nil && j.s != nil {
		*err = j.closingBarrier()
	}
	if j.s != nil {
		// a session that aborted after the command's last error (or with
		// none) says why here, so that the job does not end unexplained.
		if cerr := j.s.Close(); cerr != nil && *err == nil {
			*err = cerr
			if j.quiet(cerr) {
				*err = printedError{cerr}
			}
		}
	}
	finish(err)
}

// barrier waits (bounded) for every rank.
func (j *job) barrier() error { return j.s.Barrier(context.Background()) }

// internalError prints a panic of this rank once, on one line (the trace
// only with M2N_LOG_LEVEL=debug), and ends the job, so that no rank waits
// for this one and no Go trace reaches the user.
// endOnPanic, deferred first in a goroutine of refit's own, turns a panic
// there into internalError (job.end recovers the main goroutine's only).
func endOnPanic() {
	if p := recover(); p != nil {
		internalError(p)
	}
}

func internalError(p any) {
	launcher.Spoke()
	fmt.Fprintf(os.Stderr, "refit: rank %d: internal error: %v; ending the job\n", jobRank, p)
	if os.Getenv("M2N_LOG_LEVEL") == "debug" {
		os.Stderr.Write(debug.Stack())
	}
	if !mpi.Initialized() || mpi.Finalized() {
		os.Exit(3)
	}
	mpi.Abort(nil, 3)
}
