package model

import (
	"fmt"
	"slices"

	"github.com/m2n-dev/m2n/dtype"
	"github.com/m2n-dev/m2n/internal/checked"
	"github.com/m2n-dev/m2n/placement"
)

// Kind says what a tensor is in its model. The kind, not the name, decides
// how the trainer (Megatron-Core) and the generator (vLLM) shard the tensor
// and which of them fuse it with its neighbours into one local buffer.
// String names every kind; the kinds a caller tests for (Query, Key and
// Value, ExpertsGateUp and ExpertsDown) are exported, the others are the
// package's own.
type Kind uint8

const (
	// kindReplicated tensors are whole on every rank of both sides: norms,
	// the MoE router and its score-correction bias, the biases of
	// row-parallel layers. (A plain list's name that m2n cannot read a role
	// from is an error, not kindReplicated.)
	kindReplicated Kind = iota
	// kindEmbedding is a vocab-parallel input embedding [V, H]: Shard(0)
	// over TP, on the first pipeline stage (an MTP layer's on the last).
	kindEmbedding
	// kindLMHead is a vocab-parallel output projection [V, H]: Shard(0) over
	// TP, on the last pipeline stage.
	kindLMHead
	// kindLatentQ is MLA's q_a_proj [q_lora_rank, H]: replicated; the
	// generator holds it fused with kindLatentKV in fused_qkv_a_proj.
	kindLatentQ
	// kindLatentKV is MLA's kv_a_proj_with_mqa [kv_lora_rank + rope dim, H]:
	// replicated, fused after kindLatentQ on the generator.
	kindLatentKV
	// kindColumn is a column-parallel weight [out, in] held in a buffer of
	// its own: Shard(0) over TP (MLA's q_b_proj and kv_b_proj; q, k and v
	// of a plain list without head counts).
	kindColumn
	// kindRow is a row-parallel weight [out, in]: Shard(1) over TP (o_proj,
	// down_proj).
	kindRow
	// Query, Key and Value are GQA projections (weights [heads*head_dim,
	// H], or their biases). Their LayoutShape groups rows by key-value head
	// so that Megatron's interleaved linear_qkv is a strided view.
	Query
	Key
	Value
	// kindGate and kindUp are a dense (or shared-expert) MLP's gate_proj
	// and up_proj [I, H] (or their biases): Shard(0) over TP, fused as
	// [gate; up] per rank on both sides.
	kindGate
	kindUp
	// ExpertsGateUp is the routed experts' gate_up_proj [E, 2I, H], gate
	// rows first; its LayoutShape is [E, 2, I, H].
	ExpertsGateUp
	// ExpertsDown is the routed experts' down_proj [E, H, I].
	ExpertsDown
	// kindMTPProj is DeepSeek's multi-token-prediction eh_proj [H, 2H]:
	// column-parallel on the trainer, replicated on the generator.
	kindMTPProj
	// kindSinks are gpt-oss's attention sinks [heads]: Shard(0) by head
	// over TP on both sides (Megatron-Core's softmax_offset, vLLM's sinks).
	kindSinks
	// kindInterleavedExpertsGateUp is gpt-oss's experts.gate_up_proj [E,
	// H, 2I], gate and up interleaved on its last dim. Both frameworks
	// hold it transposed (each expert's [2I, H] rows), so it moves as [E,
	// 2I, H] (Transposed) with LayoutShape [E, I, 2, H].
	kindInterleavedExpertsGateUp
	// kindInterleavedExpertsGateUpBias is its bias [E, 2I], LayoutShape
	// [E, I, 2, 1].
	kindInterleavedExpertsGateUpBias
	// kindTransposedExpertsDown is gpt-oss's experts.down_proj [E, I,
	// H], moving as the frameworks' [E, H, I] (Transposed).
	kindTransposedExpertsDown
	// kindExpertsDownBias is gpt-oss's experts.down_proj_bias [E, H].
	kindExpertsDownBias
	// kindLoRAA and kindLoRAB are a LoRA adapter's A [rank, in] and B
	// [out, rank] (Tensor.Adapter; model.Adapters).
	kindLoRAA
	kindLoRAB
)

