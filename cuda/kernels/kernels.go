// Package kernels holds the CUDA C source of m2n's GPU kernels, which
// package cuda compiles at run time with NVRTC, and a CPU runner for them.
//
// strided.cu (with strided_body.h and params.h) is the strided-copy family
// behind cuda.Pack, cuda.Unpack and cuda.StridedCopy; batch.h, included by
// it, the batched kernel behind cuda.BatchLaunch (many copies in one launch);
// quant.h (with
// quant_body.h), included at its end, holds the FP8 quantize-pack,
// partial-amax and fused amax-quantize-pack kernels behind cuda's
// PackQuantize, BlockAmax and FusedQuantize. It is written in the
// common subset of CUDA C++ and C so that Emulate can compile it for the CPU
// and tests can check it, and the parameter block package cuda fills for it,
// without a GPU.
package kernels

import "embed"

//go:embed strided.cu strided_body.h params.h batch.h quant.h quant_body.h
var files embed.FS

// StridedSource returns the strided-copy kernels' main source file.
func StridedSource() string { return read("strided.cu") }

// StridedHeaders returns the files strided.cu includes, by name, in the
// order NVRTC should be given them.
func StridedHeaders() (names, sources []string) {
	for _, n := range []string{"params.h", "strided_body.h", "batch.h", "quant.h", "quant_body.h"} {
		names = append(names, n)
		sources = append(sources, read(n))
	}
	return names, sources
}

func read(name string) string {
	b, err := files.ReadFile(name)
	if err != nil {
		panic("kernels: " + err.Error()) // embedded above
	}
	return string(b)
}
