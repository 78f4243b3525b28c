package perf

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/m2n-dev/m2n/routespec"
	"github.com/m2n-dev/m2n/session"
	"github.com/m2n-dev/m2n/units"
)

// SoakReport is many consecutive checked reshards in one job (refit soak
// --json): every rank's footprint after a warm-up and at the end, which
// must stay flat.
type SoakReport struct {
	Count   int
	Seconds float64
	Ranks   []SoakRank
	// Pairs and Warm (not in the JSON) are the layout pairs it cycled
	// through and the reshard after which the first footprint was taken.
	Pairs, Warm int `json:"-"`
}

// SoakRank is one rank's footprint after the warm-up and at the end.
type SoakRank struct {
	Rank                              int
	RSS, RSSAfter, Heap, HeapAfter    int64
	Goroutines, GoroutinesAfter       int64
	Requests, RequestsAfter           int64
	Communicators, CommunicatorsAfter int64
}

// GatherSoak gathers every rank's footprints (first after the warm-up,
// last at the end) into a report (Count, Seconds, Pairs and Warm are the
// caller's).
func GatherSoak(s *session.Session, first, last Usage) (*SoakReport, error) {
	mine := []int64{first.RSS, last.RSS, first.Goroutines, last.Goroutines, first.Requests, last.Requests, first.Comms, last.Comms,
		first.Heap, last.Heap}
	all, err := gather(s, "report gathering", mine)
	if err != nil {
		return nil, err
	}
	rep := &SoakReport{}
	for r := 0; r < s.Size(); r++ {
		v := all[r*len(mine):]
		rep.Ranks = append(rep.Ranks, SoakRank{r, v[0], v[1], v[8], v[9], v[2], v[3], v[4], v[5], v[6], v[7]})
	}
	return rep, nil
}

// WriteText writes the soak as refit soak prints it: the pace, every
// rank's footprints, and the largest growth.
func (rep *SoakReport) WriteText(out io.Writer) error {
	count, warm := rep.Count, rep.Warm
	el := time.Duration(rep.Seconds * float64(time.Second))
	fmt.Fprintf(out, "%d checked reshards (%d layout pairs x 3 arrangements, routes %s in turn) in %v, %.1f ms each\n",
		count, rep.Pairs, strings.Join(routespec.Names, ", "), el.Round(time.Millisecond), float64(el.Milliseconds())/float64(count))
	fmt.Fprintf(out, "per rank after reshard %d and after reshard %d:\n\n", warm, count)
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "rank\tRSS\tRSS after\tGo heap\theap after\tgoroutines\tafter\tpending requests\tafter\tcommunicators\tafter\t")
	var maxGrowth, maxHeap int64
	for _, x := range rep.Ranks {
		maxGrowth = max(maxGrowth, x.RSSAfter-x.RSS)
		maxHeap = max(maxHeap, x.HeapAfter-x.Heap)
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t\n", x.Rank, units.FormatBytes(x.RSS), units.FormatBytes(x.RSSAfter),
			units.FormatBytes(x.Heap), units.FormatBytes(x.HeapAfter), x.Goroutines, x.GoroutinesAfter, x.Requests, x.RequestsAfter,
			x.Communicators, x.CommunicatorsAfter)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(out, "\nlargest growth: RSS %s, live Go heap %s\n", units.FormatBytes(maxGrowth), units.FormatBytes(maxHeap))
	return nil
}
