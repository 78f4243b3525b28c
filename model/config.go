package model

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/m2n-dev/m2n/placement"
)

// Config is the part of a HuggingFace config.json that fixes a model's
// tensors, with the key spellings of different transformers versions
// resolved and the defaults of transformers' configuration class for the
// model_type filled (ParseConfig). Sizes are element counts; zero means
// absent (no MoE, no MLA, no q_lora_rank).
type Config struct {
	// ModelType is one of ModelTypes.
	ModelType string
	DType     placement.DType

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

// ModelTypes lists the model_type values ParseConfig accepts.
func ModelTypes() []string {
	return []string{"deepseek_v3", "glm4_moe", "gpt_oss", "kimi_k2", "llama", "mistral", "mixtral", "qwen2", "qwen3", "qwen3_moe"}
}

// IsMoE reports whether the configuration has routed experts.
func (c Config) IsMoE() bool { return c.Experts > 0 }

// IsMLA reports whether the attention is DeepSeek's multi-head latent
// attention (deepseek_v3 and Kimi-K2, which is DeepSeek-V3's code).
func (c Config) IsMLA() bool { return c.ModelType == "deepseek_v3" || c.ModelType == "kimi_k2" }

// deepseekMoE reports whether the model's MoE block is DeepSeek-V3's: a
// sigmoid router with its score-correction bias, and shared experts.
func (c Config) deepseekMoE() bool { return c.IsMLA() || c.ModelType == "glm4_moe" }

// MoELayer reports whether decoder layer l has routed experts, by the rule
// of the model's transformers code: DeepSeek-V3 (and Kimi-K2, GLM-4.5)
// from first_k_dense_replace on; Qwen3-MoE every decoder_sparse_step-th
// layer not in mlp_only_layers; Mixtral and gpt-oss every layer.
func (c Config) MoELayer(l int) bool {
	if !c.IsMoE() {
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

// MoELayers returns how many of the first n decoder layers have routed
// experts, in time proportional to len(MLPOnlyLayers), not to n.
func (c Config) MoELayers(n int) int {
	if !c.IsMoE() || n <= 0 {
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

// ParseConfig reads a HuggingFace config.json. It accepts the spellings of
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
func ParseConfig(data []byte) (Config, error) {
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
	c.DType = placement.BF16
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
	if !c.IsMLA() {
		c.HeadDim = r.headDim(d, c.HiddenSize, c.Heads)
	}
	if r.err == nil {
		r.err = readFP8(&c, raw)
	}
	if r.err != nil {
		return Config{}, r.err
	}
	return c, c.Validate()
}

// A value in a defaults table that means "no default: the key is needed".
const required = int64(-1)

// defaults are one model_type's defaults, as its transformers
// configuration class (or, for keys transformers reads with getattr, its
// modeling code) gives them. A key missing from ints has no default.
type defaults struct {
	class string // the class, for errors
	ints  map[string]int64
	flags map[string]bool
	// kvNone: num_key_value_heads defaults to None (num_attention_heads);
	// headDimNone: head_dim defaults to hidden_size / num_attention_heads
	// (else ints["head_dim"] is the default).
	kvNone, headDimNone bool
}

// typeDefaults are the defaults of transformers' configuration classes:
// configuration_deepseek_v3.py (DeepseekV3Config.__init__),
// configuration_glm4_moe.py (Glm4MoeConfig.__init__),
// configuration_gpt_oss.py (GptOssConfig), configuration_llama.py
// (LlamaConfig), configuration_mistral.py (MistralConfig.__init__),
// configuration_mixtral.py (MixtralConfig), configuration_qwen2.py
// (Qwen2Config), configuration_qwen3.py (Qwen3Config) and
// configuration_qwen3_moe.py (Qwen3MoeConfig). Keys the class does not
// define but its modeling code reads with a fallback (head_dim as
// hidden_size // num_attention_heads in Qwen2, Qwen3-MoE and GLM-4.5's
// attention) take that fallback. kimi_k2 is not a transformers model type
// (its config.json names remote code): every structural key is required.
var typeDefaults = map[string]defaults{
	"deepseek_v3": {class: "DeepseekV3Config", ints: map[string]int64{
		"vocab_size": 129280, "hidden_size": 7168, "intermediate_size": 18432, "moe_intermediate_size": 2048,
		"num_hidden_layers": 61, "num_attention_heads": 128, "num_key_value_heads": 128, "n_shared_experts": 1,
		"n_routed_experts": 256, "kv_lora_rank": 512, "q_lora_rank": 1536, "qk_rope_head_dim": 64, "v_head_dim": 128,
		"qk_nope_head_dim": 128, "n_group": 8, "topk_group": 4, "num_experts_per_tok": 8, "first_k_dense_replace": 3,
		// not DeepseekV3Config keys: DeepSeek's checkpoint code reads them (1 and 0 when absent)
		"moe_layer_freq": 1, "num_nextn_predict_layers": 0,
	}, flags: map[string]bool{"tie_word_embeddings": false, "attention_bias": false}, kvNone: true},
	"kimi_k2": {class: "kimi_k2 (no transformers class: its config.json's remote DeepseekV3Config)", ints: map[string]int64{
		"vocab_size": required, "hidden_size": required, "intermediate_size": required, "moe_intermediate_size": required,
		"num_hidden_layers": required, "num_attention_heads": required, "num_key_value_heads": required,
		"n_shared_experts": required, "n_routed_experts": required, "kv_lora_rank": required, "q_lora_rank": required,
		"qk_rope_head_dim": required, "v_head_dim": required, "qk_nope_head_dim": required, "n_group": 1, "topk_group": 1,
		"num_experts_per_tok": required, "first_k_dense_replace": required, "moe_layer_freq": 1, "num_nextn_predict_layers": 0,
	}, flags: map[string]bool{"tie_word_embeddings": false, "attention_bias": false}},
	"glm4_moe": {class: "Glm4MoeConfig", ints: map[string]int64{
		"vocab_size": 151552, "hidden_size": 4096, "intermediate_size": 10944, "num_hidden_layers": 46,
		"num_attention_heads": 96, "num_key_value_heads": 8, "moe_intermediate_size": 1408, "num_experts_per_tok": 8,
		"n_shared_experts": 1, "n_routed_experts": 128, "n_group": 1, "topk_group": 1, "first_k_dense_replace": 1,
		"num_nextn_predict_layers": 0,
	}, flags: map[string]bool{"tie_word_embeddings": false, "attention_bias": false, "use_qk_norm": false}, headDimNone: true},
	"gpt_oss": {class: "GptOssConfig", ints: map[string]int64{
		"num_hidden_layers": 36, "num_local_experts": 128, "vocab_size": 201088, "hidden_size": 2880,
		"intermediate_size": 2880, "head_dim": 64, "num_attention_heads": 64, "num_key_value_heads": 8,
		"num_experts_per_tok": 4,
	}, flags: map[string]bool{"tie_word_embeddings": false, "attention_bias": true}},
	"llama": {class: "LlamaConfig", ints: map[string]int64{
		"vocab_size": 32000, "hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 32,
		"num_attention_heads": 32, "num_experts_per_tok": 0,
	}, flags: map[string]bool{"tie_word_embeddings": false, "attention_bias": false, "mlp_bias": false}, kvNone: true, headDimNone: true},
	"mistral": {class: "MistralConfig", ints: map[string]int64{
		"vocab_size": 32000, "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
		"num_attention_heads": 32, "num_key_value_heads": 8, "num_experts_per_tok": 0,
	}, flags: map[string]bool{"tie_word_embeddings": false, "attention_bias": false}, headDimNone: true},
	"mixtral": {class: "MixtralConfig", ints: map[string]int64{
		"vocab_size": 32000, "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
		"num_attention_heads": 32, "num_key_value_heads": 8, "num_experts_per_tok": 2, "num_local_experts": 8,
	}, flags: map[string]bool{"tie_word_embeddings": false, "attention_bias": false}, headDimNone: true},
	"qwen2": {class: "Qwen2Config", ints: map[string]int64{
		"vocab_size": 151936, "hidden_size": 4096, "intermediate_size": 22016, "num_hidden_layers": 32,
		"num_attention_heads": 32, "num_key_value_heads": 32, "num_experts_per_tok": 0,
	}, flags: map[string]bool{"tie_word_embeddings": false, "attention_bias": false}, headDimNone: true},
	"qwen3": {class: "Qwen3Config", ints: map[string]int64{
		"vocab_size": 151936, "hidden_size": 4096, "intermediate_size": 22016, "num_hidden_layers": 32,
		"num_attention_heads": 32, "num_key_value_heads": 32, "head_dim": 128, "num_experts_per_tok": 0,
	}, flags: map[string]bool{"tie_word_embeddings": false, "attention_bias": false}},
	"qwen3_moe": {class: "Qwen3MoeConfig", ints: map[string]int64{
		"vocab_size": 151936, "hidden_size": 2048, "intermediate_size": 6144, "num_hidden_layers": 24,
		"num_attention_heads": 32, "num_key_value_heads": 4, "decoder_sparse_step": 1, "moe_intermediate_size": 768,
		"num_experts_per_tok": 8, "num_experts": 128,
	}, flags: map[string]bool{"tie_word_embeddings": false, "attention_bias": false}, headDimNone: true},
}

// Validate checks that the configuration describes a model whose tensors
// can be built, in time independent of the layer count: positive sizes,
// head counts that group (KVHeads divides Heads), dense layers where the
// model has some, and the settings vLLM and Megatron-Core lay out as
// transformers names them.
func (c Config) Validate() error {
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
	if c.IsMLA() {
		checks = append(checks, kv{"kv_lora_rank", c.KVLoraRank}, kv{"qk_nope_head_dim", c.QKNopeHeadDim},
			kv{"qk_rope_head_dim", c.QKRopeHeadDim}, kv{"v_head_dim", c.VHeadDim})
	} else {
		checks = append(checks, kv{"head_dim", c.HeadDim})
	}
	if c.IsMoE() {
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
	if c.IsMLA() && c.MoELayerFreq > 1 {
		return fmt.Errorf("config: %s moe_layer_freq %d: transformers' DeepseekV3 makes every layer from first_k_dense_replace on MoE, "+
			"vLLM's deepseek_v2.py only every moe_layer_freq-th: they would hold different tensors", c.ModelType, c.MoELayerFreq)
	}
	if c.IsMLA() && c.AttentionBias {
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
	if c.IsMoE() && c.MoELayers(c.Layers) < c.Layers {
		if err := pos("intermediate_size", c.IntermediateSize); err != nil {
			return err
		}
	}
	for _, l := range c.MLPOnlyLayers {
		if l < 0 {
			return fmt.Errorf("config: %s mlp_only_layers holds %d, want layer indices", c.ModelType, l)
		}
	}
	if !c.IsMoE() {
		if err := pos("intermediate_size", c.IntermediateSize); err != nil {
			return err
		}
	}
	return nil
}

// readFP8 reads quantization_config: for an FP8 checkpoint (quant_method
// fp8) the modules it leaves unconverted, as vLLM's Fp8Config.from_config
// reads them (ignored_layers; modules_to_not_convert, the spelling of
// transformers' FP8 configs).
func readFP8(c *Config, raw map[string]any) error {
	q, ok := raw["quantization_config"]
	if !ok || q == nil {
		return nil
	}
	qm, isMap := q.(map[string]any)
	if !isMap {
		return fmt.Errorf("config: quantization_config is %s, want an object", describe(q))
	}
	if m, _ := qm["quant_method"].(string); m != "fp8" {
		return nil
	}
	for _, key := range []string{"ignored_layers", "modules_to_not_convert"} {
		v, ok := qm[key]
		if !ok || v == nil {
			continue
		}
		list, isList := v.([]any)
		if !isList {
			return fmt.Errorf("config: quantization_config.%s is %s, want a list of module names", key, describe(v))
		}
		for _, x := range list {
			s, isStr := x.(string)
			if !isStr {
				return fmt.Errorf("config: quantization_config.%s holds %s, want module names", key, describe(x))
			}
			c.FP8Ignored = append(c.FP8Ignored, s)
		}
	}
	return nil
}

// reader pulls typed values out of a decoded config, keeping the first
// error, which names the key and the value.
type reader struct {
	raw map[string]any
	err error
}

// describe renders a JSON value with its type: `the string "64"`, `the
// number 10.5`, `null`.
func describe(v any) string {
	switch x := v.(type) {
	case nil:
		return "null"
	case string:
		return fmt.Sprintf("the string %q", x)
	case float64:
		return fmt.Sprintf("the number %v", x)
	case bool:
		return fmt.Sprintf("%v (true or false)", x)
	case []any:
		return "a list"
	case map[string]any:
		return "an object"
	}
	return fmt.Sprintf("%v", v)
}

func (r *reader) fail(key string, format string, args ...any) {
	if r.err == nil {
		r.err = fmt.Errorf("config: %s: %s", key, fmt.Sprintf(format, args...))
	}
}

// lookup returns the first of keys present (null included: present is
// whether the key is there, v is nil for null).
func (r *reader) lookup(keys ...string) (string, any, bool) {
	for _, k := range keys {
		if v, ok := r.raw[k]; ok {
			return k, v, true
		}
	}
	return keys[0], nil, false
}

func (r *reader) str(key string) string {
	s, ok := r.optStr(key)
	if !ok && r.err == nil {
		if _, _, present := r.lookup(key); present {
			r.fail(key, "is null, want a string")
		} else {
			r.fail(key, "missing: a config.json names its model_type (%s)", strings.Join(ModelTypes(), ", "))
		}
	}
	return s
}

// optStr returns the first present key's string; null counts as absent.
func (r *reader) optStr(keys ...string) (string, bool) {
	k, v, ok := r.lookup(keys...)
	if !ok || v == nil {
		return "", false
	}
	s, isStr := v.(string)
	if !isStr {
		r.fail(k, "is %s, want a string", describe(v))
		return "", false
	}
	return s, true
}

// number converts a present, non-null value to a non-negative integer.
func (r *reader) number(k string, v any) int64 {
	f, isNum := v.(float64)
	if !isNum || f != math.Trunc(f) || f < 0 || f > 1<<53 {
		r.fail(k, "is %s, want a non-negative integer (at most 2^53)", describe(v))
		return 0
	}
	return int64(f)
}

// int returns the first present key's value, or the class default of the
// first key (an error naming it when there is none); null is an error.
func (r *reader) int(d defaults, keys ...string) int64 {
	k, v, ok := r.lookup(keys...)
	if !ok {
		def, has := d.ints[keys[0]]
		if !has || def == required {
			r.fail(keys[0], "missing, and %s has no default for it", d.class)
			return 0
		}
		return def
	}
	if v == nil {
		r.fail(k, "is null, want an integer (%s needs one)", d.class)
		return 0
	}
	return r.number(k, v)
}

// nullable is int for a key whose null means "none" (q_lora_rank: a plain
// q_proj): null gives 0.
func (r *reader) nullable(d defaults, key string) int64 {
	if v, ok := r.raw[key]; ok && v == nil {
		return 0
	}
	return r.int(d, key)
}

// orHeads reads num_key_value_heads: null means num_attention_heads (every
// class does so), and so does absence where the class defaults it to None.
func (r *reader) orHeads(d defaults, key string, heads int64) int64 {
	v, ok := r.raw[key]
	if ok && v == nil {
		return heads
	}
	if !ok && d.kvNone {
		return heads
	}
	return r.int(d, key)
}

// headDim reads head_dim: null, or absence where the class (or its
// modeling code's fallback) computes it, give hidden_size //
// num_attention_heads.
func (r *reader) headDim(d defaults, hidden, heads int64) int64 {
	v, ok := r.raw["head_dim"]
	if (ok && v == nil) || (!ok && d.headDimNone) {
		if heads < 1 {
			return 0
		}
		return hidden / heads
	}
	return r.int(d, "head_dim")
}

// flag reads a boolean with the class default.
func (r *reader) flag(d defaults, key string) bool {
	v, ok := r.raw[key]
	if !ok {
		return d.flags[key]
	}
	b, isBool := v.(bool)
	if !isBool {
		r.fail(key, "is %s, want true or false", describe(v))
	}
	return b
}

func (r *reader) ints(key string) []int {
	v, ok := r.raw[key]
	if !ok || v == nil {
		return []int{}
	}
	list, isList := v.([]any)
	if !isList {
		r.fail(key, "is %s, want a list of layer indices", describe(v))
		return nil
	}
	out := make([]int, 0, len(list))
	for _, x := range list {
		f, isNum := x.(float64)
		if !isNum || f != math.Trunc(f) || f < 0 || f > 1<<31 {
			r.fail(key, "holds %s, want layer indices", describe(x))
			return nil
		}
		out = append(out, int(f))
	}
	return out
}

// parseDType reads a dtype as PyTorch, safetensors or m2n spells it.
func parseDType(s string) (placement.DType, error) {
	switch strings.ToUpper(strings.TrimSpace(s)) {
	case "F8_E4M3":
		return placement.FP8E4M3, nil
	case "F8_E5M2":
		return placement.FP8E5M2, nil
	case "BOOL":
		return placement.U8, nil
	}
	return placement.ParseDType(s)
}
