package modelspec

import (
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/m2n-dev/m2n/fp8"
)

func TestLayouts(t *testing.T) {
	l, err := Spec{Model: "deepseek-v3", Train: "tp=1,pp=4,ep=16,dp=32", Gen: "tp=8,dp=16"}.Layouts()
	if err != nil || l.World() != 256 || len(l.Stages) != 4 {
		t.Fatalf("DeepSeek-V3 128+128: %v", err)
	}
	q, err := Spec{Model: "deepseek-v3", Train: "tp=1,pp=2,ep=2,dp=2", Gen: "tp=2,dp=2", Scale: 64, Layers: 4, FP8: fp8.Block}.Layouts()
	if err != nil {
		t.Fatal(err)
	}
	fp := 0
	for _, st := range q.Stages {
		for _, tl := range st.Tensors {
			if tl.Scale == fp8.Block {
				fp++
			}
		}
	}
	if fp == 0 {
		t.Errorf("no tensor in FP8")
	}
}

// TestBlame: every error names the part of the spec to blame, with its
// text, as the CLI's flags and the C ABI's arguments need.
func TestBlame(t *testing.T) {
	ok := Spec{Model: "qwen3-235b-a22b", Train: "tp=2,pp=2", Gen: "tp=8"}
	for _, c := range []struct {
		name         string
		edit         func(*Spec)
		field, value string
		want         string
	}{
		{"no model", func(s *Spec) { s.Model = "" }, "model", "", "required"},
		{"unknown model", func(s *Spec) { s.Model = "gpt-5" }, "model", "gpt-5", "neither built in"},
		{"train key", func(s *Spec) { s.Train = "tp=2,zp=3" }, "train", "tp=2,zp=3", `unknown key "zp"`},
		{"heads", func(s *Spec) { s.Train = "tp=3,pp=2" }, "train", "tp=3,pp=2", "do not divide over trainer tp=3"},
		{"gen heads", func(s *Spec) { s.Gen = "tp=128" }, "gen", "tp=128", "do not divide over generator tp=128"},
		{"empty stage", func(s *Spec) { s.Train = "pp=95" }, "train", "pp=95", "every pipeline stage needs at least one layer"},
		{"scale", func(s *Spec) { s.Scale = 3 }, "scale", "3", "does not divide hidden_size"},
		{"negative scale", func(s *Spec) { s.Scale = -1 }, "scale", "-1", "want at least 1"},
		{"layers", func(s *Spec) { s.Layers = 95 }, "layers", "95", "want between 1 and"},
		{"mtp", func(s *Spec) { s.MTP = true }, "mtp", "", "no num_nextn_predict_layers"},
	} {
		s := ok
		c.edit(&s)
		_, err := s.Layouts()
		var e *Error
		if !errors.As(err, &e) || e.Field != c.field || e.Value != c.value || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v (%#v), want field %s %q containing %q", c.name, err, e, c.field, c.value, c.want)
		}
	}
}

// TestHugeLayerCount: a config of 2^53 layers loads cut to two at once, as
// refit layouts takes it (issue 23.4); whole, it is refused by size.
func TestHugeLayerCount(t *testing.T) {
	dir := t.TempDir()
	cfg := `{"model_type": "llama", "hidden_size": 256, "intermediate_size": 512, "num_attention_heads": 4,
		"num_key_value_heads": 2, "num_hidden_layers": 9007199254740992, "vocab_size": 1024}`
	path := dir + "/config.json"
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	l, err := Spec{Model: path, Train: "tp=2", Gen: "tp=2", Layers: 2}.Layouts()
	if err != nil || len(l.Model.Tensors) == 0 {
		t.Fatalf("cut to 2 layers: %v", err)
	}
	_, err = Spec{Model: path, Train: "tp=2", Gen: "tp=2"}.Layouts()
	var e *Error
	if !errors.As(err, &e) || e.Field != "model" {
		t.Fatalf("whole: %v, want the model refused by size", err)
	}
}
