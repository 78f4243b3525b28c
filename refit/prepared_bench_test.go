package refit_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/m2n-dev/m2n/control"
	"github.com/m2n-dev/m2n/refit"
	"github.com/m2n-dev/m2n/reshard"
	"github.com/m2n-dev/m2n/transport"
	"github.com/m2n-dev/m2n/transport/inproc"
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
	specs := make([]refit.Spec, tensors)
	for i := range specs {
		specs[i] = refit.Spec{Name: fmt.Sprintf("layers.%d.w", i), Src: src, Dst: dst}
	}
	const world = 4
	opts := refit.Options{Schedule: reshard.DefaultScheduleOptions, CoalesceBytes: 64 << 10}
	bufs := make([][]refit.TensorBuffers, world)
	for r := range bufs {
		for range specs {
			bufs[r] = append(bufs[r], buffers(src, dst, r))
		}
	}
	w := inproc.NewWorld(world)
	ctx := context.Background()
	runtimes := make([]*refit.Runtime, world)
	for r := range runtimes {
		runtimes[r] = refit.New(control.Plain(w.Collective(r)))
	}
	prepare := func(r int) (*refit.Call, error) {
		return runtimes[r].Prepare(ctx, specs, reshard.Flat, refit.Target{Transport: w.Transport(r), Memory: transport.HostMemory{}}, opts)
	}
	run := func(fn func(r int, tr transport.Transport) error) error {
		return errors.Join(w.Run(func(tr transport.Transport) error {
			return fn(tr.Rank(), tr)
		})...)
	}
	// per-pair bytes of the plain exchange: each source sends half of
	// every tensor to each destination.
	pair := src.Bytes() / 4 * tensors
	plain := make([][2]transport.Buffer, world)
	for r := range plain {
		plain[r] = [2]transport.Buffer{transport.HostBuffer(make([]byte, 2*pair)), transport.HostBuffer(make([]byte, 2*pair))}
	}
	var plainNs float64
	b.Run("plain exchange", func(b *testing.B) {
		for b.Loop() {
			err := run(func(r int, tr transport.Transport) error {
				var ops []transport.Op
				for k, peer := range []int{(r + 2) % 4, (r+2)%4 ^ 1} {
					ops = append(ops, transport.Op{Peer: peer, Send: r < 2, Buf: plain[r][0], Off: int64(k) * pair, Len: pair})
				}
				p, err := tr.Start(ops)
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
	calls := make([]*refit.Call, world)
	if err := run(func(r int, _ transport.Transport) error {
		var err error
		calls[r], err = prepare(r)
		return err
	}); err != nil {
		b.Fatal(err)
	}
	for _, mode := range []string{"prepared once", "prepared every step"} {
		b.Run(mode, func(b *testing.B) {
			for b.Loop() {
				err := run(func(r int, _ transport.Transport) error {
					c := calls[r]
					if mode == "prepared every step" {
						var err error
						if c, err = prepare(r); err != nil {
							return err
						}
						defer c.Close()
					}
					_, err := c.Run(ctx, bufs[r])
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
