package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/m2n-dev/m2n/perf"
	"github.com/m2n-dev/m2n/refit"
	"github.com/m2n-dev/m2n/units"
)

func printReport(out io.Writer, asJSON bool, rep *perf.RunReport) error {
	return printJSONOr(out, asJSON, rep, func() error { return writeRunReport(out, rep) })
}

// printJSONOr prints v as one JSON object with asJSON, else its text.
func printJSONOr(out io.Writer, asJSON bool, v any, text func() error) error {
	if asJSON {
		return json.NewEncoder(out).Encode(v)
	}
	return text()
}

// checkFailures turns failed checks into the job's error.
func checkFailures(reps []*perf.RunReport) error {
	var failed []string
	for _, rep := range reps {
		for _, rr := range rep.Routes {
			if strings.HasPrefix(rr.Check, "FAILED") {
				name := rr.Route
				if rep.Stage != nil {
					name = fmt.Sprintf("%s of stage %d", rr.Route, *rep.Stage)
				}
				failed = append(failed, name+": "+strings.TrimPrefix(rr.Check, "FAILED: "))
			}
		}
	}
	if len(failed) > 0 {
		return jobError{fmt.Errorf("check failed on route %s", strings.Join(failed, "; route "))}
	}
	return nil
}

// gatherReports collects every rank's reports on every rank, ordered by
// stage, over the bounded collective coll.
func gatherReports(coll refit.Collective, mine []*perf.RunReport) ([]*perf.RunReport, error) {
	payload, err := json.Marshal(mine)
	if err != nil {
		return nil, err
	}
	blobs, err := refit.Exchange(refit.WithPhase(context.Background(), "report gathering"), coll, payload)
	if err != nil {
		return nil, err
	}
	var all []*perf.RunReport
	for _, b := range blobs {
		var reps []*perf.RunReport
		if err := json.Unmarshal(b, &reps); err != nil {
			return nil, err
		}
		all = append(all, reps...)
	}
	sort.SliceStable(all, func(a, b int) bool { return *all[a].Stage < *all[b].Stage })
	return all, nil
}

func writeRunReport(w io.Writer, rep *perf.RunReport) error {
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
	for _, rr := range rep.Routes {
		if pr, ok := rr.Extra.(perf.PlainReport); ok {
			fmt.Fprintf(w, "\nbaseline, %s: %s per iteration (median of %d), %.2f GB/s of tensor\n", pr.Baseline,
				units.FormatSeconds(pr.MedianSec), rr.Iters, pr.TensorGBps)
			fmt.Fprintf(w, "reshard (%s) interleaved with it: %s per iteration; the reshard reaches %.0f%% of the plain exchange's bandwidth\n",
				pr.ReshardRoute, units.FormatSeconds(pr.ReshardSec), 100*pr.Ratio)
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
