package main

import (
	"context"
	"sort"
	"strings"
	"time"

	"github.com/m2n-dev/m2n/reshard"
	"github.com/m2n-dev/m2n/routespec"
	"github.com/m2n-dev/m2n/session"
	"github.com/m2n-dev/m2n/transport"
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
			return runJob(cmd.OutOrStdout(), &f, benchPlain)
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

// plainExchange is a plain exchange of exactly the bytes a call's schedule
// moves between each pair of ranks, over the same transport: one
// contiguous message per pair, all posted at once (Isend/Irecv over MPI,
// grouped ncclSend/ncclRecv on GPUs), the baseline a reshard is measured
// against.
type plainExchange struct {
	mem            session.Memory
	sendTo, recvFr map[int]int64
	send, recv     transport.Buffer
}

// newPlainExchange sizes rank's side of the exchange from a schedule: the
// bytes of every message between two different ranks, per pair.
func newPlainExchange(mem session.Memory, s *reshard.Schedule, rank int) (*plainExchange, error) {
	px := &plainExchange{mem: mem, sendTo: map[int]int64{}, recvFr: map[int]int64{}}
	for i := range s.Messages {
		m := &s.Messages[i]
		switch {
		case m.Src == m.Dst:
		case m.Src == rank:
			px.sendTo[m.Dst] += m.Bytes
		case m.Dst == rank:
			px.recvFr[m.Src] += m.Bytes
		}
	}
	var sendTotal, recvTotal int64
	for _, n := range px.sendTo {
		sendTotal += n
	}
	for _, n := range px.recvFr {
		recvTotal += n
	}
	var err error
	if px.send, err = mem.Alloc(sendTotal); err != nil {
		return nil, err
	}
	if px.recv, err = mem.Alloc(recvTotal); err != nil {
		mem.Free(px.send)
		return nil, err
	}
	fill := make([]byte, sendTotal)
	for i := range fill {
		fill[i] = byte(i)
	}
	return px, mem.Upload(px.send, fill)
}

// bytes returns what this rank sends and receives in the exchange.
func (px *plainExchange) bytes() (sent, recv int64) { return px.send.Len(), px.recv.Len() }

// run posts the whole exchange on tr and waits for it, at most timeout.
func (px *plainExchange) run(tr transport.Transport, timeout time.Duration) error {
	var ops []transport.Op
	var off int64
	for _, p := range sortedKeys(px.recvFr) {
		ops = append(ops, transport.Op{Peer: p, Buf: px.recv, Off: off, Len: px.recvFr[p]})
		off += px.recvFr[p]
	}
	off = 0
	for _, p := range sortedKeys(px.sendTo) {
		ops = append(ops, transport.Op{Peer: p, Send: true, Buf: px.send, Off: off, Len: px.sendTo[p]})
		off += px.sendTo[p]
	}
	pend, err := tr.Start(ops)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return pend.Wait(ctx)
}

func (px *plainExchange) free() {
	px.mem.Free(px.send)
	px.mem.Free(px.recv)
}

func sortedKeys(m map[int]int64) []int {
	out := make([]int, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Ints(out)
	return out
}

// benchPlain times one contiguous message per (source, destination)
// pair of the plan, of the pair's total bytes, interleaved with iterations
// of the first route, and appends the comparison to the report.
func benchPlain(p *pairRun, rep *runReport) error {
	if len(rep.Routes) == 0 {
		return nil
	}
	j, s, plan := p.j, p.s, p.plan
	first := rep.Routes[0]
	route, err := routespec.Parse(strings.TrimPrefix(first.Route, "auto:"), j.set.routeOpts(p.fabric))
	if err != nil {
		return err
	}
	call, err := s.Prepare(context.Background(), p.specs(), route)
	if err != nil {
		return err
	}
	defer call.Close()
	px, err := newPlainExchange(s.Memory(), call.Schedule(), s.Rank())
	if err != nil {
		return err
	}
	defer px.free()
	exchange := func() error { return px.run(call.Transport(), s.Options().Timeout) }
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
	var plainT, reshardT timings
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
			plainT.add(pt)
			reshardT.add(rt)
		}
	}
	pm, rm := plainT.median(), reshardT.median()
	pr := plainReport{Baseline: "plain exchange over the same transport, one contiguous message per pair", MedianSec: pm,
		ReshardRoute: first.Route, ReshardSec: rm, Ratio: pm / rm}
	if pm > 0 {
		pr.TensorGBps = float64(plan.Src().Bytes()) / pm / 1e9
	}
	rep.Routes = append(rep.Routes, routeReport{Route: "plain", Iters: iters, MedianSec: pm, TensorGBps: pr.TensorGBps,
		Check: "not checked", Extra: pr})
	if j.rank == 0 {
		j.log.Debug().Floats64("plain", plainT.first()).Floats64("reshard", reshardT.first()).Msg("bench samples")
	}
	return nil
}
