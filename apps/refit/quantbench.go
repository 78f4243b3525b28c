package main

import (
	"fmt"

	"github.com/m2n-dev/m2n/cuda"
	"github.com/m2n-dev/m2n/fp8"
	"github.com/m2n-dev/m2n/perf"
	"github.com/m2n-dev/m2n/units"
	"github.com/spf13/cobra"
)

func newQuantBenchCmd() *cobra.Command {
	var total, mode string
	var iters int
	cmd := &cobra.Command{
		Use:   "quant-bench [--bytes 1GiB] [--mode block|row|tensor] [--iters 20]",
		Short: "Measure the GPU FP8 quantize-pack kernels against packing alone and convert-after",
		Long: `quant-bench times, on GPU 0, the FP8 kernels a reshard to a float8_e4m3fn
destination uses, at the same bf16 input bytes as a plain pack: the source
holds --bytes of bf16 in rows of 256 B, 4 KiB and 64 KiB, each twice its
width apart (half the columns of a matrix, as a reshard from rows to
columns sends), quantized per --mode.

  copy          a plain device-to-device copy of the input bytes
  pack          the bf16 pack kernel: what a bf16 reshard stages
  amax          the partial-amax kernel: the pass before quantizing
  quant-pack    quantize while packing: bf16 strided in, E4M3 contiguous out
  convert       the same kernel over contiguous bf16: the separate pass a
                generator makes after receiving bf16
  pack+convert  the two: convert-after's cost, against quant-pack's

"vs pack" is pack's time over the op's (100% = as fast as packing the bf16
bytes; the goal for quant-pack is 90% or more). Each figure is the median of
--iters event-timed launches after a warm-up. It needs about 4.5x --bytes of
GPU memory and no launcher.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			n, err := units.ParseBytes(total)
			if err != nil || n < 64<<10 || n%(64<<10) != 0 {
				return flagError("bytes", total, fmt.Errorf("want a multiple of 64KiB"))
			}
			m, err := fp8.ParseMode(mode)
			if err != nil {
				return flagError("mode", mode, err)
			}
			return onGPU0(func(ctx *cuda.Context, name string) error {
				res, err := perf.Quantize(ctx, perf.QuantOptions{TotalBytes: int(n), Mode: m, Iters: iters})
				if err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "%s, %s of bf16 per operation, %v scaling, median of %d\n%s",
					name, units.FormatBytes(n), m, iters, perf.FormatQuant(res))
				return nil
			})
		},
	}
	cmd.Flags().StringVar(&total, "bytes", "1GiB", "bf16 bytes each operation reads")
	cmd.Flags().StringVar(&mode, "mode", "block", "scaling: block, row or tensor")
	cmd.Flags().IntVar(&iters, "iters", 20, "timed launches per operation")
	return cmd
}
