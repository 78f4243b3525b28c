package model

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/m2n-dev/m2n/dtype"
	"github.com/m2n-dev/m2n/placement"
)

func mustLayouts(t *testing.T, spec string, opts LoadOptions, train, gen string) *Layouts {
	t.Helper()
	m, err := Load(spec, opts)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := ParseTrainer(train)
	if err != nil {
		t.Fatal(err)
	}
	g, err := ParseGenerator(gen)
	if err != nil {
		t.Fatal(err)
	}
	l, err := New(m, tr, g)
	if err != nil {
		t.Fatalf("%s %s -> %s: %v", spec, train, gen, err)
	}
	return l
}

// runs returns the contiguous element runs [lo, hi) a view of a part of
// the given local shape covers, dims merged where they are contiguous.
func runs(shape []int64, v placement.View) [][2]int64 {
	if elems(shape) == 0 {
		return nil
	}
	st := v.ResolvedStrides(shape)
	n := len(shape)
	run, d := int64(1), n-1
	for ; d >= 0; d-- {
		if shape[d] == 1 {
			continue
		}
		if st[d] != run {
			break
		}
		run *= shape[d]
	}
	var out [][2]int64
	idx := make([]int64, d+1)
	for {
		off := v.Offset
		for k := 0; k <= d; k++ {
			off += idx[k] * st[k]
		}
		out = append(out, [2]int64{off, off + run})
		k := d
		for ; k >= 0; k-- {
			idx[k]++
			if idx[k] < shape[k] {
				break
			}
			idx[k] = 0
		}
		if k < 0 {
			return out
		}
	}
}

