package cuda

// #include "shim.h"
import "C"

import (
	"fmt"
	"sync"
	"unsafe"
)

// HostBuffer is page-locked ("pinned") host memory from cuMemHostAlloc,
// mapped into every context (portable). Asynchronous copies between host and
// device need it: the DMA engine reads and writes it after the call returns,
// which Go memory must not be used for.
type HostBuffer struct {
	ctx *Context
	p   unsafe.Pointer
	b   []byte
}

// pinned records live HostBuffers by address, so that asynchronous copies
// can refuse memory that is not pinned.
var pinned struct {
	sync.Mutex
	m map[uintptr]int
}

// cuMemHostAlloc flags (cuda.h).
const memHostAllocPortable = 0x01

// HostAlloc allocates n bytes of pinned host memory. n must be positive.
func (c *Context) HostAlloc(n int) (*HostBuffer, error) {
	if n <= 0 {
		return nil, fmt.Errorf("cuda: cuMemHostAlloc: size %d must be positive", n)
	}
	var p unsafe.Pointer
	if err := check("cuMemHostAlloc", C.m2n_cuMemHostAlloc(c.h, &p, C.size_t(n), memHostAllocPortable)); err != nil {
		return nil, err
	}
	pinned.Lock()
	if pinned.m == nil {
		pinned.m = map[uintptr]int{}
	}
	pinned.m[uintptr(p)] = n
	pinned.Unlock()
	return &HostBuffer{ctx: c, p: p, b: unsafe.Slice((*byte)(p), n)}, nil
}

// Bytes returns the buffer's memory. It must not be used after Free.
func (h *HostBuffer) Bytes() []byte { return h.b }

// Free releases the buffer (cuMemFreeHost). A second call is a no-op.
func (h *HostBuffer) Free() error {
	if h.p == nil {
		return nil
	}
	pinned.Lock()
	delete(pinned.m, uintptr(h.p))
	pinned.Unlock()
	p := h.p
	h.p, h.b = nil, nil
	return check("cuMemFreeHost", C.m2n_cuMemFreeHost(h.ctx.h, p))
}

// isPinned reports whether b lies inside one live HostBuffer.
func isPinned(b []byte) bool {
	if len(b) == 0 {
		return true
	}
	lo := uintptr(unsafe.Pointer(&b[0]))
	hi := lo + uintptr(len(b))
	pinned.Lock()
	defer pinned.Unlock()
	for base, n := range pinned.m {
		if lo >= base && hi <= base+uintptr(n) {
			return true
		}
	}
	return false
}
