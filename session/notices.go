package session

import (
	"encoding/binary"
	"errors"
	"slices"
	"time"

	"github.com/m2n-dev/m2n/mpi"
	"github.com/m2n-dev/m2n/refit"
)

// leftRank is a peer's leave notice: the collectives it entered before it
// left (it joins none after), and why it left.
type leftRank struct {
	after uint64
	cause error
}

// poll handles the side channels once: it answers a pending roll call and
// returns the abort error if a notice came (or the session had aborted).
func (c *control) poll() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.aborted != nil {
		return c.aborted
	}
	if c.query != nil {
		if done, err := c.query.Test(); err == nil && done {
			from := int(binary.LittleEndian.Uint64(c.qBuf))
			ans := binary.LittleEndian.AppendUint64(nil, uint64(c.rank))
			ans = binary.LittleEndian.AppendUint64(ans, c.seq)
			ans = binary.LittleEndian.AppendUint64(ans, uint64(c.recentGap()))
			if r, err := c.comm.Isend(ans, from, tagAnswer); err == nil {
				c.keep = append(c.keep, r)
			}
			c.query, _ = c.comm.Irecv(c.qBuf, mpi.AnySource, tagQuery)
		}
	}
	if c.leave != nil {
		if done, err := c.leave.Test(); err == nil && done {
			st, _ := c.leave.Status()
			n := binary.LittleEndian.Uint64(c.lBuf)
			c.left[st.Source] = leftRank{after: n, cause: refit.DecodeError(trimZeros(c.lBuf[8:]))}
			clear(c.lBuf)
			c.leave, _ = c.comm.Irecv(c.lBuf, mpi.AnySource, tagLeave)
		}
	}
	if c.notice != nil {
		if done, err := c.notice.Test(); err == nil && done {
			c.notice = nil
			cause := refit.DecodeError(trimZeros(c.noteBuf))
			var ab *refit.AbortError
			if !errors.As(cause, &ab) {
				ab = &refit.AbortError{Rank: -1, Cause: cause}
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
func (c *control) rollCall(seq uint64) (missing, elsewhere, stopped []int) {
	grace := min(max(c.timeout/4, 200*time.Millisecond), 2*time.Second)
	q := binary.LittleEndian.AppendUint64(nil, uint64(c.rank))
	c.mu.Lock()
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
	buf := make([]byte, 24)
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
			r := int(binary.LittleEndian.Uint64(buf))
			if r >= 0 && r < c.size {
				answered[r] = true
				at[r] = binary.LittleEndian.Uint64(buf[8:])
				paused[r] = time.Duration(binary.LittleEndian.Uint64(buf[16:]))
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
func (c *control) gone(seq uint64, phase string) error {
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
	return &refit.LeftError{Rank: lowest, After: l.after, Phase: phase, Cause: l.cause}
}

// sayLeaving tells every peer that this rank joins no collective after the
// ones it entered, and why (nil: it closed the session). A peer that waits
// in, or later enters, a collective this rank never joined fails at once
// with a *LeftError naming it; one still finishing a collective this rank
// took part in is not disturbed.
func (c *control) sayLeaving(cause error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.aborted != nil || c.size == 1 {
		return
	}
	msg := binary.LittleEndian.AppendUint64(nil, c.seq)
	if cause != nil {
		enc := refit.EncodeError(cause)
		if len(enc) > noticeBytes-8 {
			enc = refit.EncodeError(errors.New(truncate(cause.Error(), noticeBytes/2)))
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
