package reshard_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/m2n-dev/m2n/reshard"
	"github.com/m2n-dev/m2n/reshard/inproc"
)

// BenchmarkPreparedCall measures what a step of weight sync costs beyond
// moving its bytes: a model of 1,000 small tensors (64x64 bf16 to 64x64,
// 8 KiB each, row shards on two ranks to column shards on two others, so
// every message is strided) run as one prepared call every step, against
// preparing the call again every step, against a plain exchange of the
// same bytes between the same pairs (one contiguous message per pair, all
// in one round). Ranks are goroutines over the in-process transport, so
// the figures are the library's own costs. It reports, per step, the time
// beyond the plain exchange per tensor (us/tensor).
func BenchmarkPreparedCall(b *testing.B) {
	const tensors = 1000
	src := mustLay(b, "64x64", "bf16", "2", "S0", rng(0, 2))
	dst := mustLay(b, "64x64", "bf16", "2", "S1", rng(2, 2))
	specs := make([]reshard.Spec, tensors)
	for i := range specs {
		specs[i] = reshard.Spec{Name: fmt.Sprintf("layers.%d.w", i), Src: src, Dst: dst}
	}
	const world = 4
	opts := reshard.CallOptions{Schedule: reshard.DefaultScheduleOptions, CoalesceBytes: 64 << 10}
	bufs := make([][]reshard.TensorBuffers, world)
	for r := range bufs {
		for range specs {
			bufs[r] = append(bufs[r], buffers(src, dst, r))
		}
	}
	w := inproc.NewWorld(world)
	ctx := context.Background()
	prepare := func(r int) (*reshard.Prepared, error) {
		return reshard.Prepare(ctx, w.Collective(r), specs, reshard.Flat{}, reshard.Topology{}, 0, opts)
	}
	run := func(fn func(r int, ex *reshard.Executor) error) error {
		return errors.Join(w.Run(func(tr reshard.Transport) error {
			ex := &reshard.Executor{T: tr, Mem: reshard.HostMemory{}}
			return fn(tr.Rank(), ex)
		})...)
	}
	// per-pair bytes of the plain exchange: each source sends half of
	// every tensor to each destination.
	pair := src.Bytes() / 4 * tensors
	plain := make([][2]reshard.Buffer, world)
	for r := range plain {
		plain[r] = [2]reshard.Buffer{reshard.HostBuffer(make([]byte, 2*pair)), reshard.HostBuffer(make([]byte, 2*pair))}
	}
	var plainNs float64
	b.Run("plain exchange", func(b *testing.B) {
		for b.Loop() {
			err := run(func(r int, ex *reshard.Executor) error {
				var ops []reshard.Op
				for k, peer := range []int{(r + 2) % 4, (r+2)%4 ^ 1} {
					ops = append(ops, reshard.Op{Peer: peer, Send: r < 2, Buf: plain[r][0], Off: int64(k) * pair, Len: pair})
				}
				p, err := ex.T.Start(ops)
				if err != nil {
					return err
				}
				return p.Wait(ctx)
			})
			if err != nil {
				b.Fatal(err)
			}
		}
		plainNs = float64(b.Elapsed().Nanoseconds()) / float64(b.N)
	})
	calls := make([]*reshard.Prepared, world)
	if err := run(func(r int, _ *reshard.Executor) error {
		var err error
		calls[r], err = prepare(r)
		return err
	}); err != nil {
		b.Fatal(err)
	}
	exs := make([]*reshard.Executor, world)
	for _, mode := range []string{"prepared once", "prepared every step"} {
		b.Run(mode, func(b *testing.B) {
			for b.Loop() {
				err := run(func(r int, ex *reshard.Executor) error {
					if exs[r] == nil {
						exs[r] = ex
					}
					c := calls[r]
					if mode == "prepared every step" {
						var err error
						if c, err = prepare(r); err != nil {
							return err
						}
					}
					_, err := c.Run(ctx, exs[r], w.Collective(r), bufs[r])
					return err
				})
				if err != nil {
					b.Fatal(err)
				}
			}
			ns := float64(b.Elapsed().Nanoseconds()) / float64(b.N)
			b.ReportMetric((ns-plainNs)/1e3/tensors, "us/tensor")
		})
	}
}
