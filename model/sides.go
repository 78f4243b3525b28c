package model

// What each framework's rank holds of a tensor: trainerSide follows
// Megatron-Core, generatorSide vLLM (docs/frameworks.md cites the source of
// every rule).

import (
	"fmt"
	"strings"

	"github.com/m2n-dev/m2n/internal/checked"
	"github.com/m2n-dev/m2n/placement"
)

// SplitError reports a tensor dim that does not split over one side's
// ranks as that side's framework needs: dim Dim of the tensor's layout
// shape holds Size of What (experts, key-value heads, vocabulary rows,
// ...), which Key=By of that side's configuration does not divide. Note
// says the framework's rule. Callers can tell the side (and so the
// configuration at fault) with errors.As.
type SplitError struct {
	Tensor string
	Side   Side
	Dim    int
	Size   int64
	What   string
	Key    string // the configuration key: tp, ep, etp, tp/kv, tp x dp
	By     int
	Note   string // the framework's rule
}

func (e *SplitError) Error() string {
	side := "trainer"
	if e.Side == Dst {
		side = "generator"
	}
	s := fmt.Sprintf("tensor %s: dim %d (%d %s) does not divide over %s %s=%d", e.Tensor, e.Dim, e.Size, e.What, side, e.Key, e.By)
	if e.Dim < 0 {
		s = fmt.Sprintf("tensor %s: its %d %s do not divide over %s %s=%d", e.Tensor, e.Size, e.What, side, e.Key, e.By)
	}
	if e.Note != "" {
		s += " (" + e.Note + ")"
	}
	return s
}

// divides checks that dim d of t's layout shape splits evenly n ways.
func divides(t Tensor, d int, what string, n int, side Side, key, note string) error {
	if d >= len(t.LayoutShape) {
		return fmt.Errorf("tensor %s: a %s tensor needs a dim %d, its layout shape is %s", t.Name, t.Kind, d, placement.FormatShape(t.LayoutShape))
	}
	if n > 1 && t.LayoutShape[d]%int64(n) != 0 {
		return &SplitError{Tensor: t.Name, Side: side, Dim: d, Size: t.LayoutShape[d], What: what, Key: key, By: n, Note: note}
	}
	return nil
}

// headsDivide checks, for an attention tensor sharded by heads, that the
// model's attention heads split evenly over tp (Megatron's
// DotProductAttention and vLLM's attention layers both divide them).
func headsDivide(m *Model, t Tensor, tp int, side Side) error {
	if m.Heads == 0 || !strings.Contains(t.Name, "self_attn.") || tp <= 1 {
		return nil
	}
	switch t.Kind {
	case Query, kindColumn, kindRow, kindSinks:
	default:
		return nil
	}
	if m.Heads%int64(tp) != 0 {
		return &SplitError{Tensor: t.Name, Side: side, Dim: -1, Size: m.Heads, What: "attention heads", Key: "tp", By: tp}
	}
	return nil
}

// rowWhat names what dim 0 of a kind's layout shape counts, for errors.
func rowWhat(k Kind) string {
	switch {
	case k == kindEmbedding, k == kindLMHead:
		return "vocabulary rows"
	case k == Query, k == Key, k == Value:
		return "key-value heads"
	case k == kindSinks:
		return "attention heads"
	case k.experts():
		return "experts"
	}
	return "rows"
}

// intermediateDim returns the dim of an expert tensor's layout shape that
// holds the intermediate rows (expert-TP and vLLM's TP split it), or -1
// for gpt-oss's down_proj_bias, which has none.
func intermediateDim(k Kind) int {
	switch k {
	case ExpertsGateUp, ExpertsDown, kindTransposedExpertsDown: // [E, 2, I, H], [E, H, I]
		return 2
	case kindInterleavedExpertsGateUp, kindInterleavedExpertsGateUpBias: // [E, I, 2, H], [E, I, 2, 1]
		return 1
	}
	return -1
}

// vocabParts returns the rows of a vocabulary of v rows that each of n
// ranks holds when the framework pads it to padded rows first: rank r the
// rows [r*P, (r+1)*P) of the padded vocabulary that are real, P =
// padded/n, in a buffer of P rows.
func vocabParts(v, padded int64, n int) ([]placement.Interval, int64) {
	per := padded / int64(n)
	parts := make([]placement.Interval, n)
	for r := range parts {
		lo := min(v, int64(r)*per)
		parts[r] = placement.Interval{Lo: lo, Hi: min(v, lo+per)}
	}
	return parts, per
}

// roundUp returns v rounded up to a multiple of k, false on overflow.
func roundUp(v, k int64) (int64, bool) {
	n, ok := checked.Add(v, k-1)
	if !ok {
		return 0, false
	}
	return n / k * k, true
}

