package modelspec

import (
	"errors"
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
		{"kv heads", func(s *Spec) { s.Train = "tp=8" }, "train", "tp=8", "does not divide over trainer tp=8"},
		{"gen heads", func(s *Spec) { s.Gen = "tp=128" }, "gen", "tp=128", "do not divide over generator tp=128"},
		{"empty stage", func(s *Spec) { s.Train = "pp=95" }, "train", "pp=95", "leaves pipeline stage"},
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

func TestParseOptions(t *testing.T) {
	s, err := ParseOptions("scale=16, layers=4,mtp=1,fp8=row")
	if err != nil || s.Scale != 16 || s.Layers != 4 || !s.MTP || s.FP8 != fp8.Row {
		t.Errorf("%+v, %v", s, err)
	}
	for _, bad := range []string{"scale=x", "layers=-1", "fp8=column", "color=red"} {
		var e *Error
		if _, err := ParseOptions(bad); !errors.As(err, &e) || e.Field != "options" || e.Value != bad {
			t.Errorf("ParseOptions(%q): %v", bad, err)
		}
	}
}
