package refit_test

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/m2n-dev/m2n/control"
	"github.com/m2n-dev/m2n/dtype"
	"github.com/m2n-dev/m2n/mesh"
	"github.com/m2n-dev/m2n/pattern"
	"github.com/m2n-dev/m2n/placement"
	"github.com/m2n-dev/m2n/refit"
	"github.com/m2n-dev/m2n/reshard"
	"github.com/m2n-dev/m2n/transport"
	"github.com/m2n-dev/m2n/transport/inproc"
)

// A call prepared once and run every step, as every rank of an SPMD
// program makes it: here the ranks are goroutines over the in-process
// transport (package session does the wiring over MPI or NCCL). Four
// trainer ranks hold a 16x8 bf16 weight in rows; a DP2 x TP2 generator
// wants it in columns. Prepare validates, plans, schedules and agrees once;
// each Run moves one step's bytes, verifies and commits atomically.
func ExampleRuntime_Prepare() {
	const world = 8
	shape := []int64{16, 8}
	trainer, _ := mesh.Interval([]int{4}, 0)
	generator, _ := mesh.Interval([]int{2, 2}, 4)
	src, _ := placement.NewLayout(shape, dtype.BF16, trainer, []placement.Placement{placement.Shard(0)})
	dst, _ := placement.NewLayout(shape, dtype.BF16, generator, []placement.Placement{placement.Replicate(), placement.Shard(1)})
	specs := []refit.Spec{{Name: "layers.0.mlp.w", Src: src, Dst: dst}}
	opts := refit.Options{Schedule: reshard.DefaultScheduleOptions, Verify: true, Atomic: true, Timeout: time.Minute}

	w := inproc.NewWorld(world)
	reports := make([]*refit.Report, world)
	var wg sync.WaitGroup
	for r := 0; r < world; r++ {
		wg.Add(1)
		go func(rank int) {
			defer wg.Done()
			ctx := context.Background()
			call, err := refit.New(control.Plain(w.Collective(rank))).Prepare(ctx, specs, reshard.Flat, refit.Target{Transport: w.Transport(rank), Memory: transport.HostMemory{}}, opts)
			if err != nil {
				panic(err)
			}
			var bufs refit.TensorBuffers
			if src.Mesh().Contains(rank) {
				b := make([]byte, src.LocalBytes(rank))
				_ = pattern.Fill(src, rank, 0, b, placement.View{}) // the trainer's shard
				bufs.Src = transport.HostBuffer(b)
			}
			if dst.Mesh().Contains(rank) {
				bufs.Dst = transport.HostBuffer(make([]byte, dst.LocalBytes(rank)))
			}
			defer call.Close()
			for step := 0; step < 3; step++ {
				rep, err := call.Run(ctx, []refit.TensorBuffers{bufs})
				if err != nil {
					panic(err)
				}
				reports[rank] = rep
			}
			if bufs.Dst != nil {
				if err := pattern.Check(dst, rank, 0, bufs.Dst.(transport.HostBuffer), placement.View{}); err != nil {
					panic(err)
				}
			}
		}(r)
	}
	wg.Wait()
	fmt.Println("completed:", reports[5].Completed, "on rank 5, which received", reports[5].Stats.Recv[reshard.LinkNetwork], "bytes")
	// Output:
	// completed: [layers.0.mlp.w] on rank 5, which received 128 bytes
}
