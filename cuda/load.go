package cuda

// #include "shim.h"
import "C"

import (
	"fmt"
	"sync"
	"unsafe"

	"github.com/m2n-dev/m2n/internal/dl"
)

// defaultLibrary is the driver library Load opens unless M2N_CUDA_PATH names
// another file. The dynamic loader searches LD_LIBRARY_PATH and the ld.so
// cache for it (on the GPU machines: /usr/local/nvidia/lib64).
const defaultLibrary = "libcuda.so.1"

// load opens the library once; its first result sticks.
var load = sync.OnceValue(open)

// Load opens the CUDA driver and initialises it (cuInit). It is safe to call
// from several goroutines and more than once; the first call's result sticks.
// Every other function in this package needs a successful Load first.
//
// When the library cannot be opened, or the driver reports that there is no
// device (or is a stub), the error wraps ErrNotAvailable and says why, e.g.
// "cuda: not available: libcuda.so.1 not found: tried libcuda.so.1: cannot
// open shared object file: No such file or directory (set M2N_CUDA_PATH to
// the library's file)". A library that opens but lacks an entry point this
// package needs is an error naming the file and the symbols, not wrapping
// ErrNotAvailable.
func Load() error {
	return load()
}

func open() error {
	spec := dl.Spec{Name: defaultLibrary, Env: "M2N_CUDA_PATH", Candidates: []string{defaultLibrary}}
	lib, err := dl.Load("cuda", spec, ErrNotAvailable, unsafe.Pointer(C.m2n_cu_getproc_table()))
	if err != nil {
		return err
	}
	C.m2n_cu_getproc()
	if err := lib.Resolve(unsafe.Pointer(C.m2n_cu_table())); err != nil {
		return fmt.Errorf("cuda: not a usable %s: %w", lib.File, err)
	}
	if err := check("cuInit", C.m2n_cuInit()); err != nil {
		if isCode(err, codeNoDevice) || isCode(err, codeStubLibrary) {
			return fmt.Errorf("%w: %w", ErrNotAvailable, err)
		}
		return err
	}
	return nil
}

// driverVersion returns the CUDA version the driver supports, as 1000*major +
// 10*minor (13000 for CUDA 13.0).
func driverVersion() (int, error) {
	if err := Load(); err != nil {
		return 0, err
	}
	var v C.int
	if err := check("cuDriverGetVersion", C.m2n_cuDriverGetVersion(&v)); err != nil {
		return 0, err
	}
	return int(v), nil
}
