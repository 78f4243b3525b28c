package perf

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"text/tabwriter"

	"github.com/m2n-dev/m2n/control"
	"github.com/m2n-dev/m2n/units"
)

// gatherReports collects every rank's reports of pipeline stages on
// every rank, ordered by stage, over the bounded collective coll.
func gatherReports(coll control.Collective, mine []*RunReport) ([]*RunReport, error) {
	payload, err := json.Marshal(mine)
	if err != nil {
		return nil, err
	}
	blobs, err := control.Exchange(control.WithPhase(context.Background(), "report gathering"), coll, payload)
	if err != nil {
		return nil, err
	}
	var all []*RunReport
	for _, b := range blobs {
		var reps []*RunReport
		if err := json.Unmarshal(b, &reps); err != nil {
			return nil, err
		}
		all = append(all, reps...)
	}
	sort.SliceStable(all, func(a, b int) bool { return *all[a].Stage < *all[b].Stage })
	return all, nil
}

// WriteText writes the report as refit run prints it: the layouts and
// sizes, and per route its time, bound and check, and every rank's bytes
// by link class (idle ranks that moved nothing left out). The model's
// bound is shown where the fabric was given or emulated.
func (rep *RunReport) WriteText(w io.Writer) error {
	fmt.Fprintf(w, "source:      %s\ndestination: %s\n", rep.Source, rep.Destination)
	if rep.FP8Scale != "" {
		fmt.Fprintf(w, "converted to FP8 in flight: one float32 scale per %s (weight_scale_inv, beside each destination part)\n", rep.FP8Scale)
	}
	fmt.Fprintf(w, "world %d, %s, fingerprint %s, chunk %s, staging %s\n", rep.World, units.FormatBytes(rep.Bytes),
		rep.Fingerprint, units.FormatBytes(rep.ChunkBytes), units.FormatBytes(rep.Staging))
	if rep.EmulatedBW > 0 {
		fmt.Fprintf(w, "emulated network %s per rank between domains; model fabric: network %s, local %s (measured)\n",
			units.FormatRate(rep.EmulatedBW), units.FormatRate(rep.Fabric.NetBW), units.FormatRate(rep.Fabric.LocalBW))
	} else if rep.FabricGiven {
		fmt.Fprintf(w, "model fabric: network %s, local %s per rank\n", units.FormatRate(rep.Fabric.NetBW), units.FormatRate(rep.Fabric.LocalBW))
	}
	baselines := false
	for _, rr := range rep.Routes {
		if pr, ok := rr.Extra.(PlainReport); ok {
			if !baselines {
				baselines = true
				fmt.Fprintf(w, "\nbaseline, %s: %s per iteration (median of %d), %.2f GB/s of tensor\n", pr.Baseline,
					units.FormatSeconds(pr.MedianSec), rr.Iters, pr.TensorGBps)
				if pr.VectorSec > 0 {
					fmt.Fprintf(w, "baseline, %s: %s per iteration (median of %d), %.2f GB/s of tensor\n", vectorBaseline,
						units.FormatSeconds(pr.VectorSec), rr.Iters, pr.VectorGBps)
					fmt.Fprintf(w, "baseline, the vector exchange between two of the session's agreements (the begin and end collectives every step makes): %s per iteration\n",
						units.FormatSeconds(pr.VectorAgreedSec))
				}
			}
			fmt.Fprintf(w, "reshard (%s) interleaved with them: %s per iteration; the reshard reaches %.0f%% of the plain exchange's bandwidth",
				pr.ReshardRoute, units.FormatSeconds(pr.ReshardSec), 100*pr.Ratio)
			if pr.VectorSec > 0 {
				fmt.Fprintf(w, ", %.0f%% of the vector-datatype exchange's (%.0f%% of it between two agreements)", 100*pr.VectorRatio, 100*pr.VectorAgreedRatio)
			}
			fmt.Fprintln(w)
			continue
		}
		driver := ""
		if rr.Driver != "" {
			driver = ", " + rr.Driver + " driver"
		}
		fmt.Fprintf(w, "\nroute %s: %s per iteration (median of %d; min %s, max %s), %.2f GB/s of tensor, %d rounds%s; check %s\n",
			rr.Route, units.FormatSeconds(rr.MedianSec), rr.Iters, units.FormatSeconds(rr.MinSec), units.FormatSeconds(rr.MaxSec),
			rr.TensorGBps, rr.Rounds, driver, rr.Check)
		if rr.Why != "" {
			fmt.Fprintf(w, "  auto: %s\n", rr.Why)
		}
		if d := rr.Delta; d != nil {
			fmt.Fprintf(w, "  delta, %.4g%% of the elements changed per step: %s per step against %s for a full sync of the same values (%.1f%% of its time); "+
				"%s sent between ranks against %s dense (%.2f%% of the bytes)\n", 100*d.Change, units.FormatSeconds(d.MedianSec),
				units.FormatSeconds(d.FullSec), 100*d.TimeRatio, units.FormatBytes(d.Sent), units.FormatBytes(d.Dense), 100*d.ByteRatio)
		}
		if rr.BoundSec > 0 && (rep.EmulatedBW > 0 || rep.FabricGiven) {
			fmt.Fprintf(w, "  model bound %s (%s binds): time is %.2fx the bound\n", units.FormatSeconds(rr.BoundSec), rr.Binding, rr.Ratio)
		}
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "rank\trole\tdomain\tsent\treceived\tnetwork out\tnetwork in\tlocal out\tlocal in\tself copy\tpacked\t")
		for _, t := range rr.Ranks {
			if t.Role == "idle" && t.Sent+t.Recv+t.Copied == 0 {
				continue
			}
			fmt.Fprintf(tw, "%d\t%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", t.Rank, t.Role, t.Domain, units.FormatBytes(t.Sent), units.FormatBytes(t.Recv),
				units.FormatBytes(t.SentNetwork), units.FormatBytes(t.RecvNetwork), units.FormatBytes(t.SentLocal), units.FormatBytes(t.RecvLocal),
				units.FormatBytes(t.Copied), units.FormatBytes(t.Packed))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	return nil
}

// WriteText writes the report as refit sync prints it: the model, the
// time per step and the check, bytes by link class, each stage, each
// rank's memory and handles, the bounds, and the comparisons asked for.
func (r *SyncReport) WriteText(w io.Writer) error {
	fmt.Fprintf(w, "model %s: %d tensors, %d parameters, %s\n", r.Model, r.Tensors, r.Params, units.FormatBytes(r.Bytes))
	fmt.Fprintf(w, "trainer %s -> generator %s, world %d\n", r.Trainer, r.Generator, r.World)
	if r.FP8Tensors > 0 {
		fmt.Fprintf(w, "generator in FP8: %d tensors (the linear and expert weights of the decoder layers, as vLLM's Fp8Config quantizes them) as e4m3 with %s scales, the others as they are: %s as the generator holds it\n",
			r.FP8Tensors, r.FP8, units.FormatBytes(r.DstBytes))
	}
	if r.EmulatedBW > 0 {
		fmt.Fprintf(w, "emulated network %s per rank between domains; model fabric: network %s, local %s (measured)\n",
			units.FormatRate(r.EmulatedBW), units.FormatRate(r.Fabric.NetBW), units.FormatRate(r.Fabric.LocalBW))
	}
	fmt.Fprintf(w, "\n%s per step (median of %d; min %s, max %s), %.2f GB/s of model; slowest rank %d; check %s; %d tensors completed\n",
		units.FormatSeconds(r.MedianSec), r.Iters, units.FormatSeconds(r.MinSec), units.FormatSeconds(r.MaxSec), r.GBps, r.Slowest, r.Check, r.Completed)
	if len(r.Failed) > 0 {
		fmt.Fprintf(w, "failed: %v\n", r.Failed)
	}
	if d := r.Delta; d != nil {
		fmt.Fprintf(w, "delta, %.3g%% of the model's elements changed per step (by bytes): %s per step against %s for a full sync of the same values (%.1f%% of its time); "+
			"%s sent between ranks against %s dense (%.2f%% of the bytes)\n", 100*d.Change, units.FormatSeconds(d.MedianSec),
			units.FormatSeconds(d.FullSec), 100*d.TimeRatio, units.FormatBytes(d.Sent), units.FormatBytes(d.Dense), 100*d.ByteRatio)
	}
	fmt.Fprintf(w, "bytes sent, all ranks: network %s, local %s, self copy %s\n", units.FormatBytes(r.Links[0]), units.FormatBytes(r.Links[1]), units.FormatBytes(r.Links[2]))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "\nstage\troute\ttensors\tbytes\trounds\ttime\t")
	for _, s := range r.Stages {
		fmt.Fprintf(tw, "%d\t%s\t%d\t%s\t%d\t%s\t\n", s.Stage, s.Route, s.Tensors, units.FormatBytes(s.Bytes), s.Rounds, units.FormatSeconds(s.MedianSec))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "rank\trole\tshare\tstaging\tscratch\tstaging bound\tRSS start\tpeak RSS\tpeak - start\tshare+staging+scratch\tpeak after step 1\tGo heap step 1 -> end\tMPI requests\tgoroutines\t")
	for _, x := range r.Ranks {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s -> %s\t%d -> %d\t%d -> %d\t\n", x.Rank, x.Role, units.FormatBytes(x.Share), units.FormatBytes(x.Staging),
			units.FormatBytes(x.Scratch), units.FormatBytes(x.Bound), units.FormatBytes(x.Base), units.FormatBytes(x.Peak), units.FormatBytes(x.Peak-x.Base),
			units.FormatBytes(x.Share+x.Staging+x.Scratch), units.FormatBytes(x.PeakAfterWarm), units.FormatBytes(x.Heap[0]), units.FormatBytes(x.Heap[1]),
			x.Requests[0], x.Requests[1], x.Goroutines[0], x.Goroutines[1])
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	for _, b := range r.Bounds {
		fmt.Fprintf(w, "bound %-8s %s (%s binds)\n", b.Route, units.FormatSeconds(b.Seconds), b.Binding)
	}
	if c := r.Compare; c != nil {
		fmt.Fprintf(w, "\none call per tensor: %s per step; one batched call: %s (%.2fx faster); whole-model bound (%s) %s: batched is %.2fx the bound\n",
			units.FormatSeconds(c.PerTensorSec), units.FormatSeconds(c.BatchedSec), c.Speedup, c.BoundRoute, units.FormatSeconds(c.BoundSec), c.OverBound)
	}
	if b := r.Baseline; b != nil {
		fmt.Fprintf(w, "\nplain exchange of the same bytes: %s per step; sync %s; overhead %s per step\n",
			units.FormatSeconds(b.PlainSec), units.FormatSeconds(b.StepSec), units.FormatSeconds(b.OverheadSec))
	}
	return nil
}

// vectorBaseline names the vector-datatype exchange (vectorExchange).
const vectorBaseline = "vector-datatype exchange of the same boxes (each box one message, sent in place with an MPI derived datatype; Isend/Irecv, then Testall)"
