package spmd

import (
	"context"
	"errors"
	"time"

	"github.com/m2n-dev/m2n/control"
	"github.com/m2n-dev/m2n/launcher"
	"github.com/m2n-dev/m2n/session"
	"github.com/rs/zerolog"
)

// A failure is printed once per job, by the rank that knows its cause:
//
//   - an error every rank agreed on (bad input anywhere, a failed check)
//     by rank 0 (agreed, Finish);
//   - an abort by the rank whose own failure ended the session (a timeout
//     naming the ranks it waited for, a failed transport): the ranks that
//     stopped because of its notice stay quiet, and of the ranks that gave
//     up together (all waiting in one collective for one stopped rank) the
//     lowest speaks (session.FirstToAbort);
//   - a failure before MPI is up (MPI_Init that never returns), or once
//     MPI_Finalize hangs, or when the launcher interrupts the job, by the
//     first rank of a host whose turn comes (launcher.Turn, launcher.SayOnce): ranks
//     cannot talk over MPI then.

// abortGrace is how long a rank that gave up on its own waits for the
// abort notices of lower ranks that gave up too before it prints: well
// within mpi.FailGrace, the time every failed rank waits before it ends
// the job, so that the rank that speaks is still alive to do so.
const abortGrace = 400 * time.Millisecond

// quiet reports whether this rank leaves err unsaid because another rank
// of the session it failed in prints the cause (othersSpeak); such a rank
// waits quietWait first.
func (j *Job) quiet(err error) bool {
	if err != nil {
		launcher.Failing.Store(true)
	}
	if j == nil {
		return false
	}
	if othersSpeak(err, rank, aborts(j.failedIn), aborts(j.Session), j.Log) {
		// the rank that speaks ends the job (mpi.FailGrace after its
		// message); ending it first from here could cut its message off
		// in the launcher's output.
		time.Sleep(quietWait)
		return true
	}
	return false
}

// abortOrder is what quiet asks of a session: which rank aborted first
// (session.FirstToAbort) and this rank's.
type abortOrder interface {
	FirstToAbort(grace time.Duration) int
	Rank() int
}

// aborts is s as an abortOrder: nil for no session.
func aborts(s *session.Session) abortOrder {
	if s == nil {
		return nil
	}
	return s
}

// othersSpeak reports whether another rank prints the cause of err, this
// (world) rank's error: err is an abort, and the first rank to abort
// (FirstToAbort) of the session it failed in (stage, the pipeline
// stage's, else the job's session, world) is another.
func othersSpeak(err error, rank int, stage, world abortOrder, log zerolog.Logger) bool {
	var ab *control.AbortError
	if !errors.As(err, &ab) {
		return false
	}
	s := stage
	if s == nil {
		s = world
	}
	if s == nil {
		// no session to ask (a refusal that timed out): world ranks.
		return ab.Rank >= 0 && ab.Rank != rank
	}
	speaks := func(s abortOrder) bool {
		first := s.FirstToAbort(abortGrace)
		if first >= 0 && first != s.Rank() {
			log.Debug().Err(err).Int("first", first).Msg("stopping: another rank reports the cause")
			return false
		}
		return true
	}
	// a stage's first rank to abort speaks unless the job's session, which
	// every failed stage aborts too, names another: of stages that failed
	// together (each waiting on one stopped generator rank), one speaks.
	return !speaks(s) || (s != world && world != nil && !speaks(world))
}

// quietWait is how long a quiet rank waits before it ends the job itself,
// should the rank that speaks not do so.
const quietWait = 2 * time.Second

// NoteFailure records the pipeline stage's session whose call failed with
// err, for quiet: a stage's abort is that session's, not the world's. A
// program passes it where a library runs stages (perf.RunStages).
func (j *Job) NoteFailure(s *session.Session, err error) {
	if err != nil && j.failedIn == nil {
		if aborted, _ := s.Aborted(); aborted {
			j.failedIn = s
		}
	}
}

// closingBarrier waits (bounded) for every rank at the end of a job that
// succeeded here, so that a rank stopped after the report is named by the
// others (MPI_Finalize would wait for it without a word). A rank that
// failed skips it: its error ends the job.
func (j *Job) closingBarrier() error {
	stopAt("end")
	err := j.Session.Barrier(control.WithPhase(context.Background(), "closing barrier (the end of the job)"))
	if err != nil && j.quiet(err) {
		return Printed{err}
	}
	return err
}
