package session

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/m2n-dev/m2n/control"
	"github.com/m2n-dev/m2n/mpi"
	"github.com/m2n-dev/m2n/refit"
	"github.com/m2n-dev/m2n/transport"
	"github.com/m2n-dev/m2n/transport/netem"
)

// Session is one rank's membership in a group of ranks that refit
// together: made once with Join, it holds the duplicated communicators,
// the device, the discovered domains and the transport; Prepare makes the
// calls that run every step; Close frees it all. A Session's methods are
// called from one goroutine; a rank in several pipeline stages has one
// Session per stage (Stages), which may run concurrently.
type Session struct {
	opts     Options
	rank     int
	size     int
	comm     *mpi.Comm   // data: the transport's
	ctl      *mpiControl // control: collectives, abort notices, roll calls (on comm, or a communicator of its own)
	hosts    []int       // each rank's discovered domain
	machines []int       // each rank's host (the shared-memory split), for host memory
	dev      device
	base     transport.Transport
	rt       *refit.Runtime // the step runtime of the session's calls
	closed   bool
	// pipelines counts the pipelines made over the session: each stage's
	// control plane takes its id from it (stageID).
	pipelines int
	owned     bool       // the device is this session's to close (not a stage's parent's)
	nic       *netem.NIC // the emulated network interface, shared with this rank's stage sessions
	// of a pipeline stage's session (Stages): the session it was split
	// from, which a stage's abort aborts too, and the stage's place in it.
	parent  *Session
	stage   int
	members []int // the parent's ranks of the stage's, by stage rank
	// replayEnv is the GPU replay's variables, read at Join.
	replayEnv replayEnv
	// link, of a session two jobs formed (Listener.Accept, Connect): the
	// connection, disconnected at Close.
	link *link
	// owns are the communicators the session made, freed at Close.
	owns []*mpi.Comm
	// derived, of a session a Listener accepted (and its stages): what
	// the calls of the listener's sessions derived, for the next
	// generator's calls with the same inputs (refit.Derived).
	derived *refit.Derived
	// shares, of a pipeline stage that holds every rank of its parent in
	// the parent's order: its communicator, control plane, runtime,
	// device and transport are the parent's (sharedStage).
	shares bool
}

// Join makes this rank a member of a session over comm. Every rank of comm
// must call it with equal options. It checks the options, waits (bounded)
// for every rank to arrive, duplicates comm twice (data and control),
// discovers each rank's domain (its host, from MPI's shared-memory split;
// on GPUs its NVLink domain from NVML), and sets up the device (on GPUs the
// local GPU and an NCCL communicator bootstrapped over MPI). MPI must be
// initialized with mpi.ThreadMultiple.
//
// A rank that never arrives makes the others fail with a
// *reshard.TimeoutError naming it; Join then returns the closed session as
// well as the error, so that FirstToAbort can say which rank gave up
// first (on every other error the session is nil). Set-up calls that MPI offers only as
// blocking calls (splits, NCCL's initialisation) run after every rank has
// arrived, under a watchdog that ends the job if one of them hangs.
func Join(comm *mpi.Comm, opts Options) (*Session, error) {
	return join(comm, opts, nil, nil)
}

// Refuse takes part in the Join of the other ranks of comm for a rank that
// cannot join (its own input is bad: err), so that every rank fails at
// once with err, typed, in a *reshard.ValidationError, instead of waiting
// for this rank until the timeout. It returns that error.
func Refuse(comm *mpi.Comm, opts Options, err error) error {
	if err == nil {
		err = errors.New("refused to join")
	}
	_, jerr := join(comm, opts, err, nil)
	return jerr
}

// join is Join; lk is the link of two jobs whose merged communicator comm
// is, or nil.
func join(comm *mpi.Comm, opts Options, refusal error, lk *link) (*Session, error) {
	if lvl, err := mpi.QueryThread(); err != nil || lvl < mpi.ThreadMultiple {
		return nil, fmt.Errorf("rank %d: session needs MPI initialized with mpi.ThreadMultiple (got %v, %v)", comm.Rank(), lvl, err)
	}
	opts, localErr := opts.withDefaults()
	if localErr != nil {
		localErr = fmt.Errorf("rank %d: %w", comm.Rank(), localErr)
		opts.Timeout = max(opts.Timeout, DefaultTimeout)
	}
	env, err := readReplayEnv()
	if err != nil && localErr == nil {
		localErr = fmt.Errorf("rank %d: %w", comm.Rank(), err)
	}
	if refusal != nil {
		localErr = refusal
	}
	s := &Session{opts: opts, rank: comm.Rank(), size: comm.Size(), owned: true, replayEnv: env}
	var ph *phases
	if lk != nil {
		ph = lk.phases
	}
	if localErr == nil && opts.EmulateNetBW > 0 {
		var err error
		if s.nic, err = netem.NewNIC(opts.EmulateNetBW); err != nil {
			localErr = fmt.Errorf("rank %d: %w", comm.Rank(), err)
		}
	}
	if err := s.join(comm, localErr, ph); err != nil {
		s.Close()
		if aborted, _ := s.Aborted(); aborted {
			return s, err // closed: for FirstToAbort
		}
		return nil, err
	}
	dev, err := newDevice(s)
	if err != nil {
		s.Close()
		return nil, err
	}
	s.dev = dev
	if err := s.start(); err != nil {
		s.Close()
		return nil, err
	}
	ph.mark("device")
	return s, nil
}

