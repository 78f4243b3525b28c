package model

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/m2n-dev/m2n/placement"
)

// listEntry is one tensor of a plain list.
type listEntry struct {
	Name  string  `json:"name"`
	Shape []int64 `json:"shape"`
	DType string  `json:"dtype"`
}

// listFile is the object form of a plain list.
type listFile struct {
	Tensors []listEntry `json:"tensors"`
	Heads   int64       `json:"num_attention_heads"`
	KVHeads int64       `json:"num_key_value_heads"`
	Layers  int         `json:"num_hidden_layers"`
}

// parseList reads a model as a plain JSON list of tensors: either an array
// of {"name", "shape", "dtype"} objects, or an object {"tensors": [...]}
// that may also give "num_attention_heads" and "num_key_value_heads" (so
// that q_proj, k_proj and v_proj get the fused GQA layouts; without them
// they are plain column-parallel tensors) and "num_hidden_layers" (layers
// numbered from it on are MTP layers, on the last pipeline stage).
//
// Each tensor's kind and layer come from its name, as kindOf and layerOf
// read it. Dtypes are spelled as PyTorch, safetensors or m2n spell them
// (bfloat16, BF16, bf16). Errors name the entry.
func parseList(name string, data []byte) (*Model, error) {
	var f listFile
	trimmed := bytes.TrimSpace(data)
	dec := func(v any) error {
		d := json.NewDecoder(bytes.NewReader(trimmed))
		d.DisallowUnknownFields()
		return d.Decode(v)
	}
	if len(trimmed) > 0 && trimmed[0] == '[' {
		if err := dec(&f.Tensors); err != nil {
			return nil, fmt.Errorf("tensor list %s: %w", name, err)
		}
	} else if err := dec(&f); err != nil {
		return nil, fmt.Errorf("tensor list %s: %w", name, err)
	}
	if f.Heads < 0 || f.KVHeads < 0 || f.Layers < 0 {
		return nil, fmt.Errorf("tensor list %s: negative head or layer count", name)
	}
	if f.KVHeads == 0 {
		f.KVHeads = f.Heads
	}
	m := &Model{Name: name, Heads: f.Heads, KVHeads: f.KVHeads}
	mla, maxLayer := false, -1
	for _, e := range f.Tensors {
		mla = mla || strings.Contains(e.Name, "kv_a_proj_with_mqa")
		maxLayer = max(maxLayer, layerOf(e.Name))
	}
	gqa := m.Heads > 0 && !mla
	if !gqa {
		m.Heads, m.KVHeads = 0, 0
	}
	m.Layers = maxLayer + 1
	if f.Layers > 0 {
		if f.Layers > m.Layers {
			return nil, fmt.Errorf("tensor list %s: num_hidden_layers %d, but no tensor has a layer past %d", name, f.Layers, maxLayer)
		}
		m.Layers, m.MTPLayers = f.Layers, m.Layers-f.Layers
	}
	for i, e := range f.Tensors {
		if e.Name == "" {
			return nil, fmt.Errorf("tensor list %s: entry %d has no name", name, i)
		}
		if e.Shape == nil {
			return nil, fmt.Errorf("tensor list %s: tensor %s has no shape", name, e.Name)
		}
		dt, err := parseDType(e.DType)
		if err != nil {
			return nil, fmt.Errorf("tensor list %s: tensor %s: %w", name, e.Name, err)
		}
		kind, ok := kindOf(e.Name, gqa)
		if !ok {
			return nil, fmt.Errorf("tensor list %s: tensor %s: m2n cannot tell from its name how Megatron-Core and vLLM split it; "+
				"give the model's config.json instead", name, e.Name)
		}
		t := Tensor{Name: e.Name, Shape: e.Shape, DType: dt, Kind: kind, Layer: layerOf(e.Name)}
		for _, s := range t.Shape {
			if s < 0 {
				return nil, fmt.Errorf("tensor list %s: tensor %s has a negative dim in %v", name, e.Name, e.Shape)
			}
		}
		if t.LayoutShape, err = layoutShape(t, m.Heads, m.KVHeads); err != nil {
			return nil, fmt.Errorf("tensor list %s: %w", name, err)
		}
		t.FP8 = fp8Quantized(t, nil)
		m.Tensors = append(m.Tensors, t)
		if len(m.Tensors) > maxTensors {
			return nil, fmt.Errorf("tensor list %s: more than %d tensors", name, maxTensors)
		}
	}
	if err := checkListExperts(name, m); err != nil {
		return nil, err
	}
	markListFramework(m, mla)
	if err := m.validate(); err != nil {
		return nil, fmt.Errorf("tensor list %s: %w", name, err)
	}
	return m, nil
}

// layerOf returns the decoder layer a transformers tensor name belongs to
// (the N of "layers.N."), or -1 for a tensor outside the layers.
func layerOf(name string) int {
	parts := strings.Split(name, ".")
	for i := 0; i+1 < len(parts); i++ {
		if parts[i] == "layers" {
			if n, err := strconv.Atoi(parts[i+1]); err == nil && n >= 0 {
				return n
			}
		}
	}
	return -1
}