var kindNames = [...]string{
	kindReplicated: "replicated", kindEmbedding: "embedding", kindLMHead: "lm-head", kindLatentQ: "latent-q",
	kindLatentKV: "latent-kv", kindColumn: "column", kindRow: "row", Query: "query", Key: "key", Value: "value",
	kindGate: "gate", kindUp: "up", ExpertsGateUp: "experts-gate-up", ExpertsDown: "experts-down", kindMTPProj: "mtp-proj",
	kindSinks: "sinks", kindInterleavedExpertsGateUp: "interleaved-experts-gate-up", kindInterleavedExpertsGateUpBias: "interleaved-experts-gate-up-bias",
	kindTransposedExpertsDown: "transposed-experts-down", kindExpertsDownBias: "experts-down-bias",
	kindLoRAA: "lora-a", kindLoRAB: "lora-b",
}

// experts reports whether the kind is one of the routed experts' tensors
// (Shard(0) over EP by expert).
func (k Kind) experts() bool {
	switch k {
	case ExpertsGateUp, ExpertsDown, kindInterleavedExpertsGateUp, kindInterleavedExpertsGateUpBias, kindTransposedExpertsDown, kindExpertsDownBias:
		return true
	}
	return false
}

func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Tensor is one tensor of a model, named and shaped exactly as transformers'
// model class names its parameter (or persistent buffer) in the state dict.
type Tensor struct {
	Name  string
	Shape []int64 // as transformers holds it
	// LayoutShape is a row-major reshape of Shape (same elements, same
	// order: the global linear index of every element is unchanged; with
	// Transposed, of Shape with its last two dims swapped) that both
	// sides' layouts shard. It equals Shape except for Query, Key and
	// Value ([kv heads, rows per kv head, H]), ExpertsGateUp ([E, 2, I,
	// H]) and gpt-oss's experts, where the fused local buffers need the
	// finer dims.
	LayoutShape []int64
	// Transposed: the frameworks hold the tensor with its last two dims
	// swapped against transformers (gpt-oss's experts), and it moves so.
	Transposed bool
	DType      dtype.DType
	Kind       Kind
	// FP8 reports whether an FP8 generator holds the tensor in
	// float8_e4m3fn: vLLM's Fp8Config.get_quant_method quantizes the
	// weights of LinearBase and FusedMoE layers, and the models build
	// those inside the decoder layers only (not the embeddings, the LM
	// head, norms, routers, biases, nor the modules an FP8 checkpoint
	// leaves unconverted).
	FP8 bool
	// Refresh, when set, says why the generator must run its post-load
	// step for the tensor after every refit step (vLLM derives tensors
	// from it in process_weights_after_loading, or holds it in another
	// dtype), and what that step is.
	Refresh string
	// SeqParallelReplicated: vLLM builds the module whole on every rank
	// (disable_tp) when its MoE runs sequence-parallel (DeepSeek's shared
	// experts).
	SeqParallelReplicated bool
	// Adapter, on the tensors of an adapter model (Adapters), says which
	// weight's LoRA matrix the tensor is.
	Adapter *Adapter
	// Layer is the decoder layer the tensor belongs to (MTP layers follow
	// the decoder layers), or -1 for the tensors outside the layers: the
	// embedding (first pipeline stage), the final norm and the LM head
	// (last stage).
	Layer int
}

// movedShape returns the shape the frameworks hold the tensor in: Shape,
// with its last two dims swapped when Transposed.
func (t Tensor) movedShape() []int64 {
	s := slices.Clone(t.Shape)
	if t.Transposed && len(s) >= 2 {
		s[len(s)-1], s[len(s)-2] = s[len(s)-2], s[len(s)-1]
	}
	return s
}