// join waits for every rank (bounded) while agreeing on the options and
// on every rank's readiness (localErr), then duplicates comm and discovers
// domains under the watchdog. A session over a link (ph set) has comm to
// itself, the merged communicator of the two jobs: it makes none
// (communicators that span two jobs cost OpenMPI 4.1 about 100 ms each),
// its data and control share comm (see tagAbort), and it finds hosts by
// name.
func (s *Session) join(comm *mpi.Comm, localErr error, ph *phases) error {
	// A bounded agreement on comm itself first: after it, every rank is
	// here with the same options, and the blocking calls below return
	// promptly.
	arrive, err := newControl(comm, s.opts.Timeout)
	if err != nil {
		return err
	}
	err = control.Agree(control.WithPhase(context.Background(), "session set-up (Join)"), arrive, s.opts.fields(), localErr)
	var id uint64
	if err == nil {
		id, err = sessionID(arrive)
		arrive.setID(id)
	}
	if err == nil && ph != nil {
		ph.mark("options agreed")
		s.comm, s.ctl = comm, arrive
		s.rt = refit.New(group{s.ctl, s})
		s.hosts, err = hostsByName(s.ctl)
		s.machines = s.hosts
		ph.mark("domains")
		return err
	}
	if cerr := arrive.closeIfHealthy(); err == nil {
		err = cerr
	}
	if err != nil {
		var ab *control.AbortError
		if errors.As(err, &ab) {
			mpi.MarkFailed(err)
			s.ctl = arrive // aborted: Close keeps its requests; FirstToAbort reads its notices
		}
		return err
	}
	return s.guard("session set-up (duplicating the communicator, discovering domains)", func() error {
		if s.comm, err = comm.Dup(); err != nil {
			return err
		}
		s.owns = append(s.owns, s.comm)
		ctlComm, err := comm.Dup()
		if err != nil {
			return err
		}
		s.owns = append(s.owns, ctlComm)
		if s.ctl, err = newControl(ctlComm, s.opts.Timeout); err != nil {
			return err
		}
		s.ctl.setID(id)
		s.rt = refit.New(group{s.ctl, s})
		s.hosts, err = hostIDs(s.comm)
		s.machines = s.hosts
		return err
	})
}

// start makes the base transport and agrees on the session's options.
func (s *Session) start() error {
	if err := s.guard("device set-up", func() error {
		var err error
		s.base, err = s.dev.transport(s.comm)
		return err
	}); err != nil {
		return err
	}
	if key := s.dev.domainKey(); key != "" {
		ids, err := s.domainIDs(key)
		if err != nil {
			return err
		}
		s.hosts = ids
	}
	return nil
}

// guard runs a blocking set-up step under the watchdog: if it has not
// returned within the timeout, a peer is gone or stuck inside a call that
// MPI cannot bound, and the job is ended (MPI_Abort) with the reason. The
// ranks stuck in the call give up in turns (guardTurn), so that the job
// usually ends with one rank's message rather than one from each.
func (s *Session) guard(phase string, fn func() error) error {
	t := time.AfterFunc(s.opts.Timeout+guardTurn(s.rank), func() {
		fmt.Fprintf(stderr, "m2n: rank %d: %s did not finish in %v: a peer is gone or stuck; ending the job\n", s.rank, phase, s.opts.Timeout)
		mpi.Abort(nil, 4)
	})
	defer t.Stop()
	return fn()
}

// SetDriver sets what moves the steps of the GPU calls this rank prepares
// from now on (Options.Driver): calls prepared before keep theirs. It is
// this rank's choice alone.
func (s *Session) SetDriver(d refit.DriverKind) error {
	o := s.opts
	o.Driver = d
	if _, err := o.withDefaults(); err != nil {
		return fmt.Errorf("rank %d: %w", s.rank, err)
	}
	s.opts.Driver = d
	return nil
}

// Rank returns this rank's index in the session's communicator.
func (s *Session) Rank() int { return s.rank }

// Size returns the number of ranks of the session.
func (s *Session) Size() int { return s.size }

// Options returns the session's options, defaults filled in.
func (s *Session) Options() Options { return s.opts }

// Collective returns the session's bounded control collective, for a
// program's own small exchanges (reports, say): the same bounds and abort
// handling as the session's own.
func (s *Session) Collective() control.Collective { return s.ctl }

// Memory returns where this rank's tensors live: host memory on CPUs, the
// GPU's memory on GPUs. Buffers for calls come from its Alloc; Upload and
// Download move bytes between it and host memory.
func (s *Session) Memory() Memory { return s.dev.memory() }

// Memory allocates, fills and reads the buffers of a session's calls.
type Memory interface {
	transport.Memory
	transport.HostIO
}

