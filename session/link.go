package session

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/m2n-dev/m2n/control"
	"github.com/m2n-dev/m2n/mpi"
	"github.com/m2n-dev/m2n/refit"
)

// Two jobs, one session. A trainer job Listens: its rank 0 opens an MPI
// port and publishes it, with a random job token, in a port file on a
// path the generator's job can read (a shared filesystem). A generator
// job Connects through that file. The two jobs' communicators become one
// (MPI_Comm_accept / MPI_Comm_connect, then MPI_Intercomm_merge), the
// trainer's ranks first, and the session is Joined over it: the meshes of
// its calls are given in those joined ranks.
//
// Every wait is bounded. MPI cannot bound or cancel MPI_Comm_accept and
// MPI_Comm_connect (OpenMPI 4.1 leaves both blocked for good, MPI_Close_port
// included), so a rank whose accept or connect outlives the timeout
// returns an error and marks MPI as failed (mpi.MarkFailed): its job can
// do no more MPI and ends at mpi.Finalize.

// hello is the first message over the joined communicator: the
// connector's rank 0 presents the job token to the listener's rank 0.
const (
	helloBytes = 256
	tagHello   = 0x6d326e // any tag: the merged communicator is new
)

// derivedCalls is how many calls' plans, schedules and programs a
// Listener keeps for the generators that join later (refit.Derived).
const derivedCalls = 16

// Listener is a trainer job's open port: Accept joins one generator job
// at a time into a session.
type Listener struct {
	comm   *mpi.Comm
	path   string
	opts   Options
	port   string // rank 0's
	token  string // rank 0's
	broken error  // an accept that never returned: MPI is unusable
	closed bool

	// derived keeps what the calls of the sessions Accept made derived,
	// so that a generator joining with a layout seen before re-uses it.
	derived *refit.Derived
}

// Listen opens a port for generator jobs to join this job's ranks
// (comm, every rank calls it) and publishes it at path, a file that
// rank 0 creates readable by its owner only, carrying the port's name and
// a random job token: anyone who can read it can join, so put it where
// only the user's jobs look (a shared filesystem of that user). opts are
// the options of the sessions Accept makes; the generator's must equal
// them. Close removes the file and the port.
func Listen(comm *mpi.Comm, path string, opts Options) (*Listener, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		err = fmt.Errorf("rank %d: %w", comm.Rank(), err)
		opts.Timeout = max(opts.Timeout, DefaultTimeout)
	}
	l := &Listener{comm: comm, path: path, opts: opts, derived: refit.NewDerived(derivedCalls)}
	if err == nil && comm.Rank() == 0 {
		err = l.open()
	}
	if err := agreeOn(comm, opts.Timeout, "listening (opening the port)", err); err != nil {
		l.removeFile()
		return nil, err
	}
	return l, nil
}

func (l *Listener) open() error {
	if l.path == "" {
		return errors.New("listen: no port file path")
	}
	var err error
	if l.token, err = newToken(); err != nil {
		return err
	}
	if l.port, err = mpi.OpenPort(); err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	return nil
}

// Path returns the port file's path.
func (l *Listener) Path() string { return l.path }

// Accept waits, at most the timeout (Options.Timeout), for a generator
// job to Connect, and returns the session over both jobs' ranks, this
// job's first. A job that presents a wrong or missing token is refused
// (both sides learn why, rank 0 logs it, nothing moves) and Accept goes
// back to waiting. A generator that disagrees on the options fails Join
// on both sides with the field that differs; the listener stays usable.
// If no generator comes in time, Accept returns an error and the
// listener is broken (see the package's note on bounds).
func (l *Listener) Accept() (*Session, error) { return l.AcceptWithin(l.opts.Timeout) }

// AcceptWithin is Accept waiting at most wait for a generator, where the
// session's timeout (which bounds every wait once joined) is shorter
// than the time a generator job may take to start.
func (l *Listener) AcceptWithin(wait time.Duration) (*Session, error) {
	deadline := time.Now().Add(wait)
	for {
		if l.broken != nil {
			return nil, l.broken
		}
		if l.closed {
			return nil, errors.New("accept: the listener is closed")
		}
		s, retry, err := l.acceptOnce(deadline)
		if !retry {
			return s, err
		}
		if l.comm.Rank() == 0 {
			fmt.Fprintf(stderr, "m2n: listener of %s: refused a job: %v; accepting again\n", l.path, err)
		}
	}
}

// acceptOnce accepts one connection; retry says it was refused and the
// listener may accept again.
func (l *Listener) acceptOnce(deadline time.Time) (*Session, bool, error) {
	var werr error
	if l.comm.Rank() == 0 {
		werr = l.publish(stateAccepting)
	}
	if err := agreeOn(l.comm, l.opts.Timeout, "listening (writing the port file)", werr); err != nil {
		return nil, false, err
	}
	inter, ok, err := within(time.Until(deadline), func() (*mpi.Comm, error) { return l.comm.Accept(l.port, 0) })
	if !ok {
		return nil, false, l.breakDown(fmt.Errorf("rank %d: no generator joined within the wait (port file %s): the listener can accept no more; ending the job at its end", l.comm.Rank(), l.path))
	}
	if err != nil {
		return nil, false, l.breakDown(fmt.Errorf("rank %d: accepting on port file %s: %w", l.comm.Rank(), l.path, err))
	}
	lk, err := joinLink(inter, false, l.opts.Timeout)
	if err != nil {
		return nil, false, l.breakDown(err)
	}
	lk.listener = l
	if err := l.handshake(lk); err != nil {
		var ab *control.AbortError
		if errors.As(err, &ab) {
			return nil, false, l.breakDown(err)
		}
		return nil, true, errors.Join(err, lk.close(l.opts.Timeout))
	}
	lk.phases.mark("token")
	if l.comm.Rank() == 0 {
		if err := l.publish(stateBusy); err != nil {
			fmt.Fprintf(stderr, "m2n: listener: %v\n", err)
		}
	}
	s, err := join(lk.merged, l.opts, nil, lk)
	if err != nil {
		return nil, false, errors.Join(err, lk.close(l.opts.Timeout))
	}
	s.joinedOver(lk)
	s.derived = l.derived
	return s, false, nil
}

