package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"

	"github.com/m2n-dev/m2n/dtype"
	"github.com/m2n-dev/m2n/fp8"
	"github.com/m2n-dev/m2n/placement"
	"github.com/spf13/cobra"
)

func newQuantizeCmd() *cobra.Command {
	var in, shape, dtypeName, mode, out, scaleOut string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "quantize --in FILE --shape S [--dtype bf16|f32] [--mode block|row|tensor] --out FILE --scale-out FILE [--json]",
		Short: "Quantize a raw bf16 or f32 tensor to FP8 E4M3 as a destination would receive it",
		Long: `quantize reads a tensor of raw little-endian bf16 (or f32) values, row-major,
and writes what an FP8 destination of a refit holds for it: the
float8_e4m3fn bytes (--out, one byte per element, row-major) and the scales
(--scale-out, weight_scale_inv: raw little-endian float32, row-major), so that
the output can be checked against other tools byte for byte.

The rule is torch's, bit for bit (testdata/fp8/cases.json states it, with
inputs and outputs torch made on an H200):
  - The last two dims are the matrix (M x K); leading dims (experts) index
    separate matrices. Elements sharing a scale form a block:
      block   128x128 blocks (DeepSeek-V3's format); edge blocks are partial
      row     one block per row (1 x K)
      tensor  one block per matrix
  - amax = the largest magnitude in the block, in float32;
    s = amax * float32(1/448) (0x3B124925) as one float32 multiply (torch
    multiplies by the rounded reciprocal; amax/448 differs in the last bit
    for about half the amaxes); s = 1 for an all-zero block.
  - each element: float32(x) / s as a true float32 division, clamped to
    [-448, 448], rounded to the nearest E4M3 value, ties to even. E4M3FN has
    no infinities (0x7F and 0xFF are NaN), so the clamp matters: torch's own
    cast turns 480 and above into NaN.
  - a NaN or infinite input is an error naming its index.
The scale tensor has the leading dims, then ceil(M/rows) x ceil(K/cols):
for 4x256x384 in blocks it is 4x2x3; for 300x200 by rows, 300x1.

To read the outputs back in PyTorch:
  q = torch.from_numpy(np.fromfile("w.e4m3", np.uint8)).view(torch.float8_e4m3fn).reshape(shape)
  s = torch.from_numpy(np.fromfile("w.scale", np.float32)).reshape(scale_shape)
and dequantize an element as q.float() times its block's s (for blocks:
s.repeat_interleave(128, -2).repeat_interleave(128, -1), cut to the shape).`,
		Example: `  refit quantize --in testdata/fp8/edges_300x200.block.in.bf16 --shape 300x200 \
      --out w.e4m3 --scale-out w.scale
  cmp w.e4m3 testdata/fp8/edges_300x200.block.out.e4m3 && cmp w.scale testdata/fp8/edges_300x200.block.scale.f32
  refit quantize --in experts.bf16 --shape 4x256x384 --mode row --out e.e4m3 --scale-out e.scale --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			for _, f := range []struct{ name, v string }{{"in", in}, {"shape", shape}, {"out", out}, {"scale-out", scaleOut}} {
				if f.v == "" {
					return usageError{fmt.Errorf("--%s is required (see refit quantize --help)", f.name)}
				}
			}
			s, err := placement.ParseShape(shape)
			if err != nil {
				return flagError("shape", shape, err)
			}
			dt, err := dtype.Parse(dtypeName)
			if err != nil || (dt != dtype.BF16 && dt != dtype.F32) {
				return flagError("dtype", dtypeName, errors.New("want bf16 or f32"))
			}
			m, err := fp8.ParseMode(mode)
			if err != nil {
				return flagError("mode", mode, err)
			}
			g, err := fp8.NewGrid(s, m)
			if err != nil {
				return flagError("shape", shape, err)
			}
			src, err := os.ReadFile(in)
			if err != nil {
				return fmt.Errorf("--in: %w", err)
			}
			elems := int64(1)
			for _, n := range s {
				elems *= n // NewGrid checked that it fits
			}
			if want := elems * int64(dt.Size()); int64(len(src)) != want {
				return usageError{fmt.Errorf("--in %q holds %d bytes; a %s %v tensor is %d bytes", in, len(src), shape, dt, want)}
			}
			q, err := fp8.Quantize(dt, s, m, src)
			if err != nil {
				var nf *fp8.NonFiniteError
				if errors.As(err, &nf) {
					return fmt.Errorf("--in %q: element %v (flat index %d) is %v: FP8 quantization refuses non-finite values", in, nf.Index, nf.Flat, nf.Value)
				}
				return err
			}
			if err := os.WriteFile(out, q.Data, 0o644); err != nil {
				return fmt.Errorf("--out: %w", err)
			}
			if err := os.WriteFile(scaleOut, q.ScaleBytes(), 0o644); err != nil {
				return fmt.Errorf("--scale-out: %w", err)
			}
			return printQuantize(cmd, g, dt, q, in, out, scaleOut, asJSON)
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&in, "in", "", "raw little-endian input, row-major")
	fs.StringVar(&shape, "shape", "", "tensor shape, 2 to 8 dims, e.g. 300x200 or 4x256x384 (experts)")
	fs.StringVar(&dtypeName, "dtype", "bf16", "input element type: bf16 or f32")
	fs.StringVar(&mode, "mode", "block", "scaling: block (128x128), row (1 x K) or tensor (one per matrix)")
	fs.StringVar(&out, "out", "", "where to write the E4M3 bytes")
	fs.StringVar(&scaleOut, "scale-out", "", "where to write the float32 scales (weight_scale_inv)")
	fs.BoolVar(&asJSON, "json", false, "print a JSON summary")
	return cmd
}

type quantizeJSON struct {
	Shape      []int64 `json:"shape"`
	DType      string  `json:"dtype"`
	Mode       string  `json:"mode"`
	Block      []int64 `json:"block"`
	ScaleShape []int64 `json:"scale_shape"`
	Elements   int     `json:"elements"`
	In         string  `json:"in"`
	Out        string  `json:"out"`
	ScaleOut   string  `json:"scale_out"`
	Saturated  int     `json:"saturated"` // elements at +-448
	Zeros      int     `json:"zeros"`     // elements that quantized to +-0
	MinScale   float32 `json:"min_scale"`
	MaxScale   float32 `json:"max_scale"`
}

func printQuantize(cmd *cobra.Command, g fp8.Grid, dt dtype.DType, q fp8.Quantized, in, out, scaleOut string, asJSON bool) error {
	rows, cols := g.BlockShape()
	j := quantizeJSON{Shape: g.Shape(), DType: dt.String(), Mode: g.Mode().String(), Block: []int64{rows, cols},
		ScaleShape: g.ScaleShape(), Elements: len(q.Data), In: in, Out: out, ScaleOut: scaleOut}
	j.Saturated, j.Zeros, j.MinScale, j.MaxScale = q.Stats()
	w := cmd.OutOrStdout()
	if asJSON {
		return json.NewEncoder(w).Encode(j)
	}
	fmt.Fprintf(w, "%s %v, %v scaling (%dx%d blocks): %d elements\n", placement.FormatShape(j.Shape), dt, j.Mode, rows, cols, j.Elements)
	fmt.Fprintf(w, "wrote %s (%d E4M3 bytes; %d at +-448, %d zero) and %s (%s float32 scales, %d bytes; %g to %g)\n",
		out, len(q.Data), j.Saturated, j.Zeros, scaleOut, placement.FormatShape(j.ScaleShape), 4*len(q.Scales), j.MinScale, j.MaxScale)
	return nil
}
