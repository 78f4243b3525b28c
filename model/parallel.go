package model

import (
	"fmt"
	"strconv"
	"strings"
)

// Trainer is a Megatron-Core parallel configuration. Its ranks are ordered
// as Megatron orders them: TP fastest, then CP, then DP, PP slowest; the
// experts fold the TP x CP x DP ranks of a stage as expert-TP (fastest) x
// EP x expert-DP. Sizes below 1 read as 1.
type Trainer struct {
	TP, PP, CP, DP int
	EP, ETP        int // expert-model-parallel and expert-tensor-parallel sizes
	// FirstStageLayers and LastStageLayers are Megatron's
	// num_layers_in_first_pipeline_stage and
	// num_layers_in_last_pipeline_stage; 0 leaves the count to the split
	// (StageLayers).
	FirstStageLayers, LastStageLayers int
}

// Generator is a vLLM parallel configuration: DP replicas of a TP group
// (rank = dp*TP + tp). EP, when above 1, is vLLM's expert parallelism and
// spans all TP x DP ranks.
type Generator struct {
	TP, DP, EP int
}

func one(n int) int { return max(n, 1) }

// normal returns t with every size at least 1.
func (t Trainer) normal() Trainer {
	t.TP, t.PP, t.CP, t.DP, t.EP, t.ETP = one(t.TP), one(t.PP), one(t.CP), one(t.DP), one(t.EP), one(t.ETP)
	return t
}

func (g Generator) normal() Generator {
	g.TP, g.DP, g.EP = one(g.TP), one(g.DP), one(g.EP)
	return g
}

// StageRanks returns the ranks of one pipeline stage: TP x CP x DP.
func (t Trainer) StageRanks() int { t = t.normal(); return t.TP * t.CP * t.DP }

// Ranks returns all trainer ranks: StageRanks x PP.
func (t Trainer) Ranks() int { return t.StageRanks() * one(t.PP) }

// ExpertDP returns the expert-data-parallel size, TP x CP x DP / (ETP x
// EP), or 0 when that does not divide.
func (t Trainer) ExpertDP() int {
	t = t.normal()
	if t.StageRanks()%(t.ETP*t.EP) != 0 {
		return 0
	}
	return t.StageRanks() / (t.ETP * t.EP)
}

// Validate checks the sizes: all at most 1<<16, and ETP x EP dividing a
// stage's TP x CP x DP ranks.
func (t Trainer) Validate() error {
	n := t.normal()
	for _, f := range []struct {
		key string
		v   int
	}{{"tp", t.TP}, {"pp", t.PP}, {"cp", t.CP}, {"dp", t.DP}, {"ep", t.EP}, {"etp", t.ETP}} {
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
		return fmt.Errorf("trainer %v: etp=%d x ep=%d does not divide a stage's tp x cp x dp = %d ranks", t, n.ETP, n.EP, n.StageRanks())
	}
	return nil
}

// Ranks returns the generator's ranks: TP x DP.
func (g Generator) Ranks() int { g = g.normal(); return g.TP * g.DP }

// Validate checks the sizes, and that EP, when on, spans all TP x DP ranks
// as vLLM's expert parallelism does.
func (g Generator) Validate() error {
	for _, f := range []struct {
		key string
		v   int
	}{{"tp", g.TP}, {"dp", g.DP}, {"ep", g.EP}} {
		if f.v < 0 || f.v > 1<<16 {
			return fmt.Errorf("generator %s=%d: want a size between 1 and 65536", f.key, f.v)
		}
	}
	n := g.normal()
	if n.Ranks() > 1<<20 {
		return fmt.Errorf("generator %v: more than %d ranks", g, 1<<20)
	}
	if n.EP > 1 && n.EP != n.Ranks() {
		return fmt.Errorf("generator ep=%d: vLLM's expert parallelism spans all tp x dp = %d ranks (give ep=%d, or leave ep out for experts sharded over TP)",
			n.EP, n.Ranks(), n.Ranks())
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
	return s
}

func (g Generator) String() string {
	n := g.normal()
	return fmt.Sprintf("tp=%d,dp=%d,ep=%d", n.TP, n.DP, n.EP)
}

// ParseTrainer parses "tp=2,pp=4,cp=2,dp=4,ep=16[,etp=1][,first=N,last=N]";
// sizes not given are 1. Unknown keys, repeated keys and values that are
// not positive integers are errors naming them.
func ParseTrainer(s string) (Trainer, error) {
	var t Trainer
	fields := map[string]*int{"tp": &t.TP, "pp": &t.PP, "cp": &t.CP, "dp": &t.DP, "ep": &t.EP, "etp": &t.ETP,
		"first": &t.FirstStageLayers, "last": &t.LastStageLayers}
	if err := parseSizes(s, fields, "tp, pp, cp, dp, ep, etp, first, last"); err != nil {
		return Trainer{}, err
	}
	t = Trainer{TP: one(t.TP), PP: one(t.PP), CP: one(t.CP), DP: one(t.DP), EP: one(t.EP), ETP: one(t.ETP),
		FirstStageLayers: t.FirstStageLayers, LastStageLayers: t.LastStageLayers}
	return t, t.Validate()
}

// ParseGenerator parses "tp=8,dp=16[,ep=128]"; sizes not given are 1.
func ParseGenerator(s string) (Generator, error) {
	var g Generator
	if err := parseSizes(s, map[string]*int{"tp": &g.TP, "dp": &g.DP, "ep": &g.EP}, "tp, dp, ep"); err != nil {
		return Generator{}, err
	}
	g = g.normal()
	return g, g.Validate()
}

func parseSizes(s string, fields map[string]*int, known string) error {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil
	}
	seen := map[string]bool{}
	for _, item := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(item), "=")
		k = strings.ToLower(strings.TrimSpace(k))
		if !ok {
			return fmt.Errorf("%q is not key=value (keys: %s)", item, known)
		}
		p, found := fields[k]
		if !found {
			return fmt.Errorf("unknown key %q (keys: %s)", k, known)
		}
		if seen[k] {
			return fmt.Errorf("key %q given twice", k)
		}
		seen[k] = true
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil || n < 1 || n > 1<<16 {
			return fmt.Errorf("%s=%s: want a positive integer up to 65536", k, strings.TrimSpace(v))
		}
		*p = n
	}
	return nil
}
