// Package inproc is a transport.Transport whose ranks are goroutines of one
// process. A message is one Memory.Copy from the sender's buffer to the
// receiver's, so the ranks may hold host memory (transport.HostMemory, the
// default) or device memory of one GPU (a cudamem.Memory). It runs the same
// drivers and the same conformance suite as the MPI and NCCL transports,
// with no launcher, which makes it the endpoint of unit tests, of GPU tests
// on a machine with one GPU, and of single-process tools.
package inproc

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/m2n-dev/m2n/control"
	"github.com/m2n-dev/m2n/strided"
	"github.com/m2n-dev/m2n/transport"
)

// World is a communicator of n in-process ranks.
type World struct {
	n       int
	inPlace bool
	mem     transport.Memory
	mu      sync.Mutex
	queues  map[[3]int]*queue // by (sender, receiver, tag)
	abort   chan struct{}
	reason  error
	gather  *gather
}

type queue struct {
	sends, recvs []*op
}

// op is one posted operation: a region of a buffer (contiguous ops are a
// single run).
type op struct {
	buf   transport.Buffer
	at    strided.Desc
	round *round
}

type round struct {
	mu      sync.Mutex
	left    int
	err     error
	done    chan struct{}
	aborted <-chan struct{}
	world   *World
}

// NewWorld returns a communicator of n ranks over host memory.
func NewWorld(n int) *World {
	return &World{n: n, mem: transport.HostMemory{}, queues: map[[3]int]*queue{}, abort: make(chan struct{})}
}

// NewWorldInPlace returns a communicator of n ranks whose transports move
// strided regions in place (they implement reshard.InPlaceTransport), as
// the MPI endpoint does with derived datatypes.
func NewWorldInPlace(n int) *World {
	w := NewWorld(n)
	w.inPlace = true
	return w
}

// WithMemory makes the world copy messages with mem, which must be able to
// copy between the buffers every rank uses (one GPU's memory, say), and
// returns w.
func (w *World) WithMemory(mem transport.Memory) *World {
	w.mem = mem
	return w
}

// Transport returns rank's endpoint.
func (w *World) Transport(rank int) transport.Transport { return &endpoint{w: w, rank: rank} }

type endpoint struct {
	w    *World
	rank int
}

func (t *endpoint) Rank() int { return t.rank }
func (t *endpoint) Size() int { return t.w.n }

// MaxInPlaceBytes implements reshard.InPlaceTransport.
func (t *endpoint) MaxInPlaceBytes() int64 {
	if t.w.inPlace {
		return 1 << 40
	}
	return 0
}

// ErrAborted is returned by Wait after any rank aborted the world.
var ErrAborted = errors.New("inproc: communicator aborted")

func (t *endpoint) Abort(reason error) {
	t.w.mu.Lock()
	defer t.w.mu.Unlock()
	select {
	case <-t.w.abort:
	default:
		t.w.reason = fmt.Errorf("rank %d: %w", t.rank, reason)
		close(t.w.abort)
	}
}

// region returns the bytes an Op names as a descriptor of its buffer, after
// checking that they lie inside it.
func (t *endpoint) region(o transport.Op) (strided.Desc, error) {
	if o.Peer < 0 || o.Peer >= t.w.n {
		return strided.Desc{}, fmt.Errorf("inproc: peer %d outside a world of %d", o.Peer, t.w.n)
	}
	if o.Buf == nil {
		return strided.Desc{}, fmt.Errorf("inproc: op with no buffer")
	}
	if o.Tag < 0 || o.Tag > transport.MaxTag {
		return strided.Desc{}, fmt.Errorf("inproc: tag %d outside [0, %d]", o.Tag, transport.MaxTag)
	}
	at := strided.Desc{Offset: o.Off, Run: o.Len}
	if o.InPlace {
		if !t.w.inPlace {
			return at, fmt.Errorf("inproc: in-place op on a world without in-place support")
		}
		at = o.At
	}
	last := at.Offset
	for i, c := range at.Count {
		if c < 1 {
			return at, fmt.Errorf("inproc: region %v has an empty dim", at)
		}
		last += (c - 1) * at.Stride[i]
	}
	if at.Offset < 0 || at.Run < 0 || last+at.Run > o.Buf.Len() {
		return at, fmt.Errorf("inproc: region %v outside a buffer of %d bytes", at, o.Buf.Len())
	}
	return at, nil
}

