package bounds

import (
	"fmt"
	"math"
	"sort"
	"strings"

	"github.com/m2n-dev/m2n/hier"
	"github.com/m2n-dev/m2n/internal/units"
	"github.com/m2n-dev/m2n/reshard"
)

// Problem is what the bounds need to know about a
// reshard: the unique bytes, the source injection paths, and per destination
// domain what it receives and how many ranks share the work.
type Problem struct {
	// Bytes is B, the unique bytes of the tensor the destinations need.
	Bytes float64
	// Sources is Ns, the independent source injection paths (source ranks
	// that send distinct data at once; shared NICs count once).
	Sources int
	// Rho is the destination replication factor: how many destination
	// ranks hold each element.
	Rho int
	// Domains lists every destination domain.
	Domains []DomainLoad
	// Chunk is the pipeline chunk in bytes (startup and tail terms).
	Chunk float64
	// Parts lists, for calls that Combine joined (a model's pipeline
	// stages, each on its own source ranks), each call's bytes and
	// source paths: a call's bytes leave through its own sources, so the
	// slowest call's injection bounds the whole from below as well. Nil
	// for one call.
	Parts []Part `json:",omitempty"`
}

// Part is one call of a combined problem: its bytes, source paths and
// replication.
type Part struct {
	Bytes   float64
	Sources int
	Rho     int
}

// DomainLoad is one destination domain's share of a reshard.
type DomainLoad struct {
	// Bytes is what the domain's ranks need, counted once (every shard
	// that has a replica in the domain).
	Bytes float64
	// Ranks is K*rho_d, the destination ranks in the domain.
	Ranks int
	// Copies is the bytes replicated inside the domain: for every shard,
	// its size times (replicas in the domain - 1).
	Copies float64
	// RecvFlat is the most bytes any one rank of the domain receives.
	RecvFlat float64
}

// Fabric is the hardware the bounds assume: per-rank bandwidths in bytes
// per second and a per-message latency in seconds. Of and Choose need a
// fabric that passes Validate; Auto checks it.
type Fabric struct {
	NetBW, LocalBW float64
	Latency        float64
}

// Validate checks that the bounds can use f: positive, finite
// bandwidths and a non-negative, finite latency. The error names the field
// and the value; with anything else the bounds would predict infinite,
// negative or NaN times.
func (f Fabric) Validate() error {
	for _, bw := range []struct {
		name string
		v    float64
	}{{"network bandwidth", f.NetBW}, {"local bandwidth", f.LocalBW}} {
		if !(bw.v > 0) || math.IsInf(bw.v, 0) {
			return &reshard.FieldError{Field: bw.name, Got: fmt.Sprintf("%g bytes/s", bw.v), Want: "a positive, finite rate",
				Why: "the bounds divide bytes by it"}
		}
	}
	if !(f.Latency >= 0) || math.IsInf(f.Latency, 0) {
		return &reshard.FieldError{Field: "latency", Got: fmt.Sprintf("%g s", f.Latency), Want: "a non-negative, finite time",
			Why: "a negative latency predicts negative times"}
	}
	return nil
}

// Validate checks that p describes a reshard the bounds can bound:
// finite, non-negative bytes, copies and chunk, and non-negative counts.
func (p Problem) Validate() error {
	finite := func(name string, v float64) error {
		if !(v >= 0) || math.IsInf(v, 0) {
			return &reshard.FieldError{Field: name, Got: fmt.Sprintf("%g", v), Want: "a non-negative, finite number of bytes", Why: "the bounds add and divide it"}
		}
		return nil
	}
	if err := finite("bytes", p.Bytes); err != nil {
		return err
	}
	if err := finite("chunk", p.Chunk); err != nil {
		return err
	}
	if p.Sources < 0 || p.Rho < 0 {
		return &reshard.FieldError{Field: "sources and rho", Got: fmt.Sprintf("%d and %d", p.Sources, p.Rho), Want: "non-negative counts", Why: "they count ranks"}
	}
	for i, q := range p.Parts {
		if err := finite(fmt.Sprintf("part %d bytes", i), q.Bytes); err != nil {
			return err
		}
		if q.Sources < 0 || q.Rho < 0 {
			return &reshard.FieldError{Field: fmt.Sprintf("part %d sources and rho", i), Got: fmt.Sprintf("%d and %d", q.Sources, q.Rho), Want: "non-negative counts", Why: "they count ranks"}
		}
	}
	for i, d := range p.Domains {
		for _, e := range []error{finite(fmt.Sprintf("domain %d bytes", i), d.Bytes), finite(fmt.Sprintf("domain %d copies", i), d.Copies),
			finite(fmt.Sprintf("domain %d receive", i), d.RecvFlat)} {
			if e != nil {
				return e
			}
		}
		if d.Ranks < 0 {
			return &reshard.FieldError{Field: fmt.Sprintf("domain %d ranks", i), Got: fmt.Sprint(d.Ranks), Want: ">= 0", Why: "it counts ranks"}
		}
	}
	return nil
}

