package model_test

// An independent reference of what every Megatron-Core rank and every vLLM
// rank holds, written from the frameworks' sources and not from m2n's
// layout code: for each rank, each parameter buffer (named as m2n names
// buffers: the transformers module path with the framework's fused module
// name), and each element of it, the transformers tensor and flat index it
// holds, or nothing (padding, or a parameter m2n leaves alone). Sources
// (Megatron-LM at d98e8a6, vLLM and transformers as cited):
//
//   - rank order: megatron/core/parallel_state.py, initialize_model_parallel
//     (order "tp-cp-ep-dp-pp"; the expert RankGenerator folds a stage's
//     ranks as expert-TP, EP, expert-DP); vLLM: rank = dp*TP + tp within an
//     engine (vllm/model_executor/layers/fused_moe/config.py,
//     FusedMoEParallelConfig.flatten_tp_across_dp_and_pcp).
//   - pipeline stages: megatron/core/transformer/transformer_block.py,
//     get_num_layers_to_build (even, or num_layers_in_first/last_pipeline_stage).
//   - vocabulary: megatron/training/vocab_utils.py,
//     calculate_padded_vocab_size (multiple of make_vocab_size_divisible_by
//     x TP) with megatron/core/tensor_parallel/layers.py,
//     VocabParallelEmbedding.__init__ (VocabUtility: rank r rows [r*P,
//     (r+1)*P)); vllm/model_executor/layers/vocab_parallel_embedding.py,
//     pad_vocab_size (64) and VocabParallelEmbedding._get_indices, weight_loader
//     (the padding rows zero-filled).
//   - attention: megatron/core/transformer/attention.py (linear_qkv, a
//     ColumnParallelLinear over [q heads of group 0; k0; v0; ...], its rows
//     cut evenly over TP, also when TP exceeds the groups); vLLM
//     QKVParallelLinear (vllm/model_executor/layers/linear.py: q heads
//     heads/TP, kv heads kv/TP or one replicated over TP/kv).
//   - MLA: megatron/core/models/gpt/gpt_layer_specs.py (TE spec:
//     linear_q_down_proj, linear_kv_down_proj TELinear "duplicated") and
//     multi_latent_attention.py; vllm/model_executor/models/deepseek_v2.py,
//     DeepseekV2MLAAttention (fused_qkv_a_proj when q_lora_rank is set).
//   - MLP and experts: Megatron's linear_fc1 [gate; up] (mlp.py, glu
//     torch.chunk), TEGroupedMLP per expert; vLLM MergedColumnParallelLinear
//     gate_up_proj, FusedMoE w13 [gate; up] / w2, determine_expert_map
//     (fused_moe/layer.py, linear), FusedMoEParallelConfig.make (TP flattened
//     over DP without EP); DeepseekV2MLP(is_sequence_parallel) disable_tp
//     under ParallelConfig.use_sequence_parallel_moe (vllm/config/parallel.py).
//   - gpt-oss: transformers' GptOssExperts (gate_up_proj [E, H, 2I], gate at
//     even columns, up at odd); vllm/model_executor/models/gpt_oss.py,
//     _load_weights_other (w13 narrowed on 2I then permuted to [E, 2I, H],
//     interleaved rows; w2 permuted to [E, H, I]; w2_bias only on rank 0
//     without EP; E // ep experts per rank with EP; sinks by head);
//     Megatron's DotProductAttention softmax_offset (heads / TP).
//   - MTP: megatron/core/transformer/multi_token_prediction.py (eh_proj
//     column-parallel); vllm/model_executor/models/deepseek_mtp.py
//     (eh_proj nn.Linear, whole).
//   - FP8: vllm/model_executor/layers/quantization/fp8.py,
//     Fp8Config.get_quant_method (LinearBase, FusedMoE); routers built with
//     quant_config=None or as nn.Linear.

import (
	"fmt"
	"strings"

	"github.com/m2n-dev/m2n/model"
)

// refTensor is a transformers tensor the reference refers to.
type refTensor struct {
	name  string
	shape []int64
}

// refBuf is one parameter buffer of one rank: for each element the
// tensor (index into refModel.tensors, -1 for none) and its flat index.
type refBuf struct {
	name   string
	fp8    bool
	tensor []int32
	flat   []int64
}

// refRank is one rank's buffers.
type refRank struct {
	bufs  []*refBuf
	byKey map[string]*refBuf
}

// refModel is the reference for one case.
type refModel struct {
	c       model.Config
	mtp     bool
	tensors []refTensor
	index   map[string]int
	// train[stage][local rank], gen[rank]
	train [][]*refRank
	gen   []*refRank
}

