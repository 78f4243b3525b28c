package model

import (
	"fmt"
	"slices"
	"strings"

	"github.com/m2n-dev/m2n/dtype"
	"github.com/m2n-dev/m2n/fp8"
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
	// with P = TP x CP x DP of the Trainer, and the generator is the
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
	// refit.Spec.Scale takes.
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
	dtype  [2]dtype.DType
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

// bufferName returns the name of the local buffer that holds the tensor's part
// on every rank of the given side. A tensor alone in its buffer names it
// after itself; a fused buffer is named after the module that fuses it, as
// that framework names it (Megatron's linear_qkv and linear_fc1; vLLM's
// qkv_proj, gate_up_proj and fused_qkv_a_proj), under the same prefix.
func (t *TensorLayout) bufferName(side Side) string { return t.whole.group[side].name }

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
//   - column-parallel weights (MLA's q_b_proj and kv_b_proj, the MLP's
//     gate and up; gpt-oss's sinks) Shard(0) over
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
//     MoE runs sequence-parallel (Generator.All2All);
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
	if err := tr.validate(); err != nil {
		return nil, err
	}
	if err := gen.validate(); err != nil {
		return nil, err
	}
	if mode != 0 {
		if err := checkConvertible(m); err != nil {
			return nil, err
		}
	}
	tr, gen = tr.normal(), gen.normal()
	ranges, err := stageLayers(m.Layers, tr)
	if err != nil {
		return nil, fmt.Errorf("model %s: %w", m.Name, err)
	}
	P, G := tr.stageRanks(), gen.Ranks()
	l := &Layouts{Model: m, Trainer: tr, Generator: gen, Ranks: pipeline.Contiguous(tr.PP, P, G), FP8: mode}
	if err := l.Ranks.Validate(tr.Ranks() + G); err != nil {
		return nil, err
	}
	for s, r := range ranges {
		st := &Stage{Index: s, Layers: r, Members: l.Ranks.Members(s), Trainers: P, Generators: G}
		st.byName = [2]map[string]*group{{}, {}}
		l.Stages = append(l.Stages, st)
	}
	latentFused := slices.ContainsFunc(m.Tensors, func(t Tensor) bool { return t.Kind == kindLatentQ })
	for _, t := range m.Tensors {
		st := l.Stages[stageOf(t, m, ranges)]
		w := &wholeTensor{Tensor: t, dtype: [2]dtype.DType{t.DType, t.DType}}
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
			w.dtype[Dst], scale = dtype.FP8E4M3, mode
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
	case t.Kind == kindEmbedding:
		return 0
	}
	return last
}

// newLayout builds a layout over a mesh of the given shape: the ranks
// listed, or [start, ...) when ranks is nil.
func newLayout(name string, shape []int64, dt dtype.DType, ms []int, ps []placement.Placement, ranks []int, start int) (placement.Layout, error) {
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
