// Command capi is m2n's C interface, built as a shared library
// (go build -buildmode=c-shared; `make capi` gives dist/libm2n.so and
// dist/m2n.h). m2n.h is its header and its documentation: sessions joined on
// an existing MPI communicator (its Fortran handle, so that mpi4py's
// Comm.py2f() works; MPI is never initialised here), calls prepared from
// tensors with both DTensor layouts and run with local host or CUDA
// buffers, whole models, and errors as codes with a per-thread message that
// names the rank and field as the Go errors do. The Python package m2n
// (python/m2n) wraps it with ctypes.
//
// No Go pointer crosses the boundary: sessions, calls and models are
// integer handles into tables here, and C memory (the caller's buffers and
// descriptions) is only read or written during the call that receives it.
// Every exported function recovers panics into M2N_ERR_INTERNAL.
package main

/*
#define M2N_NO_PROTOTYPES
#include "m2n.h"
*/
import "C"

import (
	"fmt"
	"runtime/debug"
	"sync"
	"unsafe"
)

func main() {}

// abiVersion is M2N_ABI_VERSION of this library.
const abiVersion = 5

//export m2n_abi_version
func m2n_abi_version() C.int32_t { return abiVersion } // nothing here can panic

// handles holds every live session, call and model by handle. Handles are
// never reused, so a stale one is an error, never another object.
var handles = struct {
	sync.Mutex
	next uint64
	m    map[uint64]any
}{m: map[uint64]any{}}

// register stores v and returns its new handle.
func register(v any) uint64 {
	handles.Lock()
	defer handles.Unlock()
	handles.next++
	handles.m[handles.next] = v
	return handles.next
}

// forget drops handle h.
func forget(h uint64) {
	handles.Lock()
	defer handles.Unlock()
	delete(handles.m, h)
}

// lookup returns the object of kind T that handle h names.
func lookup[T any](h uint64, kind string) (T, error) {
	handles.Lock()
	defer handles.Unlock()
	v, ok := handles.m[h].(T)
	if !ok {
		var zero T
		return zero, invalidf("%s handle %d: no such %s (closed, or never made)", kind, h, kind)
	}
	return v, nil
}

// locked runs f on the call or model that handle h names (kind says
// which), with the lock of its session held, and returns f's error as a
// status; a handle that names no such object is reported as lookup
// reports it.
func locked[T interface{ session() *sessionEntry }](h uint64, kind string, f func(T) error) C.int {
	x, err := lookup[T](h, kind)
	if err != nil {
		return result(err)
	}
	se := x.session()
	se.mu.Lock()
	defer se.mu.Unlock()
	return result(f(x))
}

// recovered turns a panic into M2N_ERR_INTERNAL on the way out of an
// exported function: defer recovered(&rc) first thing in every export
// that returns a code.
func recovered(rc *C.int) {
	if r := recover(); r != nil {
		*rc = C.int(fail(&internalError{what: fmt.Sprint(r), stack: string(debug.Stack())}))
	}
}

// offThread runs f on a goroutine of its own and waits for it, passing a
// panic on to the caller (whose recovered reports it, with f's stack). A
// C thread that calls in runs Go locked to itself (a cgo callback), so
// every park of its goroutine (a bounded wait's backoff sleep, a timer)
// hands the thread off and back through the kernel; a step's waits park
// often, and on a loaded host that cost a Python caller's CPU step about
// twice the Go program's time (1 MiB to 4 ranks, 8 ranks on 2 cores: 5.0
// to 6.3 ms against 2.0 to 2.8 ms run on a goroutine of its own).
func offThread(f func()) {
	var p any
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer func() {
			if r := recover(); r != nil {
				p = fmt.Sprintf("%v\n(on the step's goroutine:)\n%s", r, debug.Stack())
			}
		}()
		f()
	}()
	<-done
	if p != nil {
		panic(p)
	}
}

// result records err as this thread's last error and returns its code
// (M2N_OK for nil).
func result(err error) C.int {
	if err == nil {
		return C.M2N_OK
	}
	return C.int(fail(err))
}

// copyOut copies s into the C buffer buf of n bytes, NUL-terminated and cut
// to fit, and returns len(s).
func copyOut(s string, buf *C.char, n C.size_t) C.size_t {
	if buf != nil && n > 0 {
		dst := unsafe.Slice((*byte)(unsafe.Pointer(buf)), int(n))
		k := copy(dst[:n-1], s)
		dst[k] = 0
	}
	return C.size_t(len(s))
}

// goString reads a C string; NULL reads as "".
func goString(s *C.char) string {
	if s == nil {
		return ""
	}
	return C.GoString(s)
}

// describeOut writes a JSON description into buf (as copyOut) and its
// length into needed; a buffer too small is no error, needed says what to
// retry with.
func describeOut(js []byte, buf *C.char, n C.size_t, needed *C.size_t) {
	l := copyOut(string(js), buf, n)
	if needed != nil {
		*needed = l + 1
	}
}
