// Command refit reshards distributed tensors between process groups.
//
// It is an SPMD program: `mpirun -np W refit run ...` moves a tensor from
// the source ranks' layout to the destination ranks' layout and checks it.
// The offline subcommands (layout, plan, model) need no launcher.
package main

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/m2n-dev/m2n/mpi"
	"github.com/spf13/cobra"
)

// jobRank is this process's rank in an MPI job: from the launcher's
// environment at start-up, then from MPI; -1 outside a launcher.
var jobRank = launcherRank()

// launcherRank reads the rank mpirun or srun gave this process, before MPI
// is initialised.
func launcherRank() int {
	for _, k := range []string{"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID"} {
		var r int
		if _, err := fmt.Sscan(os.Getenv(k), &r); err == nil {
			return r
		}
	}
	return -1
}

// jobError is a failure every rank of the job knows about (a failed check
// is agreed on collectively): only rank 0 prints it.
type jobError struct{ err error }

// printedError is an error already printed on this rank.
type printedError struct{ error }

func (e printedError) Unwrap() error { return e.error }

// finish ends an MPI job: rank 0 prints a job-wide error before MPI is
// finalized, so that the message is out before any rank exits (the
// launcher may kill the others as soon as one exits non-zero), then MPI is
// finalized.
func finish(err *error) {
	var je jobError
	var ue usageError
	if *err != nil && (errors.As(*err, &je) || errors.As(*err, &ue)) {
		if jobRank <= 0 {
			fmt.Fprintf(os.Stderr, "refit: %v\n", *err)
		}
		// Every rank agreed on a job error, so all are here: wait until
		// rank 0 has said it. (Not for usage errors: with per-rank flags
		// only some ranks may fail, and the launcher ends the rest.)
		if errors.As(*err, &je) {
			_ = mpi.World().Barrier()
		}
		*err = printedError{*err}
	}
	_ = mpi.Finalize()
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
  refit soak        many consecutive reshards, with memory and handle accounting

Offline commands (no launcher needed):
  refit layout      show each rank's local shape and global offset
  refit plan        show the transfers a reshard makes
  refit model       each route's speed-of-light bound and auto's choice
  refit pack-bench  the GPU pack/unpack kernels against a plain copy
  refit sim         each route's schedule simulated on a modelled cluster, beside its bound

Spellings: shapes 7168x2048 (scalar for 0 dims), meshes 4x2, placements S0,R
or Shard(0),Replicate(), rank lists 0-7 or 8,3,5.`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return usageError{fmt.Errorf("%w (see refit %s --help)", err, c.Name())}
	})
	root.AddCommand(newLayoutCmd(), newPlanCmd(), newRunCmd(), newBenchCmd(), newSweepCmd(), newModelCmd(), newPackBenchCmd(), newSoakCmd(), newSimCmd())
	return root
}

func main() {
	root := newRoot()
	err := root.Execute()
	if err == nil {
		return
	}
	var ue usageError
	var je jobError
	var pe printedError
	usage := errors.As(err, &ue) || isCobraUsage(err)
	// Under a launcher every rank sees the same flags and fails the same
	// way on bad input, and agrees on a failed check: only rank 0 says so.
	if !errors.As(err, &pe) && (!(usage || errors.As(err, &je)) || jobRank <= 0) {
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
