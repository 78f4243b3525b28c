package mpi

import "unsafe"

// chunkBytes is the largest byte count this package passes to one MPI call.
// MPI counts are C ints, so a buffer of 2^31 bytes or more cannot go in one
// call; every []byte operation splits its buffer into pieces of at most
// chunkBytes (see the package documentation). Tests lower it (export_test.go)
// to exercise the splitting with small buffers; every rank of a job must use
// the same value. It must stay in [1, math.MaxInt32].
var chunkBytes = 1 << 30

// forChunks calls f for consecutive pieces [off, off+n) of a buffer of
// length total, each at most chunkBytes long, stopping at the first error.
// An empty buffer is one piece of length 0, so that empty messages still
// match on both sides.
func forChunks(total int, f func(off, n int) error) error {
	off := 0
	for {
		n := min(total-off, chunkBytes)
		if err := f(off, n); err != nil {
			return err
		}
		off += n
		if off >= total {
			return nil
		}
	}
}

// numChunks is the number of pieces forChunks makes of total bytes.
func numChunks(total int) int {
	if total == 0 {
		return 1
	}
	return (total + chunkBytes - 1) / chunkBytes
}

// at returns a pointer to b[off], or nil when b[off:] is empty. MPI accepts
// a nil buffer with count 0.
func at(b []byte, off int) unsafe.Pointer {
	if off >= len(b) {
		return nil
	}
	return unsafe.Pointer(&b[off])
}
