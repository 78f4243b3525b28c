// Package pipeline describes pipeline-parallel refit: with PP > 1 the trainer
// is cut into stages, and every stage reshards its own layers to the one
// generator group on a communicator of its own, made of that stage's
// trainer ranks and all generator ranks. A generator rank belongs to every
// stage's communicator, and meshes are local to each communicator. With the
// paper's Example B (two stages of two trainer ranks, one generator rank):
//
//	l := pipeline.Contiguous(2, 2, 1)
//	l.Members(0) // [0 1 4]: stage communicator 0, local ranks 0, 1, 2
//	l.Members(1) // [2 3 4]: stage communicator 1
//
// The package is pure; mpi.Comm.SplitStages builds the communicators and
// nccl.Bootstrap the NCCL ones on top of them.
package pipeline

import (
	"fmt"
	"slices"
)

// Layout says which world ranks train each stage and which generate.
type Layout struct {
	// Trainers[s] are stage s's trainer ranks, in the order of the stage's
	// source mesh.
	Trainers [][]int
	// Generators are the generator ranks, in the order of the destination
	// mesh; they take part in every stage.
	Generators []int
}

// Contiguous is the common layout: stage s trains on world ranks
// [s*perStage, (s+1)*perStage) and the generator is the generators ranks
// after all stages.
func Contiguous(stages, perStage, generators int) Layout {
	var l Layout
	for s := 0; s < stages; s++ {
		l.Trainers = append(l.Trainers, seq(s*perStage, perStage))
	}
	l.Generators = seq(stages*perStage, generators)
	return l
}

func seq(start, n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = start + i
	}
	return out
}

// Stages returns the number of stages.
func (l Layout) Stages() int { return len(l.Trainers) }

// Members returns the world ranks of stage s's communicator in local rank
// order: the stage's trainers, then the generators that do not also train
// the stage (a colocated rank trains and generates). So in every stage
// communicator the source mesh is [0, trainers), and with disjoint groups
// the destination mesh is [trainers, trainers+generators).
func (l Layout) Members(s int) []int {
	out := slices.Clone(l.Trainers[s])
	for _, g := range l.Generators {
		if !slices.Contains(out, g) {
			out = append(out, g)
		}
	}
	return out
}

// SrcRanks returns the source mesh of stage s in its communicator's ranks.
func (l Layout) SrcRanks(s int) []int { return seq(0, len(l.Trainers[s])) }

// DstRanks returns the destination mesh of stage s in its communicator's
// ranks.
func (l Layout) DstRanks(s int) []int {
	out := make([]int, len(l.Generators))
	for i, g := range l.Generators {
		out[i] = l.LocalRank(s, g)
	}
	return out
}

// LocalRank returns world rank r's rank in stage s's communicator, or -1 if
// it is not a member.
func (l Layout) LocalRank(s, r int) int { return slices.Index(l.Members(s), r) }

// Validate checks the layout against a world of the given size: at least
// one stage, every stage with trainers, every rank inside the world, no
// rank training two stages or listed twice as a generator. A rank may both
// train and generate (colocated).
func (l Layout) Validate(world int) error {
	if len(l.Trainers) == 0 {
		return fmt.Errorf("stage: no stages")
	}
	if len(l.Generators) == 0 {
		return fmt.Errorf("stage: no generator ranks")
	}
	seen := map[int]string{}
	check := func(r int, role string) error {
		if r < 0 || r >= world {
			return fmt.Errorf("stage: %s rank %d outside a world of %d", role, r, world)
		}
		if prev, ok := seen[r]; ok {
			return fmt.Errorf("stage: rank %d is both %s and %s", r, prev, role)
		}
		seen[r] = role
		return nil
	}
	for s, tr := range l.Trainers {
		if len(tr) == 0 {
			return fmt.Errorf("stage: stage %d has no trainer ranks", s)
		}
		for _, r := range tr {
			if err := check(r, fmt.Sprintf("a trainer of stage %d", s)); err != nil {
				return err
			}
		}
	}
	gens := map[int]bool{}
	for _, r := range l.Generators {
		if r < 0 || r >= world {
			return fmt.Errorf("stage: generator rank %d outside a world of %d", r, world)
		}
		if gens[r] {
			return fmt.Errorf("stage: generator rank %d listed twice", r)
		}
		gens[r] = true
	}
	return nil
}
