package cuda

// The oracles, for the tests of package cuda_test.
var (
	HostPack        = hostPack
	HostUnpack      = hostUnpack
	HostStridedCopy = hostCopy
)

// SetFusedGridCap caps the fused FP8 kernels' grid at n blocks, so that
// their blocks loop over several rounds of items, and returns the function
// that restores the cap.
func SetFusedGridCap(n int) (restore func()) {
	old := fusedGridCap
	fusedGridCap = n
	return func() { fusedGridCap = old }
}