// checkLayouts checks every invariant of a model's layouts: each tensor in
// one stage, meshes on their side of each communicator, bytes over ranks
// equal to the tensor's bytes times its replication on both sides, and on
// every rank and side the views of one buffer valid, disjoint and covering
// it exactly.
// checkLayouts checks every invariant of a model's layouts: every tensor
// in exactly one stage; its entries (the tensor, or its pieces) tile it
// exactly; on each side every rank's entries tile that rank's part of the
// whole tensor (pieces on the ranks that hold them); every buffer's views
// are valid, disjoint, and cover it but for its padding rows; the bytes a
// rank moves are those its buffers hold of real rows.
func checkLayouts(t *testing.T, l *Layouts) {
	t.Helper()
	seen := map[string]int{}
	for _, s := range l.Stages {
		P, G := s.Trainers, s.Generators
		if len(s.Members) != P+G || P != l.Trainer.stageRanks() || G != l.Generator.Ranks() {
			t.Fatalf("stage %d: %d members, %d trainers, %d generators", s.Index, len(s.Members), P, G)
		}
		entries := map[string][]*TensorLayout{}
		for _, x := range s.Tensors {
			w := x.Whole()
			if len(entries[w.Name]) == 0 {
				seen[w.Name]++
			}
			entries[w.Name] = append(entries[w.Name], x)
		}
		for name, xs := range entries {
			w := xs[0].whole
			var tiled int64
			for _, x := range xs {
				tiled += x.Elems()
				if (x.Origin == nil) != (len(xs) == 1) || (x.Origin == nil) != (x.Name == name) {
					t.Fatalf("%s: %d entries, entry %s has origin %v", name, len(xs), x.Name, x.Origin)
				}
			}
			if tiled != w.Elems() {
				t.Fatalf("%s: entries hold %d elements, the tensor %d", name, tiled, w.Elems())
			}
			for side := Src; side <= Dst; side++ {
				lo, hi := 0, P
				if side == Dst {
					lo, hi = P, P+G
				}
				for r := lo; r < hi; r++ {
					wb, ok := w.side[side].rankBox(w.LayoutShape, r)
					if !ok {
						t.Fatalf("%s: %v rank %d holds no part of the whole tensor", name, side, r)
					}
					var got int64
					for _, x := range xs {
						m := x.Layout(side).Mesh()
						if mi, mx := slices.Min(m.Ranks()), slices.Max(m.Ranks()); mi < lo || mx >= hi {
							t.Fatalf("%s: %v mesh %v outside ranks [%d, %d)", x.Name, side, m, lo, hi)
						}
						b, ok := x.Box(side, r)
						if !ok {
							continue
						}
						for d := range b.Lo {
							if b.Lo[d] < wb.Lo[d] || b.Hi[d] > wb.Hi[d] {
								t.Fatalf("%s: %v rank %d holds %v, outside its part %v of the whole", x.Name, side, r, b, wb)
							}
						}
						got += b.Elems()
					}
					if got != wb.Elems() {
						t.Fatalf("%s: %v rank %d: entries hold %d elements of its part %v (%d)", name, side, r, got, wb, wb.Elems())
					}
				}
			}
		}
		for side := Src; side <= Dst; side++ {
			lo, hi := 0, P
			if side == Dst {
				lo, hi = P, P+G
			}
			inBuffer := map[string][]*TensorLayout{}
			for _, x := range s.Tensors {
				inBuffer[x.bufferName(side)] = append(inBuffer[x.bufferName(side)], x)
			}
			for r := lo; r < hi; r++ {
				var real int64
				for _, b := range s.Buffers(side, r) {
					var rs [][2]int64
					var held int64
					for _, x := range inBuffer[b.Name] {
						p, ok := x.Part(side, r)
						if !ok || x.bufferName(side) != b.Name {
							continue
						}
						if p.Buffer != b.Name || !slices.Contains(b.Tensors, x.Whole().Name) {
							t.Fatalf("stage %d %v rank %d: %s in buffer %q, listed in %q (%v)", s.Index, side, r, x.Name, p.Buffer, b.Name, b.Tensors)
						}
						sh, _ := localShape(x, side, r)
						if err := p.View.Validate(sh); err != nil {
							t.Fatalf("%s on %v rank %d: %v", x.Name, side, r, err)
						}
						held += elems(sh)
						rs = append(rs, runs(sh, p.View)...)
					}
					slices.SortFunc(rs, func(a, b [2]int64) int { return int(a[0] - b[0]) })
					at := int64(0)
					for _, x := range rs {
						if x[0] != at {
							t.Fatalf("stage %d %v rank %d buffer %s: run at %d, want %d (gap or overlap)", s.Index, side, r, b.Name, x[0], at)
						}
						at = x[1]
					}
					if at != held || held > b.Elems {
						t.Fatalf("stage %d %v rank %d buffer %s: views cover %d, hold %d, buffer has %d elements", s.Index, side, r, b.Name, at, held, b.Elems)
					}
					if held < b.Elems {
						g := s.byName[side][b.Name]
						if len(g.members) != 1 || g.members[0].side[side].rows == 0 {
							t.Fatalf("stage %d %v rank %d buffer %s: %d of %d elements held, and it is not padded", s.Index, side, r, b.Name, held, b.Elems)
						}
					}
					real += held * int64(b.DType.Size())
				}
				if real != s.localBytes(side, r) {
					t.Fatalf("stage %d %v rank %d: buffers hold %d bytes of real rows, entries %d", s.Index, side, r, real, s.localBytes(side, r))
				}
			}
		}
	}
	for _, x := range l.Model.Tensors {
		if seen[x.Name] != 1 {
			t.Fatalf("%s sits in %d stages", x.Name, seen[x.Name])
		}
	}
}

func (s *Stage) tensor(name string) *TensorLayout {
	for _, x := range s.Tensors {
		if x.Name == name {
			return x
		}
	}
	return nil
}

// rankBytes returns the least and most bytes a trainer rank and a generator
// rank hold.
func rankBytes(l *Layouts) (srcMin, srcMax, dstMin, dstMax int64) {
	srcMin, dstMin = 1<<62, 1<<62
	T := l.Trainer.Ranks()
	for w := 0; w < l.World(); w++ {
		s, d := l.RankBytes(w)
		if w < T {
			srcMin, srcMax = min(srcMin, s), max(srcMax, s)
		} else {
			dstMin, dstMax = min(dstMin, d), max(dstMax, d)
		}
	}
	return
}

func stageCounts(l *Layouts) []int {
	var out []int
	for _, s := range l.Stages {
		out = append(out, s.Layers[1]-s.Layers[0])
	}
	return out
}

