package hier

import (
	"context"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/m2n-dev/m2n/reshard"
	"github.com/m2n-dev/m2n/transport"
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
	inner transport.Transport
	topo  reshard.Topology
	nic   *NIC
	err   error // a rate Emulate was given that ValidateRate refuses
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

// NewNIC returns an interface of bytesPerSec each way, or ValidateRate's
// error.
func NewNIC(bytesPerSec float64) (*NIC, error) {
	if err := ValidateRate(bytesPerSec); err != nil {
		return nil, err
	}
	return &NIC{rate: bytesPerSec}, nil
}

// Rate returns the interface's rate in bytes per second.
func (n *NIC) Rate() float64 { return n.rate }

// MinEmulatedRate is the slowest network Emulate emulates: 1 byte per
// second. A slower rate is a mistake (a unit off, or 1e-300), not a
// network, and its delays would overflow time.Duration.
const MinEmulatedRate = 1.0

// ValidateRate checks an emulated network rate in bytes per second: finite
// and at least MinEmulatedRate. The error names the value.
func ValidateRate(bytesPerSec float64) error {
	if !(bytesPerSec >= MinEmulatedRate) || math.IsInf(bytesPerSec, 0) {
		return &reshard.FieldError{Field: "emulated network rate", Got: fmt.Sprintf("%g bytes/s", bytesPerSec),
			Want: fmt.Sprintf("a finite rate of at least %g byte/s", MinEmulatedRate), Why: "slower rates make delays no clock can hold"}
	}
	return nil
}

// NewEmulated wraps t with a network of bytesPerSec per rank and direction
// between the domains of topo, or returns ValidateRate's error.
func NewEmulated(t transport.Transport, topo reshard.Topology, bytesPerSec float64) (*Emulated, error) {
	if err := ValidateRate(bytesPerSec); err != nil {
		return nil, err
	}
	return Emulate(t, topo, bytesPerSec), nil
}

// Emulate wraps t with a network of bytesPerSec per rank and direction
// between the domains of topo. A rate ValidateRate refuses makes every
// Start fail with that error (no round runs undelayed); NewEmulated
// reports it at once instead. Start also fails, naming the bytes and the
// rate, when a delay would not fit a time.Duration (about 292 years).
func Emulate(t transport.Transport, topo reshard.Topology, bytesPerSec float64) *Emulated {
	return &Emulated{inner: t, topo: topo, nic: &NIC{rate: bytesPerSec}, err: ValidateRate(bytesPerSec), now: time.Now, sleep: sleepCtx}
}

// EmulateOn wraps t with nic's network between the domains of topo: every
// transport of a rank that EmulateOn wraps with the same nic shares its
// rate.
func EmulateOn(t transport.Transport, topo reshard.Topology, nic *NIC) *Emulated {
	return &Emulated{inner: t, topo: topo, nic: nic, now: time.Now, sleep: sleepCtx}
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
func (e *Emulated) MaxInPlaceBytes() int64 { return transport.MaxInPlace(e.inner) }

// Start posts the round on the inner transport and books its cross-domain
// operations on the emulated interfaces.
//
// The delays are booked before the round is posted: a delay that would not
// fit a time.Duration, counted from now and including what the interface
// has booked already, is an error naming the bytes and the rate, and
// nothing is posted.
func (e *Emulated) Start(ops []transport.Op) (transport.Pending, error) {
	if e.err != nil {
		return nil, e.err
	}
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
	e     *Emulated
}

// Wait completes the real transfers, then waits out the emulated time.
func (r *emulatedRound) Wait(ctx context.Context) error {
	if err := r.inner.Wait(ctx); err != nil {
		return err
	}
	return r.e.sleep(ctx, r.until.Sub(r.e.now()))
}
