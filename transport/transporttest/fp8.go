package transporttest

import (
	"context"
	"fmt"

	"github.com/m2n-dev/m2n/control"
	"github.com/m2n-dev/m2n/fp8"
	"github.com/m2n-dev/m2n/internal/conformance"
	"github.com/m2n-dev/m2n/pattern"
	"github.com/m2n-dev/m2n/refit"
	"github.com/m2n-dev/m2n/reshard"
	"github.com/m2n-dev/m2n/transport"
)

// FP8Pairs are the pairs a conversion to FP8 in flight runs on
// (conformance.FP8Pairs).
var FP8Pairs = conformance.FP8Pairs

// FP8Cases returns every FP8 pair in every arrangement, destinations in
// fp8e4m3.
func FP8Cases() ([]Case, error) {
	pairs, err := FP8Pairs()
	if err != nil {
		return nil, err
	}
	cs, err := Cases(pairs)
	if err != nil {
		return nil, err
	}
	for i := range cs {
		cs[i] = cs[i].FP8()
	}
	return cs, nil
}

// RunFP8Case runs case c, whose destination is fp8e4m3 (Case.FP8), as a
// call converting to FP8 by mode on the calling rank (every rank of the
// transport calls it alike): one tensor prepared once on a runtime over g
// (opts, with env's staging and coalescing) and run for steps
// steps, each with the source filled by pattern.FillFloats of another seed
// (the weights, and so the scales, change every step), the destination
// and its scale buffer poisoned; after every step every destination byte
// and scale is compared with quantizing the whole tensor at once
// (pattern.CheckFP8). It returns the last step's report.
func RunFP8Case(ctx context.Context, env Env, g control.Group, c Case, route reshard.Route, mode fp8.Mode, opts refit.Options, steps int) (*refit.Report, error) {
	rank := env.T.Rank()
	spec := refit.Spec{Name: "w", Src: c.Src, Dst: c.Dst, Scale: mode}
	var bufs refit.TensorBuffers
	var free []transport.Buffer
	defer func() {
		for _, b := range free {
			env.Mem.Free(b)
		}
	}()
	alloc := func(n int64) (transport.Buffer, error) {
		b, err := env.Mem.Alloc(n)
		if err == nil {
			free = append(free, b)
		}
		return b, err
	}
	var srcHost, got, scales []byte
	var err error
	if c.Src.Mesh().Contains(rank) {
		var n int64
		if spec.Views.Src, n, err = env.part(c.Src, rank); err != nil {
			return nil, err
		}
		srcHost = make([]byte, n)
		if bufs.Src, err = alloc(n); err != nil {
			return nil, err
		}
	}
	if c.Dst.Mesh().Contains(rank) {
		var n int64
		if spec.Views.Dst, n, err = env.part(c.Dst, rank); err != nil {
			return nil, err
		}
		got = make([]byte, n)
		if bufs.Dst, err = alloc(n); err != nil {
			return nil, err
		}
		sb, err := spec.ScaleBytes(rank)
		if err != nil {
			return nil, err
		}
		scales = make([]byte, sb)
		if bufs.Scale, err = alloc(sb); err != nil {
			return nil, err
		}
	}
	opts.Schedule, opts.CoalesceBytes = env.Opts, env.Coalesce
	call, err := refit.New(g).Prepare(ctx, []refit.Spec{spec}, route, refit.Target{Transport: env.T, Memory: env.Mem, Topology: env.Topo}, opts)
	if err != nil {
		return nil, err
	}
	defer call.Close()
	var rep *refit.Report
	for step := 0; step < steps; step++ {
		seed := uint64(step)
		if srcHost != nil {
			if err := pattern.FillFloats(c.Src, rank, seed, srcHost, spec.Views.Src); err != nil {
				return nil, err
			}
			if err := env.IO.Upload(bufs.Src, srcHost); err != nil {
				return nil, err
			}
		}
		if got != nil {
			for _, b := range [][]byte{got, scales} {
				for i := range b {
					b[i] = pattern.Poison
				}
			}
			if err := env.IO.Upload(bufs.Dst, got); err != nil {
				return nil, err
			}
			if len(scales) > 0 {
				if err := env.IO.Upload(bufs.Scale, scales); err != nil {
					return nil, err
				}
			}
		}
		if rep, err = call.Run(ctx, []refit.TensorBuffers{bufs}); err != nil {
			return rep, err
		}
		if got == nil {
			continue
		}
		if err := env.IO.Download(got, bufs.Dst); err != nil {
			return rep, err
		}
		if len(scales) > 0 {
			if err := env.IO.Download(scales, bufs.Scale); err != nil {
				return rep, err
			}
		}
		if err := pattern.CheckFP8(c.Src.DType(), c.Dst, mode, rank, seed, got, spec.Views.Dst, scales); err != nil {
			return rep, fmt.Errorf("%s, %v, step %d: %w", call.Schedule().Route, mode, step, err)
		}
		if env.Padded {
			keep := append([]byte(nil), got...)
			if err := pattern.PoisonPart(c.Dst, rank, keep, spec.Views.Dst); err != nil {
				return rep, err
			}
			for i, b := range keep {
				if b != pattern.Poison {
					return rep, fmt.Errorf("%s: rank %d: byte %d outside the destination view changed", call.Schedule().Route, rank, i)
				}
			}
		}
	}
	return rep, nil
}
