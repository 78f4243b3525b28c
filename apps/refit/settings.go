package main

import (
	"fmt"
	"strings"

	"github.com/m2n-dev/m2n/bounds"
	"github.com/m2n-dev/m2n/control"
	"github.com/m2n-dev/m2n/dtype"
	"github.com/m2n-dev/m2n/envopts"
	"github.com/m2n-dev/m2n/fp8"
	"github.com/m2n-dev/m2n/placement"
	"github.com/m2n-dev/m2n/refit"
	"github.com/m2n-dev/m2n/reshard"
	"github.com/m2n-dev/m2n/routespec"
	"github.com/m2n-dev/m2n/session"
	"github.com/m2n-dev/m2n/units"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// runFlags are the flags of `refit run` and the jobs built on it (bench,
// sweep, soak).
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
	coalesce  string
	logLevel  string
	balance   string
	srcDomain string
	dstDomain string
	emulate   string
	netBW     string
	localBW   string
	latency   string
	device    string
	ppStages  int
	verify    bool
	atomic    bool
	delta     bool
	change    float64 // --change: the fraction of elements each step changes, with --delta
	timeout   string
	dstDType  string
	fp8Scale  string
	driver    string
	listen    string // port file: this job is a trainer that a generator job joins
	connect   string // port file: this job is a generator that joins a trainer job

	cmd        *cobra.Command // the command whose flags these are
	noProgress bool           // no progress display (soak's many short runs)
}

func (f *runFlags) register(cmd *cobra.Command) {
	f.cmd = cmd
	f.pair.register(cmd.Flags())
	fs := cmd.Flags()
	fs.StringVar(&f.route, "route", "flat", "route: flat, agbcast, hier, auto, or all (flat, agbcast and hier in turn; flat and hier with --dst-dtype e4m3); a comma list works too")
	fs.IntVar(&f.iters, "iters", 5, "timed iterations per route")
	fs.StringVar(&f.listen, "listen", "", "this job is the trainer of a two-job session: publish a port in this file (mode 0600, on a path the generator's job can read) and wait for one generator job to join with --connect; start both mpiruns with --ompi-server file:URI (see README: Two jobs)")
	fs.StringVar(&f.connect, "connect", "", "this job is the generator of a two-job session: join the trainer job listening on this port file (--listen); ranks and meshes are the joined session's, the trainer's first")
	fs.IntVar(&f.warmup, "warmup", 1, "untimed iterations before the timed ones")
	fs.BoolVar(&f.check, "check", false, "poison destinations before every iteration and check every element after")
	fs.BoolVar(&f.asJSON, "json", false, "print the report as one JSON object on rank 0")
	fs.BoolVar(&f.stripe, "stripe", false, "spread sends of replicated source regions over all replicas")
	fs.StringVar(&f.chunk, "chunk-bytes", "", "largest message and pipeline chunk (default 16MiB, 64MiB with --device cuda, or M2N_CHUNK_BYTES)")
	fs.StringVar(&f.staging, "staging-bytes", "", "staging memory per rank, at least 8 chunks (default 256MiB, 1GiB with --device cuda, or M2N_STAGING_BYTES)")
	fs.StringVar(&f.coalesce, "coalesce-bytes", "", "messages of one round between one pair up to this size travel as one, packed (default 64KiB, 1MiB with --device cuda; 0 turns it off; or M2N_COALESCE_BYTES)")
	fs.StringVar(&f.logLevel, "log-level", "", "log level: debug, info, warn, error (default info, or M2N_LOG_LEVEL)")
	fs.StringVar(&f.balance, "balance", "", "hier leader balance: count (the paper's rule) or bytes (default count, or M2N_BALANCE)")
	fs.StringVar(&f.srcDomain, "src-domain-size", "", "group source ranks into domains of this size (default: one per host, or M2N_SRC_DOMAIN_SIZE)")
	fs.StringVar(&f.dstDomain, "dst-domain-size", "", "group destination ranks into domains of this size (default: one per host, or M2N_DST_DOMAIN_SIZE)")
	fs.StringVar(&f.emulate, "emulate-net-bw", "", "cap each rank's cross-domain send and receive rate, e.g. 1GB/s (or M2N_EMULATE_NET_BW)")
	fs.StringVar(&f.netBW, "net-bw", "", "per-rank network bandwidth for the model and auto (default: the emulated rate, else 50GB/s; or M2N_NET_BW)")
	fs.StringVar(&f.localBW, "local-bw", "", "per-rank local-fabric bandwidth for the model and auto (default: measured when emulating, else 900GB/s; or M2N_LOCAL_BW)")
	fs.StringVar(&f.latency, "latency", "20us", "per-message latency for auto's startup term (a duration, at least 0)")
	fs.StringVar(&f.device, "device", "cpu", "where tensors live: cpu (host memory, MPI) or cuda (one GPU per rank by local rank, NCCL)")
	fs.BoolVar(&f.verify, "verify", false, "checksum (CRC-32C) every message on both sides and compare across ranks; a mismatch fails the call naming the tensor, box and ranks")
	fs.BoolVar(&f.atomic, "atomic", false, "receive into shadow buffers and copy them in only when every tensor arrived (and verified) everywhere: a failed call leaves destinations untouched")
	fs.BoolVar(&f.delta, "delta", false, "send each step after the first only the elements that changed (CPU): every step changes --change of the elements and runs as a delta step and as a full sync, timed apart")
	fs.Float64Var(&f.change, "change", 0.01, "with --delta, the fraction of every tensor's elements each step changes, drawn uniformly (pattern.Change; --check verifies every element)")
	fs.StringVar(&f.driver, "driver", "", "with --device cuda, what runs each step: replay (the whole step queued on the GPU's streams, one host wait; the default without --verify, or M2N_GPU_DRIVER), graph (the same captured once as a CUDA graph) or host (round by round from the host, as --verify does)")
	fs.StringVar(&f.timeout, "timeout", "", "bound on every wait (MPI start-up, which gets at least 3s and must take less than the timeout; set-up, each collective, each round): a rank that times out names the ranks it waited for and stops the job (default 5m, or M2N_TIMEOUT)")
	fs.StringVar(&f.dstDType, "dst-dtype", "", "convert in flight: e4m3 (float8_e4m3fn) makes the destination FP8, quantized while packing from a bf16 or f32 source, with its float32 scales (weight_scale_inv) delivered beside it (default: the source's dtype)")
	fs.StringVar(&f.fp8Scale, "fp8-scale", "", "with --dst-dtype e4m3, which elements share a scale: block (128x128 over the last two dims, DeepSeek-V3's format), row or tensor (default block)")
	fs.IntVar(&f.ppStages, "pp-stages", 0, "pipeline stages: stage s trains on world ranks [s*M, (s+1)*M) and reshards to the generator (--dst-ranks, world ranks; default after the trainers) on a communicator of its own; stages run concurrently")
}

