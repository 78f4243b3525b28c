package session

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"strconv"

	"github.com/m2n-dev/m2n/control"
	"github.com/m2n-dev/m2n/cuda"
	"github.com/m2n-dev/m2n/cudamem"
	"github.com/m2n-dev/m2n/internal/nvlink"
	"github.com/m2n-dev/m2n/internal/replay"
	"github.com/m2n-dev/m2n/mpi"
	"github.com/m2n-dev/m2n/nccl"
	"github.com/m2n-dev/m2n/refit"
	"github.com/m2n-dev/m2n/refit/gpu"
	"github.com/m2n-dev/m2n/reshard"
	"github.com/m2n-dev/m2n/reshard/program"
	"github.com/m2n-dev/m2n/transport"
)

// device is where a session's tensors live and how they move.
type device interface {
	memory() Memory
	// transport makes the session's base transport over comm.
	transport(comm *mpi.Comm) (transport.Transport, error)
	// forTopology returns the base transport as a call with topo uses it
	// (NCCL puts traffic inside a domain on a stream of its own).
	forTopology(base transport.Transport, topo reshard.Topology) transport.Transport
	// domainKey names the fast local fabric this rank sits in ("" to use
	// the host).
	domainKey() string
	// stage makes the device of a pipeline stage's session over comm,
	// sharing this one's GPU.
	stage(comm *mpi.Comm, timeout func(string, func() error) error) (device, error)
	// runner returns what runs call programs on this device in place of
	// the round-by-round driver (the GPU replay), or nil: the executor
	// drives them. tr is the call's transport.
	// driver returns what makes the device driver of a call's program
	// over tr (the GPU replay), or nil: the host driver moves its steps.
	driver(tr transport.Transport, opts driverOptions) func(p *program.Program) (refit.Driver, error)
	close() error
	// abort tears down what peers might wait on (NCCL communicators; on
	// CPUs the abort notices do that).
	abort(base transport.Transport)
	// available returns the device memory this rank may still allocate
	// and where that was read (CPUs: host memory, hostAvailable).
	available() (int64, string)
}

func newDevice(s *Session) (device, error) {
	switch s.opts.Device {
	case GPU:
		// the libraries load on each rank alone; the ranks agree on the
		// outcome (bounded) before the blocking set-up, so that a host
		// without a GPU fails every rank at once with its loader's
		// message, once, rather than each rank alone or some stuck in a
		// collective with the ones that loaded.
		err := control.Agree(control.WithPhase(context.Background(), "GPU set-up (loading CUDA and NCCL)"), s.ctl, nil, loadGPU(s.rank))
		if err != nil {
			var ab *control.AbortError
			if errors.As(err, &ab) {
				mpi.MarkFailed(err)
			}
			return nil, err
		}
		var d *gpuDevice
		err = s.guard("GPU set-up", func() error {
			var err error
			d, err = newGPUDevice(s.comm, s.opts.GPU)
			return err
		})
		if err != nil {
			return nil, err
		}
		return d, nil
	}
	return cpuDevice{inPlace: !s.opts.NoInPlace, mem: newHostMemory()}, nil
}

// driverOptions are what a device driver is made with: the kind the
// session asks for and the replay's options.
type driverOptions struct {
	kind   refit.DriverKind
	replay gpu.Options
}

// driverOptions returns the options of this session's device drivers.
func (s *Session) driverOptions() driverOptions {
	return driverOptions{kind: s.opts.Driver, replay: gpu.Options{Timeout: s.opts.Timeout, Poll: s.ctl.poll,
		Graph: s.opts.Driver == refit.DriverGraph, MemcpyMin: s.replayEnv.memcpyMin, FuseStreams: s.replayEnv.fuseStreams}}
}

// replayEnv is what the GPU replay takes from the environment, read at
// Join (so that a bad value fails every rank there, once): M2N_MEMCPY_MIN
// (gpu.Options.MemcpyMin) and M2N_FUSE_STREAMS (gpu.Options.FuseStreams;
// 0 where unset: replay.DefaultFuseStreams).
type replayEnv struct {
	memcpyMin   int64
	fuseStreams int
}

func readReplayEnv() (replayEnv, error) {
	var e replayEnv
	var err error
	if e.memcpyMin, err = envInt64("M2N_MEMCPY_MIN"); err != nil {
		return e, err
	}
	const name = "M2N_FUSE_STREAMS"
	if v, ok := os.LookupEnv(name); ok && v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > replay.MaxFuseStreams {
			return e, &reshard.FieldError{Field: name, Got: v, Want: fmt.Sprintf("a whole number from 1 to %d", replay.MaxFuseStreams)}
		}
		e.fuseStreams = n
	}
	return e, nil
}

// cpuDevice keeps tensors in host memory and moves them with MPI.
type cpuDevice struct {
	inPlace bool
	mem     *hostMemory
}

func (d cpuDevice) memory() Memory { return d.mem }

func (d cpuDevice) transport(comm *mpi.Comm) (transport.Transport, error) {
	return mpi.NewTransport(comm, d.inPlace), nil
}

func (cpuDevice) forTopology(base transport.Transport, _ reshard.Topology) transport.Transport {
	return base
}
func (cpuDevice) domainKey() string { return "" }
func (d cpuDevice) stage(*mpi.Comm, func(string, func() error) error) (device, error) {
	return d, nil
}
func (cpuDevice) driver(transport.Transport, driverOptions) func(*program.Program) (refit.Driver, error) {
	return nil
}
func (cpuDevice) close() error              { return nil }
func (cpuDevice) abort(transport.Transport) {}
func (cpuDevice) available() (int64, string) {
	return hostAvailable()
}

