package model

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Trainer is a Megatron-Core parallel configuration. Its ranks are ordered
// as Megatron orders them: TP fastest, then CP, then DP, PP slowest; the
// experts fold the TP x CP x DP ranks of a stage as expert-TP (fastest) x
// EP x expert-DP. Sizes below 1 read as 1, except ETP and VocabDivisor,
// whose zero is Megatron's default.
type Trainer struct {
	TP, PP, CP, DP int
	// EP and ETP are the expert-model-parallel and expert-tensor-parallel
	// sizes. ETP 0 is Megatron-Core's default, TP
	// (megatron/core/model_parallel_config.py, ModelParallelConfig.__post_init__:
	// expert_tensor_parallel_size None becomes tensor_model_parallel_size).
	EP, ETP int
	// FirstStageLayers and LastStageLayers are Megatron's
	// num_layers_in_first_pipeline_stage and
	// num_layers_in_last_pipeline_stage; 0 leaves the count to the split
	// (New splits the layers as Megatron-Core does: DeepSeek-V3's 61 over
	// 4 stages are 15, 16, 16, 14).
	FirstStageLayers, LastStageLayers int
	// VocabDivisor is Megatron-LM's --make-vocab-size-divisible-by: the
	// trainer pads the vocabulary to a multiple of VocabDivisor x TP
	// (megatron/training/vocab_utils.py, calculate_padded_vocab_size); 0
	// is its default, 128.
	VocabDivisor int
}

// defaultVocabDivisor is Megatron-LM's default --make-vocab-size-divisible-by
// (megatron/training/arguments.py).
const defaultVocabDivisor = 128

// Generator is a vLLM parallel configuration: Engines independent vLLM
// engines, each DP ranks of a TP group (rank = (engine*DP + dp)*TP + tp).
// Within an engine DP is vLLM's data parallelism, under which the routed
// experts are split over all TP x DP ranks (by intermediate rows, or by
// expert with EP); EP, when above 1, is vLLM's expert parallelism
// (enable_expert_parallel) and spans the TP x DP ranks of an engine.
type Generator struct {
	TP, DP, EP int
	// Engines are independent vLLM engines that each hold the whole model
	// (0 or 1: one); they replicate everything, experts included.
	Engines int
	// All2All is vLLM's all2all_backend ("" is its default,
	// allgather_reducescatter); it decides whether the MoE runs
	// sequence-parallel (as vLLM's ParallelConfig.use_sequence_parallel_moe).
	All2All string
}

// defaultAll2All is vLLM's default all2all_backend (vllm/config/parallel.py,
// ParallelConfig.all2all_backend).
const defaultAll2All = "allgather_reducescatter"

// all2allBackends are vLLM's All2AllBackend values; seqParallelBackends
// those of them for which ParallelConfig.use_sequence_parallel_moe holds
// (vllm/config/parallel.py).
var (
	all2allBackends = []string{"naive", "pplx", "deepep_high_throughput", "deepep_low_latency", "deepep_v2", "mori_high_throughput",
		"mori_low_latency", "nixl_ep", "allgather_reducescatter", "flashinfer_all2allv", "flashinfer_nvlink_two_sided", "flashinfer_nvlink_one_sided"}
	seqParallelBackends = []string{"allgather_reducescatter", "deepep_high_throughput", "deepep_low_latency", "mori_high_throughput",
		"mori_low_latency", "nixl_ep"}
)

func one(n int) int { return max(n, 1) }

// normal returns t with every size at least 1 and Megatron's defaults
// filled (ETP = TP, VocabDivisor 128).
func (t Trainer) normal() Trainer {
	t.TP, t.PP, t.CP, t.DP, t.EP = one(t.TP), one(t.PP), one(t.CP), one(t.DP), one(t.EP)
	if t.ETP <= 0 {
		t.ETP = t.TP
	}
	if t.VocabDivisor <= 0 {
		t.VocabDivisor = defaultVocabDivisor
	}
	return t
}

func (g Generator) normal() Generator {
	g.TP, g.DP, g.EP, g.Engines = one(g.TP), one(g.DP), one(g.EP), one(g.Engines)
	if g.All2All == "" {
		g.All2All = defaultAll2All
	}
	return g
}

// stageRanks returns the ranks of one pipeline stage: TP x CP x DP.
func (t Trainer) stageRanks() int { t = t.normal(); return t.TP * t.CP * t.DP }

