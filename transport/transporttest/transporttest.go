// Package transporttest is the conformance suite every reshard transport
// runs: the same reshard cases, on every route, checked element by element,
// over the in-process transport, over MPI across processes, and over NCCL on
// GPUs. Cases come from the conformance pairs file (package
// internal/conformance) in three rank arrangements: the paper's disjoint
// intervals, permuted rank lists, and meshes that share ranks.
package transporttest

import (
	"context"
	"fmt"

	"github.com/m2n-dev/m2n/internal/conformance"
	"github.com/m2n-dev/m2n/pattern"
	"github.com/m2n-dev/m2n/placement"
	"github.com/m2n-dev/m2n/refit"
	"github.com/m2n-dev/m2n/reshard"
	"github.com/m2n-dev/m2n/reshard/program"
	"github.com/m2n-dev/m2n/transport"
)

// The conformance cases, from package conformance (the one pairs file).
type (
	Pair        = conformance.Pair
	Case        = conformance.Case
	Arrangement = conformance.Arrangement
)

// The rank arrangements.
const (
	Disjoint    = conformance.Disjoint
	Permuted    = conformance.Permuted
	Overlapping = conformance.Overlapping
	Colocated   = conformance.Colocated
)

var (
	// Arrangements lists every arrangement but Colocated.
	Arrangements = conformance.Arrangements
	// ParsePairs reads pairs in the pairs file's format.
	ParsePairs = conformance.ParsePairs
	// Cases builds every pair in every arrangement.
	Cases = conformance.Cases
	// DefaultCases is every case of the pairs file of at least min ranks.
	DefaultCases = conformance.DefaultCases
	// DefaultPairs is the pairs file's pairs.
	DefaultPairs = conformance.DefaultPairs
)

// Env is one rank's view of a transport under test.
type Env struct {
	T    transport.Transport
	Mem  transport.Memory
	IO   transport.HostIO
	Topo reshard.Topology
	Opts reshard.ScheduleOptions
	// Coalesce is the CompileOptions.CoalesceBytes the case runs with.
	Coalesce int64
	// Padded places every part inside a larger buffer through a view (a
	// few elements before it, and every row padded), as fused weights
	// sit, instead of a dense buffer of its own.
	Padded bool
	// Driver, if set, makes the driver that moves each case's compiled
	// program (a GPU replay) in place of the host driver.
	Driver func(p *program.Program) (refit.Driver, error)
}

// part returns the view and buffer size of rank's part of l: dense, or
// with Padded a PaddedView in a buffer with room for it.
func (env Env) part(l placement.Layout, rank int) (placement.View, int64, error) {
	box, _ := l.RankBox(rank)
	if !env.Padded || box.Empty() {
		return placement.View{}, l.LocalBytes(rank), nil
	}
	v := PaddedView(box.Shape())
	ext, err := v.Extent(box.Shape())
	return v, (ext + 4) * l.ElemSize(), err
}

// PaddedView returns the view Env.Padded uses for a part of shape: 3
// elements before the part, and 5 after every innermost row.
func PaddedView(shape []int64) placement.View {
	nd := len(shape)
	st := make([]int64, nd)
	acc := int64(1)
	for d := nd - 1; d >= 0; d-- {
		st[d] = acc
		n := max(shape[d], 1)
		if d == nd-1 {
			n += 5
		}
		acc *= n
	}
	return placement.View{Offset: 3, Strides: st}
}

// RunCase runs one case on the calling rank (every rank of the transport
// calls it with the same arguments): it plans on the transport's world,
// fills the source buffers with the pattern and poisons the destination
// buffers, runs the route's schedule, and checks every destination element.
// Ranks outside both meshes take part with no buffers.
func RunCase(ctx context.Context, env Env, c Case, route reshard.Route) (refit.Stats, error) {
	rank, world := env.T.Rank(), env.T.Size()
	var st refit.Stats
	if c.World() > world {
		return st, fmt.Errorf("%v needs %d ranks, the transport has %d", c, c.World(), world)
	}
	plan, err := reshard.NewPlan(c.Src, c.Dst, world, reshard.Options{})
	if err != nil {
		return st, err
	}
	sched, err := route.Schedule([]*reshard.Plan{plan}, env.Topo, env.Opts)
	if err != nil {
		return st, err
	}
	var bufs refit.TensorBuffers
	var views program.TensorViews
	var free []transport.Buffer
	defer func() {
		for _, b := range free {
			env.Mem.Free(b)
		}
	}()
	if c.Src.Mesh().Contains(rank) {
		v, n, err := env.part(c.Src, rank)
		if err != nil {
			return st, err
		}
		views.Src = v
		host := make([]byte, n)
		if err := pattern.Fill(c.Src, rank, 0, host, v); err != nil {
			return st, err
		}
		if bufs.Src, err = env.Mem.Alloc(n); err != nil {
			return st, err
		}
		free = append(free, bufs.Src)
		if err := env.IO.Upload(bufs.Src, host); err != nil {
			return st, err
		}
	}
	var got []byte
	if c.Dst.Mesh().Contains(rank) {
		v, n, err := env.part(c.Dst, rank)
		if err != nil {
			return st, err
		}
		views.Dst = v
		got = make([]byte, n)
		for i := range got {
			got[i] = pattern.Poison
		}
		if bufs.Dst, err = env.Mem.Alloc(n); err != nil {
			return st, err
		}
		free = append(free, bufs.Dst)
		if err := env.IO.Upload(bufs.Dst, got); err != nil {
			return st, err
		}
	}
	prog, err := program.Compile(sched, rank, program.CompileOptions{Views: []program.TensorViews{views},
		MaxInPlace: transport.MaxInPlace(env.T), CoalesceBytes: env.Coalesce})
	if err != nil {
		return st, err
	}
	var d refit.Driver
	if env.Driver != nil {
		d, err = env.Driver(prog)
	} else {
		d, err = refit.NewHostDriver(prog, env.T, env.Mem, 0)
	}
	if err != nil {
		return st, err
	}
	defer d.Close()
	st, err = d.Move(ctx, refit.StepInput{Bufs: []refit.TensorBuffers{bufs}})
	if err != nil {
		return st, err
	}
	if got != nil {
		if err := env.IO.Download(got, bufs.Dst); err != nil {
			return st, err
		}
		if err := pattern.Check(c.Dst, rank, 0, got, views.Dst); err != nil {
			return st, fmt.Errorf("%s: %w", sched.Route, err)
		}
		if env.Padded {
			// bytes outside the part keep their poison.
			keep := make([]byte, len(got))
			copy(keep, got)
			if err := pattern.PoisonPart(c.Dst, rank, keep, views.Dst); err != nil {
				return st, err
			}
			for i, b := range keep {
				if b != pattern.Poison {
					return st, fmt.Errorf("%s: rank %d: byte %d outside the destination view changed", sched.Route, rank, i)
				}
			}
		}
	}
	return st, nil
}
