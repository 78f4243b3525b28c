package refit

import (
	"fmt"

	"github.com/m2n-dev/m2n/delta"
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
// elements (many changes round to the same code), and a block whose scale
// changed rewrites most of its codes, which the codec's density rule
// sends as a bitmap or dense; nothing else of the destination is written.
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
