package launcher

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/m2n-dev/m2n/mpi"
)

// Program names this program in the messages the package prints
// ("refit: rank 3: ..."); the executable's name by default.
var Program = filepath.Base(os.Args[0])

// Rank reads the rank the launcher (mpirun, srun) gave this process, from
// its environment, before MPI is initialized: -1 outside a launcher.
func Rank() int {
	for _, k := range []string{"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID"} {
		var r int
		if _, err := fmt.Sscan(os.Getenv(k), &r); err == nil {
			return r
		}
	}
	return -1
}

// Launched says whether a launcher started this process: it forwards the
// ranks' output through pipes (and, under OpenMPI, a pseudo-terminal for
// stdout when its own is one), so a terminal seen from a rank is not
// proof that a person watches it.
var Launched = Rank() >= 0

// Started is when this process started, near enough (its Go
// initialisation).
var Started = time.Now()

// Turn is how much longer than a bound rank r waits before it gives up
// where ranks cannot talk (MPI_Init, MPI_Finalize): rank 0 first, then
// rank 1, then every other rank, so that the first to give up ends the
// job (a launcher stops the others about a second after one exits)
// before the next one's turn comes.
func Turn(r int) time.Duration {
	return time.Duration(min(max(r, 0), 2)) * 1500 * time.Millisecond
}

// MinInitBound is the least time Init gives MPI_Init: start-up takes a
// launcher some hundreds of milliseconds, seconds on a loaded host,
// whatever a program's timeout says.
const MinInitBound = 3 * time.Second

// Init initializes MPI (mpi.ThreadMultiple), bounded by timeout (at least
// MinInitBound): a rank whose peers are not MPI programs would wait in
// MPI_Init forever. Past the bound (and its Turn) one rank of a host says
// so (SayOnce) and every rank exits with status 4. A program refuses a
// start-up that outlasted its timeout once MPI is up (time.Since(Started)
// tells it).
func Init(timeout time.Duration, rank int) error {
	bound := max(timeout, MinInitBound)
	guard := time.AfterFunc(bound+Turn(rank), func() {
		SayOnce("init", fmt.Sprintf("rank %d: MPI_Init did not finish in %v: every process of the job must be a %s job of the same command, "+
			"started by one launcher; if they are, start-up takes longer than that here (a loaded host?): raise --timeout", rank, bound, Program))
		os.Exit(4)
	})
	_, err := mpi.Init(mpi.ThreadMultiple)
	if !guard.Stop() {
		select {} // the guard gave up first: it speaks and ends the process
	}
	return err
}

// Finalize finishes MPI, bounded: MPI_Finalize waits for every rank, so a
// rank stopped at the end would hold the job forever. Past timeout (and
// this rank's Turn) one rank of a host says so, naming a stopped launcher
// where that is the cause, and the rank exits with status 4; in a job
// that failed already (failed), whose cause is printed, it exits with 1
// without a word.
func Finalize(timeout time.Duration, rank int, failed bool) {
	t := time.AfterFunc(timeout+Turn(rank), func() {
		if failed {
			os.Exit(1)
		}
		cause := LauncherStopped()
		if cause == "" {
			cause = "a peer is gone or stuck"
		}
		SayOnce("finalize", fmt.Sprintf("rank %d: MPI_Finalize did not finish in %v: %s; ending the job", rank, timeout, cause))
		os.Exit(4)
	})
	defer t.Stop()
	_ = mpi.Finalize()
}
