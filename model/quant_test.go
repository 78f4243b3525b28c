package model

import (
	"slices"
	"strings"
	"testing"

	"github.com/m2n-dev/m2n/dtype"
	"github.com/m2n-dev/m2n/fp8"
)

// TestNewQuantized: with an FP8 mode exactly the tensors vLLM's FP8 path
// quantizes (the weights of the linear and MoE layers inside the decoder
// layers: vllm/model_executor/layers/quantization/fp8.py,
// Fp8Config.get_quant_method) have an fp8e4m3 destination with that mode;
// the embedding, the LM head, norms, the router and its score-correction
// bias, MTP's eh_proj stay, and the generator's fused buffers hold FP8.
func TestNewQuantized(t *testing.T) {
	m, err := Load("deepseek-v3", LoadOptions{Scale: 64, Layers: 4, MTP: true})
	if err != nil {
		t.Fatal(err)
	}
	tr, _ := ParseTrainer("tp=1,pp=2,ep=2,dp=2")
	g, _ := ParseGenerator("tp=2,dp=2")
	l, err := NewQuantized(m, tr, g, fp8.Block)
	if err != nil {
		t.Fatal(err)
	}
	plain, err := New(m, tr, g)
	if err != nil {
		t.Fatal(err)
	}
	stays := []string{"model.embed_tokens.weight", "lm_head.weight", "model.layers.3.mlp.gate.weight", "model.layers.3.mlp.gate.e_score_correction_bias",
		"model.layers.0.input_layernorm.weight", "model.layers.4.eh_proj.weight", "model.layers.4.shared_head.head.weight", "model.layers.4.embed_tokens.weight"}
	converts := []string{"model.layers.0.self_attn.q_a_proj.weight", "model.layers.0.self_attn.kv_b_proj.weight", "model.layers.0.self_attn.o_proj.weight",
		"model.layers.3.mlp.experts.gate_up_proj", "model.layers.3.mlp.experts.down_proj", "model.layers.3.mlp.shared_experts.up_proj.weight",
		"model.layers.0.mlp.down_proj.weight", "model.layers.4.self_attn.q_b_proj.weight", "model.layers.4.mlp.experts.down_proj"}
	conv := 0
	for si, st := range l.Stages {
		for _, tl := range st.Tensors {
			want := tl.Whole().FP8
			if got := tl.Dst.DType() == dtype.FP8E4M3; got != want || (tl.Scale == fp8.Block) != want {
				t.Errorf("%s %v: destination %v, scale %v; vLLM quantizes it: %v", tl.Name, tl.Shape, tl.Dst.DType(), tl.Scale, want)
			}
			if slices.Contains(stays, tl.Whole().Name) && want {
				t.Errorf("%s converts; vLLM leaves it %v", tl.Name, tl.DType)
			}
			if slices.Contains(converts, tl.Whole().Name) && !want {
				t.Errorf("%s stays %v; vLLM quantizes it", tl.Name, tl.DType)
			}
			if tl.Src.DType() != tl.DType {
				t.Errorf("%s: source dtype %v, the tensor's %v", tl.Name, tl.Src.DType(), tl.DType)
			}
			if want {
				conv++
				if got, was := st.localBytes(Dst, 2), plain.Stages[si].localBytes(Dst, 2); got >= was {
					t.Errorf("stage %d: generator rank holds %d bytes in FP8, %d in bf16", si, got, was)
				}
			}
		}
		for _, b := range st.Buffers(Dst, 2) {
			if b.Name == "model.layers.0.mlp.gate_up_proj.weight" && b.DType != dtype.FP8E4M3 {
				t.Errorf("fused %s is %v", b.Name, b.DType)
			}
		}
	}
	if conv == 0 {
		t.Error("no tensor converts")
	}
	if _, err := NewQuantized(m, tr, g, fp8.Mode(9)); err == nil {
		t.Error("mode 9 accepted")
	}
}

