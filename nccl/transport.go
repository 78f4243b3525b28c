package nccl

import (
	"context"
	"errors"
	"fmt"

	"github.com/m2n-dev/m2n/cuda"
	"github.com/m2n-dev/m2n/cudamem"
	"github.com/m2n-dev/m2n/internal/pace"
	"github.com/m2n-dev/m2n/reshard"
	"github.com/m2n-dev/m2n/transport"
)

// Transport is the device-memory transport.Transport over NCCL. It holds two
// communicators over the same ranks, each with its own stream: operations
// between domains (the network) go on one, operations inside a domain (the
// local fabric, and a rank to itself) on the other, so that a leader's
// local fan-out runs beside what it forwards over the network. Both sides of
// a message classify it the same way, so sends and receives pair up in
// order on each communicator. Buffers are cudamem.Buffers.
type Transport struct {
	net, local   *Comm
	netS, localS *cuda.Stream
	topo         reshard.Topology
	rank, size   int
}

// NewTransport builds a transport on comm, splitting a second communicator
// off it for local traffic and creating one stream per communicator on ctx.
// topo classifies peers (nil Domain: every peer is across the network).
func NewTransport(comm *Comm, ctx *cuda.Context, topo reshard.Topology) (*Transport, error) {
	// A non-blocking communicator may still be initialising.
	if err := comm.WaitReady(context.Background()); err != nil {
		return nil, err
	}
	rank, err := comm.UserRank()
	if err != nil {
		return nil, err
	}
	size, err := comm.Count()
	if err != nil {
		return nil, err
	}
	local, err := comm.Split(0, rank, nil)
	if err != nil && !errors.Is(err, ErrInProgress) {
		return nil, fmt.Errorf("nccl: transport: local communicator: %w", err)
	}
	// A non-blocking parent splits in the background: wait for the child.
	if err := local.WaitReady(context.Background()); err != nil {
		return nil, fmt.Errorf("nccl: transport: local communicator: %w", err)
	}
	t := &Transport{net: comm, local: local, topo: topo, rank: rank, size: size}
	if t.netS, err = ctx.NewStream(); err != nil {
		return nil, err
	}
	if t.localS, err = ctx.NewStream(); err != nil {
		return nil, err
	}
	return t, nil
}

// WithTopology returns the transport classifying peers with topo instead:
// a view that shares t's communicators and streams (one call runs at a
// time on them). Close only t.
func (t *Transport) WithTopology(topo reshard.Topology) *Transport {
	v := *t
	v.topo = topo
	return &v
}

// Rank implements transport.Transport.
func (t *Transport) Rank() int { return t.rank }

// Size implements transport.Transport.
func (t *Transport) Size() int { return t.size }

// Close destroys the local communicator and the streams; the caller owns
// the communicator it passed in.
func (t *Transport) Close() error {
	return errors.Join(t.local.Destroy(), t.netS.Destroy(), t.localS.Destroy())
}

// Abort aborts both communicators (ncclCommAbort), so that no rank waits on
// this one.
func (t *Transport) Abort(reason error) {
	_ = t.local.Abort()
	_ = t.net.Abort()
}

// Start issues the round as two NCCL groups, one per communicator and
// stream, and returns at once.
func (t *Transport) Start(ops []transport.Op) (transport.Pending, error) {
	for _, o := range ops {
		if o.InPlace {
			return nil, fmt.Errorf("nccl: strided in-place op: NCCL moves contiguous bytes only")
		}
		b, ok := o.Buf.(cudamem.Buffer)
		if !ok {
			return nil, fmt.Errorf("nccl: transport buffer %T is not device memory", o.Buf)
		}
		if o.Off < 0 || o.Len < 0 || o.Off+o.Len > b.N {
			return nil, fmt.Errorf("nccl: [%d, %d) outside a buffer of %d bytes", o.Off, o.Off+o.Len, b.N)
		}
		if o.Peer < 0 || o.Peer >= t.size {
			return nil, fmt.Errorf("nccl: peer %d outside a communicator of %d", o.Peer, t.size)
		}
	}
	for _, side := range []struct {
		comm   *Comm
		stream *cuda.Stream
		net    bool
	}{{t.net, t.netS, true}, {t.local, t.localS, false}} {
		err := Group(func() error {
			for _, o := range ops {
				if o.Len == 0 || (t.topo.Class(t.rank, o.Peer) == reshard.LinkNetwork) != side.net {
					continue
				}
				p := o.Buf.(cudamem.Buffer).Ptr + cuda.DevicePtr(o.Off)
				var err error
				if o.Send {
					err = side.comm.Send(p, int(o.Len), o.Peer, side.stream)
				} else {
					err = side.comm.Recv(p, int(o.Len), o.Peer, side.stream)
				}
				if err != nil {
					return fmt.Errorf("peer %d: %w", o.Peer, err)
				}
			}
			return nil
		})
		// On a non-blocking communicator the group is queued in the
		// background: wait until it is.
		if errors.Is(err, ErrInProgress) {
			err = side.comm.WaitReady(context.Background())
		}
		if err != nil {
			return nil, err
		}
	}
	return &pending{t: t}, nil
}

type pending struct{ t *Transport }

// Wait polls both streams until the round's operations are done, checking
// the communicators for asynchronous errors (a peer that died, a network
// failure) on the way. When ctx ends first it returns ctx's error and the
// caller must Abort.
func (p *pending) Wait(ctx context.Context) error {
	// Yield between checks rather than sleep (a chunk over NVLink takes
	// tens of microseconds, and a short sleep costs a millisecond): see
	// package pace.
	pacer := pace.Start()
	for {
		done := true
		for _, s := range []*cuda.Stream{p.t.netS, p.t.localS} {
			ok, err := s.Query()
			if err != nil {
				return err
			}
			done = done && ok
		}
		if done {
			return nil
		}
		for _, c := range []*Comm{p.t.net, p.t.local} {
			if err := c.AsyncError(); err != nil && !errors.Is(err, ErrInProgress) {
				return err
			}
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		pacer.Pause(ctx)
	}
}
