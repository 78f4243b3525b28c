// Package netem emulates a network on one machine, as Linux's netem does
// for a real interface: Transport wraps any transport.Transport and
// delays every operation between ranks of different domains as a network
// interface of a given rate per rank would, so that a route's schedule,
// and the bound it is measured against, show on CPU ranks of one host.
//
//	nic, err := netem.NewNIC(200e6) // 200 MB/s each way, shared by the rank's transports
//	t := netem.Wrap(inner, topo, nic)
//
// A session wraps its transports so when Options.EmulateNetBW is set.
package netem

import (
	"context"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/m2n-dev/m2n/reshard"
	"github.com/m2n-dev/m2n/transport"
)

// Transport is a transport.Transport that caps the rate at which one rank
// sends to, and receives from, ranks of other domains, as if each rank had
// a network interface of the given bandwidth, so that the schedule of a
// route can be measured on one machine. Traffic inside a domain runs at the
// real speed. The inner transport moves the bytes; Transport only delays
// completion: every cross-domain operation occupies the rank's sending or
// receiving side for bytes/rate seconds, one after another, and a round
// completes when its real transfers have and its last emulated operation
// would have.
type Transport struct {
	inner transport.Transport
	topo  reshard.Topology
	nic   *NIC
	now   func() time.Time
	sleep func(context.Context, time.Duration) error
}

// NIC is one rank's emulated network interface: a sending side and a
// receiving side of one rate, each busy until some time. The transports of
// one rank (its pipeline stages' calls, which run at once) share its NIC,
// as they share the rank's one real interface. A NIC is safe for
// concurrent use.
type NIC struct {
	mu       sync.Mutex
	rate     float64 // bytes per second
	sendFree time.Time
	recvFree time.Time
}

// MinRate is the slowest network a NIC emulates: 1 byte per second. A
// slower rate is a mistake (a unit off, or 1e-300), not a network, and its
// delays would overflow time.Duration.
const MinRate = 1.0

// NewNIC returns an interface of bytesPerSec each way. A rate that is not
// finite or is below MinRate is a *reshard.FieldError naming the value.
func NewNIC(bytesPerSec float64) (*NIC, error) {
	if !(bytesPerSec >= MinRate) || math.IsInf(bytesPerSec, 0) {
		return nil, &reshard.FieldError{Field: "emulated network rate", Got: fmt.Sprintf("%g bytes/s", bytesPerSec),
			Want: fmt.Sprintf("a finite rate of at least %g byte/s", MinRate), Why: "slower rates make delays no clock can hold"}
	}
	return &NIC{rate: bytesPerSec}, nil
}

// Rate returns the interface's rate in bytes per second.
func (n *NIC) Rate() float64 { return n.rate }

// Wrap wraps t with nic's network between the domains of topo: every
// transport of a rank that Wrap wraps with the same nic shares its rate.
// Start fails, naming the bytes and the rate, when a delay would not fit
// a time.Duration (about 292 years).
func Wrap(t transport.Transport, topo reshard.Topology, nic *NIC) *Transport {
	return &Transport{inner: t, topo: topo, nic: nic, now: time.Now, sleep: sleepCtx}
}

// New wraps t with a network interface of its own of bytesPerSec per
// direction (NewNIC's rate and error) between the domains of topo.
func New(t transport.Transport, topo reshard.Topology, bytesPerSec float64) (*Transport, error) {
	nic, err := NewNIC(bytesPerSec)
	if err != nil {
		return nil, err
	}
	return Wrap(t, topo, nic), nil
}

// sleepCtx waits d or until ctx ends; with a poll in ctx
// (transport.WithPoll) it wakes every transport.PollEvery to call it.
func sleepCtx(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	if poll := transport.NewPoller(ctx); poll != nil {
		end := time.Now().Add(d)
		for {
			if err := poll.Check(); err != nil {
				return err
			}
			left := time.Until(end)
			if left <= 0 {
				return nil
			}
			if err := sleepTimer(ctx, min(left, transport.PollEvery)); err != nil {
				return err
			}
		}
	}
	return sleepTimer(ctx, d)
}

func sleepTimer(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Rank implements transport.Transport.
func (e *Transport) Rank() int { return e.inner.Rank() }

// Size implements transport.Transport.
func (e *Transport) Size() int { return e.inner.Size() }

// Abort implements transport.Transport.
func (e *Transport) Abort(reason error) { e.inner.Abort(reason) }

// PollsInline forwards the inner transport's (transport.InlinePoller):
// the emulated wait after the transfers polls too.
func (e *Transport) PollsInline() bool { return transport.PollsInline(e.inner) }

// MaxInPlaceBytes forwards the inner transport's in-place support.
func (e *Transport) MaxInPlaceBytes() int64 { return transport.MaxInPlace(e.inner) }

// Start posts the round on the inner transport and books its cross-domain
// operations on the emulated interfaces.
//
// The delays are booked before the round is posted: a delay that would not
// fit a time.Duration, counted from now and including what the interface
// has booked already, is an error naming the bytes and the rate, and
// nothing is posted.
func (e *Transport) Start(ops []transport.Op) (transport.Pending, error) {
	nic := e.nic
	nic.mu.Lock()
	defer nic.mu.Unlock()
	now := e.now()
	done := now
	me := e.Rank()
	sendFree, recvFree := nic.sendFree, nic.recvFree
	for _, o := range ops {
		if e.topo.Class(me, o.Peer) != reshard.LinkNetwork {
			continue
		}
		free := &recvFree
		if o.Send {
			free = &sendFree
		}
		start := *free
		if start.Before(now) {
			start = now
		}
		// this op's delay, and the booking from now with it, must fit a
		// time.Duration.
		secs := float64(o.Len) / nic.rate
		queued := start.Sub(now)
		if !(secs*float64(time.Second) < float64(math.MaxInt64-queued)) {
			return nil, &reshard.FieldError{Field: "emulated network rate", Got: fmt.Sprintf("%g bytes/s", nic.rate),
				Why: fmt.Sprintf("%d bytes to or from rank %d would complete %.3g s from now, more than a time.Duration holds",
					o.Len, o.Peer, queued.Seconds()+secs)}
		}
		*free = start.Add(time.Duration(secs * float64(time.Second)))
		if free.After(done) {
			done = *free
		}
	}
	p, err := e.inner.Start(ops)
	if err != nil {
		return nil, err
	}
	nic.sendFree, nic.recvFree = sendFree, recvFree
	return &emulatedRound{inner: p, until: done, e: e}, nil
}

type emulatedRound struct {
	inner transport.Pending
	until time.Time
	e     *Transport
}

// Wait completes the real transfers, then waits out the emulated time.
func (r *emulatedRound) Wait(ctx context.Context) error {
	if err := r.inner.Wait(ctx); err != nil {
		return err
	}
	return r.e.sleep(ctx, r.until.Sub(r.e.now()))
}