// Term is one bandwidth term of a route's bound.
type Term struct {
	Name    string  `json:"name"`
	Seconds float64 `json:"seconds"`
}

// Bound is a route's speed-of-light time: the largest of its terms.
type Bound struct {
	Route   string  `json:"route"`
	Seconds float64 `json:"seconds"`
	Binding string  `json:"binding"` // the name of the term that binds
	Terms   []Term  `json:"terms"`
	// Startup is the latency and pipeline fill/drain the bandwidth terms
	// leave out; Predicted = Seconds + Startup is what route choice uses.
	Startup   float64 `json:"startup_seconds"`
	Predicted float64 `json:"predicted_seconds"`
}

func bound(route string, startup float64, terms ...Term) Bound {
	b := Bound{Route: route, Terms: terms, Startup: startup}
	for _, t := range terms {
		if t.Seconds > b.Seconds || b.Binding == "" {
			b.Seconds, b.Binding = t.Seconds, t.Name
		}
	}
	b.Predicted = b.Seconds + b.Startup
	return b
}

// Of returns the bound of every route, in the order flat, agbcast, hier:
//
//	T_flat    = rho*B / (Ns*BN)             (source injection; also each receiver's bytes / BN)
//	T_agbcast = B / BN                      (root injection)
//	T_hier    = max(B / (Ns*BN),            (source injection; of the slowest part too)
//	                B_d / (K*rho_d*BN),     (each domain's network receive)
//	                (rho_d-1)*B_d / (K*rho_d*BL))  (each domain's local copies)
//
// where a domain holds K shards with rho_d replicas each. With one domain
// holding everything, T_hier = max(B / (min(Ns, K*rho)*BN), (rho-1)*B /
// (K*rho*BL)) as in the paper. The domain count adds only startup and tail.
// A combined problem (Combine) also bounds each source injection term by
// its slowest part's: max over parts s of B_s/(Ns_s*BN) (rho_s times that
// for flat), since each part's bytes leave through its own sources.
//
// The fabric must pass Fabric.Validate and the problem Problem.Validate
// (Auto checks both); otherwise the times are meaningless (infinite,
// negative or NaN), though Of does not panic.
func Of(p Problem, f Fabric) []Bound {
	ns := float64(max(p.Sources, 1))
	rho := float64(max(p.Rho, 1))
	B := p.Bytes
	var flatRecv, hierRecv, hierLocal float64
	for _, d := range p.Domains {
		n := float64(max(d.Ranks, 1))
		flatRecv = max(flatRecv, d.RecvFlat/f.NetBW)
		hierRecv = max(hierRecv, d.Bytes/(n*f.NetBW))
		hierLocal = max(hierLocal, d.Copies/(n*f.LocalBW))
	}
	nd := float64(max(len(p.Domains), 1))
	chunk := min(p.Chunk, B)
	// the slowest part's injection (Parts): B_s/(Ns_s*BN), rho_s times for flat.
	var partHier, partFlat float64
	for _, q := range p.Parts {
		t := q.Bytes / (float64(max(q.Sources, 1)) * f.NetBW)
		partHier = max(partHier, t)
		partFlat = max(partFlat, float64(max(q.Rho, 1))*t)
	}
	flat := bound("flat", f.Latency,
		Term{"source injection rho*B/(Ns*BN)", max(rho*B/(ns*f.NetBW), partFlat)},
		Term{"destination receive", flatRecv})
	// the chain broadcast fills one hop per destination rank.
	dstRanks := 0
	for _, d := range p.Domains {
		dstRanks += d.Ranks
	}
	ag := bound("agbcast", f.Latency*float64(p.Sources+dstRanks)+chunk/f.NetBW*float64(max(dstRanks-1, 0)),
		Term{"root injection B/BN", B / f.NetBW})
	hier := bound("hier", f.Latency*(nd+1)+chunk/f.NetBW*(nd-1)+chunk/f.LocalBW,
		Term{"source injection B/(Ns*BN)", max(B/(ns*f.NetBW), partHier)},
		Term{"domain network receive B/(K*rho*BN)", hierRecv},
		Term{"local replication (rho-1)*B/(K*rho*BL)", hierLocal})
	return []Bound{flat, ag, hier}
}

