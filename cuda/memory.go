package cuda

// #include "shim.h"
import "C"

import (
	"fmt"
	"unsafe"
)

// DevicePtr is a device address (CUdeviceptr). Address arithmetic on it is
// plain integer arithmetic; the zero value is the null pointer.
type DevicePtr uintptr

// Alloc allocates n bytes of device memory (cuMemAlloc). The memory is
// uninitialised and aligned to at least 256 bytes. n must be positive.
func (c *Context) Alloc(n int) (DevicePtr, error) {
	if n <= 0 {
		return 0, fmt.Errorf("cuda: cuMemAlloc: size %d must be positive", n)
	}
	var p C.CUdeviceptr
	if err := check("cuMemAlloc", C.m2n_cuMemAlloc(c.h, &p, C.size_t(n))); err != nil {
		return 0, err
	}
	return DevicePtr(p), nil
}

// Free frees memory from Alloc (cuMemFree). Freeing 0 is a no-op.
func (c *Context) Free(p DevicePtr) error {
	if p == 0 {
		return nil
	}
	return check("cuMemFree", C.m2n_cuMemFree(c.h, C.CUdeviceptr(p)))
}

// Memset sets n bytes at p to v and waits for it (cuMemsetD8).
func (c *Context) Memset(p DevicePtr, v byte, n int) error {
	if n == 0 {
		return nil
	}
	return check("cuMemsetD8", C.m2n_cuMemsetD8(c.h, C.CUdeviceptr(p), C.uchar(v), C.size_t(n)))
}

// CopyHtoD copies src to device memory at dst and waits (cuMemcpyHtoD).
func (c *Context) CopyHtoD(dst DevicePtr, src []byte) error {
	if len(src) == 0 {
		return nil
	}
	return check("cuMemcpyHtoD", C.m2n_cuMemcpyHtoD(c.h, C.CUdeviceptr(dst), unsafe.Pointer(&src[0]), C.size_t(len(src))))
}

// CopyDtoH copies len(dst) bytes from device memory at src and waits
// (cuMemcpyDtoH).
func (c *Context) CopyDtoH(dst []byte, src DevicePtr) error {
	if len(dst) == 0 {
		return nil
	}
	return check("cuMemcpyDtoH", C.m2n_cuMemcpyDtoH(c.h, unsafe.Pointer(&dst[0]), C.CUdeviceptr(src), C.size_t(len(dst))))
}