func (m *refModel) tensor(name string, shape ...int64) int32 {
	if i, ok := m.index[name]; ok {
		if fmt.Sprint(m.tensors[i].shape) != fmt.Sprint(shape) {
			panic(fmt.Sprintf("reference: %s shaped %v and %v", name, m.tensors[i].shape, shape))
		}
		return int32(i)
	}
	m.index[name] = len(m.tensors)
	m.tensors = append(m.tensors, refTensor{name, shape})
	return int32(len(m.tensors) - 1)
}

func newRank() *refRank { return &refRank{byKey: map[string]*refBuf{}} }

func (r *refRank) buf(name string, fp8 bool) *refBuf {
	if b, ok := r.byKey[name]; ok {
		return b
	}
	b := &refBuf{name: name, fp8: fp8}
	r.bufs = append(r.bufs, b)
	r.byKey[name] = b
	return b
}

// cells appends n elements of tensor t from flat index at, step apart.
func (b *refBuf) cells(t int32, at, n, step int64) {
	for k := int64(0); k < n; k++ {
		b.tensor = append(b.tensor, t)
		b.flat = append(b.flat, at+k*step)
	}
}

func (b *refBuf) pad(n int64) {
	for k := int64(0); k < n; k++ {
		b.tensor = append(b.tensor, -1)
		b.flat = append(b.flat, -1)
	}
}

// rows appends rows [lo, hi) of t seen as [rows, width].
func (b *refBuf) rows(t int32, width, lo, hi int64) { b.cells(t, lo*width, (hi-lo)*width, 1) }

// cols appends, for every row of t seen as [rows, width], its columns [lo, hi).
func (b *refBuf) cols(t int32, nrows, width, lo, hi int64) {
	for r := int64(0); r < nrows; r++ {
		b.cells(t, r*width+lo, hi-lo, 1)
	}
}

func ceilTo(v, k int64) int64 { return (v + k - 1) / k * k }

// vocabParallel returns what appends to rk rank tp's per rows of a
// vocabulary-parallel tensor [VocabSize, HiddenSize], padded with zeros past
// the last real row.
func (m *refModel) vocabParallel(rk *refRank, per int64, tp int) func(name string) {
	V, H := m.c.VocabSize, m.c.HiddenSize
	return func(name string) {
		t := m.tensor(name, V, H)
		b := rk.buf(name, false)
		lo := int64(tp) * per
		hi := min(V, lo+per)
		if lo < hi {
			b.rows(t, H, lo, hi)
		} else {
			hi = lo
		}
		b.pad((per - (hi - lo)) * H)
	}
}

// whole returns what appends to rk a tensor that every rank holds whole.
func (m *refModel) whole(rk *refRank) func(name string, shape ...int64) {
	return func(name string, shape ...int64) {
		t := m.tensor(name, shape...)
		n := int64(1)
		for _, s := range shape {
			n *= s
		}
		rk.buf(name, false).cells(t, 0, n, 1)
	}
}

// mtpLayers appends the MTP layers after the last decoder layer, in the
// order both frameworks hold them; ehProj appends eh_proj.weight and layer
// the decoder layer l inside the MTP layer.
func (m *refModel) mtpLayers(vocab func(string), whole func(string, ...int64), ehProj func(name string), layer func(l int)) {
	c := m.c
	H := c.HiddenSize
	for k := 0; k < c.MTPLayers; k++ {
		l := c.Layers + k
		p := fmt.Sprintf("model.layers.%d.", l)
		vocab(p + "embed_tokens.weight")
		whole(p+"enorm.weight", H)
		whole(p+"hnorm.weight", H)
		ehProj(p + "eh_proj.weight")
		layer(l)
		whole(p+"shared_head.norm.weight", H)
		vocab(p + "shared_head.head.weight")
	}
}

// refCase is one configuration of the suite.
type refCase struct {
	Name   string // file name of the expected data
	Config string // the config.json (a file under testdata/frameworks/models)
	MTP    bool
	Train  string
	Gen    string
	FP8    string // "", or the scaling mode
	Note   string // what the case exercises
}

// megatron is the reference's reading of a trainer configuration.
type megatron struct {
	tp, pp, cp, dp, ep, etp, div int
	first, last                  int
}

// vllm is the reference's reading of a generator configuration.
type vllm struct {
	tp, dp, engines int
	ep              bool
	sp              bool // use_sequence_parallel_moe
}

