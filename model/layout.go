package model

import (
	"fmt"
	"slices"
	"strings"

	"github.com/m2n-dev/m2n/fp8"
	"github.com/m2n-dev/m2n/internal/checked"
	"github.com/m2n-dev/m2n/mesh"
	"github.com/m2n-dev/m2n/pipeline"
	"github.com/m2n-dev/m2n/placement"
)

// Side is one side of a refit: the trainer sends, the generator receives.
type Side uint8

const (
	// Src is the trainer (Megatron-Core conventions).
	Src Side = iota
	// Dst is the generator (vLLM conventions).
	Dst
)

func (s Side) String() string {
	if s == Src {
		return "src"
	}
	return "dst"
}

// Layouts is a model laid out for a refit from a trainer to a generator:
// the pipeline stages, and for every stage every tensor's source and
// destination layout, with the local buffer and view that hold each rank's
// part on each side. It is immutable once New has built it.
type Layouts struct {
	Model     *Model
	Trainer   Trainer
	Generator Generator
	// Ranks places the world: stage s trains on world ranks [s*P, (s+1)*P)
	// with P = Trainer.StageRanks(), and the generator is the
	// Generator.Ranks() world ranks after all trainers.
	Ranks  pipeline.Layout
	Stages []*Stage
	// FP8 is the scaling mode of the generator's FP8 weights
	// (NewQuantized); zero when the generator takes the trainer's dtypes.
	FP8 fp8.Mode
}

// Stage is one pipeline stage and its communicator: the stage's trainer
// ranks (local ranks [0, Trainers)) then every generator rank (local ranks
// [Trainers, Trainers+Generators)). Every layout of the stage's tensors uses
// these communicator-local ranks.
type Stage struct {
	Index int
	// Layers is the stage's half-open range of decoder layers; MTP layers
	// ride on the last stage.
	Layers [2]int
	// Members are the world ranks of the stage's communicator, in
	// communicator-local rank order (pipeline.Layout.Members).
	Members    []int
	Trainers   int
	Generators int
	// Tensors are what a refit of the stage moves: one entry per tensor,
	// or, for a tensor that a framework splits otherwise than torch.chunk
	// (TensorLayout.Origin), one per piece.
	Tensors []*TensorLayout
	// groups[side] are the side's local buffers, each holding the views of
	// one or more tensors, in the order of their first tensor; byName
	// finds them.
	groups [2][]*group
	byName [2]map[string]*group
}

// TensorLayout is one tensor of a stage, or one piece of it: the tensor,
// its source (trainer) and destination (generator) layouts over its layout
// shape, and where each rank's part sits in its local buffers.
//
// A piece is a box of a tensor that a refit moves on its own because a
// framework splits the tensor otherwise than torch.chunk (DTensor's
// Shard): the padded vocabulary of both frameworks, vLLM's experts when
// they do not divide its EP ranks, Megatron's linear_qkv when TP exceeds
// the query groups. A piece's Tensor is the box: its Name is the tensor's
// name with the box in numpy slice notation over the layout shape
// ("model.embed_tokens.weight[0:512]"), its Shape and LayoutShape the
// box's shape, and Origin the box's corner in Whole().LayoutShape.
type TensorLayout struct {
	Tensor
	Src, Dst placement.Layout
	// Scale is the FP8 scaling mode of a tensor the generator holds in
	// fp8e4m3 (Dst's dtype; see NewQuantized), zero for the others: what
	// reshard.Spec.Scale takes.
	Scale fp8.Mode
	// Origin is nil for a whole tensor; for a piece, the corner of its box
	// in the whole tensor's LayoutShape.
	Origin []int64
	whole  *wholeTensor
}

// wholeTensor is one tensor of the model as the two frameworks hold it:
// its layout on each side, and the buffer (group) that holds its part.
type wholeTensor struct {
	Tensor
	side   [2]sideLayout
	dtype  [2]placement.DType
	group  [2]*group
	member [2]int // index into group[side].members
	order  [2]int // position key within the group (q, k, v; gate, up)
}

// Whole returns the tensor a piece belongs to (the tensor itself for a
// whole one).
func (t *TensorLayout) Whole() Tensor { return t.whole.Tensor }

// Layout returns the layout of the given side.
func (t *TensorLayout) Layout(side Side) placement.Layout {
	if side == Src {
		return t.Src
	}
	return t.Dst
}

