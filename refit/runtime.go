package refit

import (
	"context"
	"errors"
	"sync"
)

// Group is the control plane of the ranks a runtime's calls run on:
// bounded collectives over them (in the transport's rank order) and the
// channel on which a rank that gives up tells the others. Package session
// implements it over MPI; Plain makes one from a bare Collective.
type Group interface {
	Collective
	// Watch returns a context that ends, with the notice as its cause,
	// when a peer's abort notice arrives, and a function that stops
	// watching. The host driver's waits run under it. With inline (a
	// transport.InlinePoller), the context carries the watch as a poll
	// (transport.WithPoll) that the transport's waits call; otherwise the
	// group watches on a goroutine of its own.
	Watch(ctx context.Context, inline bool) (context.Context, func())
	// Fail ends a preparation or a step that failed: it returns nil for
	// nil; an error every rank agreed on (*ValidationError,
	// *AgreementError, *ChecksumError, *CallMismatchError, a session's
	// memory refusal) comes back as it is and the group stays usable; any
	// other error is this rank's alone, so Fail aborts the group, telling
	// every peer why, and returns the *AbortError.
	Fail(err error) error
	// Usable returns why the group can run no more steps (closed,
	// aborted), or nil.
	Usable() error
}

// Runtime is the step runtime of one group of ranks: it prepares the
// group's calls, numbering them as it goes (every rank prepares the same
// calls in the same order, so a call's number is its identity on every
// rank), and runs one step of one call at a time, whichever goroutines
// ask. A rank in several pipeline stages has one group, and one Runtime,
// per stage; those run concurrently.
type Runtime struct {
	g        Group
	mu       sync.Mutex    // held for a step, begin to end, and for a Prepare
	prepared int           // the calls prepared so far: the last one's number
	open     map[int]*Call // the calls not closed yet, by number
	launched *Call         // the call whose launched step no Wait has ended
}

// New returns the runtime of group g.
func New(g Group) *Runtime { return &Runtime{g: g, open: map[int]*Call{}} }

// Close closes every call of the runtime not closed yet (Call.Close), and
// returns their errors, joined.
func (rt *Runtime) Close() error {
	rt.mu.Lock()
	open := make([]*Call, 0, len(rt.open))
	for _, c := range rt.open {
		open = append(open, c)
	}
	rt.mu.Unlock()
	var errs []error
	for _, c := range open {
		errs = append(errs, c.Close())
	}
	return errors.Join(errs...)
}

// Group returns the runtime's group.
func (rt *Runtime) Group() Group { return rt.g }

// endLaunched ends the step Launch queued on any call of the group, so
// that a new step of another call can begin.
func (rt *Runtime) endLaunched(ctx context.Context) error {
	if rt.launched == nil {
		return nil
	}
	_, err := rt.launched.endLaunched(ctx)
	return err
}

// Plain returns a Group over coll with no abort channel: Watch does
// nothing, Fail returns every error as it is (the caller aborts its
// transport after an error of its own) and the group is always usable. It
// suits ranks that live in one process (package transport/inproc) and
// tests.
func Plain(coll Collective) Group { return plain{coll} }

type plain struct{ Collective }

func (plain) Watch(ctx context.Context, _ bool) (context.Context, func()) { return ctx, func() {} }
func (plain) Fail(err error) error                                        { return err }
func (plain) Usable() error                                               { return nil }
