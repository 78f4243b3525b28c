package nccl

// #cgo LDFLAGS: -ldl
// #include <stdlib.h>
// #include "shim.h"
import "C"

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"unsafe"
)

// DefaultLibrary is the file Load opens unless M2N_NCCL_PATH names another:
// the dynamic loader finds it in the usual places, such as
// /usr/lib/x86_64-linux-gnu/libnccl.so.2 on the GPU machines.
const DefaultLibrary = "libnccl.so.2"

// ErrNotAvailable reports that NCCL could not be opened; Load's error wraps
// it with the reason.
var ErrNotAvailable = errors.New("nccl: not available")

var load struct {
	once sync.Once
	err  error
}

// Load opens NCCL. It is safe to call more than once and from several
// goroutines; the first result sticks. Every other function here needs it
// and calls it.
func Load() error {
	load.once.Do(func() {
		path := DefaultLibrary
		if p := os.Getenv("M2N_NCCL_PATH"); p != "" {
			path = p
		}
		cpath := C.CString(path)
		defer C.free(unsafe.Pointer(cpath))
		var msg [512]C.char
		switch C.m2n_nccl_open(cpath, &msg[0], C.size_t(len(msg))) {
		case 0:
		case 1:
			load.err = fmt.Errorf("%w: %s not found: %s", ErrNotAvailable, path, C.GoString(&msg[0]))
		default:
			load.err = fmt.Errorf("nccl: %s is not a usable NCCL: %s", path, C.GoString(&msg[0]))
		}
	})
	return load.err
}

// Version returns NCCL's version code: 22803 for 2.28.3.
func Version() (int, error) {
	if err := Load(); err != nil {
		return 0, err
	}
	var v C.int
	if err := call("ncclGetVersion", nil, func() C.ncclResult_t { return C.m2n_ncclGetVersion(&v) }); err != nil {
		return 0, err
	}
	return int(v), nil
}