// TestPublishedConfigurations lays out the three reference configurations
// and checks every invariant and a few layouts by hand.
func TestPublishedConfigurations(t *testing.T) {
	for _, tc := range []struct {
		name, spec, train, gen string
		mtp                    bool
		stages                 []int
		layouts                map[string][2]string // tensor: src, dst
	}{
		{"DeepSeek-V3 128 -> 128", "deepseek-v3", "tp=1,dp=32,pp=4,ep=16", "tp=8,dp=16", false, []int{15, 16, 16, 14},
			map[string][2]string{
				"model.embed_tokens.weight": {"129280x7168 bf16 on 32[0-31] R", "129280x7168 bf16 on 16x8[32-159] R,S0"},
				// vLLM's DP without EP: the experts split over all tp x dp = 128 ranks
				"model.layers.3.mlp.experts.gate_up_proj":          {"256x2x2048x7168 bf16 on 2x16[0-31] R,S0", "256x2x2048x7168 bf16 on 128[32-159] S2"},
				"model.layers.3.mlp.experts.down_proj":             {"256x7168x2048 bf16 on 2x16[0-31] R,S0", "256x7168x2048 bf16 on 128[32-159] S2"},
				"model.layers.0.self_attn.o_proj.weight":           {"7168x16384 bf16 on 32[0-31] R", "7168x16384 bf16 on 16x8[32-159] R,S1"},
				"model.layers.0.self_attn.q_a_proj.weight":         {"1536x7168 bf16 on 32[0-31] R", "1536x7168 bf16 on 128[32-159] R"},
				"model.layers.60.mlp.gate.e_score_correction_bias": {"256 f32 on 32[0-31] R", "256 f32 on 128[32-159] R"},
				"lm_head.weight": {"129280x7168 bf16 on 32[0-31] R", "129280x7168 bf16 on 16x8[32-159] R,S0"},
			}},
		{"DeepSeek-V3 with MTP", "deepseek-v3", "tp=1,dp=32,pp=4,ep=16", "tp=8,dp=16", true, []int{15, 16, 16, 14},
			map[string][2]string{
				"model.layers.61.eh_proj.weight": {"7168x14336 bf16 on 32[0-31] R", "7168x14336 bf16 on 128[32-159] R"},
			}},
		{"Qwen3-235B-A22B 64 -> 64", "qwen3-235b-a22b", "tp=2,cp=2,dp=4,pp=4,ep=16,etp=1", "tp=8,dp=8", false, []int{23, 24, 24, 23},
			map[string][2]string{
				"model.layers.0.self_attn.q_proj.weight":  {"4x2048x4096 bf16 on 8x2[0-15] R,S0", "4x2048x4096 bf16 on 8x4x2[16-79] R,S0,S1"},
				"model.layers.0.self_attn.k_proj.weight":  {"4x128x4096 bf16 on 8x2[0-15] R,S0", "4x128x4096 bf16 on 8x4x2[16-79] R,S0,R"},
				"model.layers.0.self_attn.o_proj.weight":  {"4096x8192 bf16 on 8x2[0-15] R,S1", "4096x8192 bf16 on 8x8[16-79] R,S1"},
				"model.layers.0.mlp.experts.gate_up_proj": {"128x2x1536x4096 bf16 on 16[0-15] S0", "128x2x1536x4096 bf16 on 64[16-79] S2"},
				// Megatron pads 151936 to a multiple of 128 x 2: rank 1's rows start at 76032,
				// vLLM's tp=8 ranks at multiples of 18992: the piece between them
				"model.embed_tokens.weight[75968:76032]": {"64x4096 bf16 on 8[0,2,4,6,8,10,12,14] R", "64x4096 bf16 on 8[20,28,36,44,52,60,68,76] R"},
			}},
		{"DeepSeek-V3 NeMo-RL PP16 x EP16 -> TP32 x DP8", "deepseek-v3", "pp=16,dp=16,ep=16", "tp=32,dp=8", false,
			[]int{3, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 2},
			map[string][2]string{
				"model.layers.3.mlp.experts.gate_up_proj":          {"256x2x2048x7168 bf16 on 16[0-15] S0", "256x2x2048x7168 bf16 on 256[16-271] S2"},
				"model.layers.0.mlp.down_proj.weight":              {"7168x18432 bf16 on 16[0-15] R", "7168x18432 bf16 on 8x32[16-271] R,S1"},
				"model.layers.3.mlp.shared_experts.up_proj.weight": {"2048x7168 bf16 on 16[0-15] R", "2048x7168 bf16 on 8x32[16-271] R,S0"},
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := mustLayouts(t, tc.spec, LoadOptions{MTP: tc.mtp}, tc.train, tc.gen)
			if got := stageCounts(l); !slices.Equal(got, tc.stages) {
				t.Errorf("stage layers %v, want %v", got, tc.stages)
			}
			for name, want := range tc.layouts {
				found := false
				for _, s := range l.Stages {
					if x := s.tensor(name); x != nil {
						found = true
						if got := [2]string{x.Src.String(), x.Dst.String()}; got != want {
							t.Errorf("%s:\n got %v\nwant %v", name, got, want)
						}
					}
				}
				if !found {
					t.Errorf("no %s", name)
				}
			}
			checkLayouts(t, l)
			a, b, c, d := rankBytes(l)
			t.Logf("%s: %d tensors, %d params, %d bytes; trainer rank %d..%d bytes, generator rank %d..%d bytes",
				tc.name, len(l.Model.Tensors), l.Model.Params(), l.Model.Bytes(), a, b, c, d)
		})
	}
}

