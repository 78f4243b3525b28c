package hier_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/m2n-dev/m2n/control"
	"github.com/m2n-dev/m2n/fp8"
	"github.com/m2n-dev/m2n/hier"
	"github.com/m2n-dev/m2n/mesh"
	"github.com/m2n-dev/m2n/refit"
	"github.com/m2n-dev/m2n/reshard"
	"github.com/m2n-dev/m2n/transport"
	"github.com/m2n-dev/m2n/transport/inproc"
	"github.com/m2n-dev/m2n/transport/transporttest"
)

// TestFP8Hier converts every FP8 pair (transporttest.FP8Cases), in every
// arrangement, on the hierarchical route with the destination as 1 and 2
// emulated domains (both leader balances with 2), chunks small enough to
// pipeline: the sources quantize into their first hop, leaders forward
// and fan out the FP8 bytes as they are, and every destination byte and
// scale matches quantizing the whole tensor.
func TestFP8Hier(t *testing.T) {
	cases, err := transporttest.FP8Cases()
	if err != nil {
		t.Fatal(err)
	}
	runs := 0
	for ci, c := range cases {
		for _, domains := range []int{1, 2} {
			for _, bal := range []hier.Balance{hier.BalanceCount, hier.BalanceBytes} {
				if domains == 1 && bal == hier.BalanceBytes {
					continue // fan-out alone: one balance is enough
				}
				world := c.World()
				topo, size := domainTopology(t, c, domains)
				chunk := max(c.Dst.Bytes()/32, 20) // a few dozen chunks per tensor
				opts := reshard.ScheduleOptions{ChunkBytes: chunk, StagingBytes: 8 * chunk}
				mode := fp8.Mode(1 + (ci+domains+int(bal))%3)
				w := inproc.NewWorldInPlace(world)
				errs := w.Run(func(tr transport.Transport) error {
					ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
					defer cancel()
					env := transporttest.Env{T: tr, Mem: transport.HostMemory{}, IO: transport.HostMemory{}, Topo: topo, Opts: opts}
					_, err := transporttest.RunFP8Case(ctx, env, control.Plain(w.Collective(tr.Rank())), c, hier.Hier{Balance: bal}, mode, refit.Options{Verify: ci%2 == 0}, 2)
					if err != nil {
						tr.Abort(err)
					}
					return err
				})
				if err := errors.Join(errs...); err != nil {
					t.Errorf("%v, %d domains of %d, balance %v, %v: %v", c, domains, size, bal, mode, err)
				}
				runs++
			}
		}
	}
	t.Logf("%d FP8 calls on hier checked byte for byte and scale for scale", runs)
}

func mustInterval(t *testing.T, shape []int, start int) mesh.Mesh {
	t.Helper()
	m, err := mesh.Interval(shape, start)
	if err != nil {
		t.Fatal(err)
	}
	return m
}
