package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/m2n-dev/m2n/hier"
	"github.com/m2n-dev/m2n/mesh"
	"github.com/m2n-dev/m2n/mpi"
	"github.com/m2n-dev/m2n/placement"
	"github.com/m2n-dev/m2n/reshard"
	"github.com/m2n-dev/m2n/reshard/transporttest"
	"github.com/m2n-dev/m2n/stage"
	"github.com/rs/zerolog"
	"github.com/spf13/cobra"
)

// runFlags are the flags of `refit run`, `refit bench` and `refit sweep`.
type runFlags struct {
	pair      pairFlags
	route     string
	iters     int
	warmup    int
	check     bool
	asJSON    bool
	stripe    bool
	chunk     string
	staging   string
	logLevel  string
	balance   string
	srcDomain int
	dstDomain int
	emulate   string
	netBW     string
	localBW   string
	latency   time.Duration
	device    string
	ppStages  int
	verify    bool
	atomic    bool
	timeout   string
}

func (f *runFlags) register(cmd *cobra.Command) {
	f.pair.register(cmd.Flags())
	fs := cmd.Flags()
	fs.StringVar(&f.route, "route", "flat", "route: flat, agbcast, hier, auto, or all (flat, agbcast and hier in turn); a comma list works too")
	fs.IntVar(&f.iters, "iters", 5, "timed iterations per route")
	fs.IntVar(&f.warmup, "warmup", 1, "untimed iterations before the timed ones")
	fs.BoolVar(&f.check, "check", false, "poison destinations before every iteration and check every element after")
	fs.BoolVar(&f.asJSON, "json", false, "print the report as one JSON object on rank 0")
	fs.BoolVar(&f.stripe, "stripe", false, "spread sends of replicated source regions over all replicas")
	fs.StringVar(&f.chunk, "chunk-bytes", "", "largest message and pipeline chunk (default 16MiB, 64MiB with --device cuda, or M2N_CHUNK_BYTES)")
	fs.StringVar(&f.staging, "staging-bytes", "", "staging memory per rank, at least 8 chunks (default 256MiB, 1GiB with --device cuda, or M2N_STAGING_BYTES)")
	fs.StringVar(&f.logLevel, "log-level", "", "log level: debug, info, warn, error (default info, or M2N_LOG_LEVEL)")
	fs.StringVar(&f.balance, "balance", "", "hier leader balance: count (the paper's rule) or bytes (default count, or M2N_BALANCE)")
	fs.IntVar(&f.srcDomain, "src-domain-size", 0, "group source ranks into domains of this size (default: one per host, or M2N_SRC_DOMAIN_SIZE)")
	fs.IntVar(&f.dstDomain, "dst-domain-size", 0, "group destination ranks into domains of this size (default: one per host, or M2N_DST_DOMAIN_SIZE)")
	fs.StringVar(&f.emulate, "emulate-net-bw", "", "cap each rank's cross-domain send and receive rate, e.g. 1GB/s (or M2N_EMULATE_NET_BW)")
	fs.StringVar(&f.netBW, "net-bw", "", "per-rank network bandwidth for the model and auto (default: the emulated rate, else 50GB/s; or M2N_NET_BW)")
	fs.StringVar(&f.localBW, "local-bw", "", "per-rank local-fabric bandwidth for the model and auto (default: measured when emulating, else 900GB/s; or M2N_LOCAL_BW)")
	fs.DurationVar(&f.latency, "latency", 20*time.Microsecond, "per-message latency for auto's startup term")
	fs.StringVar(&f.device, "device", "cpu", "where tensors live: cpu (host memory, MPI) or cuda (one GPU per rank by local rank, NCCL)")
	fs.BoolVar(&f.verify, "verify", false, "checksum (CRC-32C) every message on both sides and compare across ranks; a mismatch fails the call naming the tensor, box and ranks")
	fs.BoolVar(&f.atomic, "atomic", false, "receive into shadow buffers and copy them in only when every tensor arrived (and verified) everywhere: a failed call leaves destinations untouched")
	fs.StringVar(&f.timeout, "timeout", "", "bound on every wait (communicator set-up, each round, each agreement): a rank that times out prints what it waits for and aborts the job (default 5m, or M2N_TIMEOUT)")
	fs.IntVar(&f.ppStages, "pp-stages", 0, "pipeline stages: stage s trains on world ranks [s*M, (s+1)*M) and reshards to the generator (--dst-ranks, world ranks; default after the trainers) on a communicator of its own")
}

// routeNames are the routes in the order --route all runs them.
var routeNames = []string{"flat", "agbcast", "hier"}

func (f *runFlags) routes() ([]string, error) {
	if f.route == "all" {
		return routeNames, nil
	}
	var out []string
	for _, r := range strings.Split(f.route, ",") {
		if r == "all" {
			out = append(out, routeNames...)
			continue
		}
		if !slices.Contains(routeNames, r) && r != "auto" {
			return nil, flagError("route", f.route, fmt.Errorf("unknown route %q: want %s, auto or all", r, strings.Join(routeNames, ", ")))
		}
		out = append(out, r)
	}
	return out, nil
}

