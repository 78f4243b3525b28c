package model

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/m2n-dev/m2n/dtype"
)

// Config is the part of a HuggingFace config.json that fixes a model's
// tensors, with the key spellings of different transformers versions
// resolved and the defaults of transformers' configuration class for the
// model_type filled (as Load reads it). Sizes are element counts; zero means
// absent (no MoE, no MLA, no q_lora_rank).
type Config struct {
	// ModelType is one of ModelTypes.
	ModelType string
	DType     dtype.DType

	VocabSize        int64
	HiddenSize       int64
	IntermediateSize int64 // dense MLP (Mixtral and gpt-oss: each expert's)
	Layers           int   // num_hidden_layers
	Heads            int64 // num_attention_heads
	KVHeads          int64 // num_key_value_heads
	HeadDim          int64 // head_dim; unused by MLA
	TieEmbeddings    bool  // tie_word_embeddings: no separate lm_head
	AttentionBias    bool  // attention_bias: q, k and v biases (and o_proj's where the model has one)
	MLPBias          bool  // mlp_bias (llama)
	QKNorm           bool  // per-head q_norm and k_norm (qwen3, qwen3_moe; glm4_moe's use_qk_norm)

	// Mixture of experts.
	Experts             int64 // num_experts, num_local_experts or n_routed_experts
	MoEIntermediateSize int64 // moe_intermediate_size (Mixtral, gpt-oss: intermediate_size)
	SharedExperts       int64 // n_shared_experts (deepseek_v3, kimi_k2, glm4_moe)
	FirstDenseLayers    int   // first_k_dense_replace
	MoELayerFreq        int   // moe_layer_freq (DeepSeek's own code; transformers and m2n need 1)
	DecoderSparseStep   int   // decoder_sparse_step (Qwen3-MoE)
	MLPOnlyLayers       []int // mlp_only_layers (Qwen3-MoE)
	ExpertsPerToken     int64 // num_experts_per_tok
	Groups, TopKGroup   int64 // n_group, topk_group (DeepSeek-style routing)

	// Multi-head latent attention (deepseek_v3, kimi_k2).
	QLoraRank     int64 // q_lora_rank; 0 (null): a plain q_proj
	KVLoraRank    int64 // kv_lora_rank
	QKNopeHeadDim int64 // qk_nope_head_dim
	QKRopeHeadDim int64 // qk_rope_head_dim
	VHeadDim      int64 // v_head_dim

	MTPLayers int // num_nextn_predict_layers

	// FP8Ignored are the modules an FP8 checkpoint leaves unconverted
	// (quantization_config's ignored_layers or modules_to_not_convert,
	// when its quant_method is fp8), as vLLM's Fp8Config reads them.
	FP8Ignored []string
}

// ModelTypes lists the model_type values Load accepts in a config.json.
func ModelTypes() []string {
	return []string{"deepseek_v3", "glm4_moe", "gpt_oss", "kimi_k2", "llama", "mistral", "mixtral", "qwen2", "qwen3", "qwen3_moe"}
}

// isMoE reports whether the configuration has routed experts.
func (c Config) isMoE() bool { return c.Experts > 0 }

// isMLA reports whether the attention is DeepSeek's multi-head latent
// attention (deepseek_v3 and Kimi-K2, which is DeepSeek-V3's code).
func (c Config) isMLA() bool { return c.ModelType == "deepseek_v3" || c.ModelType == "kimi_k2" }

// deepseekMoE reports whether the model's MoE block is DeepSeek-V3's: a
// sigmoid router with its score-correction bias, and shared experts.
func (c Config) deepseekMoE() bool { return c.isMLA() || c.ModelType == "glm4_moe" }

