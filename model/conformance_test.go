package model_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"testing"

	"github.com/m2n-dev/m2n/dtype"
	"github.com/m2n-dev/m2n/fp8"
	"github.com/m2n-dev/m2n/internal/testutil/frameworktest"
	"github.com/m2n-dev/m2n/model"
)

var rewrite = flag.Bool("rewrite", false, "rewrite testdata/frameworks/*.json from the reference")

// FrameworkDir holds the suite: the configs (models/) and, per case, what
// every rank holds (<case>.json).
const frameworkDir = "../testdata/frameworks"

// frameworkCases is the suite's matrix: each architecture m2n lays out, on
// trainer and generator configurations that exercise what the frameworks
// do differently from torch.chunk or from each other.
var frameworkCases = []refCase{
	{Name: "llama-tp2dp2-to-tp4", Config: "llama-tiny", Train: "tp=2,dp=2", Gen: "tp=4",
		Note: "GQA with q, k, v, o and MLP biases; vLLM tp above the 2 kv heads; both vocabularies padded (Megatron to 256, vLLM to 256 over tp=4)"},
	{Name: "llama-tp4pp2-to-tp2dp2", Config: "llama-tiny", Train: "tp=4,pp=2", Gen: "tp=2,dp=2",
		Note: "Megatron tp=4 above the 2 query groups: each rank a row slice of its group's [q; k; v]"},
	{Name: "llama-tp2cp2-div1-to-tp8", Config: "llama-tiny", Train: "tp=2,cp=2,vocab-div=1", Gen: "tp=8",
		Note: "Megatron's make-vocab-size-divisible-by 1 (no padding past tp), context parallel; vLLM tp=8 over 2 kv heads"},
	{Name: "qwen2-tp2-to-tp2", Config: "qwen2-tiny", Train: "tp=2", Gen: "tp=2",
		Note: "q, k, v biases; a vocabulary of 1000: vLLM's rank 0 holds rows [0, 512), Megatron's [0, 512) of its 1024"},
	{Name: "qwen3-tied-tp2pp2-to-tp2dp2", Config: "qwen3-tied", Train: "tp=2,pp=2", Gen: "tp=2,dp=2",
		Note: "tied embeddings: no lm_head; q_norm, k_norm"},
	{Name: "qwen3moe-tp2dp2ep2-to-tp2dp2", Config: "qwen3moe-tiny", Train: "tp=2,dp=2,ep=2", Gen: "tp=2,dp=2",
		Note: "etp defaulting to tp=2; vLLM DP without EP: experts split over tp x dp = 4 ranks; a dense layer 0 (mlp_only_layers)"},
	{Name: "qwen3moe-dp4ep4-to-tp2dp3ep6", Config: "qwen3moe-tiny", Train: "dp=4,ep=4", Gen: "tp=2,dp=3,ep=6",
		Note: "8 experts over vLLM's 6 EP ranks: 2, 2, 1, 1, 1, 1"},
	{Name: "qwen3moe-etp1-to-tp2-engines2", Config: "qwen3moe-tiny", Train: "tp=2,dp=2,ep=2,etp=1", Gen: "tp=2,engines=2",
		Note: "two independent vLLM engines: experts replicated over them, split over each engine's tp"},
	{Name: "qwen3moe-fp8row-to-ep4", Config: "qwen3moe-tiny", Train: "tp=2,dp=2,ep=2", Gen: "tp=2,dp=2,ep=4", FP8: "row",
		Note: "FP8 generator: linear and expert weights e4m3, embeddings, norms, router, biases as they are"},
	{Name: "deepseek-mtp-to-sp-moe", Config: "deepseek-tiny", MTP: true, Train: "tp=2,dp=2,ep=4,etp=1", Gen: "tp=2,dp=2,ep=4",
		Note: "MLA, MTP; vLLM's sequence-parallel MoE (ep, tp 2, dp 2, default all2all): shared experts whole on every rank"},
	{Name: "deepseek-pp2-first2-to-naive-a2a", Config: "deepseek-tiny", MTP: true, Train: "tp=2,pp=2,first=2,last=1,ep=2,etp=1", Gen: "tp=2,dp=2,ep=4,all2all=naive",
		Note: "uneven pipeline by first/last; the naive all2all backend is not sequence-parallel: shared experts split over tp"},
	{Name: "deepseek-fp8block-to-tp2dp2", Config: "deepseek-tiny", Train: "dp=2,ep=2", Gen: "tp=2,dp=2", FP8: "block",
		Note: "FP8 blocks on MLA and experts; vLLM DP without EP"},
	{Name: "deepseek-lite-tp2-to-tp4", Config: "deepseek-lite", Train: "tp=2", Gen: "tp=4",
		Note: "q_lora_rank null (V2-Lite style): q_proj column-parallel, kv_a_proj_with_mqa alone (no fused_qkv_a_proj)"},
	{Name: "kimi-dp2ep2-to-ep4", Config: "kimi-tiny", Train: "dp=2,ep=2", Gen: "tp=2,dp=2,ep=4",
		Note: "kimi_k2 (DeepSeek-V3's code): 12 experts over 4 EP ranks; a vocabulary of 320"},
	{Name: "glm-tp2dp2ep2-to-ep4", Config: "glm-tiny", Train: "tp=2,dp=2,ep=2", Gen: "tp=2,dp=2,ep=4",
		Note: "GLM-4.5: q, k, v biases, qk norms, e_score_correction_bias; its shared experts stay split under sequence-parallel MoE"},
	{Name: "gptoss-tp2dp2ep2-to-tp2dp2", Config: "gptoss-tiny", Train: "tp=2,dp=2,ep=2", Gen: "tp=2,dp=2",
		Note: "gpt-oss: sinks by head, interleaved [E, H, 2I] experts transposed on both sides, down_proj_bias on vLLM's rank 0 only"},
	{Name: "gptoss-etp1-to-ep4", Config: "gptoss-tiny", Train: "tp=2,dp=2,ep=2,etp=1", Gen: "tp=2,dp=2,ep=4",
		Note: "gpt-oss with vLLM EP: one expert per rank, biases with them"},
	{Name: "mixtral-dp2ep2-to-ep4", Config: "mixtral-tiny", Train: "dp=2,ep=2", Gen: "tp=2,dp=2,ep=4",
		Note: "6 experts over 4 vLLM EP ranks: 2, 2, 1, 1"},
}

