// Package spmd is one rank's part of an SPMD job over a session: start,
// refuse, end, and the once-per-job failure message. Package launcher
// holds what a process can do where MPI cannot help; spmd is the rest of
// a job's life, once MPI is up:
//
//	j, err := spmd.Init(timeout) // MPI, bounded; j is nil if it failed
//	defer j.End(&err)            // deferred first: a panic ends the job too
//	if err != nil {
//		return err
//	}
//	if err := j.Join(opts, badInput); err != nil { // badInput refuses the job on every rank
//		return err
//	}
//	... // j.Session, j.Ready(err) for input that fails after Join
//
// A program sets launcher.Program, and where it has its own, OptionSources,
// IsAgreed and StopAt, before its first job.
package spmd

import (
	"context"
	"errors"
	"os"
	"time"

	"github.com/m2n-dev/m2n/control"
	"github.com/m2n-dev/m2n/launcher"
	"github.com/m2n-dev/m2n/mpi"
	"github.com/m2n-dev/m2n/session"
	"github.com/rs/zerolog"
)

// Job is one rank's part of an SPMD job: its rank in the world, the
// world's size, the session over the world once joined and the logger of
// the rank.
type Job struct {
	Rank    int
	World   int
	Session *session.Session // nil until Join succeeds
	Log     zerolog.Logger   // set by the program once it has one
	// Timeout bounds every wait of the job (Init's, or
	// session.DefaultTimeout).
	Timeout time.Duration
	// StartUp is how long this process took to start MPI (since
	// launcher.Started): a job whose start-up alone outlasts its timeout
	// cannot run, and a program refuses it (Join) naming its timeout.
	StartUp time.Duration

	comm     *mpi.Comm
	failedIn *session.Session // the pipeline stage's session a call failed in (quiet)
}

// rank is this process's rank in its job: from the launcher's environment
// at start-up, then from MPI; -1 outside a launcher. timeout is the job's
// bound on every wait, once Init has read it.
var (
	rank    = launcher.Rank()
	timeout = session.DefaultTimeout
)

// Rank returns this process's rank in its job: the launcher's before MPI
// starts (-1 outside a launcher), then MPI's.
func Rank() int { return rank }

// SetRank records this process's rank for a program that starts MPI
// itself instead of through Init (its messages and Finish name it).
func SetRank(r int) { rank = r }

// StopAt, when set, is called at the named points of a job's life:
// "join" before Join joins, "end" before End's closing barrier,
// "finalize" before Finish finalizes MPI. It is a program's test-only
// fault point (faults.StopHere).
var StopAt func(where string)

func stopAt(where string) {
	if StopAt != nil {
		StopAt(where)
	}
}

// Init starts this rank's part of a job: an interruption of the job says
// so once (launcher.OnInterrupt), and MPI starts bounded by timeout (0:
// session.DefaultTimeout; see launcher.Init), since a rank whose peers are
// not MPI programs would wait in MPI_Init forever. Once it returns a Job,
// defer its End right away; End of the nil Job of a failed Init ends
// nothing.
func Init(t time.Duration) (*Job, error) {
	if t == 0 {
		t = session.DefaultTimeout
	}
	launcher.OnInterrupt(func() int { return rank })
	if err := launcher.Init(t, rank); err != nil {
		return nil, err
	}
	took := time.Since(launcher.Started)
	world := mpi.World()
	j := &Job{Rank: world.Rank(), World: world.Size(), Timeout: t, StartUp: took, comm: world}
	rank, timeout = j.Rank, t
	return j, nil
}

// Join joins the world session with opts. A rank whose input is bad
// (refuse, not nil: its flags do not parse, say) still takes part, so
// that every rank fails at once with its message instead of waiting for
// it (session.Refuse): every rank then returns a Refused carrying the
// agreed *control.ValidationError, or an abort where a peer never came.
// A rank's input that Join itself finds invalid is Refused too.
func (j *Job) Join(opts session.Options, refuse error) error {
	if refuse != nil {
		opts.Device = session.CPU
		// the variables Join reads itself must not fail this rank's
		// options too (unresolved, they would differ from the others'
		// and hide refuse behind "ranks disagree: chunk bytes 0").
		for _, v := range sessionVars {
			_ = os.Unsetenv(v)
		}
		err := session.Refuse(j.comm, opts, refuse)
		var ab *control.AbortError
		if errors.As(err, &ab) {
			return err // not agreed: a peer never came
		}
		return Refused{err}
	}
	stopAt("join")
	var err error
	if j.Session, err = session.Join(j.comm, opts); err != nil {
		var ve *control.ValidationError
		if errors.As(err, &ve) {
			return Refused{err} // a rank's input: named with its rank
		}
		return err
	}
	return nil
}

// sessionVars are the variables session.Join reads and checks itself.
var sessionVars = []string{"M2N_GPU_DRIVER", "M2N_MEMCPY_MIN", "M2N_FUSE_STREAMS"}

// Ready makes every rank learn whether any rank's input failed after the
// ranks joined (layouts that need more ranks, say): a rank with an error
// (localErr) makes every rank return a Refused carrying it.
func (j *Job) Ready(localErr error) error {
	if err := j.Session.Agree(context.Background(), nil, localErr); err != nil {
		return Refused{err}
	}
	return nil
}

// Refused is the error every rank returns when a rank's input was bad:
// the agreed *control.ValidationError carrying that rank's error. Rank 0
// prints it, as that rank's (describe).
type Refused struct{ Err error }

func (e Refused) Error() string { return e.Err.Error() }
func (e Refused) Unwrap() error { return e.Err }
