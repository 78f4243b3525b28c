package transport

import (
	"fmt"

	"github.com/m2n-dev/m2n/fp8"
	"github.com/m2n-dev/m2n/placement"
	"github.com/m2n-dev/m2n/strided"
)

// This file holds what converting a tensor to FP8 in flight needs beyond
// moving bytes (see Spec.Scale): the memory's quantizer, the scales a rank
// packs with, and the checks of a spec's scale mode.

// QuantRegion is a box of a tensor's source as one rank holds it: the
// elements of Box (global coordinates), bf16 or f32 in row-major order of
// Box, sit in Buf where At says (At's runs hold whole rows of Box, as every
// descriptor of Describe and DescribeView with a unit innermost stride
// does).
type QuantRegion struct {
	DType placement.DType
	Buf   Buffer
	At    strided.Desc
	Box   placement.Box
}

// Scales are block scales loaded into a QuantMemory for QuantPack: the
// window of their values on the host, and the memory's own copy (nil for
// host memory; device memory on a GPU).
type Scales struct {
	fp8.Window
	Dev Buffer
}

// QuantMemory is a Memory that quantizes to FP8 E4M3 in its own buffers by
// package fp8's rule (bit for bit torch's): the executor gathers a
// converting tensor's partial amaxes and packs its messages through it.
// HostMemory implements it with package fp8, package cudamem's Memory with
// its kernels.
type QuantMemory interface {
	Memory
	// QuantAmax folds into w, a window in host memory (zeroed, or holding
	// earlier partial amaxes), the amax of every block of grid g that
	// region r touches: each such block's value becomes the larger of what
	// it holds and the largest magnitude among r's elements in it. A NaN
	// or infinity fails it with a *fp8.NonFiniteError naming the first one
	// in row-major order of r.Box.
	QuantAmax(g fp8.Grid, w fp8.Window, r QuantRegion) error
	// LoadScales makes a window of scales usable by QuantPack (on a GPU,
	// a device copy); release it with FreeScales.
	LoadScales(w fp8.Window) (Scales, error)
	// FreeScales releases what LoadScales made.
	FreeScales(s Scales)
	// QuantPack quantizes region r into dst[off : off+r.Box.Elems()]: byte
	// i is the E4M3 byte of r's i-th element in row-major order of r.Box,
	// divided by its block's scale from s (which must hold every block r
	// touches), as fp8.Grid.Pack writes it. It may run asynchronously,
	// like Pack (Sync waits).
	QuantPack(g fp8.Grid, dst Buffer, off int64, r QuantRegion, s Scales) error
}

// QuantAmax implements QuantMemory.
func (HostMemory) QuantAmax(g fp8.Grid, w fp8.Window, r QuantRegion) error {
	src, ok := r.Buf.(HostBuffer)
	if !ok {
		return fmt.Errorf("transport: HostMemory needs a HostBuffer, got %T", r.Buf)
	}
	return g.Amax(w, fp8.Region{DType: r.DType, Data: src, At: r.At, Box: r.Box})
}

// LoadScales implements QuantMemory: host memory reads the window itself.
func (HostMemory) LoadScales(w fp8.Window) (Scales, error) { return Scales{Window: w}, nil }

// FreeScales implements QuantMemory.
func (HostMemory) FreeScales(Scales) {}

// QuantPack implements QuantMemory.
func (HostMemory) QuantPack(g fp8.Grid, dst Buffer, off int64, r QuantRegion, s Scales) error {
	d, src, err := hostPair(dst, r.Buf)
	if err != nil {
		return err
	}
	n := r.Box.Elems()
	if err := checkRange("quantize-pack destination", off, n, int64(len(d))); err != nil {
		return err
	}
	return g.Pack(d[off:off+n], fp8.Region{DType: r.DType, Data: src, At: r.At, Box: r.Box}, s.Window)
}
