package cuda

// #include <string.h>
// #include "shim.h"
import "C"

import (
	"fmt"
	"unsafe"

	"github.com/m2n-dev/m2n/cuda/kernels"
	"github.com/m2n-dev/m2n/strided"
)

// BatchCopy is one copy of a batch: the bytes SrcDesc describes at Src go to
// the places DstDesc describes at Dst, byte k to byte k in packed order, as
// StridedCopy moves them. Either side may be contiguous (strided.Desc{Run: n}) or
// strided, and the copies of one batch may have any sizes.
type BatchCopy struct {
	Dst     DevicePtr
	DstDesc strided.Desc
	Src     DevicePtr
	SrcDesc strided.Desc
}

// batch is a list of copies planned once for the batched kernel
// (kernels/batch.h), which moves them all in one launch: a pack of many
// regions into staging, an unpack of many, or many local copies. Copies
// that describe no bytes are dropped; a copy whose two sides are contiguous
// and continue the previous copy's two sides is merged into it. Copies run
// concurrently: no copy may write bytes that another copy of the batch reads
// or writes.
type batch struct {
	plans []copyPlan
	bytes int64
}

// planBatch plans copies for one launch. It fails, naming the copy, on a
// descriptor PlanCopy would refuse (strided.ErrInvalid).
func planBatch(copies []BatchCopy) (*batch, error) {
	b := &batch{}
	var last *BatchCopy // the previous copy kept, when both its sides are one run
	var merged BatchCopy
	for i := range copies {
		c := copies[i]
		if err := checkDesc(c.SrcDesc); err != nil {
			return nil, fmt.Errorf("cuda: batch copy %d: source: %w", i, err)
		}
		if err := checkDesc(c.DstDesc); err != nil {
			return nil, fmt.Errorf("cuda: batch copy %d: destination: %w", i, err)
		}
		if c.SrcDesc.Bytes() == 0 && c.DstDesc.Bytes() == 0 {
			continue
		}
		if last != nil && oneRun(c.SrcDesc) && oneRun(c.DstDesc) && c.SrcDesc.Bytes() == c.DstDesc.Bytes() &&
			c.Src+DevicePtr(c.SrcDesc.Offset) == last.Src+DevicePtr(last.SrcDesc.Offset+last.SrcDesc.Run) &&
			c.Dst+DevicePtr(c.DstDesc.Offset) == last.Dst+DevicePtr(last.DstDesc.Offset+last.DstDesc.Run) {
			n := c.SrcDesc.Bytes()
			last.SrcDesc.Run += n
			last.DstDesc.Run += n
			p, err := planCopy(last.Dst, last.DstDesc, last.Src, last.SrcDesc)
			if err != nil {
				return nil, fmt.Errorf("cuda: batch copy %d: %w", i, err)
			}
			b.plans[len(b.plans)-1] = p
			b.bytes += n
			continue
		}
		p, err := planCopy(c.Dst, c.DstDesc, c.Src, c.SrcDesc)
		if err != nil {
			return nil, fmt.Errorf("cuda: batch copy %d: %w", i, err)
		}
		if p.items == 0 {
			continue
		}
		b.plans = append(b.plans, p)
		b.bytes += c.SrcDesc.Bytes()
		last = nil
		if oneRun(c.SrcDesc) && oneRun(c.DstDesc) {
			merged = BatchCopy{Dst: c.Dst + DevicePtr(c.DstDesc.Offset), DstDesc: strided.Desc{Run: c.DstDesc.Bytes()},
				Src: c.Src + DevicePtr(c.SrcDesc.Offset), SrcDesc: strided.Desc{Run: c.SrcDesc.Bytes()}}
			last = &merged
		}
	}
	return b, nil
}

// oneRun reports whether a valid descriptor's bytes are one contiguous run
// (after merging dimensions): Offset is where it starts and Bytes() its
// length.
func oneRun(d strided.Desc) bool {
	if d.Bytes() == 0 {
		return false
	}
	_, dims := normalize(d)
	return len(dims) == 0
}

// len returns the number of items the batch launches (after merging).
func (b *batch) len() int { return len(b.plans) }

// tableBytes returns the size of the batch's item table in device memory.
func (b *batch) tableBytes() int { return len(b.plans) * kernels.BatchItemSize }