// markListFramework sets what the frameworks do to a list's tensors that
// their names say with the model's family: an MLA model (DeepSeek-V3,
// Kimi-K2) has its shared experts whole under vLLM's sequence-parallel MoE
// and its kv_b_proj derived from after loading; a model with
// e_score_correction_bias but no MLA is GLM-4.5's family, whose router vLLM
// holds in float32.
func markListFramework(m *Model, mla bool) {
	glm := !mla && slices.ContainsFunc(m.Tensors, func(t Tensor) bool { return strings.HasSuffix(t.Name, ".e_score_correction_bias") })
	for i := range m.Tensors {
		t := &m.Tensors[i]
		switch {
		case mla && strings.Contains(t.Name, ".shared_experts."):
			t.SeqParallelReplicated = true
		case mla && strings.HasSuffix(t.Name, ".kv_b_proj.weight"):
			t.Refresh = refreshMLA
		case glm && strings.HasSuffix(t.Name, ".mlp.gate.weight"):
			t.Refresh = refreshGLMGate(t.DType)
		}
	}
}

// checkListExperts checks that every layer's grouped experts are
// transformers 5's gate_up_proj [E, 2I, H] and down_proj [E, H, I], the
// one grouping a name cannot tell from gpt-oss's [E, H, 2I] and [E, I, H]:
// the two must agree (gate_up's H is down's H, its 2I twice down's I).
func checkListExperts(name string, m *Model) error {
	type pair struct{ gateUp, down *Tensor }
	layers := map[string]*pair{}
	var order []string
	for i := range m.Tensors {
		t := &m.Tensors[i]
		if t.Kind != ExpertsGateUp && t.Kind != ExpertsDown {
			continue
		}
		prefix := moduleOf(t.Name)
		p := layers[prefix]
		if p == nil {
			p = &pair{}
			layers[prefix] = p
			order = append(order, prefix)
		}
		if t.Kind == ExpertsGateUp {
			p.gateUp = t
		} else {
			p.down = t
		}
	}
	for _, prefix := range order {
		p := layers[prefix]
		if p.gateUp == nil || p.down == nil {
			return fmt.Errorf("tensor list %s: %s has only one of gate_up_proj and down_proj: m2n cannot tell how its experts are laid out; give the model's config.json", name, prefix)
		}
		g, d := p.gateUp.Shape, p.down.Shape
		if len(g) != 3 || len(d) != 3 || g[0] != d[0] || g[2] != d[1] || g[1] != 2*d[2] {
			return fmt.Errorf("tensor list %s: %s: gate_up_proj %s and down_proj %s are not transformers 5's [E, 2I, H] and [E, H, I] "+
				"(gpt-oss holds [E, H, 2I] and [E, I, H]): give the model's config.json", name, prefix,
				placement.FormatShape(g), placement.FormatShape(d))
		}
	}
	return nil
}

// kindOf reads a tensor's kind from its transformers name, the way
// transformers' own tensor-parallel plans match module names: embed_tokens
// and lm_head (or an MTP layer's shared_head.head) are vocab-parallel;
// norms, the MoE router (mlp.gate, mlp.router) and DeepSeek's
// e_score_correction_bias replicated; q_a_proj and kv_a_proj_with_mqa
// MLA's latent projections; q_proj, k_proj and v_proj GQA projections
// when gqa is set (else plain column-parallel weights, as MLA's q_proj
// is); q_b_proj and kv_b_proj column-parallel; o_proj and down_proj
// weights row-parallel (their biases replicated); gate_proj and up_proj
// the MLP's gate and up; experts.gate_up_proj and experts.down_proj the
// routed experts; eh_proj DeepSeek's MTP projection; sinks gpt-oss's
// attention sinks. Any other name has no kind it can tell: ok is false,
// and parseList refuses the tensor rather than guess.
func kindOf(name string, gqa bool) (kind Kind, ok bool) {
	parts := strings.Split(name, ".")
	if len(parts) < 2 {
		return 0, false
	}
	param, mod := parts[len(parts)-1], parts[len(parts)-2]
	parent := ""
	if len(parts) >= 3 {
		parent = parts[len(parts)-3]
	}
	weight := param == "weight"
	switch {
	case strings.Contains(mod, "norm") && (weight || param == "bias"):
		return kindReplicated, true
	case mod == "embed_tokens" && weight:
		return kindEmbedding, true
	case (mod == "lm_head" || mod == "head" && parent == "shared_head") && weight:
		return kindLMHead, true
	case mod == "experts" && param == "gate_up_proj":
		return ExpertsGateUp, true
	case mod == "experts" && param == "down_proj":
		return ExpertsDown, true
	case mod == "q_a_proj" && weight:
		return kindLatentQ, true
	case mod == "kv_a_proj_with_mqa" && weight:
		return kindLatentKV, true
	case mod == "q_proj" && gqa && (weight || param == "bias"):
		return Query, true
	case mod == "k_proj" && gqa && (weight || param == "bias"):
		return Key, true
	case mod == "v_proj" && gqa && (weight || param == "bias"):
		return Value, true
	case (mod == "q_proj" || mod == "k_proj" || mod == "v_proj" || mod == "q_b_proj" || mod == "kv_b_proj") && weight:
		return kindColumn, true
	case mod == "o_proj", mod == "down_proj":
		if weight {
			return kindRow, true
		}
		return kindReplicated, param == "bias"
	case mod == "gate_proj" && (weight || param == "bias"):
		return kindGate, true
	case mod == "up_proj" && (weight || param == "bias"):
		return kindUp, true
	case mod == "eh_proj" && weight:
		return kindMTPProj, true
	case mod == "gate" && parent == "mlp" && (weight || param == "e_score_correction_bias"):
		return kindReplicated, true
	case mod == "router" && parent == "mlp" && (weight || param == "bias"):
		return kindReplicated, true
	case mod == "self_attn" && param == "sinks":
		return kindSinks, true
	}
	return 0, false
}