// trainerSide returns how Megatron-Core holds t on a pipeline stage
// (communicator-local ranks [0, TP*CP*DP)) and how its local buffer fuses
// it.
func trainerSide(m *Model, t Tensor, tr Trainer) (sideLayout, fusion, error) {
	const side = Src
	P, dense := tr.stageRanks(), tr.DP*tr.CP
	if err := headsDivide(m, t, tr.TP, side); err != nil {
		return sideLayout{}, fusion{}, err
	}
	s := sideLayout{}
	f := fusion{name: t.Name}
	var err error
	switch k := t.Kind; {
	case k == kindReplicated, k == kindLatentQ, k == kindLatentKV:
		s.axes = []axis{rep(P)}
	case k == kindEmbedding, k == kindLMHead:
		v := t.LayoutShape[0]
		padded, ok := roundUp(v, int64(tr.VocabDivisor)*int64(tr.TP))
		if !ok {
			return sideLayout{}, fusion{}, fmt.Errorf("tensor %s: vocabulary %d padded to a multiple of vocab-div=%d x tp=%d overflows", t.Name, v, tr.VocabDivisor, tr.TP)
		}
		parts, per := vocabParts(v, padded, tr.TP)
		s.axes, s.rows = []axis{rep(dense), split(0, parts)}, per
	case k == kindColumn, k == kindGate, k == kindUp, k == kindMTPProj, k == kindSinks, k == kindRow:
		s.axes, err = tpLinear(t, tr.TP, dense, side)
		f = gateUp(t, "linear_fc1")
	case k == Query, k == Key, k == Value:
		f = fusedAs(t.Name, interleave, []string{"q_proj", "k_proj", "v_proj"}, "linear_qkv", k)
		s.axes, err = megatronQKV(m, t, tr)
	case k == kindLoRAA, k == kindLoRAB:
		s.axes, err = trainerAdapter(t, tr)
	case k.experts():
		err = divides(t, 0, "experts", tr.EP, side, "ep", "Megatron-Core gives every EP rank num_moe_experts / ep experts")
		etp := rep(tr.ETP)
		if d := intermediateDim(k); d >= 0 {
			etp = shard(tr.ETP, d)
			if err == nil {
				err = divides(t, d, "intermediate rows", tr.ETP, side, "etp", "")
			}
		}
		s.axes = []axis{rep(tr.ExpertDP()), shard(tr.EP, 0), etp}
		if k == kindInterleavedExpertsGateUp || k == kindInterleavedExpertsGateUpBias {
			s.order = []int{0, 2, 1, 3} // TEGroupedMLP's fc1 holds [gate; up] per expert
		}
	default:
		err = fmt.Errorf("tensor %s: unknown kind %v", t.Name, t.Kind)
	}
	return s, f, err
}

// tpLinear returns the axes of a linear layer's tensor that tp ranks split
// (by rows, or for kindRow by columns) and reps replicas hold.
func tpLinear(t Tensor, tp, reps int, side Side) ([]axis, error) {
	if t.Kind == kindRow {
		return []axis{rep(reps), shard(tp, 1)}, divides(t, 1, "columns", tp, side, "tp", "")
	}
	return []axis{rep(reps), shard(tp, 0)}, divides(t, 0, rowWhat(t.Kind), tp, side, "tp", "")
}

// gateUp is how a side's buffer holds t: a gate or up projection fused
// into the buffer named fused, any other tensor alone.
func gateUp(t Tensor, fused string) fusion {
	if t.Kind != kindGate && t.Kind != kindUp {
		return fusion{name: t.Name}
	}
	return fusedAs(t.Name, concat, []string{"gate_proj", "up_proj"}, fused, t.Kind)
}

