package refit

import (
	"fmt"
	"slices"

	"github.com/m2n-dev/m2n/delta"
	"github.com/m2n-dev/m2n/fp8"
	"github.com/m2n-dev/m2n/reshard"
	"github.com/m2n-dev/m2n/strided"
	"github.com/m2n-dev/m2n/transport"
)

// FP8 destinations in delta mode. A tensor that converts to FP8 arrives
// as E4M3 codes (1 byte per element) and a scale tensor (4 bytes per
// block of the grid). The scales never cross the network: every rank
// derives the step's scales from the amax exchange, which delta mode runs
// as every step does (the partial amaxes of blocks that shard boundaries
// cut combined across ranks, package fp8), and each destination writes
// its scale tensor whole at the step's end (Atomic: at the commit), a few
// bytes per 32 KiB of weights. The delta is taken over the codes: per
// message, the source keeps codes[prev], the codes it last sent (the
// message's elements in order, contiguous), quantizes its region with the
// step's scales into codes[cur] as the dense path packs it, and encodes
// cur against prev with 1-byte elements; the destination applies the
// encoding to its FP8 region in place. So a destination rewrites only the
// codes that changed: a block whose amax (so its scale) did not change
// gets the codes of its changed elements, fewer than its changed bf16
// elements (many changes round to the same code); in a block whose scale
// moved, both sides first rescale the old codes for the new scale (below)
// and only the codes that prediction misses travel; nothing else of the
// destination is written.
// A full step (the first, or after a failure) moves the codes dense, as
// the ordinary driver does, and then quantizes the sent regions once more
// into codes[cur] (quantSent, the same scales, so the same codes) for the
// next step's delta.
//
// Cost: memory, on a source, 2 bytes per element it sends of a converting
// tensor (prev and cur codes: as much as the copy a bf16 tensor keeps,
// which a converting tensor does not keep); on a destination nothing
// beyond the bf16 path. CPU, on a source: quantizing every sent element
// each step (what a dense FP8 sync does) plus the codec's compare of 1
// byte per element; the quantization is not skipped in blocks whose bf16
// elements and scale are unchanged (it would need the bf16 copy as well).

// encAt returns what region id's encodings cover: the region itself, or,
// for a source that quantizes, its codes (contiguous).
func (d *deltaPlan) encAt(id int) strided.Desc {
	if d.quant[id] >= 0 {
		return strided.Desc{Run: d.codes[id]}
	}
	return d.regions[id].At
}

// ensureCodes makes the codes of every quantized source region.
func (dc *deltaCall) ensureCodes(mem transport.Memory) error {
	dc.codes = make([][2]transport.HostBuffer, len(dc.plan.regions))
	for _, i := range dc.plan.sources {
		if dc.plan.quant[i] < 0 {
			continue
		}
		for k := range dc.codes[i] {
			b, err := hostAlloc(mem, dc.plan.codes[i])
			if err != nil {
				return fmt.Errorf("refit: delta mode's FP8 codes of tensor %d: %w", dc.plan.regions[i].Tensor, err)
			}
			dc.made = append(dc.made, b)
			dc.codes[i][k] = b
		}
	}
	return nil
}

// quantize writes into codes[cur] the codes of quantized source region id
// with the step's scales.
func (dc *deltaCall) quantize(hs *hostStep, id int) error {
	r := dc.plan.regions[id]
	if err := hs.packQuant(dc.codes[id][1], 0, dc.plan.quant[id], r); err != nil {
		return err
	}
	return hs.h.mem.Sync()
}

// quantSent quantizes, after a full step moved them dense, the quantized
// source regions into codes[cur], for settle to make them prev.
func (dc *deltaCall) quantSent(h *hostDriver, in StepInput) error {
	hs := hostStep{h: h, p: h.prog, in: in, bufs: in.Bufs}
	for _, i := range dc.plan.sources {
		if dc.plan.quant[i] >= 0 {
			if err := dc.quantize(&hs, i); err != nil {
				return err
			}
		}
	}
	return nil
}

// settleCodes makes codes[prev] what a successful step sent of quantized
// source region id; updated tells that the encodings did already.
func (dc *deltaCall) settleCodes(id int, updated bool) error {
	if updated {
		return nil
	}
	c := dc.codes[id]
	return delta.Commit(c[0], c[1], strided.Desc{Run: dc.plan.codes[id]}, 1)
}

// quantScales is a converting tensor's scales on this rank, over the
// blocks of its source part (src) and of its destination part (dst):
// [1] this step's, [0] those of the last step that succeeded, which the
// codes the destinations hold were quantized with.
type quantScales struct {
	grid     fp8.Grid
	src, dst [2]fp8.Window
}

// takeScales takes the step's scales of the converting tensors (quant,
// by tensor) at its begin.
func (dc *deltaCall) takeScales(quant []*quantTensor, sc *stepScales) {
	if dc.scales == nil {
		dc.scales = make([]quantScales, len(quant))
	}
	for t, q := range quant {
		if q == nil || sc == nil {
			continue
		}
		s := &dc.scales[t]
		s.grid, s.src[1], s.dst[1] = q.grid, sc.exec[t].Scales.Window, sc.dst[t]
	}
}

// scalesSettled makes the step's scales the last succeeded step's.
func (dc *deltaCall) scalesSettled() {
	for t := range dc.scales {
		s := &dc.scales[t]
		s.src[0], s.dst[0] = s.src[1], s.dst[1]
	}
}

// Where a block's scale moved since the last step, the codes the
// destinations hold were quantized with the old scale, and the step's
// codes differ from them in most of the block's elements (63-85% at 1% of
// changed bf16 elements). Both sides then predict the block's new codes
// from the old ones (fp8.Grid.Rescale: each old code's value quantized
// with the new scale, bytes both compute alike) and the source encodes
// its codes against the prediction, which misses 21-27%
// (TestFP8DeltaBytes in package pattern): the source rescales its
// previous codes before it encodes, the destination its region before it
// applies. Blocks whose scale did not move are not touched.

// rebase returns the codes that quantized source region id's encoding
// is taken against: codes[prev], rescaled where a block's scale moved; in
// place where the encodings update prev (a failed step makes the next
// one full), else in a copy, so that an atomic step that aborts leaves
// prev as the destinations still hold it.
func (dc *deltaCall) rebase(id int, inPlace bool) ([]byte, error) {
	prev := []byte(dc.codes[id][0])
	r := dc.plan.regions[id]
	s := &dc.scales[r.Tensor]
	from, to := s.src[0], s.src[1]
	if from.Values == nil || slices.Equal(from.Values, to.Values) {
		return prev, nil
	}
	if !inPlace {
		dc.rebased = append(dc.rebased[:0], prev...)
		prev = dc.rebased
	}
	_, err := s.grid.Rescale(prev, strided.Desc{Run: dc.plan.codes[id]}, dc.plan.boxes[id], from, to)
	return prev, err
}

// rescaleDst rescales destination region id of a converting tensor in
// dst, before an encoding applies to it; other regions are left alone.
func (dc *deltaCall) rescaleDst(dst []byte, id int) error {
	r := dc.plan.regions[id]
	if !dc.plan.convert[r.Tensor] || r.Buf != reshard.BufDst {
		return nil
	}
	s := &dc.scales[r.Tensor]
	if s.dst[0].Values == nil {
		return fmt.Errorf("refit: tensor %d: a delta step without the scales the destination holds", r.Tensor)
	}
	_, err := s.grid.Rescale(dst, r.At, dc.plan.boxes[id], s.dst[0], s.dst[1])
	return err
}
