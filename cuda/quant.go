package cuda

// #include "shim.h"
import "C"

import (
	"fmt"
	"os"

	"github.com/m2n-dev/m2n/cuda/kernels"
	"github.com/m2n-dev/m2n/dtype"
	"github.com/m2n-dev/m2n/fp8"
	"github.com/m2n-dev/m2n/placement"
	"github.com/m2n-dev/m2n/strided"
)

// FP8Window is an fp8.Window in device memory: one 4-byte value per
// block of Blocks, row-major, at Values (4*Blocks.Elems() bytes).
// BlockAmax gathers amaxes into one (as float32 bits); PackQuantize reads
// float32 scales from one. Copy it into an fp8.Window's Values to combine
// amaxes or turn them into scales on the host: the bytes are the same.
type FP8Window struct {
	Blocks placement.Box
	Values DevicePtr
}

// FP8Region is a source region in device memory: the box Box of the
// global tensor, its elements (bf16 or f32) in row-major order of Box where
// At says at Src, as fp8.Region is on the host. At's runs must hold whole
// rows of Box (every descriptor of strided.Describe and of a placement.View
// does).
type FP8Region struct {
	DType dtype.DType
	Src   DevicePtr
	At    strided.Desc
	Box   placement.Box
}

// BlockAmax queues on s a kernel that folds the partial amax of every
// block region r touches into amax: each such block's value becomes the
// larger of what it holds and the largest magnitude among r's elements in
// it, as fp8.Grid.Amax does. Values are float32 bits, so a window starts
// zeroed (Memset). A NaN or infinity makes its block's value 0x7F800000 or
// above (an infinite or NaN float32): the kernel reports nothing, so check
// the window (fp8.Window.ToScales refuses it) and read the region back for
// the element's index. The window must hold the blocks r touches; nothing
// checks that the addresses lie in device memory.
func BlockAmax(s *Stream, g fp8.Grid, amax FP8Window, r FP8Region) error {
	return launchQuant(s, quantAmax, g, r, amax, 0)
}

// PackQuantize queues on s the quantize-while-packing of region r: byte
// i at dst becomes the E4M3 byte of the i-th element of r in row-major
// order of r.Box, divided by its block's scale from scales (float32s),
// clamped and rounded as fp8.Grid.Pack does, byte for byte. It reads the
// source once and writes half (bf16) or a quarter (f32) of its bytes: a
// pack that sends FP8. Non-finite elements give 0x7F or +-448 (BlockAmax,
// the pass before, is where they are caught).
func PackQuantize(s *Stream, g fp8.Grid, dst DevicePtr, r FP8Region, scales FP8Window) error {
	return launchQuant(s, quantPack, g, r, scales, dst)
}

// FusedQuantize queues on s the fused amax-quantize-pack of region r, whose
// box must hold every block it touches whole (up to the tensor's edges; a
// block that a rank boundary cuts needs BlockAmax, the exchange of partial
// amaxes, and PackQuantize instead): each block is read once, its amax
// reduced on the chip, its scale (fp8.ScaleOf, float32) written into
// scales and its elements quantized and packed into dst as PackQuantize
// packs them, so that the bytes and scales are those of fp8.Quantize of
// the whole tensor. A NaN or infinity makes its block's scale non-finite
// (infinite or NaN): check the window (fp8.Window.ToScales-style) before
// using the bytes. The window must hold the blocks r touches.
//
// Every quotient is the true float32 division's, made by a multiply with
// the block's reciprocal and made exact one of three ways (kernels/quant.h):
// the corrected multiply (m2n_qfma, the default: a fused multiply-add takes
// the multiply's remainder and one more corrects it, exact for every scale
// but those of blocks whose amax is below about 2^-81, which take the
// midpoint test), the midpoint test (m2n_qdiv: the true division near an
// E4M3 rounding point) or the bracket test (m2n_q2_bracket, multiplies and
// conversions instead of integer tests). M2N_FUSED_DIV=midpoint or bracket
// selects the others, to measure them on a GPU; PackQuantize follows it too
// (the bracket test is the fused kernels' only: there it means midpoint).
func FusedQuantize(s *Stream, g fp8.Grid, dst DevicePtr, r FP8Region, scales FP8Window) error {
	return launchQuant(s, quantFused, g, r, scales, dst)
}

// divMode is the kernels' div_mode for M2N_FUSED_DIV (package envopts
// refuses values other than fma, midpoint and bracket): 2 the corrected
// multiply (fma, the default), 0 the midpoint test, 1 the bracket test,
// which only the fused kernels have (the others take the midpoint test).
func divMode(kind quantKind) uint64 {
	switch os.Getenv("M2N_FUSED_DIV") {
	case "midpoint":
		return divMidpoint
	case "bracket":
		if kind == quantFused {
			return divBracket
		}
		return divMidpoint
	}
	return divFMA
}

