package session

import (
	"context"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/m2n-dev/m2n/control"
	"github.com/m2n-dev/m2n/mpi"
)

// leftRank is a peer's leave notice: the collectives it entered before it
// left (it joins none after), and why it left.
type leftRank struct {
	after uint64
	cause error
}

// poll handles the side channels once: it answers a pending roll call and
// returns the abort error if a notice came (or the session had aborted).
func (c *mpiControl) poll() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.aborted != nil {
		return c.aborted
	}
	if c.query != nil {
		if done, err := c.query.Test(); err == nil && done {
			if c.ours(c.qBuf) {
				from := int(binary.LittleEndian.Uint64(c.qBuf[8:]))
				ans := binary.LittleEndian.AppendUint64(nil, c.id)
				ans = binary.LittleEndian.AppendUint64(ans, uint64(c.rank))
				ans = binary.LittleEndian.AppendUint64(ans, c.seq)
				ans = binary.LittleEndian.AppendUint64(ans, uint64(c.recentGap()))
				if r, err := c.comm.Isend(ans, from, tagAnswer); err == nil {
					c.keep = append(c.keep, r)
				}
			}
			c.query, _ = c.comm.Irecv(c.qBuf, mpi.AnySource, tagQuery)
		}
	}
	if c.leave != nil {
		if done, err := c.leave.Test(); err == nil && done {
			if c.ours(c.lBuf) {
				st, _ := c.leave.Status()
				n := binary.LittleEndian.Uint64(c.lBuf[8:])
				c.left[st.Source] = leftRank{after: n, cause: control.DecodeError(trimZeros(c.lBuf[16:]))}
			}
			clear(c.lBuf)
			c.leave, _ = c.comm.Irecv(c.lBuf, mpi.AnySource, tagLeave)
		}
	}
	if c.notice != nil {
		if done, err := c.notice.Test(); err == nil && done && !c.ours(c.noteBuf) {
			clear(c.noteBuf) // a stale session's
			c.notice, _ = c.comm.Irecv(c.noteBuf, mpi.AnySource, tagAbort)
		} else if err == nil && done {
			c.notice = nil
			cause := control.DecodeError(trimZeros(c.noteBuf[8:]))
			var ab *control.AbortError
			if !errors.As(cause, &ab) {
				ab = &control.AbortError{Rank: -1, Cause: cause}
			}
			c.aborted = ab
			return ab
		}
	}
	return nil
}

func trimZeros(b []byte) []byte {
	for len(b) > 0 && b[len(b)-1] == 0 {
		b = b[:len(b)-1]
	}
	return b
}

// rollCall asks every peer which collective it is in and waits a short
// grace for the answers: the ranks that do not answer never arrived (gone,
// stopped, or busy outside the library); those that answer with another
// collective are out of step.
func (c *mpiControl) rollCall(seq uint64) (missing, elsewhere, stopped []int) {
	grace := min(max(c.timeout/4, 200*time.Millisecond), 2*time.Second)
	c.mu.Lock()
	q := binary.LittleEndian.AppendUint64(nil, c.id)
	q = binary.LittleEndian.AppendUint64(q, uint64(c.rank))
	for r := 0; r < c.size; r++ {
		if r == c.rank {
			continue
		}
		if req, err := c.comm.Isend(q, r, tagQuery); err == nil {
			c.keep = append(c.keep, req)
		}
	}
	c.mu.Unlock()
	answered := make([]bool, c.size)
	answered[c.rank] = true
	at := make([]uint64, c.size)
	paused := make([]time.Duration, c.size)
	buf := make([]byte, 32)
	var req *mpi.Request
	end := time.Now().Add(grace)
	for spin := 0; time.Now().Before(end); spin++ {
		if req == nil {
			var err error
			if req, err = c.comm.Irecv(buf, mpi.AnySource, tagAnswer); err != nil {
				break
			}
		}
		if done, err := req.Test(); err == nil && done {
			c.mu.Lock()
			ours := c.ours(buf)
			c.mu.Unlock()
			if r := int(binary.LittleEndian.Uint64(buf[8:])); ours && r >= 0 && r < c.size {
				answered[r] = true
				at[r] = binary.LittleEndian.Uint64(buf[16:])
				paused[r] = time.Duration(binary.LittleEndian.Uint64(buf[24:]))
			}
			req = nil
			if !slices.Contains(answered, false) {
				break
			}
			continue
		}
		_ = c.poll() // keep answering others' roll calls meanwhile
		backoff(spin)
	}
	if req != nil {
		c.keepRequest(req)
	}
	for r, ok := range answered {
		switch {
		case !ok:
			missing = append(missing, r)
		case r != c.rank && paused[r] >= c.timeout/2:
			stopped = append(stopped, r)
		case r != c.rank && at[r] != seq:
			elsewhere = append(elsewhere, r)
		}
	}
	return missing, elsewhere, stopped
}

