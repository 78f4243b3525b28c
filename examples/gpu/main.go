// Command gpu is the trainer example on GPUs: every rank takes the GPU of
// its local rank, tensors live in device memory and move over NCCL. With
// one process it is colocated (the rank holds both layouts, and every byte
// is a device copy). Where no GPU can be used it says why and exits with
// status 3, which the tests read as a skip. Run it with: mpirun -np 2 gpu
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/m2n-dev/m2n/cuda"
	"github.com/m2n-dev/m2n/hier"
	"github.com/m2n-dev/m2n/mesh"
	"github.com/m2n-dev/m2n/mpi"
	"github.com/m2n-dev/m2n/pattern"
	"github.com/m2n-dev/m2n/placement"
	"github.com/m2n-dev/m2n/refit"
	"github.com/m2n-dev/m2n/session"
)

func main() {
	_, err := mpi.Init(mpi.ThreadMultiple)
	check(err)
	defer mpi.Finalize()
	if err := cuda.Load(); err != nil {
		fmt.Printf("skip: no GPU to use here: %v\n", err)
		mpi.Finalize()
		os.Exit(3)
	}
	s, err := session.Join(mpi.World(), session.Options{Device: session.GPU})
	check(err)
	defer s.Close()
	n := s.Size()
	ranks, _ := mesh.Interval([]int{n}, 0) // both layouts on every rank: colocated
	src, err := placement.ParseLayout("2048x4096", placement.BF16, ranks, "S0")
	check(err)
	dst, err := placement.ParseLayout("2048x4096", placement.BF16, ranks, "S1")
	check(err)
	ctx := context.Background()
	call, err := s.Prepare(ctx, []refit.Spec{{Name: "w", Src: src, Dst: dst}}, hier.Hier{})
	check(err)
	mem := s.Memory() // device memory of this rank's GPU
	host := make([]byte, src.LocalBytes(s.Rank()))
	check(pattern.Fill(src, s.Rank(), 0, host, placement.View{}))
	sb, err := mem.Alloc(int64(len(host)))
	check(err)
	check(mem.Upload(sb, host))
	db, err := mem.Alloc(dst.LocalBytes(s.Rank()))
	check(err)
	bufs := []refit.TensorBuffers{{Src: sb, Dst: db}}
	for step := 0; step < 3; step++ {
		_, err := call.Run(ctx, bufs)
		check(err)
	}
	got := make([]byte, db.Len())
	check(mem.Download(got, db))
	check(pattern.Check(dst, s.Rank(), 0, got, placement.View{}))
	// Stream-ordered steps: the trainer's stream marks where its optimizer
	// step wrote the weights, the refit queues after that mark with no host
	// wait, and the generator's stream waits on the refit's end.
	gpu := mem.(*cuda.Memory)
	trainer, err := gpu.Ctx.NewStream()
	check(err)
	generator, err := gpu.Ctx.NewStream()
	check(err)
	wrote, err := gpu.Ctx.NewEvent(false)
	check(err)
	check(gpu.Ctx.Memset(db.(cuda.Buffer).Ptr, 0, int(db.Len())))
	for step := 0; step < 2; step++ {
		check(wrote.Record(trainer)) // after the optimizer step
		done, err := call.Launch(ctx, bufs, wrote)
		check(err)
		check(generator.WaitEvent(done.(*cuda.Event))) // the next forward reads the weights after this
		_, err = call.Wait(ctx)
		check(err)
	}
	check(generator.Synchronize())
	check(mem.Download(got, db))
	check(pattern.Check(dst, s.Rank(), 0, got, placement.View{}))
	check(wrote.Destroy())
	check(trainer.Destroy())
	check(generator.Destroy())
	mem.Free(sb)
	mem.Free(db)
	if s.Rank() == 0 {
		fmt.Printf("3 steps on %d GPU(s), S0 -> S1, and 2 launched after a trainer's event, checked (%s driver)\n", n, call.Driver().Name())
	}
}

func check(err error) {
	if err != nil {
		fmt.Fprintf(os.Stderr, "gpu: rank %d: %v\n", mpi.World().Rank(), err)
		mpi.Finalize()
		os.Exit(1)
	}
}
