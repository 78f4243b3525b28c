package model

import (
	"fmt"

	"github.com/m2n-dev/m2n/internal/checked"
	"github.com/m2n-dev/m2n/placement"
)

// Options choose what FromConfig includes beyond transformers' model.
type Options struct {
	// MTP adds DeepSeek's multi-token-prediction layers (num_nextn_predict_layers
	// of them, as the checkpoint names them: model.layers.<L>.*), which
	// transformers' model does not hold. Off by default; an error for a
	// configuration without them.
	MTP bool
}

// FromConfig builds the model a configuration describes: every parameter
// (and persistent buffer, such as DeepSeek's router score-correction bias)
// named, shaped and ordered as transformers 5's ForCausalLM class for the
// model_type holds it, with the routed experts grouped into 3-D
// mlp.experts.gate_up_proj [E, 2I, H] and mlp.experts.down_proj [E, H, I].
func FromConfig(name string, c Config, opts Options) (*Model, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	if opts.MTP && c.MTPLayers == 0 {
		return nil, fmt.Errorf("model %s: MTP layers asked for, but the config has no num_nextn_predict_layers", name)
	}
	b := &builder{c: c, m: &Model{Name: name, Config: &c, Layers: c.Layers, Heads: c.Heads, KVHeads: c.KVHeads}}
	if !c.IsMLA() {
		b.gqa = true
	}
	if opts.MTP {
		b.m.MTPLayers = c.MTPLayers
	}
	H, V := c.HiddenSize, c.VocabSize
	b.add("model.embed_tokens.weight", Embedding, -1, V, H)
	for l := 0; l < c.Layers; l++ {
		b.layer(l)
	}
	b.add("model.norm.weight", Replicated, -1, H)
	if !c.TieEmbeddings {
		b.add("lm_head.weight", LMHead, -1, V, H)
	}
	for k := 0; k < b.m.MTPLayers; k++ {
		b.mtp(c.Layers + k)
	}
	if b.err != nil {
		return nil, b.err
	}
	if err := b.m.validate(); err != nil {
		return nil, err
	}
	return b.m, nil
}

type builder struct {
	c   Config
	m   *Model
	gqa bool
	err error
}

// add appends a tensor of the config's dtype; its LayoutShape is set from
// its kind.
func (b *builder) add(name string, k Kind, layer int, shape ...int64) {
	b.addTyped(name, k, layer, b.c.DType, shape...)
}

func (b *builder) addTyped(name string, k Kind, layer int, dt placement.DType, shape ...int64) {
	if b.err != nil {
		return
	}
	for _, s := range shape {
		if s < 0 {
			b.err = fmt.Errorf("tensor %s: negative dim in %v", name, shape)
			return
		}
	}
	if _, ok := checked.Product(shape...); !ok {
		b.err = fmt.Errorf("tensor %s: shape %v overflows int64", name, shape)
		return
	}
	t := Tensor{Name: name, Shape: shape, DType: dt, Kind: k, Layer: layer}
	ls, err := layoutShape(t, b.m.Heads, b.m.KVHeads)
	if err != nil {
		b.err = err
		return
	}
	t.LayoutShape = ls
	b.m.Tensors = append(b.m.Tensors, t)
}

func (b *builder) mul(name string, a, c int64) int64 {
	p, ok := checked.Mul(a, c)
	if !ok && b.err == nil {
		b.err = fmt.Errorf("model %s: %s = %d x %d overflows int64", b.m.Name, name, a, c)
	}
	return p
}

// layer appends decoder layer l: self_attn, mlp, input_layernorm,
// post_attention_layernorm, in the order the DecoderLayer defines them.
func (b *builder) layer(l int) {
	p := fmt.Sprintf("model.layers.%d.", l)
	if b.c.IsMLA() {
		b.mla(p, l)
	} else {
		b.attention(p, l)
	}
	if b.c.MoELayer(l) {
		b.moe(p+"mlp.", l)
	} else {
		b.mlp(p+"mlp.", l, b.c.IntermediateSize, b.c.MLPBias)
	}
	H := b.c.HiddenSize
	b.add(p+"input_layernorm.weight", Replicated, l, H)
	b.add(p+"post_attention_layernorm.weight", Replicated, l, H)
}