// Buffer returns the name of the local buffer that holds the tensor's part
// on every rank of the given side. A tensor alone in its buffer names it
// after itself; a fused buffer is named after the module that fuses it, as
// that framework names it (Megatron's linear_qkv and linear_fc1; vLLM's
// qkv_proj, gate_up_proj and fused_qkv_a_proj), under the same prefix.
func (t *TensorLayout) Buffer(side Side) string { return t.whole.group[side].name }

// Fused reports whether the tensor shares its local buffer on the given
// side with other tensors.
func (t *TensorLayout) Fused(side Side) bool { return len(t.whole.group[side].members) > 1 }

// Box returns, in the whole tensor's LayoutShape, the box of the entry
// that rank (a local rank of the stage's communicator) holds on the given
// side, and false when it holds none.
func (t *TensorLayout) Box(side Side, rank int) (placement.Box, bool) {
	b, ok := t.Layout(side).RankBox(rank)
	if !ok || t.Origin == nil {
		return b, ok
	}
	for d := range b.Lo {
		b.Lo[d] += t.Origin[d]
		b.Hi[d] += t.Origin[d]
	}
	return b, true
}

// New lays a model out from the trainer to the generator. Every tensor's
// layouts follow Megatron-Core on the source and vLLM on the destination,
// as their sources hold them:
//
//   - embeddings and LM heads vocab-parallel over TP, each framework
//     padding the vocabulary first (Megatron to a multiple of
//     Trainer.VocabDivisor x TP: megatron/training/vocab_utils.py,
//     calculate_padded_vocab_size; vLLM to a multiple of 64:
//     vllm/model_executor/layers/vocab_parallel_embedding.py,
//     pad_vocab_size and VocabParallelEmbedding.__init__), so that rank r
//     holds rows [r*P, (r+1)*P) of the padded vocabulary (P = padded/TP)
//     in a buffer of P rows; the padding rows are never written (vLLM's
//     weight loader zeroes them, and m2n leaves them so);
//   - column-parallel (Column, Gate, Up; gpt-oss's sinks) Shard(0) over
//     TP, row-parallel Shard(1); norms, routers, biases of row-parallel
//     layers and MLA's latent projections whole on every rank;
//   - Query, Key and Value over their [kv heads, rows, ...] layout shape:
//     on the trainer Shard(0) over TP when TP divides the query groups,
//     and when TP exceeds them each rank a 1/TP row slice of the
//     interleaved [q; k; v] of its group (megatron/core/transformer/attention.py,
//     Attention.__init__ and get_query_key_value_tensors); on the
//     generator Shard(0) over TP when TP divides the key-value heads,
//     else the TP axis splits into kv x TP/kv, q sharded over both and k,
//     v replicated over the second (vLLM's QKVParallelLinear);
//   - the routed experts on the trainer Shard(0) over EP and expert-TP
//     on the intermediate rows (ETP defaults to TP); on the generator
//     with EP each rank its experts as vLLM's determine_expert_map gives
//     them (linear: the first E mod ranks one more), else Shard on the
//     intermediate rows over TP x DP (vLLM's FusedMoEParallelConfig.make
//     flattens TP across DP), replicated over independent engines;
//   - DeepSeek's shared experts whole on every generator rank when vLLM's
//     MoE runs sequence-parallel (Generator.SeqParallelMoE);
//   - replication over DP and CP on the trainer (expert-DP for experts),
//     over DP (and engines) on the generator.
//
// A size that does not divide as a framework needs (heads, experts or a
// padded vocabulary by TP or EP), a pipeline stage left without layers, or
// an invalid configuration is an error naming the tensor, the dim, both
// numbers and the framework's rule.
func New(m *Model, tr Trainer, gen Generator) (*Layouts, error) {
	return NewQuantized(m, tr, gen, 0)
}