// caseLayouts lays a case out with m2n.
func caseLayouts(t *testing.T, c refCase) *model.Layouts {
	t.Helper()
	m, err := model.Load(filepath.Join(frameworkDir, "models", c.Config+".json"), model.LoadOptions{MTP: c.MTP})
	if err != nil {
		t.Fatal(err)
	}
	tr, err := model.ParseTrainer(c.Train)
	if err != nil {
		t.Fatal(err)
	}
	g, err := model.ParseGenerator(c.Gen)
	if err != nil {
		t.Fatal(err)
	}
	var mode fp8.Mode
	if c.FP8 != "" {
		if mode, err = fp8.ParseMode(c.FP8); err != nil {
			t.Fatal(err)
		}
	}
	l, err := model.NewQuantized(m, tr, g, mode)
	if err != nil {
		t.Fatalf("%s: %v", c.Name, err)
	}
	return l
}

// flatOf returns the transformers flat index of element idx (over the
// whole tensor's LayoutShape) of tensor w.
func flatOf(w model.Tensor, idx []int64) int64 {
	var lin int64
	for d, i := range idx {
		lin = lin*w.LayoutShape[d] + i
	}
	if !w.Transposed {
		return lin
	}
	// the layout moves the shape the frameworks hold (Shape with its last
	// two dims swapped): back to Shape
	ms := slices.Clone(w.Shape)
	ms[len(ms)-1], ms[len(ms)-2] = ms[len(ms)-2], ms[len(ms)-1]
	mi := make([]int64, len(ms))
	for d := len(ms) - 1; d >= 0; d-- {
		mi[d] = lin % ms[d]
		lin /= ms[d]
	}
	n := len(mi)
	mi[n-1], mi[n-2] = mi[n-2], mi[n-1]
	var out int64
	for d, i := range mi {
		out = out*w.Shape[d] + i
	}
	return out
}

// m2nRank returns what m2n says one rank holds, buffer by buffer: every
// element's tensor (index into names, -1 none) and flat index, from the
// entries' views and boxes.
func m2nRank(l *model.Layouts, stages []*model.Stage, side model.Side, rank int, names map[string]int32) map[string]*refBuf {
	out := map[string]*refBuf{}
	for _, s := range stages {
		for _, b := range s.Buffers(side, rank) {
			rb := &refBuf{name: b.Name, fp8: b.DType == dtype.FP8E4M3}
			rb.pad(b.Elems)
			out[b.Name] = rb
		}
		for _, x := range s.Tensors {
			p, ok := x.Part(side, rank)
			if !ok {
				continue
			}
			box, _ := x.Box(side, rank)
			sh := box.Shape()
			st := p.View.ResolvedStrides(sh)
			w := x.Whole()
			rb := out[p.Buffer]
			n := box.Elems()
			idx := make([]int64, len(sh))
			g := make([]int64, len(sh))
			for k := int64(0); k < n; k++ {
				rem := k
				for d := len(sh) - 1; d >= 0; d-- {
					idx[d] = rem % sh[d]
					rem /= sh[d]
				}
				pos := p.View.Offset
				for d := range sh {
					pos += idx[d] * st[d]
					g[d] = box.Lo[d] + idx[d]
				}
				if rb.tensor[pos] != -1 {
					rb.tensor[pos] = -2 // two elements in one place: never a match
					continue
				}
				rb.tensor[pos], rb.flat[pos] = names[w.Name], flatOf(w, g)
			}
		}
	}
	return out
}

