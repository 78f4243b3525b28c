package sim

import (
	"fmt"

	"github.com/m2n-dev/m2n/hier"
	"github.com/m2n-dev/m2n/mesh"
	"github.com/m2n-dev/m2n/placement"
	"github.com/m2n-dev/m2n/reshard"
	"github.com/m2n-dev/m2n/stage"
)

// This file is a stand-in for the model package (branch models) in the
// scale benchmark: DeepSeek-V3's parameters, named and shaped as
// transformers 5 names them (routed experts as 3-D gate_up_proj [E, 2I, H]
// and down_proj [E, H, I]), with Megatron-like trainer layouts (TP 1, EP
// over the stage's ranks, expert-DP beside it, dense weights replicated)
// and vLLM-like generator layouts (DP x TP: column-parallel Shard(0),
// row-parallel Shard(1), experts on their intermediate dim, norms, the
// router and MLA's a-projections replicated, vocab-parallel embedding and
// head). Fused weights are plain shards here (the byte volumes are the same;
// the model package models the views).

type tensorKind uint8

const (
	kindRep     tensorKind = iota // replicated on the generator
	kindCol                       // column-parallel: Shard(0) over TP
	kindRow                       // row-parallel: Shard(1) over TP
	kindExpUp                     // [E, 2I, H]: EP on the trainer, Shard(1) over TP
	kindExpDown                   // [E, H, I]: EP on the trainer, Shard(2) over TP
)

type fixtureTensor struct {
	name  string
	shape []int64
	kind  tensorKind
}

// deepseekV3Layers returns the tensors of each of DeepSeek-V3's 61 layers,
// with the embedding in layer 0's list and the final norm and head in the
// last one's.
func deepseekV3Layers() [][]fixtureTensor {
	const (
		hidden  = 7168
		vocab   = 129280
		inter   = 18432
		moeI    = 2048
		experts = 256
		heads   = 128
		qLora   = 1536
		kvLora  = 512
		nope    = 128
		rope    = 64
		vHead   = 128
		layers  = 61
		dense   = 3
	)
	var out [][]fixtureTensor
	for l := 0; l < layers; l++ {
		p := fmt.Sprintf("model.layers.%d.", l)
		var ts []fixtureTensor
		if l == 0 {
			ts = append(ts, fixtureTensor{"model.embed_tokens.weight", []int64{vocab, hidden}, kindCol})
		}
		ts = append(ts,
			fixtureTensor{p + "input_layernorm.weight", []int64{hidden}, kindRep},
			fixtureTensor{p + "self_attn.q_a_proj.weight", []int64{qLora, hidden}, kindRep},
			fixtureTensor{p + "self_attn.q_a_layernorm.weight", []int64{qLora}, kindRep},
			fixtureTensor{p + "self_attn.q_b_proj.weight", []int64{heads * (nope + rope), qLora}, kindCol},
			fixtureTensor{p + "self_attn.kv_a_proj_with_mqa.weight", []int64{kvLora + rope, hidden}, kindRep},
			fixtureTensor{p + "self_attn.kv_a_layernorm.weight", []int64{kvLora}, kindRep},
			fixtureTensor{p + "self_attn.kv_b_proj.weight", []int64{heads * (nope + vHead), kvLora}, kindCol},
			fixtureTensor{p + "self_attn.o_proj.weight", []int64{hidden, heads * vHead}, kindRow},
			fixtureTensor{p + "post_attention_layernorm.weight", []int64{hidden}, kindRep},
		)
		if l < dense {
			ts = append(ts,
				fixtureTensor{p + "mlp.gate_proj.weight", []int64{inter, hidden}, kindCol},
				fixtureTensor{p + "mlp.up_proj.weight", []int64{inter, hidden}, kindCol},
				fixtureTensor{p + "mlp.down_proj.weight", []int64{hidden, inter}, kindRow})
		} else {
			ts = append(ts,
				fixtureTensor{p + "mlp.gate.weight", []int64{experts, hidden}, kindRep},
				fixtureTensor{p + "mlp.gate.e_score_correction_bias", []int64{experts}, kindRep},
				fixtureTensor{p + "mlp.experts.gate_up_proj", []int64{experts, 2 * moeI, hidden}, kindExpUp},
				fixtureTensor{p + "mlp.experts.down_proj", []int64{experts, hidden, moeI}, kindExpDown},
				fixtureTensor{p + "mlp.shared_experts.gate_proj.weight", []int64{moeI, hidden}, kindCol},
				fixtureTensor{p + "mlp.shared_experts.up_proj.weight", []int64{moeI, hidden}, kindCol},
				fixtureTensor{p + "mlp.shared_experts.down_proj.weight", []int64{hidden, moeI}, kindRow})
		}
		if l == layers-1 {
			ts = append(ts,
				fixtureTensor{"model.norm.weight", []int64{hidden}, kindRep},
				fixtureTensor{"lm_head.weight", []int64{vocab, hidden}, kindCol})
		}
		out = append(out, ts)
	}
	return out
}