// handshake receives the connector's token on rank 0 and makes both
// jobs agree on the verdict.
func (l *Listener) handshake(lk *link) error {
	var verdict error
	if l.comm.Rank() == 0 {
		buf := make([]byte, helloBytes)
		verdict = recvBounded(lk.merged, buf, l.comm.Size(), l.opts.Timeout)
		if verdict == nil {
			got := string(trimNul(buf))
			if subtle.ConstantTimeCompare([]byte(got), []byte(l.token)) != 1 {
				verdict = fmt.Errorf("wrong job token (%d bytes presented): the connecting job did not read this trainer's port file %s", len(got), l.path)
			}
		} else {
			verdict = fmt.Errorf("no job token: %w", verdict)
		}
	}
	return agreeOn(lk.merged, l.opts.Timeout, "joining (the job token)", verdict)
}

func (l *Listener) publish(state string) error {
	host, _ := os.Hostname()
	return portFile{Port: l.port, Token: l.token, Host: host, PID: os.Getpid(), Ranks: l.comm.Size(), State: state}.write(l.path)
}

func (l *Listener) breakDown(err error) error {
	l.broken = err
	mpi.MarkFailed(err)
	l.removeFile()
	return err
}

func (l *Listener) removeFile() {
	if l.comm.Rank() == 0 && l.port != "" {
		_ = os.Remove(l.path)
	}
}

// Close removes the port file and closes the port. Sessions that Accept
// made stay the caller's to close.
func (l *Listener) Close() error {
	if l == nil || l.closed {
		return nil
	}
	l.closed = true
	l.removeFile()
	if l.comm.Rank() == 0 && l.port != "" && l.broken == nil {
		return mpi.ClosePort(l.port)
	}
	return nil
}

// Connect joins this job's ranks (comm, every rank calls it) to the
// session of the trainer job listening on the port file at path, and
// returns the session over both jobs' ranks, the trainer's first. A
// missing, stale or busy port file, or one that others may read, fails
// at once naming the file; a trainer that does not accept within the
// timeout fails (and MPI is unusable: see the package's note on bounds).
func Connect(comm *mpi.Comm, path string, opts Options) (*Session, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		err = fmt.Errorf("rank %d: %w", comm.Rank(), err)
		opts.Timeout = max(opts.Timeout, DefaultTimeout)
	}
	var pf portFile
	if err == nil && comm.Rank() == 0 {
		pf, err = readPortFile(path)
	}
	if err := agreeOn(comm, opts.Timeout, "connecting (reading the port file)", err); err != nil {
		return nil, err
	}
	inter, ok, err := within(opts.Timeout, func() (*mpi.Comm, error) { return comm.Connect(pf.Port, 0) })
	if !ok {
		err = fmt.Errorf("rank %d: the trainer of port file %s (pid %d on %s) did not accept within %v: it is gone, stuck, or serving another generator", comm.Rank(), path, pf.PID, pf.Host, opts.Timeout)
		mpi.MarkFailed(err)
		return nil, err
	}
	if err != nil {
		return nil, fmt.Errorf("rank %d: connecting through port file %s: %w", comm.Rank(), path, err)
	}
	lk, err := joinLink(inter, true, opts.Timeout)
	if err != nil {
		mpi.MarkFailed(err)
		return nil, err
	}
	if comm.Rank() == 0 {
		hello := make([]byte, helloBytes)
		copy(hello, pf.Token)
		err = sendBounded(lk.merged, hello, 0, opts.Timeout)
	}
	if err := agreeOn(lk.merged, opts.Timeout, "joining (the job token)", err); err != nil {
		var ve *control.ValidationError
		if errors.As(err, &ve) { // one message that names this job's file
			err = &control.ValidationError{Rank: ve.Rank, Msg: fmt.Sprintf("port file %s: the trainer refused this job: %s", path, ve.Msg), Err: ve.Err}
		}
		return nil, errors.Join(err, lk.close(opts.Timeout))
	}
	lk.phases.mark("token")
	s, err := join(lk.merged, opts, nil, lk)
	if err != nil {
		return nil, errors.Join(err, lk.close(opts.Timeout))
	}
	s.joinedOver(lk)
	return s, nil
}

// agreeOn makes every rank of comm learn, in one bounded collective,
// whether any rank failed (localErr).
func agreeOn(comm *mpi.Comm, timeout time.Duration, phase string, localErr error) error {
	c, err := newControl(comm, timeout)
	if err != nil {
		return err
	}
	err = control.Agree(control.WithPhase(context.Background(), phase), c, nil, localErr)
	if cerr := c.closeIfHealthy(); err == nil {
		err = cerr
	}
	return err
}

func trimNul(b []byte) []byte {
	for i, c := range b {
		if c == 0 {
			return b[:i]
		}
	}
	return b
}
