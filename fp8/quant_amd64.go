//go:build amd64 && !purego

package fp8

import "golang.org/x/sys/cpu"

// useAVX2 turns on the AVX2 kernels of quant_amd64.s: the quotient and
// the encoding of eight elements at a time, and the partial amaxes of
// sixteen or thirty-two. They compute the scalar loops' bytes exactly
// (TestAVX2MatchesScalar compares them on every bfloat16 and on random
// float32s against hundreds of scales).
var useAVX2 = cpu.X86.HasAVX2

// quantBF16AVX2 quantizes whole groups of 8 of the n bfloat16 elements at
// src into dst, dividing by scale (a float32 division, VDIVPS), and returns how many elements it did:
// n rounded down to a multiple of 8, or fewer when a group holds a NaN or
// an infinity or a quotient is not finite (the scalar loop does that
// group and the rest).
//
//go:noescape
func quantBF16AVX2(dst, src *byte, n int, scale float32) int

// quantF32AVX2 is quantBF16AVX2 for float32 elements.
//
//go:noescape
func quantF32AVX2(dst, src *byte, n int, scale float32) int

// amaxBF16AVX2 returns the largest magnitude bits (as amaxBF16) of n
// bfloat16 values, n a multiple of 32.
//
//go:noescape
func amaxBF16AVX2(src *byte, n int) uint16

// amaxF32AVX2 is amaxBF16AVX2 for n float32 values, n a multiple of 16.
//
//go:noescape
func amaxF32AVX2(src *byte, n int) uint32
