// Command refit reshards distributed tensors between process groups.
//
// It is an SPMD program: `mpirun -np W refit run ...` moves a tensor from
// the source ranks' layout to the destination ranks' layout and checks it.
// The offline subcommands (layout, layouts, plan, bound) need no launcher.
package main

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/m2n-dev/m2n/launcher"
	"github.com/m2n-dev/m2n/perf"
	"github.com/m2n-dev/m2n/spmd"
	"github.com/spf13/cobra"
)

// jobError is a failure every rank of the job knows about (a failed check
// is agreed on collectively): only rank 0 prints it (spmd.IsAgreed).
type jobError struct{ err error }

// agreedHere reports refit's errors that every rank returns alike, beyond
// spmd's own: jobError and perf.Agreed.
func agreedHere(err error) bool {
	var je jobError
	var pa perf.Agreed
	return errors.As(err, &pa) || errors.As(err, &je)
}

// optionSources names what sets each session option that ranks agree on
// at Join, for its agreement errors (the session names the option).
var optionSources = map[string]string{
	"device": "--device", "timeout": "--timeout or M2N_TIMEOUT", "chunk bytes": "--chunk-bytes or M2N_CHUNK_BYTES",
	"staging bytes": "--staging-bytes or M2N_STAGING_BYTES", "coalesce bytes": "--coalesce-bytes or M2N_COALESCE_BYTES",
	"domain sizes":     "--src-domain-size, --dst-domain-size or M2N_SRC_DOMAIN_SIZE, M2N_DST_DOMAIN_SIZE",
	"replica striping": "--stripe", "verify": "--verify", "atomic": "--atomic", "delta": "--delta",
	"emulated network rate": "--emulate-net-bw or M2N_EMULATE_NET_BW", "in-place strided moves off": "M2N_MPI_INPLACE",
}

func (e jobError) Error() string { return e.err.Error() }
func (e jobError) Unwrap() error { return e.err }

// usageError marks bad input: refit prints it on one line and exits 2.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

// flagError reports a flag whose value cannot be used, naming both.
func flagError(flag, value string, err error) error {
	return usageError{fmt.Errorf("--%s %q: %w", flag, value, err)}
}

func newRoot() *cobra.Command {
	root := &cobra.Command{
		Use:   "refit",
		Short: "Reshard distributed tensors from M source ranks to N destination ranks",
		Long: `refit moves a distributed tensor from one process group's layout to another's:
M trainer ranks holding one DTensor layout hand it to N generator ranks that
want another, as in reinforcement-learning weight sync.

A layout is a global shape, a dtype, a mesh of ranks and one placement per
mesh axis (S<dim> shards a tensor dim with torch.chunk, R replicates), exactly
as PyTorch DTensor defines them.

Jobs (launch with mpirun or srun):
  refit run         reshard a tensor for real, per route, checked and timed
  refit bench       a reshard against a plain MPI exchange of the same bytes
  refit sweep       flat, agbcast and hier against their model bounds, over rho and domains
  refit sync        refit a whole model every step (one prepared call per pipeline stage)
  refit soak        many consecutive reshards, with memory and handle accounting

Offline commands (no launcher needed):
  refit layout      show each rank's local shape and global offset
  refit layouts     lay a whole model out from a Megatron trainer to a vLLM generator
  refit plan        show the transfers a reshard makes
  refit bound       each route's speed-of-light bound and auto's choice
  refit pack-bench  the GPU pack/unpack kernels against a plain copy
  refit quantize    a raw bf16/f32 tensor to FP8 E4M3 bytes and scales, as a destination gets it
  refit quant-bench the GPU FP8 quantize-pack kernels against packing alone and convert-after
  refit sim         each route's schedule simulated on a modelled cluster, beside its bound
  refit plot        PNG plots from refit sim --json: time against rho, whole-model bars, link use

GPU benchmark (one rank: mpirun -np 1):
  refit replay-bench prepared calls on the host driver, the replay and the graph, against their bounds

Spellings: shapes 7168x2048 (scalar for 0 dims), meshes 4x2, placements S0,R
or Shard(0),Replicate(), rank lists 0-7 or 8,3,5.`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return usageError{fmt.Errorf("%w (see refit %s --help)", err, c.Name())}
	})
	root.AddCommand(newLayoutCmd(), newPlanCmd(), newRunCmd(), newBenchCmd(), newSweepCmd(), newBoundCmd(), newLayoutsCmd(), newSyncCmd(),
		newPackBenchCmd(), newSoakCmd(), newQuantizeCmd(), newQuantBenchCmd(), newSimCmd(), newPlotCmd(), newReplayBenchCmd())
	return root
}

func main() {
	launcher.Program = "refit"
	spmd.OptionSources, spmd.IsAgreed, spmd.StopAt = optionSources, agreedHere, stopHere
	defer func() { // a panic outside a job's end (spmd.Job.End recovers those)
		if p := recover(); p != nil {
			spmd.InternalError(p)
		}
	}()
	root := newRoot()
	err := root.Execute()
	if err == nil {
		return
	}
	var ue usageError
	var pe spmd.Printed
	var rf spmd.Refused
	usage := errors.As(err, &ue) || isCobraUsage(err) || errors.As(err, &rf)
	// An offline command's error, or one raised before MPI started: every
	// rank of a launch sees the same flags and fails the same way, so
	// only rank 0 (or a rank outside a launcher) says so.
	if !errors.As(err, &pe) && spmd.Rank() <= 0 {
		fmt.Fprintf(os.Stderr, "refit: %v\n", err)
	}
	if usage {
		os.Exit(2)
	}
	os.Exit(1)
}

// isCobraUsage recognises cobra's own argument errors (unknown command,
// unexpected arguments, missing required flags), which are usage errors too.
func isCobraUsage(err error) bool {
	msg := err.Error()
	for _, p := range []string{"unknown command", "unknown flag", "accepts ", "requires at least", "required flag"} {
		if strings.Contains(msg, p) {
			return true
		}
	}
	return false
}
