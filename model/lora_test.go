package model

import (
	"strings"
	"testing"

	"github.com/m2n-dev/m2n/fp8"
	"github.com/m2n-dev/m2n/placement"
)

// TestAdapterLayouts encodes where each framework holds a LoRA adapter's
// parts, on scaled Qwen3-8B (8 key-value heads, head dim 4, hidden 128)
// from a trainer at tp=2 to a generator at tp=16 (twice the key-value
// heads, so vLLM replicates k and v over pairs of ranks):
//   - trainer, Megatron-Bridge's CanonicalLoRA over ParallelLinearAdapter
//     (src/megatron/bridge/peft/canonical_lora.py, CanonicalLoRA.transform;
//     peft/utils.py, ParallelLinearAdapter.__init__): A of a column-parallel
//     base split by its rank rows (linear_in is a ColumnParallelLinear), of a
//     row-parallel base by columns (a RowParallelLinear); B split by rows
//     (linear_out is a ColumnParallelLinear) for both;
//   - generator, vLLM's LoRA layers (vllm/lora/layers/column_parallel_linear.py,
//     slice_lora_a / slice_lora_b of ColumnParallelLinearWithLoRA and
//     MergedQKVParallelLinearWithLoRA; row_parallel_linear.py,
//     RowParallelLinearWithLoRA): A whole and B's rows as the base's own
//     (k and v by tp_rank / num_kv_head_replicas) for a column-parallel
//     base, A's columns by tp_rank and B whole for a row-parallel one.
func TestAdapterLayouts(t *testing.T) {
	base, err := Load("testdata/models/qwen3-8b.config.json", LoadOptions{Scale: 32, Layers: 1})
	if err != nil {
		t.Fatal(err)
	}
	ad, err := Adapters(base, LoRA{Rank: 16})
	if err != nil {
		t.Fatal(err)
	}
	tr, _ := ParseTrainer("tp=2")
	gen, _ := ParseGenerator("tp=16")
	l, err := New(ad, tr, gen)
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]*TensorLayout{}
	for _, tl := range l.Stages[0].Tensors {
		byName[strings.TrimPrefix(tl.Name, "model.layers.0.")] = tl
		if tl.Fused(Src) || tl.Fused(Dst) {
			t.Errorf("%s is fused into a shared buffer; adapters sit in buffers of their own on both sides", tl.Name)
		}
	}
	box := func(name string, side Side, rank int) string {
		tl := byName[name]
		if tl == nil {
			t.Fatalf("no adapter tensor %s", name)
		}
		b, ok := tl.Box(side, rank)
		if !ok {
			return "none"
		}
		return b.String()
	}
	const g0 = 2 // the generator's first stage-local rank
	for _, c := range []struct {
		name string
		side Side
		rank int
		want string
	}{
		// q_proj [32 heads x 4 = 128, 128]: A [16, 128], B [128, 16] as [8, 16, 16]
		{"self_attn.q_proj.lora_A.weight", Src, 1, placement.Box{Lo: []int64{8, 0}, Hi: []int64{16, 128}}.String()},
		{"self_attn.q_proj.lora_B.weight", Src, 1, placement.Box{Lo: []int64{4, 0, 0}, Hi: []int64{8, 16, 16}}.String()},
		{"self_attn.q_proj.lora_A.weight", Dst, g0 + 5, placement.Box{Lo: []int64{0, 0}, Hi: []int64{16, 128}}.String()},
		{"self_attn.q_proj.lora_B.weight", Dst, g0 + 5, placement.Box{Lo: []int64{2, 8, 0}, Hi: []int64{3, 16, 16}}.String()},
		// k_proj [8 heads x 4 = 32, 128]: B as [8, 4, 16]; vLLM's ranks 4 and 5 both hold head 2
		{"self_attn.k_proj.lora_B.weight", Src, 0, placement.Box{Lo: []int64{0, 0, 0}, Hi: []int64{4, 4, 16}}.String()},
		{"self_attn.k_proj.lora_B.weight", Dst, g0 + 4, placement.Box{Lo: []int64{2, 0, 0}, Hi: []int64{3, 4, 16}}.String()},
		{"self_attn.k_proj.lora_B.weight", Dst, g0 + 5, placement.Box{Lo: []int64{2, 0, 0}, Hi: []int64{3, 4, 16}}.String()},
		// o_proj [128, 128], row-parallel
		{"self_attn.o_proj.lora_A.weight", Src, 1, placement.Box{Lo: []int64{0, 64}, Hi: []int64{16, 128}}.String()},
		{"self_attn.o_proj.lora_B.weight", Src, 1, placement.Box{Lo: []int64{64, 0}, Hi: []int64{128, 16}}.String()},
		{"self_attn.o_proj.lora_A.weight", Dst, g0 + 3, placement.Box{Lo: []int64{0, 24}, Hi: []int64{16, 32}}.String()},
		{"self_attn.o_proj.lora_B.weight", Dst, g0 + 3, placement.Box{Lo: []int64{0, 0}, Hi: []int64{128, 16}}.String()},
		// up_proj [384, 128]; down_proj [128, 384]
		{"mlp.up_proj.lora_B.weight", Dst, g0 + 15, placement.Box{Lo: []int64{360, 0}, Hi: []int64{384, 16}}.String()},
		{"mlp.down_proj.lora_A.weight", Dst, g0 + 15, placement.Box{Lo: []int64{0, 360}, Hi: []int64{16, 384}}.String()},
	} {
		if got := box(c.name, c.side, c.rank); got != c.want {
			t.Errorf("%s, side %d, rank %d holds %s, want %s", c.name, c.side, c.rank, got, c.want)
		}
	}
}

