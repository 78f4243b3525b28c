package sim

import (
	"errors"
	"fmt"
	"slices"

	"github.com/m2n-dev/m2n/hier"
	"github.com/m2n-dev/m2n/model"
	"github.com/m2n-dev/m2n/pipeline"
	"github.com/m2n-dev/m2n/placement"
	"github.com/m2n-dev/m2n/reshard"
)

// Problem is what a simulation moves: one tensor from Src to Dst on a
// communicator of World ranks (0: the meshes' highest rank + 1), or with
// PPStages > 0 from each of PPStages pipeline stages (stage s trains on
// ranks [s*M, (s+1)*M), the generator follows; Src and Dst are then
// stage-local: sources [0, M), destinations [M, M+N)), or a whole model
// (Model, laid out by model.NewQuantized: trainers on ranks [0, T) and the
// generator after them). Sources sit in domains of SrcDomain ranks and
// destinations in domains of DstDomain (0: the cluster's GPUs per domain),
// apart from each other; Stripe stripes sends over source replicas.
type Problem struct {
	Src, Dst             placement.Layout
	World, PPStages      int
	Model                *model.Layouts
	SrcDomain, DstDomain int
	Stripe               bool
}

// Config is a simulation of Routes (names: routespec.List) for a problem
// on a cluster: the schedules' chunk and staging, hier's balance,
// coalescing, strided regions moved in place (MPI datatypes), stages one
// after another instead of concurrently; the report's link-utilisation
// bins (0: none), the last Critical steps of each critical path, each
// tensor's completion (PerTensor) and the series (Series). With Measured
// (a refit run --json report of the same layouts) the simulation takes
// the run's domains and compares with its times.
type Config struct {
	Cluster       Cluster
	Schedule      reshard.ScheduleOptions
	Balance       hier.Balance
	CoalesceBytes int64
	InPlace       bool
	Sequential    bool
	Routes        []string
	Bins          int
	Critical      int
	PerTensor     bool
	Series        bool
	Problem       Problem
	Measured      *Measured
}

// ConfigError is a setting of a Config that cannot be used: Setting names
// it as refit sim's flag does (measured, world, pp-stages,
// src-domain-size, dst-domain-size), Value is its text ("" for measured:
// the report's, which the caller read).
type ConfigError struct {
	Setting, Value string
	Err            error
}

func (e *ConfigError) Error() string { return fmt.Sprintf("%s %q: %v", e.Setting, e.Value, e.Err) }
func (e *ConfigError) Unwrap() error { return e.Err }

// Simulate simulates every route of c and reports each beside its bound (and
// the measured time, with c.Measured). A problem that does not plan, or a
// topology the cluster cannot hold, is an error naming it.
func Simulate(c Config) (*Report, error) {
	if c.Critical < 0 || c.Bins < 0 {
		return nil, fmt.Errorf("critical %d, bins %d: want counts >= 0", c.Critical, c.Bins)
	}
	if err := c.Schedule.Validate(); err != nil {
		return nil, err
	}
	rep := &Report{Cluster: c.Cluster, ChunkBytes: c.Schedule.ChunkBytes, StagingBytes: c.Schedule.StagingBytes, Balance: c.Balance.String(),
		CoalesceBytes: c.CoalesceBytes, InPlace: c.InPlace, Sequential: c.Sequential}
	stages, world, topo, err := c.stages(rep)
	if err != nil {
		return nil, err
	}
	if m := c.Measured; m != nil {
		if m.World != world {
			return nil, &ConfigError{"measured", "", fmt.Errorf("the run had %d ranks, these layouts need %d (pass --world %d)", m.World, world, m.World)}
		}
		if m.Source != rep.Source || m.Destination != rep.Destination {
			return nil, &ConfigError{"measured", "", fmt.Errorf("the run moved %s to %s, the flags say %s to %s", m.Source, m.Destination, rep.Source, rep.Destination)}
		}
		topo = reshard.Topology{Domain: m.Domains}
		stages[0].Topo = topo
		rep.DstDomains = hier.DomainCount(topo, stages[0].Plans[0].Dst())
	}
	rep.World, rep.Stages, rep.Domains = world, len(stages), topo.Domain
	bins := c.Bins
	if bins == 0 {
		bins = -1
	}
	setup := Setup{Cluster: c.Cluster, World: world, Topo: topo, Schedule: c.Schedule, Balance: c.Balance, InPlace: c.InPlace,
		CoalesceBytes: c.CoalesceBytes, Sequential: c.Sequential, Options: runOptions{Bins: bins}}
	if _, err := placeRanks(c.Cluster, topo, world); err != nil {
		return nil, fmt.Errorf("%w (see --src-domain-size, --dst-domain-size, --cluster)", err)
	}
	for _, route := range c.Routes {
		rr, err := SimulateRoute(route, stages, setup)
		if err != nil {
			return nil, err
		}
		rep.Routes = append(rep.Routes, c.routeReport(route, rr))
	}
	return rep, nil
}

