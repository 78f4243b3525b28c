package model

import (
	"slices"
	"testing"

	"github.com/m2n-dev/m2n/dtype"
)

// value is what the oracle stores for element linear (row-major in the
// transformers shape) of tensor id.
func value(id int, linear int64) int64 { return int64(id)<<40 | linear }

// fill writes, through the views under test, every part a rank holds on a
// side into its local buffers: element i of a part (local index) goes to
// View.Offset + i . strides, with the value of its global element, whose
// linear index is read in the LayoutShape (a row-major reshape of the
// transformers shape, so the same index).
func fill(t *testing.T, s *Stage, side Side, rank int, ids map[string]int) map[string][]int64 {
	t.Helper()
	bufs := map[string][]int64{}
	for _, b := range s.Buffers(side, rank) {
		buf := make([]int64, b.Elems)
		for i := range buf {
			buf[i] = -1
		}
		bufs[b.Name] = buf
	}
	for _, x := range s.Tensors {
		p, ok := x.Part(side, rank)
		if !ok {
			continue
		}
		box, _ := x.Box(side, rank) // in the whole tensor's layout shape
		sh, _ := localShape(x, side, rank)
		whole := x.Whole()
		st := p.View.ResolvedStrides(sh)
		buf := bufs[p.Buffer]
		n := elems(sh)
		idx := make([]int64, len(sh))
		for k := int64(0); k < n; k++ {
			rem := k
			for d := len(sh) - 1; d >= 0; d-- {
				idx[d] = rem % sh[d]
				rem /= sh[d]
			}
			var lin, pos int64
			pos = p.View.Offset
			for d := range sh {
				lin = lin*whole.LayoutShape[d] + box.Lo[d] + idx[d]
				pos += idx[d] * st[d]
			}
			if buf[pos] != -1 {
				t.Fatalf("%s: two elements at %d of %s", x.Name, pos, p.Buffer)
			}
			buf[pos] = value(ids[whole.Name], lin)
		}
	}
	return bufs
}

// rows returns the expected buffer holding the given rows (row index into
// a [rows, width] view of the tensor) of tensor name, in order.
func rows(ids map[string]int, name string, width int64, list ...int64) []int64 {
	var out []int64
	for _, r := range list {
		for c := int64(0); c < width; c++ {
			out = append(out, value(ids[name], r*width+c))
		}
	}
	return out
}

func span(lo, n int64) []int64 {
	out := make([]int64, n)
	for i := range out {
		out[i] = lo + int64(i)
	}
	return out
}

// TestViewsMatchFrameworks builds, independently of the layout code, the
// fused buffers Megatron-Core and vLLM hold on each rank (from the
// frameworks' rules, over the transformers tensors), and checks that the
// views put exactly those elements there.
func TestViewsMatchFrameworks(t *testing.T) {
	// 8 heads, 2 key-value heads, head_dim 2, hidden 8, intermediate 8;
	// biases on q, k and v.
	const heads, kv, hd, H, I = 8, 2, 2, 8, 8
	c := Config{ModelType: "llama", DType: dtype.F32, VocabSize: 8, HiddenSize: H, IntermediateSize: I, Layers: 1,
		Heads: heads, KVHeads: kv, HeadDim: hd, AttentionBias: true}
	m, err := FromConfig("tiny", c, LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string]int{}
	for i, x := range m.Tensors {
		ids[x.Name] = i
	}
	const a = "model.layers.0.self_attn."
	// megatron: per local query group G, q heads of G, then k head G, then v head G.
	megatronQKV := func(tp, TP int, suffix string, width int64) []int64 {
		var out []int64
		gpr := kv / TP
		for j := 0; j < gpr; j++ {
			G := int64(tp*gpr + j)
			out = append(out, rows(ids, a+"q_proj."+suffix, width, span(G*(heads/kv)*hd, (heads/kv)*hd)...)...)
			out = append(out, rows(ids, a+"k_proj."+suffix, width, span(G*hd, hd)...)...)
			out = append(out, rows(ids, a+"v_proj."+suffix, width, span(G*hd, hd)...)...)
		}
		return out
	}
	// vllm: the rank's q heads, then its k head(s), then its v head(s).
	vllmQKV := func(tp, TP int, suffix string, width int64) []int64 {
		hpr := int64(heads / TP)
		var k0, kn int64
		if TP >= kv {
			k0, kn = int64(tp/(TP/kv)), 1
		} else {
			k0, kn = int64(tp*kv/TP), kv/int64(TP)
		}
		out := rows(ids, a+"q_proj."+suffix, width, span(int64(tp)*hpr*hd, hpr*hd)...)
		out = append(out, rows(ids, a+"k_proj."+suffix, width, span(k0*hd, kn*hd)...)...)
		return append(out, rows(ids, a+"v_proj."+suffix, width, span(k0*hd, kn*hd)...)...)
	}
	gateUp := func(tp, TP int) []int64 {
		n := int64(I / TP)
		out := rows(ids, "model.layers.0.mlp.gate_proj.weight", H, span(int64(tp)*n, n)...)
		return append(out, rows(ids, "model.layers.0.mlp.up_proj.weight", H, span(int64(tp)*n, n)...)...)
	}
	for _, tc := range []struct{ trainTP, genTP, genDP int }{{1, 1, 1}, {2, 4, 1}, {2, 8, 2}, {1, 2, 2}, {2, 1, 3}} {
		l, err := New(m, Trainer{TP: tc.trainTP, DP: 2}, Generator{TP: tc.genTP, DP: tc.genDP})
		if err != nil {
			t.Fatal(err)
		}
		s := l.Stages[0]
		for r := 0; r < s.Trainers+s.Generators; r++ {
			side, tp, TP := Src, r%tc.trainTP, tc.trainTP
			qkv, fc1 := megatronQKV, "linear_fc1"
			qkvName := "linear_qkv"
			if r >= s.Trainers {
				side, tp, TP = Dst, (r-s.Trainers)%tc.genTP, tc.genTP
				qkv, fc1, qkvName = vllmQKV, "gate_up_proj", "qkv_proj"
			}
			bufs := fill(t, s, side, r, ids)
			for _, w := range []struct {
				buf  string
				want []int64
			}{
				{a + qkvName + ".weight", qkv(tp, TP, "weight", H)},
				{a + qkvName + ".bias", qkv(tp, TP, "bias", 1)},
				{"model.layers.0.mlp." + fc1 + ".weight", gateUp(tp, TP)},
			} {
				if got := bufs[w.buf]; !slices.Equal(got, w.want) {
					t.Errorf("train tp=%d gen tp=%d,dp=%d: %v rank %d %s\n got %v\nwant %v", tc.trainTP, tc.genTP, tc.genDP, side, r, w.buf, got, w.want)
				}
			}
		}
	}
}