// Uniform describes the paper's setting: every one of domains destination
// domains holds all dstShards shards of a tensor of bytes B with rho/domains
// replicas each.
func Uniform(bytes float64, sources, dstShards, rho, domains int, chunk float64) (Problem, error) {
	if math.IsInf(bytes, 0) || math.IsInf(chunk, 0) || !(chunk >= 0) {
		return Problem{}, fmt.Errorf("hier: bytes %g, chunk %g: want finite sizes, chunk >= 0", bytes, chunk)
	}
	if !(bytes >= 0) || sources < 1 || dstShards < 1 || rho < 1 || domains < 1 {
		return Problem{}, fmt.Errorf("hier: bytes %g, sources %d, shards %d, rho %d, domains %d: want bytes >= 0 and the rest >= 1",
			bytes, sources, dstShards, rho, domains)
	}
	if rho%domains != 0 {
		return Problem{}, fmt.Errorf("hier: rho %d does not spread evenly over %d domains", rho, domains)
	}
	rd := rho / domains
	p := Problem{Bytes: bytes, Sources: sources, Rho: rho, Chunk: chunk}
	for i := 0; i < domains; i++ {
		p.Domains = append(p.Domains, DomainLoad{Bytes: bytes, Ranks: dstShards * rd,
			Copies: float64(rd-1) * bytes, RecvFlat: bytes / float64(dstShards)})
	}
	return p, nil
}

// FromPlan derives the bounds' problem from a plan and a topology (nil, or
// naming every rank: see reshard.Topology.Validate): B from
// the destination shards, Ns from the ranks that send in the plan (with
// Options.StripeReplicas that is every source replica), and per destination
// domain its bytes, ranks and local copies.
func FromPlan(p *reshard.Plan, topo reshard.Topology, chunk float64) Problem {
	dst := p.Dst()
	prob := Problem{Rho: dst.Replication(), Chunk: chunk}
	// sources that send (distinct ranks; sources sharing a domain with a
	// destination still inject).
	senders := map[int]bool{}
	for i := 0; i < p.Len(); i++ {
		if src, dst, _ := p.Ends(i); src != dst {
			senders[src] = true
		}
	}
	prob.Sources = len(senders)
	// shard sizes and their replicas per domain.
	type shardInfo struct {
		bytes     float64
		perDomain map[int]int
	}
	shards := map[int]*shardInfo{}
	recv := map[int]float64{}
	dm := dst.Mesh()
	for i := 0; i < dm.Size(); i++ {
		r := dm.RankAt(i)
		box, _ := dst.RankBox(r)
		bytes := float64(box.Elems() * dst.ElemSize())
		recv[r] = bytes
		if bytes == 0 {
			continue
		}
		_, _, id := p.Ends(int(p.Recvs(r)[0]))
		s := shards[id]
		if s == nil {
			s = &shardInfo{bytes: bytes, perDomain: map[int]int{}}
			shards[id] = s
			prob.Bytes += bytes
		}
		s.perDomain[domainOf(topo, r)]++
	}
	loads := map[int]*DomainLoad{}
	for i := 0; i < dm.Size(); i++ {
		r := dm.RankAt(i)
		d := domainOf(topo, r)
		if loads[d] == nil {
			loads[d] = &DomainLoad{}
		}
		loads[d].Ranks++
		loads[d].RecvFlat = max(loads[d].RecvFlat, recv[r])
	}
	for _, s := range shards {
		for d, n := range s.perDomain {
			loads[d].Bytes += s.bytes
			loads[d].Copies += s.bytes * float64(n-1)
		}
	}
	keys := make([]int, 0, len(loads))
	for d := range loads {
		keys = append(keys, d)
	}
	sort.Ints(keys)
	for _, d := range keys {
		prob.Domains = append(prob.Domains, *loads[d])
	}
	return prob
}

