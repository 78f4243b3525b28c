package modelspec

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// TestWriteLayouts: the text names the model, every stage's communicator,
// the pieces where the frameworks' splits differ, the fused views and the
// totals (the figures refit layouts' own test checks).
func TestWriteLayouts(t *testing.T) {
	l, err := Spec{Model: "qwen3-235b-a22b", Train: "tp=2,cp=2,dp=4,pp=4,ep=16,etp=1", Gen: "tp=8,dp=8"}.Layouts()
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := WriteLayouts(&b, l); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"model Qwen3-235B-A22B: 1037 tensors, 235093634560 parameters",
		"stage 0: layers [0, 23), 262 tensors; communicator of 80 ranks: world 0-15 (local 0-15) train, world 64-127 (local 16-79) generate",
		"model.embed_tokens.weight[75968:76032]",
		"8192x4096 as 4x2048x4096",
		"linear_qkv.weight @8388608 [9437184 4096 1]",
		"qkv_proj.weight @4194304 [524288 4096 1]",
		"totals: 1037 tensors, 235093634560 parameters, 470187269120 bytes",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("output lacks %q", want)
		}
	}
}

// TestWriteLayoutsJSON: the JSON lists every tensor and every world rank,
// and with parts every rank's buffers, each part inside its buffer.
func TestWriteLayoutsJSON(t *testing.T) {
	l, err := Spec{Model: "deepseek-v3", Train: "tp=2,pp=2,dp=2,ep=4,etp=1", Gen: "tp=4,dp=2", Scale: 32, Layers: 4, MTP: true}.Layouts()
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := WriteLayoutsJSON(&b, l, true); err != nil {
		t.Fatal(err)
	}
	var got layoutsOut
	if err := json.Unmarshal(b.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	if got.Count != len(l.Model.Tensors) || len(got.Ranks) != l.World() || len(got.RankParts) != l.World() || len(got.Stages) != 2 {
		t.Fatalf("count %d of %d, %d ranks and %d rank parts of %d, %d stages", got.Count, len(l.Model.Tensors), len(got.Ranks), len(got.RankParts), l.World(), len(got.Stages))
	}
	for _, rp := range got.RankParts {
		elems := map[string]int64{}
		for _, buf := range rp.Buffers {
			elems[buf.Name] = buf.Elems
		}
		if len(rp.Parts) == 0 {
			t.Errorf("rank %d holds no part", rp.Rank)
		}
		for _, p := range rp.Parts {
			end := p.ViewOffset
			for d, n := range p.LocalShape {
				end += (n - 1) * p.ViewStrides[d]
			}
			if n, ok := elems[p.Buffer]; !ok || end >= n {
				t.Errorf("rank %d: %s reaches element %d of buffer %s (%d elements)", rp.Rank, p.Entry, end, p.Buffer, n)
			}
		}
	}
}

func TestShortBuffer(t *testing.T) {
	for _, c := range [][3]string{
		{"model.layers.0.self_attn.q_proj.weight", "model.layers.0.self_attn.linear_qkv.weight", "linear_qkv.weight"},
		{"lm_head.weight", "lm_head.weight", "weight"},
	} {
		if got := shortBuffer(c[0], c[1]); got != c[2] {
			t.Errorf("shortBuffer(%q, %q) = %q, want %q", c[0], c[1], got, c[2])
		}
	}
}