// scaledCase is a scaled model (spec, scale) between a trainer and a
// generator layout; scaledCases are many small ones, those the CPU refits
// run among them.
type scaledCase struct {
	spec       string
	scale      int64
	train, gen string
}

var scaledCases = []scaledCase{
	{"deepseek-v3", 32, "tp=2,pp=2,dp=2,ep=4,etp=1", "tp=4,dp=2"},
	{"deepseek-v3", 32, "tp=1,pp=4,dp=2,ep=2", "tp=2,dp=2,ep=4"},
	{"deepseek-v3", 32, "pp=4,dp=2,ep=2", "tp=2,dp=2,ep=4"},
	{"deepseek-v3", 16, "tp=2,pp=2,dp=2,ep=2", "tp=8"},
	{"deepseek-v3", 32, "tp=2,pp=2,dp=2,ep=2", "tp=2,dp=2,ep=4"}, // sequence-parallel MoE: shared experts whole
	{"deepseek-v3", 64, "tp=1,pp=2,ep=2,dp=2", "tp=2,dp=3,ep=6"}, // 4 experts over 6 EP ranks: vLLM's 1,1,1,1,0,0
	{"qwen3-235b-a22b", 16, "tp=2,cp=2,pp=2,ep=4,etp=1", "tp=8"},
	{"qwen3-235b-a22b", 16, "tp=4,pp=2,dp=2,ep=2,etp=2", "tp=2,dp=4"},
	{"qwen3-235b-a22b", 16, "tp=2,pp=2,dp=2", "tp=4,dp=2,ep=8"},
	{"qwen3-235b-a22b", 16, "tp=8,pp=2", "tp=2,dp=2,engines=2"}, // Megatron tp above the 4 query groups
	{"qwen3-235b-a22b", 16, "tp=8,pp=2", "tp=4,dp=2,ep=8"},
	{"kimi-k2", 64, "tp=2,pp=2,ep=2,etp=1", "tp=2,dp=2,ep=4"},
	{"glm-4.5-air", 16, "tp=2,pp=2,dp=2,ep=2", "tp=4,dp=2"},
	{"gpt-oss-120b", 16, "tp=2,pp=2,ep=2,etp=1", "tp=2,dp=2"},
	{"gpt-oss-120b", 16, "tp=4,pp=2,ep=2,etp=2", "tp=2,dp=2,ep=4"},
	{"qwen2.5-72b", 32, "tp=4,pp=2", "tp=4,dp=2"},
	{"testdata/models/qwen3-0.6b.config.json", 8, "tp=2,pp=2", "tp=4,dp=2"},
	{"llama-3.1-70b", 32, "tp=4,pp=2", "tp=8"},
	{"llama-3.1-70b", 32, "tp=8", "tp=16"},
	{"llama-3.1-70b", 32, "tp=2,pp=4,dp=2", "tp=2,dp=4"},
	{"llama-3.1-70b", 32, "tp=2,pp=2,dp=2", "tp=8,dp=2"},
	{"testdata/models/mixtral-8x7b.config.json", 4, "tp=2,pp=2,ep=2,dp=2", "tp=4,dp=2"},
	{"testdata/models/qwen3-8b.config.json", 16, "tp=4,pp=3", "tp=8"},
}

