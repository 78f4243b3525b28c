package sim

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/m2n-dev/m2n/units"
)

// WriteText writes the report as refit sim prints it: the problem and the
// cluster, each route's simulated time against its bound, the binding
// link and the critical path's shares, auto's reasons, link use, and (as
// the report holds them) each stage's time (perStage), each tensor's
// completion and the critical path's last steps.
func (rep *Report) WriteText(w io.Writer, perStage bool) error {
	fmt.Fprintf(w, "source:      %s\ndestination: %s\n", rep.Source, rep.Destination)
	stages := ""
	if rep.Stages > 1 {
		how := "concurrent"
		if rep.Sequential {
			how = "one after another"
		}
		stages = fmt.Sprintf(", %d pipeline stages (%s)", rep.Stages, how)
	}
	what := fmt.Sprintf("%s (%s)", units.FormatBytes(rep.Bytes), units.FormatDecimalBytes(float64(rep.Bytes), 4))
	if rep.Model != "" {
		what = fmt.Sprintf("model %s, %s (%s)", rep.Model, units.FormatBytes(rep.Bytes), units.FormatDecimalBytes(float64(rep.Bytes), 4))
	} else if rep.Stages > 1 {
		what += " per stage"
	}
	fmt.Fprintf(w, "world %d, %s, chunk %s, staging %s, coalescing up to %s%s\n", rep.World, what, units.FormatBytes(rep.ChunkBytes),
		units.FormatBytes(rep.StagingBytes), units.FormatBytes(rep.CoalesceBytes), stages)
	fmt.Fprintf(w, "cluster %s\n", rep.Cluster)
	if note, ok := PresetNotes[rep.Cluster.Name]; ok {
		fmt.Fprintf(w, "  (%s)\n", note)
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	if rep.Measured != "" {
		fmt.Fprintf(w, "measured: %s\n\n", rep.Measured)
		fmt.Fprintln(tw, "route\tmeasured\tsimulated\tsim/measured\tbound\tmeasured/bound\tbinding link (critical path)")
		for _, r := range rep.Routes {
			mb := 0.0
			if r.BoundSeconds > 0 {
				mb = r.MeasuredSec / r.BoundSeconds
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%.3f\t%s\t%.2f\t%s\n", r.Route, units.FormatSeconds(r.MeasuredSec), units.FormatSeconds(r.Seconds), r.SimOverMeas,
				units.FormatSeconds(r.BoundSeconds), mb, r.BindingLink)
		}
		return tw.Flush()
	}
	fmt.Fprintln(tw, "route\tsimulated\tbound\tsim/bound\tbinding link (critical path)\tcritical path\tbound's binding term")
	for _, r := range rep.Routes {
		name := r.Route
		if r.Chosen != r.Route {
			name = r.Route + ":" + r.Chosen
		}
		var shares []string
		for _, s := range r.Shares {
			if r.Seconds > 0 && s.Seconds/r.Seconds >= 0.005 {
				shares = append(shares, fmt.Sprintf("%s %.0f%%", s.Kind, 100*s.Seconds/r.Seconds))
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%.2f\t%s\t%s\t%s\n", name, units.FormatSeconds(r.Seconds), units.FormatSeconds(r.BoundSeconds), r.Ratio,
			r.BindingLink, strings.Join(shares, ", "), r.BoundBinding)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, a := range rep.Anchors {
		fmt.Fprintf(w, "published: %s; hier here %s\n", a, rep.hierVs(a))
	}
	for _, r := range rep.Routes {
		if r.Why != "" {
			fmt.Fprintf(w, "\nauto: %s\n", r.Why)
		}
	}
	for _, r := range rep.Routes {
		var cls []string
		for _, c := range r.Classes {
			cls = append(cls, fmt.Sprintf("%s %s %.0f%% mean (%d links, max %.0f%%)", c.Class, c.Dir, 100*c.MeanUtil, c.Links, 100*c.MaxUtil))
		}
		fmt.Fprintf(w, "\n%s: %d messages, %d rounds; link use: %s\n", r.Route, r.Messages, r.Rounds, strings.Join(cls, "; "))
		if n := r.Network.text(); n != "" {
			fmt.Fprintf(w, "  network: %s\n", n)
		}
		if perStage && len(r.Parts) > 1 {
			for _, p := range r.Parts {
				fmt.Fprintf(w, "  %s: %s (%d messages)\n", p.Name, units.FormatSeconds(p.Seconds), p.Messages)
			}
		}
		for _, t := range r.Tensors {
			fmt.Fprintf(w, "  tensor %s: done at %s\n", t.Name, units.FormatSeconds(t.Seconds))
		}
		if len(r.Critical) > 0 {
			fmt.Fprintf(w, "  critical path, last %d steps:\n", len(r.Critical))
			for _, s := range r.Critical {
				fmt.Fprintf(w, "    %s\n", formatStep(s))
			}
		}
	}
	return nil
}

// hierVs says how the simulated hier route compares with an anchor
// ("" without a hier route).
func (rep *Report) hierVs(a Anchor) string {
	for _, r := range rep.Routes {
		if r.Chosen == "hier" && r.Seconds > 0 {
			return fmt.Sprintf("%s, %.1fx under it", units.FormatSeconds(r.Seconds), a.Seconds/r.Seconds)
		}
	}
	return "not simulated"
}

func formatStep(s Step) string {
	switch s.Kind {
	case "transfer":
		return fmt.Sprintf("%10s -> %10s  transfer  message %d of %s, round %d: rank %d -> %d, %s, bound by %s", units.FormatSeconds(s.From),
			units.FormatSeconds(s.To), s.Message, s.Part, s.Round, s.Src, s.Dst, units.FormatBytes(s.Bytes), s.Link)
	case "latency":
		return fmt.Sprintf("%10s -> %10s  latency   message %d: rank %d -> %d", units.FormatSeconds(s.From), units.FormatSeconds(s.To), s.Message, s.Src, s.Dst)
	case "message rate":
		return fmt.Sprintf("%10s -> %10s  msg rate  message %d: rank %d -> %d, held by %s", units.FormatSeconds(s.From), units.FormatSeconds(s.To), s.Message, s.Src, s.Dst, s.Link)
	case "post":
		return fmt.Sprintf("%10s               post      rank %d posts round %d of %s", units.FormatSeconds(s.From), s.Rank, s.Round, s.Part)
	case "compute":
		return fmt.Sprintf("%10s -> %10s  compute   rank %d copies, packs or unpacks", units.FormatSeconds(s.From), units.FormatSeconds(s.To), s.Rank)
	}
	return fmt.Sprintf("%10s               %s  rank %d (%s)", units.FormatSeconds(s.From), s.Kind, s.Rank, s.Part)
}

// text says whether the message rate bound and what the topology relayed
// ("" when there is neither a rate nor a rail topology).
func (u NetworkUse) text() string {
	var parts []string
	if u.MsgRate > 0 {
		if u.RateDelayed == 0 {
			parts = append(parts, fmt.Sprintf("message rate %s/s per NIC not binding (most: %s, %d messages, %.2g%% of the rate over the run)",
				formatCount(u.MsgRate), u.MostMessagesLink, u.MostMessages, 100*u.MsgRateUse))
		} else {
			parts = append(parts, fmt.Sprintf("message rate %s/s per NIC binding: %d messages held back, %s in all (most: %s, %d messages, %.0f%% of the rate over the run)",
				formatCount(u.MsgRate), u.RateDelayed, units.FormatSeconds(u.RateDelaySec), u.MostMessagesLink, u.MostMessages, 100*u.MsgRateUse))
		}
	}
	if u.Topology == TopoRail {
		parts = append(parts, fmt.Sprintf("rail-optimised, %d cross-rail messages relayed through the source domain's NIC on the destination's rail", u.Relayed))
	}
	return strings.Join(parts, "; ")
}
