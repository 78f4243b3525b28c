package main

import (
	"encoding/json"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/m2n-dev/m2n/internal/testutil/frameworktest"
	"github.com/m2n-dev/m2n/modelspec"
)

// The framework conformance suite's cases (testdata/frameworks, written by
// model's TestFrameworkConformance from its independent reference of
// Megatron-Core and vLLM) hold what every rank of both frameworks holds,
// as runs [buffer offset, count, tensor, flat index, flat step]:
// frameworktest.Case.
const suiteDir = "../../testdata/frameworks"

// cell is what one buffer element holds: a tensor's flat index, or
// nothing ("").
type cell struct {
	tensor string
	flat   int64
}

// expected returns the buffers of rank r of suite case c as cells.
func expected(c frameworktest.Case, r frameworktest.Rank) map[string][]cell {
	out := map[string][]cell{}
	for _, b := range r.Buffers {
		cs := make([]cell, b.Elems)
		for _, run := range b.Runs {
			for k := int64(0); k < run[1]; k++ {
				cs[run[0]+k] = cell{c.Tensors[run[2]].Name, run[3] + k*run[4]}
			}
		}
		out[b.Name] = cs
	}
	return out
}

// layoutsOut, rankPartsJSON, partJSON and bufferJSON decode what refit
// layouts --json --parts prints (modelspec.WriteLayoutsJSON): the fields
// these tests read.
type layoutsOut struct {
	Stages    []struct{ Stage int } `json:"stages"`
	RankParts []rankPartsJSON       `json:"rank_parts"`
}

type rankPartsJSON struct {
	Rank    int          `json:"rank"`
	Side    string       `json:"side"`
	Buffers []bufferJSON `json:"buffers"`
	Parts   []partJSON   `json:"parts"`
}

type bufferJSON struct {
	Name  string `json:"name"`
	DType string `json:"dtype"`
	Elems int64  `json:"elems"`
}

// partJSON is a part (modelspec.Part, as WriteLayoutsJSON writes it) and
// the buffer that holds it.
type partJSON struct {
	Buffer string `json:"buffer"`
	modelspec.Part
}

// layoutsCells maps refit layouts --json --parts' rank to cells: every
// element of every part, through its view, to its tensor's flat index.
func layoutsCells(t *testing.T, rp rankPartsJSON) (map[string][]cell, map[string]string) {
	t.Helper()
	out, dtypes := map[string][]cell{}, map[string]string{}
	for _, b := range rp.Buffers {
		out[b.Name] = make([]cell, b.Elems)
		dtypes[b.Name] = b.DType
	}
	for _, p := range rp.Parts {
		cs := out[p.Buffer]
		n := int64(1)
		for _, s := range p.LocalShape {
			n *= s
		}
		idx := make([]int64, len(p.LocalShape))
		for k := int64(0); k < n; k++ {
			rem := k
			for d := len(idx) - 1; d >= 0; d-- {
				idx[d] = rem % p.LocalShape[d]
				rem /= p.LocalShape[d]
			}
			pos := p.ViewOffset
			var lin int64
			for d := range idx {
				pos += idx[d] * p.ViewStrides[d]
				lin = lin*p.LayoutShape[d] + p.Offset[d] + idx[d]
			}
			if cs[pos].tensor != "" {
				t.Fatalf("rank %d buffer %s: %s and %s both at %d", rp.Rank, p.Buffer, cs[pos].tensor, p.Entry, pos)
			}
			cs[pos] = cell{p.Tensor, hfFlat(p, lin)}
		}
	}
	return out, dtypes
}

// hfFlat turns a flat index over a part's layout shape into one over the
// transformers shape (the same, but for a transposed tensor, which the
// layout moves with its last two dims swapped).
func hfFlat(p partJSON, lin int64) int64 {
	if !p.Transposed {
		return lin
	}
	ms := slices.Clone(p.Shape)
	n := len(ms)
	ms[n-1], ms[n-2] = ms[n-2], ms[n-1]
	mi := make([]int64, n)
	for d := n - 1; d >= 0; d-- {
		mi[d] = lin % ms[d]
		lin /= ms[d]
	}
	mi[n-1], mi[n-2] = mi[n-2], mi[n-1]
	var out int64
	for d, i := range mi {
		out = out*p.Shape[d] + i
	}
	return out
}

