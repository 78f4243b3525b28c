package mpi

/*
#include "cmpi.h"
*/
import "C"

import (
	"runtime"
	"sync"
	"sync/atomic"
)

// Request is a pending nonblocking operation returned by Isend, Irecv or
// Ibarrier. One Request may stand for several MPI requests: a buffer longer
// than the chunk limit travels as several messages (see the package
// documentation).
//
// A Request keeps its buffer pinned (runtime.Pinner), because MPI reads or
// writes it after the call that started the operation has returned. The
// buffer must not be touched until the request completes, and the request
// must be completed by Wait, a successful Test, Waitall or a successful
// Testall; completion unpins the buffer. A Request dropped before it
// completes leaks its pinned buffer, which the Go runtime reports by
// panicking ("found leaking pinned pointer") when it collects the Request.
//
// A Request must not be used by two goroutines at once. A nil *Request is
// complete.
type Request struct {
	h      []C.MPI_Request
	pin    runtime.Pinner
	pinned bool
	keep   [][]C.int // arrays MPI reads until completion (Iallgatherv)
}

func (r *Request) pinBuf(buf []byte) {
	if len(buf) > 0 {
		r.pin.Pin(&buf[0])
		r.pinned = true
		live.pinned.Add(1)
	}
}

// live counts what this process holds from MPI, for leak checks (Live).
var live struct {
	pinned atomic.Int64 // requests whose buffers are pinned: not yet completed
	comms  atomic.Int64 // communicators created and not freed
}

// Live returns how many nonblocking requests with a buffer have not
// completed yet and how many communicators this process created and has not
// freed. A long-running job (the RL loop refits every step) checks that
// both come back to where they started.
func Live() (requests, comms int64) { return live.pinned.Load(), live.comms.Load() }

// settle unpins r's buffer once every MPI request of r has completed
// (MPI sets completed requests to MPI_REQUEST_NULL).
func (r *Request) settle() {
	if !r.pinned {
		return
	}
	null := C.m2n_request_null()
	for _, h := range r.h {
		if h != null {
			return
		}
	}
	r.pin.Unpin()
	r.pinned = false
	live.pinned.Add(-1)
}

// orphans keeps Requests whose posting failed halfway (some of their chunks
// are in flight and can never be completed by the caller) reachable, so that
// their buffers stay pinned instead of tripping the runtime's leak check.
var orphans struct {
	sync.Mutex
	reqs []*Request
}

// abandon releases a Request that could not be fully posted.
func (r *Request) abandon() {
	if len(r.h) == 0 {
		if r.pinned {
			r.pin.Unpin()
			r.pinned = false
			live.pinned.Add(-1)
		}
		return
	}
	orphans.Lock()
	orphans.reqs = append(orphans.reqs, r)
	orphans.Unlock()
}

// Wait blocks until r completes (MPI_Waitall over r's MPI requests) and
// unpins its buffer. Calling Wait on a completed or nil Request returns nil
// at once. If an operation failed, Wait returns an *Error with Op
// "MPI_Waitall" and the failing operation's code; the requests that did not
// complete stay pending and their buffer stays pinned.
func (r *Request) Wait() error {
	if r == nil || len(r.h) == 0 {
		return nil
	}
	st := make([]C.MPI_Status, len(r.h))
	rc := C.MPI_Waitall(C.int(len(r.h)), &r.h[0], &st[0])
	r.settle()
	return statusError("MPI_Waitall", rc, st)
}

// Test reports whether r has completed, without blocking (MPI_Testall over
// r's MPI requests); on true its buffer is unpinned. Test on a completed or
// nil Request returns true. Errors are reported as by Wait, with Op
// "MPI_Testall".
func (r *Request) Test() (bool, error) {
	if r == nil || len(r.h) == 0 {
		return true, nil
	}
	st := make([]C.MPI_Status, len(r.h))
	var flag C.int
	rc := C.MPI_Testall(C.int(len(r.h)), &r.h[0], &flag, &st[0])
	r.settle()
	return flag != 0, statusError("MPI_Testall", rc, st)
}

// Waitall blocks until every request in reqs has completed (one MPI_Waitall
// over all of their MPI requests) and unpins their buffers. Nil entries are
// skipped. Errors are reported as by Request.Wait.
func Waitall(reqs []*Request) error {
	hs, st := gather(reqs)
	if len(hs) == 0 {
		return nil
	}
	rc := C.MPI_Waitall(C.int(len(hs)), &hs[0], &st[0])
	scatter(reqs, hs)
	return statusError("MPI_Waitall", rc, st)
}

// Testall reports whether every request in reqs has completed, without
// blocking (one MPI_Testall over all of their MPI requests). If so, their
// buffers are unpinned; if not, no request changes state. Nil entries are
// skipped. Errors are reported as by Request.Wait, with Op "MPI_Testall".
func Testall(reqs []*Request) (done bool, err error) {
	hs, st := gather(reqs)
	if len(hs) == 0 {
		return true, nil
	}
	var flag C.int
	rc := C.MPI_Testall(C.int(len(hs)), &hs[0], &flag, &st[0])
	scatter(reqs, hs)
	return flag != 0, statusError("MPI_Testall", rc, st)
}

// gather concatenates the MPI requests of reqs and makes a status array
// for them.
func gather(reqs []*Request) ([]C.MPI_Request, []C.MPI_Status) {
	n := 0
	for _, r := range reqs {
		if r != nil {
			n += len(r.h)
		}
	}
	hs := make([]C.MPI_Request, 0, n)
	for _, r := range reqs {
		if r != nil {
			hs = append(hs, r.h...)
		}
	}
	return hs, make([]C.MPI_Status, n)
}

// scatter copies the handles that MPI updated back into reqs and unpins
// the requests that completed.
func scatter(reqs []*Request, hs []C.MPI_Request) {
	for _, r := range reqs {
		if r == nil {
			continue
		}
		hs = hs[copy(r.h, hs):]
		r.settle()
	}
}

// statusError turns the result of a multiple-completion call into an error.
// For MPI_ERR_IN_STATUS it reports the first request's own error code.
func statusError(op string, rc C.int, st []C.MPI_Status) error {
	if rc != C.MPI_ERR_IN_STATUS {
		return check(op, rc)
	}
	for i := range st {
		if code := st[i].MPI_ERROR; code != C.MPI_SUCCESS && code != C.MPI_ERR_PENDING {
			return newError(op, int(code))
		}
	}
	return newError(op, int(rc))
}