// attention appends GQA attention: q, k, v, o (biased when attention_bias)
// and, for Qwen3, the per-head q_norm and k_norm.
func (b *builder) attention(p string, l int) {
	c := b.c
	H := c.HiddenSize
	q := b.mul("num_attention_heads x head_dim", c.Heads, c.HeadDim)
	kv := b.mul("num_key_value_heads x head_dim", c.KVHeads, c.HeadDim)
	a := p + "self_attn."
	for _, x := range []struct {
		name string
		k    Kind
		rows int64
	}{{"q_proj", Query, q}, {"k_proj", Key, kv}, {"v_proj", Value, kv}} {
		b.add(a+x.name+".weight", x.k, l, x.rows, H)
		if c.AttentionBias {
			b.add(a+x.name+".bias", x.k, l, x.rows)
		}
	}
	b.add(a+"o_proj.weight", Row, l, H, q)
	if c.AttentionBias {
		b.add(a+"o_proj.bias", Replicated, l, H)
	}
	if c.ModelType == "qwen3" || c.ModelType == "qwen3_moe" {
		b.add(a+"q_norm.weight", Replicated, l, c.HeadDim)
		b.add(a+"k_norm.weight", Replicated, l, c.HeadDim)
	}
}

// mla appends DeepSeek's multi-head latent attention.
func (b *builder) mla(p string, l int) {
	c := b.c
	H := c.HiddenSize
	a := p + "self_attn."
	qk := c.QKNopeHeadDim + c.QKRopeHeadDim
	if c.QLoraRank == 0 {
		b.add(a+"q_proj.weight", Column, l, b.mul("num_attention_heads x qk_head_dim", c.Heads, qk), H)
	} else {
		b.add(a+"q_a_proj.weight", LatentQ, l, c.QLoraRank, H)
		if c.AttentionBias {
			b.add(a+"q_a_proj.bias", LatentQ, l, c.QLoraRank)
		}
		b.add(a+"q_a_layernorm.weight", Replicated, l, c.QLoraRank)
		b.add(a+"q_b_proj.weight", Column, l, b.mul("num_attention_heads x qk_head_dim", c.Heads, qk), c.QLoraRank)
	}
	b.add(a+"kv_a_proj_with_mqa.weight", LatentKV, l, c.KVLoraRank+c.QKRopeHeadDim, H)
	if c.AttentionBias {
		b.add(a+"kv_a_proj_with_mqa.bias", LatentKV, l, c.KVLoraRank+c.QKRopeHeadDim)
	}
	b.add(a+"kv_a_layernorm.weight", Replicated, l, c.KVLoraRank)
	b.add(a+"kv_b_proj.weight", Column, l, b.mul("num_attention_heads x (qk_nope_head_dim + v_head_dim)", c.Heads, c.QKNopeHeadDim+c.VHeadDim), c.KVLoraRank)
	v := b.mul("num_attention_heads x v_head_dim", c.Heads, c.VHeadDim)
	b.add(a+"o_proj.weight", Row, l, H, v)
	if c.AttentionBias {
		b.add(a+"o_proj.bias", Replicated, l, H)
	}
}

// mlp appends a gated MLP of intermediate size I under prefix p.
func (b *builder) mlp(p string, l int, I int64, bias bool) {
	H := b.c.HiddenSize
	b.add(p+"gate_proj.weight", Gate, l, I, H)
	if bias {
		b.add(p+"gate_proj.bias", Gate, l, I)
	}
	b.add(p+"up_proj.weight", Up, l, I, H)
	if bias {
		b.add(p+"up_proj.bias", Up, l, I)
	}
	b.add(p+"down_proj.weight", Row, l, H, I)
	if bias {
		b.add(p+"down_proj.bias", Replicated, l, H)
	}
}

