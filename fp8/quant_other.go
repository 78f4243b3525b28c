//go:build !amd64 || purego

package fp8

// useAVX2 is false off amd64 (and with the purego tag): the scalar loops
// do everything.
const useAVX2 = false

func quantBF16AVX2(dst, src *byte, n int, scale float32) int { panic("fp8: no AVX2") }
func quantF32AVX2(dst, src *byte, n int, scale float32) int  { panic("fp8: no AVX2") }
func amaxBF16AVX2(src *byte, n int) uint16                   { panic("fp8: no AVX2") }
func amaxF32AVX2(src *byte, n int) uint32                    { panic("fp8: no AVX2") }
