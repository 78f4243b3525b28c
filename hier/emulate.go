package hier

import (
	"context"
	"time"

	"github.com/m2n-dev/m2n/reshard"
)

// Emulated is a reshard.Transport that caps the rate at which one rank
// sends to, and receives from, ranks of other domains, as if each rank had
// a network interface of the given bandwidth, so that the schedule of a
// route can be measured on one machine. Traffic inside a domain runs at the
// real speed. The inner transport moves the bytes; Emulated only delays
// completion: every cross-domain operation occupies the rank's sending or
// receiving side for bytes/rate seconds, one after another, and a round
// completes when its real transfers have and its last emulated operation
// would have.
type Emulated struct {
	inner    reshard.Transport
	topo     reshard.Topology
	rate     float64 // bytes per second
	sendFree time.Time
	recvFree time.Time
	now      func() time.Time
	sleep    func(context.Context, time.Duration) error
}

// Emulate wraps t with a network of bytesPerSec per rank and direction
// between the domains of topo.
func Emulate(t reshard.Transport, topo reshard.Topology, bytesPerSec float64) *Emulated {
	return &Emulated{inner: t, topo: topo, rate: bytesPerSec, now: time.Now, sleep: sleepCtx}
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Rank implements reshard.Transport.
func (e *Emulated) Rank() int { return e.inner.Rank() }

// Size implements reshard.Transport.
func (e *Emulated) Size() int { return e.inner.Size() }

// Abort implements reshard.Transport.
func (e *Emulated) Abort(reason error) { e.inner.Abort(reason) }

// MaxInPlaceBytes forwards the inner transport's in-place support.
func (e *Emulated) MaxInPlaceBytes() int64 { return reshard.MaxInPlace(e.inner) }

// Start posts the round on the inner transport and books its cross-domain
// operations on the emulated interfaces.
func (e *Emulated) Start(ops []reshard.Op) (reshard.Pending, error) {
	p, err := e.inner.Start(ops)
	if err != nil {
		return nil, err
	}
	now := e.now()
	done := now
	me := e.Rank()
	for _, o := range ops {
		if e.topo.Class(me, o.Peer) != reshard.LinkNetwork {
			continue
		}
		d := time.Duration(float64(o.Len) / e.rate * float64(time.Second))
		free := &e.recvFree
		if o.Send {
			free = &e.sendFree
		}
		start := *free
		if start.Before(now) {
			start = now
		}
		*free = start.Add(d)
		if free.After(done) {
			done = *free
		}
	}
	return &emulatedRound{inner: p, until: done, e: e}, nil
}

type emulatedRound struct {
	inner reshard.Pending
	until time.Time
	e     *Emulated
}

// Wait completes the real transfers, then waits out the emulated time.
func (r *emulatedRound) Wait(ctx context.Context) error {
	if err := r.inner.Wait(ctx); err != nil {
		return err
	}
	return r.e.sleep(ctx, r.until.Sub(r.e.now()))
}