// TestAdaptersRefuse: a rank of 0, a target the model lacks, and a trainer
// TP that does not divide the rank (Megatron-Bridge's linear_in is a
// ColumnParallelLinear of rank outputs) are errors naming the cause.
func TestAdaptersRefuse(t *testing.T) {
	base, err := Load("testdata/models/qwen3-8b.config.json", LoadOptions{Scale: 32, Layers: 1})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		o    LoRA
		want string
	}{
		{LoRA{Rank: 0}, "LoRA rank 0"},
		{LoRA{Rank: 8, Targets: []string{"experts"}}, `target "experts" names no dense linear weight`},
		{LoRA{Rank: 8, Alpha: -1}, "alpha -1 is negative"},
	} {
		if _, err := Adapters(base, c.o); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Adapters(%+v) = %v, want an error with %q", c.o, err, c.want)
		}
	}
	if got := ParseLoRATargets(" q_proj, v_proj "); len(got) != 2 || got[0] != "q_proj" || got[1] != "v_proj" {
		t.Errorf("ParseLoRATargets = %q", got)
	}
	if got := ParseLoRATargets(" "); got != nil {
		t.Errorf("ParseLoRATargets(blank) = %q, want nil (the default targets)", got)
	}
	tr1, _ := ParseTrainer("tp=1")
	gen1, _ := ParseGenerator("tp=1")
	q, err := NewQuantized(base, tr1, gen1, fp8.Row)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := NewAdapters(q, LoRA{Rank: 8}); err != nil {
		t.Errorf("adapters of an FP8 generator at tp=1: %v", err)
	}
	// row scales of o_proj, split by its columns at tp=2: every row block cut
	gen2, _ := ParseGenerator("tp=2")
	if q, err = NewQuantized(base, tr1, gen2, fp8.Row); err != nil {
		t.Fatal(err)
	}
	if _, err := NewAdapters(q, LoRA{Rank: 8}); err == nil || !strings.Contains(err.Error(), "cuts row blocks") || !strings.Contains(err.Error(), "--fp8-scale block") {
		t.Errorf("adapters of an FP8 generator whose parts cut row blocks: %v, want a refusal", err)
	}
	ad, err := Adapters(base, LoRA{Rank: 6})
	if err != nil {
		t.Fatal(err)
	}
	tr, _ := ParseTrainer("tp=4")
	gen, _ := ParseGenerator("tp=2")
	if _, err := New(ad, tr, gen); err == nil || !strings.Contains(err.Error(), "6 LoRA rank rows") {
		t.Errorf("rank 6 over trainer tp=4: %v, want a split error naming the rank rows", err)
	}
}
