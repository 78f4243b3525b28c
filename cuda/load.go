package cuda

// #cgo LDFLAGS: -ldl
// #include <stdlib.h>
// #include "shim.h"
import "C"

import (
	"fmt"
	"os"
	"sync"
	"unsafe"
)

// DefaultLibrary is the driver library Load opens unless M2N_CUDA_PATH names
// another file. The dynamic loader searches LD_LIBRARY_PATH and the ld.so
// cache for it (on the GPU machines: /usr/local/nvidia/lib64).
const DefaultLibrary = "libcuda.so.1"

var load struct {
	once sync.Once
	err  error
}

// Load opens the CUDA driver and initialises it (cuInit). It is safe to call
// from several goroutines and more than once; the first call's result sticks.
// Every other function in this package needs a successful Load first.
//
// When the library cannot be opened, or the driver reports that there is no
// device (or is a stub), the error wraps ErrNotAvailable and says why, e.g.
// "cuda: not available: libcuda.so.1 not found: ...".
func Load() error {
	load.once.Do(func() { load.err = open() })
	return load.err
}

func open() error {
	path := DefaultLibrary
	if p := os.Getenv("M2N_CUDA_PATH"); p != "" {
		path = p
	}
	cpath := C.CString(path)
	defer C.free(unsafe.Pointer(cpath))
	var msg [512]C.char
	switch C.m2n_cu_open(cpath, &msg[0], C.size_t(len(msg))) {
	case 0:
	case 1:
		return fmt.Errorf("%w: %s not found: %s", ErrNotAvailable, path, C.GoString(&msg[0]))
	default:
		return fmt.Errorf("cuda: %s is not a usable driver: %s", path, C.GoString(&msg[0]))
	}
	if err := check("cuInit", C.m2n_cuInit()); err != nil {
		if IsCode(err, CodeNoDevice) || IsCode(err, CodeStubLibrary) {
			return fmt.Errorf("%w: %w", ErrNotAvailable, err)
		}
		return err
	}
	return nil
}

// DriverVersion returns the CUDA version the driver supports, as 1000*major +
// 10*minor (13000 for CUDA 13.0).
func DriverVersion() (int, error) {
	if err := Load(); err != nil {
		return 0, err
	}
	var v C.int
	if err := check("cuDriverGetVersion", C.m2n_cuDriverGetVersion(&v)); err != nil {
		return 0, err
	}
	return int(v), nil
}
