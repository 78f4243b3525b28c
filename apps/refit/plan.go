package main

import (
	"github.com/m2n-dev/m2n/reshard"
	"github.com/spf13/cobra"
)

func newPlanCmd() *cobra.Command {
	var pf pairFlags
	var asJSON, stripe bool
	var maxRows int
	cmd := &cobra.Command{
		Use:   "plan --shape S --src-mesh M --src-placements P --dst-mesh M --dst-placements P [flags]",
		Short: "Show the transfers that reshard a tensor from one layout to another",
		Long: `plan derives the reshard plan every rank derives alone, with no
communication: for every destination rank, the boxes it needs and the one
source rank that sends each, and where each box's bytes sit in both local
buffers (byte offset, run length, and count/stride per outer dim).

Source ranks default to 0..M-1 and destination ranks to M..M+N-1; give
--src-ranks/--dst-ranks for other rank sets (they may overlap: a rank in both
meshes copies locally). The fingerprint hashes layouts, options and world
size; ranks compare it before moving data.`,
		Example: `  # the paper's Example A: 4 source ranks S0 to DP2 x TP2 [R, S0]
  refit plan --shape 8x4 --src-mesh 4 --src-placements S0 --dst-mesh 2x2 --dst-placements R,S0
  # DeepSeek-V3 experts, EP256 to TP8 x DP32, as JSON
  refit plan --shape 256x2048x7168 --dtype bf16 --src-mesh 256 --src-placements S0 \
      --dst-mesh 32x8 --dst-placements R,S1 --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			src, dst, world, err := pf.layouts()
			if err != nil {
				return err
			}
			p, err := reshard.NewPlan(src, dst, world, reshard.Options{StripeReplicas: stripe})
			if err != nil {
				return usageError{err}
			}
			if asJSON {
				return p.WriteJSON(cmd.OutOrStdout())
			}
			return p.WriteTable(cmd.OutOrStdout(), maxRows)
		},
	}
	pf.register(cmd.Flags())
	cmd.Flags().BoolVar(&stripe, "stripe", false, "spread transfers of replicated source regions over all replicas")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	cmd.Flags().IntVar(&maxRows, "max-rows", 64, "transfer rows to print in the table (0 for all)")
	return cmd
}
