// Package cudamem is device memory for the transports: transport.Memory
// and transport.QuantMemory over one GPU, on the CUDA binding of package
// cuda (cuda.Memory's old job). Buffers are device memory (Buffer); pack,
// unpack and copies run as package cuda's strided-copy kernels on the
// Memory's stream, and the FP8 conversion in flight as its FP8 kernels,
// after every descriptor has been checked against its buffer (device code
// cannot report an out-of-range address). Memory also implements the
// conformance suite's HostIO (Upload, Download), transport.RegionReader
// and transport.Addresser.
//
//	mem, _ := cudamem.NewMemory(ctx) // ctx from cuda.Device.PrimaryContext
//	defer mem.Close()
//	buf, _ := mem.Alloc(n)
//	_ = mem.Upload(buf, host)
//
// FP8: Memory.BlockAmax gathers the partial amaxes of the blocks a source
// region touches into a device window, and Memory.PackQuantize packs a
// region straight into float8_e4m3fn bytes with the global block scales,
// byte for byte as package fp8 does on the host:
//
//	reg := cudamem.FP8Region{DType: dtype.BF16, Src: local, At: t.SrcAt, Box: t.Box}
//	_ = mem.BlockAmax(g, cudamem.FP8Window{Blocks: blocks, Values: amaxBuf}, reg) // zeroed first
//	// ... download, combine across ranks (fp8.Window.MaxWith), ToScales, upload ...
//	_ = mem.PackQuantize(g, staging, off, reg, cudamem.FP8Window{Blocks: blocks, Values: scaleBuf})
//
// Memory is a transport.QuantMemory with these kernels (QuantAmax,
// LoadScales, QuantPack), so a call that converts to FP8 in flight
// (refit.Spec.Scale) on a GPU session quantizes on the device in the pass
// that packs.
//
// The package is pure Go over package cuda's API (it has no cgo of its
// own), but it imports cuda, so pure packages must not import it. Its
// errors say "cuda: ", as they did when Memory lived in package cuda.
package cudamem
