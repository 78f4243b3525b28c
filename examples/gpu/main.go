// Command gpu is the trainer example on GPUs: every rank takes the GPU of
// its local rank, tensors live in device memory and move over NCCL. With
// one process it is colocated (the rank holds both layouts, and every byte
// is a device copy). Where no GPU can be used it says why and exits with
// status 3, which the tests read as a skip. Run it with: mpirun -np 2 gpu
package main

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/m2n-dev/m2n/cuda"
	"github.com/m2n-dev/m2n/cudamem"
	"github.com/m2n-dev/m2n/dtype"
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
	if err == nil {
		if err = cuda.Load(); err != nil {
			fmt.Printf("skip: no GPU to use here: %v\n", err)
			mpi.Finalize()
			os.Exit(3)
		}
		err = run()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "gpu:", err)
	}
	mpi.Finalize() // after an abort, it ends the whole job
	if err != nil {
		os.Exit(1)
	}
}

func run() error {
	s, err := session.Join(mpi.World(), session.Options{Device: session.GPU})
	if err != nil {
		return err
	}
	defer s.Close() // on an error here, the other ranks' next collective fails naming this rank
	n := s.Size()
	ranks, _ := mesh.Interval([]int{n}, 0) // both layouts on every rank: colocated
	src, err := placement.ParseLayout("2048x4096", dtype.BF16, ranks, "S0")
	if err != nil {
		return err
	}
	dst, err := placement.ParseLayout("2048x4096", dtype.BF16, ranks, "S1")
	if err != nil {
		return err
	}
	ctx := context.Background()
	call, err := s.Prepare(ctx, []refit.Spec{{Name: "w", Src: src, Dst: dst}}, hier.Hier{})
	if err != nil {
		return err
	}
	mem := s.Memory() // device memory of this rank's GPU
	host := make([]byte, src.LocalBytes(s.Rank()))
	if err := pattern.Fill(src, s.Rank(), 0, host, placement.View{}); err != nil {
		return err
	}
	sb, err := mem.Alloc(int64(len(host)))
	if err != nil {
		return err
	}
	defer mem.Free(sb)
	db, err := mem.Alloc(dst.LocalBytes(s.Rank()))
	if err != nil {
		return err
	}
	defer mem.Free(db)
	if err := mem.Upload(sb, host); err != nil {
		return err
	}
	bufs := []refit.TensorBuffers{{Src: sb, Dst: db}}
	for step := 0; step < 3; step++ {
		if _, err := call.Run(ctx, bufs); err != nil {
			return err
		}
	}
	got := make([]byte, db.Len())
	if err := errors.Join(mem.Download(got, db), pattern.Check(dst, s.Rank(), 0, got, placement.View{})); err != nil {
		return err
	}
	// Stream-ordered steps: the trainer's stream marks where its optimizer
	// step wrote the weights, the refit queues after that mark with no host
	// wait, and the generator's stream waits on the refit's end.
	gpu := mem.(*cudamem.Memory)
	trainer, err1 := gpu.Ctx.NewStream()
	generator, err2 := gpu.Ctx.NewStream()
	wrote, err3 := gpu.Ctx.NewEvent(false)
	if err := errors.Join(err1, err2, err3); err != nil {
		return err
	}
	defer func() { _ = errors.Join(wrote.Destroy(), trainer.Destroy(), generator.Destroy()) }()
	if err := gpu.Ctx.Memset(db.(cudamem.Buffer).Ptr, 0, int(db.Len())); err != nil {
		return err
	}
	for step := 0; step < 2; step++ {
		if err := wrote.Record(trainer); err != nil { // after the optimizer step
			return err
		}
		done, err := call.Launch(ctx, bufs, wrote)
		if err != nil {
			return err
		}
		if err := generator.WaitEvent(done.(*cuda.Event)); err != nil { // the next forward reads the weights after this
			return err
		}
		if _, err := call.Wait(ctx); err != nil {
			return err
		}
	}
	if err := errors.Join(generator.Synchronize(), mem.Download(got, db)); err != nil {
		return err
	}
	if err := pattern.Check(dst, s.Rank(), 0, got, placement.View{}); err != nil {
		return err
	}
	if s.Rank() == 0 {
		fmt.Printf("3 steps on %d GPU(s), S0 -> S1, and 2 launched after a trainer's event, checked (%s driver)\n", n, call.Driver().Name())
	}
	return nil
}