// stageLayers is get_num_layers_to_build over all stages.
func (mg megatron) stageLayers(layers int) [][2]int {
	counts := make([]int, mg.pp)
	if mg.first == 0 && mg.last == 0 {
		if layers%mg.pp != 0 {
			panic("reference: num_layers must divide by pp without first/last (transformer_block.py)")
		}
		for i := range counts {
			counts[i] = layers / mg.pp
		}
	} else {
		rest, stages := layers, mg.pp
		if mg.first > 0 {
			rest -= mg.first
			stages--
		}
		if mg.last > 0 {
			rest -= mg.last
			stages--
		}
		for i := range counts {
			if stages > 0 {
				counts[i] = rest / stages
			}
		}
		if mg.first > 0 {
			counts[0] = mg.first
		}
		if mg.last > 0 {
			counts[mg.pp-1] = mg.last
		}
	}
	out := make([][2]int, mg.pp)
	lo := 0
	for i, n := range counts {
		out[i] = [2]int{lo, lo + n}
		lo += n
	}
	return out
}

// buildReference computes every rank's buffers for one case.
func buildReference(c model.Config, mtp bool, mg megatron, vl vllm, fp8 bool) *refModel {
	m := &refModel{c: c, mtp: mtp, index: map[string]int{}}
	// the transformers tensors, registered as the layers are walked; the
	// reference registers every tensor the trainer holds (all stages).
	ranges := mg.stageLayers(c.Layers)
	P := mg.tp * mg.cp * mg.dp
	m.train = make([][]*refRank, mg.pp)
	for s := range ranges {
		for r := 0; r < P; r++ {
			rk := newRank()
			m.megatronRank(rk, mg, s, ranges[s], r)
			m.train[s] = append(m.train[s], rk)
		}
	}
	G := vl.engines * vl.dp * vl.tp
	for g := 0; g < G; g++ {
		rk := newRank()
		m.vllmRank(rk, vl, g, fp8)
		m.gen = append(m.gen, rk)
	}
	return m
}

// --- transformers tensors -------------------------------------------------

func (m *refModel) qRows() int64  { return m.c.Heads * m.c.HeadDim }
func (m *refModel) kvRows() int64 { return m.c.KVHeads * m.c.HeadDim }
func (m *refModel) mla() bool     { return m.c.ModelType == "deepseek_v3" || m.c.ModelType == "kimi_k2" }
func (m *refModel) oss() bool     { return m.c.ModelType == "gpt_oss" }

// moeLayer is the transformers model's own rule for a layer's MLP.
func (m *refModel) moeLayer(l int) bool {
	c := m.c
	switch c.ModelType {
	case "deepseek_v3", "kimi_k2", "glm4_moe":
		return l >= c.FirstDenseLayers
	case "qwen3_moe":
		for _, x := range c.MLPOnlyLayers {
			if x == l {
				return false
			}
		}
		return (l+1)%c.DecoderSparseStep == 0
	case "mixtral", "gpt_oss":
		return true
	}
	return false
}

// attnBias says which attention projections have biases in transformers'
// attention module of the model type.
func (m *refModel) attnBias() (qkv, o bool) {
	switch m.c.ModelType {
	case "qwen2":
		return true, false // Qwen2Attention: q, k, v bias=True, o_proj bias=False
	case "glm4_moe":
		return m.c.AttentionBias, false // Glm4MoeAttention: o_proj bias=False
	}
	return m.c.AttentionBias, m.c.AttentionBias
}

func (m *refModel) qkNorm() bool {
	return m.c.ModelType == "qwen3" || m.c.ModelType == "qwen3_moe" || (m.c.ModelType == "glm4_moe" && m.c.QKNorm)
}

// --- Megatron-Core ---------------------------------------------------------

func (m *refModel) megatronRank(rk *refRank, mg megatron, stage int, layers [2]int, r int) {
	c := m.c
	tp := r % mg.tp
	etp, ep := r%mg.etp, r/mg.etp%mg.ep
	V, H := c.VocabSize, c.HiddenSize
	vocab := m.vocabParallel(rk, ceilTo(V, int64(mg.div*mg.tp))/int64(mg.tp), tp)
	whole := m.whole(rk)
	if stage == 0 {
		vocab("model.embed_tokens.weight")
	}
	for l := layers[0]; l < layers[1]; l++ {
		m.megatronLayer(rk, mg, l, tp, etp, ep, whole)
	}
	if stage == mg.pp-1 {
		whole("model.norm.weight", H)
		if !c.TieEmbeddings {
			vocab("lm_head.weight")
		}
		if m.mtp {
			m.mtpLayers(vocab, whole, func(name string) {
				eh := m.tensor(name, H, 2*H) // multi_token_prediction.py: column-parallel over its H outputs
				n := H / int64(mg.tp)
				rk.buf(name, false).rows(eh, 2*H, int64(tp)*n, int64(tp+1)*n)
			}, func(l int) { m.megatronLayerAs(rk, mg, l, tp, etp, ep, true, whole) })
		}
	}
}

