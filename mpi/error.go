package mpi

/*
#include "cmpi.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"unsafe"
)

// callError is an error code returned by an MPI function. Every MPI call
// made by this package that does not return MPI_SUCCESS turns into a
// *callError; Init installs MPI_ERRORS_RETURN so that MPI reports errors
// instead of aborting.
type callError struct {
	Op   string // the MPI function that failed, such as "MPI_Isend"
	Code int    // the error code MPI returned
	Msg  string // MPI_Error_string's text for Code
}

// Error returns "mpi: <Op>: <Msg>".
func (e *callError) Error() string {
	return "mpi: " + e.Op + ": " + e.Msg
}

// ErrInvalid is wrapped by the errors this package returns, without calling
// MPI, for arguments that break a documented contract: mismatched lengths,
// counts or displacements out of range, a nil communicator, Init called twice.
var ErrInvalid = errors.New("invalid argument")

// check turns an MPI return code into nil or a *callError naming op.
func check(op string, rc C.int) error {
	if rc == C.MPI_SUCCESS {
		return nil
	}
	return newError(op, int(rc))
}

func newError(op string, code int) *callError {
	return &callError{Op: op, Code: code, Msg: errorString(code)}
}

// errorString asks MPI for the text of code. MPI_Error_string may be called
// at any time, also before Init and after Finalize.
func errorString(code int) string {
	var buf [C.MPI_MAX_ERROR_STRING + 1]C.char
	var n C.int
	if C.MPI_Error_string(C.int(code), &buf[0], &n) != C.MPI_SUCCESS || n <= 0 {
		return fmt.Sprintf("error code %d", code)
	}
	return C.GoStringN((*C.char)(unsafe.Pointer(&buf[0])), n)
}

// invalid returns an error wrapping ErrInvalid for the call op.
func invalid(op, format string, args ...any) error {
	return fmt.Errorf("mpi: %s: %w: %s", op, ErrInvalid, fmt.Sprintf(format, args...))
}
