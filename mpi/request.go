package mpi

/*
#include "cmpi.h"
*/
import "C"

import (
	"runtime"
	"slices"
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
// must be completed by Wait, a successful Test or (for a receive) Cancel; completion unpins the buffer. A
// Request dropped before it completes (a round given up on a timeout) stays
// reachable from the package, its buffer pinned for as long as MPI may use
// it, and counts in Live.
//
// A receive (Irecv, irecvStrided) that completed reports what it received
// through Status, and a receive still pending can be withdrawn with Cancel.
//
// A Request must not be used by two goroutines at once. A nil *Request is
// complete.
type Request struct {
	h      []C.MPI_Request
	pin    runtime.Pinner
	pinned bool
	keep   [][]C.int // arrays MPI reads until completion (Iallgatherv)
	recv   bool      // a receive: record statuses, allow Cancel
	st     Status    // what the completed pieces of a receive received
}

// newRequest makes a Request for n MPI requests, to be appended to r.h; recv
// marks a receive.
func newRequest(n int, recv bool) *Request {
	r := &Request{h: make([]C.MPI_Request, 0, n), recv: recv}
	if recv {
		r.st = Status{Source: -1, Tag: -1}
	}
	return r
}

// Status describes a receive that completed (see Request.Status).
type Status struct {
	// Source is the rank of the communicator that sent the message: the
	// rank Irecv named, or the sender's rank for AnySource.
	Source int
	// Tag is the message's tag: the tag Irecv named, or the sender's for
	// AnyTag.
	Tag int
	// Bytes is how many bytes arrived, summed over the pieces of a chunked
	// receive: len(buf) for a message of the posted length, less for a
	// shorter one.
	Bytes int
	// Cancelled reports that Cancel withdrew the receive, or a piece of it,
	// before a message matched it. The bytes of buf that no message filled
	// are then unspecified, and Source and Tag describe only the pieces
	// that did arrive (they are -1 if none did).
	Cancelled bool
}

// Status returns what r, a receive, received. ok is false while r has not
// completed, and for a nil Request or one that is not a receive (Isend,
// Ibarrier).
func (r *Request) Status() (st Status, ok bool) {
	if r == nil || !r.recv || !r.complete() {
		return Status{}, false
	}
	return r.st, true
}

// complete reports whether every MPI request of r has completed (MPI sets
// completed requests to MPI_REQUEST_NULL).
func (r *Request) complete() bool {
	null := C.m2n_request_null()
	for _, h := range r.h {
		if h != null {
			return false
		}
	}
	return true
}

func (r *Request) pinBuf(buf []byte) {
	if len(buf) > 0 {
		r.pin.Pin(&buf[0])
		r.hold()
	}
}

// held keeps every Request with pinned buffers reachable until it
// completes: one its caller dropped before completion (a round given up on
// a timeout, a posting that failed halfway, a listener left when the job
// ends) must not be collected, which would trip the runtime's check for
// leaked pins ("found leaking pinned pointer") or free memory MPI may still
// write into.
var held struct {
	sync.Mutex
	reqs map[*Request]struct{}
}

// hold marks r's buffers pinned (after r.pin pinned them): r counts in Live
// and stays reachable until release.
func (r *Request) hold() {
	if r.pinned {
		return
	}
	r.pinned = true
	live.pinned.Add(1)
	held.Lock()
	if held.reqs == nil {
		held.reqs = map[*Request]struct{}{}
	}
	held.reqs[r] = struct{}{}
	held.Unlock()
}

// release unpins r's buffers once it completed, or was never posted.
func (r *Request) release() {
	if !r.pinned {
		return
	}
	r.pin.Unpin()
	r.pinned = false
	live.pinned.Add(-1)
	held.Lock()
	delete(held.reqs, r)
	held.Unlock()
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

// settle is called after a completion call on r's MPI requests: was holds
// the handles before the call and st the statuses it returned, one per
// handle. For a receive it records the statuses of the requests that the
// call completed (pending in was, null now); once every MPI request of r
// has completed it unpins r's buffer.
func (r *Request) settle(was []C.MPI_Request, st []C.MPI_Status) {
	if r.recv {
		null := C.m2n_request_null()
		for i, h := range r.h {
			if was[i] != null && h == null {
				r.record(&st[i])
			}
		}
	}
	if !r.pinned || !r.complete() {
		return
	}
	r.release()
}

// record folds the status of one completed piece of a receive into r.st.
func (r *Request) record(st *C.MPI_Status) {
	var flag C.int
	if C.MPI_Test_cancelled(st, &flag) == C.MPI_SUCCESS && flag != 0 {
		r.st.Cancelled = true
		return
	}
	var n C.int
	if C.MPI_Get_count(st, C.m2n_byte(), &n) == C.MPI_SUCCESS && n > 0 {
		r.st.Bytes += int(n)
	}
	if r.st.Source < 0 {
		r.st.Source, r.st.Tag = int(st.MPI_SOURCE), int(st.MPI_TAG)
	}
}

// abandon releases a Request that could not be fully posted: with no MPI
// request in flight it unpins its buffers; one whose first chunks are in
// flight (they can never be completed by the caller) stays held.
func (r *Request) abandon() {
	if len(r.h) == 0 {
		r.release()
	}
}

// Wait blocks until r completes (MPI_Waitall over r's MPI requests) and
// unpins its buffer. Calling Wait on a completed or nil Request returns nil
// at once. If an operation failed, Wait returns an error naming
// MPI_Waitall with the failing operation's message; the requests that did not
// complete stay pending and their buffer stays pinned.
func (r *Request) Wait() error {
	if r == nil || len(r.h) == 0 {
		return nil
	}
	st := make([]C.MPI_Status, len(r.h))
	was := slices.Clone(r.h)
	rc := C.MPI_Waitall(C.int(len(r.h)), &r.h[0], &st[0])
	r.settle(was, st)
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
	was := slices.Clone(r.h)
	var flag C.int
	rc := C.MPI_Testall(C.int(len(r.h)), &r.h[0], &flag, &st[0])
	r.settle(was, st)
	return flag != 0, statusError("MPI_Testall", rc, st)
}

// Cancel withdraws r, a receive that may still be pending, and completes
// it: MPI_Cancel on each of its pending MPI requests, then MPI_Waitall.
// Cancel does not wait for any other rank (MPI makes the wait for a
// cancelled request local), so it suits tearing down a receive that no
// message may ever match, such as a listener for an abort notice. On return
// r is complete and its buffer unpinned, as after Wait, so Live no longer
// counts it.
//
// cancelled reports whether the receive, or a piece of a chunked one, was
// withdrawn before a message matched it; false means that the message had
// already arrived (or was arriving) and buf holds it: Status says from whom.
// Cancel on a receive that has already completed returns its Status's
// Cancelled and nil; on a nil Request it returns false and nil.
//
// Errors: a Request that is not a receive (Isend, Ibarrier, isendStrided:
// MPI-4 deprecates cancelling sends) returns an error wrapping ErrInvalid
// and stays pending. If MPI_Cancel fails (an error naming "MPI_Cancel"),
// r stays pending and must still be completed; an error from the wait is
// reported as by Wait.
func (r *Request) Cancel() (cancelled bool, err error) {
	const op = "MPI_Cancel"
	if r == nil || len(r.h) == 0 {
		return false, nil
	}
	if !r.recv {
		return false, invalid(op, "the request is not a receive; only receives can be cancelled")
	}
	null := C.m2n_request_null()
	for i := range r.h {
		if r.h[i] == null {
			continue
		}
		if err := check(op, C.MPI_Cancel(&r.h[i])); err != nil {
			return false, err
		}
	}
	if err := r.Wait(); err != nil {
		return false, err
	}
	return r.st.Cancelled, nil
}

// waitall blocks until every request in reqs has completed (one MPI_Waitall
// over all of their MPI requests) and unpins their buffers. Nil entries are
// skipped. Errors are reported as by Request.Wait.
func waitall(reqs []*Request) error {
	hs, st := gather(reqs)
	if len(hs) == 0 {
		return nil
	}
	was := slices.Clone(hs)
	rc := C.MPI_Waitall(C.int(len(hs)), &hs[0], &st[0])
	scatter(reqs, was, hs, st)
	return statusError("MPI_Waitall", rc, st)
}

// testall reports whether every request in reqs has completed, without
// blocking (one MPI_Testall over all of their MPI requests). If so, their
// buffers are unpinned; if not, no request changes state. Nil entries are
// skipped. Errors are reported as by Request.Wait, with Op "MPI_Testall".
func testall(reqs []*Request) (done bool, err error) {
	hs, st := gather(reqs)
	if len(hs) == 0 {
		return true, nil
	}
	was := slices.Clone(hs)
	var flag C.int
	rc := C.MPI_Testall(C.int(len(hs)), &hs[0], &flag, &st[0])
	scatter(reqs, was, hs, st)
	return flag != 0, statusError("MPI_Testall", rc, st)
}

// tester polls a set of requests with MPI_Testall again and again
// without allocating: it keeps the handle and status arrays between
// calls. Its zero value is ready.
type tester struct {
	hs, was []C.MPI_Request
	st      []C.MPI_Status
}

// testall is testall(reqs), reusing t's arrays.
func (t *tester) testall(reqs []*Request) (done bool, err error) {
	t.hs = t.hs[:0]
	for _, r := range reqs {
		if r != nil {
			t.hs = append(t.hs, r.h...)
		}
	}
	if len(t.hs) == 0 {
		return true, nil
	}
	if cap(t.st) < len(t.hs) {
		t.st = make([]C.MPI_Status, len(t.hs))
	}
	st := t.st[:len(t.hs)]
	t.was = append(t.was[:0], t.hs...)
	var flag C.int
	rc := C.MPI_Testall(C.int(len(t.hs)), &t.hs[0], &flag, &st[0])
	scatter(reqs, t.was, t.hs, st)
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

// scatter copies the handles that MPI updated back into reqs and settles
// each request (see settle) with its share of was and st, which run
// parallel to hs.
func scatter(reqs []*Request, was, hs []C.MPI_Request, st []C.MPI_Status) {
	for _, r := range reqs {
		if r == nil {
			continue
		}
		n := copy(r.h, hs)
		r.settle(was[:n], st[:n])
		was, hs, st = was[n:], hs[n:], st[n:]
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
