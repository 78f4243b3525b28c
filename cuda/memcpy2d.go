package cuda

// #include "shim.h"
import "C"

import "fmt"

// Copy2D is a pitched device-to-device copy: Height rows of Width bytes, row
// i read from Src+i*SrcPitch and written to Dst+i*DstPitch.
type Copy2D struct {
	Dst, Src           DevicePtr
	DstPitch, SrcPitch int
	Width, Height      int
}

// Memcpy2DAsync queues c with the copy engines (cuMemcpy2DAsync). It is kept
// for comparison with Pack: on an H200, packing 1 GiB from rows at twice
// their width apart, it reached 68%, 76% and 40% of a plain copy for rows of
// 256 B, 4 KiB and 64 KiB.
func Memcpy2DAsync(s *Stream, c Copy2D) error {
	if c.Width < 0 || c.Height < 0 || c.DstPitch < c.Width || c.SrcPitch < c.Width {
		return fmt.Errorf("cuda: cuMemcpy2DAsync: bad shape %+v", c)
	}
	if c.Width == 0 || c.Height == 0 {
		return nil
	}
	p := C.m2n_memcpy2d{
		srcMemoryType: C.M2N_CU_MEMORYTYPE_DEVICE,
		srcDevice:     C.CUdeviceptr(c.Src),
		srcPitch:      C.size_t(c.SrcPitch),
		dstMemoryType: C.M2N_CU_MEMORYTYPE_DEVICE,
		dstDevice:     C.CUdeviceptr(c.Dst),
		dstPitch:      C.size_t(c.DstPitch),
		WidthInBytes:  C.size_t(c.Width),
		Height:        C.size_t(c.Height),
	}
	return check("cuMemcpy2DAsync", C.m2n_cuMemcpy2DAsync(s.ctx.h, &p, s.h))
}