// moe appends a sparse MoE block: the grouped routed experts, the router
// (with DeepSeek's score-correction bias, an f32 buffer) and DeepSeek's
// shared experts.
func (b *builder) moe(p string, l int) {
	c := b.c
	H, E, I := c.HiddenSize, c.Experts, c.MoEIntermediateSize
	b.add(p+"experts.gate_up_proj", ExpertsGateUp, l, E, b.mul("2 x moe_intermediate_size", 2, I), H)
	b.add(p+"experts.down_proj", ExpertsDown, l, E, H, I)
	b.add(p+"gate.weight", Replicated, l, E, H)
	if c.ModelType == "deepseek_v3" {
		b.addTyped(p+"gate.e_score_correction_bias", Replicated, l, placement.F32, E)
		if c.SharedExperts > 0 {
			b.mlp(p+"shared_experts.", l, b.mul("moe_intermediate_size x n_shared_experts", I, c.SharedExperts), false)
		}
	}
}

// mtp appends DeepSeek's multi-token-prediction layer l as the checkpoint
// names it: its own embedding, the two input norms, eh_proj, a full MoE
// decoder layer, and the shared head's norm and projection.
func (b *builder) mtp(l int) {
	c := b.c
	H, V := c.HiddenSize, c.VocabSize
	p := fmt.Sprintf("model.layers.%d.", l)
	b.add(p+"embed_tokens.weight", Embedding, l, V, H)
	b.add(p+"enorm.weight", Replicated, l, H)
	b.add(p+"hnorm.weight", Replicated, l, H)
	b.add(p+"eh_proj.weight", MTPProj, l, H, b.mul("2 x hidden_size", 2, H))
	b.mla(p, l)
	b.moe(p+"mlp.", l)
	b.add(p+"input_layernorm.weight", Replicated, l, H)
	b.add(p+"post_attention_layernorm.weight", Replicated, l, H)
	b.add(p+"shared_head.norm.weight", Replicated, l, H)
	b.add(p+"shared_head.head.weight", LMHead, l, V, H)
}

// layoutShape returns the reshape of t.Shape that both layouts shard:
// Query rows grouped by key-value head ([kv, heads/kv*head_dim, ...]), Key
// and Value rows by head ([kv, head_dim, ...]), and the experts' fused
// gate_up_proj split into its gate and up halves ([E, 2, I, H]).
func layoutShape(t Tensor, heads, kvHeads int64) ([]int64, error) {
	s := t.Shape
	switch t.Kind {
	case Query, Key, Value:
		if heads <= 0 || kvHeads <= 0 || heads%kvHeads != 0 || len(s) < 1 || len(s) > 2 {
			return nil, fmt.Errorf("tensor %s: a %s projection of shape %s needs head counts that group (%d heads, %d key-value heads)",
				t.Name, t.Kind, placement.FormatShape(s), heads, kvHeads)
		}
		n := heads
		if t.Kind != Query {
			n = kvHeads
		}
		if s[0]%n != 0 {
			return nil, fmt.Errorf("tensor %s: dim 0 (%d rows) does not split into %d heads", t.Name, s[0], n)
		}
		rows := s[0] / kvHeads // rows per key-value group
		return append([]int64{kvHeads, rows}, s[1:]...), nil
	case ExpertsGateUp:
		if len(s) != 3 || s[1]%2 != 0 {
			return nil, fmt.Errorf("tensor %s: experts' gate_up_proj of shape %s, want [E, 2I, H]", t.Name, placement.FormatShape(s))
		}
		return []int64{s[0], 2, s[1] / 2, s[2]}, nil
	}
	return append([]int64(nil), s...), nil
}
