package pattern

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
)

// ChangeModel is how many elements a training step changes, per kind of
// tensor, as measured on a real model (testdata/change-model.json,
// written by bench/peers/change_model.py: per learning rate, tensor and
// step, the fraction of bf16 elements that changed). A tensor's kind is
// the last part of its name before ".weight" or ".bias" ("q_proj",
// "down_proj", "input_layernorm", "embed_tokens", "lm_head"); Fraction
// maps the names of other models onto those kinds.
type ChangeModel struct {
	LR    float64            // the learning rate of the run read
	Kinds map[string]float64 // per kind: the median over steps after the tenth and over layers
	All   float64            // the median over every tensor and step: a kind not measured
}

// ReadChangeModel reads the run of learning rate lr (0: the first run) of
// a change-model file.
func ReadChangeModel(data []byte, lr float64) (*ChangeModel, error) {
	var f struct {
		Runs []struct {
			LR      float64 `json:"lr"`
			Tensors []struct {
				Name    string    `json:"name"`
				Changed []float64 `json:"changed"`
			} `json:"tensors"`
		} `json:"runs"`
	}
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, fmt.Errorf("pattern: change model: %w", err)
	}
	for _, run := range f.Runs {
		if lr != 0 && run.LR != lr {
			continue
		}
		m := &ChangeModel{LR: run.LR, Kinds: map[string]float64{}}
		byKind := map[string][]float64{}
		var all []float64
		for _, t := range run.Tensors {
			if len(t.Changed) == 0 {
				continue
			}
			steady := t.Changed[min(10, len(t.Changed)-1):]
			for _, x := range steady {
				if !(x >= 0 && x <= 1) {
					return nil, fmt.Errorf("pattern: change model: tensor %s changes a fraction %v of its elements", t.Name, x)
				}
			}
			k := kindOf(t.Name)
			byKind[k] = append(byKind[k], median(steady))
			all = append(all, steady...)
		}
		if len(all) == 0 {
			return nil, fmt.Errorf("pattern: change model: the run of lr %v measures no tensor", run.LR)
		}
		for k, v := range byKind {
			m.Kinds[k] = median(v)
		}
		m.All = median(all)
		return m, nil
	}
	return nil, fmt.Errorf("pattern: change model: no run of lr %v", lr)
}

// kindOf is a tensor name's kind: "model.layers.3.mlp.up_proj.weight" is
// "up_proj".
func kindOf(name string) string {
	name = strings.TrimSuffix(strings.TrimSuffix(name, ".weight"), ".bias")
	if i := strings.LastIndexByte(name, '.'); i >= 0 {
		name = name[i+1:]
	}
	return name
}

// Fraction is the fraction of tensor name's elements a step changes: its
// kind's, or for kinds not measured the nearest one's (a fused gate_up
// projection the mean of gate and up; expert projections their dense
// kinds; MLA's and other attention projections the attention kinds'
// median; norms the norms'), else All.
func (m *ChangeModel) Fraction(name string) float64 {
	k := kindOf(name)
	if v, ok := m.Kinds[k]; ok {
		return v
	}
	pick := func(kinds ...string) (float64, bool) {
		var v []float64
		for _, k := range kinds {
			if x, ok := m.Kinds[k]; ok {
				v = append(v, x)
			}
		}
		if len(v) == 0 {
			return 0, false
		}
		return median(v), true
	}
	var v float64
	ok := false
	switch {
	case strings.Contains(k, "norm"):
		v, ok = pick("input_layernorm", "post_attention_layernorm", "norm")
	case strings.Contains(k, "gate_up"):
		v, ok = pick("gate_proj", "up_proj")
	case strings.HasPrefix(k, "q_") || strings.HasPrefix(k, "kv_") || strings.Contains(k, "qkv") || strings.Contains(name, "self_attn."):
		v, ok = pick("q_proj", "k_proj", "v_proj", "o_proj")
	case strings.Contains(name, "mlp."):
		v, ok = pick("gate_proj", "up_proj", "down_proj")
	}
	if ok {
		return v
	}
	return m.All
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}
