package cuda

// The oracles, for the tests of package cuda_test.
var (
	HostPack        = hostPack
	HostUnpack      = hostUnpack
	HostStridedCopy = hostCopy
)