// NewQuantized is New for a generator that serves FP8 weights, converted
// in flight: with a scaling mode (fp8.Block, Row or Tensor; zero is New)
// every tensor that vLLM's FP8 path quantizes (Tensor.FP8: the weights of
// the linear and MoE layers inside the decoder layers) has an fp8e4m3
// destination and Scale set, as FP8 checkpoints hold them with their
// weight_scale_inv; the others (embeddings, LM heads, norms, routers,
// biases, what the checkpoint leaves unconverted) stay as they are. Fused
// destination buffers hold members of one dtype.
//
// The scales are those of the tensor as the checkpoint and vLLM shape it:
// the scale grid runs over the layout shape, which for Query, Key and
// Value ([kv heads, rows, H]) has the checkpoint's blocks only where each
// key-value head's rows are whole blocks (or in Row mode, or with one
// key-value head), so other shapes are refused, naming the tensor and the
// option. A tensor that should convert but is neither bf16 nor f32 (int8,
// already FP8) is refused, as is a model where nothing converts, and
// gpt-oss (whose interleaved, transposed experts vLLM does not serve in
// FP8 from this layout).
func NewQuantized(m *Model, tr Trainer, gen Generator, mode fp8.Mode) (*Layouts, error) {
	if mode != 0 && (mode < fp8.Block || mode > fp8.Tensor) {
		return nil, fmt.Errorf("model %s: %v is not an FP8 scaling mode (want block, row or tensor)", m.Name, mode)
	}
	if err := tr.Validate(); err != nil {
		return nil, err
	}
	if err := gen.Validate(); err != nil {
		return nil, err
	}
	if mode != 0 {
		if err := checkConvertible(m); err != nil {
			return nil, err
		}
	}
	tr, gen = tr.normal(), gen.normal()
	ranges, err := StageLayers(m.Layers, tr)
	if err != nil {
		return nil, fmt.Errorf("model %s: %w", m.Name, err)
	}
	P, G := tr.StageRanks(), gen.Ranks()
	l := &Layouts{Model: m, Trainer: tr, Generator: gen, Ranks: pipeline.Contiguous(tr.PP, P, G), FP8: mode}
	if err := l.Ranks.Validate(tr.Ranks() + G); err != nil {
		return nil, err
	}
	for s, r := range ranges {
		st := &Stage{Index: s, Layers: r, Members: l.Ranks.Members(s), Trainers: P, Generators: G}
		st.byName = [2]map[string]*group{{}, {}}
		l.Stages = append(l.Stages, st)
	}
	latentFused := slices.ContainsFunc(m.Tensors, func(t Tensor) bool { return t.Kind == LatentQ })
	for _, t := range m.Tensors {
		st := l.Stages[stageOf(t, m, ranges)]
		w := &wholeTensor{Tensor: t, dtype: [2]placement.DType{t.DType, t.DType}}
		var sf, df fusion
		if w.side[Src], sf, err = trainerSide(m, t, tr); err != nil {
			return nil, err
		}
		if w.side[Dst], df, err = generatorSide(m, t, gen, P, latentFused); err != nil {
			return nil, err
		}
		var scale fp8.Mode
		if mode != 0 && t.FP8 {
			if err := checkGrid(t, mode); err != nil {
				return nil, err
			}
			w.dtype[Dst], scale = placement.FP8E4M3, mode
		}
		if err := st.join(w, Src, sf); err != nil {
			return nil, err
		}
		if err := st.join(w, Dst, df); err != nil {
			return nil, err
		}
		entries, err := entriesOf(w, scale)
		if err != nil {
			return nil, err
		}
		st.Tensors = append(st.Tensors, entries...)
	}
	for _, st := range l.Stages {
		if err := st.checkGroups(); err != nil {
			return nil, err
		}
	}
	return l, nil
}