// Elems returns the number of elements of the tensor.
func (t Tensor) Elems() int64 {
	n, _ := checked.Product(t.Shape...)
	return n
}

// Bytes returns the size of the tensor in bytes.
func (t Tensor) Bytes() int64 { return t.Elems() * int64(t.DType.Size()) }

// Model is a model described as data: its tensors in the order transformers
// lists them, and the few structural numbers the layouts need.
type Model struct {
	// Name is the built-in model's name, the config's model_type or the
	// list file's name.
	Name string
	// Config is the configuration the model was built from; nil for a plain
	// list of tensors.
	Config *Config
	// Layers is the number of decoder layers, not counting MTP layers.
	Layers int
	// MTPLayers is the number of DeepSeek multi-token-prediction layers
	// included, numbered after the decoder layers.
	MTPLayers int
	// Heads and KVHeads are the attention and key-value head counts; zero
	// when unknown (a plain list without them), in which case no tensor is
	// of kind Query, Key or Value.
	Heads, KVHeads int64
	Tensors        []Tensor
}

// Params returns the number of elements over all tensors.
func (m *Model) Params() int64 {
	var n int64
	for _, t := range m.Tensors {
		n += t.Elems()
	}
	return n
}

// Bytes returns the size of all tensors in bytes.
func (m *Model) Bytes() int64 {
	var n int64
	for _, t := range m.Tensors {
		n += t.Bytes()
	}
	return n
}

// tensor returns the tensor of the given name.
func (m *Model) tensor(name string) (Tensor, bool) {
	i := slices.IndexFunc(m.Tensors, func(t Tensor) bool { return t.Name == name })
	if i < 0 {
		return Tensor{}, false
	}
	return m.Tensors[i], true
}

// validate checks what every model must satisfy, wherever it came from:
// unique non-empty names, valid dtypes, non-negative dims whose element and
// byte counts fit in int64, a LayoutShape with the same elements, and
// layers inside [0, Layers+MTPLayers).
func (m *Model) validate() error {
	if len(m.Tensors) == 0 {
		return fmt.Errorf("model %s has no tensors", m.Name)
	}
	seen := make(map[string]bool, len(m.Tensors))
	for _, t := range m.Tensors {
		if t.Name == "" {
			return fmt.Errorf("model %s: a tensor has no name", m.Name)
		}
		if seen[t.Name] {
			return fmt.Errorf("model %s: tensor %s is listed twice", m.Name, t.Name)
		}
		seen[t.Name] = true
		if !t.DType.Valid() {
			return fmt.Errorf("tensor %s: invalid dtype", t.Name)
		}
		if len(t.Shape) > placement.MaxTensorDims || len(t.LayoutShape) > placement.MaxTensorDims {
			return fmt.Errorf("tensor %s: shape %s has more than %d dims", t.Name, placement.FormatShape(t.Shape), placement.MaxTensorDims)
		}
		for _, s := range append(slices.Clone(t.Shape), t.LayoutShape...) {
			if s < 0 {
				return fmt.Errorf("tensor %s: shape %s has a negative dim", t.Name, placement.FormatShape(t.Shape))
			}
		}
		n, ok := checked.Product(t.Shape...)
		if ok {
			_, ok = checked.Mul(n, 16)
		}
		if !ok {
			return fmt.Errorf("tensor %s: shape %s is too large", t.Name, placement.FormatShape(t.Shape))
		}
		if ln, _ := checked.Product(t.LayoutShape...); ln != n {
			return fmt.Errorf("tensor %s: layout shape %s does not hold the %d elements of shape %s",
				t.Name, placement.FormatShape(t.LayoutShape), n, placement.FormatShape(t.Shape))
		}
		if t.Layer < -1 || t.Layer >= m.Layers+m.MTPLayers {
			return fmt.Errorf("tensor %s: layer %d outside the model's %d layers", t.Name, t.Layer, m.Layers+m.MTPLayers)
		}
	}
	return nil
}
