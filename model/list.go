package model

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
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

// ParseList reads a model as a plain JSON list of tensors: either an array
// of {"name", "shape", "dtype"} objects, or an object {"tensors": [...]}
// that may also give "num_attention_heads" and "num_key_value_heads" (so
// that q_proj, k_proj and v_proj get the fused GQA layouts; without them
// they are plain column-parallel tensors) and "num_hidden_layers" (layers
// numbered from it on are MTP layers, on the last pipeline stage).
//
// Each tensor's kind and layer come from its name, as KindOf and LayerOf
// read it. Dtypes are spelled as PyTorch, safetensors or m2n spell them
// (bfloat16, BF16, bf16). Errors name the entry.
func ParseList(name string, data []byte) (*Model, error) {
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
		maxLayer = max(maxLayer, LayerOf(e.Name))
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
		t := Tensor{Name: e.Name, Shape: e.Shape, DType: dt, Kind: KindOf(e.Name, gqa), Layer: LayerOf(e.Name)}
		for _, s := range t.Shape {
			if s < 0 {
				return nil, fmt.Errorf("tensor list %s: tensor %s has a negative dim in %v", name, e.Name, e.Shape)
			}
		}
		if t.LayoutShape, err = layoutShape(t, m.Heads, m.KVHeads); err != nil {
			return nil, fmt.Errorf("tensor list %s: %w", name, err)
		}
		m.Tensors = append(m.Tensors, t)
	}
	if err := m.validate(); err != nil {
		return nil, fmt.Errorf("tensor list %s: %w", name, err)
	}
	return m, nil
}

// LayerOf returns the decoder layer a transformers tensor name belongs to
// (the N of "layers.N."), or -1 for a tensor outside the layers.
func LayerOf(name string) int {
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

// KindOf reads a tensor's kind from its transformers name, the way
// transformers' own tensor-parallel plans match module names: embed_tokens
// and lm_head (or an MTP layer's shared_head.head) are vocab-parallel;
// norms and the MoE router (gate) replicated; q_a_proj and
// kv_a_proj_with_mqa MLA's latent projections; q_proj, k_proj and v_proj
// GQA projections when gqa is set (else plain column-parallel, as MLA's
// q_proj is); q_b_proj and kv_b_proj column-parallel; o_proj and down_proj
// weights row-parallel (their biases replicated); gate_proj and up_proj the
// MLP's gate and up; experts.gate_up_proj and experts.down_proj the routed
// experts; eh_proj DeepSeek's MTP projection. Any other name is Replicated.
func KindOf(name string, gqa bool) Kind {
	parts := strings.Split(name, ".")
	if len(parts) < 2 {
		return Replicated
	}
	param, mod := parts[len(parts)-1], parts[len(parts)-2]
	parent := ""
	if len(parts) >= 3 {
		parent = parts[len(parts)-3]
	}
	weight := param == "weight"
	switch {
	case strings.Contains(mod, "norm"):
		return Replicated
	case mod == "embed_tokens":
		return Embedding
	case mod == "lm_head", mod == "head" && parent == "shared_head":
		return LMHead
	case mod == "experts" && param == "gate_up_proj":
		return ExpertsGateUp
	case mod == "experts" && param == "down_proj":
		return ExpertsDown
	case mod == "q_a_proj":
		return LatentQ
	case mod == "kv_a_proj_with_mqa":
		return LatentKV
	case mod == "q_proj" && gqa:
		return Query
	case mod == "k_proj" && gqa:
		return Key
	case mod == "v_proj" && gqa:
		return Value
	case mod == "q_proj", mod == "k_proj", mod == "v_proj", mod == "q_b_proj", mod == "kv_b_proj":
		return Column
	case mod == "o_proj", mod == "down_proj":
		if weight {
			return Row
		}
		return Replicated
	case mod == "gate_proj":
		return Gate
	case mod == "up_proj":
		return Up
	case mod == "eh_proj":
		return MTPProj
	}
	return Replicated
}