func (m *refModel) megatronLayer(rk *refRank, mg megatron, l, tp, etp, ep int, whole func(string, ...int64)) {
	m.megatronLayerAs(rk, mg, l, tp, etp, ep, m.moeLayer(l), whole)
}

func (m *refModel) megatronLayerAs(rk *refRank, mg megatron, l, tp, etp, ep int, moe bool, whole func(string, ...int64)) {
	c := m.c
	H := c.HiddenSize
	p := fmt.Sprintf("model.layers.%d.", l)
	a := p + "self_attn."
	TP := int64(mg.tp)
	t64 := int64(tp)
	if m.mla() {
		m.megatronMLA(rk, a, TP, t64, whole)
	} else {
		qkvBias, oBias := m.attnBias()
		// linear_qkv: rows of [q heads of group g; k_g; v_g] for every group, cut evenly over TP.
		kv, hd := c.KVHeads, c.HeadDim
		qpg := c.Heads / kv * hd
		G := qpg + 2*hd
		total := kv * G
		R := total / TP
		q := m.tensor(a+"q_proj.weight", m.qRows(), H)
		k := m.tensor(a+"k_proj.weight", m.kvRows(), H)
		v := m.tensor(a+"v_proj.weight", m.kvRows(), H)
		var qb, kb, vb int32
		if qkvBias {
			qb, kb, vb = m.tensor(a+"q_proj.bias", m.qRows()), m.tensor(a+"k_proj.bias", m.kvRows()), m.tensor(a+"v_proj.bias", m.kvRows())
		}
		wbuf := rk.buf(a+"linear_qkv.weight", false)
		var bbuf *refBuf
		if qkvBias {
			bbuf = rk.buf(a+"linear_qkv.bias", false)
		}
		for x := t64 * R; x < (t64+1)*R; x++ {
			g, o := x/G, x%G
			var t, bt int32
			var row int64
			switch {
			case o < qpg:
				t, bt, row = q, qb, g*qpg+o
			case o < qpg+hd:
				t, bt, row = k, kb, g*hd+o-qpg
			default:
				t, bt, row = v, vb, g*hd+o-qpg-hd
			}
			wbuf.rows(t, H, row, row+1)
			if qkvBias {
				bbuf.rows(bt, 1, row, row+1)
			}
		}
		m.attnOut(rk, a, TP, t64, oBias, false, whole)
	}
	if moe {
		m.megatronMoE(rk, mg, p+"mlp.", tp, etp, ep, whole)
	} else {
		m.megatronMLP(rk, p+"mlp.", c.IntermediateSize, TP, t64, c.MLPBias, whole)
	}
	whole(p+"input_layernorm.weight", H)
	whole(p+"post_attention_layernorm.weight", H)
}

// attnOut is the end of the attention both frameworks cut the same way:
// o_proj (Megatron's linear_proj) its columns over TP, its bias whole, the
// q and k norms whole, the sinks (Megatron's
// DotProductAttention.softmax_offset) their heads over TP; fp8 marks
// o_proj's weight as converting to FP8.
func (m *refModel) attnOut(rk *refRank, a string, TP, tp int64, oBias, fp8 bool, whole func(string, ...int64)) {
	c := m.c
	H := c.HiddenSize
	o := m.tensor(a+"o_proj.weight", H, m.qRows())
	n := m.qRows() / TP
	rk.buf(a+"o_proj.weight", fp8).cols(o, H, m.qRows(), tp*n, (tp+1)*n)
	if oBias {
		whole(a+"o_proj.bias", H)
	}
	if m.qkNorm() {
		whole(a+"q_norm.weight", c.HeadDim)
		whole(a+"k_norm.weight", c.HeadDim)
	}
	if m.oss() {
		s := m.tensor(a+"sinks", c.Heads)
		n := c.Heads / TP
		rk.buf(a+"sinks", false).rows(s, 1, tp*n, (tp+1)*n)
	}
}

