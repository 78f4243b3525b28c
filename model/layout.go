package model

import (
	"errors"
	"fmt"
	"strings"

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
	Tensors    []*TensorLayout
	// groups[side] are the side's local buffers, each holding the views of
	// one or more tensors, in the order of their first tensor.
	groups [2][]*group
}

// TensorLayout is one tensor of a stage: the tensor, its source (trainer)
// and destination (generator) layouts over Tensor.LayoutShape, and where
// each rank's part sits in its local buffers.
type TensorLayout struct {
	Tensor
	Src, Dst placement.Layout
	// Scale is the FP8 scaling mode of a tensor the generator holds in
	// fp8e4m3 (Dst's dtype; see NewQuantized), zero for the others: what
	// reshard.Spec.Scale takes.
	Scale  fp8.Mode
	group  [2]*group
	member [2]int // index into group[side].members
	order  [2]int // position key within the group (q, k, v; gate, up)
}

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
func (t *TensorLayout) Buffer(side Side) string { return t.group[side].name }

// Fused reports whether the tensor shares its local buffer on the given
// side with other tensors.
func (t *TensorLayout) Fused(side Side) bool { return len(t.group[side].members) > 1 }

// New lays a model out from the trainer to the generator. Every tensor's
// layouts follow Megatron-Core on the source and vLLM on the destination:
//
//   - Embedding and LMHead (vocab-parallel), Column, Gate and Up: Shard(0)
//     over TP; Row: Shard(1) over TP; Replicated, LatentQ and LatentKV
//     (and the generator's MTPProj): whole on every rank;
//   - Query, Key and Value over their [kv heads, rows, ...] layout shape:
//     Shard(0) over TP on the trainer (Megatron needs TP to divide the
//     query groups); on the generator Shard(0) over TP when TP divides the
//     key-value heads, else the TP axis splits into kv x TP/kv, q sharded
//     over both and k, v replicated over the second;
//   - ExpertsGateUp and ExpertsDown: Shard(0) over EP and expert-TP on the
//     intermediate dim on the trainer; on the generator Shard(0) over all
//     ranks with EP, else Shard on the intermediate dim over TP;
//   - replication over DP and CP on the trainer (expert-DP for experts),
//     over DP on the generator.
//
// A size that does not divide (heads, experts or a vocabulary by TP or EP),
// a pipeline stage left without layers, or an invalid configuration is an
// error naming the tensor, the dim and both numbers.
func New(m *Model, tr Trainer, gen Generator) (*Layouts, error) {
	return NewQuantized(m, tr, gen, 0)
}

// NewQuantized is New for a generator that serves FP8 weights, converted
// in flight: with a scaling mode (fp8.Block, Row or Tensor; zero is New)
// every bf16 tensor of 2 or 3 dims (Shape: the linear and expert weights,
// the embedding and the LM head) has an fp8e4m3 destination and Scale
// set, as FP8 checkpoints hold them with their weight_scale_inv; 1-D
// tensors (norms, biases) and tensors of other dtypes stay as they are.
// Fused destination buffers hold members of one dtype.
//
// The scale grid is over the layout shape (LayoutShape, whose last two
// dims are the matrix): for Query, Key and Value ([kv heads, rows, H]) a
// matrix per key-value head, for ExpertsGateUp ([E, 2, I, H]) one per
// expert and half. Those are the scales of the checkpoint's own shape in
// Row mode, and in Block mode where the rows per key-value head and I are
// multiples of 128 (so for the built-in models at full size), not in
// Tensor mode (a scale per key-value head's rows, per gate and up).
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
		l.Stages = append(l.Stages, &Stage{Index: s, Layers: r, Members: l.Ranks.Members(s), Trainers: P, Generators: G})
	}
	for _, t := range m.Tensors {
		st := l.Stages[stageOf(t, m, ranges)]
		tl := &TensorLayout{Tensor: t}
		var sf, df fusion
		if tl.Src, sf, err = trainerLayout(m, t, tr); err != nil {
			return nil, err
		}
		if tl.Dst, df, err = generatorLayout(m, t, gen, P); err != nil {
			return nil, err
		}
		if mode != 0 && t.DType == placement.BF16 && (len(t.Shape) == 2 || len(t.Shape) == 3) {
			tl.Dst, tl.Scale = tl.Dst.WithDType(placement.FP8E4M3), mode
		}
		if err := st.join(tl, Src, sf); err != nil {
			return nil, err
		}
		if err := st.join(tl, Dst, df); err != nil {
			return nil, err
		}
		st.Tensors = append(st.Tensors, tl)
	}
	for _, st := range l.Stages {
		if err := st.checkGroups(); err != nil {
			return nil, err
		}
	}
	return l, nil
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
		for s, r := range ranges {
			if t.Layer < r[1] {
				return s
			}
		}
		return last
	case t.Kind == Embedding:
		return 0
	}
	return last
}

