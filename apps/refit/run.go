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

	"github.com/m2n-dev/m2n/mpi"
	"github.com/m2n-dev/m2n/placement"
	"github.com/m2n-dev/m2n/reshard"
	"github.com/rs/zerolog"
	"github.com/spf13/cobra"
)

// runFlags are the flags of `refit run` and `refit bench`.
type runFlags struct {
	pair     pairFlags
	route    string
	iters    int
	warmup   int
	check    bool
	asJSON   bool
	stripe   bool
	chunk    string
	staging  string
	logLevel string
}

func (f *runFlags) register(cmd *cobra.Command) {
	f.pair.register(cmd.Flags())
	fs := cmd.Flags()
	fs.StringVar(&f.route, "route", "flat", "route: flat, agbcast, or all (each in turn)")
	fs.IntVar(&f.iters, "iters", 5, "timed iterations per route")
	fs.IntVar(&f.warmup, "warmup", 1, "untimed iterations before the timed ones")
	fs.BoolVar(&f.check, "check", false, "poison destinations before every iteration and check every element after")
	fs.BoolVar(&f.asJSON, "json", false, "print the report as one JSON object on rank 0")
	fs.BoolVar(&f.stripe, "stripe", false, "spread sends of replicated source regions over all replicas")
	fs.StringVar(&f.chunk, "chunk-bytes", "", "largest message (default 16MiB, or M2N_CHUNK_BYTES)")
	fs.StringVar(&f.staging, "staging-bytes", "", "staging memory per rank (default 256MiB, or M2N_STAGING_BYTES)")
	fs.StringVar(&f.logLevel, "log-level", "", "log level: debug, info, warn, error (default info, or M2N_LOG_LEVEL)")
}

// routeBuilders are the routes `refit run` knows, in the order --route all
// runs them.
var routeBuilders = []struct {
	name  string
	build func([]*reshard.Plan, reshard.Topology, reshard.ScheduleOptions) (*reshard.Schedule, error)
}{
	{"flat", reshard.Flat},
	{"agbcast", reshard.AllGatherBroadcast},
}

func (f *runFlags) routes() ([]string, error) {
	var names []string
	for _, r := range routeBuilders {
		names = append(names, r.name)
	}
	if f.route == "all" {
		return names, nil
	}
	var out []string
	for _, r := range strings.Split(f.route, ",") {
		if !slices.Contains(names, r) {
			return nil, flagError("route", f.route, fmt.Errorf("unknown route %q: want %s or all", r, strings.Join(names, ", ")))
		}
		out = append(out, r)
	}
	return out, nil
}

func (f *runFlags) scheduleOptions() (reshard.ScheduleOptions, error) {
	opts := reshard.DefaultScheduleOptions
	for _, x := range []struct {
		flag, env string
		dst       *int64
	}{{"chunk-bytes", "M2N_CHUNK_BYTES", &opts.ChunkBytes}, {"staging-bytes", "M2N_STAGING_BYTES", &opts.StagingBytes}} {
		v := map[string]string{"chunk-bytes": f.chunk, "staging-bytes": f.staging}[x.flag]
		name := "--" + x.flag
		if v == "" {
			v = getenv(x.env)
			name = x.env
		}
		if v == "" {
			continue
		}
		n, err := parseBytes(v)
		if err != nil {
			return opts, usageError{fmt.Errorf("%s %q: %w", name, v, err)}
		}
		*x.dst = n
	}
	if err := opts.Validate(); err != nil {
		return opts, usageError{err}
	}
	return opts, nil
}

