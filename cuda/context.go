package cuda

// #include "shim.h"
import "C"

import (
	"errors"
	"runtime"
	"sync"
)

// Context is a retained primary context of one device: the context the CUDA
// runtime, NCCL and PyTorch use too, so memory and streams made here can be
// handed to them.
//
// The driver keeps a current context per OS thread, and goroutines move
// between threads. Every method in this package therefore makes its context
// current itself, in the same cgo call as the driver call, and needs no
// locked thread. Code that calls other CUDA libraries (NCCL, or the runtime
// through cgo) must lock the goroutine to its thread and make the context
// current first: see Bind.
//
// A Context is safe for concurrent use. Release it when done.
type Context struct {
	dev Device
	h   C.CUcontext

	mu       sync.Mutex
	released bool
	kernels  *kernelSet // loaded on first use, see kernels.go
	sms      int
}

// PrimaryContext retains the device's primary context
// (cuDevicePrimaryCtxRetain). The driver counts retains; each Context must be
// released once.
func (d Device) PrimaryContext() (*Context, error) {
	if err := Load(); err != nil {
		return nil, err
	}
	var h C.CUcontext
	if err := check("cuDevicePrimaryCtxRetain", C.m2n_cuDevicePrimaryCtxRetain(&h, C.CUdevice(d))); err != nil {
		return nil, err
	}
	sms, err := d.multiprocessorCount()
	if err != nil {
		C.m2n_cuDevicePrimaryCtxRelease(C.CUdevice(d))
		return nil, err
	}
	return &Context{dev: d, h: h, sms: sms}, nil
}

// Device returns the context's device.
func (c *Context) Device() Device { return c.dev }

// Release unloads the kernels loaded into the context and drops this
// Context's retain of the primary context (cuDevicePrimaryCtxRelease). Memory,
// streams and events made in it must be freed before. A second call is a
// no-op.
func (c *Context) Release() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.released {
		return nil
	}
	c.released = true
	var errs []error
	if c.kernels != nil {
		errs = append(errs, c.kernels.unload(c))
		c.kernels = nil
	}
	errs = append(errs, check("cuDevicePrimaryCtxRelease", C.m2n_cuDevicePrimaryCtxRelease(C.CUdevice(c.dev))))
	return errors.Join(errs...)
}

// setCurrent makes the context current on the calling OS thread
// (cuCtxSetCurrent), which is only useful with the goroutine locked to its
// thread: Bind does both.
func (c *Context) setCurrent() error {
	return check("cuCtxSetCurrent", C.m2n_cuCtxSetCurrent(c.h))
}

// Bind locks the calling goroutine to its OS thread and makes the context
// current there, for calls into other CUDA libraries. Call the returned
// function (typically deferred) to unlock the thread; the context stays
// current on it. On error the thread is already unlocked.
func (c *Context) Bind() (unbind func(), err error) {
	runtime.LockOSThread()
	if err := c.setCurrent(); err != nil {
		runtime.UnlockOSThread()
		return nil, err
	}
	return runtime.UnlockOSThread, nil
}

// Synchronize waits for all work in the context (cuCtxSynchronize).
func (c *Context) Synchronize() error {
	return check("cuCtxSynchronize", C.m2n_cuCtxSynchronize(c.h))
}

// SynchronizeStream waits for the work queued so far on a stream of this
// context that other code made, given as an integer: a CUstream or
// cudaStream_t, such as PyTorch's torch.cuda.Stream.cuda_stream; 0 is the
// legacy default stream, and CU_STREAM_PER_THREAD (2) the calling OS
// thread's per-thread stream (cuStreamSynchronize).
func (c *Context) SynchronizeStream(h uintptr) error {
	return check("cuStreamSynchronize", C.m2n_cuStreamSynchronizeHandle(c.h, C.uintptr_t(h)))
}

// MemGetInfo returns the free and total device memory in bytes.
func (c *Context) MemGetInfo() (free, total int64, err error) {
	var f, t C.size_t
	if err := check("cuMemGetInfo", C.m2n_cuMemGetInfo(c.h, &f, &t)); err != nil {
		return 0, 0, err
	}
	return int64(f), int64(t), nil
}
