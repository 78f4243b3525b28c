package nccl_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/m2n-dev/m2n/cuda"
	"github.com/m2n-dev/m2n/hier"
	"github.com/m2n-dev/m2n/internal/mpitest"
	"github.com/m2n-dev/m2n/mpi"
	"github.com/m2n-dev/m2n/nccl"
	"github.com/m2n-dev/m2n/reshard"
	"github.com/m2n-dev/m2n/reshard/transporttest"
)

// twoRankPairs are reshards that fit two GPUs: one rank to the other, and
// both ranks on both sides (replicated, resharded, 3-D).
const twoRankPairs = `
8x4 | f32 | 1 | S0 | 1 | S0
7x5 | bf16 | 2 | S0 | 2 | S1
16x8 | f32 | 2 | R | 2 | S0
13x2 | i32 | 2 | S0 | 2 | R
8x8x8 | f32 | 1x2 | S0,S1 | 2x1 | S2,R
256x64x32 | bf16 | 2 | S0 | 2 | S2
`

// multiGPUs returns the device count, skipping t when there are fewer than
// two GPUs (NCCL needs one GPU per rank).
func multiGPUs(t testing.TB) int {
	t.Helper()
	err := cuda.Load()
	if err == nil {
		err = nccl.Load()
	}
	if err != nil {
		t.Skipf("no GPU: %v", err)
	}
	n, err := cuda.DeviceCount()
	if err != nil {
		t.Fatal(err)
	}
	if n < 2 {
		t.Skipf("%d GPU: NCCL needs one GPU per rank, and this test two ranks", n)
	}
	return n
}

// TestGPUTransportMPI runs the transport suites over NCCL between two
// processes, one GPU each, bootstrapped over MPI: the transport contract
// with the peers across the network and inside one domain (both of the
// transport's communicators), and every two-rank reshard on every route with
// the destination as one and as two domains, checked element by element.
func TestGPUTransportMPI(t *testing.T) {
	multiGPUs(t)
	mpitest.Run(t, 2, func(t mpitest.T, c *mpi.Comm) {
		dev, err := cuda.GetDevice(c.Rank())
		if err != nil {
			t.Fatal(err)
		}
		ctx, err := dev.PrimaryContext()
		if err != nil {
			t.Fatal(err)
		}
		defer ctx.Release()
		// non-blocking, so that the transport's handling of in-progress
		// groups and splits runs too.
		comm, err := nccl.Bootstrap(c, &nccl.Config{Context: ctx, NonBlocking: true, InitTimeout: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		defer comm.Destroy()
		mem, err := cuda.NewMemory(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer mem.Close()
		for _, topo := range []reshard.Topology{{Domain: []int{0, 1}}, {Domain: []int{0, 0}}} {
			tr, err := nccl.NewTransport(comm, ctx, topo)
			if err != nil {
				t.Fatal(err)
			}
			cctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			if err := transporttest.Exchange(cctx, transporttest.Env{T: tr, Mem: mem, IO: mem}, 6); err != nil {
				t.Errorf("exchange, domains %v: %v", topo.Domain, err)
			}
			cancel()
			_ = tr.Close()
		}
		pairs, err := transporttest.ParsePairs(strings.NewReader(twoRankPairs), "two-rank pairs")
		if err != nil {
			t.Fatal(err)
		}
		runs := 0
		for _, p := range pairs {
			for _, a := range []transporttest.Arrangement{transporttest.Disjoint, transporttest.Colocated} {
				cs, err := p.Layouts(a)
				if err != nil {
					t.Fatal(err)
				}
				if cs.World() > 2 {
					continue
				}
				for _, domains := range []int{1, 2} {
					topo, err := hier.Domains([]int{0, 0}, cs.Src, cs.Dst, hier.DomainSizes{Dst: (cs.Dst.Mesh().Size() + domains - 1) / domains})
					if err != nil {
						t.Fatal(err)
					}
					tr, err := nccl.NewTransport(comm, ctx, topo)
					if err != nil {
						t.Fatal(err)
					}
					for _, route := range []string{"flat", "agbcast", "hier"} {
						rt, err := hier.ParseRoute(route, hier.BalanceCount, hier.Fabric{})
						if err != nil {
							t.Fatal(err)
						}
						cctx, cancel := context.WithTimeout(context.Background(), time.Minute)
						env := transporttest.Env{T: tr, Mem: mem, IO: mem, Topo: topo,
							Opts: reshard.ScheduleOptions{ChunkBytes: 4 << 10, StagingBytes: 64 << 10}}
						if _, err := transporttest.RunCase(cctx, env, cs, rt); err != nil {
							t.Errorf("%v, %s, %d domains: %v", cs, route, domains, err)
						}
						cancel()
						runs++
					}
					_ = tr.Close()
				}
			}
		}
		if runs == 0 {
			t.Fatal("no two-rank case ran")
		}
		if c.Rank() == 0 {
			t.Log(fmt.Sprintf("%d reshards over NCCL between 2 GPUs checked element by element", runs))
		}
	})
}
