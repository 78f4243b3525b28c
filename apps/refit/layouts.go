package main

import (
	"errors"
	"fmt"
	"strings"

	"github.com/m2n-dev/m2n/dtype"
	"github.com/m2n-dev/m2n/fp8"
	"github.com/m2n-dev/m2n/model"
	"github.com/m2n-dev/m2n/modelspec"
	"github.com/spf13/cobra"
)

func newLayoutsCmd() *cobra.Command {
	var spec, train, gen, dstDType, fp8Scale string
	var scale, layers int
	var mtp, asJSON, parts bool
	cmd := &cobra.Command{
		Use:   "layouts --model NAME|config.json|list.json --train tp=..,pp=..,dp=..[,cp=..,ep=..,etp=..] --gen tp=..,dp=..[,ep=..] [flags]",
		Short: "Show every tensor of a model laid out from a Megatron trainer to a vLLM generator",
		Long: `layouts lays a whole model out for weight sync: every tensor, named and shaped
as transformers names it, with its layout on the trainer and on the generator
as Megatron-Core and vLLM hold it, the local buffer and view that hold each
rank's part (fused weights stay fused: Megatron's linear_qkv and linear_fc1,
vLLM's qkv_proj, gate_up_proj and fused_qkv_a_proj), the generator's dtype
(with --dst-dtype e4m3: which tensors vLLM's FP8 path quantizes, and the shape
of their weight_scale_inv), per pipeline stage, and what every rank holds.

--model is a built-in model (` + strings.Join(model.Builtins(), ", ") + `),
a HuggingFace config.json (model_type ` + strings.Join(model.ModelTypes(), ", ") + `;
missing keys take transformers' defaults for the type) or a JSON list of
{"name", "shape", "dtype"} (a name that does not say how the frameworks split
the tensor is refused).

--train gives Megatron's sizes: ` + model.TrainerKeys + `.
--gen gives vLLM's: ` + model.GeneratorKeys + `.
Sizes not given are 1. Trainer ranks go TP fastest, then CP, then DP, PP
slowest; experts fold a stage's ranks as etp x ep x expert-dp. vLLM ranks go
tp fastest, then dp, then engines. Stage s trains on world ranks [s*P, (s+1)*P)
(P = tp*cp*dp) and the generator ranks come after all trainers; each stage's
layouts use the ranks of its own communicator: the stage's trainers, then
every generator.

Layouts are printed as mesh[ranks] placements over the tensor's layout
shape, which is its shape except for q, k, v ([kv heads, rows per kv head,
H]) and the experts' gate_up_proj ([E, 2, I, H]; gpt-oss's [E, I, 2, H],
moved transposed as both frameworks hold it). Where a framework splits a
tensor otherwise than torch.chunk (both pad the vocabulary: Megatron to a
multiple of vocab-div x tp, vLLM to a multiple of 64; vLLM gives its first EP
ranks one expert more when they do not divide; Megatron's tp above the query
groups slices each group's [q; k; v]), the tensor moves as pieces, named
tensor[lo:hi] in numpy notation over the layout shape; padding rows are never
written. A view is the buffer, @offset and strides in elements, as the first
rank that holds the part sees it; "-" is a tensor alone and dense in its own
buffer. Tensors vLLM derives state from after loading are listed at the end:
the generator reruns that step after every refit (see docs/python.md).

--scale N divides hidden and intermediate sizes, head dims and expert counts
by N (head counts stay); --layers L keeps the first L layers; --mtp adds
DeepSeek's multi-token-prediction layer (on the last stage). --json prints it
all as JSON, --parts with every rank's buffers and parts.`,
		Example: `  # DeepSeek-V3, 128 trainer GPUs (EP16, expert-DP 2, PP4 of 16, 15, 15, 15 layers) to 128 generator GPUs (TP8, DP16)
  refit layouts --model deepseek-v3 --train tp=1,dp=32,pp=4,ep=16,first=16,last=15 --gen tp=8,dp=16
  # Qwen3-235B-A22B, 64 (TP2, CP2, DP4, PP4, EP16 without expert-TP) to 64 (TP8, DP8)
  refit layouts --model qwen3-235b-a22b --train tp=2,cp=2,dp=4,pp=4,ep=16,etp=1 --gen tp=8,dp=8
  # the same generator in FP8: what vLLM quantizes, and each weight_scale_inv
  refit layouts --model qwen3-235b-a22b --train tp=2,cp=2,dp=4,pp=4,ep=16,etp=1 --gen tp=8,dp=8 --dst-dtype e4m3
  # NeMo-RL's DeepSeek-V3: PP16 x EP16 to TP32 x DP8, as JSON
  refit layouts --model deepseek-v3 --train pp=16,dp=16,ep=16 --gen tp=32,dp=8 --json
  # a scaled model that fits 16 CPU ranks
  refit layouts --model llama-3.1-70b --scale 32 --train tp=2,pp=2,dp=2 --gen tp=8`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			mode, err := layoutsFP8(dstDType, fp8Scale)
			if err != nil {
				return err
			}
			l, err := modelLayouts(modelspec.Spec{Model: spec, Train: train, Gen: gen, Scale: int64(scale), Layers: layers, MTP: mtp, FP8: mode})
			if err != nil {
				return err
			}
			if asJSON {
				return modelspec.WriteLayoutsJSON(cmd.OutOrStdout(), l, parts)
			}
			return modelspec.WriteLayouts(cmd.OutOrStdout(), l)
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&spec, "model", "", "a built-in model, a config.json or a tensor list (JSON)")
	fs.StringVar(&train, "train", "", "trainer sizes, e.g. tp=2,cp=2,dp=4,pp=4,ep=16,etp=1 (keys: "+model.TrainerKeys+")")
	fs.StringVar(&gen, "gen", "", "generator sizes, e.g. tp=8,dp=8 (keys: "+model.GeneratorKeys+")")
	fs.IntVar(&scale, "scale", 1, "divide widths and expert counts by N")
	fs.IntVar(&layers, "layers", 0, "keep only the first L decoder layers (0: all)")
	fs.BoolVar(&mtp, "mtp", false, "add DeepSeek's multi-token-prediction layer")
	fs.BoolVar(&asJSON, "json", false, "print JSON")
	fs.BoolVar(&parts, "parts", false, "with --json: every rank's buffers and parts (box and view of every entry it holds)")
	fs.StringVar(&dstDType, "dst-dtype", "", "e4m3: show the generator serving FP8 weights (what vLLM's FP8 path quantizes, and the shape of each weight_scale_inv)")
	fs.StringVar(&fp8Scale, "fp8-scale", "", "with --dst-dtype e4m3: block (128x128, default), row or tensor")
	return cmd
}

