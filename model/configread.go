package model

import (
	"fmt"
	"math"
	"strings"

	"github.com/m2n-dev/m2n/dtype"
)

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
func parseDType(s string) (dtype.DType, error) {
	switch strings.ToUpper(strings.TrimSpace(s)) {
	case "F8_E4M3":
		return dtype.FP8E4M3, nil
	case "F8_E5M2":
		return dtype.FP8E5M2, nil
	case "BOOL":
		return dtype.U8, nil
	}
	return dtype.Parse(s)
}
