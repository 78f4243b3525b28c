package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/m2n-dev/m2n/hier"
	"github.com/m2n-dev/m2n/internal/cpuprof"
	"github.com/m2n-dev/m2n/model"
	"github.com/m2n-dev/m2n/modelspec"
	"github.com/m2n-dev/m2n/routespec"
	"github.com/m2n-dev/m2n/sim"
	"github.com/m2n-dev/m2n/units"
	"github.com/spf13/cobra"
)

// simFlags are the flags of `refit sim`: the layout, domain and route flags
// of `refit run`, and the cluster.
type simFlags struct {
	pair             pairFlags
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
	msgRate          string
	topology         string
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
	dstDType         string
	fp8Scale         string
	measured         string
	profile          string
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
custom:gpus=G,net=BW,local=BW[,net-latency=5us,local-latency=2us,copy=BW,gpus-per-nic=n,
msg-rate=50M,msg-burst=1024,topology=rail|fattree,rails=R];
a preset takes overrides the same way (hgx-h200:net=25GB/s,topology=rail), and
--net-bw, --local-bw, --latency, --local-latency, --copy-bw, --msg-rate and
--topology override any of them. The presets are NVL72 (gb200-nvl72) and NVL8
(hgx-h200) domains; --src-domain-size and --dst-domain-size use any size up to
the cluster's (72 on gb200-nvl72, 8 on hgx-h200, gpus=G on others). The
presets limit each NIC to 50 M messages/s each way (burst 1024, an
assumption) on a non-blocking fat tree; each route's "network:" line says
whether the message rate bound and, on topology=rail, how many messages
crossed rails (docs/sim.md).

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
	f.pair.register(fs)
	_ = fs.Set("dtype", "bf16")
	fs.Lookup("dtype").DefValue = "bf16"
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
	fs.StringVar(&f.msgRate, "msg-rate", "", "override the NIC message rate per direction, e.g. 50M (messages/s; 0: no limit)")
	fs.StringVar(&f.topology, "topology", "", "override the network: fattree (non-blocking) or rail (rail-optimised: cross-rail messages relayed through the source host's NIC on the destination's rail)")
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
	fs.StringVar(&f.train, "train", "", "model form: the trainer's sizes, e.g. tp=1,dp=32,pp=4,ep=16 (keys: "+model.TrainerKeys+")")
	fs.StringVar(&f.gen, "gen", "", "model form: the generator's sizes, e.g. tp=8,dp=16 (ep too)")
	fs.IntVar(&f.scale, "scale", 1, "model form: divide widths and expert counts by N")
	fs.IntVar(&f.layers, "layers", 0, "model form: keep only the first L decoder layers (0: all)")
	fs.BoolVar(&f.mtp, "mtp", false, "model form: add DeepSeek's multi-token-prediction layer")
	fs.StringVar(&f.dstDType, "dst-dtype", "", "model form: e4m3 makes the generator FP8 where vLLM's FP8 path quantizes (half the bytes on the wire; the quantize cost on the source)")
	fs.StringVar(&f.fp8Scale, "fp8-scale", "", "model form, with --dst-dtype e4m3: block (128x128, default), row or tensor")
	fs.StringVar(&f.profile, "cpuprofile", "", "write a CPU profile of the planning, scheduling and simulation to this file (go tool pprof reads it)")
	fs.StringVar(&f.measured, "measured", "", "a refit run --json report of the same layouts: simulate on its domains, chunking and (when it emulated the network) its fabric, and print measured beside simulated")
	return cmd
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
	for _, o := range []struct{ flag, key, value string }{
		{"net-bw", "net", f.netBW}, {"local-bw", "local", f.localBW}, {"latency", "net-latency", f.latency},
		{"local-latency", "local-latency", f.localLt}, {"copy-bw", "copy", f.copyBW}, {"msg-rate", "msg-rate", f.msgRate},
		{"topology", "topology", f.topology},
	} {
		if o.value == "" {
			continue
		}
		if err := c.Set(o.key, o.value); err != nil {
			if e := errors.Unwrap(err); e != nil {
				err = e // the flag names the value
			}
			return c, flagError(o.flag, o.value, err)
		}
	}
	if err := c.Validate(); err != nil {
		return c, usageError{err}
	}
	return c, nil
}

func runSim(out io.Writer, f *simFlags) error {
	c, meas, err := f.config()
	if err != nil {
		return err
	}
	stop, err := cpuprof.Start(f.profile)
	if err != nil {
		return flagError("cpuprofile", f.profile, err)
	}
	defer stop()
	rep, err := sim.Simulate(c)
	var ce *sim.ConfigError
	switch {
	case errors.As(err, &ce) && ce.Setting == "measured":
		return flagError("measured", f.measured, ce.Err)
	case errors.As(err, &ce):
		return flagError(ce.Setting, ce.Value, ce.Err)
	case err != nil:
		return usageError{err}
	}
	if meas != nil {
		rep.Measured = f.measured
	}
	if f.jsonOut != "" {
		if err := appendJSON(f.jsonOut, rep); err != nil {
			return flagError("json-out", f.jsonOut, err)
		}
	}
	return printJSONOr(out, f.asJSON, rep, func() error { return rep.WriteText(out, f.perStage) })
}

