package transport

import (
	"fmt"

	"github.com/m2n-dev/m2n/dtype"
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
	DType dtype.DType
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

// AmaxJob is one region whose partial amaxes QuantAmaxes gathers: the
// blocks of Grid that Region touches fold into Window, a window in host
// memory (zeroed, or holding earlier partial amaxes; its Values are
// updated in place). Err is the job's own failure, which QuantAmaxes sets:
// a *fp8.NonFiniteError naming the first NaN or infinity of the region in
// row-major order of its box.
type AmaxJob struct {
	Grid   fp8.Grid
	Window fp8.Window
	Region QuantRegion
	Err    error
}

// QuantMemory is a Memory that quantizes to FP8 E4M3 in its own buffers by
// package fp8's rule (bit for bit torch's): the runtime gathers the
// converting tensors' partial amaxes and packs their messages through it.
// HostMemory implements it with package fp8, package cudamem's Memory with
// its kernels. A step's FP8 stage is a few calls for all its tensors
// together, so that on a GPU it costs a few round trips to the device,
// not a few per tensor.
type QuantMemory interface {
	Memory
	// QuantAmaxes folds, for every job, the amax of every block of its
	// grid that its region touches into its window: each such block's
	// value becomes the larger of what it holds and the largest magnitude
	// among the region's elements in it. A job's own failure is set in its
	// Err; the error returned is one that fails every job.
	QuantAmaxes(jobs []AmaxJob) error
	// LoadScales makes windows of scales usable by QuantPack (on a GPU, one
	// device copy of them all); release frees them all.
	LoadScales(ws []fp8.Window) (s []Scales, release func(), err error)
	// WriteScales writes src[i] into dst[i] for every i, each a scale
	// tensor of a destination (on a GPU, in one copy to the device), and
	// returns once every byte is in place.
	WriteScales(dst []Buffer, src [][]byte) error
	// QuantPack quantizes region r into dst[off : off+r.Box.Elems()]: byte
	// i is the E4M3 byte of r's i-th element in row-major order of r.Box,
	// divided by its block's scale from s (which must hold every block r
	// touches), as fp8.Grid.Pack writes it. It may run asynchronously,
	// like Pack (Sync waits).
	QuantPack(g fp8.Grid, dst Buffer, off int64, r QuantRegion, s Scales) error
}

// QuantAmaxes implements QuantMemory.
func (HostMemory) QuantAmaxes(jobs []AmaxJob) error {
	for i := range jobs {
		j := &jobs[i]
		src, ok := j.Region.Buf.(HostBuffer)
		if !ok {
			return fmt.Errorf("transport: HostMemory needs a HostBuffer, got %T", j.Region.Buf)
		}
		r := j.Region
		j.Err = j.Grid.Amax(j.Window, fp8.Region{DType: r.DType, Data: src, At: r.At, Box: r.Box})
	}
	return nil
}

// LoadScales implements QuantMemory: host memory reads the windows
// themselves.
func (HostMemory) LoadScales(ws []fp8.Window) ([]Scales, func(), error) {
	s := make([]Scales, len(ws))
	for i, w := range ws {
		s[i] = Scales{Window: w}
	}
	return s, func() {}, nil
}

// WriteScales implements QuantMemory.
func (m HostMemory) WriteScales(dst []Buffer, src [][]byte) error {
	if len(dst) != len(src) {
		return fmt.Errorf("transport: %d scale buffers for %d scale tensors", len(dst), len(src))
	}
	for i := range dst {
		if err := m.Upload(dst[i], src[i]); err != nil {
			return err
		}
	}
	return nil
}

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