// The kernels' division modes (div_mode in kernels/params.h).
const (
	divMidpoint = 0 // m2n_qdiv
	divBracket  = 1 // m2n_q2_bracket, fused kernels only
	divFMA      = 2 // m2n_qfma where m2n_qfma_ok, else m2n_qdiv
)

// newQuantRequest is what planQuant needs of one FP8 kernel's launch.
func newQuantRequest(kind quantKind, g fp8.Grid, r FP8Region, w FP8Window, dst DevicePtr) quantRequest {
	return quantRequest{kind: kind, grid: g, dtype: r.DType, src: r.Src, at: r.At, box: r.Box, win: w.Values, blocks: w.Blocks, dst: dst,
		divMode: divMode(kind)}
}

// launchQuant plans an FP8 kernel and queues it on s; a plan of no items
// launches nothing.
func launchQuant(s *Stream, kind quantKind, g fp8.Grid, r FP8Region, w FP8Window, dst DevicePtr) error {
	op := map[quantKind]string{quantAmax: "BlockAmax", quantPack: "PackQuantize", quantFused: "FusedQuantize"}[kind]
	p, err := planQuant(newQuantRequest(kind, g, r, w, dst))
	if err != nil {
		return fmt.Errorf("cuda: %s of %v: %w", op, r.Box, err)
	}
	if p.items == 0 {
		return nil
	}
	ks, err := s.ctx.loadKernels()
	if err != nil {
		return fmt.Errorf("cuda: %s: %w", op, err)
	}
	k, ok := ks.quant[p.name]
	if !ok {
		return fmt.Errorf("cuda: %s: no kernel %s", op, p.name)
	}
	cp := p.cParams()
	if err := check("cuLaunchKernel", C.m2n_launch_quant(s.ctx.h, k.fn, C.uint(p.grid(k.resident)), blockThreads, s.h, &cp)); err != nil {
		return fmt.Errorf("cuda: %s (%s): %w", op, p.name, err)
	}
	return nil
}

// quantKernels lists the FP8 kernels' names (kernels/quant.h).
func quantKernels() []string {
	var out []string
	for _, kind := range []string{"quant", "amax", "fquant"} {
		for _, v := range []int{8, 4, 2, 1} {
			out = append(out, fmt.Sprintf("m2n_%s_bf16_%d", kind, v))
		}
		for _, v := range []int{4, 2, 1} {
			out = append(out, fmt.Sprintf("m2n_%s_f32_%d", kind, v))
		}
	}
	return out
}

// cParams marshals the plan into the FP8 kernels' parameter block.
func (p *quantPlan) cParams() C.m2n_quant_params {
	var cp C.m2n_quant_params
	cp.src = p.src.cSide()
	cp.dst = C.ulonglong(p.dst)
	cp.win = C.ulonglong(p.win)
	cp.nd = C.ulonglong(p.nd)
	for i := range p.nd {
		cp.lo[i] = C.ulonglong(p.lo[i])
		cp.ext[i] = C.ulonglong(p.ext[i])
		cp.wlo[i] = C.ulonglong(p.wlo[i])
		cp.wstride[i] = C.ulonglong(p.wstr[i])
	}
	cp.block_rows = C.ulonglong(p.blockRows)
	cp.block_cols = C.ulonglong(p.blockCols)
	cp.col_shift = C.ulonglong(p.colShift)
	cp.row_elems = C.ulonglong(p.rowElems)
	cp.chunk_elems = C.ulonglong(p.chunk)
	cp.chunks_per_row = C.ulonglong(p.chunks)
	cp.group = C.ulonglong(p.group)
	cp.groups = C.ulonglong(p.groups)
	cp.items = C.ulonglong(p.items)
	cp.team_shift = C.ulonglong(p.teamShift)
	cp.div_mode = C.ulonglong(p.divMode)
	return cp
}

// paramBytes returns the parameter block's bytes, for the CPU emulator.
func (p *quantPlan) paramBytes() []byte { return cBytes(p.cParams()) }

// EmulateFP8 plans the FP8 kernel op ("PackQuantize", "FusedQuantize" or
// "BlockAmax") of region r as a launch of it would (dst is unused by
// BlockAmax) and runs it through the FP8 kernels' source compiled for the
// CPU (package kernels), on a grid of at most maxGrid blocks. It is for
// tests: every address must lie in host memory from kernels.Alloc.
func EmulateFP8(op string, g fp8.Grid, dst DevicePtr, r FP8Region, w FP8Window, maxGrid int) error {
	kinds := map[string]quantKind{"PackQuantize": quantPack, "FusedQuantize": quantFused, "BlockAmax": quantAmax}
	kind, ok := kinds[op]
	if !ok {
		return fmt.Errorf("cuda: no FP8 kernel %q to emulate", op)
	}
	p, err := planQuant(newQuantRequest(kind, g, r, w, dst))
	if err != nil || p.items == 0 {
		return err
	}
	return kernels.EmulateQuant(p.name, p.paramBytes(), p.grid(maxGrid), blockThreads)
}