// moeLayer reports whether decoder layer l has routed experts, by the rule
// of the model's transformers code: DeepSeek-V3 (and Kimi-K2, GLM-4.5)
// from first_k_dense_replace on; Qwen3-MoE every decoder_sparse_step-th
// layer not in mlp_only_layers; Mixtral and gpt-oss every layer.
func (c Config) moeLayer(l int) bool {
	if !c.isMoE() {
		return false
	}
	switch {
	case c.deepseekMoE():
		return l >= c.FirstDenseLayers
	case c.ModelType == "qwen3_moe":
		return !slices.Contains(c.MLPOnlyLayers, l) && (l+1)%max(c.DecoderSparseStep, 1) == 0
	}
	return true
}

// moeLayers returns how many of the first n decoder layers have routed
// experts, in time proportional to len(MLPOnlyLayers), not to n.
func (c Config) moeLayers(n int) int {
	if !c.isMoE() || n <= 0 {
		return 0
	}
	switch {
	case c.deepseekMoE():
		return n - min(max(c.FirstDenseLayers, 0), n)
	case c.ModelType == "qwen3_moe":
		step := max(c.DecoderSparseStep, 1)
		k := n / step // layers l < n with (l+1) % step == 0
		seen := map[int]bool{}
		for _, l := range c.MLPOnlyLayers {
			if l < n && (l+1)%step == 0 && !seen[l] {
				seen[l] = true
				k--
			}
		}
		return k
	}
	return n
}

// expertsKey is the key transformers writes for the expert count.
func (c Config) expertsKey() string {
	switch c.ModelType {
	case "deepseek_v3", "kimi_k2", "glm4_moe":
		return "n_routed_experts"
	case "qwen3_moe":
		return "num_experts"
	}
	return "num_local_experts"
}