// Hosts returns each rank's discovered domain (ranks with equal values
// share a host, or an NVLink domain on GPUs), before overrides.
func (s *Session) Hosts() []int { return append([]int(nil), s.hosts...) }

// Aborted reports whether the session has aborted: a rank gave up (a
// timeout, a failed transport, a peer's notice) and the communicator is
// unusable. The error that ended it is returned as well.
func (s *Session) Aborted() (bool, error) {
	if s.ctl == nil {
		return false, nil
	}
	err := s.ctl.abortedErr()
	return err != nil, err
}

// Agree makes every rank of the session agree on fields (a program's own
// settings) and learn whether any rank failed (localErr), in one bounded
// collective: every rank returns the same error, a *reshard.AgreementError
// naming the first rank and field that differ or a *reshard.ValidationError
// carrying the failing rank's error, typed (see reshard.Agree).
func (s *Session) Agree(ctx context.Context, fields []control.Field, localErr error) error {
	if err := s.usable(); err != nil {
		return err
	}
	err := control.Agree(control.WithPhase(ctx, "agreement"), s.ctl, fields, localErr)
	var ab *control.AbortError
	if errors.As(err, &ab) {
		return s.fail(err)
	}
	return err
}

// Barrier waits, bounded by the timeout, until every rank has called it.
func (s *Session) Barrier(ctx context.Context) error {
	return s.ctl.barrier(ctx, "barrier")
}

// Close releases everything the session made: its calls' staging and
// scratch, the transport, the device (streams, NCCL communicators, the
// GPU's context) and the duplicated communicators. Close after an abort
// frees nothing that a peer might still touch and marks MPI as failed, so
// that mpi.Finalize ends the job instead of waiting for peers that are
// gone (see mpi.MarkFailed).
func (s *Session) Close() error { return s.Leave(nil) }

// Leave closes the session as Close does, after a failure of this rank's
// own program (cause; nil is a plain Close). Either way every peer learns
// that this rank joins no more collectives: a peer that waits in, or
// later enters, a collective this rank never joined fails at once with a
// *control.LeftError naming this rank and cause (its session aborts), instead of
// waiting out the timeout; a peer still finishing a collective this rank
// took part in (the last step, the closing barrier) is not disturbed. So
// a program needs only `defer s.Close()` (or Leave(err) on its error path)
// for an error on one rank to reach the others at their next collective.
// Leave with a cause also marks MPI as failed, as an abort does, so that
// mpi.Finalize ends the job (MPI_Abort) alongside the peers whose
// sessions abort, instead of waiting for them.
func (s *Session) Leave(cause error) error {
	if s == nil || s.closed {
		return nil
	}
	if s.ctl != nil && (!s.shares || cause != nil) {
		s.ctl.sayLeaving(cause)
	}
	if cause != nil {
		// the peers' sessions abort on the notice and their processes
		// end the job with MPI_Abort: this one must not wait for them in
		// an MPI_Finalize of its own (OpenMPI 4.1's mpirun can then hang
		// until killed), so it ends the job too (see mpi.MarkFailed).
		mpi.MarkFailed(fmt.Errorf("rank %d left its session: %w", s.Rank(), cause))
	}
	s.closed = true
	if s.shares { // the parent's to close
		_, err := s.Aborted()
		return err
	}
	if s.rt != nil {
		_ = s.rt.Close()
	}
	if aborted, err := s.Aborted(); aborted {
		if s.dev != nil {
			s.dev.abort(s.base)
		}
		if s.link != nil || (s.parent != nil && s.parent.link != nil) {
			return s.leaveLink(err)
		}
		mpi.MarkFailed(err)
		return err
	}
	// A control message that reaches a peer after it freed the control
	// communicator is delivered to the next communicator MPI gives the same
	// context id (a later session's), where it takes a place in OpenMPI's
	// per-peer message order and stalls that communicator. So the control
	// communicator is freed only once every peer's leave notice, the last
	// control message a peer sends, has come; else it is kept, unused, for
	// the life of the process (retired).
	retire := s.ctl != nil && !s.ctl.drainLeaves(min(s.opts.Timeout, time.Second))
	var errs []error
	if s.base != nil {
		errs = append(errs, closeTransport(s.base))
	}
	if s.dev != nil && s.owned {
		errs = append(errs, s.dev.close())
	}
	if s.ctl != nil {
		errs = append(errs, s.ctl.close())
	}
	for _, c := range s.owns {
		switch {
		case c == nil:
		case retire && c == s.ctl.comm:
			retired.Lock()
			retired.comms = append(retired.comms, c)
			retired.Unlock()
		default:
			errs = append(errs, c.Free())
		}
	}
	errs = append(errs, s.link.close(s.opts.Timeout))
	return errors.Join(errs...)
}

// retired keeps the control communicators that closed sessions could not
// free safely (Leave) for the life of the process.
var retired struct {
	sync.Mutex
	comms []*mpi.Comm
}

func closeTransport(t transport.Transport) error {
	if c, ok := t.(interface{ Close() error }); ok {
		return c.Close()
	}
	return nil
}
