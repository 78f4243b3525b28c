// Package cuda is m2n's binding to the CUDA driver API: devices, primary
// contexts, device memory, streams, events, graphs, and the launches of
// m2n's kernels: the strided copies (pack/unpack) that move a box of a
// tensor between its place in a dense buffer and a contiguous staging
// buffer, the batched copy, and the FP8 quantize-pack and block amax. (The
// NVLink domain a GPU sits in comes from NVML, in package internal/nvlink;
// the transport.Memory over device memory is package cudamem.)
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
// Many copies in one launch: Context.BatchTable plans a list of BatchCopy
// (each a source and a destination region, strided or contiguous, of any
// size) for the batched kernel (kernels/batch.h) and marshals its item
// table for upload, and BatchLaunch launches it any number of times, on a
// stream or in a graph captured with Stream.Capture.
//
// FP8: BlockAmax gathers the partial amaxes of the blocks a source region
// touches into a device window, and PackQuantize packs a region straight
// into float8_e4m3fn bytes with the global block scales, byte for byte as
// package fp8 does on the host (the kernels are in kernels/quant.h,
// compiled with the copies; the tests run them through the CPU emulator
// and, where there is one, on the GPU):
//
//	reg := cuda.FP8Region{DType: dtype.BF16, Src: src, At: t.SrcAt, Box: t.Box}
//	_ = cuda.BlockAmax(s, g, cuda.FP8Window{Blocks: blocks, Values: amax}, reg) // zeroed first
//	// ... copy back, combine across ranks (fp8.Window.MaxWith), ToScales, copy in ...
//	_ = cuda.PackQuantize(s, g, staging, reg, cuda.FP8Window{Blocks: blocks, Values: scales})
//
// That is two passes over the source and an exchange between them, which
// only blocks that a rank boundary cuts need. A region that holds every
// block it touches whole (fp8.Grid.SplitWhole splits a part into its whole
// blocks and its cut ones, from the layout alone) takes FusedQuantize
// instead: one pass that reads each block once, reduces its amax on the
// chip, writes its scale and packs it, with the same bytes and scales as
// fp8.Quantize of the whole tensor. Row scaling serves whole rows so;
// tensor scaling only a part that holds whole matrices: a sharded matrix
// has one scale over every rank's elements, so one amax pass and the
// exchange come before any element can be quantized, whatever the kernel.
//
//	_ = cuda.FusedQuantize(s, g, staging, reg, cuda.FP8Window{Blocks: blocks, Values: scales}) // scales out
//
// These launches take device addresses and check only the descriptors,
// not that the addresses lie in device memory: package cudamem
// is the transport.Memory (and transport.QuantMemory) over them, with
// buffers that know their size.
//
// Threads: the driver keeps a current context per OS thread and goroutines
// move between threads, so every call here makes its context current itself.
// Other CUDA libraries (NCCL) use whatever is current on the calling thread:
// lock the goroutine and make the context current first with Context.Bind.
//
// Errors from the driver name the call, the CUresult's name and its text:
// "cuda: cuMemAlloc: CUDA_ERROR_OUT_OF_MEMORY: out of memory".
package cuda
