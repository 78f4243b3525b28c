package sim

import (
	"fmt"

	"github.com/m2n-dev/m2n/model"
	"github.com/m2n-dev/m2n/reshard"
)

// SideDomains is the world topology of a trainer -> generator arrangement
// with the trainers on world ranks [0, trainers) and the generators after
// them: trainers in domains of srcSize consecutive ranks, generators in
// domains of dstSize, never sharing a domain with a trainer. It fails on a
// size below 1.
func SideDomains(trainers, generators, srcSize, dstSize int) (reshard.Topology, error) {
	if trainers < 0 || generators < 0 || srcSize < 1 || dstSize < 1 {
		return reshard.Topology{}, fmt.Errorf("sim: %d trainers in domains of %d, %d generators in domains of %d: want sizes of at least 1",
			trainers, srcSize, generators, dstSize)
	}
	d := make([]int, trainers+generators)
	for r := 0; r < trainers; r++ {
		d[r] = r / srcSize
	}
	off := (trainers + srcSize - 1) / srcSize
	for i := 0; i < generators; i++ {
		d[trainers+i] = off + i/dstSize
	}
	return reshard.Topology{Domain: d}, nil
}

// ModelStages plans every tensor of a laid-out model (package model), one
// Stage per pipeline stage on that stage's communicator, with world the
// topology of the world ranks (SideDomains of l.Trainer.Ranks() and
// l.Generator.Ranks(), say). Packing is judged on the dense layouts: the
// fused views the model package puts some tensors in are not applied.
func ModelStages(l *model.Layouts, world reshard.Topology, opts reshard.Options) ([]Stage, error) {
	n := l.Trainer.Ranks() + l.Generator.Ranks()
	if world.Domain != nil && len(world.Domain) != n {
		return nil, fmt.Errorf("sim: a topology of %d ranks for a model on %d", len(world.Domain), n)
	}
	var out []Stage
	for _, s := range l.Stages {
		st := Stage{Name: fmt.Sprintf("stage %d", s.Index), Members: s.Members, Topo: stageTopology(world, s.Members)}
		for _, t := range s.Tensors {
			p, err := reshard.NewPlan(t.Src, t.Dst, len(s.Members), opts)
			if err != nil {
				return nil, fmt.Errorf("stage %d, %s: %w", s.Index, t.Name, err)
			}
			st.Plans = append(st.Plans, p)
			st.Names = append(st.Names, t.Name)
		}
		out = append(out, st)
	}
	return out, nil
}
