// Command trainer hands six tensors of different layouts from 4 trainer ranks to a
// DP2 x TP2 generator every step over MPI (mpirun -np 8 trainer), on the hierarchical
// route with the generator as 2 emulated domains, checking every element.
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
		fmt.Fprintln(os.Stderr, "trainer:", err)
	}
	mpi.Finalize() // after an abort, it ends the whole job
	if err != nil {
		os.Exit(1)
	}
}

func run() error {
	s, err := session.Join(mpi.World(), session.Options{Domains: hier.DomainSizes{Dst: 2}})
	if err != nil {
		return err
	}
	defer s.Close()                               // on an error here, the other ranks' next collective fails naming this rank
	trainer, _ := mesh.Interval([]int{4}, 0)      // ranks 0-3
	generator, _ := mesh.Interval([]int{2, 2}, 4) // ranks 4-7: DP2 x TP2
	var model []refit.Spec
	for _, t := range [][4]string{
		{"embed_tokens.weight", "1024x64", "S0", "R,S0"},             // vocab-parallel
		{"layers.0.self_attn.q_proj.weight", "256x64", "S0", "R,S0"}, // column-parallel
		{"layers.0.self_attn.o_proj.weight", "64x256", "S1", "R,S1"}, // row-parallel
		{"layers.0.input_layernorm.weight", "64", "R", "R,R"},        // replicated
		{"layers.0.mlp.experts.down_proj", "8x64x128", "S0", "R,S0"}, // experts over EP
		{"lm_head.weight", "1024x64", "S0", "R,S0"},
	} {
		src, err := placement.ParseLayout(t[1], dtype.BF16, trainer, t[2])
		if err != nil {
			return err
		}
		dst, err := placement.ParseLayout(t[1], dtype.BF16, generator, t[3])
		if err != nil {
			return err
		}
		model = append(model, refit.Spec{Name: t[0], Src: src, Dst: dst})
	}
	ctx := context.Background()
	call, err := s.Prepare(ctx, model, hier.Hier{}) // validate, plan, schedule, agree: once
	if err != nil {
		return err
	}
	bufs := make([]refit.TensorBuffers, len(model)) // this rank's shards
	for i, t := range model {
		if t.Src.Mesh().Contains(s.Rank()) { // the trainer's weights: a pattern of the global index
			w := make([]byte, t.Src.LocalBytes(s.Rank()))
			if err := pattern.Fill(t.Src, s.Rank(), uint64(i), w, placement.View{}); err != nil {
				return err
			}
			bufs[i].Src = transport.HostBuffer(w)
		}
		if t.Dst.Mesh().Contains(s.Rank()) {
			bufs[i].Dst = transport.HostBuffer(make([]byte, t.Dst.LocalBytes(s.Rank())))
		}
	}
	for step := 0; step < 3; step++ {
		if _, err := call.Run(ctx, bufs); err != nil { // move this step's weights
			return err
		}
		for i, t := range model {
			if bufs[i].Dst == nil {
				continue
			}
			if err := pattern.Check(t.Dst, s.Rank(), uint64(i), bufs[i].Dst.(transport.HostBuffer), placement.View{}); err != nil {
				return err
			}
		}
	}
	if s.Rank() == 0 {
		fmt.Printf("3 steps of %d tensors checked on every generator rank\n", len(model))
	}
	return nil
}
