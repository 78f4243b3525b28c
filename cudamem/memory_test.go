package cudamem_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/m2n-dev/m2n/control"
	"github.com/m2n-dev/m2n/cuda"
	"github.com/m2n-dev/m2n/cudamem"
	"github.com/m2n-dev/m2n/hier"
	"github.com/m2n-dev/m2n/internal/testutil/gputest"
	"github.com/m2n-dev/m2n/pattern"
	"github.com/m2n-dev/m2n/placement"
	"github.com/m2n-dev/m2n/refit"
	"github.com/m2n-dev/m2n/reshard"
	"github.com/m2n-dev/m2n/strided"
	"github.com/m2n-dev/m2n/transport"
	"github.com/m2n-dev/m2n/transport/inproc"
	"github.com/m2n-dev/m2n/transport/transporttest"
)

// TestGPUConformance runs the transport conformance suite on device memory
// of the one GPU: every pair, in every arrangement, on flat, agbcast and hier
// (one and two destination domains), with the ranks as goroutines of this
// process. Every rank packs, unpacks and copies with the GPU kernels on a
// stream of its own; messages are device-to-device copies. It skips where
// there is no GPU.
func TestGPUConformance(t *testing.T) {
	ctx := gputest.Context(t)
	cases, err := transporttest.DefaultCases(13)
	if err != nil {
		t.Fatal(err)
	}
	wire := newMemory(t, ctx)
	// Every route, and flat again with parts in padded buffers through
	// views and small messages coalesced (the pack kernels gather several
	// regions into one staged operation).
	routes := []deviceRoute{{reshard.Flat, 1, false, 0}, {reshard.AllGatherBroadcast, 1, false, 0}, {hier.Hier{}, 1, false, 0},
		{hier.Hier{}, 2, false, 0}, {reshard.Flat, 1, true, 1 << 10}}
	runs := 0
	for _, c := range cases {
		for _, r := range routes {
			err := runOnDevice(t, ctx, wire, c, r, func(cctx context.Context, _ *inproc.World, env transporttest.Env) error {
				_, err := transporttest.RunCase(cctx, env, c, r.route)
				return err
			})
			if err != nil {
				t.Errorf("%v, %s over %d domains (views %v, coalesce %d): %v", c, r.route.Name(), r.domains, r.padded, r.coalesce, err)
			}
			runs++
		}
	}
	t.Logf("%d reshards checked element by element on device memory", runs)
}

// TestGPUMemoryBounds: a descriptor outside its buffer is an error, never
// a kernel writing past the end.
func TestGPUMemoryBounds(t *testing.T) {
	ctx := gputest.Context(t)
	mem := newMemory(t, ctx)
	a, _ := mem.Alloc(64)
	b, _ := mem.Alloc(64)
	defer mem.Free(a)
	defer mem.Free(b)
	err := mem.Pack(a, 0, b, strided.Desc{Offset: 8, Run: 16, Count: []int64{4}, Stride: []int64{16}})
	if err == nil {
		t.Fatal("a pack reaching byte 72 of a 64-byte buffer passed")
	}
	t.Log(err)
}

