// Package model turns a whole model and two parallel configurations into
// the exact list of tensor layouts a refit moves: every tensor of the model,
// named as transformers names it, with its source (Megatron-Core trainer)
// and destination (vLLM generator) layout per pipeline stage, and for every
// rank the local buffer and strided view that hold its part, fused weights
// included. The package is pure: it plans nothing and moves nothing.
//
// A model is data. Load takes a built-in name (deepseek-v3, kimi-k2,
// qwen3-235b-a22b, glm-4.5-air, gpt-oss-120b, llama-3.1-70b, qwen2.5-72b),
// a HuggingFace config.json (model_type deepseek_v3, kimi_k2, glm4_moe,
// gpt_oss, llama, mistral, mixtral, qwen2, qwen3, qwen3_moe: missing keys
// take exactly the defaults of transformers' configuration class) or a
// plain JSON list of tensors (refused where a name does not say how the
// frameworks split the tensor); LoadOptions scale it down (Scale divides
// the widths and expert counts so that the real structure fits on CPU
// ranks; Layers cuts the decoder layers) or add DeepSeek's MTP layer:
//
//	m, _ := model.Load("deepseek-v3", model.LoadOptions{})
//	m.Params() // 671026419200, DeepSeek-V3's published 671.0B
//
// New lays it out. Trainer and Generator say how each side is parallel
// (ParseTrainer and ParseGenerator read "tp=2,pp=4,dp=4,cp=2,ep=16" and
// "tp=8,dp=8"):
//
//	tr, _ := model.ParseTrainer("tp=1,dp=32,pp=4,ep=16")
//	gen, _ := model.ParseGenerator("tp=8,dp=16")
//	l, _ := model.New(m, tr, gen)
//
// Each of l.Stages is one pipeline stage and one communicator: the stage's
// trainer ranks (local ranks [0, Trainers)) then every generator rank, as
// package pipeline arranges them (l.Ranks gives the world ranks). For each
// tensor of a stage, Src and Dst are placement layouts over
// Tensor.LayoutShape with communicator-local ranks, ready for
// reshard.NewPlan, and Part gives, for a rank and a side, the buffer that
// holds its part and the placement.View into it:
//
//	s := l.Stages[0]
//	for _, t := range s.Tensors {
//		p, ok := t.Part(model.Src, rank) // ok: rank trains this stage
//		// p.Buffer, p.View: where rank's part of t sits
//	}
//	s.Buffers(model.Src, rank) // the rank's buffers, with element counts
//
// Fused weights are views, so nothing is repacked. Megatron's linear_qkv
// holds, per local query group, its q heads, its k head and its v head:
// not one strided view of the [heads*head_dim, H] q_proj, but a plain one
// of its row-major reshape [kv heads, heads/kv*head_dim, H], the
// LayoutShape both sides then shard (the generator, when its TP exceeds the
// key-value heads, over a kv x TP/kv split of its TP axis). Megatron's
// linear_fc1 and vLLM's gate_up_proj hold [gate; up] per rank, vLLM's
// qkv_proj [q; k; v] and fused_qkv_a_proj [q_a; kv_a]; the experts'
// gate_up_proj [E, 2I, H] is laid out as [E, 2, I, H], so that expert-TP
// (and vLLM's TP) hold [gate; up] per rank in one dense buffer.
//
// What each rank holds follows the frameworks' sources (docs/frameworks.md),
// checked element by element on every rank against an independent
// reference written from them (conformance_ref_test.go, its output in
// testdata/frameworks). Where a framework splits a tensor
// otherwise than torch.chunk, the tensor moves as pieces
// (TensorLayout.Origin): the padded vocabulary of both sides (Megatron to
// a multiple of vocab-div x TP, vLLM to a multiple of 64; the padding rows
// are never written), vLLM's experts when they do not divide its EP ranks
// (the first ranks one more), Megatron's linear_qkv when TP exceeds the
// query groups (each rank a row slice of its group's [q; k; v]). vLLM's
// own DP splits the routed experts over TP x DP (Generator.Engines are
// independent engines instead); Megatron's expert-TP defaults to TP.
//
// An FP8 generator (NewQuantized) holds in float8_e4m3fn what vLLM's FP8
// path quantizes (Tensor.FP8), with the scales of the tensor as the
// checkpoint shapes it. Some tensors need the generator's post-load step
// after every refit (Tensor.Refresh: MLA's kv_b_proj, GLM-4.5's float32
// router).
//
// Conventions: Megatron ranks TP fastest, then CP, then DP, PP slowest,
// and folds each stage's ranks for the experts as expert-TP x EP x
// expert-DP; vLLM ranks tp fastest within a DP replica, DP replicas within
// an engine, engines slowest, and its EP spans an engine's TP x DP ranks.
package model
