// Package cuda is m2n's binding to the CUDA driver API: devices, primary
// contexts, device and pinned memory, streams, events, and the strided
// copies (pack/unpack kernels) that move a box of a tensor between its place
// in a dense buffer and a contiguous staging buffer. (The NVLink domain a GPU
// sits in comes from NVML, in package internal/nvlink.)
//
// libcuda.so.1 is opened with dlopen when Load is first called (the file can
// be named with M2N_CUDA_PATH), so building needs no CUDA toolkit; the
// kernels are compiled at run time with NVRTC (package cuda/nvrtc). Where
// there is no driver or no device, Load's error wraps ErrNotAvailable and
// says why, and callers (tests too) skip with it. The package is cgo, one
// package per C library; pure packages must not import it.
//
// A walk through a pack on one GPU:
//
//	if err := cuda.Load(); err != nil {
//		return err // errors.Is(err, cuda.ErrNotAvailable): no GPU here
//	}
//	dev, _ := cuda.GetDevice(0)
//	ctx, _ := dev.PrimaryContext() // the runtime's and NCCL's context too
//	defer ctx.Release()
//	s, _ := ctx.NewStream()
//	defer s.Destroy()
//
//	// Box rows [1,3) x cols [2,6) of a 4x8 float32 matrix at src:
//	box := strided.Desc{Offset: (1*8 + 2) * 4, Run: 4 * 4,
//		Count: []int64{2}, Stride: []int64{8 * 4}}
//	staging, _ := ctx.Alloc(int(box.Bytes())) // 32 bytes
//	_ = cuda.Pack(s, staging, src, box)       // strided -> contiguous
//	_ = cuda.Unpack(s, dst, box, staging)     // contiguous -> strided
//	_ = s.Synchronize()
//
// Many copies in one launch: PlanBatch plans a list of BatchCopy (each a
// source and a destination region, strided or contiguous, of any size) for
// the batched kernel (kernels/batch.h), Context.BatchTable marshals its item
// table for upload, and BatchLaunch launches it any number of times, on a
// stream or in a graph captured with Stream.BeginCapture.
//
// FP8: Memory.BlockAmax gathers the partial amaxes of the blocks a source
// region touches into a device window, and Memory.PackQuantize packs a
// region straight into float8_e4m3fn bytes with the global block scales,
// byte for byte as package fp8 does on the host (the kernels are in
// kernels/quant.h, compiled with the copies; the tests run them through the
// CPU emulator and, where there is one, on the GPU):
//
//	reg := cuda.FP8Region{DType: placement.BF16, Src: local, At: t.SrcAt, Box: t.Box}
//	_ = mem.BlockAmax(g, cuda.FP8Window{Blocks: blocks, Values: amaxBuf}, reg) // zeroed first
//	// ... download, combine across ranks (fp8.Window.MaxWith), ToScales, upload ...
//	_ = mem.PackQuantize(g, staging, off, reg, cuda.FP8Window{Blocks: blocks, Values: scaleBuf})
//
// Memory is a transport.QuantMemory with these kernels (QuantAmax, LoadScales,
// QuantPack), so a call that converts to FP8 in flight (refit.Spec.Scale)
// on a GPU session quantizes on the device in the pass that packs.
//
// Threads: the driver keeps a current context per OS thread and goroutines
// move between threads, so every call here makes its context current itself.
// Other CUDA libraries (NCCL) use whatever is current on the calling thread:
// lock the goroutine and make the context current first with Context.Bind.
//
// Errors from the driver are *Error values naming the call:
// "cuda: cuMemAlloc: CUDA_ERROR_OUT_OF_MEMORY: out of memory".
package cuda
