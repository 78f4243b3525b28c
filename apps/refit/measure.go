package main

import (
	"fmt"
	"time"

	"github.com/m2n-dev/m2n/envopts"
	"github.com/m2n-dev/m2n/faults"
	"github.com/m2n-dev/m2n/launcher"
	"github.com/m2n-dev/m2n/perf"
	"github.com/m2n-dev/m2n/placement"
	"github.com/m2n-dev/m2n/refit"
	"github.com/m2n-dev/m2n/reshard"
	"github.com/m2n-dev/m2n/session"
	"github.com/m2n-dev/m2n/spmd"
	"github.com/m2n-dev/m2n/units"
)

// newPair allocates a layout pair's buffers on s (the world's session, or
// a pipeline stage's) with the job's settings and the test-only faults
// the environment asks of this rank (perf.NewPair): the source filled
// with the pattern of tensor seed.
func (j *job) newPair(s *session.Session, src, dst placement.Layout, seed uint64) (*perf.Pair, error) {
	inject := perf.NoFaults
	if i, ok, _ := faults.At("M2N_FAULT_NAN", spmd.Rank()); ok {
		inject.NaN = int64(i)
	}
	_, inject.ShortDst, _ = faults.At("M2N_FAULT_SHORT_DST", spmd.Rank())
	if b, ok, _ := faults.At("M2N_FAULT_CORRUPT", spmd.Rank()); ok {
		inject.Corrupt = b
	}
	extra := int64(0)
	if j.set.MeasureLocal {
		extra = 16 << 20 // the two buffers of the local-bandwidth probe (perf)
	}
	return perf.NewPair(s, perf.PairConfig{Src: src, Dst: dst, Seed: seed, Scale: j.set.fp8, Stripe: j.set.opts.Stripe,
		ExtraBuffers: extra, WorldRank: j.Rank, Faults: inject, Log: j.Log})
}

// measurePair allocates a layout pair on s (newPair), measures the flags'
// routes on it (runRoutes, members as there) and frees it.
func (j *job) measurePair(s *session.Session, src, dst placement.Layout, seed uint64, f *runFlags, members []int) (*perf.RunReport, error) {
	p, err := j.newPair(s, src, dst, seed)
	if err != nil {
		return nil, err
	}
	defer p.Close()
	return j.runRoutes(s, p, f, members)
}

// runRoutes prepares and measures every route of the flags on pair p,
// made on session s (perf.RunRoutes), with rank 0's progress, the
// emulation's check and the fault points; members maps s's ranks to world
// ranks (nil: they are the world's). A schedule the route refuses is
// explained with where its sizes came from.
func (j *job) runRoutes(s *session.Session, p *perf.Pair, f *runFlags, members []int) (*perf.RunReport, error) {
	names, _ := f.routes()
	bars := map[string]*launcher.Progress{}
	defer func() {
		for _, b := range bars {
			b.Finish()
		}
	}()
	rep, err := p.RunRoutes(perf.RoutesConfig{Routes: names, Route: j.set.routeOpts(j.set.Fabric), MeasureLocal: j.set.MeasureLocal,
		FabricGiven: j.set.FabricGiven, BeforePrepare: func() { stopHere("prepare") },
		Prepared: func(c *refit.Call) error { return j.checkEmulation(s, c.Schedule(), members) },
		Measure: perf.MeasureConfig{Warmup: f.warmup, Iters: f.iters, Check: f.check, Atomic: f.atomic, Change: f.change, AtReport: func() { stopHere("report") },
			Progress: func(route string, done, total int64) {
				if _, ok := bars[route]; !ok {
					bars[route] = j.newProgress(fmt.Sprintf("route %s: iterations", route), total, "iterations", f.asJSON || f.noProgress)
				}
				bars[route].Set(done)
			}}})
	if err != nil {
		o := s.Options()
		return nil, envopts.ExplainSchedule(err, p.Plan(), reshard.ScheduleOptions{ChunkBytes: o.ChunkBytes, StagingBytes: o.StagingBytes}, f.lookup)
	}
	return rep, nil
}

// checkEmulation refuses a call whose rounds the emulated network cannot
// carry within the timeout, which bounds every round (perf.EmulatedRound:
// the busiest rank's network bytes of one round at the rate; every rank
// computes the same, from the same schedule). A refusal names the rate,
// the timeout and the numbers, where the others' waits would have blamed
// healthy ranks. members maps s's ranks to world ranks (nil: they are the
// world's).
func (j *job) checkEmulation(s *session.Session, sched *reshard.Schedule, members []int) error {
	o := s.Options()
	if o.EmulateNetBW <= 0 {
		return nil
	}
	sec, bytes, rank, round := perf.EmulatedRound(sched, o.EmulateNetBW)
	if sec < o.Timeout.Seconds() {
		return nil
	}
	if rank < len(members) {
		rank = members[rank]
	}
	return jobError{usageError{fmt.Errorf("%s %q: rank %d moves %s over the network in round %d of the %s schedule, %v at that rate, "+
		"and %s %q bounds every round: raise the timeout or the rate, or lower --chunk-bytes", j.set.Emulate.Name, j.set.Emulate.Value,
		rank, units.FormatBytes(bytes), round, sched.Route, time.Duration(sec*float64(time.Second)).Round(time.Millisecond),
		j.set.Timeout.Name, j.set.Timeout.Value)}}
}

// stopHere is this rank's fault point where (faults.StopHere: test-only).
func stopHere(where string) { faults.StopHere(spmd.Rank(), where) }
