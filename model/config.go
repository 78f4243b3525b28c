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
// resolved. Sizes are element counts; zero means absent (no MoE, no MLA).
type Config struct {
	ModelType string // deepseek_v3, qwen3_moe, qwen3, llama, mistral or mixtral
	DType     placement.DType

	VocabSize        int64
	HiddenSize       int64
	IntermediateSize int64 // dense MLP (Mixtral: each expert's)
	Layers           int   // num_hidden_layers
	Heads            int64 // num_attention_heads
	KVHeads          int64 // num_key_value_heads (default: Heads)
	HeadDim          int64 // head_dim (default: HiddenSize / Heads); unused by MLA
	TieEmbeddings    bool  // tie_word_embeddings: no separate lm_head
	AttentionBias    bool  // attention_bias
	MLPBias          bool  // mlp_bias (llama)

	// Mixture of experts.
	Experts             int64 // num_experts, num_local_experts or n_routed_experts
	MoEIntermediateSize int64 // moe_intermediate_size (Mixtral: intermediate_size)
	SharedExperts       int64 // n_shared_experts (DeepSeek)
	FirstDenseLayers    int   // first_k_dense_replace (DeepSeek)
	MoELayerFreq        int   // moe_layer_freq (DeepSeek; default 1)
	DecoderSparseStep   int   // decoder_sparse_step (Qwen3-MoE; default 1)
	MLPOnlyLayers       []int // mlp_only_layers (Qwen3-MoE)
	ExpertsPerToken     int64 // num_experts_per_tok
	Groups, TopKGroup   int64 // n_group, topk_group (DeepSeek routing)

	// Multi-head latent attention (DeepSeek).
	QLoraRank     int64 // q_lora_rank; 0 (null): a plain q_proj
	KVLoraRank    int64 // kv_lora_rank
	QKNopeHeadDim int64 // qk_nope_head_dim
	QKRopeHeadDim int64 // qk_rope_head_dim
	VHeadDim      int64 // v_head_dim

	MTPLayers int // num_nextn_predict_layers (DeepSeek)
}

// ModelTypes lists the model_type values ParseConfig accepts.
func ModelTypes() []string {
	return []string{"deepseek_v3", "llama", "mistral", "mixtral", "qwen3", "qwen3_moe"}
}

// IsMoE reports whether the configuration has routed experts.
func (c Config) IsMoE() bool { return c.Experts > 0 }

// IsMLA reports whether the attention is DeepSeek's multi-head latent
// attention.
func (c Config) IsMLA() bool { return c.ModelType == "deepseek_v3" }

// MoELayer reports whether decoder layer l has routed experts, by the rule
// of the model's own code: DeepSeek from first_k_dense_replace on, every
// moe_layer_freq-th layer; Qwen3-MoE every decoder_sparse_step-th layer not
// in mlp_only_layers; Mixtral every layer.
func (c Config) MoELayer(l int) bool {
	if !c.IsMoE() {
		return false
	}
	switch c.ModelType {
	case "deepseek_v3":
		return l >= c.FirstDenseLayers && l%max(c.MoELayerFreq, 1) == 0
	case "qwen3_moe":
		return !slices.Contains(c.MLPOnlyLayers, l) && (l+1)%max(c.DecoderSparseStep, 1) == 0
	}
	return true
}

// expertsKey is the key transformers 5 writes for the expert count.
func (c Config) expertsKey() string {
	if c.ModelType == "deepseek_v3" {
		return "n_routed_experts"
	}
	return "num_local_experts"
}

// ParseConfig reads a HuggingFace config.json. It accepts the spellings of
// transformers 4 and 5 (dtype or torch_dtype; num_experts, num_local_experts
// or n_routed_experts), fills the defaults transformers fills, and returns
// an error naming the key for a missing or malformed value or an
// unsupported model_type.
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
	c.VocabSize = r.size("vocab_size")
	c.HiddenSize = r.size("hidden_size")
	c.Layers = int(r.size("num_hidden_layers"))
	c.Heads = r.size("num_attention_heads")
	c.KVHeads = r.optSize(c.Heads, "num_key_value_heads")
	c.TieEmbeddings = r.flag("tie_word_embeddings")
	c.AttentionBias = r.flag("attention_bias")
	c.MLPBias = r.flag("mlp_bias")
	c.IntermediateSize = r.size("intermediate_size")
	c.ExpertsPerToken = r.optSize(0, "num_experts_per_tok")
	switch c.ModelType {
	case "deepseek_v3":
		c.Experts = r.optSize(0, "n_routed_experts", "num_local_experts", "num_experts")
		c.MoEIntermediateSize = r.size("moe_intermediate_size")
		c.SharedExperts = r.optSize(0, "n_shared_experts")
		c.FirstDenseLayers = int(r.optSize(0, "first_k_dense_replace"))
		c.MoELayerFreq = int(r.optSize(1, "moe_layer_freq"))
		c.Groups = r.optSize(1, "n_group")
		c.TopKGroup = r.optSize(1, "topk_group")
		c.QLoraRank = r.optSize(0, "q_lora_rank")
		c.KVLoraRank = r.size("kv_lora_rank")
		c.QKNopeHeadDim = r.size("qk_nope_head_dim")
		c.QKRopeHeadDim = r.size("qk_rope_head_dim")
		c.VHeadDim = r.size("v_head_dim")
		c.MTPLayers = int(r.optSize(0, "num_nextn_predict_layers"))
		c.KVHeads = c.Heads // MLA has no key-value head groups
	case "qwen3_moe":
		c.Experts = r.optSize(0, "num_experts", "num_local_experts", "n_routed_experts")
		c.MoEIntermediateSize = r.size("moe_intermediate_size")
		c.DecoderSparseStep = int(r.optSize(1, "decoder_sparse_step"))
		c.MLPOnlyLayers = r.ints("mlp_only_layers")
	case "mixtral":
		c.Experts = r.optSize(0, "num_local_experts", "num_experts", "n_routed_experts")
		c.MoEIntermediateSize = c.IntermediateSize
		if c.Experts == 0 && r.err == nil {
			r.err = fmt.Errorf("config: mixtral: missing num_local_experts")
		}
	}
	if r.err != nil {
		return Config{}, r.err
	}
	if !c.IsMLA() && c.Heads > 0 {
		c.HeadDim = r.optSize(c.HiddenSize/c.Heads, "head_dim")
	}
	if r.err != nil {
		return Config{}, r.err
	}
	return c, c.Validate()
}