// settings are the parsed options every rank must share.
type settings struct {
	fabricGiven bool // --net-bw or --local-bw was given
	timeout     time.Duration
	opts        hier.Options
	sizes       hier.DomainSizes
	emulate     float64 // bytes/s, 0 for none
	fabric      hier.Fabric
	measure     bool // measure the local bandwidth for the fabric
}

// flagOrEnv returns the flag's value, else the environment variable's,
// with the name to blame in errors.
func flagOrEnv(flag, value, env string) (string, string) {
	if value != "" {
		return value, "--" + flag
	}
	return getenv(env), env
}

func (f *runFlags) settings() (settings, error) {
	s := settings{opts: hier.Options{ScheduleOptions: reshard.DefaultScheduleOptions}, timeout: 5 * time.Minute}
	if f.device == "cuda" || f.device == "gpu" {
		// GPUs move a chunk in tens of microseconds: larger chunks keep the
		// per-round host work small against the transfer.
		s.opts.ScheduleOptions = reshard.ScheduleOptions{ChunkBytes: 64 << 20, StagingBytes: 1 << 30}
	}
	if v, name := flagOrEnv("timeout", f.timeout, "M2N_TIMEOUT"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return s, usageError{fmt.Errorf("%s %q: want a positive duration like 30s or 5m", name, v)}
		}
		s.timeout = d
	}
	for _, x := range []struct {
		flag, value, env string
		dst              *int64
	}{{"chunk-bytes", f.chunk, "M2N_CHUNK_BYTES", &s.opts.ChunkBytes}, {"staging-bytes", f.staging, "M2N_STAGING_BYTES", &s.opts.StagingBytes}} {
		v, name := flagOrEnv(x.flag, x.value, x.env)
		if v == "" {
			continue
		}
		n, err := parseBytes(v)
		if err != nil {
			return s, usageError{fmt.Errorf("%s %q: %w", name, v, err)}
		}
		*x.dst = n
	}
	if err := s.opts.Validate(); err != nil {
		return s, usageError{err}
	}
	v, name := flagOrEnv("balance", f.balance, "M2N_BALANCE")
	b, err := hier.ParseBalance(v)
	if err != nil {
		return s, usageError{fmt.Errorf("%s %q: %w", name, v, err)}
	}
	s.opts.Balance = b
	for _, x := range []struct {
		flag  string
		value int
		env   string
		dst   *int
	}{{"src-domain-size", f.srcDomain, "M2N_SRC_DOMAIN_SIZE", &s.sizes.Src}, {"dst-domain-size", f.dstDomain, "M2N_DST_DOMAIN_SIZE", &s.sizes.Dst}} {
		*x.dst = x.value
		if x.value == 0 {
			if e := getenv(x.env); e != "" {
				if _, err := fmt.Sscan(e, x.dst); err != nil || *x.dst < 1 {
					return s, usageError{fmt.Errorf("%s %q: want a positive number of ranks", x.env, e)}
				}
			}
		} else if x.value < 0 {
			return s, flagError(x.flag, fmt.Sprint(x.value), fmt.Errorf("want a positive number of ranks"))
		}
	}
	if v, name := flagOrEnv("emulate-net-bw", f.emulate, "M2N_EMULATE_NET_BW"); v != "" {
		if s.emulate, err = parseRate(v); err != nil {
			return s, usageError{fmt.Errorf("%s: %w", name, err)}
		}
	}
	s.fabric = hier.Fabric{NetBW: 50e9, LocalBW: 900e9, Latency: f.latency.Seconds()}
	if s.emulate > 0 {
		s.fabric.NetBW = s.emulate
		s.measure = true
	}
	if v, name := flagOrEnv("net-bw", f.netBW, "M2N_NET_BW"); v != "" {
		s.fabricGiven = true
		if s.fabric.NetBW, err = parseRate(v); err != nil {
			return s, usageError{fmt.Errorf("%s: %w", name, err)}
		}
	}
	if v, name := flagOrEnv("local-bw", f.localBW, "M2N_LOCAL_BW"); v != "" {
		s.fabricGiven = true
		if s.fabric.LocalBW, err = parseRate(v); err != nil {
			return s, usageError{fmt.Errorf("%s: %w", name, err)}
		}
		s.measure = false
	}
	return s, nil
}

