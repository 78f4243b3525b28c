package session

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/m2n-dev/m2n/control"
	"github.com/m2n-dev/m2n/mpi"
	"github.com/m2n-dev/m2n/transport"
)

// Tags of the control plane. Collectives use MPI's own matching, in a
// context apart from point-to-point messages; these are the
// point-to-point side channels every wait loop watches. They lie above
// every data tag (transport.MaxTag, the calls' and steps' identities on
// the wire), so the control plane may share a communicator with the
// data without a message of one ever matching a receive of the other:
// a two-job session and a pipeline stage do (a communicator that spans
// two jobs costs OpenMPI 4.1 about 100 ms to make). The data moves only
// point to point, so the only collectives on a shared communicator are
// the control plane's, issued in one order by every rank. MPI promises
// tags up to 32767 only: these need MPI_TAG_UB above 32771 (OpenMPI's
// ob1 allows 2^31-1), and an MPI whose bound is lower fails the session's
// first receive (MPI_ERR_TAG) rather than mixing messages.
const (
	tagAbort  = transport.MaxTag + 1 + iota // an abort notice: the sender gave up, and why
	tagQuery                                // a roll call: "which collective are you in?"
	tagAnswer                               // the answer to a roll call
	tagLeave                                // a leave notice: the sender closed its session after its n-th collective, and why
)

// noticeBytes is the size of an abort notice: small enough that MPI sends
// it eagerly, so it completes even if its receiver never looks.
const noticeBytes = 4000

// mpiControl is a session's control plane on its own communicator: bounded
// collectives (control.Collective), abort notices and roll calls. Every
// wait of the session polls it, so a rank that gives up stops every other
// rank promptly with its reason, and a collective that times out names the
// ranks that never came.
type mpiControl struct {
	comm    *mpi.Comm
	rank    int
	size    int
	timeout time.Duration

	mu sync.Mutex
	// id is the session's identity, the same on every rank (sessionID):
	// every control message carries it first, and one that carries
	// another is a stale one of an earlier session (MPI gives a new
	// communicator the context id of a freed one, and a notice sent to a
	// peer that had already closed is delivered to whatever comes next
	// with that id) and is dropped.
	id      uint64
	seq     uint64 // collectives entered so far
	aborted error  // the *reshard.AbortError that ended the session, if any
	notice  *mpi.Request
	noteBuf []byte
	query   *mpi.Request
	qBuf    []byte
	leave   *mpi.Request
	lBuf    []byte
	left    map[int]leftRank // peers that closed their session, by rank
	keep    []*mpi.Request   // sends that may never complete (to peers that are gone)
	// frozenAt and frozenFor are the last pause a wait of this rank saw
	// (noteGap): roll-call answers report it.
	frozenAt  time.Time
	frozenFor time.Duration
}

func newControl(comm *mpi.Comm, timeout time.Duration) (*mpiControl, error) {
	pauses.start()
	c := &mpiControl{comm: comm, rank: comm.Rank(), size: comm.Size(), timeout: timeout,
		noteBuf: make([]byte, noticeBytes), qBuf: make([]byte, 16), lBuf: make([]byte, noticeBytes), left: map[int]leftRank{}}
	var err error
	if c.notice, err = comm.Irecv(c.noteBuf, mpi.AnySource, tagAbort); err != nil {
		return nil, err
	}
	if c.query, err = comm.Irecv(c.qBuf, mpi.AnySource, tagQuery); err != nil {
		return nil, err
	}
	if c.leave, err = comm.Irecv(c.lBuf, mpi.AnySource, tagLeave); err != nil {
		return nil, err
	}
	return c, nil
}

// Rank implements control.Collective.
func (c *mpiControl) Rank() int { return c.rank }

// Size implements control.Collective.
func (c *mpiControl) Size() int { return c.size }

// Allgather implements control.Collective, bounded by the session timeout.
func (c *mpiControl) Allgather(ctx context.Context, send, recv []byte) error {
	if c.size == 1 {
		return c.alone(func() { copy(recv, send) })
	}
	return c.collective(ctx, "allgather", func() (*mpi.Request, error) { return c.comm.Iallgather(send, recv) })
}

// Allgatherv implements control.Collective, bounded by the session timeout.
func (c *mpiControl) Allgatherv(ctx context.Context, send, recv []byte, counts, displs []int64) error {
	if c.size == 1 {
		return c.alone(func() { copy(recv[displs[0]:displs[0]+counts[0]], send[:counts[0]]) })
	}
	return c.collective(ctx, "allgatherv", func() (*mpi.Request, error) { return c.comm.Iallgatherv(send, recv, counts, displs) })
}

