// Command stages is the paper's Example B as a program: a pipeline-parallel
// trainer of two stages (world ranks 0-1 and 2-3) hands each stage's layer
// to one generator rank (world rank 4), each stage on a communicator of its
// own, both stages at once, every step. Run it with: mpirun -np 5 stages
package main

import (
	"context"
	"fmt"
	"os"

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
	check(err)
	defer mpi.Finalize()
	s, err := session.Join(mpi.World(), session.Options{})
	check(err)
	defer s.Close()
	stages, err := s.Pipeline(pipeline.Contiguous(2, 2, 1)) // communicators {0,1,4} and {2,3,4}
	check(err)
	defer stages.Close()
	// Meshes are local to each stage's communicator: trainers 0-1, generator 2.
	trainer, _ := mesh.Interval([]int{2}, 0)
	generator, _ := mesh.Interval([]int{1}, 2)
	layer := func(int) []refit.Spec {
		src, err := placement.ParseLayout("512x256", placement.BF16, trainer, "S0")
		check(err)
		dst, err := placement.ParseLayout("512x256", placement.BF16, generator, "R")
		check(err)
		return []refit.Spec{{Name: "mlp.down_proj.weight", Src: src, Dst: dst}}
	}
	ctx := context.Background()
	call, err := stages.Prepare(ctx, layer, hier.Hier{})
	check(err)
	defer call.Close()
	bufs := make([][]refit.TensorBuffers, 2)
	for st, ss := range stages.Sessions {
		if ss == nil {
			continue // not in this stage
		}
		t := layer(st)[0]
		b := refit.TensorBuffers{}
		if t.Src.Mesh().Contains(ss.Rank()) { // stage st's weights: pattern seed st
			w := make([]byte, t.Src.LocalBytes(ss.Rank()))
			check(pattern.Fill(t.Src, ss.Rank(), uint64(st), w, placement.View{}))
			b.Src = transport.HostBuffer(w)
		}
		if t.Dst.Mesh().Contains(ss.Rank()) {
			b.Dst = transport.HostBuffer(make([]byte, t.Dst.LocalBytes(ss.Rank())))
		}
		bufs[st] = []refit.TensorBuffers{b}
	}
	for step := 0; step < 3; step++ {
		_, err := call.Run(ctx, func(st int) []refit.TensorBuffers { return bufs[st] }) // both stages at once
		check(err)
		for st, ss := range stages.Sessions {
			if ss != nil && bufs[st][0].Dst != nil {
				check(pattern.Check(layer(st)[0].Dst, ss.Rank(), uint64(st), bufs[st][0].Dst.(transport.HostBuffer), placement.View{}))
			}
		}
	}
	if s.Rank() == 4 {
		fmt.Println("3 steps: the generator holds both stages' layers, checked")
	}
}

func check(err error) {
	if err != nil {
		fmt.Fprintf(os.Stderr, "stages: rank %d: %v\n", mpi.World().Rank(), err)
		mpi.Finalize()
		os.Exit(1)
	}
}