func (f *runFlags) routes() ([]string, error) {
	out, err := routespec.List(f.route, f.dstDType != "")
	if err != nil {
		return nil, flagError("route", f.route, err)
	}
	return out, nil
}

// routeOpts are what the flags say of routes beyond their names, on
// fabric.
func (s settings) routeOpts(fabric bounds.Fabric) routespec.Options {
	return routespec.Options{Balance: s.Balance, Fabric: fabric}
}

// settings are what the flags and the environment resolve to.
type settings struct {
	envopts.Settings
	opts session.Options // Settings.Options with the flags' own
	fp8  fp8.Mode        // --dst-dtype e4m3: the scaling mode; 0 without conversion
}

// lookup finds a setting (package envopts): the flag's value, else the
// environment variable's, with the name to blame in errors.
func (f *runFlags) lookup(key string) envopts.Source {
	flags := map[string]*string{"timeout": &f.timeout, "chunk-bytes": &f.chunk, "staging-bytes": &f.staging, "coalesce-bytes": &f.coalesce,
		"balance": &f.balance, "src-domain-size": &f.srcDomain, "dst-domain-size": &f.dstDomain, "emulate-net-bw": &f.emulate,
		"net-bw": &f.netBW, "local-bw": &f.localBW, "latency": &f.latency}
	if v, ok := flags[key]; ok && *v != "" {
		return envopts.Source{Value: *v, Name: "--" + key}
	}
	return envopts.Env(key)
}

// bad reports a setting whose value cannot be used, naming where it came
// from: a flag or an environment variable.
func bad(s envopts.Source, err error) error { return usageError{s.Bad(err)} }

// maxIterations bounds --iters plus --warmup: at a microsecond a step,
// 2^40 steps take twelve days; more is a typo (and 2^63 overflows).
const maxIterations = 1 << 40

// checkCounts refuses iteration counts a job cannot run: no timed
// iteration, a negative warm-up, or more than maxIterations in all
// (iters + warmup would overflow an int long before the steps end).
func checkCounts(iters, warmup int) error {
	switch {
	case iters < 1 || warmup < 0:
		return usageError{fmt.Errorf("--iters %d --warmup %d: want at least one timed iteration and no negative warm-up", iters, warmup)}
	case iters > maxIterations || warmup > maxIterations-iters:
		return usageError{fmt.Errorf("--iters %d --warmup %d: want at most %d iterations in all (2^40; at a microsecond each, twelve days)", iters, warmup, maxIterations)}
	}
	return nil
}

