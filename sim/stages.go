package sim

import (
	"fmt"

	"github.com/m2n-dev/m2n/pipeline"
	"github.com/m2n-dev/m2n/reshard"
)

// stageTopology is the topology of a pipeline stage's communicator:
// members[i] is the world rank of local rank i (pipeline.Layout.Members), and
// each keeps its world domain.
func stageTopology(world reshard.Topology, members []int) reshard.Topology {
	if world.Domain == nil {
		// every world rank in a domain of its own: keep them apart.
		d := make([]int, len(members))
		copy(d, members)
		return reshard.Topology{Domain: d}
	}
	d := make([]int, len(members))
	for i, r := range members {
		d[i] = world.Domain[r]
	}
	return reshard.Topology{Domain: d}
}

// AddStages adds one schedule per pipeline stage, scheds[s] built on stage
// s's communicator (local ranks in the order of l.Members(s)), and returns
// the parts' indices. With sequential, each generator rank runs the stages
// one after another (stage s+1 after its stage s); otherwise the stages run
// concurrently, each rank running one executor per stage it belongs to.
func (p *simProgram) AddStages(l pipeline.Layout, scheds []*reshard.Schedule, inPlace, sequential bool) ([]int, error) {
	if len(scheds) != l.Stages() {
		return nil, fmt.Errorf("sim: %d schedules for %d stages", len(scheds), l.Stages())
	}
	var parts []int
	for s, sc := range scheds {
		members := l.Members(s)
		if sc.World != len(members) {
			return nil, fmt.Errorf("sim: stage %d's schedule is for %d ranks, its communicator has %d", s, sc.World, len(members))
		}
		after := -1
		if sequential && s > 0 {
			after = parts[s-1]
		}
		k, err := p.AddSchedule(sc, addOptions{Name: fmt.Sprintf("stage %d", s), Ranks: members, InPlace: inPlace, After: after})
		if err != nil {
			return nil, fmt.Errorf("stage %d: %w", s, err)
		}
		parts = append(parts, k)
	}
	return parts, nil
}