// entriesOf returns what a refit moves of a whole tensor: the tensor, or
// its pieces where a framework splits it otherwise than torch.chunk.
func entriesOf(w *wholeTensor, scale fp8.Mode) ([]*TensorLayout, error) {
	t := w.Tensor
	src, dst := w.side[Src], w.side[Dst]
	if src.chunked(t.LayoutShape) && dst.chunked(t.LayoutShape) {
		tl := &TensorLayout{Tensor: t, Scale: scale, whole: w}
		var err error
		if tl.Src, err = src.layout(t.Name, t.LayoutShape, w.dtype[Src]); err != nil {
			return nil, err
		}
		if tl.Dst, err = dst.layout(t.Name, t.LayoutShape, w.dtype[Dst]); err != nil {
			return nil, err
		}
		return []*TensorLayout{tl}, nil
	}
	ps, err := pieces(t, src, dst, w.dtype)
	if err != nil {
		return nil, err
	}
	if err := checkPieceGrid(t, ps, scale); err != nil {
		return nil, err
	}
	if len(ps) == 1 { // one piece: the whole tensor, on the ranks that hold it
		return []*TensorLayout{{Tensor: t, Src: ps[0].layouts[Src], Dst: ps[0].layouts[Dst], Scale: scale, whole: w}}, nil
	}
	out := make([]*TensorLayout, 0, len(ps))
	for _, p := range ps {
		pt := t
		pt.Shape = slices.Clone(t.LayoutShape)
		pt.Shape[p.dim] = p.hi - p.lo
		pt.LayoutShape = slices.Clone(pt.Shape)
		pt.Transposed = false
		pt.Name = t.Name + sliceText(len(t.LayoutShape), p.dim, p.lo, p.hi)
		origin := make([]int64, len(t.LayoutShape))
		origin[p.dim] = p.lo
		out = append(out, &TensorLayout{Tensor: pt, Src: p.layouts[Src], Dst: p.layouts[Dst], Scale: scale, Origin: origin, whole: w})
	}
	return out, nil
}

// sliceText renders a box of one dim in numpy slice notation: "[0:512]",
// "[:,64:128]" (trailing full dims left out).
func sliceText(nd, dim int, lo, hi int64) string {
	parts := make([]string, dim+1)
	for d := 0; d < dim; d++ {
		parts[d] = ":"
	}
	parts[dim] = fmt.Sprintf("%d:%d", lo, hi)
	return "[" + strings.Join(parts, ",") + "]"
}

// checkConvertible refuses an FP8 conversion that would change nothing or
// that m2n cannot make as vLLM holds it: a tensor vLLM quantizes that is
// neither bf16 nor f32 (int8, or already FP8), a model where no tensor
// converts, gpt-oss.
func checkConvertible(m *Model) error {
	if m.Config != nil && m.Config.ModelType == "gpt_oss" {
		return fmt.Errorf("model %s: --dst-dtype e4m3: gpt-oss's experts are [E, H, 2I], gate and up interleaved, and vLLM's gpt_oss.py serves them in bf16 or MXFP4, not FP8 blocks of this layout: m2n does not convert gpt-oss", m.Name)
	}
	n := 0
	for _, t := range m.Tensors {
		if !t.FP8 {
			continue
		}
		if t.DType != placement.BF16 && t.DType != placement.F32 {
			return fmt.Errorf("tensor %s is %v: --dst-dtype e4m3 quantizes bf16 or f32 weights, and this one is not (already quantized?); leave --dst-dtype out to move it as it is", t.Name, t.DType)
		}
		n++
	}
	if n == 0 {
		return fmt.Errorf("model %s: --dst-dtype e4m3: no tensor is one vLLM's FP8 path quantizes (the weights of the linear and MoE layers inside the decoder layers)", m.Name)
	}
	return nil
}

// checkGrid refuses an FP8 scale mode whose blocks over the layout shape
// would differ from the checkpoint's and vLLM's blocks of the tensor as
// they shape it: for Query, Key and Value ([kv heads, rows per head, H]
// against the checkpoint's [kv heads x rows, H]) unless there is one
// key-value head, or rows per head are whole 128-row blocks (Block), or
// scales run per row (Row).
func checkGrid(t Tensor, mode fp8.Mode) error {
	switch t.Kind {
	case Query, Key, Value:
	default:
		return nil
	}
	kv, rows := t.LayoutShape[0], t.LayoutShape[1]
	if kv == 1 || mode == fp8.Row || (mode == fp8.Block && rows%fp8.BlockSize == 0) {
		return nil
	}
	return fmt.Errorf("tensor %s: --fp8-scale %v: the checkpoint and vLLM (Fp8LinearMethod.create_weights) scale the %s weight %s as one matrix, "+
		"and its %d rows per key-value head (%d heads) are not whole %d-row blocks, so m2n's per-head layout would scale other blocks; use --fp8-scale row",
		t.Name, mode, t.Kind, placement.FormatShape(t.MovedShape()), rows, kv, fp8.BlockSize)
}

