package hier_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/m2n-dev/m2n/hier"
	"github.com/m2n-dev/m2n/reshard"
	"github.com/m2n-dev/m2n/transport"
	"github.com/m2n-dev/m2n/transport/inproc"
	"github.com/m2n-dev/m2n/transport/transporttest"
)

// TestConformanceHier runs every conformance pair, in every rank
// arrangement, on the hierarchical route with 1, 2 and 4 emulated
// destination domains and both leader balances, over the in-process
// transport, with chunks small enough to pipeline.
// domainTopology returns the topology of c's world on one host, with c's
// destination ranks cut into domains domains of size ranks (the last one
// smaller where they do not divide).
func domainTopology(t *testing.T, c transporttest.Case, domains int) (topo reshard.Topology, size int) {
	t.Helper()
	n := c.Dst.Mesh().Size()
	size = (n + domains - 1) / domains
	topo, err := hier.Domains(make([]int, c.World()), c.Src, c.Dst, hier.DomainSizes{Dst: size})
	if err != nil {
		t.Fatal(err)
	}
	return topo, size
}

func TestConformanceHier(t *testing.T) {
	cases, err := transporttest.DefaultCases(13)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cases {
		for _, domains := range []int{1, 2, 4} {
			for _, bal := range []hier.Balance{hier.BalanceCount, hier.BalanceBytes} {
				world := c.World()
				topo, size := domainTopology(t, c, domains)
				opts := reshard.ScheduleOptions{ChunkBytes: 1 << 10, StagingBytes: 1 << 14}
				if c.Src.Bytes() <= 4<<10 {
					opts = reshard.ScheduleOptions{ChunkBytes: 40, StagingBytes: 320}
				}
				errs := inproc.NewWorldInPlace(world).Run(func(tr transport.Transport) error {
					ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
					defer cancel()
					env := transporttest.Env{T: tr, Mem: transport.HostMemory{}, IO: transport.HostMemory{}, Topo: topo, Opts: opts}
					_, err := transporttest.RunCase(ctx, env, c, hier.Hier{Balance: bal})
					if err != nil {
						tr.Abort(err)
					}
					return err
				})
				if err := errors.Join(errs...); err != nil {
					t.Errorf("%v, %d domains of %d, balance %v: %v", c, domains, size, bal, err)
				}
			}
		}
	}
}

func TestBlockOwner(t *testing.T) {
	for _, tc := range []struct{ n, r int }{{10, 3}, {2, 8}, {8, 8}, {7, 2}, {1, 1}, {16, 5}} {
		loads := make([]int, tc.r)
		last := 0
		for i := 0; i < tc.n; i++ {
			o := hier.BlockOwner(i, tc.n, tc.r)
			if o < last {
				t.Fatalf("%d over %d: item %d goes back to replica %d", tc.n, tc.r, i, o)
			}
			last = o
			loads[o]++
		}
		lo, hi := tc.n, 0
		for _, l := range loads {
			lo, hi = min(lo, l), max(hi, l)
		}
		if hi-lo > 1 {
			t.Errorf("%d over %d: loads %v differ by more than one", tc.n, tc.r, loads)
		}
		// the first n mod r replicas carry the extra one.
		for j, l := range loads {
			want := tc.n / tc.r
			if j < tc.n%tc.r {
				want++
			}
			if l != want {
				t.Errorf("%d over %d: replica %d leads %d, want %d", tc.n, tc.r, j, l, want)
			}
		}
	}
}