// layoutsFP8 reads --dst-dtype and --fp8-scale as refit sync does, for
// the generator of a model.
func layoutsFP8(dstDType, fp8Scale string) (fp8.Mode, error) {
	return parseFP8(dstDType, fp8Scale, "the one conversion is to e4m3 (fp8e4m3, float8_e4m3fn); leave it out to keep the trainer's dtypes")
}

// parseFP8 reads --dst-dtype and --fp8-scale: the scaling mode of a
// conversion to FP8 E4M3 (block where --fp8-scale is not given), or 0
// without one; notE4M3 is the error for a dtype other than e4m3.
func parseFP8(dstDType, fp8Scale, notE4M3 string) (fp8.Mode, error) {
	if dstDType == "" {
		if fp8Scale != "" {
			return 0, flagError("fp8-scale", fp8Scale, fmt.Errorf("it needs --dst-dtype e4m3"))
		}
		return 0, nil
	}
	dt, err := dtype.Parse(dstDType)
	if err != nil {
		return 0, flagError("dst-dtype", dstDType, err)
	}
	if dt != dtype.FP8E4M3 {
		return 0, flagError("dst-dtype", dstDType, errors.New(notE4M3))
	}
	if fp8Scale == "" {
		return fp8.Block, nil
	}
	m, err := fp8.ParseMode(fp8Scale)
	if err != nil {
		return 0, flagError("fp8-scale", fp8Scale, err)
	}
	return m, nil
}