// checkPieceGrid refuses FP8 pieces whose own scale grids would differ
// from the whole tensor's: pieces cut along a matrix dim (Megatron's
// linear_qkv slices when TP exceeds the query groups) keep the whole's
// scales per row (Row), and in Block mode only where every cut falls on a
// 128-row block boundary; pieces along leading dims (experts) always do.
func checkPieceGrid(t Tensor, ps []piece, mode fp8.Mode) error {
	if mode == 0 || len(ps) < 2 {
		return nil
	}
	d, nd := ps[0].dim, len(t.LayoutShape)
	if d < nd-2 || mode == fp8.Row {
		return nil
	}
	if mode == fp8.Block && d == nd-2 {
		aligned := true
		for _, p := range ps {
			aligned = aligned && p.lo%fp8.BlockSize == 0
		}
		if aligned {
			return nil
		}
	}
	return fmt.Errorf("tensor %s: --fp8-scale %v: Megatron-Core and vLLM split its rows differently here (trainer tp above the query groups), "+
		"and m2n moves the rows between their cuts separately, whose %v scales would differ from the checkpoint's; use --fp8-scale row", t.Name, mode, mode)
}

// ScaleShape returns the shape of the scale tensor (weight_scale_inv) of a
// tensor held in FP8 with the given mode, as the checkpoint and vLLM shape
// it: the block grid of the tensor's own shape ([ceil(M/128), ceil(K/128)]
// for a [M, K] weight in Block mode), and for the experts' gate_up_proj
// vLLM's w13 scales ([E, 2 x ceil(I/128), ceil(H/128)]; per-tensor [E,
// 2]). It returns nil when the tensor does not convert.
func ScaleShape(t Tensor, mode fp8.Mode) []int64 {
	if mode == 0 || !t.FP8 {
		return nil
	}
	if t.Kind == ExpertsGateUp {
		g, err := fp8.NewGrid(t.LayoutShape, mode)
		if err != nil {
			return nil
		}
		s := g.ScaleShape() // [E, 2, blocks of I, blocks of H]
		if mode == fp8.Tensor {
			return s[:2]
		}
		return []int64{s[0], s[1] * s[2], s[3]}
	}
	g, err := fp8.NewGrid(t.MovedShape(), mode)
	if err != nil {
		return nil
	}
	return g.ScaleShape()
}

// stageOf returns the pipeline stage that holds t: its layer's stage, the
// first stage for the input embedding, the last for MTP layers, the final
// norm and the LM head.
func stageOf(t Tensor, m *Model, ranges [][2]int) int {
	last := len(ranges) - 1
	switch {
	case t.Layer >= m.Layers:
		return last
	case t.Layer >= 0:
		lo, hi := 0, len(ranges)
		for lo < hi { // the first stage whose range ends past the layer
			mid := (lo + hi) / 2
			if t.Layer < ranges[mid][1] {
				hi = mid
			} else {
				lo = mid + 1
			}
		}
		return min(lo, last)
	case t.Kind == Embedding:
		return 0
	}
	return last
}