// parseConfig reads a HuggingFace config.json. It accepts the spellings of
// transformers 4 and 5 (dtype or torch_dtype; num_experts,
// num_local_experts or n_routed_experts), and fills exactly the defaults
// that transformers' configuration class for the model_type fills
// (configuration_<type>.py): a deepseek_v3 config without n_routed_experts
// has DeepseekV3Config's 256, a mixtral one without num_key_value_heads
// MixtralConfig's 8. Where transformers has no default (kimi_k2, which
// transformers does not define: every structural key) a missing key is an
// error naming it, as are a value of the wrong type or range, a null where
// transformers needs a number, and a setting that vLLM or Megatron-Core
// lay out otherwise than transformers names (the error says which).
func parseConfig(data []byte) (Config, error) {
	var raw map[string]any
	if err := json.Unmarshal(data, &raw); err != nil {
		return Config{}, fmt.Errorf("config: %w", err)
	}
	r := reader{raw: raw}
	var c Config
	c.ModelType = r.str("model_type")
	if r.err != nil {
		return Config{}, r.err
	}
	if !slices.Contains(ModelTypes(), c.ModelType) {
		return Config{}, fmt.Errorf("config: model_type %q is not supported (want one of %s)", c.ModelType, strings.Join(ModelTypes(), ", "))
	}
	c.DType = dtype.BF16
	if s, ok := r.optStr("dtype", "torch_dtype"); ok {
		dt, err := parseDType(s)
		if err != nil {
			return Config{}, fmt.Errorf("config: dtype: %w", err)
		}
		c.DType = dt
	}
	d, ok := typeDefaults[c.ModelType]
	if !ok {
		return Config{}, fmt.Errorf("config: model_type %q has no defaults table (a bug)", c.ModelType)
	}
	c.VocabSize = r.int(d, "vocab_size")
	c.HiddenSize = r.int(d, "hidden_size")
	c.IntermediateSize = r.int(d, "intermediate_size")
	c.Layers = int(r.int(d, "num_hidden_layers"))
	c.Heads = r.int(d, "num_attention_heads")
	// num_key_value_heads: null (and, where the class defaults it to None,
	// absent) means num_attention_heads.
	c.KVHeads = r.orHeads(d, "num_key_value_heads", c.Heads)
	c.TieEmbeddings = r.flag(d, "tie_word_embeddings")
	c.AttentionBias = r.flag(d, "attention_bias")
	c.ExpertsPerToken = r.int(d, "num_experts_per_tok")
	switch c.ModelType {
	case "deepseek_v3", "kimi_k2":
		c.Experts = r.int(d, "n_routed_experts", "num_local_experts", "num_experts")
		c.MoEIntermediateSize = r.int(d, "moe_intermediate_size")
		c.SharedExperts = r.int(d, "n_shared_experts")
		c.FirstDenseLayers = int(r.int(d, "first_k_dense_replace"))
		c.MoELayerFreq = int(r.int(d, "moe_layer_freq"))
		c.Groups = r.int(d, "n_group")
		c.TopKGroup = r.int(d, "topk_group")
		c.QLoraRank = r.nullable(d, "q_lora_rank")
		c.KVLoraRank = r.int(d, "kv_lora_rank")
		c.QKNopeHeadDim = r.int(d, "qk_nope_head_dim")
		c.QKRopeHeadDim = r.int(d, "qk_rope_head_dim")
		c.VHeadDim = r.int(d, "v_head_dim")
		c.MTPLayers = int(r.int(d, "num_nextn_predict_layers"))
		c.KVHeads = c.Heads // MLA has no key-value head groups
		if m, ok := r.optStr("topk_method"); ok && m != "noaux_tc" && r.err == nil {
			r.err = fmt.Errorf("config: topk_method %q: vLLM keeps gate.e_score_correction_bias only for noaux_tc "+
				"(vllm/model_executor/models/deepseek_v2.py, DeepseekV2MoE.__init__), transformers' DeepseekV3 always holds it", m)
		}
	case "glm4_moe":
		c.Experts = r.int(d, "n_routed_experts", "num_local_experts", "num_experts")
		c.MoEIntermediateSize = r.int(d, "moe_intermediate_size")
		c.SharedExperts = r.int(d, "n_shared_experts")
		c.FirstDenseLayers = int(r.int(d, "first_k_dense_replace"))
		c.Groups = r.int(d, "n_group")
		c.TopKGroup = r.int(d, "topk_group")
		c.QKNorm = r.flag(d, "use_qk_norm")
		c.MTPLayers = int(r.int(d, "num_nextn_predict_layers"))
	case "qwen3_moe":
		c.Experts = r.int(d, "num_experts", "num_local_experts", "n_routed_experts")
		c.MoEIntermediateSize = r.int(d, "moe_intermediate_size")
		c.DecoderSparseStep = int(r.int(d, "decoder_sparse_step"))
		c.MLPOnlyLayers = r.ints("mlp_only_layers")
		c.QKNorm = true
	case "mixtral", "gpt_oss":
		c.Experts = r.int(d, "num_local_experts", "num_experts", "n_routed_experts")
		c.MoEIntermediateSize = c.IntermediateSize
	case "qwen3":
		c.QKNorm = true
	case "llama":
		c.MLPBias = r.flag(d, "mlp_bias")
	}
	if !c.isMLA() {
		c.HeadDim = r.headDim(d, c.HiddenSize, c.Heads)
	}
	if r.err == nil {
		r.err = readFP8(&c, raw)
	}
	if r.err != nil {
		return Config{}, r.err
	}
	return c, c.validate()
}