func newRunCmd() *cobra.Command {
	var f runFlags
	cmd := &cobra.Command{
		Use:   "run --shape S --src-mesh M --src-placements P --dst-mesh M --dst-placements P [flags]",
		Short: "Reshard a tensor between ranks for real (launch with mpirun or srun)",
		Long: `run is the SPMD job: launched with W ranks, the source ranks fill their
shards with a pattern of the global element index, the destination ranks
poison theirs, and every route moves the tensor for real over MPI. With
--check every destination element is compared and the job exits non-zero
naming the first wrong rank, index, expected and got values.

It prints, per route, the time per iteration (median over the timed
iterations, after warm-up; each iteration's time is the slowest rank's),
the bytes each rank sent and received, and the achieved bandwidth. Ranks
outside both meshes idle. Source ranks default to 0..M-1 and destination
ranks to M..M+N-1.

Routes:
  flat     each destination receives every byte it needs from its source owner
  agbcast  legacy baseline: all-gather on the sources, chain broadcast to all
           destinations, each keeps its slice`,
		Example: `  mpirun -np 8 refit run --shape 4096x4096 --dtype bf16 --src-mesh 4 --src-placements S0 \
      --dst-mesh 2x2 --dst-placements R,S1 --route all --check
  srun --mpi=pmix -n 16 refit run --shape 256x2048x7168 --dtype bf16 --src-mesh 8 \
      --src-placements S0 --dst-mesh 2x4 --dst-placements R,S1 --iters 10 --json`,
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
	log   zerolog.Logger
	comm  *mpi.Comm
	rank  int
	world int
	tr    reshard.Transport
	topo  reshard.Topology
	opts  reshard.ScheduleOptions
}

// routeReport is what one route did, as rank 0 prints it.
type routeReport struct {
	Route      string        `json:"route"`
	Iters      int           `json:"iters"`
	MedianSec  float64       `json:"median_s"`
	MinSec     float64       `json:"min_s"`
	MaxSec     float64       `json:"max_s"`
	TensorGBps float64       `json:"tensor_gbps"`
	Check      string        `json:"check"`
	Rounds     int           `json:"rounds"`
	Ranks      []rankTraffic `json:"ranks"`
	Extra      any           `json:"extra,omitempty"`
}

// rankTraffic is one rank's bytes in one iteration.
type rankTraffic struct {
	Rank        int    `json:"rank"`
	Role        string `json:"role"`
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
	World       int           `json:"world"`
	Source      string        `json:"source"`
	Destination string        `json:"destination"`
	Bytes       int64         `json:"bytes"`
	Fingerprint string        `json:"fingerprint"`
	ChunkBytes  int64         `json:"chunk_bytes"`
	Staging     int64         `json:"staging_bytes"`
	Routes      []routeReport `json:"routes"`
}

// runJob runs `refit run`; extra, if not nil, runs after the routes on every
// rank and may add routes to the report (refit bench adds its baseline).
func runJob(out io.Writer, f *runFlags, extra func(j *job, plan *reshard.Plan, src, dst reshard.Buffer, rep *runReport) error) error {
	routes, err := f.routes()
	if err != nil {
		return err
	}
	opts, err := f.scheduleOptions()
	if err != nil {
		return err
	}
	if f.iters < 1 || f.warmup < 0 {
		return usageError{fmt.Errorf("--iters %d --warmup %d: want at least one timed iteration", f.iters, f.warmup)}
	}
	j, err := startJob(f.logLevel)
	if err != nil {
		return err
	}
	defer mpi.Finalize()
	j.opts = opts
	src, dst, world, err := f.pair.layouts()
	if err != nil {
		return err
	}
	if world > j.world || (f.pair.world != 0 && world != j.world) {
		return usageError{fmt.Errorf("the meshes need a communicator of %d ranks; this job has %d (mpirun -np %d)", world, j.world, world)}
	}
	world = j.world
	plan, err := reshard.NewPlan(src, dst, world, reshard.Options{StripeReplicas: f.stripe})
	if err != nil {
		return usageError{err}
	}
	if err := j.agree(plan.Fingerprint()); err != nil {
		return err
	}
	j.log.Debug().Str("fingerprint", fmt.Sprintf("%016x", plan.Fingerprint())).Int("transfers", plan.Len()).Msg("plan derived")

	var srcHost, dstHost []byte
	var srcBuf, dstBuf reshard.Buffer
	if src.Mesh().Contains(j.rank) {
		srcHost = make([]byte, src.LocalBytes(j.rank))
		reshard.FillPattern(src, j.rank, srcHost)
		srcBuf = reshard.HostBuffer(srcHost)
	}
	if dst.Mesh().Contains(j.rank) {
		dstHost = make([]byte, dst.LocalBytes(j.rank))
		dstBuf = reshard.HostBuffer(dstHost)
	}
	rep := runReport{World: world, Source: src.String(), Destination: dst.String(), Bytes: src.Bytes(),
		Fingerprint: fmt.Sprintf("%016x", plan.Fingerprint()), ChunkBytes: opts.ChunkBytes, Staging: opts.StagingBytes}
	ex := &reshard.Executor{T: j.tr, Mem: reshard.HostMemory{}}
	defer ex.Close()
	var failed []string
	for _, name := range routes {
		var build func([]*reshard.Plan, reshard.Topology, reshard.ScheduleOptions) (*reshard.Schedule, error)
		for _, r := range routeBuilders {
			if r.name == name {
				build = r.build
			}
		}
		sched, err := build([]*reshard.Plan{plan}, j.topo, opts)
		if err != nil {
			return err
		}
		rr, err := j.measure(ex, sched, f, src, dst, srcBuf, dstBuf, dstHost)
		if err != nil {
			return err
		}
		if strings.HasPrefix(rr.Check, "FAILED") {
			failed = append(failed, rr.Route+": "+strings.TrimPrefix(rr.Check, "FAILED: "))
		}
		rep.Routes = append(rep.Routes, rr)
	}
	if extra != nil {
		if err := extra(j, plan, srcBuf, dstBuf, &rep); err != nil {
			return err
		}
	}
	if j.rank == 0 {
		if f.asJSON {
			if err := json.NewEncoder(out).Encode(rep); err != nil {
				return err
			}
		} else if err := writeRunReport(out, &rep); err != nil {
			return err
		}
	}
	if len(failed) > 0 {
		return jobError{fmt.Errorf("check failed on route %s", strings.Join(failed, "; route "))}
	}
	return nil
}

// startJob initialises MPI and the rank's transport and topology.
func startJob(logLevel string) (*job, error) {
	if _, err := mpi.Init(mpi.ThreadMultiple); err != nil {
		return nil, err
	}
	comm := mpi.World()
	j := &job{comm: comm, rank: comm.Rank(), world: comm.Size()}
	jobRank = j.rank
	log, err := newLogger(logLevel, j.rank)
	if err != nil {
		return nil, usageError{err}
	}
	j.log = log
	j.tr = mpi.NewTransport(comm, getenv("M2N_MPI_INPLACE") != "0")
	if j.topo, err = hostTopology(comm); err != nil {
		return nil, err
	}
	return j, nil
}

// hostTopology puts ranks that share memory (one host) in one domain, named
// by the lowest world rank on the host.
func hostTopology(comm *mpi.Comm) (reshard.Topology, error) {
	local, err := comm.SplitShared(0)
	if err != nil {
		return reshard.Topology{}, err
	}
	defer local.Free()
	leader := []int64{int64(comm.Rank())}
	if err := local.Bcast(int64Bytes(leader), 0); err != nil {
		return reshard.Topology{}, err
	}
	all := make([]int64, comm.Size())
	if err := comm.Allgather(int64Bytes(leader), int64Bytes(all)); err != nil {
		return reshard.Topology{}, err
	}
	domain := make([]int, len(all))
	for i, v := range all {
		domain[i] = int(v)
	}
	return reshard.Topology{Domain: domain}, nil
}

// agree checks that every rank derived the same plan.
func (j *job) agree(fp uint64) error {
	all := make([]int64, j.world)
	if err := j.comm.Allgather(int64Bytes([]int64{int64(fp)}), int64Bytes(all)); err != nil {
		return err
	}
	for r, v := range all {
		if uint64(v) != fp {
			return fmt.Errorf("rank %d derived plan %016x, rank %d derived %016x: the ranks were given different layouts or options", j.rank, fp, r, uint64(v))
		}
	}
	return nil
}

// measure runs one route warmup+iters times and reports it (rank 0's copy
// holds every rank's traffic).
func (j *job) measure(ex *reshard.Executor, sched *reshard.Schedule, f *runFlags, src, dst placement.Layout,
	srcBuf, dstBuf reshard.Buffer, dstHost []byte) (routeReport, error) {
	rr := routeReport{Route: sched.Route, Iters: f.iters, Rounds: sched.Rounds}
	bufs := []reshard.TensorBuffers{{Src: srcBuf, Dst: dstBuf}}
	var times []float64
	var st reshard.Stats
	for it := 0; it < f.warmup+f.iters; it++ {
		if dstHost != nil && (f.check || it == 0) {
			for i := range dstHost {
				dstHost[i] = reshard.PoisonByte
			}
		}
		if err := j.comm.Barrier(); err != nil {
			return rr, err
		}
		t0 := time.Now()
		s, err := ex.Run(context.Background(), sched, bufs)
		if err != nil {
			j.tr.Abort(err)
			return rr, err
		}
		el := time.Since(t0).Seconds()
		slowest := []float64{0}
		if err := j.comm.AllreduceFloat64([]float64{el}, slowest, mpi.Max); err != nil {
			return rr, err
		}
		if it >= f.warmup {
			times = append(times, slowest[0])
		}
		st = s
		injectFault(j.rank, dstHost)
		j.log.Debug().Str("route", sched.Route).Int("iter", it).Float64("seconds", el).Msg("iteration")
	}
	sort.Float64s(times)
	rr.MedianSec = times[len(times)/2]
	if len(times)%2 == 0 {
		rr.MedianSec = (times[len(times)/2-1] + times[len(times)/2]) / 2
	}
	rr.MinSec, rr.MaxSec = times[0], times[len(times)-1]
	if rr.MedianSec > 0 {
		rr.TensorGBps = float64(src.Bytes()) / rr.MedianSec / 1e9
	}
	// every rank's traffic, and the first failing check.
	checkMsg := ""
	if f.check && dstHost != nil {
		if err := reshard.CheckPattern(dst, j.rank, dstHost); err != nil {
			checkMsg = err.Error()
			j.log.Error().Str("route", sched.Route).Err(err).Msg("check failed")
		}
	}
	mine := []int64{st.Sent[reshard.LinkNetwork], st.Recv[reshard.LinkNetwork], st.Sent[reshard.LinkLocal],
		st.Recv[reshard.LinkLocal], st.Sent[reshard.LinkSelf], st.Packed}
	all := make([]int64, len(mine)*j.world)
	if err := j.comm.Allgather(int64Bytes(mine), int64Bytes(all)); err != nil {
		return rr, err
	}
	for r := 0; r < j.world; r++ {
		v := all[r*len(mine):]
		t := rankTraffic{Rank: r, Role: role(src, dst, r), SentNetwork: v[0], RecvNetwork: v[1], SentLocal: v[2],
			RecvLocal: v[3], Copied: v[4], Packed: v[5]}
		t.Sent, t.Recv = t.SentNetwork+t.SentLocal, t.RecvNetwork+t.RecvLocal
		rr.Ranks = append(rr.Ranks, t)
	}
	first, err := j.firstError(checkMsg)
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
func (j *job) firstError(msg string) (string, error) {
	const width = 480
	b := make([]byte, width)
	copy(b, msg)
	all := make([]byte, width*j.world)
	if err := j.comm.Allgather(b, all); err != nil {
		return "", err
	}
	for r := 0; r < j.world; r++ {
		if s := strings.TrimRight(string(all[r*width:(r+1)*width]), "\x00"); s != "" {
			return s, nil
		}
	}
	return "", nil
}

// injectFault flips one received byte when M2N_FAULT_CORRUPT=rank:byte names
// this rank: a test-only switch that proves --check catches a wrong byte.
func injectFault(rank int, dst []byte) {
	var r, b int
	if _, err := fmt.Sscanf(getenv("M2N_FAULT_CORRUPT"), "%d:%d", &r, &b); err != nil || r != rank || b >= len(dst) {
		return
	}
	dst[b] ^= 0x40
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
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "rank\trole\tsent\treceived\tnetwork out\tnetwork in\tlocal out\tlocal in\tself copy\tpacked\t")
		for _, t := range rr.Ranks {
			if t.Role == "idle" && t.Sent+t.Recv+t.Copied == 0 {
				continue
			}
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", t.Rank, t.Role, formatBytes(t.Sent), formatBytes(t.Recv),
				formatBytes(t.SentNetwork), formatBytes(t.RecvNetwork), formatBytes(t.SentLocal), formatBytes(t.RecvLocal),
				formatBytes(t.Copied), formatBytes(t.Packed))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	return nil
}
