package cudamem_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/m2n-dev/m2n/control"
	"github.com/m2n-dev/m2n/cudamem"
	"github.com/m2n-dev/m2n/fp8"
	"github.com/m2n-dev/m2n/hier"
	"github.com/m2n-dev/m2n/internal/testutil/gputest"
	"github.com/m2n-dev/m2n/pattern"
	"github.com/m2n-dev/m2n/placement"
	"github.com/m2n-dev/m2n/refit"
	"github.com/m2n-dev/m2n/reshard"
	"github.com/m2n-dev/m2n/transport"
	"github.com/m2n-dev/m2n/transport/inproc"
	"github.com/m2n-dev/m2n/transport/transporttest"
)

// TestGPUFP8 converts every FP8 pair (every 2-D and 3-D conformance pair,
// in its dtype and in bf16, and pairs whose shards cut 128x128 blocks), in
// every arrangement, to FP8 in flight on device memory of the one GPU: the
// partial amaxes with BlockAmax, the quantizing with PackQuantize, on flat,
// on hier over one and two destination domains, and on flat from padded
// views with small messages coalesced, verified and atomic; two steps
// each, every destination byte and scale compared with quantizing the
// whole tensor at once. It skips where there is no GPU.
// TestFP8CallKernelsOnCPU runs the same kernels on the CPU emulator.
func TestGPUFP8(t *testing.T) {
	ctx := gputest.Context(t)
	cases, err := transporttest.FP8Cases()
	if err != nil {
		t.Fatal(err)
	}
	wire := newMemory(t, ctx)
	type route struct {
		deviceRoute
		opts refit.Options
	}
	routes := []route{{deviceRoute{reshard.Flat, 1, false, 0}, refit.Options{}}, {deviceRoute{hier.Hier{}, 1, false, 0}, refit.Options{}},
		{deviceRoute{hier.Hier{}, 2, false, 0}, refit.Options{}}, {deviceRoute{reshard.Flat, 1, true, 1 << 10}, refit.Options{Verify: true, Atomic: true}}}
	runs := 0
	for ci, c := range cases {
		for ri, r := range routes {
			mode := fp8.Mode(1 + (ci+ri)%3)
			err := runOnDevice(t, ctx, wire, c, r.deviceRoute, func(cctx context.Context, w *inproc.World, env transporttest.Env) error {
				_, err := transporttest.RunFP8Case(cctx, env, control.Plain(w.Collective(env.T.Rank())), c, r.route, mode, r.opts, 2)
				return err
			})
			if err != nil {
				t.Errorf("%v, %s over %d domains (views %v, coalesce %d), %v: %v", c, r.route.Name(), r.domains, r.padded, r.coalesce, mode, err)
			}
			runs++
		}
	}
	t.Logf("%d FP8 calls of 2 steps checked byte for byte and scale for scale on device memory", runs)
}

// TestGPUFP8NonFinite: a NaN in a source on device memory fails the call on
// every rank, naming the tensor and the element, before the destination
// changes.
func TestGPUFP8NonFinite(t *testing.T) {
	ctx := gputest.Context(t)
	pairs, err := transporttest.ParsePairs(strings.NewReader("300x200 | bf16 | 2 | S0 | 2 | S1\n"), "inline")
	if err != nil {
		t.Fatal(err)
	}
	c, err := pairs[0].Layouts(transporttest.Disjoint)
	if err != nil {
		t.Fatal(err)
	}
	c = c.FP8()
	wire := newMemory(t, ctx)
	w := inproc.NewWorld(c.World()).WithMemory(wire)
	spec := refit.Spec{Name: "w", Src: c.Src, Dst: c.Dst, Scale: fp8.Block}
	errs := w.Run(func(tr transport.Transport) error {
		return withMemory(ctx, func(mem *cudamem.Memory) error {
			rank := tr.Rank()
			var err error
			var b refit.TensorBuffers
			if c.Src.Mesh().Contains(rank) {
				h := make([]byte, c.Src.LocalBytes(rank))
				if err := pattern.FillFloats(c.Src, rank, 0, h, placement.View{}); err != nil {
					return err
				}
				if rank == 1 { // rows [150, 300): global [170, 33] is local [20, 33]
					binary.LittleEndian.PutUint16(h[2*(20*200+33):], 0x7FC0)
				}
				if b.Src, err = uploaded(mem, h); err != nil {
					return err
				}
				defer mem.Free(b.Src)
			}
			if c.Dst.Mesh().Contains(rank) {
				if b.Dst, err = mem.Alloc(c.Dst.LocalBytes(rank)); err != nil {
					return err
				}
				defer mem.Free(b.Dst)
				n, _ := spec.ScaleBytes(rank)
				if b.Scale, err = mem.Alloc(n); err != nil {
					return err
				}
				defer mem.Free(b.Scale)
			}
			call, err := refit.New(control.Plain(w.Collective(rank))).Prepare(context.Background(), []refit.Spec{spec}, reshard.Flat,
				refit.Target{Transport: tr, Memory: mem}, refit.Options{Schedule: reshard.DefaultScheduleOptions, Atomic: true, Timeout: time.Minute})
			if err != nil {
				return err
			}
			defer call.Close()
			_, err = call.Run(context.Background(), []refit.TensorBuffers{b})
			var nf *refit.NonFiniteError
			if !errors.As(err, &nf) || nf.Flat != 170*200+33 || nf.Rank != 1 {
				return fmt.Errorf("rank %d: %v, want a NaN at [170 33] on rank 1", rank, err)
			}
			return nil
		})
	})
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
}