// TestScaledLayouts checks the invariants for every scaledCase.
func TestScaledLayouts(t *testing.T) {
	for _, tc := range scaledCases {
		name := fmt.Sprintf("%s/%d %s -> %s", tc.spec, tc.scale, tc.train, tc.gen)
		t.Run(name, func(t *testing.T) {
			mtp := strings.HasPrefix(tc.spec, "deepseek")
			_ = mtp
			l := mustLayouts(t, tc.spec, LoadOptions{Scale: tc.scale, MTP: mtp}, tc.train, tc.gen)
			checkLayouts(t, l)
		})
	}
}

func TestStageLayers(t *testing.T) {
	for _, tc := range []struct {
		layers int
		tr     Trainer
		want   []int
	}{
		{61, Trainer{PP: 4}, []int{15, 16, 16, 14}},
		{61, Trainer{PP: 2}, []int{31, 30}},
		{61, Trainer{PP: 16}, []int{3, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 2}},
		{94, Trainer{PP: 4}, []int{23, 24, 24, 23}},
		{80, Trainer{PP: 4}, []int{20, 20, 20, 20}},
		{5, Trainer{PP: 4}, []int{2, 1, 1, 1}},
		{61, Trainer{PP: 4, FirstStageLayers: 13, LastStageLayers: 12}, []int{13, 18, 18, 12}},
		{61, Trainer{PP: 4, FirstStageLayers: 1}, []int{1, 20, 20, 20}},
		{61, Trainer{PP: 1}, []int{61}},
	} {
		got, err := stageLayers(tc.layers, tc.tr)
		if err != nil {
			t.Errorf("%d over %v: %v", tc.layers, tc.tr, err)
			continue
		}
		var counts []int
		for i, r := range got {
			counts = append(counts, r[1]-r[0])
			if i > 0 && r[0] != got[i-1][1] {
				t.Errorf("%d over %v: ranges %v not contiguous", tc.layers, tc.tr, got)
			}
		}
		if !slices.Equal(counts, tc.want) {
			t.Errorf("%d over %v: %v, want %v", tc.layers, tc.tr, counts, tc.want)
		}
	}
	for _, tc := range []struct {
		layers int
		tr     Trainer
		want   string
	}{
		{3, Trainer{PP: 4}, "pp=4 is more than the model's 3 layers"},
		{61, Trainer{PP: 4, FirstStageLayers: 14}, "pp=4 with first=14 last=0: the other 3 stages cannot share the remaining 47 of 61 layers evenly"},
		{61, Trainer{PP: 2, FirstStageLayers: 30, LastStageLayers: 30}, "the other 0 stages cannot share the remaining 1 of 61 layers"},
		{61, Trainer{PP: 1, LastStageLayers: 3}, "pp=1: first=0 last=3"},
	} {
		if _, err := stageLayers(tc.layers, tc.tr); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%d over %v: %v, want %q", tc.layers, tc.tr, err, tc.want)
		}
	}
}