// routeReport is one simulated route as the report has it.
func (c Config) routeReport(route string, rr *RouteResult) RouteReport {
	res := rr.Result
	js := RouteReport{Route: route, Chosen: rr.Chosen, Why: rr.Why, Seconds: res.Seconds, BoundSeconds: rr.Bound.Seconds,
		BoundBinding: rr.Bound.Binding, Predicted: rr.Bound.Predicted, Ratio: rr.Ratio(), BindingLink: res.Critical.Binding,
		BindingSec: res.Critical.BindingSeconds, Shares: res.Critical.Shares, Messages: rr.Messages, Rounds: rr.Rounds,
		Classes: res.Classes, Busiest: res.Busiest, Parts: res.Parts, Network: res.Network, Stats: res.Stats}
	if c.Series {
		js.Series = res.Series
	}
	if c.Measured != nil {
		for _, mr := range c.Measured.Routes {
			if mr.Route == route && mr.MedianSec > 0 {
				js.MeasuredSec, js.SimOverMeas = mr.MedianSec, res.Seconds/mr.MedianSec
			}
		}
	}
	if c.PerTensor {
		js.Tensors = res.Tensors
	}
	if c.Critical > 0 {
		steps := res.Critical.Steps
		js.Critical = steps[max(0, len(steps)-c.Critical):]
	}
	return js
}

// domainSizes returns the source and destination domain sizes: the
// problem's, or the cluster's GPUs per domain.
func (c Config) domainSizes() (int, int, error) {
	sizes := [2]int{c.Problem.SrcDomain, c.Problem.DstDomain}
	for i, name := range []string{"src-domain-size", "dst-domain-size"} {
		switch n := sizes[i]; {
		case n < 0:
			return 0, 0, &ConfigError{name, fmt.Sprint(n), errors.New("want a positive number of ranks")}
		case n == 0:
			sizes[i] = c.Cluster.DomainGPUs
		case n > c.Cluster.DomainGPUs:
			return 0, 0, &ConfigError{name, fmt.Sprint(n), fmt.Errorf("a %s domain has %d GPUs", c.Cluster.Name, c.Cluster.DomainGPUs)}
		}
	}
	return sizes[0], sizes[1], nil
}

