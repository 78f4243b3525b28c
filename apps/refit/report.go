package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/m2n-dev/m2n/hier"
	"github.com/m2n-dev/m2n/placement"
	"github.com/m2n-dev/m2n/refit"
	"github.com/m2n-dev/m2n/units"
)

// routeReport is what one route did, as rank 0 prints it.
type routeReport struct {
	Route      string        `json:"route"`
	Driver     string        `json:"driver,omitempty"` // on GPUs: replay, graph or host
	Why        string        `json:"why,omitempty"`
	Iters      int           `json:"iters"`
	MedianSec  float64       `json:"median_s"`
	MinSec     float64       `json:"min_s"`
	MaxSec     float64       `json:"max_s"`
	TensorGBps float64       `json:"tensor_gbps"`
	BoundSec   float64       `json:"bound_s,omitempty"`
	Binding    string        `json:"binding,omitempty"`
	Ratio      float64       `json:"time_over_bound,omitempty"`
	Check      string        `json:"check"`
	Rounds     int           `json:"rounds"`
	Ranks      []rankTraffic `json:"ranks,omitempty"`
	Extra      any           `json:"extra,omitempty"`
}

// rankTraffic is one rank's bytes in one iteration.
type rankTraffic struct {
	Rank        int    `json:"rank"`
	Role        string `json:"role"`
	Domain      int    `json:"domain"`
	Sent        int64  `json:"sent"`
	Recv        int64  `json:"recv"`
	SentNetwork int64  `json:"sent_network"`
	RecvNetwork int64  `json:"recv_network"`
	SentLocal   int64  `json:"sent_local"`
	RecvLocal   int64  `json:"recv_local"`
	Copied      int64  `json:"copied"`
	Packed      int64  `json:"packed"`
}

type runReport struct {
	Stage       *int          `json:"stage,omitempty"`
	Members     []int         `json:"stage_world_ranks,omitempty"`
	World       int           `json:"world"`
	Source      string        `json:"source"`
	Destination string        `json:"destination"`
	FP8Scale    string        `json:"fp8_scale,omitempty"` // the scaling mode when the destination is FP8
	Bytes       int64         `json:"bytes"`
	Fingerprint string        `json:"fingerprint"`
	ChunkBytes  int64         `json:"chunk_bytes"`
	Staging     int64         `json:"staging_bytes"`
	Domains     []int         `json:"domains"`
	EmulatedBW  float64       `json:"emulated_net_bw,omitempty"`
	FabricGiven bool          `json:"fabric_given,omitempty"`
	Fabric      hier.Fabric   `json:"fabric"`
	Routes      []routeReport `json:"routes"`
}

func printReport(out io.Writer, asJSON bool, rep *runReport) error {
	if asJSON {
		return json.NewEncoder(out).Encode(rep)
	}
	return writeRunReport(out, rep)
}

// checkFailures turns failed checks into the job's error.
func checkFailures(reps []*runReport) error {
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
func gatherReports(coll refit.Collective, mine []*runReport) ([]*runReport, error) {
	payload, err := json.Marshal(mine)
	if err != nil {
		return nil, err
	}
	blobs, err := refit.Exchange(refit.WithPhase(context.Background(), "report gathering"), coll, payload)
	if err != nil {
		return nil, err
	}
	var all []*runReport
	for _, b := range blobs {
		var reps []*runReport
		if err := json.Unmarshal(b, &reps); err != nil {
			return nil, err
		}
		all = append(all, reps...)
	}
	sort.SliceStable(all, func(a, b int) bool { return *all[a].Stage < *all[b].Stage })
	return all, nil
}

func role(src, dst placement.Layout, r int) string {
	s, d := src.Mesh().Contains(r), dst.Mesh().Contains(r)
	switch {
	case s && d:
		return "src+dst"
	case s:
		return "src"
	case d:
		return "dst"
	}
	return "idle"
}

func writeRunReport(w io.Writer, rep *runReport) error {
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
		if pr, ok := rr.Extra.(plainReport); ok {
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
