// Package inproc is a reshard.Transport whose ranks are goroutines of one
// process, exchanging HostBuffers by copying. It runs the same executor and
// the same conformance suite as the MPI and NCCL transports, with no
// launcher, which makes it the transport of unit tests and of single-process
// tools.
package inproc

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/m2n-dev/m2n/reshard"
)

// World is a communicator of n in-process ranks.
type World struct {
	n       int
	inPlace bool
	mu      sync.Mutex
	queues  map[[2]int]*queue // by (sender, receiver)
	abort   chan struct{}
	reason  error
}

type queue struct {
	sends, recvs []*op
}

type op struct {
	buf   reshard.HostBuffer // the contiguous bytes, or the whole buffer of a strided op
	at    *reshard.Strided   // the region of buf, for an in-place op
	round *round
}

// bytes returns the op's bytes in wire order (a copy for a strided op).
func (o *op) bytes() []byte {
	if o.at == nil {
		return o.buf
	}
	out := make([]byte, o.at.Bytes())
	if err := (reshard.HostMemory{}).Pack(reshard.HostBuffer(out), 0, o.buf, *o.at); err != nil {
		panic(err) // Start checked the region
	}
	return out
}

func (o *op) len() int64 {
	if o.at == nil {
		return int64(len(o.buf))
	}
	return o.at.Bytes()
}

type round struct {
	mu      sync.Mutex
	left    int
	err     error
	done    chan struct{}
	aborted <-chan struct{}
	world   *World
}

// NewWorld returns a communicator of n ranks.
func NewWorld(n int) *World {
	return &World{n: n, queues: map[[2]int]*queue{}, abort: make(chan struct{})}
}

// NewWorldInPlace returns a communicator of n ranks whose transports move
// strided regions in place (they implement reshard.InPlaceTransport), as
// the MPI transport does with derived datatypes.
func NewWorldInPlace(n int) *World {
	w := NewWorld(n)
	w.inPlace = true
	return w
}

// Transport returns rank's endpoint.
func (w *World) Transport(rank int) reshard.Transport { return &transport{w: w, rank: rank} }

type transport struct {
	w    *World
	rank int
}

func (t *transport) Rank() int { return t.rank }

// MaxInPlaceBytes implements reshard.InPlaceTransport.
func (t *transport) MaxInPlaceBytes() int64 {
	if t.w.inPlace {
		return 1 << 40
	}
	return 0
}
func (t *transport) Size() int { return t.w.n }

// ErrAborted is returned by Wait after any rank aborted the world.
var ErrAborted = errors.New("inproc: communicator aborted")

func (t *transport) Abort(reason error) {
	t.w.mu.Lock()
	defer t.w.mu.Unlock()
	select {
	case <-t.w.abort:
	default:
		t.w.reason = fmt.Errorf("rank %d: %w", t.rank, reason)
		close(t.w.abort)
	}
}

func (t *transport) Start(ops []reshard.Op) (reshard.Pending, error) {
	r := &round{left: len(ops), done: make(chan struct{}), aborted: t.w.abort, world: t.w}
	if len(ops) == 0 {
		close(r.done)
		return r, nil
	}
	for _, o := range ops {
		if o.Peer < 0 || o.Peer >= t.w.n {
			return nil, fmt.Errorf("inproc: peer %d outside a world of %d", o.Peer, t.w.n)
		}
		hb, ok := o.Buf.(reshard.HostBuffer)
		if !ok {
			return nil, fmt.Errorf("inproc: buffer %T is not host memory", o.Buf)
		}
		if o.InPlace {
			if !t.w.inPlace {
				return nil, fmt.Errorf("inproc: in-place op on a world without in-place support")
			}
			// an empty pack proves the region lies inside the buffer.
			if err := (reshard.HostMemory{}).Pack(reshard.HostBuffer(make([]byte, o.At.Bytes())), 0, hb, o.At); err != nil {
				return nil, err
			}
			continue
		}
		if o.Off < 0 || o.Len < 0 || o.Off+o.Len > hb.Len() {
			return nil, fmt.Errorf("inproc: [%d, %d) outside a buffer of %d bytes", o.Off, o.Off+o.Len, hb.Len())
		}
	}
	t.w.mu.Lock()
	defer t.w.mu.Unlock()
	for _, o := range ops {
		mine := &op{round: r}
		if o.InPlace {
			at := o.At
			mine.buf, mine.at = o.Buf.(reshard.HostBuffer), &at
		} else {
			mine.buf = o.Buf.(reshard.HostBuffer)[o.Off : o.Off+o.Len]
		}
		key := [2]int{o.Peer, t.rank}
		if o.Send {
			key = [2]int{t.rank, o.Peer}
		}
		q := t.w.queues[key]
		if q == nil {
			q = &queue{}
			t.w.queues[key] = q
		}
		if o.Send {
			if len(q.recvs) > 0 {
				match(mine, q.recvs[0])
				q.recvs = q.recvs[1:]
			} else {
				q.sends = append(q.sends, mine)
			}
		} else {
			if len(q.sends) > 0 {
				match(q.sends[0], mine)
				q.sends = q.sends[1:]
			} else {
				q.recvs = append(q.recvs, mine)
			}
		}
	}
	return r, nil
}

// match copies a send into its receive and completes both.
func match(send, recv *op) {
	var err error
	switch {
	case send.len() != recv.len():
		err = fmt.Errorf("inproc: message of %d bytes into a receive of %d", send.len(), recv.len())
	case recv.at == nil:
		copy(recv.buf, send.bytes())
	default:
		err = (reshard.HostMemory{}).Unpack(recv.buf, *recv.at, reshard.HostBuffer(send.bytes()), 0)
	}
	send.round.finish(err)
	recv.round.finish(err)
}

func (r *round) finish(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil && r.err == nil {
		r.err = err
	}
	r.left--
	if r.left == 0 {
		close(r.done)
	}
}

func (r *round) Wait(ctx context.Context) error {
	select {
	case <-r.done:
		r.mu.Lock()
		defer r.mu.Unlock()
		return r.err
	case <-r.aborted:
		r.world.mu.Lock()
		defer r.world.mu.Unlock()
		return fmt.Errorf("%w: %v", ErrAborted, r.world.reason)
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Run starts fn on every rank of a new world of n ranks, each in its own
// goroutine, and returns the errors in rank order once all have returned.
func Run(n int, fn func(t reshard.Transport) error) []error {
	return NewWorld(n).Run(fn)
}

// Run starts fn on every rank of w, each in its own goroutine, and returns
// the errors in rank order once all have returned.
func (w *World) Run(fn func(t reshard.Transport) error) []error {
	n := w.n
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := 0; r < n; r++ {
		wg.Add(1)
		go func(r int) {
			defer wg.Done()
			errs[r] = fn(w.Transport(r))
		}(r)
	}
	wg.Wait()
	return errs
}
