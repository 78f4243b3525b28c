package transport

import (
	"context"
	"time"
)

// PollEvery is how often a Pending of an InlinePoller calls the poll of
// its wait's context (WithPoll) while it waits.
const PollEvery = time.Millisecond

// InlinePoller is a Transport whose rounds, while they wait, call the
// poll their context carries (WithPoll) on the waiting goroutine, at
// least every PollEvery, and stop at its first error. The runtime then
// watches for a peer's abort notice in the wait itself, instead of on a
// goroutine of its own that would poll the control plane beside the
// transfer (on MPI, two threads in the progress engine at once).
type InlinePoller interface {
	Transport
	// PollsInline reports whether the rounds poll inline; a transport that
	// wraps another forwards it (PollsInline).
	PollsInline() bool
}

// PollsInline reports whether t's rounds call their context's poll.
func PollsInline(t Transport) bool {
	ip, ok := t.(InlinePoller)
	return ok && ip.PollsInline()
}

// PollFunc is a check a round makes while it waits: since is the time
// since the wait's previous call (0 at its first), so that a check can
// tell a process that did not run (stopped, starved) from one that
// waited. An error ends the wait; the poll is expected to have cancelled
// the wait's context with it as the cause.
type PollFunc func(since time.Duration) error

type pollKey struct{}

type idleKey struct{}

// WithIdleWaits returns ctx marking its waits as idle ones: rounds of
// small messages whose peers are busy with work of their own (a delta
// step's lengths and encodings, while the sources encode and the
// destinations apply), which a transport that completes rounds by
// polling (MPI) may wait for by sleeping between polls once a round did
// not complete at once, so that the wait leaves the CPU to the ranks it
// waits for on an oversubscribed host. A round that moves much data must
// not wait idly: a sleep stalls the progress of a message in flight.
func WithIdleWaits(ctx context.Context) context.Context {
	return context.WithValue(ctx, idleKey{}, true)
}

// IdleWaits reports whether ctx's waits are idle ones (WithIdleWaits).
func IdleWaits(ctx context.Context) bool {
	idle, _ := ctx.Value(idleKey{}).(bool)
	return idle
}

// WithPoll returns ctx carrying poll, for the waits of an InlinePoller.
func WithPoll(ctx context.Context, poll PollFunc) context.Context {
	return context.WithValue(ctx, pollKey{}, poll)
}

// PollOf returns the poll ctx carries (WithPoll), or nil.
func PollOf(ctx context.Context) PollFunc {
	p, _ := ctx.Value(pollKey{}).(PollFunc)
	return p
}

// Poller calls a wait's poll at most every PollEvery: a wait loop calls
// Check every time around.
type Poller struct {
	Poll PollFunc
	last time.Time
}

// PollOnce calls ctx's poll (WithPoll) once, as a wait's first poll does,
// and returns its error (nil without a poll): what a run checks after its
// last wait, where a pause of the process since would go unseen until
// the next run's waits.
func PollOnce(ctx context.Context) error {
	if p := PollOf(ctx); p != nil {
		return p(0)
	}
	return nil
}

// NewPoller returns the Poller of ctx's poll (nil: no poll).
func NewPoller(ctx context.Context) *Poller {
	if p := PollOf(ctx); p != nil {
		return &Poller{Poll: p}
	}
	return nil
}

// Check polls if PollEvery has passed since the last poll (or there was
// none) and returns the poll's error. A nil Poller does nothing.
func (p *Poller) Check() error {
	if p == nil {
		return nil
	}
	now := time.Now()
	if !p.last.IsZero() && now.Sub(p.last) < PollEvery {
		return nil
	}
	var since time.Duration
	if !p.last.IsZero() {
		since = now.Sub(p.last)
	}
	p.last = now
	return p.Poll(since)
}
