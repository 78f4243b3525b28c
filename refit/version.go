package refit

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/m2n-dev/m2n/control"
)

// Versions. Every step of a call carries a version number that every rank
// agrees on in the step's first collective: the caller's (SetVersion,
// the same on every rank, a trainer's step count say) or, without one, the
// last step's plus one. Held says which version this rank's destination
// buffers hold: the last step that completed for every tensor on every
// rank, whether it was verified (Verify: every message's CRC-32C matched on
// both sides), and whether they still hold it unchanged. A step that fails
// before bytes move (the buffer check, an FP8 NaN, a call mismatch) leaves
// them as they were; so does any failed step of an Atomic call, which
// commits all at once; a failed step of a call that is not Atomic, once
// its bytes began to move, leaves a mix of versions, which Held says
// (Intact false).

// Held is what a call's destination buffers hold on this rank (Call.Held).
type Held struct {
	// Version is the version of the last step that completed for every
	// tensor on every rank; 0 before the first.
	Version uint64
	// Verified: that step ran with Verify, and every message's checksum
	// matched on both sides.
	Verified bool
	// Intact: no step since has changed the buffers. False after a failed
	// step of a call that is not Atomic, once its bytes began to move:
	// some parts may hold the failed step's bytes.
	Intact bool
}

// String renders h as "version 7 (verified, intact)".
func (h Held) String() string {
	if h.Version == 0 {
		return fmt.Sprintf("no version yet (intact %v)", h.Intact)
	}
	s := fmt.Sprintf("version %d (", h.Version)
	if h.Verified {
		s += "verified, "
	}
	if h.Intact {
		return s + "intact)"
	}
	return s + "not intact: a later step failed after its bytes began to move)"
}

// SetVersion gives the call's next step version v (at least 1); every rank
// must give the same, or that step fails on every rank, nothing moved,
// with a *control.ValidationError naming a rank that differs. Without it a step's
// version is the last step's plus one.
func (c *Call) SetVersion(v uint64) error {
	if v == 0 {
		return &control.ValidationError{Rank: c.rank, Msg: "version 0: versions start at 1", Err: errors.New("version 0")}
	}
	c.rt.mu.Lock()
	defer c.rt.mu.Unlock()
	c.nextVersion = v
	return nil
}

// Held returns the version this rank's destination buffers of the call
// hold (see Held).
func (c *Call) Held() Held {
	c.rt.mu.Lock()
	defer c.rt.mu.Unlock()
	return c.held
}

// stepVersion is the version the next step carries on this rank.
func (c *Call) stepVersion() uint64 {
	v := c.nextVersion
	if v == 0 {
		v = c.version + 1
	}
	c.nextVersion = 0
	return v
}

// settle records what a step that got past its begin left in the
// destination buffers: the step's version on success; after a failure,
// with Atomic only a commit that failed changed them.
func (c *Call) settle(st *step, err error) {
	if st == nil || !st.begun {
		return
	}
	if c.delta != nil {
		c.delta.settle(st, err, c.opts.Atomic)
	}
	if err == nil {
		c.held = Held{Version: st.version, Verified: c.opts.Verify, Intact: true}
		return
	}
	if !c.opts.Atomic || st.committing {
		c.held.Intact = false
	}
}

// versionMismatch is the error every rank returns when the ranks began a
// step with different versions (all words of agreeBegin, beginWord bytes
// each): it names the first rank whose version differs from rank 0's.
func versionMismatch(all []byte, size int) error {
	v0 := binary.LittleEndian.Uint64(all[16:])
	for r := 1; r < size; r++ {
		if v := binary.LittleEndian.Uint64(all[beginWord*r+16:]); v != v0 {
			msg := fmt.Sprintf("rank %d begins the step as version %d, rank 0 as version %d (SetVersion must be given the same on every rank)", r, v, v0)
			return &control.ValidationError{Rank: r, Msg: msg, Err: errors.New(msg)}
		}
	}
	return nil
}

// Resync makes the call's next step a full sync, for a call in delta mode
// (Options.Delta): every element sent dense, as at its first step (a
// destination whose buffers were changed outside the call asks for one).
// One rank asking is enough: the ranks agree on it as the step begins. It
// does nothing for a call not in delta mode.
func (c *Call) Resync() {
	c.rt.mu.Lock()
	defer c.rt.mu.Unlock()
	if c.delta != nil {
		c.delta.dirty = true
	}
}
