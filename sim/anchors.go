package sim

import (
	"fmt"

	"github.com/m2n-dev/m2n/units"
)

// Anchor is a published weight-sync time for a whole-model configuration:
// who measured it, on what, and the time (a range where the publication
// gives one). The simulator's report prints the anchors of its
// configuration beside the simulated times; they are other systems'
// measurements on real clusters, not bounds.
type Anchor struct {
	Source  string  `json:"source"`
	Note    string  `json:"note"`
	Seconds float64 `json:"seconds"`
	Upper   float64 `json:"upper_seconds,omitempty"` // the range's top, 0 for one figure
}

func (a Anchor) String() string {
	t := units.FormatSeconds(a.Seconds)
	if a.Upper > a.Seconds {
		t += "-" + units.FormatSeconds(a.Upper)
	}
	return fmt.Sprintf("%s %s (%s)", a.Source, t, a.Note)
}

// anchorKey names a configuration by the model's name, the trainer's and
// the generator's GPU counts, and whether the generator serves FP8.
type anchorKey struct {
	model      string
	train, gen int
	fp8        bool
}

// anchors are the published figures design.md sections 4, 7 and 8 cite.
var anchors = map[anchorKey][]Anchor{
	{"DeepSeek-V3", 128, 128, false}: {
		{Source: "nccl_m2n", Note: "released NCCL M2N, hierarchical, EP16 PP4 -> TP8 DP16 on GB200", Seconds: 1.447},
		{Source: "nccl_m2n", Note: "released NCCL M2N, direct", Seconds: 3.838}},
	{"DeepSeek-V3", 128, 128, true}: {
		{Source: "nccl_m2n", Note: "released NCCL M2N, hierarchical, BF16 generator (no FP8 in flight)", Seconds: 1.447}},
	{"Qwen3-235B-A22B", 64, 64, false}: {
		{Source: "nccl_m2n", Note: "released NCCL M2N, hierarchical, TP2 CP2 EP16 PP4 -> TP8 DP8 on GB200", Seconds: 0.989},
		{Source: "nccl_m2n", Note: "released NCCL M2N, direct", Seconds: 2.175}},
	{"DeepSeek-V3", 256, 256, false}: {
		{Source: "NeMo-RL", Note: "PP16 EP16 -> TP32 DP8, GB200", Seconds: 1.93, Upper: 2.59},
		{Source: "NeMo-RL", Note: "PP16 EP16 -> TP32 DP8, H100", Seconds: 2.39, Upper: 2.83}},
	{"Kimi-K2", 256, 128, true}: {
		{Source: "Perplexity", Note: "static schedule, BF16 -> FP8 in flight, 256 training to 128 inference GPUs", Seconds: 1.3}},
}

// AnchorsFor returns the published anchors of a model configuration (nil
// where none is known): the model's name as package model spells it, the
// trainer's and generator's GPU counts, and whether the generator is FP8.
func AnchorsFor(model string, train, gen int, fp8 bool) []Anchor {
	return anchors[anchorKey{model, train, gen, fp8}]
}
