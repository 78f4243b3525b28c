package sim

import (
	"fmt"
	"math"

	"github.com/m2n-dev/m2n/bounds"
	"github.com/m2n-dev/m2n/hier"
	"github.com/m2n-dev/m2n/reshard"
	"github.com/m2n-dev/m2n/routespec"
)

// Stage is one communicator's share of a reshard: the plans of its
// tensors, over that communicator's ranks. A single reshard is one stage
// whose communicator is the world; with pipeline parallelism each stage's
// communicator holds its trainers and every generator (stage.Layout).
type Stage struct {
	// Name names the stage in reports ("stage 0"); empty uses the route.
	Name string
	// Plans are the tensors, all over the same communicator; Names name
	// them (optional).
	Plans []*reshard.Plan
	Names []string
	// Members[i] is the world rank of the communicator's rank i; nil when
	// the communicator is the world.
	Members []int
	// Topo is the communicator's topology (stageTopology of the world's).
	Topo reshard.Topology
}

// Setup is everything a route's simulation needs besides the stages.
type Setup struct {
	Cluster Cluster
	// World is the number of ranks (GPUs) and Topo their domains: the
	// placement the simulation runs on.
	World int
	Topo  reshard.Topology
	// Schedule holds the chunk and staging options, Balance hier's leader
	// balance.
	Schedule reshard.ScheduleOptions
	Balance  hier.Balance
	// InPlace moves strided regions without packing (MPI datatypes);
	// CoalesceBytes makes a round's messages of at most this many bytes
	// between one pair travel as one (program.CompileOptions).
	InPlace       bool
	CoalesceBytes int64
	// Sequential runs the stages one after another on the ranks they
	// share, instead of concurrently.
	Sequential bool
	Options    runOptions
	// beforeRun, if set, is called once the program is built, before the
	// simulation (the scale benchmark times the two apart).
	beforeRun func()
}

// Fabric is the data-movement model's view of the cluster (per-rank
// bandwidths: a NIC shared by g GPUs gives each NetBW/g).
func (c Cluster) Fabric() bounds.Fabric {
	return bounds.Fabric{NetBW: c.NetBW / float64(max(c.GPUsPerNIC, 1)), LocalBW: c.LocalBW, Latency: c.NetLatency}
}

// RouteResult is one route's simulation beside the model's bound.
type RouteResult struct {
	// Route is the route asked for; Chosen is what auto picked (else the
	// route itself) and Why auto's reason.
	Route  string `json:"route"`
	Chosen string `json:"chosen"`
	Why    string `json:"why,omitempty"`
	// Bound is the model's bound for the chosen route (hier.Bounds on the
	// stages' problem; stages that run one after another add up).
	Bound    bounds.Bound `json:"bound"`
	Messages int          `json:"messages"`
	Rounds   int          `json:"rounds"`
	Result   *Result      `json:"result"`
}

// schedule builds one stage's schedule for a route ("auto" resolved
// already).
func schedule(route string, st Stage, index int, s Setup) (*reshard.Schedule, error) {
	if route == "auto" {
		return nil, fmt.Errorf("sim: auto must be resolved before scheduling")
	}
	r, err := routespec.Parse(route, routespec.Options{Balance: s.Balance, Fabric: s.Cluster.Fabric()})
	if err != nil {
		return nil, err
	}
	if sr, ok := r.(reshard.StageRoute); ok {
		r = sr.ForStage(index) // as session.Pipeline schedules stage index
	}
	return r.Schedule(st.Plans, st.Topo, s.Schedule)
}

// stageProblem is the model's problem for one stage's tensors
// (bounds.ProblemOf).
func stageProblem(st Stage, chunk float64) bounds.Problem {
	return bounds.ProblemOf(st.Plans, st.Topo, chunk)
}