// validate checks that the configuration describes a model whose tensors
// can be built, in time independent of the layer count: positive sizes,
// head counts that group (KVHeads divides Heads), dense layers where the
// model has some, and the settings vLLM and Megatron-Core lay out as
// transformers names them.
func (c Config) validate() error {
	pos := func(key string, v int64) error {
		if v < 1 {
			return fmt.Errorf("config: %s %s is %d, want at least 1", c.ModelType, key, v)
		}
		return nil
	}
	type kv struct {
		key string
		v   int64
	}
	checks := []kv{{"vocab_size", c.VocabSize}, {"hidden_size", c.HiddenSize}, {"num_hidden_layers", int64(c.Layers)},
		{"num_attention_heads", c.Heads}, {"num_key_value_heads", c.KVHeads}}
	if c.isMLA() {
		checks = append(checks, kv{"kv_lora_rank", c.KVLoraRank}, kv{"qk_nope_head_dim", c.QKNopeHeadDim},
			kv{"qk_rope_head_dim", c.QKRopeHeadDim}, kv{"v_head_dim", c.VHeadDim})
	} else {
		checks = append(checks, kv{"head_dim", c.HeadDim})
	}
	if c.isMoE() {
		checks = append(checks, kv{"moe_intermediate_size", c.MoEIntermediateSize})
	}
	for _, ch := range checks {
		if err := pos(ch.key, ch.v); err != nil {
			return err
		}
	}
	if !c.DType.Valid() {
		return fmt.Errorf("config: %s: invalid dtype", c.ModelType)
	}
	if c.Heads%c.KVHeads != 0 {
		return fmt.Errorf("config: %s num_key_value_heads %d does not divide num_attention_heads %d", c.ModelType, c.KVHeads, c.Heads)
	}
	for _, v := range []kv{{"intermediate_size", c.IntermediateSize}, {"q_lora_rank", c.QLoraRank}, {c.expertsKey(), c.Experts},
		{"n_shared_experts", c.SharedExperts}, {"first_k_dense_replace", int64(c.FirstDenseLayers)},
		{"num_nextn_predict_layers", int64(c.MTPLayers)}} {
		if v.v < 0 {
			return fmt.Errorf("config: %s %s is %d, want at least 0", c.ModelType, v.key, v.v)
		}
	}
	if c.ModelType == "llama" && c.HiddenSize%c.Heads != 0 {
		// LlamaConfig.validate_architecture
		return fmt.Errorf("config: llama hidden_size %d is not a multiple of num_attention_heads %d (transformers' LlamaConfig.validate_architecture)",
			c.HiddenSize, c.Heads)
	}
	if c.isMLA() && c.MoELayerFreq > 1 {
		return fmt.Errorf("config: %s moe_layer_freq %d: transformers' DeepseekV3 makes every layer from first_k_dense_replace on MoE, "+
			"vLLM's deepseek_v2.py only every moe_layer_freq-th: they would hold different tensors", c.ModelType, c.MoELayerFreq)
	}
	if c.isMLA() && c.AttentionBias {
		return fmt.Errorf("config: %s attention_bias true: vLLM builds MLA without biases (vllm/model_executor/models/deepseek_v2.py, DeepseekV2MLAAttention)", c.ModelType)
	}
	switch c.ModelType {
	case "mistral":
		if c.AttentionBias {
			return fmt.Errorf("config: mistral attention_bias true: transformers' MistralAttention has no biases, vLLM's llama.py would build them")
		}
	case "qwen3", "qwen3_moe":
		if c.AttentionBias {
			return fmt.Errorf("config: %s attention_bias true: transformers gives o_proj a bias, vLLM's %s.py builds o_proj without one", c.ModelType, c.ModelType)
		}
	case "gpt_oss":
		if !c.AttentionBias {
			return fmt.Errorf("config: gpt_oss attention_bias false: vLLM's gpt_oss.py builds q, k, v and o_proj with biases")
		}
	}
	if c.isMoE() && c.moeLayers(c.Layers) < c.Layers {
		if err := pos("intermediate_size", c.IntermediateSize); err != nil {
			return err
		}
	}
	for _, l := range c.MLPOnlyLayers {
		if l < 0 {
			return fmt.Errorf("config: %s mlp_only_layers holds %d, want layer indices", c.ModelType, l)
		}
	}
	if !c.isMoE() {
		if err := pos("intermediate_size", c.IntermediateSize); err != nil {
			return err
		}
	}
	return nil
}