// compareRank checks m2n's buffers of a rank against the reference's,
// element by element.
func compareRank(t *testing.T, what string, got map[string]*refBuf, want *refRank, ref *refModel, names []string) {
	t.Helper()
	var gotNames, wantNames []string
	for n := range got {
		gotNames = append(gotNames, n)
	}
	for _, b := range want.bufs {
		wantNames = append(wantNames, b.name)
	}
	sort.Strings(gotNames)
	sort.Strings(wantNames)
	if !slices.Equal(gotNames, wantNames) {
		t.Errorf("%s: m2n buffers %v\nthe frameworks' %v", what, gotNames, wantNames)
		return
	}
	for _, wb := range want.bufs {
		gb := got[wb.name]
		if len(gb.tensor) != len(wb.tensor) || gb.fp8 != wb.fp8 {
			t.Errorf("%s: buffer %s has %d elements (fp8 %v), the framework's %d (fp8 %v)", what, wb.name, len(gb.tensor), gb.fp8, len(wb.tensor), wb.fp8)
			continue
		}
		for i := range wb.tensor {
			wt, wf := wb.tensor[i], wb.flat[i]
			wname := "padding"
			if wt >= 0 {
				wname = ref.tensors[wt].name
			}
			gname := "padding"
			if gb.tensor[i] >= 0 {
				gname = names[gb.tensor[i]]
			} else if gb.tensor[i] == -2 {
				gname = "two elements"
			}
			if gname != wname || (wt >= 0 && gb.flat[i] != wf) {
				t.Errorf("%s: buffer %s element %d holds %s[%d], the framework %s[%d]", what, wb.name, i, gname, gb.flat[i], wname, wf)
				break
			}
		}
	}
}