// barrier is a bounded barrier.
func (c *mpiControl) barrier(ctx context.Context, phase string) error {
	if c.size == 1 {
		return c.alone(func() {})
	}
	return c.collective(ctx, phase, func() (*mpi.Request, error) { return c.comm.Ibarrier() })
}

// alone is a collective of a one-rank session: nothing to wait for, so no
// MPI call; it only counts the collective (for roll calls) and fails once
// the session has aborted, as every collective does.
func (c *mpiControl) alone(f func()) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.aborted != nil {
		return c.aborted
	}
	c.seq++
	f()
	return nil
}

// collective starts a non-blocking collective and polls it against the
// deadline, the context and the side channels.
func (c *mpiControl) collective(ctx context.Context, phase string, start func() (*mpi.Request, error)) error {
	if p := control.PhaseOf(ctx); p != "" {
		phase = p
	}
	c.mu.Lock()
	if c.aborted != nil {
		err := c.aborted
		c.mu.Unlock()
		return err
	}
	c.seq++
	seq := c.seq
	if err := c.gone(seq, phase); err != nil {
		c.mu.Unlock()
		return c.abort(err)
	}
	req, err := start()
	c.mu.Unlock()
	if err != nil {
		return err
	}
	deadline := time.Now().Add(c.timeout)
	last, lateOnce := time.Now(), false
	for spin := 0; ; spin++ {
		c.mu.Lock()
		done, err := req.Test()
		c.mu.Unlock()
		if err != nil {
			return c.abort(fmt.Errorf("rank %d: %s: %w", c.rank, phase, err))
		}
		if done {
			return nil
		}
		if err := c.poll(); err != nil {
			c.keepRequest(req)
			return err
		}
		c.mu.Lock()
		err = c.gone(seq, phase)
		c.mu.Unlock()
		if err != nil {
			c.keepRequest(req)
			return c.abort(err)
		}
		if ctx.Err() != nil {
			c.keepRequest(req)
			if cause := context.Cause(ctx); cause != nil {
				return c.abort(cause)
			}
			return c.abort(ctx.Err())
		}
		// time this process did not run (stopped by SIGSTOP or a
		// debugger, or starved) is not time spent waiting for the
		// others: a rank that resumes must not blame the peers that
		// waited for it (and it tells them, noteGap). The pause is
		// measured up to the very time the deadline is compared with, so
		// that a stop anywhere in the loop (in poll, say) counts.
		now := time.Now()
		if gap := now.Sub(last); gap > frozenGap {
			deadline = deadline.Add(gap)
			c.noteGap(now, gap)
		}
		last = now
		if now.After(deadline) {
			missing, elsewhere, stopped := c.rollCall(seq)
			if len(stopped) > 0 {
				// the ranks that did not run for as long as the timeout
				// are the cause, wherever they answer from.
				c.keepRequest(req)
				return c.abort(&control.TimeoutError{Rank: c.rank, Phase: phase + wereStopped, After: c.timeout, Peers: stopped})
			}
			if len(missing) == 0 && len(elsewhere) == 0 && !lateOnce {
				// every rank answered from this collective: the late
				// ones have just arrived, and it is completing.
				lateOnce, deadline, last = true, time.Now().Add(min(max(c.timeout/4, 200*time.Millisecond), 2*time.Second)), time.Now()
				continue
			}
			c.keepRequest(req)
			te := &control.TimeoutError{Rank: c.rank, Phase: phase, After: c.timeout, Peers: missing}
			if len(missing) == 0 && len(elsewhere) > 0 {
				te.Peers = elsewhere
				te.Phase = phase + outOfStep
			}
			return c.abort(te)
		}
		backoff(spin)
	}
}

// pauses watches this process for pauses (a process stopped by SIGSTOP or
// a debugger, or starved, outside any wait of a session: filling or
// checking its buffers, say), from the first Join on: one goroutine for
// the life of the process, ticking every 50 ms.
var pauses pauseWatch

// frozenGap is a pause between two polls of a wait (which poll every
// millisecond at most) that only a process that was not running makes.
const frozenGap = 250 * time.Millisecond

// backoff sleeps a little longer the longer a wait lasts: spin first
// (control messages take microseconds), then up to 1 ms.
func backoff(spin int) {
	switch {
	case spin < 200:
		return
	case spin < 1000:
		time.Sleep(20 * time.Microsecond)
	default:
		time.Sleep(time.Millisecond)
	}
}

func (c *mpiControl) keepRequest(r *mpi.Request) {
	c.mu.Lock()
	c.keep = append(c.keep, r)
	c.mu.Unlock()
}