// TestExpertViewsMatchFrameworks: Megatron's grouped experts with
// expert-TP hold, per local expert, the rank's gate rows then its up rows;
// vLLM's w13 likewise over TP, or whole experts over EP.
func TestExpertViewsMatchFrameworks(t *testing.T) {
	const E, H, I = 4, 3, 4
	c := Config{ModelType: "qwen3_moe", DType: dtype.BF16, VocabSize: 8, HiddenSize: H, IntermediateSize: 8, Layers: 1,
		Heads: 4, KVHeads: 2, HeadDim: 2, Experts: E, MoEIntermediateSize: I, DecoderSparseStep: 1, ExpertsPerToken: 2}
	m, err := FromConfig("tiny-moe", c, LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string]int{}
	for i, x := range m.Tensors {
		ids[x.Name] = i
	}
	const gu, dn = "model.layers.0.mlp.experts.gate_up_proj", "model.layers.0.mlp.experts.down_proj"
	// experts [e0, e0+ne) with intermediate rows [i0, i0+ni) of each half.
	gateUp := func(e0, ne, i0, ni int64) []int64 {
		var out []int64
		for e := e0; e < e0+ne; e++ {
			for half := int64(0); half < 2; half++ {
				out = append(out, rows(ids, gu, H, span(e*2*I+half*I+i0, ni)...)...)
			}
		}
		return out
	}
	down := func(e0, ne, i0, ni int64) []int64 {
		var out []int64
		for e := e0; e < e0+ne; e++ {
			for h := int64(0); h < H; h++ {
				for _, i := range span(i0, ni) {
					out = append(out, value(ids[dn], (e*H+h)*I+i))
				}
			}
		}
		return out
	}
	for _, tc := range []struct {
		tr  Trainer
		gen Generator
	}{
		{Trainer{TP: 2, DP: 2, EP: 2, ETP: 2}, Generator{TP: 2}},
		{Trainer{DP: 4, EP: 4}, Generator{TP: 2, DP: 2, EP: 4}},
		{Trainer{TP: 2, CP: 2, EP: 2}, Generator{TP: 4}},
	} {
		l, err := New(m, tc.tr, tc.gen)
		if err != nil {
			t.Fatal(err)
		}
		tr, g := l.Trainer, l.Generator
		s := l.Stages[0]
		for r := 0; r < s.Trainers+s.Generators; r++ {
			var wantGU, wantDown []int64
			side := Src
			if r < s.Trainers {
				etp, ep := int64(r%tr.ETP), int64(r/tr.ETP%tr.EP)
				ne, ni := int64(E/tr.EP), int64(I/tr.ETP)
				wantGU, wantDown = gateUp(ep*ne, ne, etp*ni, ni), down(ep*ne, ne, etp*ni, ni)
			} else {
				side = Dst
				gr := int64(r - s.Trainers)
				if g.EP > 1 {
					ne := int64(E / g.EP)
					wantGU, wantDown = gateUp(gr*ne, ne, 0, I), down(gr*ne, ne, 0, I)
				} else {
					ni := int64(I / g.TP)
					tp := gr % int64(g.TP)
					wantGU, wantDown = gateUp(0, E, tp*ni, ni), down(0, E, tp*ni, ni)
				}
			}
			bufs := fill(t, s, side, r, ids)
			if !slices.Equal(bufs[gu], wantGU) || !slices.Equal(bufs[dn], wantDown) {
				t.Errorf("%v -> %v: %v rank %d:\n gate_up %v\n   want %v\n down %v\n   want %v", tr, g, side, r, bufs[gu], wantGU, bufs[dn], wantDown)
			}
		}
	}
}