// TestFrameworkConformance checks, for every case of the suite, that what
// m2n lays out is, element by element on every rank of both sides, what
// the frameworks hold (the reference in conformance_ref_test.go), and that
// the suite's stored data (testdata/frameworks, read by refit's and the
// Python package's tests) is the reference's.
func TestFrameworkConformance(t *testing.T) {
	for _, c := range frameworkCases {
		t.Run(c.Name, func(t *testing.T) {
			l := caseLayouts(t, c)
			m := l.Model
			ref := buildReference(*m.Config, c.MTP, parseRefTrainer(c.Train), parseRefGenerator(c.Gen), c.FP8 != "")
			names := make([]string, len(m.Tensors))
			index := map[string]int32{}
			for i, x := range m.Tensors {
				names[i], index[x.Name] = x.Name, int32(i)
			}
			// the same transformers tensors
			var refNames []string
			for _, rt := range ref.tensors {
				refNames = append(refNames, rt.name)
				i, ok := index[rt.name]
				var x model.Tensor
				if ok {
					x = m.Tensors[i]
				}
				if !ok || !slices.Equal(x.Shape, rt.shape) {
					t.Errorf("tensor %s %v: m2n has %v (present %v)", rt.name, rt.shape, x.Shape, ok)
				}
			}
			if len(refNames) != len(m.Tensors) {
				t.Errorf("the reference names %d tensors, m2n %d", len(refNames), len(m.Tensors))
			}
			P := l.Stages[0].Trainers
			for s, st := range l.Stages {
				for r := 0; r < P; r++ {
					compareRank(t, fmt.Sprintf("trainer stage %d rank %d", s, r), m2nRank(l, []*model.Stage{st}, model.Src, r, index), ref.train[s][r], ref, names)
				}
			}
			for g := range ref.gen {
				compareRank(t, fmt.Sprintf("generator rank %d", g), m2nRank(l, l.Stages, model.Dst, P+g, index), ref.gen[g], ref, names)
			}
			data, err := encodeSuite(suiteFile(c, ref))
			if err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(frameworkDir, c.Name+".json")
			if *rewrite {
				if err := os.WriteFile(path, data, 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			stored, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (go test ./model -run TestFrameworkConformance -rewrite writes it)", err)
			}
			if !bytes.Equal(bytes.TrimSpace(stored), bytes.TrimSpace(data)) {
				t.Errorf("%s differs from the reference (go test ./model -run TestFrameworkConformance -rewrite, and review the diff)", path)
			}
		})
	}
}

func suiteFile(c refCase, ref *refModel) frameworktest.Case {
	f := frameworktest.Case{Case: c.Name, Config: "models/" + c.Config + ".json", MTP: c.MTP, Train: c.Train, Gen: c.Gen, FP8: c.FP8, Note: c.Note}
	for _, rt := range ref.tensors {
		f.Tensors = append(f.Tensors, frameworktest.Tensor{Name: rt.name, Shape: rt.shape})
	}
	enc := func(rk *refRank) []frameworktest.Buffer {
		var out []frameworktest.Buffer
		for _, b := range rk.bufs {
			out = append(out, frameworktest.Buffer{Name: b.name, Elems: len(b.tensor), FP8: b.fp8, Runs: runsOf(b)})
		}
		return out
	}
	for s, ranks := range ref.train {
		for r, rk := range ranks {
			f.Trainer = append(f.Trainer, frameworktest.Rank{Stage: s, Rank: r, Buffers: enc(rk)})
		}
	}
	for g, rk := range ref.gen {
		f.Generator = append(f.Generator, frameworktest.Rank{Stage: -1, Rank: g, Buffers: enc(rk)})
	}
	return f
}

// encodeSuite writes a suite file with one line per tensor and per buffer,
// so that a change shows as a change of the buffers it touches.
func encodeSuite(f frameworktest.Case) ([]byte, error) {
	var b bytes.Buffer
	line := func(prefix string, v any, comma bool) error {
		data, err := json.Marshal(v)
		if err != nil {
			return err
		}
		b.WriteString(prefix)
		b.Write(data)
		if comma {
			b.WriteByte(',')
		}
		b.WriteByte('\n')
		return nil
	}
	b.WriteString("{\n")
	for _, kv := range []struct {
		k string
		v any
	}{{"case", f.Case}, {"config", f.Config}, {"mtp", f.MTP}, {"train", f.Train}, {"gen", f.Gen}, {"fp8", f.FP8}, {"note", f.Note}} {
		if err := line(fmt.Sprintf(" %q: ", kv.k), kv.v, true); err != nil {
			return nil, err
		}
	}
	b.WriteString(" \"tensors\": [\n")
	for i, x := range f.Tensors {
		if err := line("  ", x, i+1 < len(f.Tensors)); err != nil {
			return nil, err
		}
	}
	b.WriteString(" ],\n")
	for si, side := range []struct {
		key   string
		ranks []frameworktest.Rank
	}{{"trainer", f.Trainer}, {"generator", f.Generator}} {
		fmt.Fprintf(&b, " %q: [\n", side.key)
		for ri, r := range side.ranks {
			fmt.Fprintf(&b, "  {\"stage\": %d, \"rank\": %d, \"buffers\": [\n", r.Stage, r.Rank)
			for bi, x := range r.Buffers {
				if err := line("   ", x, bi+1 < len(r.Buffers)); err != nil {
					return nil, err
				}
			}
			b.WriteString("  ]}")
			if ri+1 < len(side.ranks) {
				b.WriteByte(',')
			}
			b.WriteByte('\n')
		}
		b.WriteString(" ]")
		if si == 0 {
			b.WriteByte(',')
		}
		b.WriteByte('\n')
	}
	b.WriteString("}\n")
	var check frameworktest.Case // the file must read back as what it encodes
	if err := json.Unmarshal(b.Bytes(), &check); err != nil {
		return nil, fmt.Errorf("suite file does not read back: %w", err)
	}
	return b.Bytes(), nil
}

// runsOf compresses a buffer's elements into runs of one tensor whose flat
// indices advance by a constant step.
func runsOf(b *refBuf) [][5]int64 {
	out := [][5]int64{}
	for i := 0; i < len(b.tensor); {
		if b.tensor[i] < 0 {
			i++
			continue
		}
		j, step := i+1, int64(1)
		if j < len(b.tensor) && b.tensor[j] == b.tensor[i] {
			step = b.flat[j] - b.flat[i]
		}
		for j < len(b.tensor) && b.tensor[j] == b.tensor[i] && b.flat[j] == b.flat[j-1]+step {
			j++
		}
		out = append(out, [5]int64{int64(i), int64(j - i), int64(b.tensor[i]), b.flat[i], step})
		i = j
	}
	return out
}