// megatronQKV returns Megatron-Core's axes for a GQA projection (layout
// shape [kv heads, rows per head group, ...]). linear_qkv is a
// ColumnParallelLinear over the interleaved [q heads of group 0; k0; v0;
// q heads of group 1; ...]: each TP rank holds a 1/TP row slice. When TP
// divides the query groups that is Shard(0) by group; when TP exceeds
// them (megatron/core/transformer/attention.py, Attention.__init__: "When
// num_kv_heads < tp_size"), TP/kv ranks share each group's [q; k; v] slab
// and rank j of them holds its rows [j*S, (j+1)*S), S = slab/(TP/kv):
// some q rows, or the k or v head, or parts of both.
func megatronQKV(m *Model, t Tensor, tr Trainer) ([]axis, error) {
	const side = Src
	dense := tr.DP * tr.CP
	kv := t.LayoutShape[0]
	if int64(tr.TP) <= kv {
		err := divides(t, 0, "key-value heads", tr.TP, side, "tp", "Megatron-Core needs tp to divide the query groups, or to be a multiple of them")
		return []axis{rep(dense), shard(tr.TP, 0)}, err
	}
	if int64(tr.TP)%kv != 0 {
		return nil, &SplitError{Tensor: t.Name, Side: side, Dim: 0, Size: kv, What: "key-value heads", Key: "tp", By: tr.TP,
			Note: "Megatron-Core needs tp to divide the query groups, or to be a multiple of them"}
	}
	if m.Heads == 0 || m.KVHeads != kv || m.Heads%kv != 0 {
		return nil, fmt.Errorf("tensor %s: tp=%d exceeds the %d query groups, which needs the model's head counts", t.Name, tr.TP, kv)
	}
	share := int64(tr.TP) / kv // ranks per group
	perGroup := m.Heads / kv   // q heads per group
	if perGroup%share != 0 {
		return nil, &SplitError{Tensor: t.Name, Side: side, Dim: -1, Size: perGroup, What: "query heads per group", Key: "tp/kv", By: int(share),
			Note: "with tp above the query groups Megatron-Core gives each rank num_attention_heads / tp query heads of its group"}
	}
	var hd int64 // head dim (rows of one head in this tensor)
	if t.Kind == Query {
		hd = t.LayoutShape[1] / perGroup
	} else {
		hd = t.LayoutShape[1]
	}
	q := perGroup * hd
	slab := q + 2*hd
	if slab%share != 0 {
		return nil, &SplitError{Tensor: t.Name, Side: side, Dim: 1, Size: slab, What: "rows of a group's [q; k; v]", Key: "tp/kv", By: int(share),
			Note: "Megatron-Core's linear_qkv is column-parallel over the interleaved rows"}
	}
	per := slab / share
	off := map[Kind]int64{Query: 0, Key: q, Value: q + hd}[t.Kind]
	n := t.LayoutShape[1]
	parts := make([]placement.Interval, share)
	for j := range parts {
		lo := min(max(int64(j)*per-off, 0), n)
		hi := min(max(int64(j+1)*per-off, 0), n)
		parts[j] = placement.Interval{Lo: lo, Hi: max(lo, hi)}
	}
	return []axis{rep(dense), shard(int(kv), 0), split(1, parts)}, nil
}

// generatorSide returns how vLLM holds t on its ranks (communicator-local
// ranks [start, start+Engines*DP*TP)) and how its local buffer fuses it.
// latentFused says whether the model has q_a_proj, which vLLM fuses with
// kv_a_proj_with_mqa (DeepseekV2MLAAttention: fused_qkv_a_proj when
// q_lora_rank is set, a ReplicatedLinear kv_a_proj_with_mqa alone else).
func generatorSide(m *Model, t Tensor, g Generator, start int, latentFused bool) (sideLayout, fusion, error) {
	const side = Dst
	G := g.Ranks()
	reps := g.Engines * g.DP // replicas of a TP group
	if err := headsDivide(m, t, g.TP, side); err != nil {
		return sideLayout{}, fusion{}, err
	}
	s := sideLayout{start: start}
	f := fusion{name: t.Name}
	var err error
	spWhole := t.SeqParallelReplicated && g.seqParallelMoE()
	switch k := t.Kind; {
	case k == kindReplicated, k == kindMTPProj:
		s.axes = []axis{rep(G)}
	case k == kindLatentQ, k == kindLatentKV:
		s.axes = []axis{rep(G)}
		if latentFused {
			f = fusedAs(t.Name, concat, []string{"q_a_proj", "kv_a_proj_with_mqa"}, "fused_qkv_a_proj", k)
		}
	case k == kindEmbedding, k == kindLMHead:
		v := t.LayoutShape[0]
		padded, ok := roundUp(v, 64) // vocab_parallel_embedding.py: DEFAULT_VOCAB_PADDING_SIZE
		if !ok || padded%int64(g.TP) != 0 {
			return sideLayout{}, fusion{}, &SplitError{Tensor: t.Name, Side: side, Dim: 0, Size: v, What: fmt.Sprintf("vocabulary rows, %d once padded to a multiple of 64", padded), Key: "tp", By: g.TP,
				Note: "vLLM pads the vocabulary to a multiple of 64 and divides it by tp (vocab_parallel_embedding.py: pad_vocab_size, VocabParallelEmbedding.__init__)"}
		}
		parts, per := vocabParts(v, padded, g.TP)
		s.axes, s.rows = []axis{rep(reps), split(0, parts)}, per
	case spWhole && (k == kindGate || k == kindUp || k == kindRow):
		s.axes = []axis{rep(G)}
		f = gateUp(t, "gate_up_proj")
	case k == kindColumn, k == kindGate, k == kindUp, k == kindSinks, k == kindRow:
		s.axes, err = tpLinear(t, g.TP, reps, side)
		f = gateUp(t, "gate_up_proj")
	case k == Query, k == Key, k == Value:
		kv := int(t.LayoutShape[0])
		f = fusedAs(t.Name, concat, []string{"q_proj", "k_proj", "v_proj"}, "qkv_proj", k)
		switch {
		case g.TP <= kv:
			err = divides(t, 0, "key-value heads", g.TP, side, "tp", "vLLM needs tp to divide them or be a multiple of them")
			s.axes = []axis{rep(reps), shard(g.TP, 0)}
		case g.TP%kv != 0:
			err = &SplitError{Tensor: t.Name, Side: side, Dim: 0, Size: int64(kv), What: "key-value heads", Key: "tp", By: g.TP,
				Note: "vLLM needs tp to divide them or be a multiple of them"}
		default:
			// Each key-value head is replicated over the TP/kv ranks that
			// share it; their q heads split those ranks' rows.
			r := g.TP / kv
			s.axes = []axis{rep(reps), shard(kv, 0), rep(r)}
			if k == Query {
				err = divides(t, 1, "query rows per key-value head", r, side, "tp/kv", "")
				s.axes[2] = shard(r, 1)
			}
		}
	case k == kindLoRAA, k == kindLoRAB:
		s, err = generatorAdapter(m, t, g, start)
	case k.experts():
		s.axes, s.rows, err = vllmExperts(t, g)
	default:
		err = fmt.Errorf("tensor %s: unknown kind %v", t.Name, t.Kind)
	}
	return s, f, err
}

