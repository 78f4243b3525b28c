//go:build !amd64 || purego

package lora

const useAVX2 = false

func setAVX2(bool) {}

func addRowsAVX2(acc *float32, n int, alpha *float32, a *float32, stride int, r int) {
	panic("lora: no AVX2")
}
