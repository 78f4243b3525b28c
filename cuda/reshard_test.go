package cuda_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/m2n-dev/m2n/cuda"
	"github.com/m2n-dev/m2n/hier"
	"github.com/m2n-dev/m2n/internal/gputest"
	"github.com/m2n-dev/m2n/reshard"
	"github.com/m2n-dev/m2n/reshard/inproc"
	"github.com/m2n-dev/m2n/reshard/transporttest"
)

// TestGPUConformance runs the transport conformance suite on device memory
// of the one GPU: every pair, in every arrangement, on flat, agbcast and hier
// (one and two destination domains), with the ranks as goroutines of this
// process. Every rank packs, unpacks and copies with the GPU kernels on a
// stream of its own; messages are device-to-device copies. It skips where
// there is no GPU.
func TestGPUConformance(t *testing.T) {
	ctx := gputest.Context(t)
	pairs, err := transporttest.ReadPairs("../testdata/reshard_pairs.txt")
	if err != nil {
		t.Fatal(err)
	}
	cases, err := transporttest.Cases(pairs)
	if err != nil {
		t.Fatal(err)
	}
	wire, err := cuda.NewMemory(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer wire.Close()
	type route struct {
		name    string
		domains int
		build   transporttest.Builder
	}
	hierBuild := func(plans []*reshard.Plan, topo reshard.Topology, o reshard.ScheduleOptions) (*reshard.Schedule, error) {
		return hier.Route(plans, topo, hier.Options{ScheduleOptions: o})
	}
	routes := []route{{"flat", 1, reshard.Flat}, {"agbcast", 1, reshard.AllGatherBroadcast}, {"hier", 1, hierBuild}, {"hier", 2, hierBuild}}
	runs := 0
	for _, c := range cases {
		for _, r := range routes {
			world := c.World()
			n := c.Dst.Mesh().Size()
			topo, err := hier.Domains(make([]int, world), c.Src, c.Dst, hier.DomainSizes{Dst: (n + r.domains - 1) / r.domains})
			if err != nil {
				t.Fatal(err)
			}
			opts := reshard.ScheduleOptions{ChunkBytes: 4 << 10, StagingBytes: 32 << 10}
			errs := inproc.NewWorld(world).WithMemory(wire).Run(func(tr reshard.Transport) error {
				mem, err := cuda.NewMemory(ctx)
				if err != nil {
					return err
				}
				defer mem.Close()
				cctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
				defer cancel()
				env := transporttest.Env{T: tr, Mem: mem, IO: mem, Topo: topo, Opts: opts}
				_, err = transporttest.RunCase(cctx, env, c, r.build)
				if err != nil {
					tr.Abort(err)
				}
				return err
			})
			if err := errors.Join(errs...); err != nil {
				t.Errorf("%v, %s over %d domains: %v", c, r.name, r.domains, err)
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
	mem, err := cuda.NewMemory(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close()
	a, _ := mem.Alloc(64)
	b, _ := mem.Alloc(64)
	defer mem.Free(a)
	defer mem.Free(b)
	err = mem.Pack(a, 0, b, reshard.Strided{Offset: 8, Run: 16, Count: []int64{4}, Stride: []int64{16}})
	if err == nil {
		t.Fatal("a pack reaching byte 72 of a 64-byte buffer passed")
	}
	t.Log(err)
}