// appendJSON appends v as one JSON object to the file at path.
func appendJSON(path string, v any) error {
	fh, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	err = json.NewEncoder(fh).Encode(v)
	if cerr := fh.Close(); err == nil {
		err = cerr
	}
	return err
}

// config resolves the flags into a simulation (sim.Config), and the
// measured run it compares with, if any.
func (f *simFlags) config() (sim.Config, *sim.Measured, error) {
	var c sim.Config
	var err error
	if c.Routes, err = f.routes(); err != nil {
		return c, nil, err
	}
	if c.Cluster, err = f.clusterFromFlags(); err != nil {
		return c, nil, err
	}
	for _, x := range []struct {
		flag, v string
		dst     *int64
	}{{"chunk-bytes", f.chunk, &c.Schedule.ChunkBytes}, {"staging-bytes", f.staging, &c.Schedule.StagingBytes}} {
		if *x.dst, err = units.ParseBytes(x.v); err != nil {
			return c, nil, flagError(x.flag, x.v, err)
		}
	}
	if c.Balance, err = hier.ParseBalance(f.balance); err != nil {
		return c, nil, flagError("balance", f.balance, err)
	}
	if c.CoalesceBytes, err = units.ParseBytes(f.coalesce); err != nil {
		return c, nil, flagError("coalesce-bytes", f.coalesce, err)
	}
	c.InPlace, c.Sequential, c.Bins, c.Critical, c.PerTensor = f.inPlace, f.sequential, f.bins, f.critical, f.perTensor
	meas, err := f.measuredRun(&c)
	if err != nil {
		return c, nil, err
	}
	c.Series = f.asJSON || f.jsonOut != ""
	if c.Critical < 0 || c.Bins < 0 {
		return c, nil, usageError{fmt.Errorf("--critical %d --bins %d: want counts >= 0", f.critical, f.bins)}
	}
	c.Problem, err = f.problem()
	return c, meas, err
}

// measuredRun reads --measured and takes the run's chunking, routes and
// (when it emulated the network) cluster where the flags leave them.
func (f *simFlags) measuredRun(c *sim.Config) (*sim.Measured, error) {
	if f.measured == "" {
		return nil, nil
	}
	fh, err := os.Open(f.measured)
	if err != nil {
		return nil, flagError("measured", f.measured, err)
	}
	defer fh.Close()
	m, err := sim.ReadMeasured(fh)
	if err != nil {
		return nil, flagError("measured", f.measured, err)
	}
	if f.ppStages > 0 || f.model != "" {
		return nil, usageError{fmt.Errorf("--measured compares one communicator's run: drop --pp-stages and --model")}
	}
	if err := c.UseMeasured(m, f.changed); err != nil {
		return nil, flagError("measured", f.measured, err)
	}
	return m, nil
}

// problem reads the layout flags, or the model flags.
func (f *simFlags) problem() (sim.Problem, error) {
	p := sim.Problem{SrcDomain: f.srcDomain, DstDomain: f.dstDomain, Stripe: f.stripe, PPStages: f.ppStages, World: f.pair.World}
	if f.model != "" || f.train != "" || f.gen != "" {
		if f.pair.Shape != "" {
			return p, usageError{fmt.Errorf("give either --model (with --train and --gen) or the layout flags (--shape ...), not both")}
		}
		if f.train == "" || f.gen == "" || f.model == "" {
			return p, usageError{fmt.Errorf("the model form needs --model, --train and --gen (e.g. --model deepseek-v3 --train tp=1,dp=32,pp=4,ep=16 --gen tp=8,dp=16)")}
		}
		mode, err := layoutsFP8(f.dstDType, f.fp8Scale)
		if err != nil {
			return p, err
		}
		p.Model, err = modelLayouts(modelspec.Spec{Model: f.model, Train: f.train, Gen: f.gen, Scale: int64(f.scale), Layers: f.layers, MTP: f.mtp, FP8: mode})
		return p, err
	}
	if f.pair.Shape == "" {
		return p, usageError{fmt.Errorf("--shape is required (e.g. --shape 7168x2048), or --model")}
	}
	if f.ppStages > 0 && (f.pair.Src.Ranks != "" || f.pair.Dst.Ranks != "") {
		return p, usageError{fmt.Errorf("--pp-stages places the trainers and the generator itself; drop --src-ranks and --dst-ranks")}
	}
	var err error
	p.Src, p.Dst, _, err = f.pair.layouts()
	return p, err
}
