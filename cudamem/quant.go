package cudamem

import (
	"fmt"

	"github.com/m2n-dev/m2n/cuda"
	"github.com/m2n-dev/m2n/dtype"
	"github.com/m2n-dev/m2n/fp8"
	"github.com/m2n-dev/m2n/placement"
	"github.com/m2n-dev/m2n/strided"
	"github.com/m2n-dev/m2n/transport"
)

// FP8Window is an fp8.Window in device memory: one 4-byte value per block
// of Blocks, row-major, in Values (4*Blocks.Elems() bytes). BlockAmax
// gathers amaxes into one (as float32 bits); PackQuantize reads float32
// scales from one. Download it into an fp8.Window's Values to combine
// amaxes or turn them into scales on the host: the bytes are the same.
type FP8Window struct {
	Blocks placement.Box
	Values Buffer
}

// FP8Region is a source region in device memory: the box Box of the global
// tensor, its elements (bf16 or f32) in row-major order of Box where At
// says in Src, as fp8.Region is on the host. At's runs must hold whole rows
// of Box (every descriptor of strided.Describe and of a placement.View
// does).
type FP8Region struct {
	DType dtype.DType
	Src   transport.Buffer
	At    strided.Desc
	Box   placement.Box
}

// BlockAmax queues on the Memory's stream a kernel that folds the partial
// amax of every block region r touches into amax: each such block's value
// becomes the larger of what it holds and the largest magnitude among r's
// elements in it, as fp8.Grid.Amax does. Values are float32 bits, so a
// window starts zeroed (Memset). A NaN or infinity makes its block's value
// 0x7F800000 or above (an infinite or NaN float32): the kernel reports
// nothing, so check the downloaded window (fp8.Window.ToScales refuses it)
// and read the region back (QuantAmax does) for the element's index.
func (m *Memory) BlockAmax(g fp8.Grid, amax FP8Window, r FP8Region) error {
	reg, win, err := m.quantArgs("BlockAmax", r, amax)
	if err != nil {
		return err
	}
	return cuda.BlockAmax(m.Stream, g, win, reg)
}

// PackQuantize queues on the Memory's stream the quantize-while-packing of
// region r: dst[off+i] becomes the E4M3 byte of the i-th element of r in
// row-major order of r.Box, divided by its block's scale from scales
// (float32s), clamped and rounded as fp8.Grid.Pack does, byte for byte. It
// reads the source once and writes half (bf16) or a quarter (f32) of its
// bytes: a pack that sends FP8. Non-finite elements give 0x7F or +-448
// (BlockAmax, the pass before, is where they are caught).
func (m *Memory) PackQuantize(g fp8.Grid, dst transport.Buffer, off int64, r FP8Region, scales FP8Window) error {
	d, err := deviceBuf(dst)
	if err != nil {
		return err
	}
	const op = "PackQuantize"
	reg, win, err := m.quantArgs(op, r, scales)
	if err != nil {
		return err
	}
	if err := checkRegion(op+" destination", strided.Desc{Offset: off, Run: r.Box.Elems()}, d.N); err != nil {
		return err
	}
	return cuda.PackQuantize(m.Stream, g, d.Ptr+cuda.DevicePtr(off), reg, win)
}

// FusedQuantize queues on the Memory's stream the fused amax-quantize-pack
// of region r, whose box must hold every block it touches whole
// (fp8.Grid.WholeBlocks; fp8.Grid.SplitWhole splits a part into its whole
// blocks and the ones a rank boundary cuts, which need BlockAmax, the
// exchange and PackQuantize): each block read once, its scale written into
// scales (float32s) and its elements packed as E4M3 into
// dst[off:off+r.Box.Elems()], the bytes and scales of fp8.Quantize of the
// whole tensor. A NaN or infinity makes its block's scale non-finite:
// download the window and check it before the bytes are used.
func (m *Memory) FusedQuantize(g fp8.Grid, dst transport.Buffer, off int64, r FP8Region, scales FP8Window) error {
	d, err := deviceBuf(dst)
	if err != nil {
		return err
	}
	const op = "FusedQuantize"
	reg, win, err := m.quantArgs(op, r, scales)
	if err != nil {
		return err
	}
	if err := checkRegion(op+" destination", strided.Desc{Offset: off, Run: r.Box.Elems()}, d.N); err != nil {
		return err
	}
	return cuda.FusedQuantize(m.Stream, g, d.Ptr+cuda.DevicePtr(off), reg, win)
}

// quantArgs checks an FP8 kernel's source region and window against their
// buffers and returns their device addresses.
func (m *Memory) quantArgs(op string, r FP8Region, w FP8Window) (cuda.FP8Region, cuda.FP8Window, error) {
	s, err := deviceBuf(r.Src)
	if err != nil {
		return cuda.FP8Region{}, cuda.FP8Window{}, fmt.Errorf("cuda: %s: source: %w", op, err)
	}
	if err := checkRegion(op+" source", r.At, s.N); err != nil {
		return cuda.FP8Region{}, cuda.FP8Window{}, err
	}
	if need := 4 * w.Blocks.Elems(); w.Values.N < need {
		return cuda.FP8Region{}, cuda.FP8Window{}, fmt.Errorf("cuda: %s: window over blocks %v needs %d bytes, its buffer has %d", op, w.Blocks, need, w.Values.N)
	}
	return cuda.FP8Region{DType: r.DType, Src: s.Ptr, At: r.At, Box: r.Box}, cuda.FP8Window{Blocks: w.Blocks, Values: w.Values.Ptr}, nil
}

// firstNonFinite reads region r back to the host and returns the
// *fp8.NonFiniteError of its first NaN or infinity, or nil: what to report
// when a BlockAmax window shows a non-finite amax.
func (m *Memory) firstNonFinite(g fp8.Grid, r FP8Region) error {
	host := make([]byte, r.At.Bytes())
	if err := m.ReadRegion(host, r.Src, r.At); err != nil {
		return err
	}
	return g.CheckFinite(fp8.Dense(r.DType, host, r.Box))
}
