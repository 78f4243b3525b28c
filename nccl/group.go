package nccl

// #include "shim.h"
import "C"

import (
	"context"
	"errors"
	"fmt"
	"runtime"

	"github.com/m2n-dev/m2n/cuda"
	"github.com/m2n-dev/m2n/reshard"
)

// P2P is one send or receive of a group: Bytes bytes at Ptr, to or from
// Peer.
type P2P struct {
	Peer  int
	Send  bool
	Ptr   cuda.DevicePtr
	Bytes int64
}

// GroupOps is a group of sends and receives converted once for NCCL, to be
// posted any number of times (Comm.PostGroup).
type GroupOps struct{ ops []C.m2n_nccl_p2p }

// NewGroupOps converts ops for PostGroup.
func NewGroupOps(ops []P2P) *GroupOps {
	g := &GroupOps{ops: make([]C.m2n_nccl_p2p, len(ops))}
	for k, o := range ops {
		g.ops[k] = C.m2n_nccl_p2p{buf: C.uintptr_t(o.Ptr), n: C.size_t(o.Bytes), peer: C.int(o.Peer)}
		if o.Send {
			g.ops[k].send = 1
		}
	}
	return g
}

// PostGroup posts g as one group on stream s, in one call into NCCL; an
// error names the operation NCCL refused and its peer.
func (c *Comm) PostGroup(g *GroupOps, s *cuda.Stream) error {
	ops := g.ops
	if len(ops) == 0 {
		return nil
	}
	h, err := c.handle()
	if err != nil {
		return err
	}
	err = func() error {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if c.ctx != nil {
			unbind, err := c.ctx.Bind() // nested in the lock above
			if err != nil {
				return err
			}
			defer unbind()
		}
		var failed C.int
		r := C.m2n_nccl_group(h, streamHandle(s), &ops[0], C.int(len(ops)), &failed)
		err := result("ncclGroupEnd", nil, r)
		if err != nil && failed >= 0 {
			o := ops[failed]
			what := "ncclRecv from"
			if o.send != 0 {
				what = "ncclSend to"
			}
			err = fmt.Errorf("%s rank %d: %w", what, int(o.peer), err)
		}
		return err
	}()
	if errors.Is(err, ErrInProgress) {
		err = c.WaitReady(context.Background())
	}
	return err
}

// Comm returns the communicator and the stream of a link class: the
// network's for LinkNetwork, the local fabric's otherwise.
func (t *Transport) Comm(class reshard.LinkClass) (*Comm, *cuda.Stream) {
	if class == reshard.LinkNetwork {
		return t.net, t.netS
	}
	return t.local, t.localS
}

// Topology returns how the transport classifies its peers.
func (t *Transport) Topology() reshard.Topology { return t.topo }
