// Command trainer hands six tensors of different layouts from 4 trainer ranks to a
// DP2 x TP2 generator every step over MPI (mpirun -np 8 trainer), on the hierarchical
// route with the generator as 2 emulated domains, checking every element.
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/m2n-dev/m2n/hier"
	"github.com/m2n-dev/m2n/mesh"
	"github.com/m2n-dev/m2n/mpi"
	"github.com/m2n-dev/m2n/pattern"
	"github.com/m2n-dev/m2n/placement"
	"github.com/m2n-dev/m2n/refit"
	"github.com/m2n-dev/m2n/session"
	"github.com/m2n-dev/m2n/transport"
)

func main() {
	_, err := mpi.Init(mpi.ThreadMultiple)
	check(err)
	defer mpi.Finalize()
	s, err := session.Join(mpi.World(), session.Options{Domains: hier.DomainSizes{Dst: 2}})
	check(err)
	defer s.Close()
	trainer, _ := mesh.Interval([]int{4}, 0)      // ranks 0-3
	generator, _ := mesh.Interval([]int{2, 2}, 4) // ranks 4-7: DP2 x TP2
	ctx := context.Background()
	tensor := func(name, shape, trainerPl, generatorPl string) refit.Spec {
		src, err := placement.ParseLayout(shape, placement.BF16, trainer, trainerPl)
		check(err)
		dst, err := placement.ParseLayout(shape, placement.BF16, generator, generatorPl)
		check(err)
		return refit.Spec{Name: name, Src: src, Dst: dst}
	}
	model := []refit.Spec{
		tensor("embed_tokens.weight", "1024x64", "S0", "R,S0"),             // vocab-parallel
		tensor("layers.0.self_attn.q_proj.weight", "256x64", "S0", "R,S0"), // column-parallel
		tensor("layers.0.self_attn.o_proj.weight", "64x256", "S1", "R,S1"), // row-parallel
		tensor("layers.0.input_layernorm.weight", "64", "R", "R,R"),        // replicated
		tensor("layers.0.mlp.experts.down_proj", "8x64x128", "S0", "R,S0"), // experts over EP
		tensor("lm_head.weight", "1024x64", "S0", "R,S0"),
	}
	call, err := s.Prepare(ctx, model, hier.Hier{}) // validate, plan, schedule, agree: once
	check(err)
	bufs := make([]refit.TensorBuffers, len(model)) // this rank's shards
	for i, t := range model {
		if t.Src.Mesh().Contains(s.Rank()) { // the trainer's weights: a pattern of the global index
			w := make([]byte, t.Src.LocalBytes(s.Rank()))
			check(pattern.Fill(t.Src, s.Rank(), uint64(i), w, placement.View{}))
			bufs[i].Src = transport.HostBuffer(w)
		}
		if t.Dst.Mesh().Contains(s.Rank()) {
			bufs[i].Dst = transport.HostBuffer(make([]byte, t.Dst.LocalBytes(s.Rank())))
		}
	}
	for step := 0; step < 3; step++ {
		_, err := call.Run(ctx, bufs) // move this step's weights
		check(err)
		for i, t := range model {
			if bufs[i].Dst != nil {
				check(pattern.Check(t.Dst, s.Rank(), uint64(i), bufs[i].Dst.(transport.HostBuffer), placement.View{}))
			}
		}
	}
	if s.Rank() == 0 {
		fmt.Printf("3 steps of %d tensors checked on every generator rank\n", len(model))
	}
}

// check ends this rank on an error: a failure the ranks agreed on reads
// the same everywhere; after an abort, mpi.Finalize ends the whole job.
func check(err error) {
	if err != nil {
		fmt.Fprintf(os.Stderr, "trainer: rank %d: %v\n", mpi.World().Rank(), err)
		mpi.Finalize()
		os.Exit(1)
	}
}
