package model

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/m2n-dev/m2n/dtype"
	"github.com/m2n-dev/m2n/placement"
)

func readConfig(t *testing.T, file string) Config {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", "models", file))
	if err != nil {
		t.Fatal(err)
	}
	c, err := parseConfig(data)
	if err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	return c
}

// TestBuiltinsMatchConfigs: each built-in model is exactly what its
// published config.json gives, configuration and tensors alike.
func TestBuiltinsMatchConfigs(t *testing.T) {
	for _, name := range Builtins() {
		want := readConfig(t, name+".config.json")
		got, _, err := lookupBuiltin(name)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: built in\n%+v\nconfig.json\n%+v", name, got, want)
		}
		bm, err := Load(name, LoadOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cm, err := Load(filepath.Join("testdata", "models", name+".config.json"), LoadOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(bm.Tensors, cm.Tensors) {
			t.Errorf("%s: built-in tensors differ from the config.json path", name)
		}
	}
}

// TestKeySpellings: transformers 4's spellings (torch_dtype, num_experts)
// give the same configuration as transformers 5's (dtype,
// num_local_experts).
func TestKeySpellings(t *testing.T) {
	v5 := readConfig(t, "qwen3-235b-a22b.config.json")
	v4 := readConfig(t, "qwen3-235b-a22b.v4.config.json")
	if !reflect.DeepEqual(v4, v5) {
		t.Errorf("v4 spellings give\n%+v\nv5\n%+v", v4, v5)
	}
	for _, key := range []string{"num_experts", "num_local_experts", "n_routed_experts"} {
		c, err := parseConfig([]byte(`{"model_type":"deepseek_v3","vocab_size":10,"hidden_size":8,"intermediate_size":16,
			"num_hidden_layers":2,"num_attention_heads":2,"moe_intermediate_size":4,"kv_lora_rank":4,"qk_nope_head_dim":2,
			"qk_rope_head_dim":2,"v_head_dim":2,"first_k_dense_replace":1,"torch_dtype":"float32","n_group":1,"topk_group":1,"` + key + `":4}`))
		if err != nil {
			t.Fatal(err)
		}
		if c.Experts != 4 || c.DType != dtype.F32 {
			t.Errorf("%s: experts %d dtype %v, want 4 f32", key, c.Experts, c.DType)
		}
	}
}

// TestPublishedTotals: the parameter counts come out as published.
func TestPublishedTotals(t *testing.T) {
	for _, tc := range []struct {
		spec     string
		mtp      bool
		tensors  int
		params   int64
		rounded  string
		bytesPer int64
	}{
		{"deepseek-v3", false, 967, 671026419200, "671.0", 2},
		{"deepseek-v3", true, 989, 684489845504, "684.5", 2}, // the checkpoint's 685B: 671B + 14B of MTP
		{"qwen3-235b-a22b", false, 1037, 235093634560, "235.1", 2},
		{"llama-3.1-70b", false, 723, 70553706496, "70.6", 2},
		{"testdata/models/mixtral-8x7b.config.json", false, 291, 46702792704, "46.7", 2},
		{"testdata/models/qwen3-8b.config.json", false, 399, 8190735360, "8.2", 2},
		{"kimi-k2", false, 975, 1026408232448, "1026.4", 2},                         // Kimi-K2's published 1T (1.04T with its MTP-free head)
		{"glm-4.5-air", false, 735, 106852251264, "106.9", 2},                       // GLM-4.5-Air's published 106B, MTP layer left out
		{"gpt-oss-120b", false, 615, 116829156672, "116.8", 2},                      // gpt-oss-120b's published 116.8B
		{"qwen2.5-72b", false, 963, 72706203648, "72.7", 2},                         // Qwen2.5-72B's published 72.7B
		{"testdata/models/qwen3-0.6b.config.json", false, 310, 596049920, "0.6", 2}, // tied: no lm_head
	} {
		m, err := Load(tc.spec, LoadOptions{MTP: tc.mtp})
		if err != nil {
			t.Fatal(err)
		}
		if len(m.Tensors) != tc.tensors || m.Params() != tc.params || billions(m.Params()) != tc.rounded {
			t.Errorf("%s (mtp %v): %d tensors, %d params (%sB); want %d, %d (%sB)",
				tc.spec, tc.mtp, len(m.Tensors), m.Params(), billions(m.Params()), tc.tensors, tc.params, tc.rounded)
		}
		// every tensor bf16 but the f32 router biases, 4 bytes a piece.
		extra := int64(0)
		for _, x := range m.Tensors {
			if x.DType == dtype.F32 {
				extra += 2 * x.Elems()
			}
		}
		if m.Bytes() != tc.params*tc.bytesPer+extra {
			t.Errorf("%s: %d bytes, want %d", tc.spec, m.Bytes(), tc.params*tc.bytesPer+extra)
		}
	}
}

func billions(n int64) string { return fmt.Sprintf("%.1f", float64(n)/1e9) }

// TestTensorNames spot-checks names, shapes and kinds against transformers
// 5's modules.
func TestTensorNames(t *testing.T) {
	ds, _ := Load("deepseek-v3", LoadOptions{MTP: true})
	qw, _ := Load("qwen3-235b-a22b", LoadOptions{})
	ll, _ := Load("llama-3.1-70b", LoadOptions{})
	mx, _ := Load("testdata/models/mixtral-8x7b.config.json", LoadOptions{})
	for _, tc := range []struct {
		m     *Model
		name  string
		shape []int64
		dtype dtype.DType
		kind  Kind
		layer int
	}{
		{ds, "model.embed_tokens.weight", []int64{129280, 7168}, dtype.BF16, kindEmbedding, -1},
		{ds, "model.layers.0.self_attn.q_a_proj.weight", []int64{1536, 7168}, dtype.BF16, kindLatentQ, 0},
		{ds, "model.layers.0.self_attn.q_b_proj.weight", []int64{128 * 192, 1536}, dtype.BF16, kindColumn, 0},
		{ds, "model.layers.0.self_attn.kv_a_proj_with_mqa.weight", []int64{576, 7168}, dtype.BF16, kindLatentKV, 0},
		{ds, "model.layers.0.self_attn.kv_b_proj.weight", []int64{128 * 256, 512}, dtype.BF16, kindColumn, 0},
		{ds, "model.layers.0.self_attn.o_proj.weight", []int64{7168, 16384}, dtype.BF16, kindRow, 0},
		{ds, "model.layers.2.mlp.gate_proj.weight", []int64{18432, 7168}, dtype.BF16, kindGate, 2},
		{ds, "model.layers.3.mlp.experts.gate_up_proj", []int64{256, 4096, 7168}, dtype.BF16, ExpertsGateUp, 3},
		{ds, "model.layers.3.mlp.experts.down_proj", []int64{256, 7168, 2048}, dtype.BF16, ExpertsDown, 3},
		{ds, "model.layers.3.mlp.gate.weight", []int64{256, 7168}, dtype.BF16, kindReplicated, 3},
		{ds, "model.layers.3.mlp.gate.e_score_correction_bias", []int64{256}, dtype.F32, kindReplicated, 3},
		{ds, "model.layers.60.mlp.shared_experts.down_proj.weight", []int64{7168, 2048}, dtype.BF16, kindRow, 60},
		{ds, "model.norm.weight", []int64{7168}, dtype.BF16, kindReplicated, -1},
		{ds, "lm_head.weight", []int64{129280, 7168}, dtype.BF16, kindLMHead, -1},
		{ds, "model.layers.61.eh_proj.weight", []int64{7168, 14336}, dtype.BF16, kindMTPProj, 61},
		{ds, "model.layers.61.shared_head.head.weight", []int64{129280, 7168}, dtype.BF16, kindLMHead, 61},
		{qw, "model.layers.0.self_attn.q_proj.weight", []int64{8192, 4096}, dtype.BF16, Query, 0},
		{qw, "model.layers.0.self_attn.k_proj.weight", []int64{512, 4096}, dtype.BF16, Key, 0},
		{qw, "model.layers.0.self_attn.q_norm.weight", []int64{128}, dtype.BF16, kindReplicated, 0},
		{qw, "model.layers.93.mlp.experts.gate_up_proj", []int64{128, 3072, 4096}, dtype.BF16, ExpertsGateUp, 93},
		{ll, "model.layers.79.mlp.down_proj.weight", []int64{8192, 28672}, dtype.BF16, kindRow, 79},
		{ll, "model.layers.0.self_attn.v_proj.weight", []int64{1024, 8192}, dtype.BF16, Value, 0},
		{mx, "model.layers.0.mlp.experts.gate_up_proj", []int64{8, 28672, 4096}, dtype.BF16, ExpertsGateUp, 0},
		{mx, "model.layers.0.mlp.gate.weight", []int64{8, 4096}, dtype.BF16, kindReplicated, 0},
	} {
		got, ok := tc.m.tensor(tc.name)
		if !ok {
			t.Errorf("%s: no tensor %s", tc.m.Name, tc.name)
			continue
		}
		if !reflect.DeepEqual(got.Shape, tc.shape) || got.DType != tc.dtype || got.Kind != tc.kind || got.Layer != tc.layer {
			t.Errorf("%s: %s %v %v layer %d, want %s %v %v layer %d", tc.name, placement.FormatShape(got.Shape), got.DType, got.Kind, got.Layer,
				placement.FormatShape(tc.shape), tc.dtype, tc.kind, tc.layer)
		}
	}
	if _, ok := ll.tensor("model.layers.0.self_attn.q_norm.weight"); ok {
		t.Error("llama has no q_norm")
	}
	q, _ := qw.tensor("model.layers.0.self_attn.q_proj.weight")
	k, _ := qw.tensor("model.layers.0.self_attn.k_proj.weight")
	g, _ := qw.tensor("model.layers.0.mlp.experts.gate_up_proj")
	if !reflect.DeepEqual(q.LayoutShape, []int64{4, 2048, 4096}) || !reflect.DeepEqual(k.LayoutShape, []int64{4, 128, 4096}) ||
		!reflect.DeepEqual(g.LayoutShape, []int64{128, 2, 1536, 4096}) {
		t.Errorf("layout shapes q %v k %v gate_up %v", q.LayoutShape, k.LayoutShape, g.LayoutShape)
	}
}

// TestListRoundTrip: a built-in model written as a plain list (with its
// head counts) reads back as the same tensors: names give the same kinds,
// layers and layout shapes. gpt-oss's list is refused: its experts'
// [E, H, 2I] cannot be told from transformers 5's [E, 2I, H] by name.
func TestListRoundTrip(t *testing.T) {
	for _, name := range Builtins() {
		m, err := Load(name, LoadOptions{MTP: name == "deepseek-v3"})
		if err != nil {
			t.Fatal(err)
		}
		var f listFile
		f.Heads, f.KVHeads, f.Layers = m.Heads, m.KVHeads, m.Layers
		for _, x := range m.Tensors {
			f.Tensors = append(f.Tensors, listEntry{Name: x.Name, Shape: x.Shape, DType: "torch." + map[dtype.DType]string{dtype.BF16: "bfloat16", dtype.F32: "float32"}[x.DType]})
		}
		data, _ := json.Marshal(f)
		path := filepath.Join(t.TempDir(), name+".list.json")
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		l, err := Load(path, LoadOptions{})
		if name == "gpt-oss-120b" {
			// its expert biases are refused by name (without them, the
			// [E, H, 2I] shape is: TestParseErrors)
			if err == nil || !strings.Contains(err.Error(), "experts.gate_up_proj_bias: m2n cannot tell") {
				t.Errorf("gpt-oss as a list: %v, want a refusal naming the tensor", err)
			}
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(l.Tensors, m.Tensors) || l.Layers != m.Layers || l.MTPLayers != m.MTPLayers {
			for i := range m.Tensors {
				if i < len(l.Tensors) && !reflect.DeepEqual(l.Tensors[i], m.Tensors[i]) {
					t.Errorf("%s: list gives %+v, config %+v", name, l.Tensors[i], m.Tensors[i])
					break
				}
			}
			t.Errorf("%s: list model differs (layers %d/%d, mtp %d/%d)", name, l.Layers, m.Layers, l.MTPLayers, m.MTPLayers)
		}
	}
	// The array form, without head counts: q, k and v are plain columns.
	m, err := parseList("tiny", []byte(`[{"name":"model.embed_tokens.weight","shape":[10,4],"dtype":"BF16"},
		{"name":"model.layers.0.self_attn.q_proj.weight","shape":[4,4],"dtype":"bf16"},
		{"name":"model.layers.1.mlp.experts.gate_up_proj","shape":[2,6,4],"dtype":"F8_E4M3"},
		{"name":"model.layers.1.mlp.experts.down_proj","shape":[2,4,3],"dtype":"F8_E4M3"}]`))
	if err != nil {
		t.Fatal(err)
	}
	if m.Layers != 2 || m.Tensors[1].Kind != kindColumn || m.Tensors[2].DType != dtype.FP8E4M3 ||
		!reflect.DeepEqual(m.Tensors[2].LayoutShape, []int64{2, 2, 3, 4}) {
		t.Errorf("array list: layers %d, %+v", m.Layers, m.Tensors)
	}
}

func TestParseErrors(t *testing.T) {
	for _, tc := range []struct{ data, want string }{
		{`{"model_type":"gpt2"}`, `model_type "gpt2" is not supported`},
		{`{"model_type":"kimi_k2","vocab_size":10}`, `hidden_size: missing, and kimi_k2`},
		{`{"model_type":"llama","vocab_size":10.5}`, `vocab_size: is the number 10.5, want a non-negative integer (at most 2^53)`},
		{`{"model_type":"llama","hidden_size":"64"}`, `hidden_size: is the string "64", want a non-negative integer (at most 2^53)`},
		{`{"model_type":"llama","vocab_size":null}`, `vocab_size: is null, want an integer (LlamaConfig needs one)`},
		{`{"vocab_size":10}`, `model_type: missing`},
		{`{"model_type":"deepseek_v3","topk_method":"greedy"}`, `topk_method "greedy": vLLM keeps gate.e_score_correction_bias only for noaux_tc`},
		{`{"model_type":"deepseek_v3","moe_layer_freq":2}`, "moe_layer_freq 2: transformers' DeepseekV3 makes every layer"},
		{`{"model_type":"qwen3","attention_bias":true}`, "vLLM's qwen3.py builds o_proj without one"},
		{`{"model_type":"llama","hidden_size":100,"num_attention_heads":8}`, "LlamaConfig.validate_architecture"},
		{`{"model_type":"llama","vocab_size":10,"hidden_size":8,"num_hidden_layers":1,"num_attention_heads":3,"num_key_value_heads":2,"intermediate_size":4}`,
			"num_key_value_heads 2 does not divide num_attention_heads 3"},
		{`{"model_type":"llama","vocab_size":10,"hidden_size":8,"num_hidden_layers":1,"num_attention_heads":2,"intermediate_size":4,"dtype":"float128"}`,
			`dtype: unknown dtype "float128"`},
		{`{"model_type":"mixtral","vocab_size":10,"hidden_size":8,"num_hidden_layers":1,"num_attention_heads":2,"intermediate_size":4}`,
			"num_key_value_heads 8 does not divide num_attention_heads 2"}, // MixtralConfig's default 8 key-value heads
		{`[1,2]`, "config: json"},
	} {
		_, err := parseConfig([]byte(tc.data))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("parseConfig(%s) = %v, want %q", tc.data, err, tc.want)
		}
	}
	for _, tc := range []struct{ data, want string }{
		{`[{"name":"model.norm.weight","shape":[2],"dtype":"bf17"}]`, `tensor model.norm.weight: unknown dtype "bf17"`},
		{`[{"name":"model.norm.weight","shape":[2],"dtype":"bf16"},{"name":"model.norm.weight","shape":[2],"dtype":"bf16"}]`, "tensor model.norm.weight is listed twice"},
		{`[{"name":"model.norm.weight","shape":[-2],"dtype":"bf16"}]`, "negative dim"},
		{`[{"name":"model.norm.weight","dtype":"bf16"}]`, "tensor model.norm.weight has no shape"},
		{`[{"name":"a","shape":[2],"dtype":"bf16","extra":1}]`, `unknown field "extra"`},
		{`[{"name":"model.layers.0.mlp.foo.weight","shape":[2],"dtype":"bf16"}]`, "tensor model.layers.0.mlp.foo.weight: m2n cannot tell from its name"},
		{`[{"name":"model.layers.0.mlp.experts.gate_up_proj","shape":[4,8,6],"dtype":"bf16"},{"name":"model.layers.0.mlp.experts.down_proj","shape":[4,3,8],"dtype":"bf16"}]`,
			"are not transformers 5's [E, 2I, H] and [E, H, I]"},
		{`[{"name":"model.layers.0.mlp.experts.gate_up_proj_bias","shape":[4,8],"dtype":"bf16"}]`, "cannot tell from its name"},
		{`{"tensors":[{"name":"model.layers.0.self_attn.q_proj.weight","shape":[6,4],"dtype":"bf16"}],"num_attention_heads":4}`,
			"dim 0 (6 rows) does not split into 4 heads"},
		{`[]`, "has no tensors"},
	} {
		_, err := parseList("l", []byte(tc.data))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("parseList(%s) = %v, want %q", tc.data, err, tc.want)
		}
	}
	if _, err := Load("gpt-5", LoadOptions{}); err == nil || !strings.Contains(err.Error(), "neither built in") {
		t.Errorf("unknown model: %v", err)
	}
	noType := filepath.Join(t.TempDir(), "config.json")
	if err := os.WriteFile(noType, []byte(`{"hidden_size": 64, "num_hidden_layers": 2}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(noType, LoadOptions{}); err == nil || !strings.Contains(err.Error(), "neither model_type") {
		t.Errorf("a config without model_type: %v, want it named as such", err)
	}
	if _, err := Load("llama-3.1-70b", LoadOptions{MTP: true}); err == nil || !strings.Contains(err.Error(), "no num_nextn_predict_layers") {
		t.Errorf("MTP on llama: %v", err)
	}
}

// TestTransformersDefaults: keys a config.json leaves out take exactly the
// default of transformers' configuration class for the model type
// (issue 22 case 6), never m2n's own.
func TestTransformersDefaults(t *testing.T) {
	for _, tc := range []struct {
		json string
		got  func(c Config) any
		want any
		why  string
	}{
		{`{"model_type":"deepseek_v3"}`, func(c Config) any { return c.Experts }, int64(256), "DeepseekV3Config n_routed_experts=256"},
		{`{"model_type":"deepseek_v3"}`, func(c Config) any { return c.FirstDenseLayers }, 3, "DeepseekV3Config first_k_dense_replace=3"},
		{`{"model_type":"deepseek_v3"}`, func(c Config) any { return c.QLoraRank }, int64(1536), "DeepseekV3Config q_lora_rank=1536"},
		{`{"model_type":"deepseek_v3","q_lora_rank":null}`, func(c Config) any { return c.QLoraRank }, int64(0), "q_lora_rank None: a plain q_proj"},
		{`{"model_type":"mixtral"}`, func(c Config) any { return c.KVHeads }, int64(8), "MixtralConfig num_key_value_heads=8"},
		{`{"model_type":"mixtral","num_key_value_heads":null}`, func(c Config) any { return c.KVHeads }, int64(32), "None: num_attention_heads"},
		{`{"model_type":"mixtral"}`, func(c Config) any { return c.Experts }, int64(8), "MixtralConfig num_local_experts=8"},
		{`{"model_type":"llama","num_attention_heads":16}`, func(c Config) any { return c.KVHeads }, int64(16), "LlamaConfig num_key_value_heads None"},
		{`{"model_type":"llama","num_attention_heads":16}`, func(c Config) any { return c.HeadDim }, int64(256), "LlamaConfig head_dim None: 4096 // 16"},
		{`{"model_type":"qwen3","hidden_size":1024}`, func(c Config) any { return c.HeadDim }, int64(128), "Qwen3Config head_dim=128, not hidden // heads"},
		{`{"model_type":"qwen2","hidden_size":1024,"num_attention_heads":8,"num_key_value_heads":8}`, func(c Config) any { return c.HeadDim }, int64(128), "Qwen2 has no head_dim: hidden // heads"},
		{`{"model_type":"qwen3_moe"}`, func(c Config) any { return c.Experts }, int64(128), "Qwen3MoeConfig num_experts=128"},
		{`{"model_type":"glm4_moe"}`, func(c Config) any { return c.SharedExperts }, int64(1), "Glm4MoeConfig n_shared_experts=1"},
		{`{"model_type":"gpt_oss"}`, func(c Config) any { return c.AttentionBias }, true, "GptOssConfig attention_bias=True"},
		{`{"model_type":"gpt_oss"}`, func(c Config) any { return c.HeadDim }, int64(64), "GptOssConfig head_dim=64"},
	} {
		c, err := parseConfig([]byte(tc.json))
		if err != nil {
			t.Errorf("%s: %v", tc.json, err)
			continue
		}
		if got := tc.got(c); got != tc.want {
			t.Errorf("%s: %v, want %v (%s)", tc.json, got, tc.want, tc.why)
		}
	}
	// a deepseek_v3 config without n_routed_experts is DeepSeek-V3's MoE, not a dense model
	c, _ := parseConfig([]byte(`{"model_type":"deepseek_v3","num_hidden_layers":4,"hidden_size":64,"intermediate_size":64,"moe_intermediate_size":8,
		"num_attention_heads":4,"kv_lora_rank":8,"q_lora_rank":8,"qk_nope_head_dim":4,"qk_rope_head_dim":2,"v_head_dim":4,"vocab_size":64}`))
	m, err := FromConfig("ds", c, LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := m.tensor("model.layers.3.mlp.experts.gate_up_proj"); !ok {
		t.Error("layer 3 has no routed experts")
	}
	if _, ok := m.tensor("model.layers.2.mlp.gate_proj.weight"); !ok {
		t.Error("layer 2 is not dense (first_k_dense_replace 3)")
	}
}
