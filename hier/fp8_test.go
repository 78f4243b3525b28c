package hier_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/m2n-dev/m2n/fp8"
	"github.com/m2n-dev/m2n/hier"
	"github.com/m2n-dev/m2n/mesh"
	"github.com/m2n-dev/m2n/placement"
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
				n := c.Dst.Mesh().Size()
				size := (n + domains - 1) / domains
				world := c.World()
				topo, err := hier.Domains(make([]int, world), c.Src, c.Dst, hier.DomainSizes{Dst: size})
				if err != nil {
					t.Fatal(err)
				}
				chunk := max(c.Dst.Bytes()/32, 20) // a few dozen chunks per tensor
				opts := reshard.ScheduleOptions{ChunkBytes: chunk, StagingBytes: 8 * chunk}
				mode := fp8.Mode(1 + (ci+domains+int(bal))%3)
				w := inproc.NewWorldInPlace(world)
				errs := w.Run(func(tr transport.Transport) error {
					ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
					defer cancel()
					env := transporttest.Env{T: tr, Mem: transport.HostMemory{}, IO: transport.HostMemory{}, Topo: topo, Opts: opts}
					_, err := transporttest.RunFP8Case(ctx, env, refit.Plain(w.Collective(tr.Rank())), c, hier.Hier{Balance: bal}, mode, refit.Options{Verify: ci%2 == 0}, 2)
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

// TestFP8AutoSkipsAgbcast: auto leaves agbcast out for a call that
// converts (and says so), choosing the fastest of the others.
func TestFP8AutoSkipsAgbcast(t *testing.T) {
	src, err := placement.ParseLayout("1024x1024", placement.BF16, mustInterval(t, []int{2}, 0), "S0")
	if err != nil {
		t.Fatal(err)
	}
	dst, err := placement.ParseLayout("1024x1024", placement.FP8E4M3, mustInterval(t, []int{16}, 2), "R")
	if err != nil {
		t.Fatal(err)
	}
	conv, err := reshard.NewPlan(src, dst, 18, reshard.Options{})
	if err != nil {
		t.Fatal(err)
	}
	auto := hier.Auto{Fabric: hier.Fabric{NetBW: 1e9, LocalBW: 1e12}}
	c := auto.Choose([]*reshard.Plan{conv}, reshard.Topology{}, reshard.DefaultScheduleOptions)
	if c.Route == "agbcast" || !strings.Contains(c.Why, "agbcast left out") {
		t.Errorf("auto picked %s for a converting call: %s", c.Route, c.Why)
	}
	// the filter: leaving out the winner picks the best of the others.
	p := hier.ProblemOf([]*reshard.Plan{conv}, reshard.Topology{}, float64(reshard.DefaultScheduleOptions.ChunkBytes))
	best := hier.Choose(p, auto.Fabric)
	other := hier.ChooseAmong(p, auto.Fabric, func(r string) bool { return r != best.Route })
	for _, b := range other.Bounds {
		if b.Route != best.Route && b.Predicted < predicted(other.Bounds, other.Route) {
			t.Errorf("without %s, auto picked %s although %s predicts less", best.Route, other.Route, b.Route)
		}
	}
	if other.Route == best.Route {
		t.Errorf("the filter left %s in", best.Route)
	}
}

func predicted(bs []hier.Bound, route string) float64 {
	for _, b := range bs {
		if b.Route == route {
			return b.Predicted
		}
	}
	return -1
}

func mustInterval(t *testing.T, shape []int, start int) mesh.Mesh {
	t.Helper()
	m, err := mesh.Interval(shape, start)
	if err != nil {
		t.Fatal(err)
	}
	return m
}