// TestGPURefit makes a whole refit call on device memory (8 in-process
// ranks on the one GPU): validation, agreement, verified transfer, atomic
// commit; then a call whose destination aliases its source on one rank,
// which every rank must refuse before anything moves.
func TestGPURefit(t *testing.T) {
	ctx := gputest.Context(t)
	pairs, err := transporttest.ParsePairs(strings.NewReader("16x8 | bf16 | 4 | S0 | 2x2 | R,S1\n"), "inline")
	if err != nil {
		t.Fatal(err)
	}
	c, err := pairs[0].Layouts(transporttest.Overlapping)
	if err != nil {
		t.Fatal(err)
	}
	wire := newMemory(t, ctx)
	for _, alias := range []bool{false, true} {
		w := inproc.NewWorld(c.World()).WithMemory(wire)
		errs := make([]error, c.World())
		var wg sync.WaitGroup
		for r := 0; r < c.World(); r++ {
			wg.Add(1)
			go func(rank int) {
				defer wg.Done()
				errs[rank] = withMemory(ctx, func(mem *cudamem.Memory) error {
					var err error
					var bufs refit.TensorBuffers
					if c.Src.Mesh().Contains(rank) {
						h := make([]byte, c.Src.LocalBytes(rank))
						if err := pattern.Fill(c.Src, rank, 0, h, placement.View{}); err != nil {
							return err
						}
						if bufs.Src, err = uploaded(mem, h); err != nil {
							return err
						}
						defer mem.Free(bufs.Src)
					}
					if c.Dst.Mesh().Contains(rank) {
						if bufs.Dst, err = mem.Alloc(c.Dst.LocalBytes(rank)); err != nil {
							return err
						}
						defer mem.Free(bufs.Dst)
						if alias && bufs.Src != nil {
							// a view of the same memory as the source
							bufs.Dst = cudamem.Buffer{Ptr: bufs.Src.(cudamem.Buffer).Ptr, N: bufs.Dst.Len()}
						}
					}
					opts := refit.Options{Schedule: reshard.DefaultScheduleOptions, Verify: true, Atomic: true, Timeout: time.Minute}
					cctx := context.Background()
					call, err := refit.New(control.Plain(w.Collective(rank))).Prepare(cctx, []refit.Spec{{Name: "w", Src: c.Src, Dst: c.Dst}},
						reshard.Flat, refit.Target{Transport: w.Transport(rank), Memory: mem}, opts)
					if err != nil {
						return err
					}
					defer call.Close()
					_, err = call.Run(cctx, []refit.TensorBuffers{bufs})
					if err != nil || bufs.Dst == nil {
						return err
					}
					got := make([]byte, bufs.Dst.Len())
					if err := mem.Download(got, bufs.Dst); err != nil {
						return err
					}
					return pattern.Check(c.Dst, rank, 0, got, placement.View{})
				})
			}(r)
		}
		wg.Wait()
		if !alias {
			if err := errors.Join(errs...); err != nil {
				t.Fatal(err)
			}
			continue
		}
		for r, err := range errs {
			if err == nil || !strings.Contains(err.Error(), "overlap in memory") {
				t.Errorf("aliasing: rank %d: %v", r, err)
			}
		}
	}
}

// newMemory returns device memory of ctx, closed when the test ends.
func newMemory(t *testing.T, ctx *cuda.Context) *cudamem.Memory {
	t.Helper()
	mem, err := cudamem.NewMemory(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mem.Close() })
	return mem
}

// uploaded allocates device memory for h and copies h into it.
func uploaded(mem *cudamem.Memory, h []byte) (transport.Buffer, error) {
	b, err := mem.Alloc(int64(len(h)))
	if err != nil {
		return nil, err
	}
	if err := mem.Upload(b, h); err != nil {
		mem.Free(b)
		return nil, err
	}
	return b, nil
}

// withMemory runs f on device memory of ctx of its own, closed after.
func withMemory(ctx *cuda.Context, f func(mem *cudamem.Memory) error) error {
	mem, err := cudamem.NewMemory(ctx)
	if err != nil {
		return err
	}
	defer mem.Close()
	return f(mem)
}

// deviceRoute is one arrangement of the suites on device memory: route over
// domains destination domains, and with padded the parts in padded buffers
// through views and messages up to coalesce bytes coalesced.
type deviceRoute struct {
	route    reshard.Route
	domains  int
	padded   bool
	coalesce int64
}

// runOnDevice runs rank on every rank of an in-process world of c's ranks
// whose messages go through wire, each rank on device memory of ctx of its
// own, with a minute to finish and an Env for c on r (4 KiB chunks, 32 KiB
// of staging); a rank that fails aborts the others. It returns the ranks'
// errors joined.
func runOnDevice(t *testing.T, ctx *cuda.Context, wire *cudamem.Memory, c transporttest.Case, r deviceRoute, rank func(cctx context.Context, w *inproc.World, env transporttest.Env) error) error {
	t.Helper()
	world := c.World()
	n := c.Dst.Mesh().Size()
	topo, err := hier.Domains(make([]int, world), c.Src, c.Dst, hier.DomainSizes{Dst: (n + r.domains - 1) / r.domains})
	if err != nil {
		t.Fatal(err)
	}
	opts := reshard.ScheduleOptions{ChunkBytes: 4 << 10, StagingBytes: 32 << 10}
	w := inproc.NewWorld(world).WithMemory(wire)
	errs := w.Run(func(tr transport.Transport) error {
		return withMemory(ctx, func(mem *cudamem.Memory) error {
			cctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			env := transporttest.Env{T: tr, Mem: mem, IO: mem, Topo: topo, Opts: opts, Padded: r.padded, Coalesce: r.coalesce}
			err := rank(cctx, w, env)
			if err != nil {
				tr.Abort(err)
			}
			return err
		})
	})
	return errors.Join(errs...)
}
