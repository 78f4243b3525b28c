package main

import (
	"errors"
	"fmt"
	"strings"

	"github.com/m2n-dev/m2n/bench/peers"
	"github.com/m2n-dev/m2n/cuda"
	"github.com/m2n-dev/m2n/fp8"
	"github.com/m2n-dev/m2n/perf"
	"github.com/m2n-dev/m2n/units"
	"github.com/spf13/cobra"
)

func newQuantBenchCmd() *cobra.Command {
	var total, mode, rowList, peer string
	var iters int
	cmd := &cobra.Command{
		Use:   "quant-bench [--bytes 1GiB] [--mode block|row|tensor] [--rows 256,4KiB,64KiB] [--iters 20] [--peer auto|off]",
		Short: "Measure the GPU FP8 quantize-pack kernels and the whole FP8 stage against packing alone and torch",
		Long: `quant-bench times, on GPU 0, the FP8 kernels a reshard to a float8_e4m3fn
destination uses, at the same bf16 input bytes as a plain pack: the source
holds --bytes of bf16 in rows of --rows widths (256 B to 64 KiB), each twice
its width apart (half the columns of a matrix, as a reshard from rows to
columns sends), quantized per --mode.

  copy          a plain device-to-device copy of the input bytes
  pack          the bf16 pack kernel: what a bf16 reshard stages
  amax          the partial-amax kernel: the pass before quantizing
  quant-pack    quantize while packing: bf16 strided in, E4M3 contiguous out
  stage-2pass   the whole FP8 stage of blocks a shard boundary cuts, as a
                step pays it on the GPU: amax, then quant-pack (the host's
                exchange of amaxes between them is not timed)
  stage-2pass+host  the same with the host's turn between the passes (the
                amax window read back, made scales, written again): a
                one-GPU step's FP8 stage without the exchange
  stage-fused   the whole FP8 stage of whole blocks: one fused kernel reads
                each block once, reduces its amax, writes its scale and
                packs it as E4M3 (checked against stage-2pass byte for
                byte); only where the box holds its blocks whole, which
                block scaling here does
  convert       the same kernel over contiguous bf16: the separate pass a
                generator makes after receiving bf16
  pack+convert  the two: convert-after's cost, against quant-pack's
  fused-dense   the fused kernel over that contiguous bf16 as a matrix of its
                own (every block and row whole; block and row scaling)

"vs pack" is pack's time over the op's. Each figure is the median of
--iters event-timed launches after a warm-up. Then, with --peer auto (the
default), it runs the torch peer (bench/peers/torch_fp8_block.py, built
in) on the same bytes as one contiguous bf16 tensor when python3 with torch
is on the machine, or says why it could not, and prints the ratio of
torch.compile's block quantize to each stage (above 1: m2n is faster).
It needs about 4.5x --bytes of GPU memory and no launcher.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			n, err := units.ParseBytes(total)
			if err != nil || n < 64<<10 || n%(64<<10) != 0 || n > 1<<40 {
				return flagError("bytes", total, fmt.Errorf("want a multiple of 64KiB, at most 1TiB"))
			}
			m, err := fp8.ParseMode(mode)
			if err != nil {
				return flagError("mode", mode, err)
			}
			rows, err := parseRowWidths(rowList, n)
			if err != nil {
				return flagError("rows", rowList, err)
			}
			if peer != "auto" && peer != "off" {
				return flagError("peer", peer, errors.New("want auto or off"))
			}
			return onGPU0(func(ctx *cuda.Context, name string) error {
				res, err := perf.Quantize(ctx, perf.QuantOptions{TotalBytes: int(n), Mode: m, Iters: iters, RowBytes: rows})
				if err != nil {
					return err
				}
				out := cmd.OutOrStdout()
				fmt.Fprintf(out, "%s, %s of bf16 per operation, %v scaling, median of %d\n%s",
					name, units.FormatBytes(n), m, iters, perf.FormatQuant(res))
				if peer == "auto" {
					perf.WriteTorchPeer(out, peers.TorchFP8Block, n, res)
				}
				return nil
			})
		},
	}
	cmd.Flags().StringVar(&total, "bytes", "1GiB", "bf16 bytes each operation reads")
	cmd.Flags().StringVar(&mode, "mode", "block", "scaling: block, row or tensor")
	cmd.Flags().StringVar(&rowList, "rows", "256,4KiB,64KiB", "comma-separated bf16 row widths, each an even number of bytes from 256 B to 64 KiB dividing --bytes")
	cmd.Flags().IntVar(&iters, "iters", 20, "timed launches per operation")
	cmd.Flags().StringVar(&peer, "peer", "auto", "auto: run the torch peer on the same bytes when python3 with torch is here; off: do not")
	return cmd
}

// parseRowWidths parses --rows: widths of 256 B to 64 KiB, even, dividing
// the total.
func parseRowWidths(list string, total int64) ([]int, error) {
	var out []int
	for _, f := range strings.Split(list, ",") {
		w, err := units.ParseBytes(strings.TrimSpace(f))
		if err != nil {
			return nil, err
		}
		if w < 256 || w > 64<<10 || w%2 != 0 || total%w != 0 {
			return nil, fmt.Errorf("row width %s: want an even number of bytes from 256 B to 64 KiB that divides %s", f, units.FormatBytes(total))
		}
		out = append(out, int(w))
	}
	if len(out) == 0 {
		return nil, errors.New("no row width")
	}
	return out, nil
}
