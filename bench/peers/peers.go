// Package peers holds the scripts of the programs m2n's benchmarks measure
// themselves against, embedded so that a prebuilt refit binary carries
// them to the GPU machine: torch_fp8_block.py is a PyTorch user's own
// DeepSeek-V3 128x128 block quantize of a bf16 weight (eager and
// torch.compile) against a copy of the same bytes, which `refit
// quant-bench` runs beside its FP8 figures.
package peers

import _ "embed"

// TorchFP8Block is torch_fp8_block.py: run as `python3 - M K` (or from a
// file with the arguments M K, multiples of 128) it quantizes an M x K bf16
// tensor and prints its medians in microseconds.
//
//go:embed torch_fp8_block.py
var TorchFP8Block []byte
