package gpu_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/m2n-dev/m2n/control"
	"github.com/m2n-dev/m2n/cuda"
	"github.com/m2n-dev/m2n/cudamem"
	"github.com/m2n-dev/m2n/hier"
	"github.com/m2n-dev/m2n/internal/testutil/mpitest"
	"github.com/m2n-dev/m2n/mpi"
	"github.com/m2n-dev/m2n/nccl"
	"github.com/m2n-dev/m2n/refit"
	"github.com/m2n-dev/m2n/refit/gpu"
	"github.com/m2n-dev/m2n/reshard"
	"github.com/m2n-dev/m2n/reshard/program"
	"github.com/m2n-dev/m2n/routespec"
	"github.com/m2n-dev/m2n/transport/transporttest"
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

// rankContext retains the primary context of the GPU numbered rank (one GPU
// a process); the caller releases it.
func rankContext(t mpitest.T, rank int) *cuda.Context {
	t.Helper()
	dev, err := cuda.GetDevice(rank)
	if err != nil {
		t.Fatal(err)
	}
	ctx, err := dev.PrimaryContext()
	if err != nil {
		t.Fatal(err)
	}
	return ctx
}

// TestGPUTransportMPI runs the transport suites over NCCL between two
// processes, one GPU each, bootstrapped over MPI: the transport contract
// with the peers across the network and inside one domain (both of the
// transport's communicators), and every two-rank reshard on every route with
// the destination as one and as two domains, on the host driver, the replay
// and the replay captured as a graph, checked element by element.
func TestGPUTransportMPI(t *testing.T) {
	multiGPUs(t)
	mpitest.Run(t, 2, func(t mpitest.T, c *mpi.Comm) {
		ctx := rankContext(t, c.Rank())
		defer ctx.Release()
		// non-blocking, so that the transport's handling of in-progress
		// groups and splits runs too.
		comm, err := nccl.Bootstrap(c, &nccl.Config{Context: ctx, NonBlocking: true, InitTimeout: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		defer comm.Destroy()
		mem, err := cudamem.NewMemory(ctx)
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
		var graphErr error
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
						rt, err := routespec.Parse(route, routespec.Options{Balance: hier.BalanceCount})
						if err != nil {
							t.Fatal(err)
						}
						// the host driver, the replay, and the replay
						// captured as a graph
						// (and the replay with parts in padded buffers
						// through views, small messages coalesced)
						for _, driver := range []string{"host", "replay", "graph", "replay-padded"} {
							cctx, cancel := context.WithTimeout(context.Background(), time.Minute)
							env := transporttest.Env{T: tr, Mem: mem, IO: mem, Topo: topo,
								Opts: reshard.ScheduleOptions{ChunkBytes: 4 << 10, StagingBytes: 64 << 10}}
							if driver != "host" {
								env.Driver = replayRunner(tr, mem, driver == "graph", &graphErr)
							}
							if driver == "replay-padded" {
								env.Padded, env.Coalesce = true, 1<<10
							}
							if _, err := transporttest.RunCase(cctx, env, cs, rt); err != nil {
								t.Errorf("%v, %s, %d domains, %s driver: %v", cs, route, domains, driver, err)
							}
							cancel()
							runs++
						}
					}
					_ = tr.Close()
				}
			}
		}
		if runs == 0 {
			t.Fatal("no two-rank case ran")
		}
		if c.Rank() == 0 {
			t.Log(fmt.Sprintf("%d reshards over NCCL between 2 GPUs checked element by element (host driver, replay, graph, replay through views with coalescing)", runs))
			if graphErr != nil {
				t.Log(fmt.Sprintf("NOTE: some steps could not be captured as graphs and ran from their commands: %v", graphErr))
			}
		}
	})
}

// TestGPUReplayStuckPeer: rank 0 never posts its part of a step; rank 1's
// replay must give up after its timeout with a *reshard.TimeoutError that
// names rank 0 as the peer of the stuck round, and both abort.
func TestGPUReplayStuckPeer(t *testing.T) {
	multiGPUs(t)
	mpitest.Run(t, 2, func(t mpitest.T, c *mpi.Comm) {
		ctx := rankContext(t, c.Rank())
		defer ctx.Release()
		comm, err := nccl.Bootstrap(c, &nccl.Config{Context: ctx, InitTimeout: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		tr, err := nccl.NewTransport(comm, ctx, reshard.Topology{Domain: []int{0, 1}})
		if err != nil {
			t.Fatal(err)
		}
		mem, err := cudamem.NewMemory(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer mem.Close()
		pairs, err := transporttest.ParsePairs(strings.NewReader("64x64 | bf16 | 1 | S0 | 1 | S0\n"), "stuck")
		if err != nil {
			t.Fatal(err)
		}
		cs, err := pairs[0].Layouts(transporttest.Disjoint)
		if err != nil {
			t.Fatal(err)
		}
		if c.Rank() == 0 {
			time.Sleep(8 * time.Second) // stuck: never posts its send
			tr.Abort(fmt.Errorf("test: rank 0 gives up"))
			return
		}
		// rank 1 receives the whole tensor from rank 0. The transport is
		// aborted before its buffer is freed: a kernel may still wait on it.
		plan, err := reshard.NewPlan(cs.Src, cs.Dst, 2, reshard.Options{})
		if err != nil {
			t.Fatal(err)
		}
		sched, err := reshard.Flat.Schedule([]*reshard.Plan{plan}, reshard.Topology{Domain: []int{0, 1}}, reshard.ScheduleOptions{ChunkBytes: 4 << 10, StagingBytes: 64 << 10})
		if err != nil {
			t.Fatal(err)
		}
		prog, err := program.Compile(sched, 1, program.CompileOptions{})
		if err != nil {
			t.Fatal(err)
		}
		rp, err := gpu.NewReplay(prog, tr, mem, gpu.Options{Timeout: 3 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		dst, err := mem.Alloc(cs.Dst.LocalBytes(1))
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		_, err = rp.Move(context.Background(), refit.StepInput{Bufs: []refit.TensorBuffers{{Dst: dst}}})
		tr.Abort(err)
		var te *control.TimeoutError
		if !errors.As(err, &te) || te.Rank != 1 || len(te.Peers) != 1 || te.Peers[0] != 0 {
			t.Fatalf("after %v: %v, want a timeout on rank 1 naming rank 0", time.Since(start), err)
		}
		if d := time.Since(start); d < 3*time.Second || d > 7*time.Second {
			t.Errorf("gave up after %v, the timeout is 3s", d)
		}
		t.Log(fmt.Sprintf("rank 1 after %v: %v", time.Since(start).Round(time.Millisecond), err))
		mem.Free(dst)
	})
}
