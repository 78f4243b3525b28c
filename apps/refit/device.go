package main

import (
	"errors"
	"fmt"
	"time"

	"github.com/m2n-dev/m2n/cuda"
	"github.com/m2n-dev/m2n/mpi"
	"github.com/m2n-dev/m2n/nccl"
	"github.com/m2n-dev/m2n/reshard"
	"github.com/m2n-dev/m2n/reshard/transporttest"
)

// cudaBackend keeps tensors in the memory of one GPU per rank (by local
// rank on the host) and moves them with NCCL, one communicator per MPI
// communicator it is asked for, bootstrapped over it.
type cudaBackend struct {
	// timeout is the job's bound on every wait.
	timeout time.Duration
	dev     int
	ctx     *cuda.Context
	mem     *cuda.Memory
	comms   map[*mpi.Comm]*nccl.Comm
}

func newCudaBackend(world *mpi.Comm, timeout time.Duration) (*cudaBackend, error) {
	if err := cuda.Load(); err != nil {
		return nil, fmt.Errorf("--device cuda: %w", err)
	}
	if err := nccl.Load(); err != nil {
		return nil, fmt.Errorf("--device cuda: %w", err)
	}
	n, err := cuda.DeviceCount()
	if err != nil {
		return nil, err
	}
	local, err := world.SplitShared(0)
	if err != nil {
		return nil, err
	}
	lr, lsize := local.Rank(), local.Size()
	if err := local.Free(); err != nil {
		return nil, err
	}
	if lsize > n {
		return nil, fmt.Errorf("--device cuda: %d ranks on this host share %d GPUs; NCCL needs one GPU per rank", lsize, n)
	}
	dev, err := cuda.GetDevice(lr)
	if err != nil {
		return nil, err
	}
	ctx, err := dev.PrimaryContext()
	if err != nil {
		return nil, err
	}
	mem, err := cuda.NewMemory(ctx)
	if err != nil {
		return nil, err
	}
	return &cudaBackend{timeout: timeout, dev: lr, ctx: ctx, mem: mem, comms: map[*mpi.Comm]*nccl.Comm{}}, nil
}

// config makes blocking communicators: their set-up is bounded by the
// job's watchdog over communicator set-up, which aborts the job.
func (b *cudaBackend) config() *nccl.Config {
	return &nccl.Config{Context: b.ctx}
}

// domainKey is the GPU's NVLink domain from NVML: the fabric clique on
// multi-node NVLink, else the host. An NVML failure falls back to the host
// (the shared-memory split).
func (b *cudaBackend) domainKey() string {
	k, err := cuda.DomainKey(b.dev)
	if err != nil {
		return ""
	}
	return k
}

func (b *cudaBackend) memory() (reshard.Memory, transporttest.HostIO) { return b.mem, b.mem }

// ncclComm returns the NCCL communicator over comm, bootstrapping it once.
func (b *cudaBackend) ncclComm(comm *mpi.Comm) (*nccl.Comm, error) {
	if c, ok := b.comms[comm]; ok {
		return c, nil
	}
	c, err := nccl.Bootstrap(comm, b.config())
	if err != nil {
		return nil, err
	}
	b.comms[comm] = c
	return c, nil
}

// stages bootstraps the NCCL communicator of every pipeline stage this rank
// belongs to (nccl.BootstrapStages over the stages' MPI communicators).
func (b *cudaBackend) stages(comms []*mpi.Comm) error {
	bs := make([]nccl.Broadcaster, len(comms))
	for s, c := range comms {
		if c != nil {
			bs[s] = c
		}
	}
	ncs, err := nccl.BootstrapStages(bs, b.config())
	if err != nil {
		return err
	}
	for s, c := range ncs {
		if c != nil {
			b.comms[comms[s]] = c
		}
	}
	return nil
}

func (b *cudaBackend) transport(comm *mpi.Comm, topo reshard.Topology) (reshard.Transport, func(), error) {
	c, err := b.ncclComm(comm)
	if err != nil {
		return nil, nil, err
	}
	t, err := nccl.NewTransport(c, b.ctx, topo)
	if err != nil {
		return nil, nil, err
	}
	return t, func() { _ = t.Close() }, nil
}

func (b *cudaBackend) close() {
	var errs []error
	for _, c := range b.comms {
		errs = append(errs, c.Destroy())
	}
	errs = append(errs, b.mem.Close(), b.ctx.Release())
	_ = errors.Join(errs...)
}