// domainOf returns rank r's domain; FromPlan needs a topology that names
// every rank of the plan (a nil one, or one domain per rank: see
// reshard.Topology.Validate). A rank it does not name is keyed apart from
// every named domain.
func domainOf(topo reshard.Topology, r int) int {
	if topo.Domain == nil {
		return r
	}
	if r >= len(topo.Domain) {
		return math.MinInt + r
	}
	return topo.Domain[r]
}

// Choice is the route auto picks and why.
type Choice struct {
	Route  string  `json:"route"`
	Why    string  `json:"why"`
	Bounds []Bound `json:"bounds"`
}

// Choose picks the route with the smallest predicted time (bound plus
// startup), preferring the simpler route on a tie: flat, then hier, then
// agbcast. Like Of, it needs a valid fabric and problem (Auto checks).
func Choose(p Problem, f Fabric) Choice { return choose(p, f, nil) }

// choose is Choose among the routes allow accepts (nil: all of them).
func choose(p Problem, f Fabric, allow func(route string) bool) Choice {
	bs := Of(p, f)
	order := map[string]int{"flat": 0, "hier": 1, "agbcast": 2}
	var best Bound
	found := false
	for _, b := range bs {
		if allow != nil && !allow(b.Route) {
			continue
		}
		if !found || b.Predicted < best.Predicted*(1-1e-9) || (math.Abs(b.Predicted-best.Predicted) <= best.Predicted*1e-9 && order[b.Route] < order[best.Route]) {
			best, found = b, true
		}
	}
	var parts []string
	for _, b := range bs {
		parts = append(parts, fmt.Sprintf("%s %s", b.Route, units.Seconds(b.Predicted)))
	}
	why := fmt.Sprintf("%s predicts the least time (%s; %s binds): %s", best.Route, units.Seconds(best.Predicted), best.Binding,
		strings.Join(parts, ", "))
	return Choice{Route: best.Route, Why: why, Bounds: bs}
}

// Auto is the route auto: it derives the bounds' problem
// from the plans (summed over tensors) and the topology, picks the route
// Choose predicts fastest on Fabric, and schedules it. The schedule's Route
// is "auto:" and the chosen route's name; its Note says why. Schedule
// returns Fabric.Validate's error for a fabric the bounds cannot use, and
// the options', topology's and problem's errors before scheduling.
type Auto struct {
	Fabric Fabric
	// Balance is the leader balance hier uses if auto picks it.
	Balance hier.Balance
	// Buckets, when positive, makes auto choose per bucket: the call's
	// tensors, in order, are grouped into buckets of at most this many
	// bytes (a larger tensor is a bucket of its own), the bounds pick each
	// bucket's route, and every bucket's messages fill the rounds of one
	// joint schedule (small tensors share rounds and messages, large ones
	// pipeline). 0 picks one route for the whole call.
	Buckets int64
	// Stage is the pipeline stage the call serves, passed to hier
	// (hier.Hier.Stage; ForStage sets it).
	Stage int
}

// ForStage implements reshard.StageRoute.
func (a Auto) ForStage(s int) reshard.Route {
	a.Stage = s
	return a
}

// Name returns "auto".
func (Auto) Name() string { return "auto" }

// Choose returns the route auto picks for the plans and why. When a plan
// converts to FP8 in flight (reshard.Plan.Converts), agbcast, which cannot
// carry it, is left out.
func (a Auto) Choose(plans []*reshard.Plan, topo reshard.Topology, opts reshard.ScheduleOptions) Choice {
	var allow func(string) bool
	for _, p := range plans {
		if p.Converts() {
			allow = func(r string) bool { return r != "agbcast" }
			break
		}
	}
	c := choose(ProblemOf(plans, topo, float64(opts.ChunkBytes)), a.Fabric, allow)
	if allow != nil {
		c.Why += " (agbcast left out: a tensor converts to FP8 in flight)"
	}
	return c
}

