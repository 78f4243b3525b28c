package model_test

import (
	"fmt"

	"github.com/m2n-dev/m2n/dtype"
	"github.com/m2n-dev/m2n/model"
	"github.com/m2n-dev/m2n/placement"
)

// ExampleNew lays out a small GQA model from a Megatron trainer (TP2) to a
// vLLM generator (TP4, more ranks than the 2 key-value heads) and shows
// where each rank's q, k and v rows sit in its fused buffer.
func ExampleNew() {
	c := model.Config{ModelType: "llama", DType: dtype.BF16, VocabSize: 64, HiddenSize: 16, IntermediateSize: 32, Layers: 1,
		Heads: 8, KVHeads: 2, HeadDim: 2}
	m, _ := model.FromConfig("tiny", c, model.LoadOptions{})
	l, _ := model.New(m, model.Trainer{TP: 2}, model.Generator{TP: 4})
	s := l.Stages[0]
	var qkv []*model.TensorLayout
	for _, x := range s.Tensors {
		if x.Kind == model.Query || x.Kind == model.Key || x.Kind == model.Value {
			qkv = append(qkv, x)
		}
	}
	for _, x := range qkv {
		fmt.Printf("%s %s\n  src %v\n  dst %v\n", x.Name, placement.FormatShape(x.LayoutShape), x.Src, x.Dst)
		for _, r := range []int{0, 2, 3} {
			side := model.Src
			if r >= s.Trainers {
				side = model.Dst
			}
			p, _ := x.Part(side, r)
			fmt.Printf("  rank %d %s: %s %v\n", r, side, p.Buffer[len("model.layers.0.self_attn."):], p.View)
		}
	}
	// Output:
	// model.layers.0.self_attn.q_proj.weight 2x8x16
	//   src 2x8x16 bf16 on 2[0,1] S0
	//   dst 2x8x16 bf16 on 2x2[2-5] S0,S1
	//   rank 0 src: linear_qkv.weight +0 strides [192 16 1]
	//   rank 2 dst: qkv_proj.weight +0 strides [64 16 1]
	//   rank 3 dst: qkv_proj.weight +0 strides [64 16 1]
	// model.layers.0.self_attn.k_proj.weight 2x2x16
	//   src 2x2x16 bf16 on 2[0,1] S0
	//   dst 2x2x16 bf16 on 2x2[2-5] S0,R
	//   rank 0 src: linear_qkv.weight +128 strides [192 16 1]
	//   rank 2 dst: qkv_proj.weight +64 strides [32 16 1]
	//   rank 3 dst: qkv_proj.weight +64 strides [32 16 1]
	// model.layers.0.self_attn.v_proj.weight 2x2x16
	//   src 2x2x16 bf16 on 2[0,1] S0
	//   dst 2x2x16 bf16 on 2x2[2-5] S0,R
	//   rank 0 src: linear_qkv.weight +160 strides [192 16 1]
	//   rank 2 dst: qkv_proj.weight +96 strides [32 16 1]
	//   rank 3 dst: qkv_proj.weight +96 strides [32 16 1]
}
