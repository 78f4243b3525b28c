package model

import (
	"fmt"
	"slices"
	"strings"

	"github.com/m2n-dev/m2n/fp8"
	"github.com/m2n-dev/m2n/internal/checked"
)

// LoRA says which weights of a model carry a LoRA adapter and its size:
// every dense linear projection whose module name is one of Targets (all
// of DefaultLoRATargets when empty) gets an A [Rank, in] and a B [out,
// Rank], and merging adds Alpha/Rank x (B @ A) to the weight (PEFT's
// LoraLayer.scaling; Megatron-Bridge's ParallelLinearAdapter scales by
// alpha/dim the same way). Alpha 0 means Alpha = Rank (scale 1).
type LoRA struct {
	Rank    int64
	Alpha   float64
	Targets []string
}

// DefaultLoRATargets are the attention and MLP projections that
// Megatron-Bridge's CanonicalLoRA adapts by default (linear_q, linear_k,
// linear_v, linear_proj, linear_fc1_gate, linear_fc1_up, linear_fc2:
// src/megatron/bridge/peft/canonical_lora.py), in transformers' names;
// MLA's q_b_proj and kv_b_proj are column-parallel projections of their
// own and may be named as well.
var DefaultLoRATargets = []string{"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}

// Adapter marks a tensor of an adapter model (Adapters) as one matrix of
// the LoRA adapter of the weight Base: A ([Rank, in]) or, with B set, B
// ([out, Rank]). Scale is the merge's Alpha/Rank.
type Adapter struct {
	Base  string
	B     bool
	Rank  int64
	Scale float64
	// base is the weight's kind: it decides how both frameworks split
	// the matrices (column-parallel bases split B's rows, row-parallel
	// ones A's columns).
	base Kind
}

// column reports whether the adapted weight is column-parallel (split by
// its output rows), as q, k, v, gate and up projections are; else it is
// row-parallel (o_proj, down_proj: split by its input columns).
func (a *Adapter) column() bool { return a.base != kindRow }

// Adapters returns the model of the LoRA adapters of m's target weights:
// for each, "<module>.lora_A.weight" and "<module>.lora_B.weight" (PEFT's
// names, without its "base_model.model." prefix), in m's order, on the
// weight's layer, in its dtype. Laid out by New, the trainer holds them as
// Megatron-Bridge's CanonicalLoRA does and the generator as vLLM's LoRA
// layers do, so that every generator rank holds the rows of B and the
// columns of A that its part of the weight needs and merges without
// moving a weight. Routed experts, embeddings and heads carry no adapter;
// a target that names no weight of m is an error.
func Adapters(m *Model, o LoRA) (*Model, error) {
	if o.Rank <= 0 {
		return nil, fmt.Errorf("model %s: LoRA rank %d, want at least 1", m.Name, o.Rank)
	}
	alpha := o.Alpha
	if alpha == 0 {
		alpha = float64(o.Rank)
	}
	if alpha < 0 {
		return nil, fmt.Errorf("model %s: LoRA alpha %g is negative", m.Name, alpha)
	}
	targets := o.Targets
	if len(targets) == 0 {
		targets = DefaultLoRATargets
	}
	out := &Model{Name: m.Name + " LoRA", Config: m.Config, Layers: m.Layers, MTPLayers: m.MTPLayers, Heads: m.Heads, KVHeads: m.KVHeads}
	used := map[string]bool{}
	for _, w := range m.Tensors {
		module, ok := strings.CutSuffix(w.Name, ".weight")
		if !ok || !adaptable(w) {
			continue
		}
		target := module[strings.LastIndex(module, ".")+1:]
		if !slices.Contains(targets, target) {
			continue
		}
		used[target] = true
		a, b, err := adapterPair(w, module, o.Rank, alpha/float64(o.Rank))
		if err != nil {
			return nil, err
		}
		out.Tensors = append(out.Tensors, a, b)
	}
	for _, t := range targets {
		if !used[t] {
			return nil, fmt.Errorf("model %s: LoRA target %q names no dense linear weight of the model (targets: %s)", m.Name, t, strings.Join(DefaultLoRATargets, ", "))
		}
	}
	if err := out.validate(); err != nil {
		return nil, err
	}
	return out, nil
}

// adaptable reports whether a weight can carry an adapter: a dense linear
// projection [out, in] (not the routed experts, embeddings, heads or
// replicated weights), held as transformers holds it.
func adaptable(w Tensor) bool {
	switch w.Kind {
	case Query, Key, Value, kindColumn, kindGate, kindUp, kindRow:
		return len(w.Shape) == 2 && !w.Transposed
	}
	return false
}

// adapterPair returns the A and B of weight w [out, in]: A [rank, in],
// B [out, rank] laid out like w's rows (a GQA projection's B groups its
// rows by key-value head as w does, so that vLLM's split of B follows
// its split of w).
func adapterPair(w Tensor, module string, rank int64, scale float64) (Tensor, Tensor, error) {
	out, in := w.Shape[0], w.Shape[1]
	for _, n := range []int64{out, in} {
		if _, ok := checked.Mul(n, rank); !ok {
			return Tensor{}, Tensor{}, fmt.Errorf("tensor %s: a LoRA rank of %d overflows its adapter's size", w.Name, rank)
		}
	}
	base := w.Kind
	a := Tensor{Name: module + ".lora_A.weight", Shape: []int64{rank, in}, LayoutShape: []int64{rank, in}, DType: w.DType,
		Kind: kindLoRAA, Layer: w.Layer, SeqParallelReplicated: w.SeqParallelReplicated,
		Adapter: &Adapter{Base: w.Name, Rank: rank, Scale: scale, base: base}}
	bl := slices.Clone(w.LayoutShape)
	bl[len(bl)-1] = rank
	b := Tensor{Name: module + ".lora_B.weight", Shape: []int64{out, rank}, LayoutShape: bl, DType: w.DType,
		Kind: kindLoRAB, Layer: w.Layer, SeqParallelReplicated: w.SeqParallelReplicated,
		Adapter: &Adapter{Base: w.Name, B: true, Rank: rank, Scale: scale, base: base}}
	return a, b, nil
}

// trainerAdapter returns Megatron-Bridge's axes for an adapter matrix.
// CanonicalLoRA wraps each projection in a ParallelLinearAdapter
// (src/megatron/bridge/peft/utils.py): for a column-parallel base its
// linear_in is a ColumnParallelLinear(in, rank), so A splits its rank
// rows over TP, and its linear_out a ColumnParallelLinear(rank, out), so
// B splits its out rows (q, k and v each their own adapter: plain row
// chunks, not linear_qkv's interleaving); for a row-parallel base
// (input_is_parallel) linear_in is a RowParallelLinear(in, rank), A split
// by columns, and linear_out again a ColumnParallelLinear, B by rows.
// Data- and context-parallel ranks replicate both.
func trainerAdapter(t Tensor, tr Trainer) ([]axis, error) {
	const side = Src
	dense := tr.DP * tr.CP
	ad := t.Adapter
	switch {
	case !ad.B && ad.column():
		return []axis{rep(dense), shard(tr.TP, 0)}, divides(t, 0, "LoRA rank rows", tr.TP, side, "tp",
			"Megatron-Bridge's ParallelLinearAdapter splits A's rank over TP for a column-parallel weight")
	case !ad.B:
		return []axis{rep(dense), shard(tr.TP, 1)}, divides(t, 1, "columns", tr.TP, side, "tp", "")
	}
	// B: a 1/TP chunk of its out rows. Over a GQA layout shape [kv,
	// rows per group, rank] that is a split of the groups, or of the rows
	// of each group when TP exceeds them.
	kv := t.LayoutShape[0]
	if len(t.LayoutShape) == 2 || int64(tr.TP) <= kv {
		return []axis{rep(dense), shard(tr.TP, 0)}, divides(t, 0, rowWhat(ad.base), tr.TP, side, "tp", "")
	}
	if int64(tr.TP)%kv != 0 {
		return nil, &SplitError{Tensor: t.Name, Side: side, Dim: 0, Size: kv, What: "key-value heads", Key: "tp", By: tr.TP,
			Note: "a LoRA B of a GQA projection splits its rows over tp, which must divide them or be a multiple of them"}
	}
	share := tr.TP / int(kv)
	return []axis{rep(dense), shard(int(kv), 0), shard(share, 1)}, divides(t, 1, "rows per key-value head", share, side, "tp/kv", "")
}

// generatorAdapter returns vLLM's axes for an adapter matrix (its LoRA
// layers without fully_sharded_loras): ColumnParallelLinearWithLoRA and
// its merged and QKV variants (vllm/lora/layers/column_parallel_linear.py)
// keep A whole (slice_lora_a returns it) and slice B's rows as the base
// slices its own (k and v by kv_shard_id, tp_rank / num_kv_head_replicas,
// when TP exceeds the key-value heads); RowParallelLinearWithLoRA
// (row_parallel_linear.py) slices A's columns by TP rank and keeps B
// whole. A base vLLM builds whole on every rank (seqParallel) has both
// whole.
func generatorAdapter(m *Model, t Tensor, g Generator, start int) (sideLayout, error) {
	s := sideLayout{start: start}
	ad := t.Adapter
	if t.SeqParallelReplicated && g.seqParallelMoE() || !ad.B && ad.column() || ad.B && !ad.column() {
		s.axes = []axis{rep(g.Ranks())}
		return s, nil
	}
	if !ad.B {
		axes, err := tpLinear(Tensor{Name: t.Name, Kind: kindRow, LayoutShape: t.LayoutShape}, g.TP, g.Engines*g.DP, Dst)
		s.axes = axes
		return s, err
	}
	// B of a column-parallel base: split as the base's rows.
	like := t
	like.Kind = ad.base
	base, _, err := generatorSide(m, like, g, start, false)
	return base, err
}

// NewAdapters lays out the LoRA adapters of l's model (Adapters) on l's
// trainer and generator, in the model's dtypes. With a generator that
// holds FP8 weights (NewQuantized) the merge re-quantizes each adapted
// weight's scale blocks on the rank that holds them (lora.Merger), so
// every generator rank's part of an adapted FP8 weight must hold whole
// blocks: layouts where one cuts a block (row or tensor scales of a
// weight split by columns, 128-row blocks cut by TP) are refused, naming
// the tensor, the rank and the option.
func NewAdapters(l *Layouts, o LoRA) (*Layouts, error) {
	ad, err := Adapters(l.Model, o)
	if err != nil {
		return nil, err
	}
	if l.FP8 != 0 {
		if err := wholeFP8Blocks(l, ad); err != nil {
			return nil, err
		}
	}
	return New(ad, l.Trainer, l.Generator)
}

// wholeFP8Blocks checks that every generator rank holds whole scale blocks
// of each FP8 weight that ad adapts.
func wholeFP8Blocks(l *Layouts, ad *Model) error {
	adapted := map[string]bool{}
	for _, t := range ad.Tensors {
		adapted[t.Adapter.Base] = true
	}
	for _, st := range l.Stages {
		for _, t := range st.Tensors {
			if t.Scale == 0 || !adapted[t.Whole().Name] {
				continue
			}
			g, err := fp8.NewGrid(t.Dst.Shape(), t.Scale)
			if err != nil {
				return err
			}
			for _, r := range t.Dst.Mesh().Ranks() {
				box, ok := t.Dst.RankBox(r)
				if !ok || box.Empty() {
					continue
				}
				if err := g.WholeBlocks(box); err != nil {
					return fmt.Errorf("model %s: tensor %s: LoRA into an FP8 generator re-quantizes each scale block where one rank holds it whole, and generator rank %d's part %v cuts %v blocks (%v); use --fp8-scale block with TP splits of whole 128-row and -column blocks, or a generator in bf16",
						l.Model.Name, t.Name, r-st.Trainers, box, t.Scale, err)
				}
			}
		}
	}
	return nil
}

// ParseLoRATargets reads a comma-separated list of projection names
// ("q_proj, v_proj"); "" is nil (DefaultLoRATargets).
func ParseLoRATargets(s string) []string {
	if strings.TrimSpace(s) == "" {
		return nil
	}
	var out []string
	for _, t := range strings.Split(s, ",") {
		out = append(out, strings.TrimSpace(t))
	}
	return out
}
