package cuda

// #include <stdlib.h>
// #include "shim.h"
import "C"

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"unsafe"

	"github.com/m2n-dev/m2n/cuda/kernels"
	"github.com/m2n-dev/m2n/cuda/nvrtc"
	"github.com/m2n-dev/m2n/strided"
)

// kernelSet is the strided-copy module loaded into one context.
type kernelSet struct {
	mod C.CUmodule
	// copies[i] is the strided copy of elements of widths[i] bytes.
	copies [len(widths)]kernelFn
	// batch is the batched kernel (kernels/batch.h).
	batch kernelFn
	// quant holds the FP8 kernels (kernels/quant.h) by name.
	quant map[string]kernelFn
}

// kernelFn is one kernel of the module and how many of its blocks fit on
// the device at once.
type kernelFn struct {
	fn       C.CUfunction
	resident int
}

// images caches compiled kernels per architecture and output kind, for
// every context in the process.
var images struct {
	sync.Mutex
	m map[string]imageResult
}

type imageResult struct {
	image []byte
	err   error
}

// packBatch returns the rows per lane the kernels batch for short rows:
// M2N_PACK_BATCH if set to 1 to 8, else the source's default (2). Measured
// on an H200 (1 GiB, source pitch twice the row, bench/results/
// h200-pack-bench-batches.txt): pack and unpack of 256 B and 4 KiB rows
// reach 86-88% of a plain copy with 1 row, 91-92% with 2, 88-90% with 4
// and 83% with 8; 64 KiB rows take the chunked path at 96% regardless.
func packBatch() string { return envDigit("M2N_PACK_BATCH") }

// fusedMinBlocks returns the resident blocks per SM the fused FP8 kernels
// ask for (their __launch_bounds__): M2N_FUSED_MINB if set to 1 to 8, else
// the source's default (4: at most 64 registers; the 8 vectors a thread
// reads wait in shared memory). For measuring on a GPU without a rebuild.
func fusedMinBlocks() string { return envDigit("M2N_FUSED_MINB") }

// envDigit returns the environment variable name where it is one digit
// from 1 to 8, else "": the kernels' tuning knobs, which package envopts
// refuses otherwise.
func envDigit(name string) string {
	if v := os.Getenv(name); len(v) == 1 && v >= "1" && v <= "8" {
		return v
	}
	return ""
}

func kernelImage(major, minor int, out nvrtc.Output) ([]byte, error) {
	arch := fmt.Sprintf("sm_%d%d", major, minor)
	if out == nvrtc.PTX {
		arch = fmt.Sprintf("compute_%d%d", major, minor)
	}
	batch, minb := packBatch(), fusedMinBlocks()
	key := arch + "/" + batch + "/" + minb
	images.Lock()
	defer images.Unlock()
	if r, ok := images.m[key]; ok {
		return r.image, r.err
	}
	var headers []nvrtc.Header
	names, sources := kernels.StridedHeaders()
	for i := range names {
		headers = append(headers, nvrtc.Header{Name: names[i], Source: sources[i]})
	}
	opts := []string{"--gpu-architecture=" + arch, "--std=c++17"}
	if batch != "" {
		opts = append(opts, "-DM2N_BATCH="+batch)
	}
	if minb != "" {
		opts = append(opts, "-DM2N_FMINB="+minb)
	}
	image, err := nvrtc.Compile(kernels.StridedSource(), "m2n_strided.cu", headers, opts, out)
	if err != nil {
		err = fmt.Errorf("cuda: compiling the strided-copy kernels for %s: %w", arch, err)
	}
	if images.m == nil {
		images.m = map[string]imageResult{}
	}
	images.m[key] = imageResult{image, err}
	return image, err
}

// loadKernels returns the context's strided-copy kernels, compiling and
// loading them on first use: a CUBIN for the device's architecture, or PTX
// for the driver to compile if the CUBIN does not load.
func (c *Context) loadKernels() (*kernelSet, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.released {
		return nil, errors.New("cuda: context already released")
	}
	if c.kernels != nil {
		return c.kernels, nil
	}
	major, minor, err := c.dev.computeCapability()
	if err != nil {
		return nil, err
	}
	image, err := kernelImage(major, minor, nvrtc.CUBIN)
	var ks *kernelSet
	if err == nil {
		ks, err = c.loadModule(image)
	}
	if err != nil {
		ptx, perr := kernelImage(major, minor, nvrtc.PTX)
		if perr == nil {
			// PTX must be NUL-terminated for cuModuleLoadData.
			ks, perr = c.loadModule(append(ptx[:len(ptx):len(ptx)], 0))
		}
		if perr != nil {
			return nil, errors.Join(err, perr)
		}
	}
	c.kernels = ks
	return ks, nil
}

// loadModule loads a compiled strided-copy module into the context and
// looks up its kernels and how many of their blocks fit on the device.
func (c *Context) loadModule(image []byte) (*kernelSet, error) {
	var mod C.CUmodule
	if err := check("cuModuleLoadData", C.m2n_cuModuleLoadData(c.h, &mod, unsafe.Pointer(&image[0]))); err != nil {
		return nil, err
	}
	ks := &kernelSet{mod: mod, quant: map[string]kernelFn{}}
	err := func() (err error) {
		for i, w := range widths {
			if ks.copies[i], err = c.function(mod, fmt.Sprintf("m2n_copy%d", w)); err != nil {
				return err
			}
		}
		if ks.batch, err = c.function(mod, "m2n_batch"); err != nil {
			return err
		}
		for _, name := range quantKernels() {
			if ks.quant[name], err = c.function(mod, name); err != nil {
				return err
			}
		}
		return nil
	}()
	if err != nil {
		C.m2n_cuModuleUnload(c.h, mod)
		return nil, err
	}
	return ks, nil
}