// Schedule implements reshard.Route.
func (a Auto) Schedule(plans []*reshard.Plan, topo reshard.Topology, opts reshard.ScheduleOptions) (*reshard.Schedule, error) {
	if err := a.Fabric.Validate(); err != nil {
		return nil, err
	}
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	if len(plans) == 0 || plans[0] == nil {
		return nil, fmt.Errorf("hier: auto needs at least one planned tensor")
	}
	if err := topo.Validate(plans[0].World()); err != nil {
		return nil, err
	}
	prob := ProblemOf(plans, topo, float64(opts.ChunkBytes))
	if err := prob.Validate(); err != nil {
		return nil, err
	}
	if a.Buckets > 0 && len(plans) > 1 {
		return a.scheduleBuckets(plans, topo, opts)
	}
	c := a.Choose(plans, topo, opts)
	var r reshard.Route = hier.Hier{Balance: a.Balance, Stage: a.Stage}
	switch c.Route {
	case "flat":
		r = reshard.Flat
	case "agbcast":
		r = reshard.AllGatherBroadcast
	}
	s, err := r.Schedule(plans, topo, opts)
	if err != nil {
		return nil, err
	}
	s.Route = "auto:" + c.Route
	s.Note = c.Why
	return s, nil
}

// route returns the bucket route a choice names.
func (a Auto) route(name string) reshard.BucketRoute {
	switch name {
	case "flat":
		return reshard.Flat
	case "agbcast":
		return reshard.AllGatherBroadcast
	}
	return hier.Hier{Balance: a.Balance, Stage: a.Stage}
}

// Bucket is a run of a call's tensors that auto schedules on one route.
type Bucket struct {
	Tensors []int  // indices into the call's tensors, in order
	Bytes   int64  // their bytes
	Choice  Choice // the route the bounds picked, and why
}

// BucketsOf groups the call's tensors, in order, into buckets of at most
// a.Buckets bytes each (a tensor larger than that alone) and picks each
// bucket's route by its bounds.
func (a Auto) BucketsOf(plans []*reshard.Plan, topo reshard.Topology, opts reshard.ScheduleOptions) []Bucket {
	var out []Bucket
	var cur Bucket
	flush := func() {
		if len(cur.Tensors) == 0 {
			return
		}
		ps := make([]*reshard.Plan, len(cur.Tensors))
		for i, t := range cur.Tensors {
			ps[i] = plans[t]
		}
		cur.Choice = a.Choose(ps, topo, opts)
		out = append(out, cur)
		cur = Bucket{}
	}
	for t, p := range plans {
		n := p.Src().Bytes()
		if len(cur.Tensors) > 0 && cur.Bytes+n > a.Buckets {
			flush()
		}
		cur.Tensors = append(cur.Tensors, t)
		cur.Bytes += n
	}
	flush()
	return out
}

// scheduleBuckets builds the joint schedule of a bucketed call.
func (a Auto) scheduleBuckets(plans []*reshard.Plan, topo reshard.Topology, opts reshard.ScheduleOptions) (*reshard.Schedule, error) {
	buckets := a.BucketsOf(plans, topo, opts)
	b, err := reshard.NewBuilder("auto", plans, topo, opts.RoundBytes())
	if err != nil {
		return nil, err
	}
	count := map[string]int{}
	var names []string
	for _, bk := range buckets {
		if err := a.route(bk.Choice.Route).AddTensors(b, plans, bk.Tensors, topo, opts); err != nil {
			return nil, err
		}
		if count[bk.Choice.Route] == 0 {
			names = append(names, bk.Choice.Route)
		}
		count[bk.Choice.Route]++
	}
	s := b.Schedule()
	s.Route = "auto:" + names[0]
	if len(names) > 1 {
		s.Route = "auto:mixed"
	}
	var parts []string
	for _, n := range names {
		parts = append(parts, fmt.Sprintf("%s for %d", n, count[n]))
	}
	s.Note = fmt.Sprintf("%d buckets of at most %d bytes, each on the route the bounds predict fastest for it: %s",
		len(buckets), a.Buckets, strings.Join(parts, ", "))
	return s, nil
}
