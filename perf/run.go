package perf

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/m2n-dev/m2n/bounds"
	"github.com/m2n-dev/m2n/fp8"
	"github.com/m2n-dev/m2n/placement"
	"github.com/m2n-dev/m2n/refit"
	"github.com/m2n-dev/m2n/reshard"
	"github.com/m2n-dev/m2n/routespec"
	"github.com/m2n-dev/m2n/session"
)

// RunReport is what a pair's routes did (refit run --json prints it):
// the layouts, the sizes and fabric, and one RouteReport per route, with
// every rank's traffic.
type RunReport struct {
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
	Fabric      bounds.Fabric `json:"fabric"`
	Routes      []RouteReport `json:"routes"`
}

// RouteReport is what one route did.
type RouteReport struct {
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
	Check      string        `json:"check"` // "passed", "not checked", or "FAILED: " and the first wrong element
	Rounds     int           `json:"rounds"`
	Ranks      []RankTraffic `json:"ranks,omitempty"`
	Delta      *DeltaReport  `json:"delta,omitempty"` // in delta mode: against full syncs
	Extra      any           `json:"extra,omitempty"` // PlainReport for the plain exchange
}

// RankTraffic is one rank's bytes in one iteration.
type RankTraffic struct {
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

// PlainReport is the plain exchange BenchPlain measures beside a route.
type PlainReport struct {
	Baseline     string  `json:"baseline"`
	MedianSec    float64 `json:"median_s"`
	TensorGBps   float64 `json:"tensor_gbps"`
	ReshardRoute string  `json:"reshard_route"`
	ReshardSec   float64 `json:"reshard_median_s"`
	Ratio        float64 `json:"reshard_over_plain_bandwidth"`
	// VectorSec is the vector-datatype exchange's median on CPUs
	// (vectorExchange: each box in place, as a user writes it by hand), 0
	// where it does not run; VectorRatio its time over the reshard's.
	VectorSec   float64 `json:"vector_median_s,omitempty"`
	VectorGBps  float64 `json:"vector_tensor_gbps,omitempty"`
	VectorRatio float64 `json:"reshard_over_vector_bandwidth,omitempty"`
	// VectorAgreedSec is the vector exchange between two of the session's
	// agreements (a step's begin and end collectives): the floor of a step
	// that agrees before and after its bytes.
	VectorAgreedSec   float64 `json:"vector_agreed_median_s,omitempty"`
	VectorAgreedRatio float64 `json:"reshard_over_vector_agreed_bandwidth,omitempty"`
}

// MeasureConfig says how to time a call: Warmup untimed iterations, then
// Iters timed ones (every iteration's time is the slowest rank's);
// Check poisons the destinations before every iteration and checks every
// element after (inSteps); Atomic checks, after a failed call, that every
// destination is untouched. Progress, when set, hears of every iteration
// done (done of total: Warmup+Iters) of route; AtReport runs before the
// traffic is gathered (a program's test hooks). In delta mode (the
// session's Options.Delta) Change is the fraction of the elements every
// iteration after the first changes, each iteration is timed as a delta
// step and as a full sync (DeltaReport), and Check poisons the
// destinations once, before the first.
type MeasureConfig struct {
	Warmup, Iters int
	Check, Atomic bool
	Change        float64
	Progress      func(route string, done, total int64)
	AtReport      func()
}

// measure runs one prepared call of the pair Warmup+Iters times and
// reports it: times, checks and every rank's traffic.
func (p *Pair) measure(call *refit.Call, c MeasureConfig) (RouteReport, error) {
	s := p.s
	sched := call.Schedule()
	rr := RouteReport{Route: sched.Route, Iters: c.Iters, Rounds: sched.Rounds}
	if s.Options().Device == session.GPU {
		rr.Driver = call.Driver().Name()
	}
	var times, full timings
	var st refit.Stats
	delta := s.Options().Delta
	checkMsg := "" // this rank's first wrong element, in any iteration
	for it := 0; it < c.Warmup+c.Iters; it++ {
		if delta && it > 0 {
			if err := inSteps(s, "the sources' update", func() error { return p.change(c.Change) }); err != nil {
				return rr, err
			}
		}
		sec, stats, err := p.iteration(call, c, it == 0)
		if err != nil {
			return rr, err
		}
		if it >= c.Warmup {
			times.Add(sec)
		}
		st = stats
		if delta && it > 0 {
			call.Resync() // the same values again, dense
			fsec, _, err := p.iteration(call, c, false)
			if err != nil {
				return rr, err
			}
			if it >= c.Warmup {
				full.Add(fsec)
			}
		}
		p.cfg.Log.Debug().Str("route", sched.Route).Int("iter", it).Float64("seconds", sec).Msg("iteration")
		if c.Check {
			if err := inSteps(s, "check (comparing every destination element)", func() (err error) {
				if checkMsg == "" {
					checkMsg, err = p.check(iterationName(it, c.Warmup, "iteration"))
				}
				return err
			}); err != nil {
				return rr, err
			}
		}
		if c.Progress != nil {
			c.Progress(sched.Route, int64(it+1), int64(c.Warmup+c.Iters))
		}
	}
	rr.MedianSec, rr.MinSec, rr.MaxSec = times.Median(), times.Min(), times.Max()
	if rr.MedianSec > 0 {
		rr.TensorGBps = float64(p.cfg.Src.Bytes()) / rr.MedianSec / 1e9
	}
	if c.AtReport != nil {
		c.AtReport()
	}
	var err error
	if rr.Ranks, err = p.traffic(call.Topology(), st); err != nil {
		return rr, err
	}
	if delta {
		if rr.Delta, err = deltaReport(s, st, c.Change, times, full); err != nil {
			return rr, err
		}
	}
	first, err := firstMessage(s, checkMsg)
	rr.Check = checkResult(c.Check, first)
	return rr, err
}

// iteration runs the call once (the destinations poisoned first when
// checking, and at the first iteration), and returns the slowest rank's
// time.
func (p *Pair) iteration(call *refit.Call, c MeasureConfig, first bool) (float64, refit.Stats, error) {
	s, ctx := p.s, context.Background()
	if c.Check && !s.Options().Delta || first {
		if err := inSteps(s, "poison of the destinations", p.poison); err != nil {
			return 0, refit.Stats{}, err
		}
	}
	if err := s.Barrier(ctx); err != nil {
		return 0, refit.Stats{}, err
	}
	t0 := time.Now()
	rep, err := call.Run(ctx, p.buffers())
	if err != nil {
		if c.Atomic {
			err = p.checkUntouched(err)
		}
		return 0, refit.Stats{}, err
	}
	sec, _, err := maxOver(s, time.Since(t0).Seconds())
	return sec, rep.Stats, err
}

// traffic gathers every rank's bytes of its last iteration.
func (p *Pair) traffic(topo reshard.Topology, st refit.Stats) ([]RankTraffic, error) {
	mine := []int64{st.Sent[reshard.LinkNetwork], st.Recv[reshard.LinkNetwork], st.Sent[reshard.LinkLocal],
		st.Recv[reshard.LinkLocal], st.Sent[reshard.LinkSelf], st.Packed}
	all, err := gather(p.s, "report gathering", mine)
	if err != nil {
		return nil, err
	}
	var out []RankTraffic
	for r := 0; r < p.s.Size(); r++ {
		v := all[r*len(mine):]
		t := RankTraffic{Rank: r, Role: rankRole(p.cfg.Src, p.cfg.Dst, r), Domain: topo.Domain[r], SentNetwork: v[0], RecvNetwork: v[1],
			SentLocal: v[2], RecvLocal: v[3], Copied: v[4], Packed: v[5]}
		t.Sent, t.Recv = t.SentNetwork+t.SentLocal, t.RecvNetwork+t.RecvLocal
		out = append(out, t)
	}
	return out, nil
}

// checkResult is a report's check: "not checked", "passed", or "FAILED: "
// and the first rank's first wrong element.
func checkResult(checked bool, first string) string {
	switch {
	case !checked:
		return "not checked"
	case first == "":
		return "passed"
	}
	return "FAILED: " + first
}

// iterationName names iteration it of a run whose first warmup
// iterations warm up: "iteration 3", "warm-up iteration 0" (unit
// "step" for a model's).
func iterationName(it, warmup int, unit string) string {
	if it < warmup {
		return fmt.Sprintf("warm-up %s %d", unit, it)
	}
	return fmt.Sprintf("%s %d", unit, it-warmup)
}

// rankRole names rank r's part in a reshard: src, dst, src+dst or idle.
func rankRole(src, dst placement.Layout, r int) string {
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

// RoutesConfig says how to run a pair's routes: by name (routespec.List),
// with Route's settings, each measured by Measure. With MeasureLocal the
// fabric's local bandwidth is measured first (localBandwidth, over the
// calls' own transport: an emulated network caps only the traffic between
// domains). BeforePrepare, when set, runs before the first route is
// prepared, and Prepared sees every prepared call before it runs and may
// refuse it.
type RoutesConfig struct {
	Routes        []string
	Route         routespec.Options
	MeasureLocal  bool
	FabricGiven   bool
	Measure       MeasureConfig
	BeforePrepare func()
	Prepared      func(*refit.Call) error
}

// RunRoutes prepares and measures every route of c on the pair, and
// returns the report, with each route's bound from the data-movement
// model (every rank's copy holds every rank's traffic).
func (p *Pair) RunRoutes(c RoutesConfig) (*RunReport, error) {
	s := p.s
	opts := s.Options()
	rep := &RunReport{World: s.Size(), Source: p.cfg.Src.String(), Destination: p.cfg.Dst.String(), Bytes: p.cfg.Src.Bytes(),
		Fingerprint: fmt.Sprintf("%016x", p.plan.Fingerprint()), ChunkBytes: opts.ChunkBytes, Staging: opts.StagingBytes,
		EmulatedBW: opts.EmulateNetBW, FabricGiven: c.FabricGiven, Fabric: c.Route.Fabric}
	if p.scale != 0 {
		rep.FP8Scale = map[fp8.Mode]string{fp8.Block: "128x128 block", fp8.Row: "row", fp8.Tensor: "matrix"}[p.scale]
	}
	if c.MeasureLocal {
		bw, err := p.localBandwidth()
		if err != nil {
			return nil, err
		}
		rep.Fabric.LocalBW = bw
	}
	c.Route.Fabric = rep.Fabric
	if c.BeforePrepare != nil {
		c.BeforePrepare()
	}
	for _, name := range c.Routes {
		rr, topo, err := p.runRoute(name, c)
		if err != nil {
			return nil, err
		}
		rep.Domains = topo.Domain
		byRoute := map[string]bounds.Bound{}
		for _, b := range bounds.Of(bounds.FromPlan(p.plan, topo, float64(opts.ChunkBytes)), rep.Fabric) {
			byRoute[b.Route] = b
		}
		if b, ok := byRoute[strings.TrimPrefix(rr.Route, "auto:")]; ok && b.Seconds > 0 {
			rr.BoundSec, rr.Binding, rr.Ratio = b.Seconds, b.Binding, rr.MedianSec/b.Seconds
		}
		rep.Routes = append(rep.Routes, rr)
	}
	return rep, nil
}

// runRoute prepares route name on the pair and measures it.
func (p *Pair) runRoute(name string, c RoutesConfig) (RouteReport, reshard.Topology, error) {
	route, err := routespec.Parse(name, c.Route)
	if err != nil {
		return RouteReport{}, reshard.Topology{}, err
	}
	call, err := p.s.Prepare(context.Background(), p.specs(), route)
	if err != nil {
		return RouteReport{}, reshard.Topology{}, err
	}
	defer call.Close()
	if c.Prepared != nil {
		if err := c.Prepared(call); err != nil {
			return RouteReport{}, reshard.Topology{}, err
		}
	}
	sched := call.Schedule()
	if sched.Note != "" && p.s.Rank() == 0 {
		p.cfg.Log.Info().Str("route", sched.Route).Msg(sched.Note)
	}
	rr, err := p.measure(call, c.Measure)
	rr.Why = sched.Note
	return rr, call.Topology(), err
}

// localBandwidth measures the local-fabric bandwidth among the pair's
// destination ranks over a flat call's transport.
func (p *Pair) localBandwidth() (float64, error) {
	call, err := p.s.Prepare(context.Background(), p.specs(), reshard.Flat)
	if err != nil {
		return 0, err
	}
	defer call.Close()
	bw, err := localBandwidth(p.s, call, p.cfg.Dst.Mesh().Ranks())
	p.cfg.Log.Debug().Float64("local_bw", bw).Msg("measured local bandwidth")
	return bw, err
}

// BenchPlain times, interleaved iteration by iteration with iters calls of
// each route (names: what to call them), two hand-written exchanges over
// the same transport: a plain exchange of the bytes the first route moves
// between every pair of ranks (plainExchange: one contiguous message per
// pair) and, on CPUs without a dtype conversion, the exchange a user
// writes by hand instead of a reshard (vectorExchange: each transfer's box
// sent in place with an MPI vector datatype; checked element by element
// once first). The first of each warms up. It returns one
// RouteReport named "plain" per route (Extra: a PlainReport comparing it
// with both; on CPUs also with the vector exchange between two agreements,
// the floor of a step).
func (p *Pair) BenchPlain(routes []reshard.Route, names []string, iters int) ([]RouteReport, error) {
	s := p.s
	calls := make([]*refit.Call, len(routes))
	defer func() {
		for _, c := range calls {
			if c != nil {
				_ = c.Close()
			}
		}
	}()
	for i, r := range routes {
		var err error
		if calls[i], err = s.Prepare(context.Background(), p.specs(), r); err != nil {
			return nil, err
		}
	}
	px, err := newPlainExchange(s.Memory(), calls[0].Schedule(), s.Rank())
	if err != nil {
		return nil, err
	}
	defer px.Free()
	fns := []func() error{func() error { return px.Run(calls[0].Transport(), s.Options().Timeout) }}
	if s.Options().Device != session.GPU && !p.plan.Converts() {
		vx, err := newVectorExchange(calls[0].Transport(), s.Memory(), p.plan, s.Rank(), p.srcBuf, p.dstBuf)
		if err := s.Agree(context.Background(), nil, err); err != nil {
			return nil, err
		}
		defer func() { _ = vx.Free() }()
		if err := p.checkVector(vx); err != nil {
			return nil, err
		}
		fns = append(fns, func() error { return vx.Run(s.Options().Timeout) })
		// the floor of a step that agrees before and after its bytes, as
		// every step of a call does: the exchange between two of the
		// session's agreements
		agree := func() error { return s.Agree(context.Background(), nil, nil) }
		fns = append(fns, func() error {
			if err := agree(); err != nil {
				return err
			}
			if err := vx.Run(s.Options().Timeout); err != nil {
				return err
			}
			return agree()
		})
	}
	for _, c := range calls {
		fns = append(fns, func() error { _, err := c.Run(context.Background(), p.buffers()); return err })
	}
	times := make([]timings, len(fns))
	for it := 0; it < iters+1; it++ {
		for i, fn := range fns {
			t, err := timeAll(s, fn)
			if err != nil {
				return nil, err
			}
			if it > 0 { // the first round warms up
				times[i].Add(t)
			}
		}
	}
	gbps := func(sec float64) float64 {
		if sec <= 0 {
			return 0
		}
		return float64(p.plan.Src().Bytes()) / sec / 1e9
	}
	pm := times[0].Median()
	var out []RouteReport
	for i, name := range names {
		rm := times[len(fns)-len(calls)+i].Median()
		pr := PlainReport{Baseline: "plain exchange over the same transport, one contiguous message per pair", MedianSec: pm,
			TensorGBps: gbps(pm), ReshardRoute: name, ReshardSec: rm, Ratio: pm / rm}
		if len(fns) > len(calls)+1 {
			vm, am := times[1].Median(), times[2].Median()
			pr.VectorSec, pr.VectorGBps, pr.VectorRatio = vm, gbps(vm), vm/rm
			pr.VectorAgreedSec, pr.VectorAgreedRatio = am, am/rm
		}
		out = append(out, RouteReport{Route: "plain", Iters: iters, MedianSec: pm, TensorGBps: pr.TensorGBps, Check: "not checked", Extra: pr})
	}
	for i := range times {
		p.cfg.Log.Debug().Int("fn", i).Floats64("samples", times[i].First()).Msg("bench samples")
	}
	return out, nil
}

// timeAll runs fn on every rank of s after a barrier and returns the
// slowest rank's time.
func timeAll(s *session.Session, fn func() error) (float64, error) {
	if err := s.Barrier(context.Background()); err != nil {
		return 0, err
	}
	t0 := time.Now()
	if err := fn(); err != nil {
		return 0, err
	}
	sec, _, err := maxOver(s, time.Since(t0).Seconds())
	return sec, err
}

// RunStages runs run for every pipeline stage of st this rank is in, on
// the stage's session, all at once, and gathers every stage's report
// (from the stage's rank 0, marked with the stage and its world ranks) on
// every rank of world, ordered by stage. A stage's error is returned
// wrapped by st.Wrap (naming the stage, its ranks mapped to world ranks),
// after failed (when set) heard of it.
func RunStages(world *session.Session, st *session.Pipeline, run func(s int, ss *session.Session) (*RunReport, error), failed func(*session.Session, error)) ([]*RunReport, error) {
	var mu sync.Mutex
	var mine []*RunReport
	errs := make([]error, len(st.Sessions))
	var wg sync.WaitGroup
	for s, ss := range st.Sessions {
		if ss == nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer recovered()
			rep, err := run(s, ss)
			if errs[s] = err; err != nil {
				return
			}
			stageNo := s
			rep.Stage, rep.Members = &stageNo, st.Layout.Members(s)
			if ss.Rank() == 0 {
				mu.Lock()
				mine = append(mine, rep)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	for s, e := range errs {
		if e != nil {
			if failed != nil {
				failed(st.Sessions[s], e)
			}
			return nil, st.Wrap(s, e)
		}
	}
	return gatherReports(world.Collective(), mine)
}