// TestLayoutErrors: what does not divide is an error naming the tensor,
// the dim and both numbers.
func TestLayoutErrors(t *testing.T) {
	tiny := `{"tensors":[{"name":"model.embed_tokens.weight","shape":[10,4],"dtype":"bf16"},
		{"name":"model.layers.0.input_layernorm.weight","shape":[4],"dtype":"bf16"}]}`
	tinyModel, err := parseList("tiny", []byte(tiny))
	if err != nil {
		t.Fatal(err)
	}
	odd, err := FromConfig("odd", Config{ModelType: "llama", DType: dtype.BF16, VocabSize: 64, HiddenSize: 48, IntermediateSize: 48, Layers: 1,
		Heads: 12, KVHeads: 4, HeadDim: 4}, LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		spec       string
		m          *Model
		train, gen string
		want       string
	}{
		{"", odd, "tp=6", "tp=2", // 12 heads, 4 query groups: tp=6 neither divides nor is a multiple of them
			"tensor model.layers.0.self_attn.q_proj.weight: dim 0 (4 key-value heads) does not divide over trainer tp=6 (Megatron-Core needs tp to divide the query groups, or to be a multiple of them)"},
		{"qwen3-235b-a22b", nil, "tp=1", "tp=3", "tensor model.embed_tokens.weight: dim 0 (151936 vocabulary rows, 151936 once padded to a multiple of 64) does not divide over generator tp=3 (vLLM pads the vocabulary to a multiple of 64"},
		{"qwen3-235b-a22b", nil, "tp=1", "tp=128", "tensor model.layers.0.self_attn.q_proj.weight: its 64 attention heads do not divide over generator tp=128"},
		{"llama-3.1-70b", nil, "tp=1", "tp=128", "its 64 attention heads do not divide over generator tp=128"},
		{"deepseek-v3", nil, "dp=24,ep=12", "tp=8", "tensor model.layers.3.mlp.experts.gate_up_proj: dim 0 (256 experts) does not divide over trainer ep=12 (Megatron-Core gives every EP rank num_moe_experts / ep experts)"},
		{"deepseek-v3", nil, "dp=32,ep=16", "tp=8,dp=2,ep=8", "generator ep=8: vLLM's expert parallelism spans an engine's tp x dp = 16 ranks"},
		{"deepseek-v3", nil, "dp=3,etp=3", "tp=1", "tensor model.layers.3.mlp.experts.gate_up_proj: dim 2 (2048 intermediate rows) does not divide over trainer etp=3"},
		{"deepseek-v3", nil, "dp=8,ep=16", "tp=8", "trainer tp=1,pp=1,cp=1,dp=8,ep=16,etp=1: etp=1 x ep=16 does not divide a stage's tp x cp x dp = 8 ranks"},
		{"deepseek-v3", nil, "tp=2,dp=2,ep=4", "tp=8", "etp=2 x ep=4 does not divide a stage's tp x cp x dp = 4 ranks (etp not given: Megatron-Core's default is etp = tp = 2"},
		{"deepseek-v3", nil, "tp=1", "tp=8,dp=3", "tensor model.layers.3.mlp.experts.gate_up_proj: dim 2 (2048 intermediate rows) does not divide over generator tp x dp=24 (vLLM splits the routed experts over tp x dp ranks"},
		{"deepseek-v3", nil, "pp=62", "tp=8", "pp=62 is more than the model's 61 layers"},
		{"", tinyModel, "tp=1", "tp=3,dp=2", "tensor model.embed_tokens.weight: dim 0 (10 vocabulary rows, 64 once padded to a multiple of 64) does not divide over generator tp=3"},
		{"gpt-oss-120b", nil, "tp=1", "tp=1,dp=3,ep=3", "dim 0 (128 experts) does not divide over generator ep=3 (vLLM's gpt_oss.py loads num_local_experts / ep experts per rank"},
		{"testdata/models/mixtral-8x7b.config.json", nil, "dp=6,ep=3", "tp=1",
			"tensor model.layers.0.mlp.experts.gate_up_proj: dim 0 (8 experts) does not divide over trainer ep=3"},
	} {
		m := tc.m
		if m == nil {
			if m, err = Load(tc.spec, LoadOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		tr, err1 := ParseTrainer(tc.train)
		g, err2 := ParseGenerator(tc.gen)
		err := err1
		if err == nil {
			err = err2
		}
		if err == nil {
			_, err = New(m, tr, g)
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s %s -> %s: %v\nwant %q", m.Name, tc.train, tc.gen, err, tc.want)
		}
	}
	for _, tc := range []struct{ s, want string }{
		{"tp=2,xp=3", `unknown key "xp"`},
		{"tp=0", "tp=0: want a positive integer"},
		{"tp=2,tp=4", `key "tp" given twice`},
		{"tp", `"tp" is not key=value`},
		{"tp=2,vocab-div=0", "vocab-div=0: want a positive integer"},
	} {
		if _, err := ParseTrainer(tc.s); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseTrainer(%q) = %v, want %q", tc.s, err, tc.want)
		}
	}
}

// localShape returns the shape of rank's part of entry x on side.
func localShape(x *TensorLayout, side Side, rank int) ([]int64, bool) {
	b, ok := x.Layout(side).RankBox(rank)
	if !ok {
		return nil, false
	}
	return b.Shape(), true
}
