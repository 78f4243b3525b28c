//go:build amd64 && !purego

package lora

import "golang.org/x/sys/cpu"

// useAVX2 turns on addRowsAVX2 (rows_amd64.s), which computes exactly
// addRowsScalar's sums, eight or thirty-two elements at a time
// (TestAddRowsAVX2MatchesScalar).
var useAVX2 = cpu.X86.HasAVX2

func setAVX2(on bool) { useAVX2 = on }

// addRowsAVX2 is addRows over the first n elements of acc (n a multiple
// of 8), r rows of a (r at least 1) stride elements apart.
//
//go:noescape
func addRowsAVX2(acc *float32, n int, alpha *float32, a *float32, stride int, r int)
