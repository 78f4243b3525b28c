package mpi

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/m2n-dev/m2n/transport"
)

// Transport is the host-memory transport.Transport over an MPI communicator.
// It moves reshard.HostBuffers with nonblocking MPI point-to-point calls.
type Transport struct {
	comm    *Comm
	inPlace bool
	types   typeCache // the in-place shapes' datatypes, built once each
}

// NewTransport returns a transport over c. Its messages carry each
// operation's Op.Tag as their MPI tag (the call and step they belong to);
// give it a communicator of its own (c.Dup()) when the program sends other
// messages on c.
//
// The transport moves strided regions in place with derived datatypes
// (see isendStrided), so the executor packs nothing; inPlace false turns
// that off, and strided regions then go through the executor's staging.
// It builds each region shape's datatype once and keeps it until Close.
func NewTransport(c *Comm, inPlace bool) *Transport { return &Transport{comm: c, inPlace: inPlace} }

// Close frees the datatypes the transport built; operations already posted
// complete normally, and a later Start builds them again. It does not free
// the communicator.
func (t *Transport) Close() error { return t.types.close() }

// MaxInPlaceBytes implements reshard.InPlaceTransport.
func (t *Transport) MaxInPlaceBytes() int64 {
	if !t.inPlace {
		return 0
	}
	return maxStridedBytes
}

// Rank returns this rank in the communicator.
func (t *Transport) Rank() int { return t.comm.Rank() }

// Size returns the communicator size.
func (t *Transport) Size() int { return t.comm.Size() }

// Comm returns the communicator.
func (t *Transport) Comm() *Comm { return t.comm }

// Start posts every receive of the round, then every send, and returns.
func (t *Transport) Start(ops []transport.Op) (transport.Pending, error) {
	reqs := make([]*Request, 0, len(ops))
	peers := make([]int, 0, len(ops))
	post := func(o transport.Op) error {
		hb, ok := o.Buf.(transport.HostBuffer)
		if !ok {
			return fmt.Errorf("mpi: transport buffer %T is not host memory", o.Buf)
		}
		if !o.InPlace && (o.Off < 0 || o.Len < 0 || o.Off+o.Len > hb.Len()) {
			return fmt.Errorf("mpi: [%d, %d) outside a buffer of %d bytes", o.Off, o.Off+o.Len, hb.Len())
		}
		var r *Request
		var err error
		if o.InPlace {
			r, err = t.postInPlace(hb, o)
			if err != nil {
				return err
			}
			reqs, peers = append(reqs, r), append(peers, o.Peer)
			return nil
		}
		b := []byte(hb[o.Off : o.Off+o.Len : o.Off+o.Len])
		if o.Send {
			r, err = t.comm.Isend(b, o.Peer, int(o.Tag))
		} else {
			r, err = t.comm.Irecv(b, o.Peer, int(o.Tag))
		}
		if err != nil {
			return err
		}
		reqs, peers = append(reqs, r), append(peers, o.Peer)
		return nil
	}
	for pass := 0; pass < 2; pass++ {
		for _, o := range ops {
			if o.Send != (pass == 1) {
				continue
			}
			if err := post(o); err != nil {
				return nil, fmt.Errorf("peer %d: %w", o.Peer, err)
			}
		}
	}
	return &pending{reqs: reqs, peers: peers}, nil
}

// postInPlace posts in-place operation o on buf through its shape's cached
// datatype (one built per message where the cache is full).
func (t *Transport) postInPlace(buf transport.HostBuffer, o transport.Op) (*Request, error) {
	op := "MPI_Irecv"
	if o.Send {
		op = "MPI_Isend"
	}
	if err := checkShape(op, o.At); err != nil { // named as the operation, not the datatype
		return nil, err
	}
	d, err := t.types.get(o.At)
	switch {
	case err != nil:
		return nil, err
	case d == nil && o.Send:
		return t.comm.isendStrided(buf, o.At, o.Peer, int(o.Tag))
	case d == nil:
		return t.comm.irecvStrided(buf, o.At, o.Peer, int(o.Tag))
	case o.Send:
		return t.comm.IsendType(buf, o.At.Offset, d, o.Peer, int(o.Tag))
	}
	return t.comm.IrecvType(buf, o.At.Offset, d, o.Peer, int(o.Tag))
}

// Abort ends every process of the communicator (MPI_Abort); it does not
// return.
func (t *Transport) Abort(reason error) {
	Abort(t.comm, 3)
}

type pending struct {
	reqs  []*Request
	peers []int
}

// Incomplete implements reshard.Incompleter: the peers whose operations of
// the round have not completed.
func (p *pending) Incomplete() []int {
	var out []int
	for i, r := range p.reqs {
		if done, err := r.Test(); err == nil && done {
			continue
		}
		if !slices.Contains(out, p.peers[i]) {
			out = append(out, p.peers[i])
		}
	}
	slices.Sort(out)
	return out
}

// Wait completes the round. Without a deadline or a poll it blocks in
// MPI_Waitall; otherwise it polls MPI_Testall (which drives MPI's progress
// engine, so the transfer runs at full speed; an idle wait,
// transport.WithIdleWaits, sleeps between polls after its first
// idleSpins, 25 to 200 us: idleSleep), calls ctx's poll
// (transport.WithPoll) every transport.PollEvery on this goroutine, and
// returns ctx's error when it ends, or the poll's, leaving the round
// unfinished: the caller must then Abort. The requests of a round left
// unfinished stay held by the package (see Request), their buffers
// pinned, while the job ends.
func (p *pending) Wait(ctx context.Context) error {
	poll := transport.NewPoller(ctx)
	if ctx.Done() == nil && poll == nil {
		return waitall(p.reqs)
	}
	var t tester
	idle := transport.IdleWaits(ctx)
	for spin := 0; ; spin++ {
		if idle && spin >= idleSpins {
			time.Sleep(idleSleep(spin))
		}
		done, err := t.testall(p.reqs)
		if err != nil {
			return err
		}
		if done {
			return nil
		}
		if err := poll.Check(); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		default:
		}
	}
}

// idleSpins is how many polls an idle wait (transport.WithIdleWaits)
// makes back to back before it sleeps between them.
const idleSpins = 100

// idleSleep is an idle wait's sleep before poll spin: 25 us, doubling
// every 32 polls up to 200 us.
func idleSleep(spin int) time.Duration {
	return min(25*time.Microsecond<<min((spin-idleSpins)/32, 3), 200*time.Microsecond)
}

// PollsInline implements transport.InlinePoller: a round's Wait calls its
// context's poll.
func (t *Transport) PollsInline() bool { return true }
