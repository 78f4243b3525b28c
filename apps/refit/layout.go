package main

import (
	"fmt"

	"github.com/m2n-dev/m2n/dtype"
	"github.com/m2n-dev/m2n/modelspec"
	"github.com/m2n-dev/m2n/placement"
	"github.com/spf13/cobra"
)

func newLayoutCmd() *cobra.Command {
	var shape, dtypeName, meshSpec, pl, ranks string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "layout --shape S --mesh M --placements P [--ranks L] [--json]",
		Short: "Show each rank's local shape and global offset for a layout",
		Long: `layout prints, for every rank of a mesh, the region of the global tensor it
holds: its local shape and global offset, exactly as PyTorch DTensor computes
them (torch.chunk splits, empty trailing shards reporting the dim's global
size as offset, several mesh axes on one dim nested in mesh-axis order).
Ranks are listed in row-major coordinate order.`,
		Example: `  refit layout --shape 13x2 --mesh 4x2 --placements S0,S0
  refit layout --shape 256x2048x7168 --mesh 8x4 --placements S0,S1 --ranks 32-63 --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if shape == "" {
				return usageError{fmt.Errorf("--shape is required (e.g. --shape 13x2)")}
			}
			if meshSpec == "" || pl == "" {
				return usageError{fmt.Errorf("--mesh and --placements are required (e.g. --mesh 4x2 --placements S0,R)")}
			}
			s, err := placement.ParseShape(shape)
			if err != nil {
				return flagError("shape", shape, err)
			}
			dt, err := dtype.Parse(dtypeName)
			if err != nil {
				return flagError("dtype", dtypeName, err)
			}
			l, err := modelspec.Side{Mesh: meshSpec, Placements: pl, Ranks: ranks}.Layout(s, dt, 0, "")
			if err != nil {
				return pairError(err)
			}
			if asJSON {
				return modelspec.WriteLayoutJSON(cmd.OutOrStdout(), l)
			}
			return modelspec.WriteLayout(cmd.OutOrStdout(), l)
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&shape, "shape", "", "global tensor shape, e.g. 13x2")
	fs.StringVar(&dtypeName, "dtype", "f32", "element type (sets the byte counts)")
	fs.StringVar(&meshSpec, "mesh", "", "mesh shape, e.g. 4x2")
	fs.StringVar(&pl, "placements", "", "one placement per mesh axis, e.g. S0,S0")
	fs.StringVar(&ranks, "ranks", "", "ranks in mesh order (default 0..size-1)")
	fs.BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}