// abort ends the session on this rank because of err: every peer gets a
// notice with the reason (so that none waits for this rank), and the
// returned *reshard.AbortError wraps err. An abort that arrived from a peer
// is returned as it is.
func (c *mpiControl) abort(err error) error {
	var ab *control.AbortError
	if errors.As(err, &ab) {
		c.mu.Lock()
		if c.aborted == nil {
			c.aborted = ab
		}
		c.mu.Unlock()
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.aborted != nil {
		return c.aborted
	}
	ab = &control.AbortError{Rank: c.rank, Cause: err}
	c.aborted = ab
	enc := control.EncodeError(ab)
	if len(enc) > noticeBytes-8 {
		enc = control.EncodeError(&control.AbortError{Rank: c.rank, Cause: errors.New(truncate(err.Error(), noticeBytes/2))})
	}
	msg := append(binary.LittleEndian.AppendUint64(nil, c.id), enc...)
	for r := 0; r < c.size; r++ {
		if r == c.rank {
			continue
		}
		if req, err := c.comm.Isend(msg, r, tagAbort); err == nil {
			c.keep = append(c.keep, req)
		}
	}
	return ab
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// abortedErr returns the error that ended the session, or nil.
func (c *mpiControl) abortedErr() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.aborted
}

// watch polls the side channels while a run moves data, every
// millisecond, and cancels the run's context with the abort error when a
// notice arrives. The returned stop ends it.
func (c *mpiControl) watch(ctx context.Context) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(ctx)
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		t := time.NewTicker(time.Millisecond)
		defer t.Stop()
		last := time.Now()
		for {
			select {
			case <-done:
				return
			case now := <-t.C:
				gap := now.Sub(last)
				last = now
				if err := c.watchOnce(gap); err != nil {
					cancel(err)
					return
				}
			}
		}
	}()
	return ctx, func() {
		close(done)
		<-stopped
		cancel(nil)
	}
}

// watchInline is watch for a transport whose waits poll (an
// transport.InlinePoller): the returned context carries the watch as its
// poll, which the waits call every transport.PollEvery on their own
// goroutine, so that no second goroutine calls MPI beside the transfer.
// The poll cancels the context with the abort error, as watch does.
// Between waits (local copies, packing) nothing polls: the next wait's
// first poll sees a notice that came meanwhile, and a pause of this
// process there as long as the timeout (which the process's pause watch
// saw end after the watch began).
func (c *mpiControl) watchInline(ctx context.Context) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(ctx)
	begun := time.Now()
	poll := func(gap time.Duration) error {
		if at, d := pauses.last(); d >= c.timeout && at.After(begun) {
			gap = max(gap, d)
		}
		if err := c.watchOnce(gap); err != nil {
			cancel(err)
			return err
		}
		return nil
	}
	return transport.WithPoll(ctx, poll), func() { cancel(nil) }
}

// watchOnce is one look at the side channels while a run moves data, gap
// after the previous one: a peer's notice first (when it came, the peers
// know), then whether this process stopped for as long as the timeout.
// It returns the abort error that should end the run, or nil.
func (c *mpiControl) watchOnce(gap time.Duration) error {
	if gap > frozenGap {
		c.noteGap(time.Now(), gap) // before poll answers a roll call
	}
	if err := c.poll(); err != nil {
		return err
	}
	if gap >= c.timeout {
		return c.abort(&stoppedError{rank: c.rank, gap: gap, timeout: c.timeout})
	}
	return nil
}

// close withdraws the side-channel receives of a session that did not
// abort.
func (c *mpiControl) close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	var errs []error
	for _, r := range []*mpi.Request{c.notice, c.query, c.leave} {
		if r != nil {
			_, err := r.Cancel()
			errs = append(errs, err)
		}
	}
	c.notice, c.query, c.leave = nil, nil, nil
	for _, r := range c.keep {
		if done, _ := r.Test(); done {
			continue
		}
		// a receive can be withdrawn; a send to a peer that never looks
		// cannot (MPI cannot cancel it), so it stays reachable here:
		// collecting a request whose buffer is pinned crashes the runtime.
		if _, err := r.Cancel(); err != nil {
			stranded.Lock()
			stranded.reqs = append(stranded.reqs, r)
			stranded.Unlock()
		}
	}
	c.keep = nil
	return errors.Join(errs...)
}

// stranded keeps sends that can never complete (control messages to peers
// that are gone) reachable for the life of the process.
var stranded struct {
	sync.Mutex
	reqs []*mpi.Request
}

// closeIfHealthy closes a control plane that did not abort; an aborted
// one keeps its requests (peers may still send to it).
func (c *mpiControl) closeIfHealthy() error {
	if c.abortedErr() != nil {
		return nil
	}
	return c.close()
}