// Ranks returns all trainer ranks: TP x CP x DP x PP.
func (t Trainer) Ranks() int { return t.stageRanks() * one(t.PP) }

// ExpertDP returns the expert-data-parallel size, TP x CP x DP / (ETP x
// EP), or 0 when that does not divide.
func (t Trainer) ExpertDP() int {
	t = t.normal()
	if t.stageRanks()%(t.ETP*t.EP) != 0 {
		return 0
	}
	return t.stageRanks() / (t.ETP * t.EP)
}

// validate checks the sizes: all at most 1<<16, and ETP x EP dividing a
// stage's TP x CP x DP ranks (Megatron-Core's expert rank groups).
func (t Trainer) validate() error {
	n := t.normal()
	for _, f := range []struct {
		key string
		v   int
	}{{"tp", t.TP}, {"pp", t.PP}, {"cp", t.CP}, {"dp", t.DP}, {"ep", t.EP}, {"etp", t.ETP}, {"vocab-div", t.VocabDivisor}} {
		if f.v < 0 || f.v > 1<<16 {
			return fmt.Errorf("trainer %s=%d: want a size between 1 and 65536", f.key, f.v)
		}
	}
	if t.FirstStageLayers < 0 || t.LastStageLayers < 0 {
		return fmt.Errorf("trainer first=%d last=%d: stage layer counts are negative", t.FirstStageLayers, t.LastStageLayers)
	}
	if n.TP*n.CP*n.DP > 1<<20 || n.Ranks() > 1<<20 {
		return fmt.Errorf("trainer %v: more than %d ranks", t, 1<<20)
	}
	if n.ExpertDP() == 0 {
		def := ""
		if t.ETP <= 0 {
			def = fmt.Sprintf(" (etp not given: Megatron-Core's default is etp = tp = %d; give etp=1 for experts without expert-TP)", n.TP)
		}
		return fmt.Errorf("trainer %v: etp=%d x ep=%d does not divide a stage's tp x cp x dp = %d ranks%s", t, n.ETP, n.EP, n.stageRanks(), def)
	}
	return nil
}

// Ranks returns the generator's ranks: Engines x DP x TP.
func (g Generator) Ranks() int { g = g.normal(); return g.Engines * g.TP * g.DP }

// engineRanks returns the ranks of one engine: DP x TP.
func (g Generator) engineRanks() int { g = g.normal(); return g.TP * g.DP }

// seqParallelMoE reports whether vLLM runs the MoE layers
// sequence-parallel: ParallelConfig.use_sequence_parallel_moe
// (vllm/config/parallel.py) holds for expert parallelism with TP > 1 and
// DP > 1 under the default all2all backend (and the others its list
// names). DeepSeek's shared experts are then whole on every rank.
func (g Generator) seqParallelMoE() bool {
	n := g.normal()
	return n.EP > 1 && n.TP > 1 && n.DP > 1 && slices.Contains(seqParallelBackends, n.All2All)
}

// validate checks the sizes, that EP, when on, spans the TP x DP ranks of
// an engine as vLLM's expert parallelism does, and that the all2all
// backend is one of vLLM's.
func (g Generator) validate() error {
	for _, f := range []struct {
		key string
		v   int
	}{{"tp", g.TP}, {"dp", g.DP}, {"ep", g.EP}, {"engines", g.Engines}} {
		if f.v < 0 || f.v > 1<<16 {
			return fmt.Errorf("generator %s=%d: want a size between 1 and 65536", f.key, f.v)
		}
	}
	n := g.normal()
	if n.Ranks() > 1<<20 {
		return fmt.Errorf("generator %v: more than %d ranks", g, 1<<20)
	}
	if n.EP > 1 && n.EP != n.engineRanks() {
		return fmt.Errorf("generator ep=%d: vLLM's expert parallelism spans an engine's tp x dp = %d ranks "+
			"(vllm/model_executor/layers/fused_moe/config.py, FusedMoEParallelConfig.make: ep_size = tp x dp); give ep=%d, or leave ep out for experts split over tp x dp",
			n.EP, n.engineRanks(), n.engineRanks())
	}
	if !slices.Contains(all2allBackends, n.All2All) {
		return fmt.Errorf("generator all2all=%s: not one of vLLM's all2all backends (%s)", n.All2All, strings.Join(all2allBackends, ", "))
	}
	return nil
}

