package kernels

// #cgo LDFLAGS: -lm
// #include <stdlib.h>
// #include <string.h>
// #include "emu.h"
import "C"

import (
	"fmt"
	"unsafe"
)

// QuantParamsSize is the size in bytes of the FP8 kernels' parameter block
// (m2n_quant_params in params.h).
const QuantParamsSize = C.sizeof_m2n_quant_params

// ParamsSize is the size in bytes of the strided-copy kernels' parameter
// block (m2n_copy_params in params.h).
const ParamsSize = C.sizeof_m2n_copy_params

// Alloc returns n zeroed bytes of C memory for Emulate, and a function that
// frees them.
func Alloc(n int) ([]byte, func()) {
	p := C.calloc(C.size_t(max(n, 1)), 1)
	if p == nil {
		panic("kernels: out of memory")
	}
	return unsafe.Slice((*byte)(p), n), func() { C.free(p) }
}

// Emulate runs the strided-copy kernel m2n_copy<width> on the CPU with the
// parameter block params (its bytes, as package cuda marshals them) over grid
// blocks of block threads, one thread after another. It is for tests: the
// kernels dereference the addresses in params, so they must point into
// memory from Alloc.
func Emulate(width int, params []byte, grid, block int) error {
	if len(params) != ParamsSize {
		return fmt.Errorf("kernels: parameter block of %d bytes, want %d", len(params), ParamsSize)
	}
	if grid < 1 || block < 1 {
		return fmt.Errorf("kernels: grid %d, block %d", grid, block)
	}
	var p C.m2n_copy_params
	C.memcpy(unsafe.Pointer(&p), unsafe.Pointer(&params[0]), C.size_t(len(params)))
	if C.m2n_emu_launch(C.int(width), &p, C.uint(grid), C.uint(block)) != 0 {
		return fmt.Errorf("kernels: no kernel for width %d", width)
	}
	return nil
}

// BatchParamsSize is the size in bytes of the batched kernel's parameter
// block (m2n_batch_params in params.h), and BatchItemSize of one item of
// its table (m2n_batch_item).
const (
	BatchParamsSize = C.sizeof_m2n_batch_params
	BatchItemSize   = C.sizeof_m2n_batch_item
)

// EmulateBatch runs the batched kernel m2n_batch on the CPU with the
// parameter block params over grid blocks of block threads, one thread after
// another. The item table params points to, and every address in it, must
// lie in memory from Alloc.
func EmulateBatch(params []byte, grid, block int) error {
	if len(params) != BatchParamsSize {
		return fmt.Errorf("kernels: batch parameter block of %d bytes, want %d", len(params), BatchParamsSize)
	}
	if grid < 1 || block < 1 {
		return fmt.Errorf("kernels: grid %d, block %d", grid, block)
	}
	var p C.m2n_batch_params
	C.memcpy(unsafe.Pointer(&p), unsafe.Pointer(&params[0]), C.size_t(len(params)))
	C.m2n_emu_launch_batch(&p, C.uint(grid), C.uint(block))
	return nil
}

// EmulateQuant runs the FP8 kernel name (m2n_quant_<src>_<vec> or
// m2n_amax_<src>_<vec>, see quant.h) on the CPU with the parameter block
// params over grid blocks of block threads, one thread after another. As
// for Emulate, the addresses in params must point into memory from Alloc.
func EmulateQuant(name string, params []byte, grid, block int) error {
	if len(params) != QuantParamsSize {
		return fmt.Errorf("kernels: FP8 parameter block of %d bytes, want %d", len(params), QuantParamsSize)
	}
	if grid < 1 || block < 1 {
		return fmt.Errorf("kernels: grid %d, block %d", grid, block)
	}
	var p C.m2n_quant_params
	C.memcpy(unsafe.Pointer(&p), unsafe.Pointer(&params[0]), C.size_t(len(params)))
	cname := C.CString(name)
	defer C.free(unsafe.Pointer(cname))
	if C.m2n_emu_launch_quant(cname, &p, C.uint(grid), C.uint(block)) != 0 {
		return fmt.Errorf("kernels: no FP8 kernel %q", name)
	}
	return nil
}

// QdivMismatches counts the pairs for which the kernels' fast division
// in mode (m2n_qdiv, m2n_q2_bracket or m2n_qfma) rounds to another E4M3 value
// than the true float32 division x[i]/s[i]: zero, if the fast path is
// exact.
func QdivMismatches(x, s []float32, mode Div) int64 {
	if len(x) == 0 || len(x) != len(s) {
		return 0
	}
	return int64(C.m2n_emu_qdiv_mismatches((*C.float)(unsafe.Pointer(&x[0])), (*C.float)(unsafe.Pointer(&s[0])), C.longlong(len(x)), C.int(mode)))
}

// Div names the kernels' ways of making a quotient exact (div_mode in
// params.h).
type Div int

const (
	Midpoint Div = 0 // m2n_qdiv: the true division near an E4M3 rounding point
	Bracket  Div = 1 // m2n_q2_bracket
	FMA      Div = 2 // m2n_qfma where m2n_qfma_ok, else Midpoint
)

// QfmaSweep runs m2n_emu_qfma_sweep: x = +-(1 + i/128) * 2^k for i0 <= i
// <= i1 (i = 128: the zeros) against every jstep-th float32 scale
// significand in [2^sb, 2^(sb+1)), through m2n_qfma. It returns the pairs
// whose E4M3 bytes differ from the true division's (zero, if it is exact
// there) and the pairs whose float32 quotients are the division's.
func QfmaSweep(sb, k, i0, i1 int, jstep uint32) (bad, exact int64) {
	var e C.longlong
	b := C.m2n_emu_qfma_sweep(C.int(sb), C.int(k), C.uint(i0), C.uint(i1), C.uint(jstep), &e)
	return int64(b), int64(e)
}

// QdivSweep runs m2n_emu_qdiv_sweep (with bracket, of m2n_q2_bracket): the bfloat16 significands i0 <= i <
// i1 of [2^k, 2^(k+1)) (x = (1 + i/128) * 2^k; 128 in all) against every
// jstep-th float32 scale significand in [1, 2). It
// returns the pairs the fast division rounds differently from the true one
// (zero, if it is exact), the pairs that took the multiply, and the largest
// distance in float32 steps between the multiply's and the division's
// quotients among those.
func QdivSweep(k, i0, i1 int, jstep uint32, bracket bool) (bad, fast int64, maxULPs uint32) {
	var f C.longlong
	var m C.uint
	mode := Midpoint
	if bracket {
		mode = Bracket
	}
	b := C.m2n_emu_qdiv_sweep(C.int(k), C.uint(i0), C.uint(i1), C.uint(jstep), C.int(mode), &f, &m)
	return int64(b), int64(f), uint32(m)
}
