package nccl

// #include "shim.h"
import "C"

import (
	"errors"
	"sync"
	"unsafe"

	"github.com/m2n-dev/m2n/internal/dl"
)

// defaultLibrary is the file Load opens unless M2N_NCCL_PATH names another:
// the dynamic loader finds it in the usual places, such as
// /usr/lib/x86_64-linux-gnu/libnccl.so.2 on the GPU machines.
const defaultLibrary = "libnccl.so.2"

// ErrNotAvailable reports that NCCL could not be opened; Load's error wraps
// it with the reason.
var ErrNotAvailable = errors.New("nccl: not available")

// load opens the library once; its first result sticks.
var load = sync.OnceValue(open)

// Load opens NCCL. It is safe to call more than once and from several
// goroutines; the first result sticks. Every other function here needs it
// and calls it. When the library cannot be opened the error wraps
// ErrNotAvailable and says why ("nccl: not available: libnccl.so.2 not
// found: tried libnccl.so.2: cannot open shared object file: ..."); a
// library that opens but lacks a required entry point is an error naming
// the file and the symbols.
func Load() error {
	return load()
}

func open() error {
	spec := dl.Spec{Name: defaultLibrary, Env: "M2N_NCCL_PATH", Candidates: []string{defaultLibrary}}
	_, err := dl.Load("nccl", spec, ErrNotAvailable, unsafe.Pointer(C.m2n_nccl_table()))
	return err
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