func (t Trainer) String() string {
	n := t.normal()
	s := fmt.Sprintf("tp=%d,pp=%d,cp=%d,dp=%d,ep=%d,etp=%d", n.TP, n.PP, n.CP, n.DP, n.EP, n.ETP)
	if t.FirstStageLayers > 0 {
		s += fmt.Sprintf(",first=%d", t.FirstStageLayers)
	}
	if t.LastStageLayers > 0 {
		s += fmt.Sprintf(",last=%d", t.LastStageLayers)
	}
	if n.VocabDivisor != defaultVocabDivisor {
		s += fmt.Sprintf(",vocab-div=%d", n.VocabDivisor)
	}
	return s
}

func (g Generator) String() string {
	n := g.normal()
	s := fmt.Sprintf("tp=%d,dp=%d,ep=%d", n.TP, n.DP, n.EP)
	if n.Engines > 1 {
		s += fmt.Sprintf(",engines=%d", n.Engines)
	}
	if n.All2All != defaultAll2All {
		s += ",all2all=" + n.All2All
	}
	return s
}

// TrainerKeys documents ParseTrainer's keys, for help texts.
const TrainerKeys = "tp, pp, cp, dp, ep, etp (default: tp, as Megatron-Core), first, last, vocab-div (Megatron's make-vocab-size-divisible-by, default 128)"

// GeneratorKeys documents ParseGenerator's keys, for help texts.
const GeneratorKeys = "tp, dp (vLLM's data parallelism: experts split over tp x dp), ep (vLLM's expert parallelism: tp x dp), " +
	"engines (independent vLLM engines, each whole), all2all (vLLM's all2all backend, default allgather_reducescatter)"

// ParseTrainer parses "tp=2,pp=4,cp=2,dp=4,ep=16[,etp=1][,first=N,last=N][,vocab-div=128]";
// sizes not given are 1, etp not given is tp (Megatron-Core's default),
// vocab-div not given is 128 (Megatron-LM's). Unknown keys, repeated keys
// and values that are not positive integers are errors naming them.
func ParseTrainer(s string) (Trainer, error) {
	var t Trainer
	fields := map[string]*int{"tp": &t.TP, "pp": &t.PP, "cp": &t.CP, "dp": &t.DP, "ep": &t.EP, "etp": &t.ETP,
		"first": &t.FirstStageLayers, "last": &t.LastStageLayers, "vocab-div": &t.VocabDivisor}
	if err := parseSizes(s, fields, nil, TrainerKeys); err != nil {
		return Trainer{}, err
	}
	t.TP, t.PP, t.CP, t.DP, t.EP = one(t.TP), one(t.PP), one(t.CP), one(t.DP), one(t.EP)
	return t, t.validate()
}

// ParseGenerator parses "tp=8,dp=16[,ep=128][,engines=2][,all2all=NAME]";
// sizes not given are 1.
func ParseGenerator(s string) (Generator, error) {
	var g Generator
	if err := parseSizes(s, map[string]*int{"tp": &g.TP, "dp": &g.DP, "ep": &g.EP, "engines": &g.Engines},
		map[string]*string{"all2all": &g.All2All}, GeneratorKeys); err != nil {
		return Generator{}, err
	}
	g.TP, g.DP, g.EP, g.Engines = one(g.TP), one(g.DP), one(g.EP), one(g.Engines)
	return g, g.validate()
}

func parseSizes(s string, fields map[string]*int, words map[string]*string, known string) error {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil
	}
	seen := map[string]bool{}
	for _, item := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(item), "=")
		k = strings.ToLower(strings.TrimSpace(k))
		v = strings.TrimSpace(v)
		if !ok {
			return fmt.Errorf("%q is not key=value (keys: %s)", item, known)
		}
		if seen[k] {
			return fmt.Errorf("key %q given twice", k)
		}
		seen[k] = true
		if w, found := words[k]; found {
			if v == "" {
				return fmt.Errorf("%s=: want a value", k)
			}
			*w = v
			continue
		}
		p, found := fields[k]
		if !found {
			return fmt.Errorf("unknown key %q (keys: %s)", k, known)
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 1<<16 {
			return fmt.Errorf("%s=%s: want a positive integer up to 65536", k, v)
		}
		*p = n
	}
	return nil
}
