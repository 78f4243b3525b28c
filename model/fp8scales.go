package model

import (
	"fmt"

	"github.com/m2n-dev/m2n/dtype"
	"github.com/m2n-dev/m2n/fp8"
	"github.com/m2n-dev/m2n/placement"
)

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
		if t.DType != dtype.BF16 && t.DType != dtype.F32 {
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
		t.Name, mode, t.Kind, placement.FormatShape(t.movedShape()), rows, kv, fp8.BlockSize)
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
	g, err := fp8.NewGrid(t.movedShape(), mode)
	if err != nil {
		return nil
	}
	return g.ScaleShape()
}
