package main

import (
	"encoding/json"
	"fmt"

	"github.com/m2n-dev/m2n/bounds"
	"github.com/m2n-dev/m2n/hier"
	"github.com/m2n-dev/m2n/units"
	"github.com/spf13/cobra"
)

// newBoundCmd is refit bound, the data-movement model's bounds. It was
// called refit model; that name still works, with a notice on stderr.
func newBoundCmd() *cobra.Command {
	var pf pairFlags
	var bytes, netBW, localBW, chunk string
	var sources, shards, rho, domains, dstDomainSize, srcDomainSize int
	var stripe, asJSON bool
	var latency float64
	cmd := &cobra.Command{
		Use:     "bound (--bytes B --sources Ns --dst-shards K --rho R | --shape S --src-mesh ... --dst-mesh ...) [flags]",
		Aliases: []string{"model"},
		Short:   "Print each route's speed-of-light bound from the aggregate data-movement model",
		Long: `bound evaluates the aggregate data-movement model of NCCL M2N for the three
routes and says which term binds each and which route auto would pick:

  T_flat    = rho*B / (Ns*BN)
  T_agbcast = B / BN                                   (root injection)
  T_hier    = max(B / (min(Ns, K*rho)*BN), (rho-1)*B / (K*rho*BL))

B is the unique bytes, Ns the source injection paths, K the destination
shards and rho their replication, BN and BL the per-rank network and
local-fabric bandwidths. With several destination domains each holds rho/D
replicas; the domain count adds startup and tail, not bandwidth.

Explicit form: --bytes --sources --dst-shards --rho [--domains].
Layout form: the refit plan flags (--shape --dtype --src-* --dst-*) with
--dst-domain-size; B, Ns, K and rho come from the layouts.
Sizes: MB and GB are decimal, MiB and GiB binary; rates like 50GB/s, or in bits
like 400Gbps (= 50GB/s).`,
		Example: `  # the paper's single-layer experiment
  refit bound --bytes 7168MB --sources 16 --dst-shards 8 --rho 2 --domains 1 --net-bw 50GB/s --local-bw 900GB/s
  # the same from layouts: 16 EP ranks to TP8 x DP2 in one NVLink domain
  refit bound --shape 256x2048x7168 --dtype bf16 --src-mesh 16 --src-placements S0 \
      --dst-mesh 2x8 --dst-placements R,S1 --dst-domain-size 16`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if cmd.CalledAs() == "model" {
				fmt.Fprintln(cmd.ErrOrStderr(), "refit: \"refit model\" is now \"refit bound\" (refit layouts lays out whole models); the old name will go")
			}
			fab := bounds.Fabric{Latency: latency}
			var err error
			if fab.NetBW, err = units.ParseRate(netBW); err != nil {
				return flagError("net-bw", netBW, err)
			}
			if fab.LocalBW, err = units.ParseRate(localBW); err != nil {
				return flagError("local-bw", localBW, err)
			}
			ch, err := units.ParseBytes(chunk)
			if err != nil {
				return flagError("chunk-bytes", chunk, err)
			}
			var prob bounds.Problem
			explicit := cmd.Flags().Changed("bytes")
			layoutForm := pf.Shape != ""
			switch {
			case explicit && layoutForm:
				return usageError{fmt.Errorf("give either --bytes (explicit form) or --shape (layout form), not both")}
			case explicit:
				b, err := units.ParseBytes(bytes)
				if err != nil {
					return flagError("bytes", bytes, err)
				}
				if prob, err = bounds.Uniform(float64(b), sources, shards, rho, domains, float64(ch)); err != nil {
					return usageError{err}
				}
			case layoutForm:
				src, dst, world, err := pf.layouts()
				if err != nil {
					return err
				}
				// every rank on a host of its own: the sizes group them, and
				// by default all destination ranks share one domain.
				sizes := hier.DomainSizes{Src: srcDomainSize, Dst: dstDomainSize}
				if prob, err = bounds.FromLayouts(src, dst, world, stripe, sizes, float64(ch)); err != nil {
					return usageError{err}
				}
			default:
				return usageError{fmt.Errorf("give --bytes --sources --dst-shards --rho (explicit form) or the layout flags --shape ... (layout form)")}
			}
			choice := bounds.Choose(prob, fab)
			if asJSON {
				return json.NewEncoder(cmd.OutOrStdout()).Encode(struct {
					Problem bounds.Problem `json:"problem"`
					Fabric  bounds.Fabric  `json:"fabric"`
					bounds.Choice
				}{prob, fab, choice})
			}
			return bounds.WriteTable(cmd.OutOrStdout(), prob, fab, choice)
		},
	}
	fs := cmd.Flags()
	pf.register(fs)
	_ = fs.MarkHidden("world")
	fs.StringVar(&bytes, "bytes", "", "explicit form: unique bytes B, e.g. 7168MB")
	fs.IntVar(&sources, "sources", 1, "explicit form: source injection paths Ns")
	fs.IntVar(&shards, "dst-shards", 1, "explicit form: destination shards K")
	fs.IntVar(&rho, "rho", 1, "explicit form: destination replication rho")
	fs.IntVar(&domains, "domains", 1, "explicit form: destination domains (each holds rho/domains replicas)")
	fs.IntVar(&dstDomainSize, "dst-domain-size", 0, "layout form: destination ranks per domain (default: all in one)")
	fs.IntVar(&srcDomainSize, "src-domain-size", 0, "layout form: source ranks per domain")
	fs.BoolVar(&stripe, "stripe", false, "layout form: stripe sends over source replicas (raises Ns)")
	fs.StringVar(&netBW, "net-bw", "50GB/s", "per-rank network bandwidth BN")
	fs.StringVar(&localBW, "local-bw", "900GB/s", "per-rank local-fabric bandwidth BL")
	fs.StringVar(&chunk, "chunk-bytes", "16MiB", "pipeline chunk (startup and tail terms)")
	fs.Float64Var(&latency, "latency", 20e-6, "per-message latency in seconds (startup terms, for auto)")
	fs.BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}
