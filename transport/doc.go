// Package transport is the contract between m2n's step runtime and the
// bindings that move bytes: a Transport starts the point-to-point
// operations of one round (Op: a send or a receive of one peer, with the
// call's Tag) and returns a Pending to wait on, under a context; a
// Memory allocates, copies, packs and unpacks a rank's Buffers
// (strided.Desc says where a box sits);
// a QuantMemory also quantizes to FP8 while it packs. HostMemory is the
// host implementation and the oracle the others are tested against.
//
// Package mpi implements Transport over MPI for host memory, package nccl
// over NCCL for device memory (package cudamem's Memory), and package
// transport/inproc over goroutines of one process; transport/transporttest
// is the conformance suite all of them run, and transport/netem wraps any
// of them in an emulated network.
package transport
