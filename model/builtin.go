package model

import (
	"fmt"
	"slices"
	"strings"

	"github.com/m2n-dev/m2n/dtype"
)

type builtin struct {
	name    string // what --model takes
	display string
	config  Config
}

// builtins are the models m2n knows by name, as data: the same values their
// published config.json files give (a test checks that they do).
var builtins = []builtin{
	{"deepseek-v3", "DeepSeek-V3", Config{
		ModelType: "deepseek_v3", DType: dtype.BF16,
		VocabSize: 129280, HiddenSize: 7168, IntermediateSize: 18432, Layers: 61,
		Heads: 128, KVHeads: 128,
		Experts: 256, MoEIntermediateSize: 2048, SharedExperts: 1, FirstDenseLayers: 3, MoELayerFreq: 1,
		ExpertsPerToken: 8, Groups: 8, TopKGroup: 4,
		QLoraRank: 1536, KVLoraRank: 512, QKNopeHeadDim: 128, QKRopeHeadDim: 64, VHeadDim: 128,
		MTPLayers: 1,
	}},
	{"qwen3-235b-a22b", "Qwen3-235B-A22B", Config{
		ModelType: "qwen3_moe", DType: dtype.BF16,
		VocabSize: 151936, HiddenSize: 4096, IntermediateSize: 12288, Layers: 94,
		Heads: 64, KVHeads: 4, HeadDim: 128, QKNorm: true,
		Experts: 128, MoEIntermediateSize: 1536, DecoderSparseStep: 1, MLPOnlyLayers: []int{},
		ExpertsPerToken: 8,
	}},
	{"llama-3.1-70b", "Llama-3.1-70B", Config{
		ModelType: "llama", DType: dtype.BF16,
		VocabSize: 128256, HiddenSize: 8192, IntermediateSize: 28672, Layers: 80,
		Heads: 64, KVHeads: 8, HeadDim: 128,
	}},
	{"kimi-k2", "Kimi-K2", Config{
		ModelType: "kimi_k2", DType: dtype.BF16,
		VocabSize: 163840, HiddenSize: 7168, IntermediateSize: 18432, Layers: 61,
		Heads: 64, KVHeads: 64,
		Experts: 384, MoEIntermediateSize: 2048, SharedExperts: 1, FirstDenseLayers: 1, MoELayerFreq: 1,
		ExpertsPerToken: 8, Groups: 1, TopKGroup: 1,
		QLoraRank: 1536, KVLoraRank: 512, QKNopeHeadDim: 128, QKRopeHeadDim: 64, VHeadDim: 128,
	}},
	{"glm-4.5-air", "GLM-4.5-Air", Config{
		ModelType: "glm4_moe", DType: dtype.BF16,
		VocabSize: 151552, HiddenSize: 4096, IntermediateSize: 10944, Layers: 46,
		Heads: 96, KVHeads: 8, HeadDim: 128, AttentionBias: true,
		Experts: 128, MoEIntermediateSize: 1408, SharedExperts: 1, FirstDenseLayers: 1,
		ExpertsPerToken: 8, Groups: 1, TopKGroup: 1, MTPLayers: 1,
	}},
	{"gpt-oss-120b", "gpt-oss-120b", Config{
		ModelType: "gpt_oss", DType: dtype.BF16,
		VocabSize: 201088, HiddenSize: 2880, IntermediateSize: 2880, Layers: 36,
		Heads: 64, KVHeads: 8, HeadDim: 64, AttentionBias: true,
		Experts: 128, MoEIntermediateSize: 2880, ExpertsPerToken: 4,
	}},
	{"qwen2.5-72b", "Qwen2.5-72B", Config{
		ModelType: "qwen2", DType: dtype.BF16,
		VocabSize: 152064, HiddenSize: 8192, IntermediateSize: 29568, Layers: 80,
		Heads: 64, KVHeads: 8, HeadDim: 128,
	}},
}

// Builtins returns the names of the built-in models, as Load takes them.
func Builtins() []string {
	out := make([]string, len(builtins))
	for i, b := range builtins {
		out[i] = b.name
	}
	return out
}

// lookupBuiltin returns the configuration of a built-in model and its
// display name. Names match without regard to case ("DeepSeek-V3" or
// "deepseek-v3").
func lookupBuiltin(name string) (Config, string, error) {
	i := slices.IndexFunc(builtins, func(b builtin) bool { return strings.EqualFold(b.name, name) })
	if i < 0 {
		return Config{}, "", fmt.Errorf("no built-in model %q (built in: %s)", name, strings.Join(Builtins(), ", "))
	}
	c := builtins[i].config
	c.MLPOnlyLayers = slices.Clone(c.MLPOnlyLayers)
	return c, builtins[i].display, nil
}
