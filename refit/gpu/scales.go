package gpu

// The FP8 scales of a step: uploaded into windows at fixed addresses for
// the tensors whose scales the ranks exchanged, computed by the step itself
// for the self-scaled ones (refit.TensorQuant.Self: a Fuse command per
// part, the destination scale tensors copied out of the windows, and one
// Check of every window, read back after the step).

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/m2n-dev/m2n/cuda"
	"github.com/m2n-dev/m2n/cudamem"
	"github.com/m2n-dev/m2n/dtype"
	"github.com/m2n-dev/m2n/fp8"
	"github.com/m2n-dev/m2n/internal/replay"
	"github.com/m2n-dev/m2n/placement"
	"github.com/m2n-dev/m2n/refit"
	"github.com/m2n-dev/m2n/strided"
)

// selfScaling is the replay's memory for its self-scaled tensors: their
// windows one after another in arena, then the 4-byte flag of the step's
// Check; parts[t] is tensor t's FP8 part buffer where its plan stages one.
type selfScaling struct {
	arena   cudamem.Buffer
	windows int64
	parts   []cudamem.Buffer
	flag    [4]byte
}

// loadQuant makes the replay's scale windows match this step's FP8
// tensors and uploads the scales the ranks exchanged, one upload for them
// all. The windows (one device buffer for the uploaded ones, one for the
// self-scaled ones with their FP8 part buffers) are allocated the first
// time or when a tensor's blocks change, dropping the bound step, whose
// commands read the old ones. A launched step still reading them is
// waited for first.
func (r *Replay) loadQuant(qs []refit.TensorQuant) error {
	if len(qs) == 0 && len(r.quant) == 0 {
		return nil
	}
	if r.inflight {
		if err := r.streams[replay.Compute].Synchronize(); err != nil {
			return err
		}
		r.inflight = false
	}
	if !r.quantSame(qs) {
		if err := r.allocQuant(qs); err != nil {
			return err
		}
	}
	bits := r.scaleBits[:0]
	for _, q := range qs {
		if q.Grid.NDim() != 0 && !q.Self {
			bits = q.Scales.Window.AppendBits(bits)
		}
	}
	r.scaleBits = bits
	if len(bits) == 0 {
		return nil
	}
	if err := r.ctx.CopyHtoD(r.scaleArena.Ptr, bits); err != nil {
		return fmt.Errorf("gpu: rank %d: the step's FP8 scales (%d bytes): %w", r.prog.Rank, len(bits), err)
	}
	return nil
}

// quantSame reports whether the windows the replay holds fit qs.
func (r *Replay) quantSame(qs []refit.TensorQuant) bool {
	if len(r.quant) != len(qs) {
		return false
	}
	for t, q := range qs {
		h := &r.quant[t]
		switch {
		case q.Grid.NDim() == 0 || h.Grid.NDim() == 0:
			if q.Grid.NDim() != h.Grid.NDim() {
				return false
			}
		case q.Self:
			if !h.Self || !h.Part.Equal(q.Part) || !h.Blocks.Equal(q.PartBlocks) || !h.DstBlocks.Equal(q.DstBlocks) {
				return false
			}
		default:
			if h.Self || !h.Blocks.Equal(q.Scales.Window.Blocks) || h.Scales.Len != 4*int64(len(q.Scales.Window.Values)) {
				return false
			}
		}
	}
	return true
}

// allocQuant drops the bound step and the old windows and allocates the
// windows, flag and FP8 part buffers of qs.
func (r *Replay) allocQuant(qs []refit.TensorQuant) error {
	if err := r.unbind(); err != nil {
		return err
	}
	if err := r.freeScales(); err != nil {
		return err
	}
	if err := r.freeSelf(); err != nil {
		return err
	}
	var uploaded, windows int64
	for _, q := range qs {
		switch {
		case q.Grid.NDim() == 0:
		case q.Self:
			windows += 4 * q.PartBlocks.Elems()
		default:
			uploaded += 4 * int64(len(q.Scales.Window.Values))
		}
	}
	arena, err := r.alloc(uploaded)
	if err != nil {
		return err
	}
	r.scaleArena = arena
	if windows > 0 {
		if r.self.arena, err = r.alloc(windows + 4); err != nil {
			return err
		}
		r.self.windows = windows
		// zeros: a window the step does not write (a part that packs
		// nothing) reads as finite in the Check
		if err := r.ctx.Memset(r.self.arena.Ptr, 0, int(windows+4)); err != nil {
			return err
		}
	}
	r.quant = make([]replay.QuantTensor, len(qs))
	var up, own uint64
	for t, q := range qs {
		switch {
		case q.Grid.NDim() == 0:
		case q.Self:
			n := 4 * q.PartBlocks.Elems()
			r.quant[t] = replay.QuantTensor{Grid: q.Grid, DType: q.DType, Blocks: q.PartBlocks,
				Scales: replay.Span{Addr: uint64(r.self.arena.Ptr) + own, Len: n},
				Self:   true, Part: q.Part, PartAt: q.PartAt, DstBlocks: q.DstBlocks}
			own += uint64(n)
		default:
			n := 4 * int64(len(q.Scales.Window.Values))
			r.quant[t] = replay.QuantTensor{Grid: q.Grid, DType: q.DType, Blocks: q.Scales.Window.Blocks,
				Scales: replay.Span{Addr: uint64(arena.Ptr) + up, Len: n}}
			up += uint64(n)
		}
	}
	r.self.parts = make([]cudamem.Buffer, len(qs))
	for t, n := range replay.FP8PartNeeds(r.prog, r.quant) {
		if n == 0 {
			continue
		}
		if r.self.parts[t], err = r.alloc(n); err != nil {
			return fmt.Errorf("gpu: rank %d: the FP8 part of tensor %d: %w", r.prog.Rank, t, err)
		}
		r.quant[t].FP8Part = span(r.self.parts[t])
	}
	return nil
}

