// Package lora merges LoRA adapters into the weights they adapt, in place
// on each generator rank: a refit moves only the adapters (the tensors of
// model.Adapters, a fraction of a percent of the model at rank 16), laid
// out as vLLM holds them, so that every generator rank already has the
// rows of B and the columns of A that its part of each weight needs, and
// adds its part of scale x (B @ A) without a weight crossing the network.
//
//	mg := lora.NewMerger()
//	// every step, after the adapters' refit:
//	err := mg.Merge(name, weightPart, aPart, bPart, scale)
//
// A Merger keeps the adapters it merged last and takes their product away
// as it adds the new one, so the weights always hold the base plus the
// latest adapters (rounded once per step to the weight's dtype: bf16 and
// f32 weights). A generator's FP8 weight is re-quantized, block by block
// with package fp8's rule, from the FP8 base it held at the first merge
// plus the latest product, so that it does not drift step after step
// (Merger). session.Model.MergeLoRA
// merges a whole model's adapters. The package is pure.
package lora
