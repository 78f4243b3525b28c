package main

import (
	"fmt"
	"time"

	"github.com/m2n-dev/m2n/mpi"
	"github.com/m2n-dev/m2n/reshard"
	"github.com/m2n-dev/m2n/reshard/transporttest"
)

// backend is where a job's tensors live and how they move: host memory over
// MPI, or GPU memory over NCCL.
type backend interface {
	// memory returns the Memory buffers come from, and the HostIO that
	// fills and reads them.
	memory() (reshard.Memory, transporttest.HostIO)
	// transport returns a transport over comm, classifying peers with
	// topo, and what releases it.
	transport(comm *mpi.Comm, topo reshard.Topology) (reshard.Transport, func(), error)
	// domainKey names the fast local fabric this rank sits in ("" to use
	// the host, from MPI's shared-memory split).
	domainKey() string
	close()
}

// hostBackend moves host memory with MPI point-to-point calls, strided
// regions in place with derived datatypes unless inPlace is off.
type hostBackend struct{ inPlace bool }

func (h hostBackend) memory() (reshard.Memory, transporttest.HostIO) {
	return reshard.HostMemory{}, transporttest.HostBuffers{}
}

func (h hostBackend) transport(comm *mpi.Comm, _ reshard.Topology) (reshard.Transport, func(), error) {
	return mpi.NewTransport(comm, h.inPlace), func() {}, nil
}

func (hostBackend) close() {}

func (hostBackend) domainKey() string { return "" }

// newBackend returns the backend --device names.
func newBackend(device string, world *mpi.Comm, timeout time.Duration) (backend, error) {
	switch device {
	case "", "cpu", "host":
		return hostBackend{inPlace: getenv("M2N_MPI_INPLACE") != "0"}, nil
	case "cuda", "gpu":
		return newCudaBackend(world, timeout)
	}
	return nil, flagError("device", device, fmt.Errorf("want cpu or cuda"))
}
