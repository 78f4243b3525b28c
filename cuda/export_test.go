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

// The device's and driver's facts the GPU test checks.

func DriverVersion() (int, error) { return driverVersion() }

func (d Device) ComputeCapability() (major, minor int, err error) { return d.computeCapability() }

func (d Device) MultiprocessorCount() (int, error) { return d.multiprocessorCount() }

func (d Device) TotalMem() (int64, error) { return d.totalMem() }

// Error is the driver's failed call, for the tests that inspect it.
type Error = driverError