func (m *refModel) megatronMLA(rk *refRank, a string, TP, tp int64, whole func(string, ...int64)) {
	c := m.c
	H := c.HiddenSize
	qk := c.QKNopeHeadDim + c.QKRopeHeadDim
	split := func(name string, rows, width int64) { // column-parallel: rows over TP
		t := m.tensor(name, rows, width)
		n := rows / TP
		rk.buf(name, false).rows(t, width, tp*n, (tp+1)*n)
	}
	if c.QLoraRank == 0 {
		split(a+"q_proj.weight", c.Heads*qk, H)
	} else {
		whole(a+"q_a_proj.weight", c.QLoraRank, H) // TELinear, parallel_mode duplicated
		whole(a+"q_a_layernorm.weight", c.QLoraRank)
		split(a+"q_b_proj.weight", c.Heads*qk, c.QLoraRank)
	}
	whole(a+"kv_a_proj_with_mqa.weight", c.KVLoraRank+c.QKRopeHeadDim, H)
	whole(a+"kv_a_layernorm.weight", c.KVLoraRank)
	split(a+"kv_b_proj.weight", c.Heads*(c.QKNopeHeadDim+c.VHeadDim), c.KVLoraRank)
	o := m.tensor(a+"o_proj.weight", H, c.Heads*c.VHeadDim)
	n := c.Heads * c.VHeadDim / TP
	rk.buf(a+"o_proj.weight", false).cols(o, H, c.Heads*c.VHeadDim, tp*n, (tp+1)*n)
}

// megatronMLP: linear_fc1 holds the rank's gate rows then its up rows;
// linear_fc2 (down_proj) its columns.
func (m *refModel) megatronMLP(rk *refRank, p string, I, TP, tp int64, bias bool, whole func(string, ...int64)) {
	m.columnMLP(rk, p, "linear_fc1", I, TP, tp, bias, false, whole)
}

// ossExperts holds gpt-oss's experts as both frameworks name them, after
// HF: gate_up_proj [E, H, 2I] (gate and up interleaved by column),
// down_proj [E, I, H], each with its bias, and the rank's buffers of the
// four; the router (nn.Linear) is whole on every rank.
type ossExperts struct {
	gu, gub, dn, dnb int32
	w, wb, d, db     *refBuf
}

func (m *refModel) ossExperts(rk *refRank, p string, whole func(string, ...int64)) ossExperts {
	H, E, I := m.c.HiddenSize, m.c.Experts, m.c.MoEIntermediateSize
	whole(p+"router.weight", E, H)
	whole(p+"router.bias", E)
	x := ossExperts{
		gu:  m.tensor(p+"experts.gate_up_proj", E, H, 2*I),
		gub: m.tensor(p+"experts.gate_up_proj_bias", E, 2*I),
		dn:  m.tensor(p+"experts.down_proj", E, I, H),
		dnb: m.tensor(p+"experts.down_proj_bias", E, H),
	}
	x.w, x.wb = rk.buf(p+"experts.gate_up_proj", false), rk.buf(p+"experts.gate_up_proj_bias", false)
	x.d, x.db = rk.buf(p+"experts.down_proj", false), rk.buf(p+"experts.down_proj_bias", false)
	return x
}

func (m *refModel) megatronMoE(rk *refRank, mg megatron, p string, tp, etp, ep int, whole func(string, ...int64)) {
	c := m.c
	H, E, I := c.HiddenSize, c.Experts, c.MoEIntermediateSize
	El := E / int64(mg.ep)
	Il := I / int64(mg.etp)
	e0, i0 := int64(ep)*El, int64(etp)*Il
	if m.oss() {
		x := m.ossExperts(rk, p, whole)
		gu, gub, dn, dnb, w, wb, d, db := x.gu, x.gub, x.dn, x.dnb, x.w, x.wb, x.d, x.db
		for e := e0; e < e0+El; e++ {
			for half := int64(0); half < 2; half++ { // TEGroupedMLP fc1: [gate; up]; gpt-oss: gate = column 2j, up = 2j+1
				for i := i0; i < i0+Il; i++ {
					w.cells(gu, e*H*2*I+2*i+half, H, 2*I) // fc1 row: HF gate_up[e, :, 2i+half]
				}
			}
			for half := int64(0); half < 2; half++ {
				for i := i0; i < i0+Il; i++ {
					wb.cells(gub, e*2*I+2*i+half, 1, 1)
				}
			}
			for h := int64(0); h < H; h++ { // fc2 [H, I/etp]: HF down[e, i, h]
				d.cells(dn, (e*I+i0)*H+h, Il, H)
			}
			db.cells(dnb, e*H, H, 1) // fc2 bias, whole on every expert-TP rank
		}
		return
	}
	gu := m.tensor(p+"experts.gate_up_proj", E, 2*I, H)
	dn := m.tensor(p+"experts.down_proj", E, H, I)
	w, d := rk.buf(p+"experts.gate_up_proj", false), rk.buf(p+"experts.down_proj", false)
	for e := e0; e < e0+El; e++ {
		for half := int64(0); half < 2; half++ {
			w.rows(gu, H, e*2*I+half*I+i0, e*2*I+half*I+i0+Il)
		}
		for h := int64(0); h < H; h++ {
			d.cells(dn, (e*H+h)*I+i0, Il, 1)
		}
	}
	whole(p+"gate.weight", E, H)
	if c.ModelType == "deepseek_v3" || c.ModelType == "kimi_k2" || c.ModelType == "glm4_moe" {
		whole(p+"gate.e_score_correction_bias", E) // TopKRouter.expert_bias
		if c.SharedExperts > 0 {
			m.megatronMLP(rk, p+"shared_experts.", I*c.SharedExperts, int64(mg.tp), int64(tp), false, whole)
		}
	}
}

