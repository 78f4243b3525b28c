package model

import (
	"fmt"
	"slices"
)

// scale returns the configuration with every width divided by n, so that a
// real model's structure runs on a handful of CPU ranks: hidden_size,
// intermediate_size, moe_intermediate_size, the expert count, and the head
// dims (head_dim; for MLA q_lora_rank, kv_lora_rank, qk_nope_head_dim,
// qk_rope_head_dim and v_head_dim). Head counts stay, so that every head
// constraint of the real model (heads by TP, key-value heads replicated
// when TP exceeds them) holds for the scaled one too; only where a head dim
// does not divide by n are the head counts divided instead. The vocabulary
// and the layer count stay (withLayers cuts layers). Routing settings that
// would no longer be valid are clamped: num_experts_per_tok to the expert
// count, n_group to a divisor of it, topk_group to n_group.
//
// scale(1) returns c unchanged. A size that n does not divide is an error
// naming the key and both numbers.
func (c Config) scale(n int64) (Config, error) {
	if n < 1 {
		return Config{}, fmt.Errorf("scale %d: want at least 1", n)
	}
	s := c
	s.MLPOnlyLayers = slices.Clone(c.MLPOnlyLayers)
	if n == 1 {
		return s, nil
	}
	var err error
	div := func(key string, v *int64) {
		if err != nil || *v == 0 {
			return
		}
		if *v%n != 0 {
			err = fmt.Errorf("scale %d does not divide %s %d (%d %% %d = %d)", n, key, *v, *v, n, *v%n)
			return
		}
		*v /= n
	}
	div("hidden_size", &s.HiddenSize)
	div("intermediate_size", &s.IntermediateSize)
	if c.ModelType != "mixtral" && c.ModelType != "gpt_oss" {
		div("moe_intermediate_size", &s.MoEIntermediateSize)
	} else {
		s.MoEIntermediateSize = s.IntermediateSize // their experts are intermediate_size wide
	}
	div(c.expertsKey(), &s.Experts)
	if c.isMLA() {
		div("q_lora_rank", &s.QLoraRank)
		div("kv_lora_rank", &s.KVLoraRank)
	}
	if err != nil {
		return Config{}, err
	}
	if c.isMLA() {
		dims := []*int64{&s.QKNopeHeadDim, &s.QKRopeHeadDim, &s.VHeadDim}
		if s.QKNopeHeadDim%n == 0 && s.QKRopeHeadDim%n == 0 && s.VHeadDim%n == 0 {
			div("qk_nope_head_dim", dims[0])
			div("qk_rope_head_dim", dims[1])
			div("v_head_dim", dims[2])
		} else if s.Heads%n == 0 {
			s.Heads /= n
			s.KVHeads = s.Heads
		} else {
			err = fmt.Errorf("scale %d divides neither the MLA head dims (qk_nope_head_dim %d, qk_rope_head_dim %d, v_head_dim %d) nor num_attention_heads %d",
				n, c.QKNopeHeadDim, c.QKRopeHeadDim, c.VHeadDim, c.Heads)
		}
	} else {
		switch {
		case s.HeadDim%n == 0:
			s.HeadDim /= n
		case s.Heads%n == 0 && s.KVHeads%n == 0:
			s.Heads /= n
			s.KVHeads /= n
		default:
			err = fmt.Errorf("scale %d divides neither head_dim %d nor both num_attention_heads %d and num_key_value_heads %d",
				n, c.HeadDim, c.Heads, c.KVHeads)
		}
	}
	if err != nil {
		return Config{}, err
	}
	if s.isMoE() {
		s.ExpertsPerToken = min(s.ExpertsPerToken, s.Experts)
		if s.Groups > 0 {
			s.Groups = gcd(s.Groups, s.Experts)
			s.TopKGroup = min(s.TopKGroup, s.Groups)
		}
	}
	return s, s.validate()
}

// withLayers returns the configuration cut to its first k decoder layers
// (MTP layers stay): first_k_dense_replace and mlp_only_layers are cut to
// match. k must lie in [1, num_hidden_layers].
func (c Config) withLayers(k int) (Config, error) {
	if k < 1 || k > c.Layers {
		return Config{}, fmt.Errorf("layers %d: want between 1 and the model's num_hidden_layers %d", k, c.Layers)
	}
	s := c
	s.Layers = k
	s.FirstDenseLayers = min(c.FirstDenseLayers, k)
	s.MLPOnlyLayers = nil
	for _, l := range c.MLPOnlyLayers {
		if l < k {
			s.MLPOnlyLayers = append(s.MLPOnlyLayers, l)
		}
	}
	if c.MLPOnlyLayers != nil && s.MLPOnlyLayers == nil {
		s.MLPOnlyLayers = []int{}
	}
	return s, s.validate()
}

func gcd(a, b int64) int64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}
