package main

import (
	"context"
	"sort"
	"strings"
	"time"

	"github.com/m2n-dev/m2n/hier"
	"github.com/m2n-dev/m2n/reshard"
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
			return runJob(cmd.OutOrStdout(), &f, plainExchange)
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

// plainReport is the baseline bench adds to the report.
type plainReport struct {
	Baseline     string  `json:"baseline"`
	MedianSec    float64 `json:"median_s"`
	TensorGBps   float64 `json:"tensor_gbps"`
	ReshardRoute string  `json:"reshard_route"`
	ReshardSec   float64 `json:"reshard_median_s"`
	Ratio        float64 `json:"reshard_over_plain_bandwidth"`
}

// plainExchange times one contiguous message per (source, destination)
// pair of the plan, of the pair's total bytes, interleaved with iterations
// of the first route, and appends the comparison to the report.
func plainExchange(p *pairRun, rep *runReport) error {
	if len(rep.Routes) == 0 {
		return nil
	}
	j, s, plan := p.j, p.s, p.plan
	rank := s.Rank()
	// bytes per pair, from the plan.
	sendTo := map[int]int64{}
	recvFrom := map[int]int64{}
	for _, i := range plan.Sends(rank) {
		t := plan.Transfer(int(i))
		if t.Dst != rank {
			sendTo[t.Dst] += t.Bytes()
		}
	}
	for _, i := range plan.Recvs(rank) {
		t := plan.Transfer(int(i))
		if t.Src != rank {
			recvFrom[t.Src] += t.Bytes()
		}
	}
	var sendTotal, recvTotal int64
	for _, n := range sendTo {
		sendTotal += n
	}
	for _, n := range recvFrom {
		recvTotal += n
	}
	mem := s.Memory()
	sendBuf, err := mem.Alloc(sendTotal)
	if err != nil {
		return err
	}
	defer mem.Free(sendBuf)
	recvBuf, err := mem.Alloc(recvTotal)
	if err != nil {
		return err
	}
	defer mem.Free(recvBuf)
	fill := make([]byte, sendTotal)
	for i := range fill {
		fill[i] = byte(i)
	}
	if err := mem.Upload(sendBuf, fill); err != nil {
		return err
	}
	peers := func(m map[int]int64) []int {
		var out []int
		for p := range m {
			out = append(out, p)
		}
		sort.Ints(out)
		return out
	}
	first := rep.Routes[0]
	route, err := hier.ParseRoute(strings.TrimPrefix(first.Route, "auto:"), j.set.balance, p.fabric)
	if err != nil {
		return err
	}
	call, err := s.Prepare(context.Background(), p.specs(), route)
	if err != nil {
		return err
	}
	defer call.Close()
	tr := call.Transport()
	// the baseline: over the same transport (MPI, or NCCL on GPUs), one
	// contiguous message per pair, all in one round.
	exchange := func() error {
		var ops []reshard.Op
		var off int64
		for _, p := range peers(recvFrom) {
			ops = append(ops, reshard.Op{Peer: p, Buf: recvBuf, Off: off, Len: recvFrom[p]})
			off += recvFrom[p]
		}
		off = 0
		for _, p := range peers(sendTo) {
			ops = append(ops, reshard.Op{Peer: p, Send: true, Buf: sendBuf, Off: off, Len: sendTo[p]})
			off += sendTo[p]
		}
		pend, err := tr.Start(ops)
		if err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(context.Background(), s.Options().Timeout)
		defer cancel()
		return pend.Wait(ctx)
	}
	bufs := p.buffers()
	timeIt := func(fn func() error) (float64, error) {
		if err := s.Barrier(context.Background()); err != nil {
			return 0, err
		}
		t0 := time.Now()
		if err := fn(); err != nil {
			return 0, err
		}
		return maxOver(s, time.Since(t0).Seconds())
	}
	var plainT, reshardT []float64
	iters := first.Iters
	for it := 0; it < iters+1; it++ {
		pt, err := timeIt(exchange)
		if err != nil {
			return err
		}
		rt, err := timeIt(func() error {
			_, err := call.Run(context.Background(), bufs)
			return err
		})
		if err != nil {
			return err
		}
		if it > 0 { // the first pair warms up
			plainT, reshardT = append(plainT, pt), append(reshardT, rt)
		}
	}
	pm, rm := median(plainT), median(reshardT)
	pr := plainReport{Baseline: "plain exchange over the same transport, one contiguous message per pair", MedianSec: pm,
		ReshardRoute: first.Route, ReshardSec: rm, Ratio: pm / rm}
	if pm > 0 {
		pr.TensorGBps = float64(plan.Src().Bytes()) / pm / 1e9
	}
	rep.Routes = append(rep.Routes, routeReport{Route: "plain", Iters: iters, MedianSec: pm, TensorGBps: pr.TensorGBps,
		Check: "not checked", Extra: pr})
	if j.rank == 0 {
		j.log.Debug().Floats64("plain", plainT).Floats64("reshard", reshardT).Msg("bench samples")
	}
	return nil
}

func median(v []float64) float64 {
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	if len(s) == 0 {
		return 0
	}
	if len(s)%2 == 0 {
		return (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return s[len(s)/2]
}
