// Command stages is the paper's Example B as a program: a pipeline-parallel
// trainer of two stages (world ranks 0-1 and 2-3) hands each stage's layer
// to one generator rank (world rank 4), each stage on a communicator of its
// own, both stages at once, every step. Run it with: mpirun -np 5 stages
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/m2n-dev/m2n/dtype"
	"github.com/m2n-dev/m2n/hier"
	"github.com/m2n-dev/m2n/mesh"
	"github.com/m2n-dev/m2n/mpi"
	"github.com/m2n-dev/m2n/pattern"
	"github.com/m2n-dev/m2n/pipeline"
	"github.com/m2n-dev/m2n/placement"
	"github.com/m2n-dev/m2n/refit"
	"github.com/m2n-dev/m2n/session"
	"github.com/m2n-dev/m2n/transport"
)

func main() {
	_, err := mpi.Init(mpi.ThreadMultiple)
	if err == nil {
		err = run()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "stages:", err)
	}
	mpi.Finalize() // after an abort, it ends the whole job
	if err != nil {
		os.Exit(1)
	}
}

func run() error {
	s, err := session.Join(mpi.World(), session.Options{})
	if err != nil {
		return err
	}
	defer s.Close()                                     // on an error here, the other ranks' next collective fails naming this rank
	pp, err := s.Pipeline(pipeline.Contiguous(2, 2, 1)) // communicators {0,1,4} and {2,3,4}
	if err != nil {
		return err
	}
	defer pp.Close()
	// Meshes are local to each stage's communicator: trainers 0-1, generator 2.
	trainer, _ := mesh.Interval([]int{2}, 0)
	generator, _ := mesh.Interval([]int{1}, 2)
	src, err := placement.ParseLayout("512x256", dtype.BF16, trainer, "S0")
	if err != nil {
		return err
	}
	dst, err := placement.ParseLayout("512x256", dtype.BF16, generator, "R")
	if err != nil {
		return err
	}
	layer := []refit.Spec{{Name: "mlp.down_proj.weight", Src: src, Dst: dst}} // each stage's own
	ctx := context.Background()
	call, err := pp.Prepare(ctx, func(int) []refit.Spec { return layer }, hier.Hier{})
	if err != nil {
		return err
	}
	defer call.Close()
	bufs := make([][]refit.TensorBuffers, 2)
	for st, ss := range pp.Sessions {
		if ss == nil {
			continue // not in this stage
		}
		b := refit.TensorBuffers{}
		if src.Mesh().Contains(ss.Rank()) { // stage st's weights: pattern seed st
			w := make([]byte, src.LocalBytes(ss.Rank()))
			if err := pattern.Fill(src, ss.Rank(), uint64(st), w, placement.View{}); err != nil {
				return err
			}
			b.Src = transport.HostBuffer(w)
		}
		if dst.Mesh().Contains(ss.Rank()) {
			b.Dst = transport.HostBuffer(make([]byte, dst.LocalBytes(ss.Rank())))
		}
		bufs[st] = []refit.TensorBuffers{b}
	}
	for step := 0; step < 3; step++ {
		if _, err := call.Run(ctx, func(st int) []refit.TensorBuffers { return bufs[st] }); err != nil { // both stages at once
			return err
		}
		for st, ss := range pp.Sessions {
			if ss == nil || bufs[st][0].Dst == nil {
				continue
			}
			if err := pattern.Check(dst, ss.Rank(), uint64(st), bufs[st][0].Dst.(transport.HostBuffer), placement.View{}); err != nil {
				return err
			}
		}
	}
	if s.Rank() == 4 {
		fmt.Println("3 steps: the generator holds both stages' layers, checked")
	}
	return nil
}