// gone returns a *LeftError for the lowest peer that left before
// collective seq, which it will never join; c.mu is held.
func (c *mpiControl) gone(seq uint64, phase string) error {
	lowest := -1
	for r, l := range c.left {
		if l.after < seq && (lowest < 0 || r < lowest) {
			lowest = r
		}
	}
	if lowest < 0 {
		return nil
	}
	l := c.left[lowest]
	return &control.LeftError{Rank: lowest, After: l.after, Phase: phase, Cause: l.cause}
}

// sayLeaving tells every peer that this rank joins no collective after the
// ones it entered, and why (nil: it closed the session). A peer that waits
// in, or later enters, a collective this rank never joined fails at once
// with a *LeftError naming it; one still finishing a collective this rank
// took part in is not disturbed.
func (c *mpiControl) sayLeaving(cause error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.aborted != nil || c.size == 1 {
		return
	}
	msg := binary.LittleEndian.AppendUint64(nil, c.id)
	msg = binary.LittleEndian.AppendUint64(msg, c.seq)
	if cause != nil {
		enc := control.EncodeError(cause)
		if len(enc) > noticeBytes-16 {
			enc = control.EncodeError(errors.New(truncate(cause.Error(), noticeBytes/2)))
		}
		msg = append(msg, enc...)
	}
	for r := 0; r < c.size; r++ {
		if r == c.rank {
			continue
		}
		if req, err := c.comm.Isend(msg, r, tagLeave); err == nil {
			c.keep = append(c.keep, req)
		}
	}
}

// drainLeaves waits, up to d, for the leave notice of every peer of a
// session this rank is leaving, and reports whether all came: then no
// peer sends this control plane anything more, and its communicator can
// be freed.
func (c *mpiControl) drainLeaves(d time.Duration) bool {
	end := time.Now().Add(d)
	for spin := 0; ; spin++ {
		c.mu.Lock()
		all := len(c.left) >= c.size-1
		c.mu.Unlock()
		if all {
			return true
		}
		// a job that is failing (another session of this process aborted,
		// a peer's MPI_Abort under way) drains nothing: its MPI may be
		// torn down under the wait.
		if mpi.Failed() != nil || c.poll() != nil || time.Now().After(end) {
			return false
		}
		backoff(spin)
	}
}

// ours reports whether a control message (its first 8 bytes) carries this
// session's id; c.mu is held.
func (c *mpiControl) ours(msg []byte) bool {
	return len(msg) >= 8 && binary.LittleEndian.Uint64(msg) == c.id
}

// setID gives the control plane the session's id (sessionID).
func (c *mpiControl) setID(id uint64) {
	c.mu.Lock()
	c.id = id
	c.mu.Unlock()
}

// sessionID draws the identity of a session joining over c: every rank's
// random number, gathered in one bounded collective and mixed, the same
// on every rank and, but for a chance of 2^-64, different from every
// session before it on the same communicator.
func sessionID(c *mpiControl) (uint64, error) {
	mine := binary.LittleEndian.AppendUint64(nil, rand.Uint64())
	all := make([]byte, 8*c.size)
	if err := c.Allgather(control.WithPhase(context.Background(), "session set-up (its identity)"), mine, all); err != nil {
		return 0, err
	}
	id := uint64(0x9E3779B97F4A7C15)
	for r := range c.size {
		id = mix(id ^ binary.LittleEndian.Uint64(all[8*r:]))
	}
	return id, nil
}

// stageID is the id of stage i of a session's pipeline number n (the
// same on every member: pipelines are made by every rank in one order).
func stageID(parent uint64, n, i int) uint64 {
	return mix(parent ^ mix(uint64(n)<<32|uint64(i)+1))
}

// mix is a 64-bit finalizer (splitmix64's).
func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xBF58476D1CE4E5B9
	x ^= x >> 27
	x *= 0x94D049BB133111EB
	return x ^ x>>31
}
