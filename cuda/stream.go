package cuda

// #include "shim.h"
import "C"

import (
	"errors"
	"unsafe"
)

// Stream is a CUDA stream of one context. Work on one stream runs in order;
// separate streams may overlap. Streams made here are non-blocking: they do
// not synchronise with the legacy null stream.
type Stream struct {
	ctx *Context
	h   C.CUstream
}

// CU_STREAM_NON_BLOCKING (cuda.h).
const streamNonBlocking = 0x1

// NewStream creates a non-blocking stream (cuStreamCreate).
func (c *Context) NewStream() (*Stream, error) {
	var h C.CUstream
	if err := check("cuStreamCreate", C.m2n_cuStreamCreate(c.h, &h, streamNonBlocking)); err != nil {
		return nil, err
	}
	return &Stream{ctx: c, h: h}, nil
}

// Handle returns the CUstream (the same value as a cudaStream_t), for NCCL
// and other libraries.
func (s *Stream) Handle() uintptr { return uintptr(unsafe.Pointer(s.h)) }

// Destroy destroys the stream (cuStreamDestroy); work already queued still
// completes. A second call is a no-op.
func (s *Stream) Destroy() error {
	if s.h == nil {
		return nil
	}
	h := s.h
	s.h = nil
	return check("cuStreamDestroy", C.m2n_cuStreamDestroy(s.ctx.h, h))
}

// Synchronize waits for all work queued on the stream (cuStreamSynchronize).
func (s *Stream) Synchronize() error {
	return check("cuStreamSynchronize", C.m2n_cuStreamSynchronize(s.ctx.h, s.h))
}

// Query reports whether all work queued on the stream has completed
// (cuStreamQuery).
func (s *Stream) Query() (bool, error) {
	r := C.m2n_cuStreamQuery(s.ctx.h, s.h)
	if r == codeNotReady {
		return false, nil
	}
	return true, check("cuStreamQuery", r)
}

// WaitEvent makes later work on the stream wait for the event's last record
// (cuStreamWaitEvent). The event may belong to another stream or context.
func (s *Stream) WaitEvent(e *Event) error {
	return check("cuStreamWaitEvent", C.m2n_cuStreamWaitEvent(s.ctx.h, s.h, e.h))
}

// Memset queues setting n bytes at p to v (cuMemsetD8Async).
func (s *Stream) Memset(p DevicePtr, v byte, n int) error {
	if n == 0 {
		return nil
	}
	return check("cuMemsetD8Async", C.m2n_cuMemsetD8Async(s.ctx.h, C.CUdeviceptr(p), C.uchar(v), C.size_t(n), s.h))
}

// CopyDtoD queues a copy of n bytes between device buffers
// (cuMemcpyDtoDAsync).
func (s *Stream) CopyDtoD(dst, src DevicePtr, n int) error {
	if n == 0 {
		return nil
	}
	return check("cuMemcpyDtoDAsync",
		C.m2n_cuMemcpyDtoDAsync(s.ctx.h, C.CUdeviceptr(dst), C.CUdeviceptr(src), C.size_t(n), s.h))
}

// WaitValue32 makes later work on the stream wait until the 32-bit word at
// p (device memory) is at least v (cuStreamWaitValue32): a gate the host
// opens by writing the word, for tests of what waits on a stream. It fails
// where the driver has no stream memory operations.
func (s *Stream) WaitValue32(p DevicePtr, v uint32) error {
	if C.m2n_cu_has_wait_value() == 0 {
		return errors.New("cuda: this driver has no cuStreamWaitValue32")
	}
	return check("cuStreamWaitValue32", C.m2n_cuStreamWaitValue32(s.ctx.h, s.h, C.CUdeviceptr(p), C.uint(v)))
}