// Validate checks that the configuration describes a model whose tensors
// can be built: positive sizes, head counts that group (KVHeads divides
// Heads), and dense layers that fit.
func (c Config) Validate() error {
	pos := func(key string, v int64) error {
		if v < 1 {
			return fmt.Errorf("config: %s %s is %d, want at least 1", c.ModelType, key, v)
		}
		return nil
	}
	checks := []struct {
		key string
		v   int64
	}{{"vocab_size", c.VocabSize}, {"hidden_size", c.HiddenSize}, {"num_hidden_layers", int64(c.Layers)},
		{"num_attention_heads", c.Heads}, {"num_key_value_heads", c.KVHeads}}
	if c.IsMLA() {
		checks = append(checks, []struct {
			key string
			v   int64
		}{{"kv_lora_rank", c.KVLoraRank}, {"qk_nope_head_dim", c.QKNopeHeadDim}, {"qk_rope_head_dim", c.QKRopeHeadDim}, {"v_head_dim", c.VHeadDim}}...)
	} else {
		checks = append(checks, struct {
			key string
			v   int64
		}{"head_dim", c.HeadDim})
	}
	if c.IsMoE() {
		checks = append(checks, struct {
			key string
			v   int64
		}{"moe_intermediate_size", c.MoEIntermediateSize})
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
	for _, v := range []struct {
		key string
		n   int64
	}{{"intermediate_size", c.IntermediateSize}, {"q_lora_rank", c.QLoraRank}, {c.expertsKey(), c.Experts},
		{"n_shared_experts", c.SharedExperts}, {"first_k_dense_replace", int64(c.FirstDenseLayers)},
		{"num_nextn_predict_layers", int64(c.MTPLayers)}} {
		if v.n < 0 {
			return fmt.Errorf("config: %s %s is %d, want at least 0", c.ModelType, v.key, v.n)
		}
	}
	dense := false
	for l := 0; l < c.Layers; l++ {
		dense = dense || !c.MoELayer(l)
	}
	if dense {
		if err := pos("intermediate_size", c.IntermediateSize); err != nil {
			return err
		}
	}
	return nil
}

// reader pulls typed values out of a decoded config, keeping the first
// error, which names the key.
type reader struct {
	raw map[string]any
	err error
}

func (r *reader) fail(key string, format string, args ...any) {
	if r.err == nil {
		r.err = fmt.Errorf("config: %s: %s", key, fmt.Sprintf(format, args...))
	}
}

// lookup returns the value of the first of keys present and not null.
func (r *reader) lookup(keys ...string) (string, any, bool) {
	for _, k := range keys {
		if v, ok := r.raw[k]; ok && v != nil {
			return k, v, true
		}
	}
	return keys[0], nil, false
}

func (r *reader) str(key string) string {
	s, ok := r.optStr(key)
	if !ok {
		r.fail(key, "missing")
	}
	return s
}

func (r *reader) optStr(keys ...string) (string, bool) {
	k, v, ok := r.lookup(keys...)
	if !ok {
		return "", false
	}
	s, isStr := v.(string)
	if !isStr {
		r.fail(k, "%v is not a string", v)
		return "", false
	}
	return s, true
}

func (r *reader) size(key string) int64 {
	_, _, ok := r.lookup(key)
	if !ok {
		r.fail(key, "missing")
		return 0
	}
	return r.optSize(0, key)
}

// optSize returns the first present key's value as a non-negative integer,
// or def when none is present.
func (r *reader) optSize(def int64, keys ...string) int64 {
	k, v, ok := r.lookup(keys...)
	if !ok {
		return def
	}
	f, isNum := v.(float64)
	if !isNum || f != math.Trunc(f) || f < 0 || f > 1<<53 {
		r.fail(k, "%v is not a non-negative integer", v)
		return 0
	}
	return int64(f)
}

func (r *reader) flag(key string) bool {
	k, v, ok := r.lookup(key)
	if !ok {
		return false
	}
	b, isBool := v.(bool)
	if !isBool {
		r.fail(k, "%v is not true or false", v)
	}
	return b
}

func (r *reader) ints(key string) []int {
	k, v, ok := r.lookup(key)
	if !ok {
		return nil
	}
	list, isList := v.([]any)
	if !isList {
		r.fail(k, "%v is not a list", v)
		return nil
	}
	out := make([]int, 0, len(list))
	for _, x := range list {
		f, isNum := x.(float64)
		if !isNum || f != math.Trunc(f) || f < 0 || f > 1<<31 {
			r.fail(k, "%v is not a layer index", x)
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
