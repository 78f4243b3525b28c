package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/m2n-dev/m2n/hier"
	"github.com/m2n-dev/m2n/mesh"
	"github.com/m2n-dev/m2n/model"
	"github.com/m2n-dev/m2n/modelspec"
	"github.com/m2n-dev/m2n/placement"
	"github.com/m2n-dev/m2n/reshard"
	"github.com/m2n-dev/m2n/routespec"
	"github.com/m2n-dev/m2n/sim"
	"github.com/m2n-dev/m2n/stage"
	"github.com/m2n-dev/m2n/units"
	"github.com/spf13/cobra"
)

// simFlags are the flags of `refit sim`: the layout, domain and route flags
// of `refit run`, and the cluster.
type simFlags struct {
	shape, dtype     string
	srcMesh, srcPl   string
	dstMesh, dstPl   string
	srcRanks         string
	dstRanks         string
	world            int
	route            string
	chunk, staging   string
	coalesce         string
	srcDomain        int
	dstDomain        int
	balance          string
	stripe           bool
	cluster          string
	netBW, localBW   string
	latency, localLt string
	copyBW           string
	inPlace          bool
	ppStages         int
	sequential       bool
	perStage         bool
	perTensor        bool
	critical         int
	bins             int
	asJSON           bool
	jsonOut          string
	model            string
	train, gen       string
	scale, layers    int
	mtp              bool
	measured         string
	changed          func(string) bool
}