// axis is one mesh axis of a side's ranks and what it does to the tensor.
type axis struct {
	size int
	p    placement.Placement
}

func rep(n int) axis        { return axis{n, placement.Replicate()} }
func shard(n, dim int) axis { return axis{n, placement.Shard(dim)} }

// layoutOn builds t's layout over the ranks [start, start+prod(sizes)),
// dropping axes of size 1 (one replicated axis stays when all are 1).
func layoutOn(t Tensor, start int, axes ...axis) (placement.Layout, error) {
	var shape []int
	var ps []placement.Placement
	for _, a := range axes {
		if a.size > 1 {
			shape = append(shape, a.size)
			ps = append(ps, a.p)
		}
	}
	if len(shape) == 0 {
		shape, ps = []int{1}, []placement.Placement{placement.Replicate()}
	}
	msh, err := mesh.Interval(shape, start)
	if err != nil {
		return placement.Layout{}, fmt.Errorf("tensor %s: %w", t.Name, err)
	}
	l, err := placement.NewLayout(t.LayoutShape, t.DType, msh, ps)
	if err != nil {
		return placement.Layout{}, fmt.Errorf("tensor %s: %w", t.Name, err)
	}
	return l, nil
}

// SplitError reports a tensor dim that does not split evenly over one
// side's ranks: dim Dim of the tensor's layout shape holds Size of What
// (experts, key-value heads, vocabulary rows, ...), which Key=By of that
// side's configuration does not divide. Callers can tell the side (and so
// the configuration at fault) with errors.As.
type SplitError struct {
	Tensor string
	Side   Side
	Dim    int
	Size   int64
	What   string
	Key    string // the configuration key: tp, ep, etp, tp/kv
	By     int
	Note   string // why the framework needs it, if it says more
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
func divides(t Tensor, d int, what string, n int, side Side, key string) error {
	if d >= len(t.LayoutShape) {
		return fmt.Errorf("tensor %s: a %s tensor needs a dim %d, its layout shape is %s", t.Name, t.Kind, d, placement.FormatShape(t.LayoutShape))
	}
	if n > 1 && t.LayoutShape[d]%int64(n) != 0 {
		return &SplitError{Tensor: t.Name, Side: side, Dim: d, Size: t.LayoutShape[d], What: what, Key: key, By: n}
	}
	return nil
}

// headsDivide checks, for an attention projection sharded by heads, that
// the model's attention heads split evenly over tp.
func headsDivide(m *Model, t Tensor, tp int, side Side) error {
	if m.Heads == 0 || !strings.Contains(t.Name, "self_attn.") || tp <= 1 {
		return nil
	}
	switch t.Kind {
	case Query, Column, Row:
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
	switch k {
	case Embedding, LMHead:
		return "vocabulary rows"
	case Query, Key, Value:
		return "key-value heads"
	case ExpertsGateUp, ExpertsDown:
		return "experts"
	}
	return "rows"
}

// trainerLayout returns t's layout on a pipeline stage of Megatron-Core
// ranks (communicator-local ranks [0, TP*CP*DP)) and how its local buffer
// fuses it.
func trainerLayout(m *Model, t Tensor, tr Trainer) (placement.Layout, fusion, error) {
	const side = Src
	P, dense := tr.StageRanks(), tr.DP*tr.CP
	if err := headsDivide(m, t, tr.TP, side); err != nil {
		return placement.Layout{}, fusion{}, err
	}
	var axes []axis
	f := fusion{name: t.Name}
	var err error
	switch t.Kind {
	case Replicated, LatentQ, LatentKV:
		axes = []axis{rep(P)}
	case Embedding, LMHead, Column, Gate, Up, MTPProj:
		err = divides(t, 0, rowWhat(t.Kind), tr.TP, side, "tp")
		axes = []axis{rep(dense), shard(tr.TP, 0)}
		if t.Kind == Gate || t.Kind == Up {
			f = fusedAs(t.Name, concat, []string{"gate_proj", "up_proj"}, "linear_fc1", t.Kind)
		}
	case Row:
		err = divides(t, 1, "columns", tr.TP, side, "tp")
		axes = []axis{rep(dense), shard(tr.TP, 1)}
	case Query, Key, Value:
		err = divides(t, 0, rowWhat(t.Kind), tr.TP, side, "tp")
		if se := (*SplitError)(nil); errors.As(err, &se) {
			se.Note = "Megatron-Core needs tp to divide the query groups"
		}
		axes = []axis{rep(dense), shard(tr.TP, 0)}
		f = fusedAs(t.Name, interleave, []string{"q_proj", "k_proj", "v_proj"}, "linear_qkv", t.Kind)
	case ExpertsGateUp, ExpertsDown:
		err = divides(t, 0, "experts", tr.EP, side, "ep")
		if err == nil {
			err = divides(t, 2, "intermediate rows", tr.ETP, side, "etp")
		}
		axes = []axis{rep(tr.ExpertDP()), shard(tr.EP, 0), shard(tr.ETP, 2)}
	default:
		err = fmt.Errorf("tensor %s: unknown kind %v", t.Name, t.Kind)
	}
	if err != nil {
		return placement.Layout{}, fusion{}, err
	}
	l, err := layoutOn(t, 0, axes...)
	return l, f, err
}

// generatorLayout returns t's layout on the vLLM ranks (communicator-local
// ranks [start, start+TP*DP)) and how its local buffer fuses it.
func generatorLayout(m *Model, t Tensor, g Generator, start int) (placement.Layout, fusion, error) {
	const side = Dst
	G := g.Ranks()
	if err := headsDivide(m, t, g.TP, side); err != nil {
		return placement.Layout{}, fusion{}, err
	}
	var axes []axis
	f := fusion{name: t.Name}
	var err error
	switch t.Kind {
	case Replicated, MTPProj:
		axes = []axis{rep(G)}
	case LatentQ, LatentKV:
		axes = []axis{rep(G)}
		f = fusedAs(t.Name, concat, []string{"q_a_proj", "kv_a_proj_with_mqa"}, "fused_qkv_a_proj", t.Kind)
	case Embedding, LMHead, Column, Gate, Up:
		err = divides(t, 0, rowWhat(t.Kind), g.TP, side, "tp")
		axes = []axis{rep(g.DP), shard(g.TP, 0)}
		if t.Kind == Gate || t.Kind == Up {
			f = fusedAs(t.Name, concat, []string{"gate_proj", "up_proj"}, "gate_up_proj", t.Kind)
		}
	case Row:
		err = divides(t, 1, "columns", g.TP, side, "tp")
		axes = []axis{rep(g.DP), shard(g.TP, 1)}
	case Query, Key, Value:
		kv := int(t.LayoutShape[0])
		f = fusedAs(t.Name, concat, []string{"q_proj", "k_proj", "v_proj"}, "qkv_proj", t.Kind)
		switch {
		case g.TP <= kv:
			err = divides(t, 0, "key-value heads", g.TP, side, "tp")
			axes = []axis{rep(g.DP), shard(g.TP, 0)}
		case g.TP%kv != 0:
			err = &SplitError{Tensor: t.Name, Side: side, Dim: 0, Size: int64(kv), What: "key-value heads", Key: "tp", By: g.TP,
				Note: "vLLM needs tp to divide them or be a multiple of them"}
		default:
			// Each key-value head is replicated over the TP/kv ranks that
			// share it; their q heads split those ranks' rows.
			r := g.TP / kv
			axes = []axis{rep(g.DP), shard(kv, 0), rep(r)}
			if t.Kind == Query {
				err = divides(t, 1, "query rows per key-value head", r, side, "tp/kv")
				axes[2] = shard(r, 1)
			}
		}
	case ExpertsGateUp, ExpertsDown:
		if g.EP > 1 {
			err = divides(t, 0, "experts", G, side, "ep")
			axes = []axis{shard(G, 0)}
		} else {
			err = divides(t, 2, "intermediate rows", g.TP, side, "tp")
			axes = []axis{rep(g.DP), shard(g.TP, 2)}
		}
	default:
		err = fmt.Errorf("tensor %s: unknown kind %v", t.Name, t.Kind)
	}
	if err != nil {
		return placement.Layout{}, fusion{}, err
	}
	l, err := layoutOn(t, start, axes...)
	return l, f, err
}
