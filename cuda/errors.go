package cuda

// #include "shim.h"
import "C"

import (
	"errors"
	"fmt"
)

// ErrNotAvailable reports that CUDA cannot be used in this process: libcuda
// could not be opened, or the driver found no device. Load's error wraps it
// with the reason, so callers and tests branch with errors.Is and print the
// error itself.
var ErrNotAvailable = errors.New("cuda: not available")

// driverError is a failed driver call: Op names the entry point
// (cuMemAlloc), Code is its CUresult, Name and Msg the driver's name and
// text for it.
type driverError struct {
	Op   string
	Code int
	Name string
	Msg  string
}

func (e *driverError) Error() string {
	return fmt.Sprintf("cuda: %s: %s: %s", e.Op, e.Name, e.Msg)
}

// CUresult values this package branches on (cuda.h).
const (
	codeStubLibrary        = 34
	codeNoDevice           = 100
	codeNotReady           = 600
	codeCaptureUnsupported = 900
	codeCaptureInvalidated = 901
)

// isCode reports whether err is, or wraps, a *driverError with the given code.
func isCode(err error, code int) bool {
	var e *driverError
	return errors.As(err, &e) && e.Code == code
}

// check turns a CUresult into nil or a *driverError for op.
func check(op string, r C.CUresult) error {
	if r == 0 {
		return nil
	}
	return newError(op, int(r))
}

func newError(op string, code int) *driverError {
	e := &driverError{Op: op, Code: code, Name: fmt.Sprintf("CUresult(%d)", code), Msg: "unknown error"}
	if s := C.m2n_cuErrorName(C.CUresult(code)); s != nil {
		e.Name = C.GoString(s)
	}
	if s := C.m2n_cuErrorString(C.CUresult(code)); s != nil {
		e.Msg = C.GoString(s)
	}
	return e
}
