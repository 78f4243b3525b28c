// Package nvlink names the NVLink domain a GPU sits in, from NVML, so that
// ranks can be grouped into the domains whose GPUs share a fast local fabric
// (the hierarchical route's destination domains):
//
//	key, err := nvlink.DomainKey(localRank) // "fabric:<uuid>:<clique>" or "host:<name>"
//	// ranks with equal keys form one domain; on an error, fall back to the host
//
// NVML (libnvidia-ml.so.1) is opened by github.com/NVIDIA/go-nvml at run time;
// where it is missing DomainKey returns an error. Package cuda itself needs
// no NVML. The build tag nonvml leaves go-nvml out (DomainKey then always
// fails): the shared C library is built so, see nonvml.go.
package nvlink