// selfBuffers sets the self-scaled tensors' windows and flag in b.
func (r *Replay) selfBuffers(b *replay.Buffers) {
	if r.self.arena.Ptr == 0 {
		return
	}
	base := uint64(r.self.arena.Ptr)
	b.SelfScales = replay.Span{Addr: base, Len: r.self.windows}
	b.Flag = replay.Span{Addr: base + uint64(r.self.windows), Len: 4}
}

// freeScales frees the uploaded scale windows.
func (r *Replay) freeScales() error {
	var err error
	if r.scaleArena.Ptr != 0 {
		err = r.ctx.Free(r.scaleArena.Ptr)
	}
	r.scaleArena, r.quant = cudamem.Buffer{}, nil
	return err
}

// freeSelf frees the self-scaled tensors' windows and FP8 parts.
func (r *Replay) freeSelf() error {
	var errs []error
	for _, b := range append(r.self.parts, r.self.arena) {
		if b.Ptr != 0 {
			errs = append(errs, r.ctx.Free(b.Ptr))
		}
	}
	r.self = selfScaling{}
	return errors.Join(errs...)
}

// checkScales reads the flag the step's Check wrote and, where a
// self-scaled tensor's scale came out NaN or infinite, returns every such
// tensor (read back window by window, on this rare path only), for
// refit.Stats.NonFinite.
func (r *Replay) checkScales() ([]int, error) {
	if r.self.arena.Ptr == 0 {
		return nil, nil
	}
	if err := r.ctx.CopyDtoH(r.self.flag[:], r.self.arena.Ptr+cuda.DevicePtr(r.self.windows)); err != nil {
		return nil, fmt.Errorf("gpu: rank %d: the FP8 scales' check: %w", r.prog.Rank, err)
	}
	if binary.LittleEndian.Uint32(r.self.flag[:]) < 0x7F800000 {
		return nil, nil
	}
	var bad []int
	for t, q := range r.quant {
		if !q.Self {
			continue
		}
		b := make([]byte, q.Scales.Len)
		if err := r.ctx.CopyDtoH(b, cuda.DevicePtr(q.Scales.Addr)); err != nil {
			return nil, err
		}
		for i := 0; i+4 <= len(b); i += 4 {
			if binary.LittleEndian.Uint32(b[i:])&0x7FFFFFFF >= 0x7F800000 {
				bad = append(bad, t)
				break
			}
		}
	}
	if len(bad) == 0 {
		return nil, fmt.Errorf("gpu: rank %d: the FP8 scales' check flagged %#08x, but every window reads back finite", r.prog.Rank, binary.LittleEndian.Uint32(r.self.flag[:]))
	}
	return bad, nil
}

// checkArgs is the BlockAmax that a Check runs: the n bytes at src as one
// row of float32s, its one amax at flag.
func checkArgs(src uint64, n int64, flag uint64) (fp8.Grid, cuda.FP8Region, cuda.FP8Window, error) {
	g, err := fp8.NewGrid([]int64{1, n / 4}, fp8.Row)
	if err != nil {
		return g, cuda.FP8Region{}, cuda.FP8Window{}, err
	}
	box := placement.Box{Lo: []int64{0, 0}, Hi: []int64{1, n / 4}}
	reg := cuda.FP8Region{DType: dtype.F32, Src: cuda.DevicePtr(src), At: strided.Desc{Run: 4 * (n / 4)}, Box: box}
	win := cuda.FP8Window{Blocks: placement.Box{Lo: []int64{0, 0}, Hi: []int64{1, 1}}, Values: cuda.DevicePtr(flag)}
	return g, reg, win, nil
}

// queueCheck queues a Check on s: the flag zeroed, then the amax of the
// windows folded into it.
func queueCheck(s *cuda.Stream, src uint64, n int64, flag uint64) error {
	g, reg, win, err := checkArgs(src, n, flag)
	if err != nil {
		return err
	}
	if err := s.Memset(cuda.DevicePtr(flag), 0, 4); err != nil {
		return err
	}
	return cuda.BlockAmax(s, g, win, reg)
}