// function looks up kernel name in mod and how many of its blocks fit on
// the device at once.
func (c *Context) function(mod C.CUmodule, name string) (kernelFn, error) {
	cname := C.CString(name)
	defer C.free(unsafe.Pointer(cname))
	var k kernelFn
	if err := check("cuModuleGetFunction", C.m2n_cuModuleGetFunction(c.h, &k.fn, mod, cname)); err != nil {
		return kernelFn{}, fmt.Errorf("%s: %w", name, err)
	}
	var n C.int
	if err := check("cuOccupancyMaxActiveBlocksPerMultiprocessor",
		C.m2n_cuOccupancyMaxActiveBlocksPerMultiprocessor(c.h, &n, k.fn, blockThreads)); err != nil {
		return kernelFn{}, fmt.Errorf("%s: %w", name, err)
	}
	k.resident = max(int(n), 1) * c.sms
	return k, nil
}

func (k *kernelSet) unload(c *Context) error {
	return check("cuModuleUnload", C.m2n_cuModuleUnload(c.h, k.mod))
}

// cSide marshals a side's row addressing into the kernels' m2n_side.
func (s planSide) cSide() C.m2n_side {
	var cs C.m2n_side
	cs.base = C.ulonglong(s.base)
	cs.nd = C.ulonglong(len(s.count))
	for i := range s.count {
		cs.count[i] = C.ulonglong(s.count[i])
		cs.stride[i] = C.ulonglong(s.stride[i])
	}
	return cs
}

// cBytes returns the bytes of a parameter block, for the CPU emulator.
func cBytes[T any](cp T) []byte {
	return C.GoBytes(unsafe.Pointer(&cp), C.int(unsafe.Sizeof(cp)))
}

// cParams marshals the plan into the kernels' parameter block.
func (p *copyPlan) cParams() C.m2n_copy_params {
	var cp C.m2n_copy_params
	cp.src = p.src.cSide()
	cp.dst = p.dst.cSide()
	cp.rows = C.ulonglong(p.rows)
	cp.run_elems = C.ulonglong(p.runElems)
	cp.chunk_elems = C.ulonglong(p.chunkElems)
	cp.chunks_per_row = C.ulonglong(p.chunksPerRow)
	cp.items = C.ulonglong(p.items)
	cp.team_shift = C.ulonglong(p.teamShift)
	return cp
}

// paramBytes returns the parameter block's bytes, for the CPU emulator.
func (p *copyPlan) paramBytes() []byte { return cBytes(p.cParams()) }

func widthIndex(w int) int {
	for i, x := range widths {
		if x == w {
			return i
		}
	}
	panic(fmt.Sprintf("cuda: no kernel for width %d", w))
}

// launch queues the plan's kernel on s. An empty plan launches nothing.
func launch(s *Stream, op string, p copyPlan) error {
	if p.items == 0 {
		return nil
	}
	ks, err := s.ctx.loadKernels()
	if err != nil {
		return fmt.Errorf("cuda: %s: %w", op, err)
	}
	if err := ks.launch(s, p, p.grid(ks.copies[widthIndex(p.width)].resident)); err != nil {
		return fmt.Errorf("cuda: %s: %w", op, err)
	}
	return nil
}

func (k *kernelSet) launch(s *Stream, p copyPlan, grid int) error {
	cp := p.cParams()
	r := C.m2n_launch_copy(s.ctx.h, k.copies[widthIndex(p.width)].fn, C.uint(grid), blockThreads, s.h, &cp)
	return check("cuLaunchKernel", r)
}

// Pack queues on s a copy of the bytes desc describes at src into dst,
// contiguously (desc.Bytes() bytes). Any alignment works; 16-byte aligned
// addresses, runs and strides get the fastest kernel. Describing no bytes is
// a no-op that launches nothing. The buffers must not overlap. Errors wrap
// strided.ErrInvalid for a bad descriptor; the first call in a context compiles
// the kernels (NVRTC) and may fail with nvrtc.ErrNotAvailable.
func Pack(s *Stream, dst, src DevicePtr, desc strided.Desc) error {
	p, err := planCopy(dst, strided.Desc{Run: desc.Bytes()}, src, desc)
	if err != nil {
		return fmt.Errorf("cuda: Pack: %w", err)
	}
	return launch(s, "Pack", p)
}

// Unpack queues on s a copy of desc.Bytes() contiguous bytes at src to the
// places desc describes at dst; other bytes of dst are left alone. desc's
// runs must be disjoint. Otherwise as Pack.
func Unpack(s *Stream, dst DevicePtr, desc strided.Desc, src DevicePtr) error {
	p, err := planCopy(dst, desc, src, strided.Desc{Run: desc.Bytes()})
	if err != nil {
		return fmt.Errorf("cuda: Unpack: %w", err)
	}
	return launch(s, "Unpack", p)
}

// StridedCopy queues on s a copy from the places srcDesc describes at src to
// the places dstDesc describes at dst, byte k to byte k in packed order. The
// two must describe the same number of bytes but may have different runs and
// dimensions (runs are split to their greatest common divisor: keep the runs
// multiples of each other for speed). dstDesc's runs must be disjoint.
// Otherwise as Pack.
func StridedCopy(s *Stream, dst DevicePtr, dstDesc strided.Desc, src DevicePtr, srcDesc strided.Desc) error {
	p, err := planCopy(dst, dstDesc, src, srcDesc)
	if err != nil {
		return fmt.Errorf("cuda: StridedCopy: %w", err)
	}
	return launch(s, "StridedCopy", p)
}