// vllmExperts returns vLLM's axes for a routed-expert tensor. With expert
// parallelism each of an engine's TP x DP ranks holds its experts whole:
// determine_expert_map (vllm/model_executor/layers/fused_moe/layer.py,
// linear placement) gives rank r the experts from r*base + min(r, rem),
// base+1 of them for the first rem = E mod ranks. Without it
// FusedMoEParallelConfig.make (fused_moe/config.py) flattens TP across DP:
// every rank of the engine a 1/(TP x DP) slice of every expert's
// intermediate rows; gpt-oss's down_proj_bias, which has none, only the
// engine's first rank holds (gpt_oss.py, _load_weights_other: "only load
// on rank 0"; the others hold zeros m2n leaves alone). Independent
// engines replicate all of it.
func vllmExperts(t Tensor, g Generator) ([]axis, int64, error) {
	const side = Dst
	eng := g.engineRanks()
	E := t.LayoutShape[0]
	oss := t.Kind == kindInterleavedExpertsGateUp || t.Kind == kindInterleavedExpertsGateUpBias || t.Kind == kindTransposedExpertsDown || t.Kind == kindExpertsDownBias
	if g.EP > 1 {
		if oss && E%int64(eng) != 0 {
			return nil, 0, &SplitError{Tensor: t.Name, Side: side, Dim: 0, Size: E, What: "experts", Key: "ep", By: eng,
				Note: "vLLM's gpt_oss.py loads num_local_experts / ep experts per rank (load_weights: experts_per_rank)"}
		}
		base, rem := E/int64(eng), E%int64(eng)
		parts := make([]placement.Interval, eng)
		for r := range parts {
			lo := int64(r)*base + min(int64(r), rem)
			n := base
			if int64(r) < rem {
				n++
			}
			parts[r] = placement.Interval{Lo: lo, Hi: lo + n}
		}
		return []axis{rep(g.Engines), split(0, parts)}, 0, nil
	}
	d := intermediateDim(t.Kind)
	if d < 0 { // gpt-oss's down_proj_bias: the engine's rank 0 holds it whole
		parts := make([]placement.Interval, eng)
		for r := range parts {
			parts[r] = placement.Interval{Lo: E, Hi: E}
		}
		parts[0] = placement.Interval{Lo: 0, Hi: E}
		return []axis{rep(g.Engines), split(0, parts)}, E, nil
	}
	if err := divides(t, d, "intermediate rows", eng, side, "tp x dp",
		"vLLM splits the routed experts over tp x dp ranks (fused_moe/config.py, FusedMoEParallelConfig.make: flatten_tp_across_dp_and_pcp)"); err != nil {
		return nil, 0, err
	}
	return []axis{rep(g.Engines), shard(eng, d)}, 0, nil
}