// settings resolves the flags and the environment (envopts.Resolve, and
// the flags only run jobs take); every error names the flag or the
// variable and its value.
func (f *runFlags) settings() (settings, error) {
	var s settings
	var err error
	s.Settings, err = envopts.Resolve(f.lookup)
	s.opts = s.Settings.Options // as far as it resolved: a refusing rank joins with them
	if err != nil {
		return s, usageError{err}
	}
	if s.opts.Device, err = session.ParseDevice(f.device); err != nil {
		return s, flagError("device", f.device, fmt.Errorf("want cpu or cuda"))
	}
	if err := checkCounts(f.iters, f.warmup); err != nil {
		return s, err
	}
	if f.ppStages < 0 {
		return s, flagError("pp-stages", fmt.Sprint(f.ppStages), fmt.Errorf("want a positive number of stages"))
	}
	if f.ppStages > 0 && f.pair.Src.Ranks != "" {
		return s, usageError{fmt.Errorf("--pp-stages places the trainers itself (stage s on world ranks [s*M, (s+1)*M)); drop --src-ranks")}
	}
	s.opts.Stripe, s.opts.Verify, s.opts.Atomic, s.opts.Delta = f.stripe, f.verify, f.atomic, f.delta
	if !(f.change >= 0 && f.change <= 1) {
		return s, flagError("change", fmt.Sprint(f.change), fmt.Errorf("want a fraction in [0, 1]"))
	}
	if f.driver != "" {
		if s.opts.Driver, err = refit.ParseDriver(f.driver); err != nil {
			return s, flagError("driver", f.driver, fmt.Errorf("want host, replay or graph"))
		}
		if s.opts.Device != session.GPU && s.opts.Driver != refit.DriverHost {
			return s, flagError("driver", f.driver, fmt.Errorf("the replay and graph drivers move GPU calls: add --device cuda (CPU calls run on the host driver)"))
		}
	}
	if s.fp8, err = f.fp8Mode(); err != nil {
		return s, err
	}
	if _, err := f.routes(); err != nil {
		return s, err
	}
	return s, f.checkOptions(s.opts)
}

// fp8Mode reads --dst-dtype and --fp8-scale: the scaling mode of a
// conversion to FP8 in flight, or 0 without one.
func (f *runFlags) fp8Mode() (fp8.Mode, error) {
	if f.dstDType != "" && f.cmd != nil && f.cmd.Name() != "run" && f.cmd.Name() != "sync" {
		return 0, flagError("dst-dtype", f.dstDType, fmt.Errorf("only refit run and refit sync convert in flight"))
	}
	return parseFP8(f.dstDType, f.fp8Scale, "the one conversion in flight is to e4m3 (fp8e4m3, float8_e4m3fn); leave it out to keep the source's dtype")
}

// dstOf returns a destination layout in the dtype the flags ask for: FP8
// with --dst-dtype e4m3, else as given.
func (s settings) dstOf(l placement.Layout) placement.Layout {
	if s.fp8 != 0 {
		return l.WithDType(dtype.FP8E4M3)
	}
	return l
}

// agreedFields lists every flag of the command and every M2N_ variable
// that changes what runs or what is reported, for the ranks to agree on
// at Join: a rank started with other flags fails every rank at once,
// naming the flag. The test-only fault switches (M2N_FAULT_*) and the log
// level are this rank's own.
func agreedFields(cmd *cobra.Command) []control.Field {
	var out []control.Field
	if cmd != nil {
		cmd.Flags().VisitAll(func(fl *pflag.Flag) {
			if fl.Name == "log-level" || fl.Name == "help" || fl.Name == "listen" || fl.Name == "connect" {
				return
			}
			v := fl.Value.String()
			if v == "" {
				v = "(unset)" // reads better in "rank 0 has (unset)"
			}
			out = append(out, control.Field{Name: "flag --" + fl.Name, Value: v})
		})
	}
	// one field for them all: a variable set on one rank only must not
	// shift the other fields.
	return append(out, control.Field{Name: "M2N_ environment", Value: "[" + strings.Join(envopts.Agreed(), " ") + "]"})
}

// settingsStaging is the staging bytes the flags or the environment give,
// or the CPU default, for defaults that follow it (sync's bucket size).
func (f *runFlags) settingsStaging() int64 {
	if src := f.lookup("staging-bytes"); src.Value != "" {
		if n, err := units.ParseBytes(src.Value); err == nil {
			return n
		}
	}
	return reshard.DefaultScheduleOptions.StagingBytes
}
