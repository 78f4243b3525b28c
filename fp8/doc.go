// Package fp8 quantizes bf16 and f32 tensors to float8_e4m3fn bit-exactly
// as torch does, in pieces: each rank quantizes the regions it sends while
// it packs them, and every rank's bytes and scales equal those of
// quantizing the whole tensor at once.
//
// # The rule
//
// The elements sharing a scale form a block: 128x128 over the last two
// dims (Block, DeepSeek-V3's format; edge blocks partial), one row (Row),
// or one matrix (Tensor); leading dims (experts) index separate matrices.
// A block's amax is its largest magnitude; its scale s (weight_scale_inv,
// the dequantization multiplier) is amax * float32(1/448) as one float32
// multiply, or 1 for an all-zero block; each element becomes float32(x)/s,
// a true float32 division, clamped to [-448, 448] and rounded to the
// nearest E4M3 value, ties to even. E4M3FN has no infinities; NaN or
// infinite inputs are refused. ../testdata/fp8 holds torch's own outputs,
// which the tests match bit for bit.
//
// # Walk-through: quantizing in flight
//
// Every rank makes the same Grid from the global shape and the mode:
//
//	g, err := fp8.NewGrid([]int64{4, 256, 384}, fp8.Block) // ScaleShape [4 2 3]
//
// 1. Partial amaxes. A source rank gathers the amax of every block its
// local part touches. A region is a box of the global tensor and where its
// elements sit in the rank's buffer (the form of reshard.Strided, for a
// strided view or a transfer's SrcAt):
//
//	w, err := g.WindowFor(localBox)                       // zeroed, one value per block touched
//	err = g.Amax(w, fp8.Dense(dtype.BF16, local, localBox))
//
// A shard boundary may cut a block, so a block's amax is spread over the
// ranks that hold its parts. They combine their windows with MaxWith (in a
// small exchange of float32s, in any order) and turn amaxes into scales:
//
//	err = w.MaxWith(peerWindow) // for every peer holding part of w's blocks
//	err = w.ToScales()
//
// 2. Quantize while packing. For each transfer the rank sends, Pack reads
// the source region once and writes E4M3 bytes into the staging buffer, in
// the order a plain pack would write the bf16 bytes: half the bytes cross
// the network.
//
//	reg := fp8.Region{DType: dtype.BF16, Data: local, At: t.SrcAt, Box: t.Box}
//	err = g.Pack(staging[:t.Box.Elems()], reg, w)
//
// 3. The destination unpacks the bytes as usual (1-byte elements:
// reshard.Describe(t.DstLocal, t.Box, 1)) and fills its local scale tensor
// for its own box, which holds every block its box touches (both ranks at a
// cut hold the cut block's scale):
//
//	scales, err := g.WindowFor(dstLocalBox)
//	err = scales.CopyFrom(w) // or from the scales it received
//
// Quantize does all three for a whole tensor held by one rank, and is the
// reference the distributed pieces are tested against.
//
// Amax and Pack allocate nothing in their loops. On amd64 with AVX2 they
// take eight elements at a time (quant_amd64.s: a float32 division, the
// rule's own, then Encode's rounding in integer lanes; the amaxes 16 or 32
// at a time), byte for byte the scalar loops' (TestAVX2MatchesScalar).
// Elsewhere (and with the purego build tag) Pack builds, for a block it
// covers with enough elements, a table of the E4M3 byte of every bfloat16
// magnitude the block can hold, so that most elements cost one lookup; the
// float path divides through a float64 reciprocal, which gives the true
// float32 quotient for every float32 operands (see quantizeMul).
package fp8