// --- vLLM ------------------------------------------------------------------

func (m *refModel) vllmRank(rk *refRank, vl vllm, g int, fp8 bool) {
	c := m.c
	tp := g % vl.tp
	V, H := c.VocabSize, c.HiddenSize
	vocab := m.vocabParallel(rk, ceilTo(V, 64)/int64(vl.tp), tp)
	whole := m.whole(rk)
	vocab("model.embed_tokens.weight")
	for l := 0; l < c.Layers; l++ {
		m.vllmLayer(rk, vl, g, l, m.moeLayer(l), fp8, whole)
	}
	whole("model.norm.weight", H)
	if !c.TieEmbeddings {
		vocab("lm_head.weight")
	}
	if m.mtp { // deepseek_mtp.py
		m.mtpLayers(vocab, whole, func(name string) {
			whole(name, H, 2*H) // nn.Linear: whole, never quantized
		}, func(l int) { m.vllmLayer(rk, vl, g, l, true, fp8, whole) })
	}
}

func (m *refModel) vllmLayer(rk *refRank, vl vllm, g, l int, moe, fp8 bool, whole func(string, ...int64)) {
	c := m.c
	H := c.HiddenSize
	TP, tp := int64(vl.tp), int64(g%vl.tp)
	p := fmt.Sprintf("model.layers.%d.", l)
	a := p + "self_attn."
	if m.mla() {
		split := func(name string, rows, width int64) {
			t := m.tensor(name, rows, width)
			n := rows / TP
			rk.buf(name, fp8).rows(t, width, tp*n, (tp+1)*n)
		}
		qk := c.QKNopeHeadDim + c.QKRopeHeadDim
		kva := m.tensor(a+"kv_a_proj_with_mqa.weight", c.KVLoraRank+c.QKRopeHeadDim, H)
		if c.QLoraRank > 0 {
			qa := m.tensor(a+"q_a_proj.weight", c.QLoraRank, H)
			b := rk.buf(a+"fused_qkv_a_proj.weight", fp8) // [q_a; kv_a], whole (disable_tp)
			b.rows(qa, H, 0, c.QLoraRank)
			b.rows(kva, H, 0, c.KVLoraRank+c.QKRopeHeadDim)
			whole(a+"q_a_layernorm.weight", c.QLoraRank)
			split(a+"q_b_proj.weight", c.Heads*qk, c.QLoraRank)
		} else {
			split(a+"q_proj.weight", c.Heads*qk, H)
			rk.buf(a+"kv_a_proj_with_mqa.weight", fp8).rows(kva, H, 0, c.KVLoraRank+c.QKRopeHeadDim)
		}
		whole(a+"kv_a_layernorm.weight", c.KVLoraRank)
		split(a+"kv_b_proj.weight", c.Heads*(c.QKNopeHeadDim+c.VHeadDim), c.KVLoraRank)
		o := m.tensor(a+"o_proj.weight", H, c.Heads*c.VHeadDim)
		n := c.Heads * c.VHeadDim / TP
		rk.buf(a+"o_proj.weight", fp8).cols(o, H, c.Heads*c.VHeadDim, tp*n, (tp+1)*n)
	} else {
		qkvBias, oBias := m.attnBias()
		hd, kv := c.HeadDim, c.KVHeads
		qh := c.Heads / TP
		var k0, kn int64 // the rank's kv heads
		if TP <= kv {
			kn = kv / TP
			k0 = tp * kn
		} else {
			kn, k0 = 1, tp/(TP/kv)
		}
		q := m.tensor(a+"q_proj.weight", m.qRows(), H)
		k := m.tensor(a+"k_proj.weight", m.kvRows(), H)
		v := m.tensor(a+"v_proj.weight", m.kvRows(), H)
		b := rk.buf(a+"qkv_proj.weight", fp8)
		b.rows(q, H, tp*qh*hd, (tp+1)*qh*hd)
		b.rows(k, H, k0*hd, (k0+kn)*hd)
		b.rows(v, H, k0*hd, (k0+kn)*hd)
		if qkvBias {
			qb, kb, vb := m.tensor(a+"q_proj.bias", m.qRows()), m.tensor(a+"k_proj.bias", m.kvRows()), m.tensor(a+"v_proj.bias", m.kvRows())
			bb := rk.buf(a+"qkv_proj.bias", false)
			bb.rows(qb, 1, tp*qh*hd, (tp+1)*qh*hd)
			bb.rows(kb, 1, k0*hd, (k0+kn)*hd)
			bb.rows(vb, 1, k0*hd, (k0+kn)*hd)
		}
		m.attnOut(rk, a, TP, tp, oBias, fp8, whole)
	}
	if moe {
		m.vllmMoE(rk, vl, g, p+"mlp.", fp8, whole)
	} else {
		m.vllmMLP(rk, p+"mlp.", c.IntermediateSize, TP, tp, c.MLPBias, fp8, whole)
	}
	whole(p+"input_layernorm.weight", H)
	whole(p+"post_attention_layernorm.weight", H)
}

