package control

import "context"

// Collective is the control-plane collective a group of ranks agrees
// over (a refit call's ranks: the same ones, and in the same order, as
// its transport's). Every rank must make the same collective calls in the same
// order. Implementations bound every call (package session's returns a
// *TimeoutError naming the ranks that never arrived).
type Collective interface {
	Rank() int
	Size() int
	// Allgather gathers len(send) bytes from every rank into recv, rank r's
	// at recv[r*len(send):].
	Allgather(ctx context.Context, send, recv []byte) error
	// Allgatherv gathers counts[r] bytes from rank r into recv at displs[r].
	Allgatherv(ctx context.Context, send, recv []byte, counts, displs []int64) error
}

// Group is the control plane of the ranks a refit.Runtime's calls run on:
// bounded collectives over them (in the transport's rank order) and the
// channel on which a rank that gives up tells the others. Package session
// implements it over MPI; Plain makes one from a bare Collective.
type Group interface {
	Collective
	// Watch returns a context that ends, with the notice as its cause,
	// when a peer's abort notice arrives, and a function that stops
	// watching. The waits of refit's host driver run under it. With inline (a
	// transport.InlinePoller), the context carries the watch as a poll
	// (transport.WithPoll) that the transport's waits call; otherwise the
	// group watches on a goroutine of its own.
	Watch(ctx context.Context, inline bool) (context.Context, func())
	// Fail ends a preparation or a step that failed: it returns nil for
	// nil; an error every rank agreed on (*ValidationError,
	// *AgreementError, refit's *ChecksumError and *CallMismatchError, a
	// session's memory refusal) comes back as it is and the group stays usable; any
	// other error is this rank's alone, so Fail aborts the group, telling
	// every peer why, and returns the *AbortError.
	Fail(err error) error
	// Usable returns why the group can run no more steps (closed,
	// aborted), or nil.
	Usable() error
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
