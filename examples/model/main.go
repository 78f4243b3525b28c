// Command model syncs a whole model every step, as RL weight sync does:
// every tensor of a config.json (scaled down to fit 8 CPU ranks) from a
// Megatron-style trainer (tp=2, pp=2, ep=2 without expert-TP: ranks 0-3) to
// a vLLM-style generator (tp=2, dp=2: ranks 4-7), fused weights in place,
// every element checked. Run it with: mpirun -np 8 model config.json
package main

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/m2n-dev/m2n/hier"
	"github.com/m2n-dev/m2n/model"
	"github.com/m2n-dev/m2n/mpi"
	"github.com/m2n-dev/m2n/pattern"
	"github.com/m2n-dev/m2n/session"
)

func main() {
	_, err := mpi.Init(mpi.ThreadMultiple)
	if err == nil {
		err = run(os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "model:", err)
	}
	mpi.Finalize() // after an abort, it ends the whole job
	if err != nil {
		os.Exit(1)
	}
}

func run(config string) error {
	s, err := session.Join(mpi.World(), session.Options{})
	if err != nil {
		return err
	}
	defer s.Close() // on an error here, the other ranks' next collective fails naming this rank
	m, err := model.Load(config, model.LoadOptions{Scale: 32, Layers: 2})
	if err != nil {
		return err
	}
	trainer, err1 := model.ParseTrainer("tp=2,pp=2,ep=2,etp=1") // Megatron-Core's names
	generator, err2 := model.ParseGenerator("tp=2,dp=2")        // vLLM's
	if err := errors.Join(err1, err2); err != nil {
		return err
	}
	layouts, err := model.New(m, trainer, generator) // every tensor's layout on both sides, per stage
	if err != nil {
		return err
	}
	ctx := context.Background()
	sync, err := s.PrepareModel(ctx, layouts, hier.Hier{}) // once: one call per stage
	if err != nil {
		return err
	}
	defer sync.Close()
	bufs, err := sync.Alloc() // this rank's (fused) buffers
	if err != nil {
		return err
	}
	defer sync.Free(bufs)
	if err := sync.FillParts(bufs, model.Src, pattern.Fill); err != nil { // the trainer's weights
		return err
	}
	for step := 0; step < 3; step++ {
		if _, err := sync.Run(ctx, bufs); err != nil { // every stage at once
			return err
		}
		if err := sync.ReadParts(bufs, model.Dst, pattern.Check); err != nil {
			return err
		}
	}
	if s.Rank() == 0 {
		fmt.Println("3 steps of the whole model checked on every generator rank")
	}
	return nil
}