// fixtureConfig is a trainer -> generator arrangement of the fixture.
type fixtureConfig struct {
	pp, ep, edp  int // trainer: stages, expert parallel, expert data parallel (stage ranks = ep*edp)
	tp, dp       int // generator
	domain       int // GPUs per domain used (trainers and generators apart)
	stripe       bool
	chunk, stage int64 // schedule options
}

func (c fixtureConfig) trainers() int { return c.pp * c.ep * c.edp }

// world layout: trainers [0, T), stage s on [s*T/pp, (s+1)*T/pp); generators after.
func (c fixtureConfig) layout() stage.Layout {
	return stage.Contiguous(c.pp, c.ep*c.edp, c.tp*c.dp)
}

// topology: trainers and generators in domains of c.domain, apart.
func (c fixtureConfig) topology() reshard.Topology {
	t := c.trainers()
	g := c.tp * c.dp
	d := make([]int, t+g)
	for r := 0; r < t; r++ {
		d[r] = r / c.domain
	}
	off := (t + c.domain - 1) / c.domain
	for r := 0; r < g; r++ {
		d[t+r] = off + r/c.domain
	}
	return reshard.Topology{Domain: d}
}

// stagePlans plans stage s's tensors on its communicator.
func (c fixtureConfig) stagePlans(s int, layers [][]fixtureTensor) ([]*reshard.Plan, []string, error) {
	per := c.ep * c.edp
	lo := s * len(layers) / c.pp
	hi := (s + 1) * len(layers) / c.pp
	world := per + c.tp*c.dp
	flat, _ := mesh.Interval([]int{per}, 0)
	exp, _ := mesh.Interval([]int{c.edp, c.ep}, 0)
	gen, _ := mesh.Interval([]int{c.dp, c.tp}, per)
	R, S := placement.Replicate(), placement.Shard
	var plans []*reshard.Plan
	var names []string
	for _, layer := range layers[lo:hi] {
		for _, t := range layer {
			var src, dst placement.Layout
			var err error
			switch t.kind {
			case kindExpUp, kindExpDown:
				src, err = placement.NewLayout(t.shape, placement.BF16, exp, []placement.Placement{R, S(0)})
			default:
				src, err = placement.NewLayout(t.shape, placement.BF16, flat, []placement.Placement{R})
			}
			if err != nil {
				return nil, nil, err
			}
			gp := map[tensorKind][]placement.Placement{kindRep: {R, R}, kindCol: {R, S(0)}, kindRow: {R, S(1)},
				kindExpUp: {R, S(1)}, kindExpDown: {R, S(2)}}[t.kind]
			if dst, err = placement.NewLayout(t.shape, placement.BF16, gen, gp); err != nil {
				return nil, nil, err
			}
			p, err := reshard.NewPlan(src, dst, world, reshard.Options{StripeReplicas: c.stripe})
			if err != nil {
				return nil, nil, err
			}
			plans = append(plans, p)
			names = append(names, t.name)
		}
	}
	return plans, names, nil
}

// buildFixture plans and schedules every stage of the fixture for a route
// and adds them to one program, the stages concurrent.
func buildFixture(c fixtureConfig, route string) (*Program, reshard.Topology, error) {
	layers := deepseekV3Layers()
	l := c.layout()
	topo := c.topology()
	world := c.trainers() + c.tp*c.dp
	prog := NewProgram(world)
	opts := reshard.ScheduleOptions{ChunkBytes: c.chunk, StagingBytes: c.stage}
	for s := 0; s < c.pp; s++ {
		plans, names, err := c.stagePlans(s, layers)
		if err != nil {
			return nil, topo, err
		}
		st := StageTopology(topo, l.Members(s))
		var sc *reshard.Schedule
		switch route {
		case "flat":
			sc, err = reshard.Flat{}.Schedule(plans, st, opts)
		case "hier":
			sc, err = hier.Hier{}.Schedule(plans, st, opts)
		case "agbcast":
			sc, err = reshard.AllGatherBroadcast{}.Schedule(plans, st, opts)
		default:
			err = fmt.Errorf("route %q", route)
		}
		if err != nil {
			return nil, topo, err
		}
		sc.TensorNames = names
		if _, err := prog.AddSchedule(sc, AddOptions{Name: fmt.Sprintf("stage %d", s), Ranks: l.Members(s), After: -1}); err != nil {
			return nil, topo, err
		}
	}
	return prog, topo, nil
}