// gpuDevice keeps tensors on the GPU of the local rank and moves them
// with NCCL, one communicator bootstrapped over the session's.
type gpuDevice struct {
	ordinal int
	ctx     *cuda.Context
	mem     *cudamem.Memory
	comm    *nccl.Comm
	parent  *gpuDevice // a stage's device shares its parent's GPU
}

// loadGPU loads the CUDA driver and NCCL on this rank, or says why not.
func loadGPU(rank int) error {
	if err := cuda.Load(); err != nil {
		return fmt.Errorf("rank %d: device cuda: %w", rank, err)
	}
	if err := nccl.Load(); err != nil {
		return fmt.Errorf("rank %d: device cuda: %w", rank, err)
	}
	return nil
}

// newGPUDevice sets up the GPU of this rank, after loadGPU: pick(local
// rank) if pick is set, else the local rank's.
func newGPUDevice(comm *mpi.Comm, pick func(localRank int) int) (*gpuDevice, error) {
	n, err := cuda.DeviceCount()
	if err != nil {
		return nil, err
	}
	local, err := comm.SplitShared(0)
	if err != nil {
		return nil, err
	}
	lr, lsize := local.Rank(), local.Size()
	ordinal := lr
	var bad error
	if pick != nil {
		ordinal = pick(lr)
		if ordinal < 0 || ordinal >= n {
			bad = fmt.Errorf("rank %d: device cuda: GPU %d chosen for local rank %d, but this host has GPUs 0 to %d", comm.Rank(), ordinal, lr, n-1)
		}
		// every rank of the host learns every choice, so that ranks that
		// chose one GPU fail together rather than inside NCCL.
		all := make([]byte, 8*lsize)
		if err := local.Allgather(binary.LittleEndian.AppendUint64(nil, uint64(int64(ordinal))), all); err != nil {
			_ = local.Free()
			return nil, err
		}
		for a := 0; a < lsize && bad == nil; a++ {
			for b := a + 1; b < lsize && bad == nil; b++ {
				if ga, gb := int64(binary.LittleEndian.Uint64(all[8*a:])), int64(binary.LittleEndian.Uint64(all[8*b:])); ga == gb {
					bad = fmt.Errorf("rank %d: device cuda: local ranks %d and %d of this host both chose GPU %d; NCCL needs one GPU per rank (torch: torch.cuda.set_device(local_rank) before joining)", comm.Rank(), a, b, ga)
				}
			}
		}
	} else if lsize > n {
		bad = fmt.Errorf("rank %d: device cuda: %d ranks on this host share %d GPUs; NCCL needs one GPU per rank", comm.Rank(), lsize, n)
	}
	if err := local.Free(); err != nil {
		return nil, err
	}
	if bad != nil {
		return nil, bad
	}
	dev, err := cuda.GetDevice(ordinal)
	if err != nil {
		return nil, err
	}
	ctx, err := dev.PrimaryContext()
	if err != nil {
		return nil, err
	}
	mem, err := cudamem.NewMemory(ctx)
	if err != nil {
		_ = ctx.Release()
		return nil, err
	}
	return &gpuDevice{ordinal: ordinal, ctx: ctx, mem: mem}, nil
}

func (d *gpuDevice) memory() Memory { return d.mem }

func (d *gpuDevice) transport(comm *mpi.Comm) (transport.Transport, error) {
	c, err := nccl.Bootstrap(comm, &nccl.Config{Context: d.ctx})
	if err != nil {
		return nil, err
	}
	d.comm = c
	return nccl.NewTransport(c, d.ctx, reshard.Topology{})
}

func (d *gpuDevice) forTopology(base transport.Transport, topo reshard.Topology) transport.Transport {
	return base.(*nccl.Transport).WithTopology(topo)
}

func (d *gpuDevice) domainKey() string {
	k, err := nvlink.DomainKey(d.ordinal)
	if err != nil {
		return ""
	}
	return k
}

func (d *gpuDevice) stage(comm *mpi.Comm, guard func(string, func() error) error) (device, error) {
	mem, err := cudamem.NewMemory(d.ctx)
	if err != nil {
		return nil, err
	}
	return &gpuDevice{ordinal: d.ordinal, ctx: d.ctx, mem: mem, parent: d}, nil
}

// driver replays a call's program on the GPU's streams when the call runs
// on the NCCL transport itself (not through network emulation or a
// wrapper, which the host must drive) and the session asks for a device
// driver.
func (d *gpuDevice) driver(tr transport.Transport, opts driverOptions) func(*program.Program) (refit.Driver, error) {
	t, ok := tr.(*nccl.Transport)
	if !ok || opts.kind == refit.DriverHost {
		return nil
	}
	return func(p *program.Program) (refit.Driver, error) {
		return gpu.NewReplay(p, t, d.mem, opts.replay)
	}
}

func (d *gpuDevice) close() error {
	var errs []error
	if d.comm != nil {
		errs = append(errs, d.comm.Destroy())
	}
	errs = append(errs, d.mem.Close())
	if d.parent == nil {
		errs = append(errs, d.ctx.Release())
	}
	return errors.Join(errs...)
}

func (d *gpuDevice) abort(base transport.Transport) {
	if base != nil {
		base.Abort(errors.New("m2n: session aborted"))
	} else if d.comm != nil {
		_ = d.comm.Abort()
	}
}

func (d *gpuDevice) available() (int64, string) {
	free, _, err := d.ctx.MemGetInfo()
	if err != nil {
		return math.MaxInt64, "unknown: " + err.Error()
	}
	return free, fmt.Sprintf("free memory of GPU %d, cuMemGetInfo", d.ordinal)
}