// table marshals the item table: each item gets the blocks its own launch
// would use on a device where resident(width) blocks of that width's copy
// kernel fit at once. It returns the virtual blocks of the whole batch.
func (b *batch) table(resident func(width int) int) ([]byte, uint64) {
	out := make([]byte, b.tableBytes())
	var first uint64
	for i := range b.plans {
		p := &b.plans[i]
		var it C.m2n_batch_item
		it.p = p.cParams()
		it.width = C.ulonglong(p.width)
		it.first = C.ulonglong(first)
		n := uint64(p.grid(resident(p.width)))
		it.blocks = C.ulonglong(n)
		first += n
		C.memcpy(unsafe.Pointer(&out[i*kernels.BatchItemSize]), unsafe.Pointer(&it), C.size_t(kernels.BatchItemSize))
	}
	return out, first
}

// BatchLaunch is a batch whose item table lies in device memory, ready to be
// launched any number of times (on any stream of the context, or captured
// in a graph).
type BatchLaunch struct {
	Table  DevicePtr // the item table, in device memory
	Count  int       // items
	Blocks uint64    // virtual blocks of all items
}

// BatchTable plans copies for one launch of the batched kernel and
// marshals their item table for the context's device (it loads the
// kernels on first use, as every launch does). It returns the table, for
// the caller to upload (CopyHtoD) to wherever it keeps it, and the launch
// with its Count and Blocks set: the caller sets Table to the uploaded
// copy. It fails, naming the copy, on a descriptor StridedCopy would
// refuse (strided.ErrInvalid).
//
// The copies are planned once: copies that describe no bytes are dropped;
// a copy whose two sides are contiguous and continue the previous copy's
// two sides is merged into it. Copies run concurrently: no copy may write
// bytes that another copy of the batch reads or writes.
func (c *Context) BatchTable(copies []BatchCopy) (table []byte, l BatchLaunch, err error) {
	b, err := planBatch(copies)
	if err != nil {
		return nil, BatchLaunch{}, err
	}
	ks, err := c.loadKernels()
	if err != nil {
		return nil, BatchLaunch{}, fmt.Errorf("cuda: batch: %w", err)
	}
	table, blocks := b.table(func(w int) int { return ks.copies[widthIndex(w)].resident })
	return table, BatchLaunch{Count: b.len(), Blocks: blocks}, nil
}

// Launch queues the batched kernel over the launch's items on s. A launch of
// no items launches nothing.
func (l BatchLaunch) Launch(s *Stream) error {
	if l.Count == 0 || l.Blocks == 0 {
		return nil
	}
	ks, err := s.ctx.loadKernels()
	if err != nil {
		return fmt.Errorf("cuda: batch: %w", err)
	}
	bp := C.m2n_batch_params{items: C.ulonglong(l.Table), count: C.ulonglong(l.Count), blocks: C.ulonglong(l.Blocks)}
	grid := clampGrid(l.Blocks, maxGridBlocks)
	return check("cuLaunchKernel", C.m2n_launch_batch(s.ctx.h, ks.batch.fn, C.uint(grid), blockThreads, s.h, &bp))
}

// EmulateBatch plans copies as Context.BatchTable does and runs them
// through the batched kernel's source compiled for the CPU (package
// kernels), one simulated thread at a time, on a grid of at most maxGrid
// blocks, as a device on which resident blocks of every copy kernel fit at
// once would run it, and returns the number of items it ran. It is for
// tests: every address of every copy must lie in host memory from
// kernels.Alloc.
func EmulateBatch(copies []BatchCopy, resident, maxGrid int) (items int, err error) {
	b, err := planBatch(copies)
	if err != nil || b.len() == 0 {
		return 0, err
	}
	table, blocks := b.table(func(int) int { return resident })
	mem, free := kernels.Alloc(len(table))
	defer free()
	copy(mem, table)
	bp := C.m2n_batch_params{items: C.ulonglong(uintptr(unsafe.Pointer(&mem[0]))), count: C.ulonglong(b.len()), blocks: C.ulonglong(blocks)}
	params := C.GoBytes(unsafe.Pointer(&bp), C.sizeof_m2n_batch_params)
	return b.len(), kernels.EmulateBatch(params, clampGrid(blocks, maxGrid), blockThreads)
}
