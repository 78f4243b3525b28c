package session

import (
	"fmt"
	"sync"
	"syscall"
	"unsafe"

	"github.com/m2n-dev/m2n/transport"
)

// mapMin is the size from which host buffers are mapped from the kernel
// rather than taken from the Go heap.
const mapMin = 1 << 20

// hostMemory is the CPU device's memory: transport.HostMemory, except that
// large buffers (a model's weights, staging) are anonymous memory maps
// outside the Go heap, freed when Free is called. The garbage collector
// lets its heap grow to twice what is live before it collects (GOGC=100),
// so weights in the heap would double a rank's footprint; mapped, they
// count once.
type hostMemory struct {
	transport.HostMemory
	mu     sync.Mutex
	mapped map[uintptr][]byte // by base address
}

func newHostMemory() *hostMemory { return &hostMemory{mapped: map[uintptr][]byte{}} }

// Alloc returns a zeroed host buffer of n bytes.
func (h *hostMemory) Alloc(n int64) (transport.Buffer, error) {
	if n < mapMin {
		return h.HostMemory.Alloc(n)
	}
	b, err := syscall.Mmap(-1, 0, int(n), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		return nil, fmt.Errorf("session: mapping %d bytes of host memory: %w", n, err)
	}
	h.mu.Lock()
	h.mapped[uintptr(unsafe.Pointer(&b[0]))] = b
	h.mu.Unlock()
	return transport.HostBuffer(b), nil
}

// Free unmaps a mapped buffer (a buffer from the Go heap is left to the
// collector). Free of a buffer not from Alloc does nothing.
func (h *hostMemory) Free(b transport.Buffer) {
	hb, ok := b.(transport.HostBuffer)
	if !ok || len(hb) == 0 {
		return
	}
	base := uintptr(unsafe.Pointer(&hb[0]))
	h.mu.Lock()
	m, ok := h.mapped[base]
	delete(h.mapped, base)
	h.mu.Unlock()
	if ok {
		_ = syscall.Munmap(m)
	}
}
