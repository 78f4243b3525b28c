package model

import (
	"fmt"
	"path"
	"strings"

	"github.com/m2n-dev/m2n/dtype"
	"github.com/m2n-dev/m2n/internal/checked"
	"github.com/m2n-dev/m2n/placement"
)

// maxTensors bounds the tensors of one model (FromConfig, parseList): a
// million, a thousand times DeepSeek-V3's. A configuration that would make
// more is refused before any tensor is built.
const maxTensors = 1 << 20

// FromConfig builds the model a configuration describes: every parameter
// (and persistent buffer, such as DeepSeek's router score-correction bias)
// named, shaped and ordered as transformers 5's ForCausalLM class for the
// model_type holds it, with the routed experts grouped into 3-D
// mlp.experts.gate_up_proj [E, 2I, H] and mlp.experts.down_proj [E, H, I]
// (gpt-oss's own [E, H, 2I] and [E, I, H], with biases).
//
// The model's size (tensor count, element and byte totals) is worked out
// from one layer of each kind before any tensor is built: a count over
// 1<<20 tensors or a total that overflows int64 is an error naming the
// numbers, in time independent of the layer count.
//
// Options' Layers and Scale cut and scale the configuration first (as
// Load does), and MTP adds DeepSeek's multi-token-prediction layers.
func FromConfig(name string, c Config, opts LoadOptions) (*Model, error) {
	var err error
	if opts.Layers > 0 {
		if c, err = c.withLayers(opts.Layers); err != nil {
			return nil, fmt.Errorf("model %s: %w", name, err)
		}
	}
	if opts.Scale > 1 {
		if c, err = c.scale(opts.Scale); err != nil {
			return nil, fmt.Errorf("model %s: %w", name, err)
		}
		name = fmt.Sprintf("%s/%d", name, opts.Scale)
	}
	if err := c.validate(); err != nil {
		return nil, err
	}
	if opts.MTP && c.MTPLayers == 0 {
		return nil, fmt.Errorf("model %s: MTP layers asked for, but the config has no num_nextn_predict_layers", name)
	}
	if opts.MTP && !c.isMLA() {
		return nil, fmt.Errorf("model %s: MTP layers are modelled for deepseek_v3 and kimi_k2 only, not %s", name, c.ModelType)
	}
	if err := checkSize(name, c, opts); err != nil {
		return nil, err
	}
	b := newBuilder(name, c, opts)
	H, V := c.HiddenSize, c.VocabSize
	b.add("model.embed_tokens.weight", kindEmbedding, -1, V, H)
	for l := 0; l < c.Layers; l++ {
		b.layer(l)
	}
	b.add("model.norm.weight", kindReplicated, -1, H)
	if !c.TieEmbeddings {
		b.add("lm_head.weight", kindLMHead, -1, V, H)
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

func newBuilder(name string, c Config, opts LoadOptions) *builder {
	b := &builder{c: c, m: &Model{Name: name, Config: &c, Layers: c.Layers, Heads: c.Heads, KVHeads: c.KVHeads}}
	if c.isMLA() {
		b.m.Heads, b.m.KVHeads = c.Heads, c.Heads
	}
	if opts.MTP {
		b.m.MTPLayers = c.MTPLayers
	}
	return b
}

// modelSize is a tally of tensors, elements and bytes whose arithmetic is
// checked: ok turns false on the first overflow and stays so.
type modelSize struct {
	tensors, elems, bytes int64
	ok                    bool
}

// add counts n copies of the tensors of m.
func (z *modelSize) add(n int64, m *Model) {
	var e, by int64
	for _, x := range m.Tensors {
		xe, ok1 := checked.Product(x.Shape...)
		xb, ok2 := checked.Mul(xe, int64(x.DType.Size()))
		var ok3, ok4 bool
		e, ok3 = checked.Add(e, xe)
		by, ok4 = checked.Add(by, xb)
		z.ok = z.ok && ok1 && ok2 && ok3 && ok4
	}
	for _, f := range []struct {
		into *int64
		each int64
	}{{&z.tensors, int64(len(m.Tensors))}, {&z.elems, e}, {&z.bytes, by}} {
		v, ok1 := checked.Mul(f.each, n)
		sum, ok2 := checked.Add(*f.into, v)
		*f.into, z.ok = sum, z.ok && ok1 && ok2
	}
}

// checkSize works out the model's tensors, elements and bytes from one
// layer of each kind (every dense layer has the same tensors, and so has
// every MoE layer), before anything is built, and refuses what overflows
// or passes maxTensors.
func checkSize(name string, c Config, opts LoadOptions) error {
	moe := c.moeLayers(c.Layers)
	one := func(fill func(b *builder)) (*Model, error) {
		b := newBuilder(name, c, LoadOptions{})
		fill(b)
		return b.m, b.err
	}
	parts := []struct {
		n    int64
		fill func(b *builder)
	}{
		{1, func(b *builder) {
			b.add("model.embed_tokens.weight", kindEmbedding, -1, c.VocabSize, c.HiddenSize)
			b.add("model.norm.weight", kindReplicated, -1, c.HiddenSize)
			if !c.TieEmbeddings {
				b.add("lm_head.weight", kindLMHead, -1, c.VocabSize, c.HiddenSize)
			}
		}},
		{int64(c.Layers - moe), func(b *builder) { b.layerAs(0, false) }},
		{int64(moe), func(b *builder) { b.layerAs(0, true) }},
	}
	if opts.MTP {
		parts = append(parts, struct {
			n    int64
			fill func(b *builder)
		}{int64(c.MTPLayers), func(b *builder) { b.mtp(0) }})
	}
	z := modelSize{ok: true}
	for _, part := range parts {
		if part.n == 0 {
			continue
		}
		m, err := one(part.fill)
		if err != nil {
			return err
		}
		z.add(part.n, m)
	}
	if !z.ok {
		return fmt.Errorf("model %s: %d layers: the model's element or byte count overflows int64", name, c.Layers)
	}
	if z.tensors > maxTensors {
		return fmt.Errorf("model %s: %d layers make %d tensors (%d parameters), more than m2n lays out (%d tensors): cut them with --layers",
			name, c.Layers, z.tensors, z.elems, maxTensors)
	}
	if _, ok := checked.Mul(z.bytes, 16); !ok {
		return fmt.Errorf("model %s: %d layers make %d bytes of weights, too large to lay out", name, c.Layers, z.bytes)
	}
	return nil
}

type builder struct {
	c   Config
	m   *Model
	err error
}

// add appends a tensor of the config's dtype (its LayoutShape set from
// its kind) and returns its index, -1 after an error.
func (b *builder) add(name string, k Kind, layer int, shape ...int64) int {
	return b.addTyped(name, k, layer, b.c.DType, shape...)
}

// set changes tensor i (from add) unless an error came first.
func (b *builder) set(i int, fn func(t *Tensor)) {
	if i >= 0 && b.err == nil {
		fn(&b.m.Tensors[i])
	}
}

func (b *builder) addTyped(name string, k Kind, layer int, dt dtype.DType, shape ...int64) int {
	if b.err != nil {
		return -1
	}
	for _, s := range shape {
		if s < 0 {
			b.err = fmt.Errorf("tensor %s: negative dim in %v", name, shape)
			return -1
		}
	}
	if _, ok := checked.Product(shape...); !ok {
		b.err = fmt.Errorf("tensor %s: shape %v overflows int64", name, shape)
		return -1
	}
	t := Tensor{Name: name, Shape: shape, DType: dt, Kind: k, Layer: layer}
	switch k {
	case kindInterleavedExpertsGateUp, kindTransposedExpertsDown:
		t.Transposed = true
	}
	ls, err := layoutShape(t, b.m.Heads, b.m.KVHeads)
	if err != nil {
		b.err = err
		return -1
	}
	t.LayoutShape = ls
	t.FP8 = fp8Quantized(t, b.c.FP8Ignored)
	b.m.Tensors = append(b.m.Tensors, t)
	return len(b.m.Tensors) - 1
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
func (b *builder) layer(l int) { b.layerAs(l, b.c.moeLayer(l)) }

func (b *builder) layerAs(l int, moe bool) {
	p := fmt.Sprintf("model.layers.%d.", l)
	if b.c.isMLA() {
		b.mla(p, l)
	} else {
		b.attention(p, l)
	}
	if moe {
		b.moe(p+"mlp.", l)
	} else {
		b.mlp(p+"mlp.", l, b.c.IntermediateSize, b.c.MLPBias)
	}
	H := b.c.HiddenSize
	b.add(p+"input_layernorm.weight", kindReplicated, l, H)
	b.add(p+"post_attention_layernorm.weight", kindReplicated, l, H)
}

// attention appends GQA attention as the model type's attention module
// holds it: q, k, v and o, their biases (Llama, gpt-oss: all four with
// attention_bias; Qwen2 always, GLM-4.5 with attention_bias: q, k and v
// only), the per-head q_norm and k_norm (Qwen3, Qwen3-MoE; GLM-4.5 with
// use_qk_norm) and gpt-oss's sinks.
func (b *builder) attention(p string, l int) {
	c := b.c
	H := c.HiddenSize
	q := b.mul("num_attention_heads x head_dim", c.Heads, c.HeadDim)
	kv := b.mul("num_key_value_heads x head_dim", c.KVHeads, c.HeadDim)
	qkvBias, oBias := c.AttentionBias, c.AttentionBias
	switch c.ModelType {
	case "qwen2":
		qkvBias, oBias = true, false // Qwen2Attention: bias=True on q, k, v; none on o
	case "glm4_moe":
		oBias = false // Glm4MoeAttention: o_proj bias=False
	}
	a := p + "self_attn."
	for _, x := range []struct {
		name string
		k    Kind
		rows int64
	}{{"q_proj", Query, q}, {"k_proj", Key, kv}, {"v_proj", Value, kv}} {
		b.add(a+x.name+".weight", x.k, l, x.rows, H)
		if qkvBias {
			b.add(a+x.name+".bias", x.k, l, x.rows)
		}
	}
	b.add(a+"o_proj.weight", kindRow, l, H, q)
	if oBias {
		b.add(a+"o_proj.bias", kindReplicated, l, H)
	}
	if c.QKNorm {
		b.add(a+"q_norm.weight", kindReplicated, l, c.HeadDim)
		b.add(a+"k_norm.weight", kindReplicated, l, c.HeadDim)
	}
	if c.ModelType == "gpt_oss" {
		b.add(a+"sinks", kindSinks, l, c.Heads)
	}
}

// mla appends DeepSeek's multi-head latent attention.
func (b *builder) mla(p string, l int) {
	c := b.c
	H := c.HiddenSize
	a := p + "self_attn."
	qk := c.QKNopeHeadDim + c.QKRopeHeadDim
	if c.QLoraRank == 0 {
		b.add(a+"q_proj.weight", kindColumn, l, b.mul("num_attention_heads x qk_head_dim", c.Heads, qk), H)
	} else {
		b.add(a+"q_a_proj.weight", kindLatentQ, l, c.QLoraRank, H)
		b.add(a+"q_a_layernorm.weight", kindReplicated, l, c.QLoraRank)
		b.add(a+"q_b_proj.weight", kindColumn, l, b.mul("num_attention_heads x qk_head_dim", c.Heads, qk), c.QLoraRank)
	}
	b.add(a+"kv_a_proj_with_mqa.weight", kindLatentKV, l, c.KVLoraRank+c.QKRopeHeadDim, H)
	b.add(a+"kv_a_layernorm.weight", kindReplicated, l, c.KVLoraRank)
	kvb := b.add(a+"kv_b_proj.weight", kindColumn, l, b.mul("num_attention_heads x (qk_nope_head_dim + v_head_dim)", c.Heads, c.QKNopeHeadDim+c.VHeadDim), c.KVLoraRank)
	b.set(kvb, func(t *Tensor) { t.Refresh = refreshMLA })
	v := b.mul("num_attention_heads x v_head_dim", c.Heads, c.VHeadDim)
	b.add(a+"o_proj.weight", kindRow, l, H, v)
}

// mlp appends a gated MLP of intermediate size I under prefix p and
// returns its tensors' indices.
func (b *builder) mlp(p string, l int, I int64, bias bool) []int {
	H := b.c.HiddenSize
	var out []int
	keep := func(i int) { out = append(out, i) }
	keep(b.add(p+"gate_proj.weight", kindGate, l, I, H))
	if bias {
		keep(b.add(p+"gate_proj.bias", kindGate, l, I))
	}
	keep(b.add(p+"up_proj.weight", kindUp, l, I, H))
	if bias {
		keep(b.add(p+"up_proj.bias", kindUp, l, I))
	}
	keep(b.add(p+"down_proj.weight", kindRow, l, H, I))
	if bias {
		keep(b.add(p+"down_proj.bias", kindReplicated, l, H))
	}
	return out
}

// moe appends a sparse MoE block: the grouped routed experts, the router
// (DeepSeek-style models: with the score-correction bias, an f32 buffer)
// and the shared experts; gpt-oss's router and experts have biases.
func (b *builder) moe(p string, l int) {
	c := b.c
	H, E, I := c.HiddenSize, c.Experts, c.MoEIntermediateSize
	if c.ModelType == "gpt_oss" {
		b.add(p+"router.weight", kindReplicated, l, E, H)
		b.add(p+"router.bias", kindReplicated, l, E)
		I2 := b.mul("2 x intermediate_size", 2, I)
		b.add(p+"experts.gate_up_proj", kindInterleavedExpertsGateUp, l, E, H, I2)
		b.add(p+"experts.gate_up_proj_bias", kindInterleavedExpertsGateUpBias, l, E, I2)
		b.add(p+"experts.down_proj", kindTransposedExpertsDown, l, E, I, H)
		b.add(p+"experts.down_proj_bias", kindExpertsDownBias, l, E, H)
		return
	}
	b.add(p+"experts.gate_up_proj", ExpertsGateUp, l, E, b.mul("2 x moe_intermediate_size", 2, I), H)
	b.add(p+"experts.down_proj", ExpertsDown, l, E, H, I)
	if g := b.add(p+"gate.weight", kindReplicated, l, E, H); c.ModelType == "glm4_moe" {
		b.set(g, func(t *Tensor) { t.Refresh = refreshGLMGate(t.DType) })
	}
	if c.deepseekMoE() {
		b.addTyped(p+"gate.e_score_correction_bias", kindReplicated, l, dtype.F32, E)
		if c.SharedExperts > 0 {
			shared := b.mlp(p+"shared_experts.", l, b.mul("moe_intermediate_size x n_shared_experts", I, c.SharedExperts), false)
			if c.isMLA() {
				for _, i := range shared {
					b.set(i, func(t *Tensor) { t.SeqParallelReplicated = true }) // deepseek_v2.py DeepseekV2MLP: disable_tp=is_sequence_parallel
				}
			}
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
	b.add(p+"embed_tokens.weight", kindEmbedding, l, V, H)
	b.add(p+"enorm.weight", kindReplicated, l, H)
	b.add(p+"hnorm.weight", kindReplicated, l, H)
	b.add(p+"eh_proj.weight", kindMTPProj, l, H, b.mul("2 x hidden_size", 2, H))
	b.mla(p, l)
	b.moe(p+"mlp.", l)
	b.add(p+"input_layernorm.weight", kindReplicated, l, H)
	b.add(p+"post_attention_layernorm.weight", kindReplicated, l, H)
	b.add(p+"shared_head.norm.weight", kindReplicated, l, H)
	b.add(p+"shared_head.head.weight", kindLMHead, l, V, H)
}

// refreshMLA is why an MLA layer's kv_b_proj needs the generator's
// post-load step.
const refreshMLA = "vLLM's MLA attention derives W_UK_T and W_UV from kv_b_proj once, in process_weights_after_loading " +
	"(vllm/v1/attention/backends/mla/common.py, MLACommonBaseImpl.process_weights_after_loading): rerun it for this layer after every step"

// refreshGLMGate is why GLM-4.5's router needs the generator's post-load
// step: vLLM holds it in float32.
func refreshGLMGate(dt dtype.DType) string {
	return "vLLM's Glm4MoE keeps the router in float32 (vllm/model_executor/models/glm4_moe.py, Glm4MoE.__init__: " +
		"nn.Linear(dtype=torch.float32)); m2n delivers the trainer's " + dt.String() + " weight: copy it into the float32 gate after every step"
}

// fp8Quantized applies vLLM's FP8 rule to a tensor: Fp8Config.get_quant_method
// (vllm/model_executor/layers/quantization/fp8.py) quantizes LinearBase
// layers, unless is_layer_skipped finds them among the checkpoint's
// ignored layers, and FusedMoE layers; Fp8LinearMethod.create_weights
// makes only their weight float8 (biases stay). The models build those
// inside the decoder layers (and the MTP layer's decoder block); the
// vocab-parallel embedding and LM head, norms, the routers (built with
// quant_config=None, or as plain nn.Linear: GateLinear in deepseek_v2.py,
// ReplicatedLinear(quant_config=None) in qwen3_moe.py and mixtral.py,
// nn.Linear in glm4_moe.py and gpt_oss.py), DeepSeek's MTP eh_proj
// (nn.Linear in deepseek_mtp.py), gpt-oss's sinks and every bias stay as
// they are.
func fp8Quantized(t Tensor, ignored []string) bool {
	if t.Layer < 0 {
		return false
	}
	switch t.Kind {
	case Query, Key, Value, kindColumn, kindRow, kindGate, kindUp, kindLatentQ, kindLatentKV:
		if !strings.HasSuffix(t.Name, ".weight") {
			return false
		}
	case ExpertsGateUp, ExpertsDown, kindInterleavedExpertsGateUp, kindTransposedExpertsDown:
	default:
		return false
	}
	return !skipped(moduleOf(t.Name), ignored)
}

// moduleOf returns the module that holds a parameter: its name without the
// last part ("model.layers.0.self_attn.q_proj" of "...q_proj.weight"; the
// experts module of "...mlp.experts.gate_up_proj").
func moduleOf(name string) string {
	if i := strings.LastIndexByte(name, '.'); i >= 0 {
		return name[:i]
	}
	return name
}

// skipped reports whether an FP8 checkpoint leaves module unconverted: it
// is one of the ignored modules (vLLM's is_layer_skipped compares module
// names exactly; vLLM fuses q, k, v and gate, up after the check, so each
// checkpoint module is asked alone), lies under one (an ignored
// "model.layers.0.self_attn" covers its projections, as transformers'
// modules_to_not_convert do), or matches one with '*' standing for one
// dotted part ("model.layers.*.self_attn").
func skipped(module string, ignored []string) bool {
	for _, ig := range ignored {
		ig = strings.TrimSpace(ig)
		if ig == "" {
			continue
		}
		if module == ig || strings.HasPrefix(module, ig+".") {
			return true
		}
		if strings.Contains(ig, "*") {
			parts, pat := strings.Split(module, "."), strings.Split(ig, ".")
			if len(parts) < len(pat) {
				continue
			}
			match := true
			for i, q := range pat {
				if ok, _ := path.Match(q, parts[i]); !ok {
					match = false
					break
				}
			}
			if match {
				return true
			}
		}
	}
	return false
}

// layoutShape returns the reshape of t.Shape (of t.movedShape for a
// Transposed tensor) that both layouts shard: Query rows grouped by
// key-value head ([kv, heads/kv*head_dim, ...]), Key and Value rows by
// head ([kv, head_dim, ...]), the experts' fused gate_up_proj split into
// its gate and up halves ([E, 2, I, H]), gpt-oss's interleaved one into
// its gate-up pairs ([E, I, 2, H], its bias [E, I, 2, 1]).
func layoutShape(t Tensor, heads, kvHeads int64) ([]int64, error) {
	s := t.movedShape()
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
	case kindInterleavedExpertsGateUp:
		if len(s) != 3 || s[1]%2 != 0 {
			return nil, fmt.Errorf("tensor %s: gpt-oss experts' gate_up_proj of shape %s, want [E, H, 2I]", t.Name, placement.FormatShape(t.Shape))
		}
		return []int64{s[0], s[1] / 2, 2, s[2]}, nil
	case kindInterleavedExpertsGateUpBias:
		if len(s) != 2 || s[1]%2 != 0 {
			return nil, fmt.Errorf("tensor %s: gpt-oss experts' gate_up_proj_bias of shape %s, want [E, 2I]", t.Name, placement.FormatShape(s))
		}
		return []int64{s[0], s[1] / 2, 2, 1}, nil
	}
	return append([]int64(nil), s...), nil
}