// stages builds the problem's stages and the world's topology, and fills
// the report's description of the problem.
func (c Config) stages(rep *Report) ([]Stage, int, reshard.Topology, error) {
	p := c.Problem
	srcSize, dstSize, err := c.domainSizes()
	if err != nil {
		return nil, 0, reshard.Topology{}, err
	}
	popts := reshard.Options{StripeReplicas: p.Stripe}
	switch {
	case p.Model != nil:
		return modelProblem(p.Model, srcSize, dstSize, popts, rep)
	case p.PPStages < 0:
		return nil, 0, reshard.Topology{}, &ConfigError{"pp-stages", fmt.Sprint(p.PPStages), errors.New("want a positive number of stages")}
	case p.PPStages > 0:
		return stagedProblem(p, srcSize, dstSize, popts, rep)
	}
	world := slices.Max(append(p.Src.Mesh().Ranks(), p.Dst.Mesh().Ranks()...)) + 1
	if p.World != 0 {
		if p.World < world {
			return nil, 0, reshard.Topology{}, &ConfigError{"world", fmt.Sprint(p.World), fmt.Errorf("the meshes reach rank %d", world-1)}
		}
		world = p.World
	}
	plan, err := reshard.NewPlan(p.Src, p.Dst, world, popts)
	if err != nil {
		return nil, 0, reshard.Topology{}, err
	}
	host := make([]int, world)
	for r := range host {
		host[r] = r
	}
	topo, err := hier.Domains(host, p.Src, p.Dst, hier.DomainSizes{Src: srcSize, Dst: dstSize})
	if err != nil {
		return nil, 0, topo, err
	}
	rep.Source, rep.Destination, rep.Bytes, rep.Rho = p.Src.String(), p.Dst.String(), p.Src.Bytes(), p.Dst.Replication()
	rep.DstDomains = hier.DomainCount(topo, p.Dst)
	return []Stage{{Plans: []*reshard.Plan{plan}, Topo: topo}}, world, topo, nil
}

// stagedProblem is one tensor resharded from each pipeline stage.
func stagedProblem(p Problem, srcSize, dstSize int, popts reshard.Options, rep *Report) ([]Stage, int, reshard.Topology, error) {
	m, g := p.Src.Mesh().Size(), p.Dst.Mesh().Size()
	l := pipeline.Contiguous(p.PPStages, m, g)
	world := p.PPStages*m + g
	dom := make([]int, world)
	for r := 0; r < p.PPStages*m; r++ {
		dom[r] = r / srcSize
	}
	off := (p.PPStages*m + srcSize - 1) / srcSize
	for i := 0; i < g; i++ {
		dom[p.PPStages*m+i] = off + i/dstSize
	}
	topo := reshard.Topology{Domain: dom}
	var stages []Stage
	for s := 0; s < p.PPStages; s++ {
		members := l.Members(s)
		plan, err := reshard.NewPlan(p.Src, p.Dst, len(members), popts)
		if err != nil {
			return nil, 0, topo, err
		}
		stages = append(stages, Stage{Name: fmt.Sprintf("stage %d", s), Plans: []*reshard.Plan{plan}, Members: members,
			Topo: stageTopology(topo, members)})
	}
	rep.Source, rep.Destination, rep.Bytes, rep.Rho = p.Src.String(), p.Dst.String(), p.Src.Bytes(), p.Dst.Replication()
	rep.DstDomains = hier.DomainCount(stages[0].Topo, p.Dst)
	return stages, world, topo, nil
}

// modelProblem is a whole model, one stage per pipeline stage.
func modelProblem(l *model.Layouts, srcSize, dstSize int, popts reshard.Options, rep *Report) ([]Stage, int, reshard.Topology, error) {
	t, g := l.Trainer.Ranks(), l.Generator.Ranks()
	topo, err := SideDomains(t, g, srcSize, dstSize)
	if err != nil {
		return nil, 0, topo, err
	}
	stages, err := ModelStages(l, topo, popts)
	if err != nil {
		return nil, 0, topo, err
	}
	rep.Model = l.Model.Name
	rep.Anchors = AnchorsFor(l.Model.Name, t, g, l.FP8 != 0)
	rep.Source, rep.Destination = "trainer "+l.Trainer.String(), "generator "+l.Generator.String()
	rep.Bytes = l.Model.Bytes()
	for _, st := range stages {
		for _, p := range st.Plans {
			rep.Rho = max(rep.Rho, p.Dst().Replication())
		}
	}
	rep.DstDomains = (g + dstSize - 1) / dstSize
	return stages, t + g, topo, nil
}