// newLayout builds a layout over a mesh of the given shape: the ranks
// listed, or [start, ...) when ranks is nil.
func newLayout(name string, shape []int64, dt placement.DType, ms []int, ps []placement.Placement, ranks []int, start int) (placement.Layout, error) {
	var msh mesh.Mesh
	var err error
	if ranks == nil {
		msh, err = mesh.Interval(ms, start)
	} else {
		msh, err = mesh.New(ms, ranks)
	}
	if err != nil {
		return placement.Layout{}, fmt.Errorf("tensor %s: %w", name, err)
	}
	l, err := placement.NewLayout(shape, dt, msh, ps)
	if err != nil {
		return placement.Layout{}, fmt.Errorf("tensor %s: %w", name, err)
	}
	return l, nil
}

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
	case Query, Column, Row, Sinks:
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
	case k == Embedding, k == LMHead:
		return "vocabulary rows"
	case k == Query, k == Key, k == Value:
		return "key-value heads"
	case k == Sinks:
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
	case ExpertsGateUp, ExpertsDown, TransposedExpertsDown: // [E, 2, I, H], [E, H, I]
		return 2
	case InterleavedExpertsGateUp, InterleavedExpertsGateUpBias: // [E, I, 2, H], [E, I, 2, 1]
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
	P, dense := tr.StageRanks(), tr.DP*tr.CP
	if err := headsDivide(m, t, tr.TP, side); err != nil {
		return sideLayout{}, fusion{}, err
	}
	s := sideLayout{}
	f := fusion{name: t.Name}
	var err error
	switch k := t.Kind; {
	case k == Replicated, k == LatentQ, k == LatentKV:
		s.axes = []axis{rep(P)}
	case k == Embedding, k == LMHead:
		v := t.LayoutShape[0]
		padded, ok := roundUp(v, int64(tr.VocabDivisor)*int64(tr.TP))
		if !ok {
			return sideLayout{}, fusion{}, fmt.Errorf("tensor %s: vocabulary %d padded to a multiple of vocab-div=%d x tp=%d overflows", t.Name, v, tr.VocabDivisor, tr.TP)
		}
		parts, per := vocabParts(v, padded, tr.TP)
		s.axes, s.rows = []axis{rep(dense), split(0, parts)}, per
	case k == Column, k == Gate, k == Up, k == MTPProj, k == Sinks:
		err = divides(t, 0, rowWhat(k), tr.TP, side, "tp", "")
		s.axes = []axis{rep(dense), shard(tr.TP, 0)}
		if k == Gate || k == Up {
			f = fusedAs(t.Name, concat, []string{"gate_proj", "up_proj"}, "linear_fc1", k)
		}
	case k == Row:
		err = divides(t, 1, "columns", tr.TP, side, "tp", "")
		s.axes = []axis{rep(dense), shard(tr.TP, 1)}
	case k == Query, k == Key, k == Value:
		f = fusedAs(t.Name, interleave, []string{"q_proj", "k_proj", "v_proj"}, "linear_qkv", k)
		s.axes, err = megatronQKV(m, t, tr)
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
		if k == InterleavedExpertsGateUp || k == InterleavedExpertsGateUpBias {
			s.order = []int{0, 2, 1, 3} // TEGroupedMLP's fc1 holds [gate; up] per expert
		}
	default:
		err = fmt.Errorf("tensor %s: unknown kind %v", t.Name, t.Kind)
	}
	return s, f, err
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
	spWhole := t.SeqParallelReplicated && g.SeqParallelMoE()
	switch k := t.Kind; {
	case k == Replicated, k == MTPProj:
		s.axes = []axis{rep(G)}
	case k == LatentQ, k == LatentKV:
		s.axes = []axis{rep(G)}
		if latentFused {
			f = fusedAs(t.Name, concat, []string{"q_a_proj", "kv_a_proj_with_mqa"}, "fused_qkv_a_proj", k)
		}
	case k == Embedding, k == LMHead:
		v := t.LayoutShape[0]
		padded, ok := roundUp(v, 64) // vocab_parallel_embedding.py: DEFAULT_VOCAB_PADDING_SIZE
		if !ok || padded%int64(g.TP) != 0 {
			return sideLayout{}, fusion{}, &SplitError{Tensor: t.Name, Side: side, Dim: 0, Size: v, What: fmt.Sprintf("vocabulary rows, %d once padded to a multiple of 64", padded), Key: "tp", By: g.TP,
				Note: "vLLM pads the vocabulary to a multiple of 64 and divides it by tp (vocab_parallel_embedding.py: pad_vocab_size, VocabParallelEmbedding.__init__)"}
		}
		parts, per := vocabParts(v, padded, g.TP)
		s.axes, s.rows = []axis{rep(reps), split(0, parts)}, per
	case spWhole && (k == Gate || k == Up || k == Row):
		s.axes = []axis{rep(G)}
		if k == Gate || k == Up {
			f = fusedAs(t.Name, concat, []string{"gate_proj", "up_proj"}, "gate_up_proj", k)
		}
	case k == Column, k == Gate, k == Up, k == Sinks:
		err = divides(t, 0, rowWhat(k), g.TP, side, "tp", "")
		s.axes = []axis{rep(reps), shard(g.TP, 0)}
		if k == Gate || k == Up {
			f = fusedAs(t.Name, concat, []string{"gate_proj", "up_proj"}, "gate_up_proj", k)
		}
	case k == Row:
		err = divides(t, 1, "columns", g.TP, side, "tp", "")
		s.axes = []axis{rep(reps), shard(g.TP, 1)}
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
	eng := g.EngineRanks()
	E := t.LayoutShape[0]
	oss := t.Kind == InterleavedExpertsGateUp || t.Kind == InterleavedExpertsGateUpBias || t.Kind == TransposedExpertsDown || t.Kind == ExpertsDownBias
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