// vllmMLP: MergedColumnParallelLinear gate_up_proj [gate; up] rows over TP
// (TP 1: whole), RowParallelLinear down_proj columns.
func (m *refModel) vllmMLP(rk *refRank, p string, I, TP, tp int64, bias, fp8 bool, whole func(string, ...int64)) {
	m.columnMLP(rk, p, "gate_up_proj", I, TP, tp, bias, fp8, whole)
}

// columnMLP is the MLP both frameworks cut the same way: the fused tensor
// (Megatron's linear_fc1, vLLM's gate_up_proj) holds rank tp's gate rows
// then its up rows, down_proj its columns; fp8 marks the weights that
// convert to FP8.
func (m *refModel) columnMLP(rk *refRank, p, fused string, I, TP, tp int64, bias, fp8 bool, whole func(string, ...int64)) {
	H := m.c.HiddenSize
	n := I / TP
	g, u, d := m.tensor(p+"gate_proj.weight", I, H), m.tensor(p+"up_proj.weight", I, H), m.tensor(p+"down_proj.weight", H, I)
	b := rk.buf(p+fused+".weight", fp8)
	b.rows(g, H, tp*n, (tp+1)*n)
	b.rows(u, H, tp*n, (tp+1)*n)
	if bias {
		gb, ub := m.tensor(p+"gate_proj.bias", I), m.tensor(p+"up_proj.bias", I)
		bb := rk.buf(p+fused+".bias", false)
		bb.rows(gb, 1, tp*n, (tp+1)*n)
		bb.rows(ub, 1, tp*n, (tp+1)*n)
	}
	rk.buf(p+"down_proj.weight", fp8).cols(d, H, I, tp*n, (tp+1)*n)
	if bias {
		whole(p+"down_proj.bias", H)
	}
}

// localExperts is determine_expert_map's linear placement: rank r of n
// ranks holds experts [r*base + min(r, rem), ...), base+1 of them for the
// first rem ranks.
func localExperts(E int64, r, n int) (int64, int64) {
	base, rem := E/int64(n), E%int64(n)
	lo := int64(r)*base + min(int64(r), rem)
	cnt := base
	if int64(r) < rem {
		cnt++
	}
	return lo, cnt
}