func (t *endpoint) Start(ops []transport.Op) (transport.Pending, error) {
	r := &round{left: len(ops), done: make(chan struct{}), aborted: t.w.abort, world: t.w}
	if len(ops) == 0 {
		close(r.done)
		return r, nil
	}
	regions := make([]strided.Desc, len(ops))
	for i, o := range ops {
		at, err := t.region(o)
		if err != nil {
			return nil, err
		}
		regions[i] = at
	}
	t.w.mu.Lock()
	defer t.w.mu.Unlock()
	for i, o := range ops {
		mine := &op{buf: o.Buf, at: regions[i], round: r}
		key := [3]int{o.Peer, t.rank, int(o.Tag)}
		if o.Send {
			key = [3]int{t.rank, o.Peer, int(o.Tag)}
		}
		q := t.w.queues[key]
		if q == nil {
			q = &queue{}
			t.w.queues[key] = q
		}
		if o.Send {
			if len(q.recvs) > 0 {
				t.w.match(mine, q.recvs[0])
				q.recvs = q.recvs[1:]
			} else {
				q.sends = append(q.sends, mine)
			}
		} else {
			if len(q.sends) > 0 {
				t.w.match(q.sends[0], mine)
				q.sends = q.sends[1:]
			} else {
				q.recvs = append(q.recvs, mine)
			}
		}
	}
	return r, nil
}

// match copies a send into its receive and completes both.
func (w *World) match(send, recv *op) {
	var err error
	if send.at.Bytes() != recv.at.Bytes() {
		err = fmt.Errorf("inproc: message of %d bytes into a receive of %d", send.at.Bytes(), recv.at.Bytes())
	} else if send.at.Bytes() > 0 {
		err = w.mem.Copy(recv.buf, recv.at, send.buf, send.at)
		if err == nil {
			err = w.mem.Sync()
		}
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
func Run(n int, fn func(t transport.Transport) error) []error {
	return NewWorld(n).Run(fn)
}

// Run starts fn on every rank of w, each in its own goroutine, and returns
// the errors in rank order once all have returned.
func (w *World) Run(fn func(t transport.Transport) error) []error {
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

// Collective returns rank's endpoint of the world's control-plane
// collective (control.Collective), for calls over in-process ranks. Its
// collectives wait for every rank without a deadline (an aborted world
// ends them).
func (w *World) Collective(rank int) control.Collective { return &collective{w: w, rank: rank} }

type collective struct {
	w    *World
	rank int
}

// gather is the state of the world's collectives: generation gen collects
// one contribution per rank; results alternate between two slots, since a
// rank cannot start generation g+2 before every rank has left g.
type gather struct {
	cond    *sync.Cond
	gen     int
	arrived int
	parts   [][]byte
	result  [2][][]byte
}

func (c *collective) Rank() int { return c.rank }
func (c *collective) Size() int { return c.w.n }

// exchange contributes b and returns every rank's contribution.
func (c *collective) exchange(b []byte) ([][]byte, error) {
	w := c.w
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.gather == nil {
		w.gather = &gather{cond: sync.NewCond(&w.mu), parts: make([][]byte, w.n)}
		go func() { // wake waiters when the world aborts
			<-w.abort
			w.mu.Lock()
			w.gather.cond.Broadcast()
			w.mu.Unlock()
		}()
	}
	g := w.gather
	gen := g.gen
	g.parts[c.rank] = append([]byte(nil), b...)
	g.arrived++
	if g.arrived == w.n {
		g.result[gen%2] = g.parts
		g.parts = make([][]byte, w.n)
		g.arrived = 0
		g.gen++
		g.cond.Broadcast()
	}
	for g.gen == gen {
		select {
		case <-w.abort:
			return nil, fmt.Errorf("%w: %v", ErrAborted, w.reason)
		default:
		}
		g.cond.Wait()
	}
	return g.result[gen%2], nil
}

func (c *collective) Allgather(_ context.Context, send, recv []byte) error {
	parts, err := c.exchange(send)
	if err != nil {
		return err
	}
	if len(recv) != len(send)*c.w.n {
		return fmt.Errorf("inproc: allgather of %d bytes into %d", len(send), len(recv))
	}
	for r, p := range parts {
		if len(p) != len(send) {
			return fmt.Errorf("inproc: allgather: rank %d sent %d bytes, rank %d %d", r, len(p), c.rank, len(send))
		}
		copy(recv[r*len(send):], p)
	}
	return nil
}

func (c *collective) Allgatherv(_ context.Context, send, recv []byte, counts, displs []int64) error {
	parts, err := c.exchange(send)
	if err != nil {
		return err
	}
	for r, p := range parts {
		if int64(len(p)) != counts[r] || displs[r]+counts[r] > int64(len(recv)) {
			return fmt.Errorf("inproc: allgatherv: rank %d sent %d bytes, expected %d", r, len(p), counts[r])
		}
		copy(recv[displs[r]:], p)
	}
	return nil
}