// Bounds returns every route's bound for the stages: of their combined
// problem when they run concurrently, the sum of each stage's when they
// run one after another.
func Bounds(stages []Stage, s Setup) []bounds.Bound {
	f := s.Cluster.Fabric()
	chunk := float64(s.Schedule.ChunkBytes)
	var probs []bounds.Problem
	for _, st := range stages {
		probs = append(probs, stageProblem(st, chunk))
	}
	if !s.Sequential || len(probs) == 1 {
		return bounds.Of(bounds.Combine(probs...), f)
	}
	var sum []bounds.Bound
	for i, p := range probs {
		bs := bounds.Of(p, f)
		if i == 0 {
			sum = bs
			continue
		}
		for k := range sum {
			big := sum[k].Seconds < bs[k].Seconds
			sum[k].Seconds += bs[k].Seconds
			sum[k].Startup += bs[k].Startup
			sum[k].Predicted += bs[k].Predicted
			if big {
				sum[k].Binding = bs[k].Binding
			}
			for t := range sum[k].Terms {
				sum[k].Terms[t].Seconds += bs[k].Terms[t].Seconds
			}
		}
	}
	return sum
}

// SimulateRoute schedules a route ("flat", "agbcast", "hier", or "auto",
// which picks by the model as bounds.Auto does) for every stage, runs the
// stages together on the cluster and returns the result beside the route's
// bound. Stages are scheduled two at a time (the schedules are large; the
// simulation itself is one thread).
func SimulateRoute(route string, stages []Stage, s Setup) (*RouteResult, error) {
	// a stage without tensors moves nothing
	var kept []Stage
	for _, st := range stages {
		if len(st.Plans) > 0 {
			kept = append(kept, st)
		}
	}
	stages = kept
	if len(stages) == 0 {
		return nil, fmt.Errorf("sim: nothing to simulate (no tensors)")
	}
	rr := &RouteResult{Route: route, Chosen: route}
	routeBounds := Bounds(stages, s)
	if route == "auto" {
		c := bounds.Choose(hierProblemForAuto(stages, s), s.Cluster.Fabric())
		rr.Chosen, rr.Why = c.Route, c.Why
	}
	for _, b := range routeBounds {
		if b.Route == rr.Chosen {
			rr.Bound = b
		}
	}
	// Build the schedules two at a time, in order, and add each to the
	// program as soon as it is ready, so that at most two or three
	// schedules are alive at once.
	type built struct {
		sc  *reshard.Schedule
		err error
	}
	done := make([]chan built, len(stages))
	for i := range done {
		done[i] = make(chan built, 1)
	}
	sem := make(chan struct{}, 2)
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		for i := range stages {
			select {
			case sem <- struct{}{}:
			case <-stop:
				return
			}
			go func(i int) {
				sc, err := schedule(rr.Chosen, stages[i], i, s)
				if err == nil && len(stages[i].Names) > 0 {
					sc.TensorNames = stages[i].Names
				}
				done[i] <- built{sc, err}
			}(i)
		}
	}()
	prog := newSimProgram(s.World)
	prev := -1
	for i := range stages {
		b := <-done[i]
		if b.err != nil {
			return nil, fmt.Errorf("%s: %w", stageName(stages[i], i), b.err)
		}
		after := -1
		if s.Sequential {
			after = prev
		}
		k, err := prog.AddSchedule(b.sc, addOptions{Name: stageName(stages[i], i), Ranks: stages[i].Members, InPlace: s.InPlace,
			CoalesceBytes: s.CoalesceBytes, After: after})
		if err != nil {
			return nil, err
		}
		prev = k
		rr.Messages += len(b.sc.Messages)
		rr.Rounds = max(rr.Rounds, b.sc.Rounds)
		<-sem // the program holds what the run needs; the next schedule may start
	}
	if s.beforeRun != nil {
		s.beforeRun()
	}
	res, err := runProgram(prog, s.Cluster, s.Topo, s.Options)
	if err != nil {
		return nil, err
	}
	rr.Result = res
	return rr, nil
}

func stageName(st Stage, i int) string {
	if st.Name != "" {
		return st.Name
	}
	return fmt.Sprintf("stage %d", i)
}

// hierProblemForAuto is the problem auto decides on: the stages' combined
// problem (bounds.Auto's own rule inside one stage).
func hierProblemForAuto(stages []Stage, s Setup) bounds.Problem {
	var probs []bounds.Problem
	for _, st := range stages {
		probs = append(probs, stageProblem(st, float64(s.Schedule.ChunkBytes)))
	}
	return bounds.Combine(probs...)
}

// Ratio returns simulated over bound seconds (NaN without a bound).
func (r *RouteResult) Ratio() float64 {
	if r.Bound.Seconds <= 0 || r.Result == nil {
		return math.NaN()
	}
	return r.Result.Seconds / r.Bound.Seconds
}