func newRunCmd() *cobra.Command {
	var f runFlags
	cmd := &cobra.Command{
		Use:   "run --shape S --src-mesh M --src-placements P --dst-mesh M --dst-placements P [flags]",
		Short: "Reshard a tensor between ranks for real (launch with mpirun or srun)",
		Long: `run is the SPMD job: launched with W ranks, the source ranks fill their
shards with a pattern of the global element index, the destination ranks
poison theirs, and each route moves the tensor for real over MPI. With
--check every destination element is compared and the job exits non-zero
naming the first wrong rank, index, expected and got values.

It prints, per route, the time per iteration (median over the timed
iterations, after warm-up; each iteration's time is the slowest rank's),
the model's bound for the route and the ratio, the bytes each rank sent and
received by link class (network: between domains; local: inside one), and
the achieved bandwidth. Ranks outside both meshes idle. Source ranks default
to 0..M-1 and destination ranks to M..M+N-1.

Routes:
  flat     each destination receives every byte it needs from its source owner
  agbcast  legacy baseline: all-gather on the sources, chain broadcast to all
           destinations, each keeps its slice
  hier     NCCL M2N's route: one network copy per destination domain to a
           leader, a ring between domains, local fan-out, chunked pipeline
  auto     the route the data-movement model predicts fastest, and why

Domains are hosts (MPI's shared-memory split) unless --src-domain-size or
--dst-domain-size group the ranks otherwise; with --emulate-net-bw the
traffic between domains is capped per rank, so that the routes' schedules
show on one machine.`,
		Example: `  mpirun -np 8 refit run --shape 4096x4096 --dtype bf16 --src-mesh 4 --src-placements S0 \
      --dst-mesh 2x2 --dst-placements R,S1 --route all --check
  mpirun -np 20 refit run --shape 2048x4096 --dtype bf16 --src-mesh 4 --src-placements S0 \
      --dst-mesh 8x2 --dst-placements R,S1 --dst-domain-size 8 --emulate-net-bw 50MB/s --route all
  srun --mpi=pmix -n 16 refit run --shape 256x2048x7168 --dtype bf16 --src-mesh 8 \
      --src-placements S0 --dst-mesh 2x4 --dst-placements R,S1 --route auto --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runJob(cmd.OutOrStdout(), &f, nil)
		},
	}
	f.register(cmd)
	return cmd
}

// job is one rank's state in a run.
type job struct {
	flags *runFlags
	log   zerolog.Logger
	comm  *mpi.Comm // the world
	rank  int
	world int
	be    backend
	set   settings
}

// routeReport is what one route did, as rank 0 prints it.
type routeReport struct {
	Route      string        `json:"route"`
	Why        string        `json:"why,omitempty"`
	Iters      int           `json:"iters"`
	MedianSec  float64       `json:"median_s"`
	MinSec     float64       `json:"min_s"`
	MaxSec     float64       `json:"max_s"`
	TensorGBps float64       `json:"tensor_gbps"`
	BoundSec   float64       `json:"bound_s,omitempty"`
	Binding    string        `json:"binding,omitempty"`
	Ratio      float64       `json:"time_over_bound,omitempty"`
	Check      string        `json:"check"`
	Rounds     int           `json:"rounds"`
	Ranks      []rankTraffic `json:"ranks,omitempty"`
	Extra      any           `json:"extra,omitempty"`
}

// rankTraffic is one rank's bytes in one iteration.
type rankTraffic struct {
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

type runReport struct {
	Stage       *int          `json:"stage,omitempty"`
	Members     []int         `json:"stage_world_ranks,omitempty"`
	World       int           `json:"world"`
	Source      string        `json:"source"`
	Destination string        `json:"destination"`
	Bytes       int64         `json:"bytes"`
	Fingerprint string        `json:"fingerprint"`
	ChunkBytes  int64         `json:"chunk_bytes"`
	Staging     int64         `json:"staging_bytes"`
	Domains     []int         `json:"domains"`
	EmulatedBW  float64       `json:"emulated_net_bw,omitempty"`
	FabricGiven bool          `json:"fabric_given,omitempty"`
	Fabric      hier.Fabric   `json:"fabric"`
	Routes      []routeReport `json:"routes"`
}

// runJob runs `refit run`; extra, if not nil, runs after the routes on every
// rank and may add to the report (refit bench adds its baseline).
func runJob(out io.Writer, f *runFlags, extra func(c *config, rep *runReport) error) (err error) {
	routes, err := f.routes()
	if err != nil {
		return err
	}
	set, err := f.settings()
	if err != nil {
		return err
	}
	if f.iters < 1 || f.warmup < 0 {
		return usageError{fmt.Errorf("--iters %d --warmup %d: want at least one timed iteration", f.iters, f.warmup)}
	}
	if f.ppStages < 0 {
		return flagError("pp-stages", fmt.Sprint(f.ppStages), fmt.Errorf("want a positive number of stages"))
	}
	if f.ppStages > 0 && f.pair.srcRanks != "" {
		return usageError{fmt.Errorf("--pp-stages places the trainers itself (stage s on world ranks [s*M, (s+1)*M)); drop --src-ranks")}
	}
	j, err := startJob(f, set)
	defer j.end(&err)
	if err != nil {
		return err
	}
	if f.ppStages > 0 {
		return j.runStages(out, f, routes)
	}
	src, dst, world, err := f.pair.layouts()
	if err != nil {
		return err
	}
	if world > j.world || (f.pair.world != 0 && world != j.world) {
		return usageError{fmt.Errorf("the meshes need a communicator of %d ranks; this job has %d (mpirun -np %d)", world, j.world, world)}
	}
	c, err := j.newConfig(j.comm, src, dst, f.stripe, 0)
	if err != nil {
		return err
	}
	defer c.close()
	rep, err := c.runRoutes(routes, f)
	if err != nil {
		return err
	}
	if extra != nil {
		if err := extra(c, rep); err != nil {
			return err
		}
	}
	if j.rank == 0 {
		if err := printReport(out, f.asJSON, rep); err != nil {
			return err
		}
	}
	return checkFailures([]*runReport{rep})
}

func printReport(out io.Writer, asJSON bool, rep *runReport) error {
	if asJSON {
		return json.NewEncoder(out).Encode(rep)
	}
	return writeRunReport(out, rep)
}

// checkFailures turns failed checks into the job's error.
func checkFailures(reps []*runReport) error {
	var failed []string
	for _, rep := range reps {
		for _, rr := range rep.Routes {
			if strings.HasPrefix(rr.Check, "FAILED") {
				name := rr.Route
				if rep.Stage != nil {
					name = fmt.Sprintf("%s of stage %d", rr.Route, *rep.Stage)
				}
				failed = append(failed, name+": "+strings.TrimPrefix(rr.Check, "FAILED: "))
			}
		}
	}
	if len(failed) > 0 {
		return jobError{fmt.Errorf("check failed on route %s", strings.Join(failed, "; route "))}
	}
	return nil
}

// runStages runs one reshard per pipeline stage, each on its stage's
// communicator, and prints every stage's report on world rank 0.
func (j *job) runStages(out io.Writer, f *runFlags, routes []string) error {
	shape, err := placement.ParseShape(f.pair.shape)
	if err != nil {
		return flagError("shape", f.pair.shape, err)
	}
	dt, err := placement.ParseDType(f.pair.dtype)
	if err != nil {
		return flagError("dtype", f.pair.dtype, err)
	}
	if f.pair.srcMesh == "" || f.pair.dstMesh == "" || f.pair.srcPl == "" || f.pair.dstPl == "" {
		return usageError{fmt.Errorf("--src-mesh, --src-placements, --dst-mesh and --dst-placements are required")}
	}
	sm, err := mesh.ParseShape(f.pair.srcMesh)
	if err != nil {
		return flagError("src-mesh", f.pair.srcMesh, err)
	}
	dm, err := mesh.ParseShape(f.pair.dstMesh)
	if err != nil {
		return flagError("dst-mesh", f.pair.dstMesh, err)
	}
	m, g := prodInts(sm), prodInts(dm)
	l := stage.Contiguous(f.ppStages, m, g)
	if f.pair.dstRanks != "" {
		if l.Generators, err = mesh.ParseRanks(f.pair.dstRanks); err != nil {
			return flagError("dst-ranks", f.pair.dstRanks, err)
		}
	}
	if err := l.Validate(j.world); err != nil {
		return usageError{fmt.Errorf("--pp-stages %d with a %d-rank trainer stage and %d generator ranks on %d ranks: %w", f.ppStages, m, g, j.world, err)}
	}
	comms, err := j.comm.SplitStages(l)
	if err != nil {
		return err
	}
	if sb, ok := j.be.(interface{ stages([]*mpi.Comm) error }); ok {
		if err := sb.stages(comms); err != nil {
			return err
		}
	}
	var mine []*runReport
	for s, sc := range comms {
		if sc == nil {
			continue
		}
		src, err := parseLayout(shape, dt, f.pair.srcMesh, f.pair.srcPl, mesh.FormatRanks(l.SrcRanks(s)), 0, "src-mesh", "src-placements", "src-ranks")
		if err != nil {
			return err
		}
		dst, err := parseLayout(shape, dt, f.pair.dstMesh, f.pair.dstPl, mesh.FormatRanks(l.DstRanks(s)), 0, "dst-mesh", "dst-placements", "dst-ranks")
		if err != nil {
			return err
		}
		c, err := j.newConfig(sc, src, dst, f.stripe, uint64(s))
		if err != nil {
			return err
		}
		rep, err := c.runRoutes(routes, f)
		c.close()
		if err != nil {
			return err
		}
		stageNo := s
		rep.Stage = &stageNo
		rep.Members = l.Members(s)
		if sc.Rank() == 0 {
			mine = append(mine, rep)
		}
	}
	all, err := j.gatherReports(mine)
	if err != nil {
		return err
	}
	if j.rank == 0 {
		for _, rep := range all {
			if !f.asJSON {
				fmt.Fprintf(out, "== stage %d of %d: world ranks %s\n", *rep.Stage, f.ppStages, mesh.FormatRanks(rep.Members))
			}
			if err := printReport(out, f.asJSON, rep); err != nil {
				return err
			}
		}
	}
	return checkFailures(all)
}

// gatherReports collects every rank's reports on every rank, ordered by
// stage.
func (j *job) gatherReports(mine []*runReport) ([]*runReport, error) {
	payload, err := json.Marshal(mine)
	if err != nil {
		return nil, err
	}
	lens := make([]int64, j.world)
	if err := j.comm.Allgather(int64Bytes([]int64{int64(len(payload))}), int64Bytes(lens)); err != nil {
		return nil, err
	}
	displs := make([]int64, j.world)
	total := int64(0)
	for r, n := range lens {
		displs[r] = total
		total += n
	}
	buf := make([]byte, total)
	if err := j.comm.Allgatherv(payload, buf, lens, displs); err != nil {
		return nil, err
	}
	var all []*runReport
	for r := range lens {
		var reps []*runReport
		if err := json.Unmarshal(buf[displs[r]:displs[r]+lens[r]], &reps); err != nil {
			return nil, err
		}
		all = append(all, reps...)
	}
	sort.Slice(all, func(a, b int) bool { return *all[a].Stage < *all[b].Stage })
	return all, nil
}

func prodInts(v []int) int {
	n := 1
	for _, x := range v {
		n *= x
	}
	return n
}

// startJob initialises MPI and the backend for the flags. Once MPI is
// initialised it returns a job even with an error: defer its end right
// away.
func startJob(f *runFlags, set settings) (*job, error) {
	if _, err := mpi.Init(mpi.ThreadMultiple); err != nil {
		return nil, err
	}
	comm := mpi.World()
	j := &job{flags: f, comm: comm, rank: comm.Rank(), world: comm.Size(), set: set}
	jobRank = j.rank
	log, err := newLogger(f.logLevel, j.rank)
	if err != nil {
		return j, usageError{err}
	}
	j.log = log
	guard := time.AfterFunc(set.timeout, func() {
		j.log.Error().Msgf("rank %d: job set-up did not finish in %v: a peer is gone or stuck; aborting the job", j.rank, set.timeout)
		mpi.Abort(comm, 4)
	})
	defer guard.Stop()
	if j.be, err = newBackend(f.device, comm, set.timeout); err != nil {
		return j, err
	}
	return j, nil
}

// end releases the job's backend and finishes MPI (see finish); it does
// nothing for a job that never started.
func (j *job) end(err *error) {
	if j == nil {
		return
	}
	if j.be != nil {
		j.be.close()
	}
	finish(err)
}

// domainIDs numbers each rank's domain: by the backend's key (a GPU's NVLink
// domain from NVML) when every rank has one, else by host (hostIDs).
func domainIDs(comm *mpi.Comm, key string) ([]int, error) {
	const width = 256
	b := make([]byte, width)
	copy(b, key)
	all := make([]byte, width*comm.Size())
	if err := comm.Allgather(b, all); err != nil {
		return nil, err
	}
	ids := map[string]int{}
	out := make([]int, comm.Size())
	for r := range out {
		k := strings.TrimRight(string(all[r*width:(r+1)*width]), "\x00")
		if k == "" {
			return hostIDs(comm)
		}
		if _, ok := ids[k]; !ok {
			ids[k] = len(ids)
		}
		out[r] = ids[k]
	}
	return out, nil
}

// hostIDs names each rank's host by the lowest rank of comm on it (MPI's
// shared-memory split).
func hostIDs(comm *mpi.Comm) ([]int, error) {
	local, err := comm.SplitShared(0)
	if err != nil {
		return nil, err
	}
	defer local.Free()
	leader := []int64{int64(comm.Rank())}
	if err := local.Bcast(int64Bytes(leader), 0); err != nil {
		return nil, err
	}
	all := make([]int64, comm.Size())
	if err := comm.Allgather(int64Bytes(leader), int64Bytes(all)); err != nil {
		return nil, err
	}
	host := make([]int, len(all))
	for i, v := range all {
		host[i] = int(v)
	}
	return host, nil
}

// config is one layout pair on one communicator of the job (the world, or
// a pipeline stage's): its plan, topology, transport and buffers.
type config struct {
	name    string // the tensor's name in errors
	stripe  bool
	j       *job
	comm    *mpi.Comm
	rank    int
	world   int
	seed    uint64 // the tensor's pattern
	src     placement.Layout
	dst     placement.Layout
	plan    *reshard.Plan
	topo    reshard.Topology
	tr      reshard.Transport
	done    func()
	mem     reshard.Memory
	io      transporttest.HostIO
	fabric  hier.Fabric
	srcBuf  reshard.Buffer
	dstBuf  reshard.Buffer
	dstHost []byte // host copy of the destination buffer, for poison and checks
}

// newConfig plans a layout pair on comm, checks that every rank derived the
// same plan, and builds the topology, the (emulated) transport and the
// buffers, the source filled with the pattern of tensor seed.
func (j *job) newConfig(comm *mpi.Comm, src, dst placement.Layout, stripe bool, seed uint64) (*config, error) {
	c := &config{j: j, comm: comm, rank: comm.Rank(), world: comm.Size(), seed: seed, src: src, dst: dst, fabric: j.set.fabric,
		name: fmt.Sprintf("tensor%d", seed), stripe: stripe}
	// Validate and agree before anything else: a rank given other flags
	// fails every rank here, at once.
	if err := reshard.Check(comm, []reshard.Tensor{{Name: c.name, Src: src, Dst: dst}}, c.refitOptions(nil, j.flags)); err != nil {
		return nil, c.fail(err)
	}
	done := c.watch("communicator set-up")
	defer done()
	var err error
	if c.plan, err = reshard.NewPlan(src, dst, c.world, reshard.Options{StripeReplicas: stripe}); err != nil {
		return nil, usageError{err}
	}
	host, err := domainIDs(comm, j.be.domainKey())
	if err != nil {
		return nil, err
	}
	if c.topo, err = hier.Domains(host, src, dst, j.set.sizes); err != nil {
		return nil, usageError{err}
	}
	if c.tr, c.done, err = j.be.transport(comm, c.topo); err != nil {
		return nil, err
	}
	if j.set.emulate > 0 {
		c.tr = hier.Emulate(c.tr, c.topo, j.set.emulate)
	}
	if at, ok := faultAt("M2N_FAULT_KILL", c.rank); ok {
		c.tr = &killer{Transport: c.tr, at: at}
	}
	if at, ok := faultAt("M2N_FAULT_HANG", c.rank); ok {
		c.tr = &killer{Transport: c.tr, at: at, hang: true}
	}
	if _, ok := faultAt("M2N_FAULT_WIRE", c.rank); ok {
		c.tr = &wireFault{Transport: c.tr}
	}
	if j.set.measure {
		if c.fabric.LocalBW, err = c.measureLocal(); err != nil {
			return nil, err
		}
	}
	c.mem, c.io = j.be.memory()
	if src.Mesh().Contains(c.rank) {
		host := make([]byte, src.LocalBytes(c.rank))
		reshard.FillPatternSeed(src, c.rank, seed, host)
		if c.srcBuf, err = c.mem.Alloc(int64(len(host))); err != nil {
			return nil, err
		}
		if err := c.io.Upload(c.srcBuf, host); err != nil {
			return nil, err
		}
	}
	if dst.Mesh().Contains(c.rank) {
		c.dstHost = make([]byte, dst.LocalBytes(c.rank))
		n := int64(len(c.dstHost))
		if _, ok := faultAt("M2N_FAULT_SHORT_DST", c.rank); ok && n > 0 {
			n-- // test-only: a destination buffer one byte short, which validation must catch
		}
		if c.dstBuf, err = c.mem.Alloc(n); err != nil {
			return nil, err
		}
	}
	j.log.Debug().Str("fingerprint", fmt.Sprintf("%016x", c.plan.Fingerprint())).Int("transfers", c.plan.Len()).
		Ints("domains", c.topo.Domain).Msg("plan derived")
	return c, nil
}

// close releases the config's buffers and transport.
func (c *config) close() {
	for _, b := range []reshard.Buffer{c.srcBuf, c.dstBuf} {
		if b != nil {
			c.mem.Free(b)
		}
	}
	if c.done != nil {
		c.done()
	}
}

// schedule builds a route's schedule; for auto it also says what it chose.
func (c *config) schedule(route string) (*reshard.Schedule, string, error) {
	plans := []*reshard.Plan{c.plan}
	opts := c.j.set.opts
	switch route {
	case "flat":
		s, err := reshard.Flat(plans, c.topo, opts.ScheduleOptions)
		return s, "", err
	case "agbcast":
		s, err := reshard.AllGatherBroadcast(plans, c.topo, opts.ScheduleOptions)
		return s, "", err
	case "hier":
		s, err := hier.Route(plans, c.topo, opts)
		return s, "", err
	case "auto":
		s, choice, err := hier.Auto(plans, c.topo, opts, c.fabric)
		return s, choice.Why, err
	}
	return nil, "", fmt.Errorf("unknown route %q", route)
}

// runRoutes measures every route and returns rank 0's report.
func (c *config) runRoutes(routes []string, f *runFlags) (*runReport, error) {
	j := c.j
	rep := &runReport{World: c.world, Source: c.src.String(), Destination: c.dst.String(), Bytes: c.src.Bytes(),
		Fingerprint: fmt.Sprintf("%016x", c.plan.Fingerprint()), ChunkBytes: j.set.opts.ChunkBytes,
		Staging: j.set.opts.StagingBytes, Domains: c.topo.Domain, EmulatedBW: j.set.emulate, Fabric: c.fabric,
		FabricGiven: j.set.fabricGiven}
	ex := &reshard.Executor{T: c.tr, Mem: c.mem}
	defer ex.Close()
	bounds := map[string]hier.Bound{}
	for _, b := range hier.Bounds(hier.FromPlan(c.plan, c.topo, float64(j.set.opts.ChunkBytes)), c.fabric) {
		bounds[b.Route] = b
	}
	for _, name := range routes {
		sched, why, err := c.schedule(name)
		if err != nil {
			return nil, err
		}
		if why != "" && c.rank == 0 {
			j.log.Info().Str("route", sched.Route).Msg(why)
		}
		rr, err := c.measure(ex, sched, f)
		if err != nil {
			return nil, err
		}
		rr.Why = why
		if b, ok := bounds[strings.TrimPrefix(sched.Route, "auto:")]; ok && b.Seconds > 0 {
			rr.BoundSec, rr.Binding, rr.Ratio = b.Seconds, b.Binding, rr.MedianSec/b.Seconds
		}
		rep.Routes = append(rep.Routes, rr)
	}
	return rep, nil
}

// measureLocal measures the local-fabric bandwidth per rank: the
// destination ranks of each domain pass a chunk around a ring inside the
// domain, all domains at once, and the slowest rank's rate counts.
func (c *config) measureLocal() (float64, error) {
	const n = 8 << 20
	j, topo, dst := c.j, c.topo, c.dst
	var peers []int
	if dst.Mesh().Contains(c.rank) {
		for i := 0; i < dst.Mesh().Size(); i++ {
			if r := dst.Mesh().RankAt(i); topo.Domain[r] == topo.Domain[c.rank] {
				peers = append(peers, r)
			}
		}
	}
	send, recv := make([]byte, n), make([]byte, n)
	best := 0.0
	for it := 0; it < 3; it++ {
		if err := c.comm.Barrier(); err != nil {
			return 0, err
		}
		t0 := time.Now()
		if len(peers) > 1 {
			me := slices.Index(peers, c.rank)
			next, prev := peers[(me+1)%len(peers)], peers[(me+len(peers)-1)%len(peers)]
			rq, err := c.comm.Irecv(recv, prev, 91)
			if err != nil {
				return 0, err
			}
			sq, err := c.comm.Isend(send, next, 91)
			if err != nil {
				return 0, err
			}
			if err := mpi.Waitall([]*mpi.Request{rq, sq}); err != nil {
				return 0, err
			}
		}
		el := []float64{time.Since(t0).Seconds()}
		slow := []float64{0}
		if err := c.comm.AllreduceFloat64(el, slow, mpi.Max); err != nil {
			return 0, err
		}
		best = max(best, n/slow[0])
	}
	j.log.Debug().Float64("local_bw", best).Msg("measured local bandwidth")
	return best, nil
}

// measure runs one route warmup+iters times and reports it (rank 0's copy
// holds every rank's traffic).
func (c *config) measure(ex *reshard.Executor, sched *reshard.Schedule, f *runFlags) (routeReport, error) {
	j := c.j
	rr := routeReport{Route: sched.Route, Iters: f.iters, Rounds: sched.Rounds}
	bufs := []reshard.TensorBuffers{{Src: c.srcBuf, Dst: c.dstBuf}}
	var times []float64
	var st reshard.Stats
	for it := 0; it < f.warmup+f.iters; it++ {
		if c.dstHost != nil && (f.check || it == 0) {
			for i := range c.dstHost {
				c.dstHost[i] = reshard.PoisonByte
			}
			if err := c.io.Upload(c.dstBuf, c.dstHost); err != nil {
				return rr, err
			}
		}
		if err := c.comm.Barrier(); err != nil {
			return rr, err
		}
		t0 := time.Now()
		rep, err := reshard.Refit(context.Background(), ex, c.comm, []reshard.Tensor{{Name: c.name, Src: c.src, Dst: c.dst, Buffers: bufs[0]}},
			c.refitOptions(sched, f))
		if err != nil {
			err = c.fail(err)
			if f.atomic {
				err = c.checkUntouched(err)
			}
			return rr, err
		}
		s := rep.Stats
		el := time.Since(t0).Seconds()
		slowest := []float64{0}
		if err := c.comm.AllreduceFloat64([]float64{el}, slowest, mpi.Max); err != nil {
			return rr, err
		}
		if it >= f.warmup {
			times = append(times, slowest[0])
		}
		st = s
		j.log.Debug().Str("route", sched.Route).Int("iter", it).Float64("seconds", el).Msg("iteration")
	}
	rr.MedianSec = median(times)
	rr.MinSec, rr.MaxSec = slices.Min(times), slices.Max(times)
	if rr.MedianSec > 0 {
		rr.TensorGBps = float64(c.src.Bytes()) / rr.MedianSec / 1e9
	}
	checkMsg := ""
	if f.check && c.dstHost != nil {
		if err := c.io.Download(c.dstHost, c.dstBuf); err != nil {
			return rr, err
		}
		if b, ok := faultAt("M2N_FAULT_CORRUPT", c.rank); ok && b < len(c.dstHost) {
			c.dstHost[b] ^= 0x40 // test-only: prove that --check catches a wrong byte
		}
		if err := reshard.CheckPatternSeed(c.dst, c.rank, c.seed, c.dstHost); err != nil {
			checkMsg = err.Error()
			j.log.Error().Str("route", sched.Route).Err(err).Msg("check failed")
		}
	}
	mine := []int64{st.Sent[reshard.LinkNetwork], st.Recv[reshard.LinkNetwork], st.Sent[reshard.LinkLocal],
		st.Recv[reshard.LinkLocal], st.Sent[reshard.LinkSelf], st.Packed}
	all := make([]int64, len(mine)*c.world)
	if err := c.comm.Allgather(int64Bytes(mine), int64Bytes(all)); err != nil {
		return rr, err
	}
	for r := 0; r < c.world; r++ {
		v := all[r*len(mine):]
		t := rankTraffic{Rank: r, Role: role(c.src, c.dst, r), Domain: c.topo.Domain[r], SentNetwork: v[0], RecvNetwork: v[1],
			SentLocal: v[2], RecvLocal: v[3], Copied: v[4], Packed: v[5]}
		t.Sent, t.Recv = t.SentNetwork+t.SentLocal, t.RecvNetwork+t.RecvLocal
		rr.Ranks = append(rr.Ranks, t)
	}
	first, err := c.firstError(checkMsg)
	if err != nil {
		return rr, err
	}
	switch {
	case !f.check:
		rr.Check = "not checked"
	case first == "":
		rr.Check = "passed"
	default:
		rr.Check = "FAILED: " + first
	}
	return rr, nil
}

// firstError gathers every rank's message and returns the lowest rank's.
func (c *config) firstError(msg string) (string, error) {
	const width = 480
	b := make([]byte, width)
	copy(b, msg)
	all := make([]byte, width*c.world)
	if err := c.comm.Allgather(b, all); err != nil {
		return "", err
	}
	for r := 0; r < c.world; r++ {
		if s := strings.TrimRight(string(all[r*width:(r+1)*width]), "\x00"); s != "" {
			return s, nil
		}
	}
	return "", nil
}

func role(src, dst placement.Layout, r int) string {
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

func writeRunReport(w io.Writer, rep *runReport) error {
	fmt.Fprintf(w, "source:      %s\ndestination: %s\n", rep.Source, rep.Destination)
	fmt.Fprintf(w, "world %d, %s, fingerprint %s, chunk %s, staging %s\n", rep.World, formatBytes(rep.Bytes),
		rep.Fingerprint, formatBytes(rep.ChunkBytes), formatBytes(rep.Staging))
	if rep.EmulatedBW > 0 {
		fmt.Fprintf(w, "emulated network %s per rank between domains; model fabric: network %s, local %s (measured)\n",
			formatRate(rep.EmulatedBW), formatRate(rep.Fabric.NetBW), formatRate(rep.Fabric.LocalBW))
	} else if rep.FabricGiven {
		fmt.Fprintf(w, "model fabric: network %s, local %s per rank\n", formatRate(rep.Fabric.NetBW), formatRate(rep.Fabric.LocalBW))
	}
	for _, rr := range rep.Routes {
		if pr, ok := rr.Extra.(plainReport); ok {
			fmt.Fprintf(w, "\nbaseline, %s: %s per iteration (median of %d), %.2f GB/s of tensor\n", pr.Baseline,
				formatSeconds(pr.MedianSec), rr.Iters, pr.TensorGBps)
			fmt.Fprintf(w, "reshard (%s) interleaved with it: %s per iteration; the reshard reaches %.0f%% of the plain exchange's bandwidth\n",
				pr.ReshardRoute, formatSeconds(pr.ReshardSec), 100*pr.Ratio)
			continue
		}
		fmt.Fprintf(w, "\nroute %s: %s per iteration (median of %d; min %s, max %s), %.2f GB/s of tensor, %d rounds; check %s\n",
			rr.Route, formatSeconds(rr.MedianSec), rr.Iters, formatSeconds(rr.MinSec), formatSeconds(rr.MaxSec),
			rr.TensorGBps, rr.Rounds, rr.Check)
		if rr.Why != "" {
			fmt.Fprintf(w, "  auto: %s\n", rr.Why)
		}
		if rr.BoundSec > 0 && (rep.EmulatedBW > 0 || rep.FabricGiven) {
			fmt.Fprintf(w, "  model bound %s (%s binds): time is %.2fx the bound\n", formatSeconds(rr.BoundSec), rr.Binding, rr.Ratio)
		}
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "rank\trole\tdomain\tsent\treceived\tnetwork out\tnetwork in\tlocal out\tlocal in\tself copy\tpacked\t")
		for _, t := range rr.Ranks {
			if t.Role == "idle" && t.Sent+t.Recv+t.Copied == 0 {
				continue
			}
			fmt.Fprintf(tw, "%d\t%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", t.Rank, t.Role, t.Domain, formatBytes(t.Sent), formatBytes(t.Recv),
				formatBytes(t.SentNetwork), formatBytes(t.RecvNetwork), formatBytes(t.SentLocal), formatBytes(t.RecvLocal),
				formatBytes(t.Copied), formatBytes(t.Packed))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	return nil
}
