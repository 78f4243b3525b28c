package perf

import (
	"fmt"

	"github.com/m2n-dev/m2n/pattern"
	"github.com/m2n-dev/m2n/placement"
	"github.com/m2n-dev/m2n/refit"
	"github.com/m2n-dev/m2n/reshard"
	"github.com/m2n-dev/m2n/session"
	"github.com/m2n-dev/m2n/transport"
)

// DeltaReport is what a run in delta mode (session.Options.Delta)
// measured: every iteration after the first changes a fraction Change of
// the tensor's elements (pattern.Change) and runs twice, as a delta step
// and, after Call.Resync, as a full sync of the same values, timed apart
// in one run. The bytes are those of the last delta step, summed over the
// ranks: what the encodings moved between ranks (Sent) against what a
// dense step moves (Dense).
type DeltaReport struct {
	Change    float64 `json:"change"`
	MedianSec float64 `json:"median_s"`
	FullSec   float64 `json:"full_median_s"`
	Sent      int64   `json:"sent"`
	Dense     int64   `json:"dense"`
	ByteRatio float64 `json:"bytes_over_full"`
	TimeRatio float64 `json:"time_over_full"`
}

// change applies the next update, of fraction frac, to this rank's
// source (host memory: delta mode runs on CPUs). Updates count on across
// the routes a pair runs.
func (p *Pair) change(frac float64) error {
	p.updates++
	step := p.updates
	if p.frac != 0 && frac != p.frac {
		return fmt.Errorf("rank %d: updates of fraction %v, then %v (a pair's updates share one fraction)", p.s.Rank(), p.frac, frac)
	}
	p.frac = frac
	if p.srcBuf == nil {
		return nil
	}
	host, ok := p.srcBuf.(transport.HostBuffer)
	if !ok {
		return fmt.Errorf("rank %d: delta mode changes sources in host memory, this one is %T", p.s.Rank(), p.srcBuf)
	}
	return pattern.Change(p.cfg.Src, p.s.Rank(), p.cfg.Seed, step, frac, host, placement.View{})
}

// linkBytes sums v over the links between ranks.
func linkBytes(v [reshard.LinkClasses]int64) int64 {
	return v[reshard.LinkNetwork] + v[reshard.LinkLocal]
}

// deltaReport gathers the last delta step's bytes (st) from every rank
// of s and compares it with the full syncs.
func deltaReport(s *session.Session, st refit.Stats, change float64, delta, full timings) (*DeltaReport, error) {
	all, err := gather(s, "report gathering", []int64{linkBytes(st.Sent), linkBytes(st.DenseSent)})
	if err != nil {
		return nil, err
	}
	d := &DeltaReport{Change: change, MedianSec: delta.Median(), FullSec: full.Median()}
	for r := 0; r < s.Size(); r++ {
		d.Sent += all[2*r]
		d.Dense += all[2*r+1]
	}
	if d.Dense > 0 {
		d.ByteRatio = float64(d.Sent) / float64(d.Dense)
	}
	if d.FullSec > 0 {
		d.TimeRatio = d.MedianSec / d.FullSec
	}
	return d, nil
}