func newSimCmd() *cobra.Command {
	var f simFlags
	cmd := &cobra.Command{
		Use:   "sim --shape S --src-mesh M --src-placements P --dst-mesh M --dst-placements P [flags]",
		Short: "Simulate each route's schedule on a modelled cluster: time, bound, binding link",
		Long: `sim runs the schedules refit run would run (the same planner and routes)
through a flow-level simulator of a cluster: domains of G GPUs joined by a
local fabric, each GPU with a NIC; flows share each sender's out link and each
receiver's in link max-min fairly, and every rank follows the executor's
rounds (two rounds in flight, a round done when all its flows are, the
per-message latency, packing at the copy bandwidth). It prints, per route,
the simulated time, the data-movement model's bound and the link that bound
the critical path. It leaves out congestion inside the network (the fabric
between NICs is non-blocking), protocol and kernel-launch costs, and
everything outside the reshard (the trainer's gather, the generator's
weight loading).

Sources sit in domains of --src-domain-size ranks and destinations in domains
of --dst-domain-size (both default to the cluster's GPUs per domain), apart
from each other. With --pp-stages N, stage s trains on ranks [s*M, (s+1)*M),
every stage reshards the tensor to the generator on a communicator of its
own, and the stages run concurrently (--sequential-stages: one after another).

Clusters: gb200-nvl72 (72 GPUs per NVLink domain, 900 GB/s each way, 50 GB/s
NICs), hgx-h200 (8 per host, 450 GB/s, 50 GB/s NICs), or
custom:gpus=G,net=BW,local=BW[,net-latency=5us,local-latency=2us,copy=BW,gpus-per-nic=n];
a preset takes overrides the same way (hgx-h200:net=25GB/s), and --net-bw,
--local-bw, --latency, --local-latency and --copy-bw override any of them.

With --measured run.json (the output of refit run --json for the same layout
flags) sim takes the run's domains, chunk and staging, and, when the run
emulated the network (--emulate-net-bw), the cluster the emulation makes:
NICs at the cap, the local fabric at the bandwidth the run measured, the
run's model latency per message, strided regions moved in place (MPI
datatypes); it prints each route's measured time beside the simulated one.

The model form moves a whole model: --model (a built-in model, a config.json
or a tensor list), --train (Megatron's tp, pp, cp, dp, ep, etp) and --gen
(vLLM's tp, dp, ep), laid out as refit layouts lays them out; every pipeline
stage reshards on its own communicator, the stages concurrently. Trainers sit
on world ranks [0, T) in domains of --src-domain-size and the generator after
them in domains of --dst-domain-size. --per-stage and --per-tensor print
each stage's and each tensor's completion.`,
		Example: `  # the paper's single layer: 16 EP ranks to TP8 x DP8 on GB200, zero latency
  refit sim --shape 256x2000x7000 --dtype bf16 --src-mesh 16 --src-placements S0 \
      --dst-mesh 8x8 --dst-placements R,S1 --cluster gb200-nvl72 --latency 0 --local-latency 0 --copy-bw 0
  # the same on HGX H200 hosts, every route and auto, as JSON
  refit sim --shape 256x2000x7000 --dtype bf16 --src-mesh 16 --src-placements S0 \
      --dst-mesh 8x8 --dst-placements R,S1 --cluster hgx-h200 --route all,auto --json
  # DeepSeek-V3 from 128 trainer GPUs (EP16, expert-DP 2, PP4) to 128 generator GPUs (TP8, DP16), 64 per NVL72
  refit sim --model deepseek-v3 --train tp=1,dp=32,pp=4,ep=16 --gen tp=8,dp=16 \
      --cluster gb200-nvl72 --src-domain-size 64 --dst-domain-size 64 --per-stage
  # predict an emulated CPU run and compare
  mpirun -np 10 refit run --shape 2048x4096 --dtype bf16 --src-mesh 2 --src-placements S0 --dst-mesh 4x2 \
      --dst-placements R,S1 --dst-domain-size 8 --emulate-net-bw 50MB/s --route all --json > run.json
  refit sim --shape 2048x4096 --dtype bf16 --src-mesh 2 --src-placements S0 --dst-mesh 4x2 \
      --dst-placements R,S1 --measured run.json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			f.changed = cmd.Flags().Changed
			return runSim(cmd.OutOrStdout(), &f)
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&f.shape, "shape", "", "global tensor shape, e.g. 7168x2048 (scalar for 0 dims)")
	fs.StringVar(&f.dtype, "dtype", "bf16", "element type: bf16 f16 f32 f64 i8 u8 i32 i64 fp8e4m3 fp8e5m2")
	fs.StringVar(&f.srcMesh, "src-mesh", "", "source mesh shape, e.g. 4 or 2x2")
	fs.StringVar(&f.srcPl, "src-placements", "", "source placements, one per mesh axis, e.g. S0 or S0,R")
	fs.StringVar(&f.dstMesh, "dst-mesh", "", "destination mesh shape, e.g. 2x2")
	fs.StringVar(&f.dstPl, "dst-placements", "", "destination placements, e.g. R,S1")
	fs.StringVar(&f.srcRanks, "src-ranks", "", "source ranks in mesh order (default 0..M-1)")
	fs.StringVar(&f.dstRanks, "dst-ranks", "", "destination ranks in mesh order (default M..M+N-1)")
	fs.IntVar(&f.world, "world", 0, "communicator size (default: the highest rank + 1)")
	fs.StringVar(&f.route, "route", "all", "route: flat, agbcast, hier, auto, or all (flat, agbcast and hier); a comma list works too")
	fs.StringVar(&f.chunk, "chunk-bytes", "64MiB", "largest message and pipeline chunk (refit run's GPU default)")
	fs.StringVar(&f.staging, "staging-bytes", "1GiB", "staging memory per rank, at least 8 chunks (refit run's GPU default)")
	fs.StringVar(&f.coalesce, "coalesce-bytes", "1MiB", "a round's messages of one pair up to this size travel as one, packed (refit run's GPU default; 0 turns it off)")
	fs.IntVar(&f.srcDomain, "src-domain-size", 0, "group source ranks into domains of this size (default: the cluster's GPUs per domain)")
	fs.IntVar(&f.dstDomain, "dst-domain-size", 0, "group destination ranks into domains of this size (default: the cluster's GPUs per domain)")
	fs.StringVar(&f.balance, "balance", "count", "hier leader balance: count (the paper's rule) or bytes")
	fs.BoolVar(&f.stripe, "stripe", false, "spread sends of replicated source regions over all replicas")
	fs.StringVar(&f.cluster, "cluster", "gb200-nvl72", "the cluster: "+strings.Join(sim.PresetNames(), ", ")+", or custom:gpus=G,net=BW,local=BW")
	fs.StringVar(&f.netBW, "net-bw", "", "override the NIC bandwidth, e.g. 50GB/s")
	fs.StringVar(&f.localBW, "local-bw", "", "override the local-fabric bandwidth per GPU, e.g. 900GB/s")
	fs.StringVar(&f.latency, "latency", "", "override the per-message network latency, e.g. 5us or 0")
	fs.StringVar(&f.localLt, "local-latency", "", "override the per-message local latency, e.g. 2us or 0")
	fs.StringVar(&f.copyBW, "copy-bw", "", "override the copy bandwidth of local copies and pack/unpack (0: free)")
	fs.BoolVar(&f.inPlace, "in-place", false, "the transport moves strided regions in place (MPI datatypes): only multi-part messages are packed")
	fs.IntVar(&f.ppStages, "pp-stages", 0, "pipeline stages: stage s trains on ranks [s*M, (s+1)*M), the generator follows")
	fs.BoolVar(&f.sequential, "sequential-stages", false, "with --pp-stages, run the stages one after another instead of concurrently")
	fs.BoolVar(&f.perStage, "per-stage", false, "print each stage's completion time")
	fs.BoolVar(&f.perTensor, "per-tensor", false, "print each tensor's completion time")
	fs.IntVar(&f.critical, "critical", 0, "print the last N steps of each route's critical path")
	fs.IntVar(&f.bins, "bins", 128, "time bins of the link-utilisation series in --json (0: none)")
	fs.BoolVar(&f.asJSON, "json", false, "print one JSON object")
	fs.StringVar(&f.jsonOut, "json-out", "", "also write the JSON object (as --json prints it, series included) to this file, appending")
	fs.StringVar(&f.model, "model", "", "model form: a built-in model ("+strings.Join(model.Builtins(), ", ")+"), a config.json or a tensor list")
	fs.StringVar(&f.train, "train", "", "model form: the trainer's sizes, e.g. tp=1,dp=32,pp=4,ep=16 (cp, etp, first, last too)")
	fs.StringVar(&f.gen, "gen", "", "model form: the generator's sizes, e.g. tp=8,dp=16 (ep too)")
	fs.IntVar(&f.scale, "scale", 1, "model form: divide widths and expert counts by N")
	fs.IntVar(&f.layers, "layers", 0, "model form: keep only the first L decoder layers (0: all)")
	fs.BoolVar(&f.mtp, "mtp", false, "model form: add DeepSeek's multi-token-prediction layer")
	fs.StringVar(&f.measured, "measured", "", "a refit run --json report of the same layouts: simulate on its domains, chunking and (when it emulated the network) its fabric, and print measured beside simulated")
	return cmd
}

// simReport is what `refit sim --json` prints.
type simReport struct {
	Model         string      `json:"model,omitempty"`
	Source        string      `json:"source"`
	Destination   string      `json:"destination"`
	World         int         `json:"world"`
	Bytes         int64       `json:"bytes"`
	Rho           int         `json:"rho"`
	DstDomains    int         `json:"dst_domains"`
	Stages        int         `json:"stages"`
	Sequential    bool        `json:"sequential_stages,omitempty"`
	Cluster       sim.Cluster `json:"cluster"`
	ChunkBytes    int64       `json:"chunk_bytes"`
	StagingBytes  int64       `json:"staging_bytes"`
	Balance       string      `json:"balance"`
	CoalesceBytes int64       `json:"coalesce_bytes"`
	InPlace       bool        `json:"in_place,omitempty"`
	Domains       []int       `json:"domains"`
	// Measured names the refit run report the simulation was compared
	// with (--measured).
	Measured string       `json:"measured,omitempty"`
	Routes   []simRouteJS `json:"routes"`
}

// simRouteJS is one route of a simReport.
type simRouteJS struct {
	Route        string             `json:"route"`
	Chosen       string             `json:"chosen"`
	Why          string             `json:"why,omitempty"`
	Seconds      float64            `json:"seconds"`
	MeasuredSec  float64            `json:"measured_s,omitempty"`
	SimOverMeas  float64            `json:"sim_over_measured,omitempty"`
	BoundSeconds float64            `json:"bound_s"`
	BoundBinding string             `json:"bound_binding"`
	Predicted    float64            `json:"bound_with_startup_s"`
	Ratio        float64            `json:"sim_over_bound"`
	BindingLink  string             `json:"binding_link"`
	BindingSec   float64            `json:"binding_link_seconds"`
	Shares       []sim.Share        `json:"critical_path_shares"`
	Messages     int                `json:"messages"`
	Rounds       int                `json:"rounds"`
	Classes      []sim.ClassUsage   `json:"link_classes"`
	Busiest      []sim.LinkUsage    `json:"busiest_links"`
	Parts        []sim.PartResult   `json:"stages"`
	Tensors      []sim.TensorResult `json:"tensors,omitempty"`
	Critical     []sim.Step         `json:"critical_path,omitempty"`
	Series       *sim.Series        `json:"series,omitempty"`
	Stats        sim.Stats          `json:"stats"`
}

func (f *simFlags) routes() ([]string, error) {
	out, err := routespec.List(f.route, false)
	if err != nil {
		return nil, flagError("route", f.route, err)
	}
	return out, nil
}

// clusterFromFlags parses --cluster and applies the overrides.
func (f *simFlags) clusterFromFlags() (sim.Cluster, error) {
	c, err := sim.ParseCluster(f.cluster)
	if err != nil {
		return c, flagError("cluster", f.cluster, err)
	}
	for _, o := range []struct {
		flag, value string
		set         func(string) error
	}{
		{"net-bw", f.netBW, func(v string) (err error) { c.NetBW, err = units.ParseRate(v); return }},
		{"local-bw", f.localBW, func(v string) (err error) { c.LocalBW, err = units.ParseRate(v); return }},
		{"latency", f.latency, func(v string) (err error) { c.NetLatency, err = units.ParseSeconds(v); return }},
		{"local-latency", f.localLt, func(v string) (err error) { c.LocalLatency, err = units.ParseSeconds(v); return }},
		{"copy-bw", f.copyBW, func(v string) (err error) {
			if v == "0" || v == "free" {
				c.CopyBW = 0
				return nil
			}
			c.CopyBW, err = units.ParseRate(v)
			return
		}},
	} {
		if o.value == "" {
			continue
		}
		if err := o.set(o.value); err != nil {
			return c, flagError(o.flag, o.value, err)
		}
	}
	if err := c.Validate(); err != nil {
		return c, usageError{err}
	}
	return c, nil
}

// simLayout parses one side's layout from the sim flags.
func simLayout(shape []int64, dt placement.DType, side, meshSpec, plSpec, ranksSpec string, start int) (placement.Layout, error) {
	if meshSpec == "" || plSpec == "" {
		return placement.Layout{}, usageError{fmt.Errorf("--%s-mesh and --%s-placements are required (e.g. --%s-mesh 4x2 --%s-placements S0,R)", side, side, side, side)}
	}
	ms, err := mesh.ParseShape(meshSpec)
	if err != nil {
		return placement.Layout{}, flagError(side+"-mesh", meshSpec, err)
	}
	ps, err := placement.Parse(plSpec)
	if err != nil {
		return placement.Layout{}, flagError(side+"-placements", plSpec, err)
	}
	var m mesh.Mesh
	if ranksSpec == "" {
		if m, err = mesh.Interval(ms, start); err != nil {
			return placement.Layout{}, flagError(side+"-mesh", meshSpec, err)
		}
	} else {
		ranks, err := mesh.ParseRanks(ranksSpec)
		if err != nil {
			return placement.Layout{}, flagError(side+"-ranks", ranksSpec, err)
		}
		if m, err = mesh.New(ms, ranks); err != nil {
			return placement.Layout{}, flagError(side+"-ranks", ranksSpec, err)
		}
	}
	l, err := placement.NewLayout(shape, dt, m, ps)
	if err != nil {
		return placement.Layout{}, flagError(side+"-placements", plSpec, err)
	}
	return l, nil
}

// measuredRun is the part of a `refit run --json` report that --measured
// reads.
type measuredRun struct {
	Stage       *int    `json:"stage"`
	World       int     `json:"world"`
	Source      string  `json:"source"`
	Destination string  `json:"destination"`
	ChunkBytes  int64   `json:"chunk_bytes"`
	Staging     int64   `json:"staging_bytes"`
	Domains     []int   `json:"domains"`
	EmulatedBW  float64 `json:"emulated_net_bw"`
	Fabric      struct {
		NetBW, LocalBW, Latency float64
	} `json:"fabric"`
	Routes []struct {
		Route     string  `json:"route"`
		MedianSec float64 `json:"median_s"`
	} `json:"routes"`
}

// loadMeasured reads a refit run --json report.
func loadMeasured(path string) (*measuredRun, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, flagError("measured", path, err)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	var m measuredRun
	if err := dec.Decode(&m); err != nil {
		return nil, flagError("measured", path, fmt.Errorf("not a refit run --json report: %w", err))
	}
	if dec.More() || m.Stage != nil {
		return nil, flagError("measured", path, fmt.Errorf("a report of pipeline stages (refit run --pp-stages): compare one communicator's run"))
	}
	if m.World < 1 || len(m.Domains) != m.World || len(m.Routes) == 0 {
		return nil, flagError("measured", path, fmt.Errorf("the report has world %d, %d domains and %d routes", m.World, len(m.Domains), len(m.Routes)))
	}
	return &m, nil
}

// simModelStages builds the model form's stages: the model package lays
// the model out from the trainer to the generator, one stage per pipeline
// stage, trainers on world ranks [0, T) and the generator after them, each
// side in domains of its domain size.
func simModelStages(f *simFlags, c sim.Cluster) ([]sim.Stage, int, reshard.Topology, *model.Layouts, error) {
	var topo reshard.Topology
	if f.train == "" || f.gen == "" || f.model == "" {
		return nil, 0, topo, nil, usageError{fmt.Errorf("the model form needs --model, --train and --gen (e.g. --model deepseek-v3 --train tp=1,dp=32,pp=4,ep=16 --gen tp=8,dp=16)")}
	}
	l, err := modelLayouts(modelspec.Spec{Model: f.model, Train: f.train, Gen: f.gen, Scale: int64(f.scale), Layers: f.layers, MTP: f.mtp})
	if err != nil {
		return nil, 0, topo, nil, err
	}
	tr, g := l.Trainer, l.Generator
	srcSize, dstSize, err := f.domainSizes(c)
	if err != nil {
		return nil, 0, topo, nil, err
	}
	world := tr.Ranks() + g.Ranks()
	if topo, err = sim.SideDomains(tr.Ranks(), g.Ranks(), srcSize, dstSize); err != nil {
		return nil, 0, topo, nil, usageError{err}
	}
	stages, err := sim.ModelStages(l, topo, reshard.Options{StripeReplicas: f.stripe})
	if err != nil {
		return nil, 0, topo, nil, usageError{err}
	}
	return stages, world, topo, l, nil
}

// domainSizes returns the source and destination domain sizes: the flags,
// or the cluster's GPUs per domain.
func (f *simFlags) domainSizes(c sim.Cluster) (int, int, error) {
	srcSize, dstSize := f.srcDomain, f.dstDomain
	for _, x := range []struct {
		flag string
		v    *int
	}{{"src-domain-size", &srcSize}, {"dst-domain-size", &dstSize}} {
		switch {
		case *x.v < 0:
			return 0, 0, flagError(x.flag, fmt.Sprint(*x.v), fmt.Errorf("want a positive number of ranks"))
		case *x.v == 0:
			*x.v = c.DomainGPUs
		case *x.v > c.DomainGPUs:
			return 0, 0, flagError(x.flag, fmt.Sprint(*x.v), fmt.Errorf("a %s domain has %d GPUs", c.Name, c.DomainGPUs))
		}
	}
	return srcSize, dstSize, nil
}

// simStages builds the stages of a single-tensor simulation and the world
// topology.
func simStages(f *simFlags, c sim.Cluster) ([]sim.Stage, int, reshard.Topology, placement.Layout, placement.Layout, error) {
	var src, dst placement.Layout
	if f.shape == "" {
		return nil, 0, reshard.Topology{}, src, dst, usageError{fmt.Errorf("--shape is required (e.g. --shape 7168x2048), or --model")}
	}
	shape, err := placement.ParseShape(f.shape)
	if err != nil {
		return nil, 0, reshard.Topology{}, src, dst, flagError("shape", f.shape, err)
	}
	dt, err := placement.ParseDType(f.dtype)
	if err != nil {
		return nil, 0, reshard.Topology{}, src, dst, flagError("dtype", f.dtype, err)
	}
	srcSize, dstSize, err := f.domainSizes(c)
	if err != nil {
		return nil, 0, reshard.Topology{}, src, dst, err
	}
	popts := reshard.Options{StripeReplicas: f.stripe}
	if f.ppStages > 0 {
		if f.srcRanks != "" || f.dstRanks != "" {
			return nil, 0, reshard.Topology{}, src, dst, usageError{fmt.Errorf("--pp-stages places the trainers and the generator itself; drop --src-ranks and --dst-ranks")}
		}
		// stage-local layouts: sources [0, M), destinations [M, M+N).
		if src, err = simLayout(shape, dt, "src", f.srcMesh, f.srcPl, "", 0); err != nil {
			return nil, 0, reshard.Topology{}, src, dst, err
		}
		if dst, err = simLayout(shape, dt, "dst", f.dstMesh, f.dstPl, "", src.Mesh().Size()); err != nil {
			return nil, 0, reshard.Topology{}, src, dst, err
		}
		m, g := src.Mesh().Size(), dst.Mesh().Size()
		l := stage.Contiguous(f.ppStages, m, g)
		world := f.ppStages*m + g
		dom := make([]int, world)
		for r := 0; r < f.ppStages*m; r++ {
			dom[r] = r / srcSize
		}
		off := (f.ppStages*m + srcSize - 1) / srcSize
		for i := 0; i < g; i++ {
			dom[f.ppStages*m+i] = off + i/dstSize
		}
		topo := reshard.Topology{Domain: dom}
		var stages []sim.Stage
		for s := 0; s < f.ppStages; s++ {
			members := l.Members(s)
			plan, err := reshard.NewPlan(src, dst, len(members), popts)
			if err != nil {
				return nil, 0, topo, src, dst, usageError{err}
			}
			stages = append(stages, sim.Stage{Name: fmt.Sprintf("stage %d", s), Plans: []*reshard.Plan{plan}, Members: members,
				Topo: sim.StageTopology(topo, members)})
		}
		return stages, world, topo, src, dst, nil
	}
	if src, err = simLayout(shape, dt, "src", f.srcMesh, f.srcPl, f.srcRanks, 0); err != nil {
		return nil, 0, reshard.Topology{}, src, dst, err
	}
	if dst, err = simLayout(shape, dt, "dst", f.dstMesh, f.dstPl, f.dstRanks, src.Mesh().Size()); err != nil {
		return nil, 0, reshard.Topology{}, src, dst, err
	}
	world := maxRank(src.Mesh(), dst.Mesh()) + 1
	if f.world != 0 {
		if f.world < world {
			return nil, 0, reshard.Topology{}, src, dst, flagError("world", fmt.Sprint(f.world), fmt.Errorf("the meshes reach rank %d", world-1))
		}
		world = f.world
	}
	plan, err := reshard.NewPlan(src, dst, world, popts)
	if err != nil {
		return nil, 0, reshard.Topology{}, src, dst, usageError{err}
	}
	host := make([]int, world)
	for r := range host {
		host[r] = r
	}
	topo, err := hier.Domains(host, src, dst, hier.DomainSizes{Src: srcSize, Dst: dstSize})
	if err != nil {
		return nil, 0, topo, src, dst, usageError{err}
	}
	return []sim.Stage{{Plans: []*reshard.Plan{plan}, Topo: topo}}, world, topo, src, dst, nil
}

func runSim(out io.Writer, f *simFlags) error {
	routes, err := f.routes()
	if err != nil {
		return err
	}
	c, err := f.clusterFromFlags()
	if err != nil {
		return err
	}
	var opts reshard.ScheduleOptions
	if opts.ChunkBytes, err = units.ParseBytes(f.chunk); err != nil {
		return flagError("chunk-bytes", f.chunk, err)
	}
	if opts.StagingBytes, err = units.ParseBytes(f.staging); err != nil {
		return flagError("staging-bytes", f.staging, err)
	}
	if err := opts.Validate(); err != nil {
		return usageError{err}
	}
	balance, err := hier.ParseBalance(f.balance)
	if err != nil {
		return flagError("balance", f.balance, err)
	}

	if f.ppStages < 0 {
		return flagError("pp-stages", fmt.Sprint(f.ppStages), fmt.Errorf("want a positive number of stages"))
	}
	if f.critical < 0 || f.bins < 0 {
		return usageError{fmt.Errorf("--critical %d --bins %d: want counts >= 0", f.critical, f.bins)}
	}
	var meas *measuredRun
	if f.measured != "" {
		if meas, err = loadMeasured(f.measured); err != nil {
			return err
		}
		if f.ppStages > 0 || f.model != "" {
			return usageError{fmt.Errorf("--measured compares one communicator's run: drop --pp-stages and --model")}
		}
		opts.ChunkBytes, opts.StagingBytes = meas.ChunkBytes, meas.Staging
		if !f.changed("route") {
			routes = routes[:0]
			for _, r := range meas.Routes {
				routes = append(routes, r.Route)
			}
		}
		if meas.EmulatedBW > 0 && !f.changed("cluster") {
			per := map[int]int{}
			most := 0
			for _, d := range meas.Domains {
				per[d]++
				most = max(most, per[d])
			}
			c = sim.Cluster{Name: "emulated", DomainGPUs: most, NetBW: meas.EmulatedBW, GPUsPerNIC: 1, LocalBW: meas.Fabric.LocalBW,
				NetLatency: meas.Fabric.Latency, LocalLatency: meas.Fabric.Latency}
			if !f.changed("in-place") {
				f.inPlace = true
			}
			if !f.changed("coalesce-bytes") {
				f.coalesce = "64KiB" // refit run's CPU default (the report does not record it)
			}
			if err := c.Validate(); err != nil {
				return flagError("measured", f.measured, err)
			}
		}
	}
	coalesce, err := units.ParseBytes(f.coalesce)
	if err != nil {
		return flagError("coalesce-bytes", f.coalesce, err)
	}
	rep := simReport{Cluster: c, ChunkBytes: opts.ChunkBytes, StagingBytes: opts.StagingBytes, Balance: balance.String(), CoalesceBytes: coalesce,
		InPlace: f.inPlace, Sequential: f.sequential}
	var stages []sim.Stage
	var world int
	var topo reshard.Topology
	if f.model != "" || f.train != "" || f.gen != "" {
		if f.shape != "" {
			return usageError{fmt.Errorf("give either --model (with --train and --gen) or the layout flags (--shape ...), not both")}
		}
		var l *model.Layouts
		if stages, world, topo, l, err = simModelStages(f, c); err != nil {
			return err
		}
		rep.Model = l.Model.Name
		rep.Source, rep.Destination = "trainer "+l.Trainer.String(), "generator "+l.Generator.String()
		rep.Bytes = l.Model.Bytes()
		for _, st := range stages {
			for _, p := range st.Plans {
				rep.Rho = max(rep.Rho, p.Dst().Replication())
			}
		}
		rep.DstDomains = (l.Generator.Ranks() + dstDomainOr(f, c) - 1) / dstDomainOr(f, c)
	} else {
		var src, dst placement.Layout
		if stages, world, topo, src, dst, err = simStages(f, c); err != nil {
			return err
		}
		rep.Source, rep.Destination, rep.Bytes, rep.Rho = src.String(), dst.String(), src.Bytes(), dst.Replication()
		rep.DstDomains = hier.DomainCount(stages[0].Topo, dst)
	}
	if meas != nil {
		if meas.World != world {
			return flagError("measured", f.measured, fmt.Errorf("the run had %d ranks, these layouts need %d (pass --world %d)", meas.World, world, meas.World))
		}
		if meas.Source != rep.Source || meas.Destination != rep.Destination {
			return flagError("measured", f.measured, fmt.Errorf("the run moved %s to %s, the flags say %s to %s", meas.Source, meas.Destination, rep.Source, rep.Destination))
		}
		topo = reshard.Topology{Domain: meas.Domains}
		stages[0].Topo = topo
		rep.DstDomains = hier.DomainCount(topo, stages[0].Plans[0].Dst())
		rep.Measured = f.measured
	}
	rep.World, rep.Stages, rep.Domains = world, len(stages), topo.Domain
	bins := f.bins
	if bins == 0 {
		bins = -1
	}
	setup := sim.Setup{Cluster: c, World: world, Topo: topo, Schedule: opts, Balance: balance, InPlace: f.inPlace,
		CoalesceBytes: coalesce, Sequential: f.sequential, Options: sim.Options{Bins: bins}}
	if _, err := sim.Place(c, topo, world); err != nil {
		return usageError{fmt.Errorf("%w (see --src-domain-size, --dst-domain-size, --cluster)", err)}
	}
	for _, route := range routes {
		rr, err := sim.SimulateRoute(route, stages, setup)
		if err != nil {
			return err
		}
		res := rr.Result
		js := simRouteJS{Route: route, Chosen: rr.Chosen, Why: rr.Why, Seconds: res.Seconds, BoundSeconds: rr.Bound.Seconds,
			BoundBinding: rr.Bound.Binding, Predicted: rr.Bound.Predicted, Ratio: rr.Ratio(), BindingLink: res.Critical.Binding,
			BindingSec: res.Critical.BindingSeconds, Shares: res.Critical.Shares, Messages: rr.Messages, Rounds: rr.Rounds,
			Classes: res.Classes, Busiest: res.Busiest, Parts: res.Parts, Stats: res.Stats}
		if f.asJSON || f.jsonOut != "" {
			js.Series = res.Series
		}
		if meas != nil {
			for _, mr := range meas.Routes {
				if mr.Route == route && mr.MedianSec > 0 {
					js.MeasuredSec, js.SimOverMeas = mr.MedianSec, res.Seconds/mr.MedianSec
				}
			}
		}
		if f.perTensor {
			js.Tensors = res.Tensors
		}
		if f.critical > 0 {
			steps := res.Critical.Steps
			js.Critical = steps[max(0, len(steps)-f.critical):]
		}
		rep.Routes = append(rep.Routes, js)
	}
	if f.jsonOut != "" {
		fh, err := os.OpenFile(f.jsonOut, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return flagError("json-out", f.jsonOut, err)
		}
		err = json.NewEncoder(fh).Encode(rep)
		if cerr := fh.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return flagError("json-out", f.jsonOut, err)
		}
	}
	if f.asJSON {
		return json.NewEncoder(out).Encode(rep)
	}
	return writeSim(out, &rep, f)
}

func writeSim(w io.Writer, rep *simReport, f *simFlags) error {
	fmt.Fprintf(w, "source:      %s\ndestination: %s\n", rep.Source, rep.Destination)
	stages := ""
	if rep.Stages > 1 {
		how := "concurrent"
		if rep.Sequential {
			how = "one after another"
		}
		stages = fmt.Sprintf(", %d pipeline stages (%s)", rep.Stages, how)
	}
	what := fmt.Sprintf("%s (%s)", units.FormatBytes(rep.Bytes), decimalBytes(rep.Bytes))
	if rep.Model != "" {
		what = fmt.Sprintf("model %s, %s (%s)", rep.Model, units.FormatBytes(rep.Bytes), decimalBytes(rep.Bytes))
	} else if rep.Stages > 1 {
		what += " per stage"
	}
	fmt.Fprintf(w, "world %d, %s, chunk %s, staging %s, coalescing up to %s%s\n", rep.World, what, units.FormatBytes(rep.ChunkBytes),
		units.FormatBytes(rep.StagingBytes), units.FormatBytes(rep.CoalesceBytes), stages)
	fmt.Fprintf(w, "cluster %s\n", rep.Cluster)
	if note, ok := sim.PresetNotes[rep.Cluster.Name]; ok {
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
		if f.perStage && len(r.Parts) > 1 {
			for _, p := range r.Parts {
				fmt.Fprintf(w, "  %s: %s (%d messages)\n", p.Name, units.FormatSeconds(p.Seconds), p.Messages)
			}
		}
		if f.perTensor {
			for _, t := range r.Tensors {
				fmt.Fprintf(w, "  tensor %s: done at %s\n", t.Name, units.FormatSeconds(t.Seconds))
			}
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

func formatStep(s sim.Step) string {
	switch s.Kind {
	case "transfer":
		return fmt.Sprintf("%10s -> %10s  transfer  message %d of %s, round %d: rank %d -> %d, %s, bound by %s", units.FormatSeconds(s.From),
			units.FormatSeconds(s.To), s.Message, s.Part, s.Round, s.Src, s.Dst, units.FormatBytes(s.Bytes), s.Link)
	case "latency":
		return fmt.Sprintf("%10s -> %10s  latency   message %d: rank %d -> %d", units.FormatSeconds(s.From), units.FormatSeconds(s.To), s.Message, s.Src, s.Dst)
	case "post":
		return fmt.Sprintf("%10s               post      rank %d posts round %d of %s", units.FormatSeconds(s.From), s.Rank, s.Round, s.Part)
	case "compute":
		return fmt.Sprintf("%10s -> %10s  compute   rank %d copies, packs or unpacks", units.FormatSeconds(s.From), units.FormatSeconds(s.To), s.Rank)
	}
	return fmt.Sprintf("%10s               %s  rank %d (%s)", units.FormatSeconds(s.From), s.Kind, s.Rank, s.Part)
}

// dstDomainOr returns --dst-domain-size, or the cluster's domain size.
func dstDomainOr(f *simFlags, c sim.Cluster) int {
	if f.dstDomain > 0 {
		return f.dstDomain
	}
	return c.DomainGPUs
}

// decimalBytes renders a byte count with a decimal unit: "7.168 GB".
func decimalBytes(n int64) string { return units.FormatDecimalBytes(float64(n), 4) }
