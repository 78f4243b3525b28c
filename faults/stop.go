package faults

import (
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
)

// M2N_FAULT_STOP=r:where is a test-only fault switch: rank r stops its
// own process (SIGSTOP, as a debugger or an overloaded host would) at one
// point of the job, so that tests can show every collective of the job
// bounded: the other ranks must time out naming rank r. The points:
//
//	join      after MPI_Init, before the session's Join
//	prepare   before the first Prepare (the call's agreements)
//	step      at the first round of the first call it runs
//	report    after the timed iterations, before the report is gathered
//	end       after the report, before the job's closing barrier
//	finalize  after the closing barrier, before MPI_Finalize
//
// The stopped process stays stopped until a signal ends it (the launcher's
// SIGKILL when the job ends) or SIGCONT resumes it.
const StopVar = "M2N_FAULT_STOP"

// Points are the points StopHere knows, in the order a job passes them.
var Points = []string{"join", "prepare", "step", "report", "end", "finalize"}

// M2N_FAULT_PANIC=r:where makes rank r panic at one of the same points,
// to show that a panic on one rank, while the others wait in a
// collective, is printed once and ends the job (spmd.Job.End) rather than
// hanging it in MPI_Finalize.
const PanicVar = "M2N_FAULT_PANIC"

// Point reads a switch of the form rank:point (StopVar, PanicVar): the
// rank and the point, ok false when it is unset. A value that does not
// parse is an error naming the variable.
func Point(env string) (rank int, where string, ok bool, err error) {
	v := strings.TrimSpace(os.Getenv(env))
	if v == "" {
		return 0, "", false, nil
	}
	r, w, _ := strings.Cut(v, ":")
	rank, err = strconv.Atoi(r)
	if err != nil || rank < 0 || !slices.Contains(Points, w) {
		return 0, "", false, fmt.Errorf("%s %q: want rank:point with a rank of at least 0 and a point among %s",
			env, v, strings.Join(Points, ", "))
	}
	return rank, w, true, nil
}

// StopHere stops this process (rank) if M2N_FAULT_STOP names rank and
// point where, and panics if M2N_FAULT_PANIC does.
func StopHere(rank int, where string) {
	if r, w, ok, _ := Point(PanicVar); ok && r == rank && w == where {
		panic(fmt.Sprintf("panicking on purpose before %s (%s)", where, PanicVar))
	}
	r, w, ok, _ := Point(StopVar)
	if !ok || r != rank || w != where {
		return
	}
	fmt.Fprintf(os.Stderr, "refit: rank %d: %s: stopping (SIGSTOP) before %s\n", rank, StopVar, where)
	// to this thread, so that it stops on the way out of the call: sent to
	// the process, another thread may take the signal, and this one could
	// run on for a while first on a busy machine.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	_ = syscall.Tgkill(os.Getpid(), syscall.Gettid(), syscall.SIGSTOP)
}