func (m *refModel) vllmMoE(rk *refRank, vl vllm, g int, p string, fp8 bool, whole func(string, ...int64)) {
	c := m.c
	H, E, I := c.HiddenSize, c.Experts, c.MoEIntermediateSize
	F := vl.tp * vl.dp // an engine's ranks, over which FusedMoE flattens TP
	f := g % F         // dp*TP + tp
	var e0, ne int64   // the rank's experts
	var i0, ni int64   // and their intermediate rows
	if vl.ep {
		e0, ne = localExperts(E, f, F)
		if m.oss() { // gpt_oss.py: experts_per_rank = E // ep
			ne = E / int64(F)
			e0 = int64(f) * ne
		}
		i0, ni = 0, I
	} else {
		e0, ne = 0, E
		ni = I / int64(F)
		i0 = int64(f) * ni
	}
	if m.oss() {
		x := m.ossExperts(rk, p, whole)
		gu, gub, dn, dnb, w, wb, d, db := x.gu, x.gub, x.dn, x.dnb, x.w, x.wb, x.d, x.db
		for e := e0; e < e0+ne; e++ {
			for r := int64(0); r < 2*ni; r++ { // w13 row r = HF column 2*i0 + r (narrowed, permuted)
				w.cells(gu, e*H*2*I+2*i0+r, H, 2*I)
			}
			wb.cells(gub, e*2*I+2*i0, 2*ni, 1)
			for h := int64(0); h < H; h++ { // w2 [E, H, I]: HF down[e, i, h]
				d.cells(dn, (e*I+i0)*H+h, ni, H)
			}
		}
		switch {
		case vl.ep:
			db.cells(dnb, e0*H, ne*H, 1)
		case f == 0:
			db.cells(dnb, 0, E*H, 1)
		default:
			db.pad(E * H) // "only load on rank 0": the others hold zeros
		}
		return
	}
	gu := m.tensor(p+"experts.gate_up_proj", E, 2*I, H)
	dn := m.tensor(p+"experts.down_proj", E, H, I)
	w, d := rk.buf(p+"experts.gate_up_proj", fp8), rk.buf(p+"experts.down_proj", fp8)
	for e := e0; e < e0+ne; e++ {
		for half := int64(0); half < 2; half++ { // w13: [w1 (gate); w3 (up)]
			w.rows(gu, H, e*2*I+half*I+i0, e*2*I+half*I+i0+ni)
		}
		for h := int64(0); h < H; h++ {
			d.cells(dn, (e*H+h)*I+i0, ni, 1)
		}
	}
	whole(p+"gate.weight", E, H) // quant_config=None / nn.Linear: never FP8
	if c.ModelType == "deepseek_v3" || c.ModelType == "kimi_k2" || c.ModelType == "glm4_moe" {
		whole(p+"gate.e_score_correction_bias", E)
		if c.SharedExperts > 0 {
			TP, tp := int64(vl.tp), int64(g%vl.tp)
			if vl.sp && c.ModelType != "glm4_moe" { // DeepseekV2MLP(is_sequence_parallel): disable_tp
				TP, tp = 1, 0
			}
			m.vllmMLP(rk, p+"shared_experts.", I*c.SharedExperts, TP, tp, false, fp8, whole)
		}
	}
}

// parseRefTrainer and parseRefGenerator read the case strings on the
// reference's own terms (Megatron-Core's defaults: etp = tp, vocab divisor
// 128; vLLM's: sequence-parallel MoE under the default all2all backend
// with EP, tp > 1 and dp > 1).
func parseRefTrainer(s string) megatron {
	mg := megatron{tp: 1, pp: 1, cp: 1, dp: 1, ep: 1, div: 128}
	ints := map[string]*int{"tp": &mg.tp, "pp": &mg.pp, "cp": &mg.cp, "dp": &mg.dp, "ep": &mg.ep,
		"etp": &mg.etp, "vocab-div": &mg.div, "first": &mg.first, "last": &mg.last}
	forRefPairs(s, func(k, _ string, n int) {
		if f, ok := ints[k]; ok {
			*f = n
		}
	})
	if mg.etp == 0 {
		mg.etp = mg.tp
	}
	return mg
}

// forRefPairs calls set with every key=value pair of the comma-separated s,
// and the value read as an integer (0 where it is none).
func forRefPairs(s string, set func(k, v string, n int)) {
	for _, kv := range strings.Split(s, ",") {
		k, v, _ := strings.Cut(kv, "=")
		var n int
		fmt.Sscan(v, &n)
		set(k, v, n)
	}
}

func parseRefGenerator(s string) vllm {
	vl := vllm{tp: 1, dp: 1, engines: 1}
	all2all := "allgather_reducescatter"
	forRefPairs(s, func(k, v string, n int) {
		switch k {
		case "tp":
			vl.tp = n
		case "dp":
			vl.dp = n
		case "ep":
			vl.ep = n > 1
		case "engines":
			vl.engines = n
		case "all2all":
			all2all = v
		}
	})
	sp := map[string]bool{"allgather_reducescatter": true, "deepep_high_throughput": true, "deepep_low_latency": true,
		"mori_high_throughput": true, "mori_low_latency": true, "nixl_ep": true}
	vl.sp = sp[all2all] && vl.ep && vl.tp > 1 && vl.dp > 1
	return vl
}
