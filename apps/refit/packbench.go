package main

import (
	"fmt"

	"github.com/m2n-dev/m2n/cuda"
	"github.com/m2n-dev/m2n/perf"
	"github.com/m2n-dev/m2n/units"
	"github.com/spf13/cobra"
)

func newPackBenchCmd() *cobra.Command {
	var total string
	var iters int
	cmd := &cobra.Command{
		Use:   "pack-bench [--bytes 1GiB] [--iters 20]",
		Short: "Measure the GPU pack/unpack kernels against a plain device-to-device copy",
		Long: `pack-bench times, on GPU 0, packing strided rows into a contiguous buffer and
unpacking them back (the kernels every device reshard uses to stage strided
boxes), against a plain device-to-device copy of the same bytes and against
cuMemcpy2D doing the pack. Rows are 256 B, 4 KiB and 64 KiB, each twice its
width apart in the strided buffer; each figure is the median of --iters
event-timed launches after a warm-up. It needs 4x --bytes of GPU memory and
no launcher.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			n, err := units.ParseBytes(total)
			if err != nil || n < 64<<10 {
				return flagError("bytes", total, fmt.Errorf("want a size of at least 64KiB"))
			}
			return onGPU0(func(ctx *cuda.Context, name string) error {
				res, err := perf.PackUnpack(ctx, perf.PackOptions{TotalBytes: int(n), Iters: iters})
				if err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "%s, %s per operation, median of %d\n%s", name, units.FormatBytes(n), iters, perf.FormatPack(res))
				return nil
			})
		},
	}
	cmd.Flags().StringVar(&total, "bytes", "1GiB", "bytes each operation moves")
	cmd.Flags().IntVar(&iters, "iters", 20, "timed launches per operation")
	return cmd
}

// onGPU0 runs fn on the primary context of GPU 0, with the GPU's name.
func onGPU0(fn func(ctx *cuda.Context, name string) error) error {
	if err := cuda.Load(); err != nil {
		return err
	}
	dev, err := cuda.GetDevice(0)
	if err != nil {
		return err
	}
	ctx, err := dev.PrimaryContext()
	if err != nil {
		return err
	}
	defer ctx.Release()
	name, _ := dev.Name()
	return fn(ctx, name)
}
