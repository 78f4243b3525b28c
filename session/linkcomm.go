package session

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/m2n-dev/m2n/mpi"
)

// link is the connection under a session that two jobs formed: the
// intercommunicator of Accept or Connect and the merged communicator the
// session was joined over.
type link struct {
	inter, merged *mpi.Comm
	listener      *Listener     // on the trainer's side
	joined        time.Time     // when MPI's accept or connect returned
	took          time.Duration // from then to the session joined
	phases        *phases       // the time of each step of joining, and of preparing over the link
}

// phases times the steps of joining two jobs and of preparing the first
// calls over them, for the report of a join beside a step (Linked).
type phases struct {
	last time.Time
	list []string
}

// maxPhases bounds a link's phase log: a session that prepares again and
// again stops logging.
const maxPhases = 40

// mark ends the step called name (nil: not timed).
func (p *phases) mark(name string) {
	if p == nil || len(p.list) >= maxPhases {
		return
	}
	now := time.Now()
	p.list = append(p.list, fmt.Sprintf("%s %v", name, now.Sub(p.last).Round(100*time.Microsecond)))
	p.last = now
}

// phasesOf returns the phase log of the link s (or its parent) was formed
// over, or nil.
func (s *Session) phasesOf() *phases {
	for ; s != nil; s = s.parent {
		if s.link != nil {
			return s.link.phases
		}
	}
	return nil
}

// joinLink merges the intercommunicator from Accept or Connect (the
// listener's ranks low, first), bounded by timeout.
func joinLink(inter *mpi.Comm, high bool, timeout time.Duration) (*link, error) {
	start := time.Now()
	merged, ok, err := within(timeout, func() (*mpi.Comm, error) { return inter.Merge(high) })
	if !ok {
		return nil, fmt.Errorf("merging the two jobs' communicators did not finish in %v: the other job is gone or stuck", timeout)
	}
	if err != nil {
		return nil, fmt.Errorf("merging the two jobs' communicators: %w", err)
	}
	lk := &link{inter: inter, merged: merged, joined: start, phases: &phases{last: start}}
	lk.phases.mark("merge")
	return lk, nil
}

// Linked reports whether the session is one of two jobs (Listener.Accept,
// Connect), and how long joining took once MPI's accept or connect had
// returned: the merge, the token's exchange and the session's set-up
// (Join), without the wait for the other job to arrive. phases lists the
// time of each step of joining, and of the preparations since (stage
// communicators, each call's preparation), in order.
func (s *Session) Linked() (linked bool, took time.Duration, phases string) {
	if s.link == nil {
		return false, 0, ""
	}
	return true, s.link.took, strings.Join(s.link.phases.list, ", ")
}

// joinedOver records the session formed over lk.
func (s *Session) joinedOver(lk *link) {
	lk.took = time.Since(lk.joined)
	s.link = lk
}

// close frees the merged communicator and disconnects from the other job,
// bounded by timeout (a disconnect waits for the other job's ranks, which
// disconnect too, or are gone).
func (lk *link) close(timeout time.Duration) error {
	if lk == nil || lk.inter == nil {
		return nil
	}
	inter, merged := lk.inter, lk.merged
	lk.inter, lk.merged = nil, nil
	_, ok, err := within(timeout, func() (struct{}, error) {
		return struct{}{}, errors.Join(merged.Free(), inter.Disconnect())
	})
	if !ok {
		err = fmt.Errorf("disconnecting from the other job did not finish in %v", timeout)
		mpi.MarkFailed(err)
	}
	return err
}

// within runs fn and waits for it at most d. ok false: fn is still
// running (in a blocking MPI call that cannot be cancelled) and its
// results will be dropped.
func within[T any](d time.Duration, fn func() (T, error)) (v T, ok bool, err error) {
	type result struct {
		v   T
		err error
	}
	ch := make(chan result, 1)
	go func() {
		v, err := fn()
		ch <- result{v, err}
	}()
	t := time.NewTimer(max(d, 0))
	defer t.Stop()
	select {
	case r := <-ch:
		return r.v, true, r.err
	case <-t.C:
		return v, false, nil
	}
}

// recvBounded receives exactly len(buf) bytes (or fewer) from rank src of
// c, waiting at most timeout; on a timeout the receive is withdrawn.
func recvBounded(c *mpi.Comm, buf []byte, src int, timeout time.Duration) error {
	r, err := c.Irecv(buf, src, tagHello)
	if err != nil {
		return err
	}
	if err := pollBounded(r, timeout); err != nil {
		if cancelled, cerr := r.Cancel(); cerr != nil || !cancelled {
			return errors.Join(err, cerr)
		}
		return err
	}
	return nil
}

// sendBounded sends buf to rank dst of c, waiting at most timeout.
func sendBounded(c *mpi.Comm, buf []byte, dst int, timeout time.Duration) error {
	r, err := c.Isend(buf, dst, tagHello)
	if err != nil {
		return err
	}
	if err := pollBounded(r, timeout); err != nil {
		stranded.Lock()
		stranded.reqs = append(stranded.reqs, r) // pinned: keep it reachable
		stranded.Unlock()
		return err
	}
	return nil
}

func pollBounded(r *mpi.Request, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for spin := 0; ; spin++ {
		done, err := r.Test()
		if err != nil || done {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("timed out after %v", timeout)
		}
		backoff(spin)
	}
}

// leaveLink closes an aborted session that two jobs formed (the other
// job is gone, say: a generator killed between steps), or a pipeline
// stage's session of one, without ending this job: the control plane's
// pending receives are withdrawn (sends to ranks that are gone stay
// stranded), the communicators are freed and (by the session the stages
// were split from) the other job disconnected, bounded. This job's own
// communicator stays usable, so a trainer can Accept the next generator.
// Only a disconnect that does not finish in time marks MPI as failed. It
// returns the abort's error.
func (s *Session) leaveLink(abortErr error) error {
	if s.ctl != nil {
		_ = s.ctl.close()
	}
	for _, c := range s.owns {
		if c != nil {
			_ = c.Free()
		}
	}
	if err := s.link.close(s.opts.Timeout); err != nil {
		return errors.Join(abortErr, err)
	}
	return abortErr
}
