//go:build !amd64 || purego

package delta

const useAVX2 = false

func setAVX2(bool) {}

func diffMasksAVX2(a, b *byte, n int, out *uint64) { panic("delta: no AVX2") }

func blockDiffAVX2(a, b *byte, elem, n int, out *[BlockElems / 32]uint32) { panic("delta: no AVX2") }
