package nccl

// #include "shim.h"
import "C"

import (
	"errors"
	"fmt"
	"runtime"

	"github.com/m2n-dev/m2n/cuda"
)

// GroupStart opens a group of NCCL calls that NCCL issues together at
// GroupEnd (ncclGroupStart): point-to-point Send/Recv pairs between ranks
// must be grouped or they deadlock. NCCL keeps the group per OS thread, so
// GroupStart locks the calling goroutine to its thread until the matching
// GroupEnd: call both, and everything between, from one goroutine. Group
// does all of that.
func GroupStart() error {
	if err := Load(); err != nil {
		return err
	}
	runtime.LockOSThread()
	if err := result("ncclGroupStart", nil, C.m2n_ncclGroupStart()); err != nil {
		runtime.UnlockOSThread()
		return err
	}
	return nil
}

// GroupEnd issues the group opened by GroupStart (ncclGroupEnd) and unlocks
// the goroutine from its thread. On non-blocking communicators the error
// may match ErrInProgress: the operations are not yet queued on their
// streams until WaitReady on each communicator returns nil.
func GroupEnd() error {
	defer runtime.UnlockOSThread()
	return result("ncclGroupEnd", nil, C.m2n_ncclGroupEnd())
}

// Group runs f between GroupStart and GroupEnd on one locked thread. If f
// fails the group is still closed, and f's error returned with GroupEnd's.
func Group(f func() error) error {
	if err := GroupStart(); err != nil {
		return err
	}
	ferr := f()
	return errors.Join(ferr, GroupEnd())
}

func streamHandle(s *cuda.Stream) C.uintptr_t {
	if s == nil {
		return 0 // the legacy default stream
	}
	return C.uintptr_t(s.Handle())
}

func (c *Comm) op(name string, f func(h C.ncclComm_t) C.ncclResult_t) error {
	h, err := c.handle()
	if err != nil {
		return err
	}
	return call(name, c.ctx, func() C.ncclResult_t { return f(h) })
}

func checkSize(op string, n int) error {
	if n < 0 {
		return fmt.Errorf("nccl: %s: negative size %d", op, n)
	}
	return nil
}

// Send queues sending n bytes at buf to peer on stream s (ncclSend, as
// ncclUint8); nil s is the default stream. The peer must Recv the same
// count; inside a Group both can be in flight at once.
func (c *Comm) Send(buf cuda.DevicePtr, n, peer int, s *cuda.Stream) error {
	if err := checkSize("ncclSend", n); err != nil {
		return err
	}
	return c.op("ncclSend", func(h C.ncclComm_t) C.ncclResult_t {
		return C.m2n_ncclSend(C.uintptr_t(buf), C.size_t(n), C.M2N_NCCL_UINT8, C.int(peer), h, streamHandle(s))
	})
}

// Recv queues receiving n bytes from peer into buf on stream s (ncclRecv).
func (c *Comm) Recv(buf cuda.DevicePtr, n, peer int, s *cuda.Stream) error {
	if err := checkSize("ncclRecv", n); err != nil {
		return err
	}
	return c.op("ncclRecv", func(h C.ncclComm_t) C.ncclResult_t {
		return C.m2n_ncclRecv(C.uintptr_t(buf), C.size_t(n), C.M2N_NCCL_UINT8, C.int(peer), h, streamHandle(s))
	})
}

// Broadcast queues copying n bytes at send on rank root to recv on every
// rank (ncclBroadcast); send is only read on root, and send == recv works
// in place.
func (c *Comm) Broadcast(send, recv cuda.DevicePtr, n, root int, s *cuda.Stream) error {
	if err := checkSize("ncclBroadcast", n); err != nil {
		return err
	}
	return c.op("ncclBroadcast", func(h C.ncclComm_t) C.ncclResult_t {
		return C.m2n_ncclBroadcast(C.uintptr_t(send), C.uintptr_t(recv), C.size_t(n), C.M2N_NCCL_UINT8, C.int(root), h, streamHandle(s))
	})
}

// AllGather queues gathering n bytes from every rank's send into recv, rank
// r's bytes at recv + r*n (ncclAllGather); recv holds n*Count() bytes.
func (c *Comm) AllGather(send, recv cuda.DevicePtr, n int, s *cuda.Stream) error {
	if err := checkSize("ncclAllGather", n); err != nil {
		return err
	}
	return c.op("ncclAllGather", func(h C.ncclComm_t) C.ncclResult_t {
		return C.m2n_ncclAllGather(C.uintptr_t(send), C.uintptr_t(recv), C.size_t(n), C.M2N_NCCL_UINT8, h, streamHandle(s))
	})
}
