package mpi_test

import (
	"bytes"
	"fmt"
)

// pattern returns n bytes that depend on seed and on each byte's position,
// so that misplaced, reordered or missing bytes show.
func pattern(seed, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte((seed+1)*37 + i*13 + i/251)
	}
	return b
}

// diff describes the first difference between got and want, or returns "".
func diff(got, want []byte) string {
	if bytes.Equal(got, want) {
		return ""
	}
	if len(got) != len(want) {
		return fmt.Sprintf("length %d, want %d", len(got), len(want))
	}
	for i := range got {
		if got[i] != want[i] {
			return fmt.Sprintf("byte %d of %d is %d, want %d", i, len(got), got[i], want[i])
		}
	}
	return ""
}
