package model

import (
	"strings"
	"testing"
)

func TestScale(t *testing.T) {
	for _, tc := range []struct {
		name  string
		n     int64
		check func(c Config) bool
	}{
		{"deepseek-v3", 16, func(c Config) bool {
			return c.HiddenSize == 448 && c.IntermediateSize == 1152 && c.MoEIntermediateSize == 128 && c.Experts == 16 &&
				c.Heads == 128 && c.QLoraRank == 96 && c.KVLoraRank == 32 && c.QKNopeHeadDim == 8 && c.QKRopeHeadDim == 4 &&
				c.VHeadDim == 8 && c.Layers == 61 && c.VocabSize == 129280 && c.Groups == 8 && c.ExpertsPerToken == 8
		}},
		{"deepseek-v3", 64, func(c Config) bool {
			return c.Experts == 4 && c.Groups == 4 && c.TopKGroup == 4 && c.ExpertsPerToken == 4 && c.QKRopeHeadDim == 1
		}},
		{"deepseek-v3", 128, func(c Config) bool { // rope dim 64 does not divide: heads do
			return c.Experts == 2 && c.Heads == 1 && c.KVHeads == 1 && c.QKRopeHeadDim == 64
		}},
		{"qwen3-235b-a22b", 16, func(c Config) bool {
			return c.HiddenSize == 256 && c.MoEIntermediateSize == 96 && c.Experts == 8 && c.Heads == 64 && c.KVHeads == 4 && c.HeadDim == 8
		}},
		{"llama-3.1-70b", 32, func(c Config) bool {
			return c.HiddenSize == 256 && c.IntermediateSize == 896 && c.HeadDim == 4 && c.Heads == 64 && c.KVHeads == 8
		}},
		{"llama-3.1-70b", 1, func(c Config) bool { return c.HiddenSize == 8192 }},
	} {
		c, _, _ := lookupBuiltin(tc.name)
		s, err := c.scale(tc.n)
		if err != nil {
			t.Errorf("%s / %d: %v", tc.name, tc.n, err)
			continue
		}
		if !tc.check(s) {
			t.Errorf("%s / %d: %+v", tc.name, tc.n, s)
		}
		if _, err := FromConfig(tc.name, s, LoadOptions{MTP: s.MTPLayers > 0}); err != nil {
			t.Errorf("%s / %d: %v", tc.name, tc.n, err)
		}
	}
	for _, tc := range []struct {
		name string
		n    int64
		want string
	}{
		{"deepseek-v3", 3, "scale 3 does not divide hidden_size 7168 (7168 % 3 = 1)"},
		{"deepseek-v3", 512, "scale 512 does not divide n_routed_experts 256 (256 % 512 = 256)"},
		{"qwen3-235b-a22b", 256, "scale 256 does not divide num_experts 128"},
		{"llama-3.1-70b", 0, "scale 0: want at least 1"},
	} {
		c, _, _ := lookupBuiltin(tc.name)
		if _, err := c.scale(tc.n); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s / %d: %v, want %q", tc.name, tc.n, err, tc.want)
		}
	}
	mx := readConfig(t, "mixtral-8x7b.config.json")
	if _, err := mx.scale(16); err == nil || !strings.Contains(err.Error(), "scale 16 does not divide num_local_experts 8") {
		t.Errorf("mixtral / 16: %v", err)
	}
}

func TestWithLayers(t *testing.T) {
	c, _, _ := lookupBuiltin("deepseek-v3")
	s, err := c.withLayers(4)
	if err != nil {
		t.Fatal(err)
	}
	m, err := FromConfig("ds4", s, LoadOptions{MTP: true})
	if err != nil {
		t.Fatal(err)
	}
	// 3 dense layers, 1 MoE layer, the MTP layer as layer 4.
	if m.Layers != 4 || m.MTPLayers != 1 {
		t.Fatalf("layers %d mtp %d", m.Layers, m.MTPLayers)
	}
	for _, name := range []string{"model.layers.2.mlp.gate_proj.weight", "model.layers.3.mlp.experts.gate_up_proj", "model.layers.4.eh_proj.weight"} {
		if _, ok := m.tensor(name); !ok {
			t.Errorf("no %s", name)
		}
	}
	q, _, _ := lookupBuiltin("qwen3-235b-a22b")
	q.MLPOnlyLayers = []int{1, 50}
	if s, err := q.withLayers(2); err != nil || len(s.MLPOnlyLayers) != 1 {
		t.Errorf("qwen cut: %v %v", s.MLPOnlyLayers, err)
	}
	if _, err := c.withLayers(62); err == nil || !strings.Contains(err.Error(), "layers 62: want between 1 and the model's num_hidden_layers 61") {
		t.Errorf("too many layers: %v", err)
	}
	if _, err := Load("testdata/models/../models/deepseek-v3.config.json", LoadOptions{Scale: 16, Layers: 5}); err != nil {
		t.Errorf("load scaled config: %v", err)
	}
}
