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
	"github.com/m2n-dev/m2n/internal/pattern"
	"github.com/m2n-dev/m2n/mesh"
	"github.com/m2n-dev/m2n/mpi"
	"github.com/m2n-dev/m2n/placement"
	"github.com/m2n-dev/m2n/reshard"
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
	call, err := s.Prepare(ctx, []reshard.Spec{{Name: "w", Src: src, Dst: dst}}, hier.Hier{})
	check(err)
	mem := s.Memory() // device memory of this rank's GPU
	host := make([]byte, src.LocalBytes(s.Rank()))
	check(pattern.Fill(src, s.Rank(), 0, host, placement.View{}))
	sb, err := mem.Alloc(int64(len(host)))
	check(err)
	check(mem.Upload(sb, host))
	db, err := mem.Alloc(dst.LocalBytes(s.Rank()))
	check(err)
	for step := 0; step < 3; step++ {
		_, err := call.Run(ctx, []reshard.TensorBuffers{{Src: sb, Dst: db}})
		check(err)
	}
	got := make([]byte, db.Len())
	check(mem.Download(got, db))
	check(pattern.Check(dst, s.Rank(), 0, got, placement.View{}))
	mem.Free(sb)
	mem.Free(db)
	if s.Rank() == 0 {
		fmt.Printf("3 steps on %d GPU(s), S0 -> S1, checked\n", n)
	}
}

func check(err error) {
	if err != nil {
		fmt.Fprintf(os.Stderr, "gpu: rank %d: %v\n", mpi.World().Rank(), err)
		mpi.Finalize()
		os.Exit(1)
	}
}
