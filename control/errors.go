package control

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// TimeoutError reports a wait that did not complete in time: a round of
// the data movement, or a collective of a call.
type TimeoutError struct {
	Rank    int
	Phase   string // what waited: "round 3", "agreement", ...; "" for a round
	Round   int
	After   time.Duration
	Peers   []int    // the ranks this rank still waits for (all of the round's peers if the transport cannot tell)
	Tensors []string // the tensors the round carries
}

func (e *TimeoutError) Error() string {
	if e.Phase != "" && len(e.Peers) == 0 {
		// every peer answered the roll call from this collective, twice:
		// none is missing, yet it did not complete.
		return fmt.Sprintf("rank %d: timed out after %v in the %s: every rank reached it, yet it did not complete (a starved or overloaded host?)",
			e.Rank, e.After, e.Phase)
	}
	if e.Phase != "" {
		return fmt.Sprintf("rank %d: timed out after %v waiting for ranks %v in the %s", e.Rank, e.After, e.Peers, e.Phase)
	}
	return fmt.Sprintf("rank %d: timed out after %v waiting for ranks %v in round %d (tensors %v)",
		e.Rank, e.After, e.Peers, e.Round, e.Tensors)
}

// ErrTimeout matches every *TimeoutError with errors.Is.
var ErrTimeout = errors.New("refit: timed out")

// Is makes errors.Is(err, ErrTimeout) true.
func (e *TimeoutError) Is(target error) bool { return target == ErrTimeout }

// AbortError reports a call abandoned because a rank could not go on: it
// timed out waiting for a peer, its transport failed, or it panicked. The
// rank that gave up tells every other rank (package session sends the
// notice and aborts the communicator), so that none waits for it; after
// an AbortError the communicator is unusable. Cause is the aborting rank's
// error, typed (a *TimeoutError naming the rank it waited for, say), so
// errors.As reaches it on every rank.
type AbortError struct {
	Rank  int   // the rank that aborted
	Cause error // why
}

func (e *AbortError) Error() string {
	return fmt.Sprintf("rank %d aborted the call: %v", e.Rank, e.Cause)
}

// Unwrap returns the cause.
func (e *AbortError) Unwrap() error { return e.Cause }

// Is makes errors.Is(err, ErrAborted) true.
func (e *AbortError) Is(target error) bool { return target == ErrAborted }

// ErrAborted matches every *AbortError with errors.Is.
var ErrAborted = errors.New("refit: call aborted")

type phaseKey struct{}

// WithPhase names the collective phase ctx is used for ("agreement on the
// inputs", "completion status", ...), so that a Collective can say which
// one timed out.
func WithPhase(ctx context.Context, phase string) context.Context {
	return context.WithValue(ctx, phaseKey{}, phase)
}

// PhaseOf returns the phase WithPhase named, or "".
func PhaseOf(ctx context.Context) string {
	p, _ := ctx.Value(phaseKey{}).(string)
	return p
}

// LeftError reports a peer that left the group (closed its session, or its
// program failed and left it: session.Session.Leave) before a collective
// this rank waits in: it entered After collectives and will join no more,
// so this one can never complete. The group aborts; Cause is why the peer
// left (nil: it closed its session without a failure).
type LeftError struct {
	Rank  int    `json:"rank"`  // the rank that left
	After uint64 `json:"after"` // the collectives it entered before it left
	Phase string `json:"phase"` // the collective this rank waits in
	Cause error  `json:"-"`
	// CauseText is Cause's text, which survives JSON.
	CauseText string `json:"cause,omitempty"`
}

func (e *LeftError) Error() string {
	why := "closed the session"
	if e.Cause != nil {
		why = "left the session: " + e.Cause.Error()
	} else if e.CauseText != "" {
		why = "left the session: " + e.CauseText
	}
	return fmt.Sprintf("rank %d %s, before the %s (it took part in %d collectives): every rank must make the same calls", e.Rank, why, e.Phase, e.After)
}

// Unwrap returns why the peer left.
func (e *LeftError) Unwrap() error { return e.Cause }
