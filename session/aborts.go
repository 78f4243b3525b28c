package session

import (
	"errors"
	"time"

	"github.com/m2n-dev/m2n/mpi"
	"github.com/m2n-dev/m2n/reshard"
)

// FirstToAbort returns the session rank whose own failure ended the
// session, for a program that reports a failure once per job rather than
// once per rank: -1 if the session has not aborted. If a peer's abort
// notice ended it, that is the peer's rank, at once. If this rank gave up
// on its own (a timeout, a failed transport), other ranks may have given
// up at about the same time for the same reason (every rank waiting in one
// collective for one stopped rank times out together): it waits up to
// grace for the notices of peers below it and returns the first such
// peer's rank, or its own if none comes. The rank it returns is the one
// whose message a program prints; every other rank of the session may
// stay quiet. It reads only notices that peers sent when they aborted, so
// it never waits for a rank that is gone.
func (s *Session) FirstToAbort(grace time.Duration) int {
	if s == nil || s.ctl == nil {
		return -1
	}
	return s.ctl.firstToAbort(grace)
}

func (c *control) firstToAbort(grace time.Duration) int {
	var ab *reshard.AbortError
	if err := c.abortedErr(); err == nil || !errors.As(err, &ab) {
		return -1
	}
	if ab.Rank != c.rank {
		return ab.Rank
	}
	end := time.Now().Add(grace)
	for spin := 0; time.Now().Before(end); spin++ {
		if r, ok := c.lowerNotice(); ok {
			return r
		}
		backoff(spin)
	}
	return c.rank
}

// lowerNotice tests the standing notice receive of an aborted control
// plane once: a notice from a rank below this one is returned; any other
// notice is read and the receive posted again.
func (c *control) lowerNotice() (int, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.notice == nil {
		return 0, false
	}
	done, err := c.notice.Test()
	if err != nil || !done {
		return 0, false
	}
	cause := reshard.DecodeError(trimZeros(c.noteBuf))
	clear(c.noteBuf) // notices are read up to their zero padding
	c.notice, _ = c.comm.Irecv(c.noteBuf, mpi.AnySource, tagAbort)
	var ab *reshard.AbortError
	if errors.As(cause, &ab) && ab.Rank >= 0 && ab.Rank < c.rank {
		return ab.Rank, true
	}
	return 0, false
}

// guardTurn is how much longer than the timeout rank r's watchdog waits
// before it ends the job: rank 0 first, then rank 1, then every other
// rank. The first to fire ends the job (MPI_Abort; the launcher stops the
// others within about a second), so the others are usually gone before
// they say the same.
func guardTurn(r int) time.Duration {
	return time.Duration(min(max(r, 0), 2)) * 1500 * time.Millisecond
}
