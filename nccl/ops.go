package nccl

// #include "shim.h"
import "C"

import (
	"errors"
	"fmt"
	"runtime"

	"github.com/m2n-dev/m2n/cuda"
)

// Group runs f, which queues NCCL calls, as one group that NCCL issues
// together at its end (ncclGroupStart, ncclGroupEnd): point-to-point
// Send/Recv pairs between ranks must be grouped or they deadlock. NCCL
// keeps the group per OS thread, so the goroutine stays locked to its
// thread from the start to the end, and f must make its calls from that
// goroutine. If f fails the group is still closed, and f's error returned
// with the end's. On non-blocking communicators the error may match
// ErrInProgress: the operations are not yet queued on their streams until
// WaitReady on each communicator returns nil.
func Group(f func() error) error {
	if err := Load(); err != nil {
		return err
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := result("ncclGroupStart", nil, C.m2n_ncclGroupStart()); err != nil {
		return err
	}
	ferr := f()
	return errors.Join(ferr, result("ncclGroupEnd", nil, C.m2n_ncclGroupEnd()))
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
