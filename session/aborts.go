package session

import (
	"errors"
	"strings"
	"time"

	"github.com/m2n-dev/m2n/control"
	"github.com/m2n-dev/m2n/mpi"
)

// FirstToAbort returns the session rank whose own failure ended the
// session, for a program that reports a failure once per job rather than
// once per rank: -1 if the session has not aborted. If a peer's abort
// notice ended it, that is the peer's rank, at once. If this rank gave up
// on its own (a timeout, a failed transport), other ranks may have given
// up at about the same time (every rank waiting in one collective for one
// stopped rank times out together): it waits up to grace for the notices
// of the others and returns the rank whose cause says most, the same on
// every rank that gave up: a timeout naming ranks that never answered
// before any other failure, before a timeout naming ranks that are merely
// out of step (busy elsewhere); among round timeouts the one naming the
// fewest peers (a rank waiting on [5 7] where 7 itself waits on 5 says
// less than 7 does), and the lowest rank among equals. The rank
// it returns is the one whose message a program prints; every other rank
// of the session may stay quiet. It reads only notices that peers sent
// when they aborted, so it never waits for a rank that is gone.
func (s *Session) FirstToAbort(grace time.Duration) int {
	if s == nil || s.ctl == nil {
		return -1
	}
	return s.ctl.firstToAbort(grace)
}

// outOfStep ends the phase of a timeout whose peers answered the roll
// call from another collective.
const outOfStep = " (the ranks named are in another collective: their calls are out of step)"

// standing ranks what an abort's cause says, lowest first: a timeout that
// names ranks that never answered, then any other failure, then a timeout
// that names ranks busy elsewhere, then a rank's own report that it was
// stopped (stoppedError).
func standing(cause error) int {
	var te *control.TimeoutError
	switch {
	case strings.Contains(cause.Error(), stoppedMark):
		// a rank that was stopped as long as the timeout says least:
		// the peers that gave up on it name it (the mark is in the text,
		// which is what crosses ranks).
		return 3
	case !errors.As(cause, &te):
		return 1
	case strings.HasSuffix(te.Phase, outOfStep):
		return 2
	case te.Phase != "":
		return 0 // a collective's roll call: those ranks never answered
	}
	return 1 // a round: the peers named may themselves be waiting
}

func (c *mpiControl) firstToAbort(grace time.Duration) int {
	var ab *control.AbortError
	if err := c.abortedErr(); err == nil || !errors.As(err, &ab) {
		return -1
	}
	if ab.Rank != c.rank {
		return ab.Rank
	}
	best := ab
	if standing(ab.Cause) == 0 && c.rank == 0 {
		return 0 // none can say more
	}
	end := time.Now().Add(grace)
	for spin := 0; time.Now().Before(end); spin++ {
		if peer, ok := c.nextNotice(); ok {
			if saysMore(peer, best) {
				best = peer
			}
			continue
		}
		backoff(spin)
	}
	return best.Rank
}

// saysMore reports whether abort a's cause says more than b's, in the
// order FirstToAbort describes.
func saysMore(a, b *control.AbortError) bool {
	if sa, sb := standing(a.Cause), standing(b.Cause); sa != sb {
		return sa < sb
	}
	if na, nb := peersNamed(a.Cause), peersNamed(b.Cause); na != nb {
		return na < nb
	}
	return a.Rank < b.Rank
}

// peersNamed is how many ranks a round timeout blames; 0 for any other
// cause (collectives' roll calls and other failures are ranked by
// standing alone).
func peersNamed(cause error) int {
	var te *control.TimeoutError
	if !errors.As(cause, &te) || te.Phase != "" {
		return 0
	}
	return len(te.Peers)
}

// nextNotice tests the standing notice receive of an aborted control
// plane once and returns a notice that arrived, posting the receive
// again.
func (c *mpiControl) nextNotice() (*control.AbortError, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.notice == nil {
		return nil, false
	}
	done, err := c.notice.Test()
	if err != nil || !done {
		return nil, false
	}
	ours := c.ours(c.noteBuf)
	cause := control.DecodeError(trimZeros(c.noteBuf[8:]))
	clear(c.noteBuf) // notices are read up to their zero padding
	c.notice, _ = c.comm.Irecv(c.noteBuf, mpi.AnySource, tagAbort)
	if !ours {
		return nil, false // a stale session's
	}
	var ab *control.AbortError
	if errors.As(cause, &ab) && ab.Rank >= 0 && ab.Rank < c.size {
		return ab, true
	}
	return nil, false
}

// guardTurn is how much longer than the timeout rank r's watchdog waits
// before it ends the job: rank 0 first, then rank 1, then every other
// rank. The first to fire ends the job (MPI_Abort; the launcher stops the
// others within about a second), so the others are usually gone before
// they say the same.
func guardTurn(r int) time.Duration {
	return time.Duration(min(max(r, 0), 2)) * 1500 * time.Millisecond
}