func compareCells(t *testing.T, what string, got map[string][]cell, dtypes map[string]string, want map[string][]cell, fp8 map[string]bool) {
	t.Helper()
	var gn, wn []string
	for n := range got {
		gn = append(gn, n)
	}
	for n := range want {
		wn = append(wn, n)
	}
	sort.Strings(gn)
	sort.Strings(wn)
	if !slices.Equal(gn, wn) {
		t.Errorf("%s: refit's buffers %v, the suite's %v", what, gn, wn)
		return
	}
	for name, w := range want {
		g := got[name]
		if len(g) != len(w) {
			t.Errorf("%s: buffer %s has %d elements, the suite %d", what, name, len(g), len(w))
			continue
		}
		if isFP8 := dtypes[name] == "fp8e4m3"; isFP8 != fp8[name] {
			t.Errorf("%s: buffer %s is %s, the suite says fp8 %v", what, name, dtypes[name], fp8[name])
		}
		for i := range w {
			if g[i] != w[i] {
				t.Errorf("%s: buffer %s element %d holds %v, the suite %v", what, name, i, g[i], w[i])
				break
			}
		}
	}
}

// TestLayoutsFrameworkSuite: refit layouts --json --parts gives, for every
// case of the framework conformance suite and every rank of both sides,
// the suite's buffers element by element.
func TestLayoutsFrameworkSuite(t *testing.T) {
	for _, c := range frameworktest.Read(t, suiteDir) {
		t.Run(c.Case, func(t *testing.T) {
			args := []string{"layouts", "--model", filepath.Join(suiteDir, c.Config), "--train", c.Train, "--gen", c.Gen, "--json", "--parts"}
			if c.MTP {
				args = append(args, "--mtp")
			}
			if c.FP8 != "" {
				args = append(args, "--dst-dtype", "e4m3", "--fp8-scale", c.FP8)
			}
			out, err := runRefit(t, args...)
			if err != nil {
				t.Fatal(err)
			}
			var got layoutsOut
			if err := json.Unmarshal([]byte(out), &got); err != nil {
				t.Fatal(err)
			}
			per := len(c.Trainer) / max(1, len(got.Stages))
			T := len(c.Trainer)
			if len(got.RankParts) != T+len(c.Generator) {
				t.Fatalf("%d ranks, the suite has %d trainer and %d generator ranks", len(got.RankParts), T, len(c.Generator))
			}
			for _, sr := range c.Trainer {
				w := sr.Stage*per + sr.Rank
				cells, dtypes := layoutsCells(t, got.RankParts[w])
				compareCells(t, "trainer rank "+strings.TrimSpace(jsonInt(w)), cells, dtypes, expected(c, sr), fp8Of(sr))
			}
			for _, sr := range c.Generator {
				w := T + sr.Rank
				cells, dtypes := layoutsCells(t, got.RankParts[w])
				compareCells(t, "generator rank "+jsonInt(sr.Rank), cells, dtypes, expected(c, sr), fp8Of(sr))
			}
		})
	}
}

func fp8Of(r frameworktest.Rank) map[string]bool {
	out := map[string]bool{}
	for _, b := range r.Buffers {
		out[b.Name] = b.FP8
	}
	return out
}

func jsonInt(n int) string { b, _ := json.Marshal(n); return string(b) }

// TestLayoutsGeneratorDTypes: with --dst-dtype e4m3 refit layouts says,
// per tensor, what the generator holds: e4m3 with the checkpoint's
// weight_scale_inv shape for what vLLM quantizes, bf16 (or f32) for the
// rest; it lists what needs the generator's post-load step.
func TestLayoutsGeneratorDTypes(t *testing.T) {
	out, err := runRefit(t, "layouts", "--model", "deepseek-v3", "--train", "tp=1,dp=32,pp=4,ep=16,first=16,last=15", "--gen", "tp=8,dp=16", "--dst-dtype", "e4m3")
	if err != nil {
		t.Fatal(err)
	}
	wantInOutput(t, out,
		"dst dtype",
		// the experts: per expert and half, vLLM's w13_weight_scale_inv [E, 2 x 16, 56]
		"e4m3 block scale 256x32x56",
		"model.layers.0.self_attn.kv_b_proj.weight",
		"FP8: ",
		"after every step the generator must refresh (m2n.Model.refresh):",
		"W_UK_T and W_UV from kv_b_proj",
	)
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		switch f[0] {
		case "model.embed_tokens.weight", "lm_head.weight", "model.layers.3.mlp.gate.weight", "model.layers.3.mlp.gate.e_score_correction_bias":
			if strings.Contains(line, "e4m3") {
				t.Errorf("%s converts: %s", f[0], line)
			}
		case "model.layers.3.mlp.experts.down_proj", "model.layers.0.self_attn.o_proj.weight":
			if !strings.Contains(line, "e4m3 block") {
				t.Errorf("%s stays: %s", f[0], line)
			}
		}
	}
	help, err := runRefit(t, "layouts", "--help")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"etp (default: tp, as Megatron-Core)", "vocab-div", "engines", "all2all", "glm-4.5-air", "gpt-oss-120b", "kimi-k2", "qwen2.5-72b"} {
		if !strings.Contains(help, want) {
			t.Errorf("refit layouts --help lacks %q", want)
		}
	}
}
