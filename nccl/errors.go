package nccl

// #include "shim.h"
import "C"

import (
	"errors"
	"fmt"
	"runtime"

	"github.com/m2n-dev/m2n/cuda"
)

// ErrInProgress is matched (errors.Is) by the error of a call on a
// non-blocking communicator that NCCL has accepted but not finished
// (ncclInProgress): poll with WaitReady before relying on its result.
var ErrInProgress = errors.New("nccl: in progress")

// Error is a failed NCCL call: Op names the entry point, Code is its
// ncclResult_t and Msg NCCL's text for it followed by NCCL's last error
// message (ncclGetLastError) when there is one.
type Error struct {
	Op   string
	Code int
	Msg  string
}

func (e *Error) Error() string { return fmt.Sprintf("nccl: %s: %s", e.Op, e.Msg) }

// Is matches ErrInProgress for ncclInProgress.
func (e *Error) Is(target error) bool {
	return target == ErrInProgress && e.Code == C.M2N_NCCL_IN_PROGRESS
}

// call runs f, an NCCL call, on one locked OS thread with ctx current there
// (if ctx is not nil), and turns its result into an error. NCCL's last error
// message is per thread, so it is read on the same thread.
func call(op string, ctx *cuda.Context, f func() C.ncclResult_t) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if ctx != nil {
		unbind, err := ctx.Bind() // the thread is locked already: Bind nests
		if err != nil {
			return fmt.Errorf("nccl: %s: %w", op, err)
		}
		defer unbind()
	}
	return result(op, nil, f())
}

// result turns r into nil or an *Error; it must run on the thread that made
// the call.
func result(op string, comm C.ncclComm_t, r C.ncclResult_t) error {
	if r == C.M2N_NCCL_SUCCESS {
		return nil
	}
	e := &Error{Op: op, Code: int(r), Msg: C.GoString(C.m2n_ncclGetErrorString(r))}
	if last := C.m2n_ncclGetLastError(comm); last != nil && r != C.M2N_NCCL_IN_PROGRESS {
		if s := C.GoString(last); s != "" {
			e.Msg += ": " + s
		}
	}
	return e
}
