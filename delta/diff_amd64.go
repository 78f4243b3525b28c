//go:build amd64 && !purego

package delta

import "golang.org/x/sys/cpu"

// useAVX2 turns on diffMasksAVX2 (diff_amd64.s) in the encoder's scan of
// changed blocks; the encodings are the same byte for byte either way
// (TestScanAVX2MatchesWords).
var useAVX2 = cpu.X86.HasAVX2

func setAVX2(on bool) { useAVX2 = on && cpu.X86.HasAVX2 }

// diffMasksAVX2 writes to out[k], for each of the n 64-byte chunks k of a
// and b, a mask of the bytes that differ (bit i: byte 64k+i).
//
//go:noescape
func diffMasksAVX2(a, b *byte, n int, out *uint64)

// blockDiffAVX2 writes to out[k], for each of n consecutive full blocks k
// (BlockElems elements of elem bytes, 1, 2 or 4, at a and b), one bit
// per element, set where the element differs: element i at bit i%32 of
// out[k][i/32]. n is at least 1 and out has n entries.
//
//go:noescape
func blockDiffAVX2(a, b *byte, elem, n int, out *[BlockElems / 32]uint32)