// TestFP8IgnoredLayers: the modules an FP8 checkpoint leaves unconverted
// (quantization_config's ignored_layers, modules_to_not_convert) stay.
func TestFP8IgnoredLayers(t *testing.T) {
	c, err := parseConfig([]byte(`{"model_type":"qwen3","vocab_size":64,"hidden_size":32,"intermediate_size":64,"num_hidden_layers":2,
		"num_attention_heads":4,"num_key_value_heads":2,"head_dim":8,
		"quantization_config":{"quant_method":"fp8","ignored_layers":["model.layers.1.mlp.down_proj"],"modules_to_not_convert":["model.layers.*.self_attn"]}}`))
	if err != nil {
		t.Fatal(err)
	}
	m, err := FromConfig("q", c, LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range m.Tensors {
		want := strings.HasSuffix(x.Name, "proj.weight") && !strings.Contains(x.Name, "self_attn") && x.Name != "model.layers.1.mlp.down_proj.weight"
		if x.FP8 != want {
			t.Errorf("%s: FP8 %v, want %v", x.Name, x.FP8, want)
		}
	}
}

// TestFP8Refusals: what m2n cannot convert as the checkpoint and vLLM hold
// it is refused with the tensor, the option and the rule.
func TestFP8Refusals(t *testing.T) {
	tr, _ := ParseTrainer("tp=1")
	g, _ := ParseGenerator("tp=1")
	// int8 (or already FP8) weights: nothing would convert (issue 23.3)
	for _, dt := range []string{"int8", "F8_E4M3"} {
		m, err := parseList("q", []byte(`{"tensors":[{"name":"model.layers.0.mlp.down_proj.weight","shape":[4,4],"dtype":"`+dt+`"}]}`))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := NewQuantized(m, tr, g, fp8.Block); err == nil || !strings.Contains(err.Error(), "tensor model.layers.0.mlp.down_proj.weight is ") {
			t.Errorf("%s weights to e4m3: %v, want the tensor and its dtype named", dt, err)
		}
	}
	norms, _ := parseList("n", []byte(`{"tensors":[{"name":"model.norm.weight","shape":[4],"dtype":"bf16"}]}`))
	if _, err := NewQuantized(norms, tr, g, fp8.Block); err == nil || !strings.Contains(err.Error(), "no tensor is one vLLM's FP8 path quantizes") {
		t.Errorf("a model with nothing to convert: %v", err)
	}
	oss, err := Load("gpt-oss-120b", LoadOptions{Scale: 16, Layers: 2})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := NewQuantized(oss, tr, g, fp8.Block); err == nil || !strings.Contains(err.Error(), "m2n does not convert gpt-oss") {
		t.Errorf("gpt-oss to e4m3: %v", err)
	}
	// head_dim 64, 2 key-value heads: k_proj is [128, 256] in the checkpoint,
	// one 128-row block; m2n's per-head [2, 64, 256] would make two (issue case 9).
	c := Config{ModelType: "llama", DType: dtype.BF16, VocabSize: 64, HiddenSize: 256, IntermediateSize: 256, Layers: 1,
		Heads: 4, KVHeads: 2, HeadDim: 64}
	m, err := FromConfig("hd64", c, LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, mode := range []fp8.Mode{fp8.Block, fp8.Tensor} {
		if _, err := NewQuantized(m, tr, g, mode); err == nil || !strings.Contains(err.Error(), "--fp8-scale "+mode.String()) || !strings.Contains(err.Error(), "use --fp8-scale row") {
			t.Errorf("%v scales of head_dim 64: %v", mode, err)
		}
	}
	if _, err := NewQuantized(m, tr, g, fp8.Row); err != nil {
		t.Errorf("row scales are the checkpoint's whatever the view: %v", err)
	}
	k, _ := m.tensor("model.layers.0.self_attn.k_proj.weight")
	if got := ScaleShape(k, fp8.Block); !slices.Equal(got, []int64{1, 2}) {
		t.Errorf("k_proj's weight_scale_inv %v, want the checkpoint's [1 2]", got)
	}
	c.HeadDim, c.HiddenSize, c.Heads, c.KVHeads = 128, 512, 4, 2
	m, _ = FromConfig("hd128", c, LoadOptions{})
	if _, err := NewQuantized(m, tr, g, fp8.Block); err != nil {
		t.Errorf("head_dim 128 blocks are whole per head: %v", err)
	}
	g2, _ := ParseGenerator("tp=2")
	l, _ := NewQuantized(m, tr, g2, fp8.Block)
	x := l.Stages[0].tensor("model.layers.0.mlp.experts.gate_up_proj")
	_ = x
	// Megatron tp=4 above the 2 query groups: q, k, v move as row pieces of
	// each group, whose block scales would restart at every cut
	tr4, _ := ParseTrainer("tp=4")
	c2 := Config{ModelType: "llama", DType: dtype.BF16, VocabSize: 64, HiddenSize: 512, IntermediateSize: 256, Layers: 1, Heads: 8, KVHeads: 2, HeadDim: 64}
	m2, _ := FromConfig("tp4", c2, LoadOptions{})
	// q's 256 rows a group are whole blocks, but rank 0 of each group holds
	// its first 192: the cut at 192 is inside a block
	if _, err := NewQuantized(m2, tr4, g, fp8.Block); err == nil || !strings.Contains(err.Error(), "q_proj.weight: --fp8-scale block: Megatron-Core and vLLM split its rows differently") {
		t.Errorf("block scales of Megatron's row pieces: %v", err)
	}
	if _, err := NewQuantized(m2, tr4, g, fp8.Row); err != nil {
		t.Errorf("row scales of Megatron's row pieces: %v", err)
	}
	q, _ := m.tensor("model.layers.0.self_attn.q_proj.weight")
	if got := ScaleShape(q, fp8.Block); !slices.Equal(got, []int64{4, 4}) {
		t.Errorf("q_proj [512, 512] scales %v, want [4 4]", got)
	}
}
