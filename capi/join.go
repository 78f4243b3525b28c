package main

import (
	"encoding/binary"
	"fmt"
	"sync"
	"time"

	"github.com/m2n-dev/m2n/control"
	"github.com/m2n-dev/m2n/mpi"
	"github.com/m2n-dev/m2n/session"
)

// agreeToJoin is the first collective of m2n_session_join and
// m2n_session_refuse: every rank of c says whether it can join (localErr,
// its options unreadable, say), bounded by timeout. When one cannot, every
// rank returns the same *control.ValidationError carrying the lowest such
// rank's error, typed, and nobody joins. It comes before session.Join's
// own agreement, which compares the options first: a rank that refused
// with options it could not read would otherwise be reported as a rank
// whose options differ ("rank 1 has timeout 5m0s, rank 0 has 30s" for a
// timeout_seconds of NaN). A rank that never comes makes the others return
// a *control.TimeoutError after timeout (the job is then marked failed, so
// that MPI_Finalize ends it rather than wait).
func agreeToJoin(c *mpi.Comm, timeout time.Duration, localErr error) error {
	n, rank := c.Size(), c.Rank()
	if n == 1 {
		if localErr != nil {
			return &control.ValidationError{Rank: 0, Msg: localErr.Error(), Err: localErr}
		}
		return nil
	}
	if timeout <= 0 {
		timeout = session.DefaultTimeout
	}
	deadline := time.Now().Add(timeout)
	word := []byte{0}
	if localErr != nil {
		word[0] = 1
	}
	all := make([]byte, n)
	if err := boundedCollective(c, deadline, timeout, func() (*mpi.Request, error) { return c.Iallgather(word, all) }); err != nil {
		return err
	}
	failing := -1
	for r, w := range all {
		if w != 0 {
			failing = r
			break
		}
	}
	if failing < 0 {
		return nil
	}
	// the lowest failing rank's error, typed, to every rank
	var mine []byte
	if localErr != nil {
		mine = control.EncodeError(localErr)
	}
	lens := make([]byte, 8*n)
	if err := boundedCollective(c, deadline, timeout, func() (*mpi.Request, error) {
		return c.Iallgather(binary.LittleEndian.AppendUint64(nil, uint64(len(mine))), lens)
	}); err != nil {
		return err
	}
	counts, displs := make([]int64, n), make([]int64, n)
	total := int64(0)
	for r := range n {
		counts[r] = int64(binary.LittleEndian.Uint64(lens[8*r:]))
		if counts[r] < 0 || counts[r] > 1<<20 {
			return fmt.Errorf("rank %d: m2n_session_join: rank %d sends an error of %d bytes", rank, r, counts[r])
		}
		displs[r] = total
		total += counts[r]
	}
	blobs := make([]byte, total)
	if err := boundedCollective(c, deadline, timeout, func() (*mpi.Request, error) {
		return c.Iallgatherv(mine, blobs, counts, displs)
	}); err != nil {
		return err
	}
	cause := control.DecodeError(blobs[displs[failing] : displs[failing]+counts[failing]])
	if cause == nil {
		cause = fmt.Errorf("rank %d refused to join without a reason", failing)
	}
	return &control.ValidationError{Rank: failing, Msg: cause.Error(), Err: cause}
}

// stranded keeps collectives that timed out reachable (their buffers stay
// pinned: MPI cannot cancel a collective) for the life of the process.
var stranded struct {
	sync.Mutex
	reqs []*mpi.Request
}

// boundedCollective starts a nonblocking collective and polls it until it
// completes or deadline passes.
func boundedCollective(c *mpi.Comm, deadline time.Time, timeout time.Duration, start func() (*mpi.Request, error)) error {
	req, err := start()
	if err != nil {
		return err
	}
	for spin := 0; ; spin++ {
		done, err := req.Test()
		if err != nil {
			return err
		}
		if done {
			return nil
		}
		if time.Now().After(deadline) {
			stranded.Lock()
			stranded.reqs = append(stranded.reqs, req)
			stranded.Unlock()
			var peers []int
			for r := range c.Size() {
				if r != c.Rank() {
					peers = append(peers, r)
				}
			}
			err := &control.TimeoutError{Rank: c.Rank(), After: timeout, Peers: peers,
				Phase: "first agreement of m2n_session_join (some of the ranks named never joined)"}
			mpi.MarkFailed(err)
			return err
		}
		switch {
		case spin < 200:
		case spin < 1000:
			time.Sleep(20 * time.Microsecond)
		default:
			time.Sleep(time.Millisecond)
		}
	}
}
