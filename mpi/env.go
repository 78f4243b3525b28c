package mpi

/*
#cgo !mpich pkg-config: ompi-c
#cgo mpich pkg-config: mpich
#include "cmpi.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"time"
)

// ThreadLevel is an MPI thread-support level, ordered from the least to the
// most permissive (MPI_THREAD_SINGLE < _FUNNELED < _SERIALIZED <
// ThreadMultiple). m2n asks for ThreadMultiple; Init and QueryThread may
// report a lower level, which String names. See the package documentation
// for what each one asks of the goroutines that call this package.
type ThreadLevel int

// The MPI thread-support levels.
const (
	// threadSingle: only one thread will ever call MPI. A Go program always
	// has several threads, so treat it like threadFunneled.
	threadSingle ThreadLevel = iota
	// threadFunneled: only the thread that called Init calls MPI. In Go,
	// the goroutine that calls Init must call runtime.LockOSThread first and
	// make every later MPI call itself.
	threadFunneled
	// threadSerialized: any thread may call MPI, but never two at once. The
	// caller must serialize calls from concurrent goroutines (a mutex).
	threadSerialized
	// ThreadMultiple: any goroutine may call MPI at any time.
	ThreadMultiple
)

// String returns the MPI name of l, such as "MPI_THREAD_MULTIPLE".
var threadLevelNames = [...]string{
	threadSingle:     "MPI_THREAD_SINGLE",
	threadFunneled:   "MPI_THREAD_FUNNELED",
	threadSerialized: "MPI_THREAD_SERIALIZED",
	ThreadMultiple:   "MPI_THREAD_MULTIPLE",
}

func (l ThreadLevel) String() string {
	if l >= 0 && int(l) < len(threadLevelNames) {
		return threadLevelNames[l]
	}
	return fmt.Sprintf("ThreadLevel(%d)", int(l))
}

func (l ThreadLevel) c() C.int {
	switch l {
	case threadSingle:
		return C.MPI_THREAD_SINGLE
	case threadFunneled:
		return C.MPI_THREAD_FUNNELED
	case threadSerialized:
		return C.MPI_THREAD_SERIALIZED
	}
	return C.MPI_THREAD_MULTIPLE
}

func threadLevelOf(c C.int) ThreadLevel {
	switch c {
	case C.MPI_THREAD_SINGLE:
		return threadSingle
	case C.MPI_THREAD_FUNNELED:
		return threadFunneled
	case C.MPI_THREAD_SERIALIZED:
		return threadSerialized
	}
	return ThreadMultiple
}

// Init initializes MPI (MPI_Init_thread) asking for the thread level
// required, and returns the level MPI provides, which may be lower: the
// caller must check it and follow its rules (see the package documentation).
// Init then sets MPI_ERRORS_RETURN on MPI_COMM_WORLD and MPI_COMM_SELF, so
// that failing MPI calls return errors instead of aborting the job.
//
// Init may be called once per process. Calling it when MPI is already
// initialized or finalized returns an error wrapping ErrInvalid. If
// MPI_Init_thread itself fails, MPI's default handler usually aborts the
// process before Init can return.
func Init(required ThreadLevel) (provided ThreadLevel, err error) {
	if Initialized() {
		return 0, invalid("Init", "MPI is already initialized")
	}
	if Finalized() {
		return 0, invalid("Init", "MPI is already finalized")
	}
	var p C.int
	if err := check("MPI_Init_thread", C.MPI_Init_thread(nil, nil, required.c(), &p)); err != nil {
		return 0, err
	}
	if err := check("MPI_Comm_set_errhandler", C.m2n_errors_return(C.m2n_comm_world())); err != nil {
		return 0, err
	}
	if err := check("MPI_Comm_set_errhandler", C.m2n_errors_return(C.m2n_comm_self())); err != nil {
		return 0, err
	}
	return threadLevelOf(p), nil
}

// QueryThread returns the thread level that Init obtained
// (MPI_Query_thread). It is only valid between Init and Finalize.
func QueryThread() (ThreadLevel, error) {
	var p C.int
	if err := check("MPI_Query_thread", C.MPI_Query_thread(&p)); err != nil {
		return 0, err
	}
	return threadLevelOf(p), nil
}

// Initialized reports whether Init has been called (MPI_Initialized). It
// stays true after Finalize. It may be called at any time.
func Initialized() bool {
	var flag C.int
	C.MPI_Initialized(&flag)
	return flag != 0
}

// Finalized reports whether Finalize has been called (MPI_Finalized). It may
// be called at any time.
func Finalized() bool {
	var flag C.int
	C.MPI_Finalized(&flag)
	return flag != 0
}

// Finalize shuts MPI down (MPI_Finalize). Every rank must call it once,
// after completing all of its requests and freeing the communicators it
// created; no MPI call is allowed afterwards.
//
// After MarkFailed, Finalize instead waits a short grace period (so that
// the job's other ranks can report their own errors) and ends the job with
// MPI_Abort: MPI_Finalize would wait for peers that are gone or stuck.
func Finalize() error {
	if failed.Load() != nil {
		time.Sleep(FailGrace)
		Abort(nil, 1)
	}
	return check("MPI_Finalize", C.MPI_Finalize())
}

// failed holds the error MarkFailed recorded.
var failed atomic.Pointer[error]

// FailGrace is how long Finalize waits after MarkFailed before it ends the
// job.
var FailGrace = time.Second

// MarkFailed records that this process's part of the job has failed in a
// way its peers may never recover from (package session calls it when a
// session aborts), so that Finalize ends the job instead of waiting.
func MarkFailed(err error) {
	if err == nil {
		err = errors.New("mpi: marked failed")
	}
	failed.CompareAndSwap(nil, &err)
}

// Failed returns the error MarkFailed recorded, or nil.
func Failed() error {
	if p := failed.Load(); p != nil {
		return *p
	}
	return nil
}

// Abort asks MPI to terminate every process of c's group (MPI_Abort; in
// practice OpenMPI ends the whole job) with exit code code. A nil c means
// the world communicator. Abort does not return: should MPI_Abort ever
// return, the process exits with code.
func Abort(c *Comm, code int) {
	h := C.m2n_comm_world()
	if c != nil && c.h != C.m2n_comm_null() {
		h = c.h
	}
	C.MPI_Abort(h, C.int(code))
	os.Exit(code)
}
