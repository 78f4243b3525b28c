package main

import (
	"strings"

	"github.com/m2n-dev/m2n/perf"
	"github.com/m2n-dev/m2n/reshard"
	"github.com/m2n-dev/m2n/routespec"
	"github.com/spf13/cobra"
)

func newBenchCmd() *cobra.Command {
	var f runFlags
	cmd := &cobra.Command{
		Use:   "bench [flags]",
		Short: "Measure a reshard against a plain exchange of the same bytes (launch with mpirun)",
		Long: `bench runs the reshard of refit run and, in the same job, a plain
exchange of exactly the same bytes between exactly the same pairs of ranks
over the same transport (one contiguous message per pair, all posted at
once: Isend/Irecv over MPI, grouped ncclSend/ncclRecv with --device cuda,
whose time gives the measured point-to-point bandwidth), alternating the
two iteration by iteration so that both see the same machine. It reports
both times, both bandwidths and their ratio: how close the reshard gets to
moving its bytes with no layout work at all.

The default case is a 256 MiB f32 matrix on 4 source ranks in rows
(Shard(0)) to 4 destination ranks in columns (Shard(1)), so that every
source sends a strided box to every destination. Any refit run flags apply.`,
		Example: `  scripts/mpirun.sh -np 8 bin/refit bench
  scripts/mpirun.sh -np 8 bin/refit bench --dst-placements S0 --iters 20 --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runJob(cmd.OutOrStdout(), &f, (*job).benchPlain)
		},
	}
	f.register(cmd)
	fs := cmd.Flags()
	for flag, v := range map[string]string{"shape": "8192x8192", "src-mesh": "4", "src-placements": "S0",
		"dst-mesh": "4", "dst-placements": "S1"} {
		if err := fs.Set(flag, v); err != nil {
			panic(err)
		}
		fs.Lookup(flag).DefValue = v
	}
	fs.Lookup("iters").DefValue = "10"
	_ = fs.Set("iters", "10")
	return cmd
}

// benchPlain times the plain exchange of the bytes the first route moves
// between the same pairs and, on CPUs, the vector-datatype exchange of the
// same boxes, interleaved with every route (perf.Pair.BenchPlain), and
// appends the comparisons to the report.
func (j *job) benchPlain(p *perf.Pair, rep *perf.RunReport) error {
	if len(rep.Routes) == 0 {
		return nil
	}
	var routes []reshard.Route
	var names []string
	for _, r := range rep.Routes {
		route, err := routespec.Parse(strings.TrimPrefix(r.Route, "auto:"), j.set.routeOpts(rep.Fabric))
		if err != nil {
			return err
		}
		routes, names = append(routes, route), append(names, r.Route)
	}
	rrs, err := p.BenchPlain(routes, names, rep.Routes[0].Iters)
	if err != nil {
		return err
	}
	rep.Routes = append(rep.Routes, rrs...)
	return nil
}
