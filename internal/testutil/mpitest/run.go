package mpitest

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/m2n-dev/m2n/mpi"
)

// T is the test handle a body gets: the testing.TB of its test, with
// messages (Log, Error, Fatal and their f forms) prefixed by "rank r/n: ",
// and the calling rank's place in the world communicator. Skip is not
// supported inside a body (ranks that skip would leave the others waiting);
// it fails the test. Skip before calling Run instead.
type T interface {
	testing.TB
	// Rank is the calling process's rank in the world communicator.
	Rank() int
	// Size is the number of ranks in the world communicator.
	Size() int
}

const (
	childEnv       = "M2N_MPITEST_CHILD" // names the Run call the child runs
	okMarker       = "M2N_MPITEST_OK rank="
	defaultTimeout = 120 * time.Second
	defaultGrace   = 5 * time.Second
)

// calls numbers the Run calls of each running test, so that a test may call
// Run more than once and the child runs the right one.
var calls struct {
	sync.Mutex
	n map[*testing.T]int
}

func nextID(t *testing.T) string {
	calls.Lock()
	defer calls.Unlock()
	if calls.n == nil {
		calls.n = make(map[*testing.T]int)
	}
	if calls.n[t] == 0 {
		t.Cleanup(func() {
			calls.Lock()
			delete(calls.n, t)
			calls.Unlock()
		})
	}
	calls.n[t]++
	return t.Name() + "#" + strconv.Itoa(calls.n[t])
}

// Run runs body on np ranks of a fresh MPI job and fails t if any rank
// fails; see the package documentation. In the parent it requires mpirun
// (see Require) and blocks until the job ends or times out. np must be at
// least 1.
func Run(t *testing.T, np int, body func(t T, c *mpi.Comm)) {
	t.Helper()
	id := nextID(t)
	if cur, ok := os.LookupEnv(childEnv); ok {
		if cur == id {
			runChild(t, body)
		}
		return
	}
	if np < 1 {
		t.Fatalf("mpitest: Run with %d ranks; want at least 1", np)
	}
	Require(t)
	timeout, err := jobTimeout(t)
	if err != nil {
		t.Fatal(err)
	}
	out, err := launch(np, id, runPattern(t.Name()), timeout, nil)
	if err != nil {
		t.Fatalf("%v\n--- output of the MPI job ---\n%s", err, out)
	}
	if testing.Verbose() {
		t.Logf("output of the %d-rank MPI job:\n%s", np, out)
	}
}

// Output runs body on np ranks like Run, for bodies that end their job on
// purpose (a session that aborts makes mpi.Finalize end the job with
// MPI_Abort): instead of failing t when the job fails, it returns the
// job's rank-tagged output and its error, for the test to read what each
// rank printed. It fails t only if the job cannot be started.
func Output(t *testing.T, np int, body func(t T, c *mpi.Comm)) (string, error) {
	t.Helper()
	id := nextID(t)
	if cur, ok := os.LookupEnv(childEnv); ok {
		if cur == id {
			runChild(t, body)
		}
		return "", nil
	}
	Require(t)
	timeout, err := jobTimeout(t)
	if err != nil {
		t.Fatal(err)
	}
	return launch(np, id, runPattern(t.Name()), timeout, nil)
}

// InChild reports whether this process is a rank of a job that Run or
// Output started (the body runs there), rather than the parent test.
func InChild() bool {
	_, ok := os.LookupEnv(childEnv)
	return ok
}

// runPattern turns a test name (with subtests) into a -test.run pattern
// matching exactly that test.
func runPattern(name string) string {
	parts := strings.Split(name, "/")
	for i, p := range parts {
		parts[i] = "^" + regexp.QuoteMeta(p) + "$"
	}
	return strings.Join(parts, "/")
}

// jobTimeout is $M2N_MPITEST_TIMEOUT or the default, cut so that the job
// ends before the test binary's own deadline.
func jobTimeout(t *testing.T) (time.Duration, error) {
	d := defaultTimeout
	if s := os.Getenv("M2N_MPITEST_TIMEOUT"); s != "" {
		var err error
		if d, err = parseDuration(s); err != nil {
			return 0, fmt.Errorf("mpitest: M2N_MPITEST_TIMEOUT: %v", err)
		}
	}
	if dl, ok := t.Deadline(); ok {
		if left := time.Until(dl) - 5*time.Second; left > 0 && left < d {
			d = left
		}
	}
	return d, nil
}

// parseDuration accepts a Go duration ("90s") or a number of seconds.
func parseDuration(s string) (time.Duration, error) {
	if n, err := strconv.ParseFloat(s, 64); err == nil {
		s = fmt.Sprintf("%gs", n)
	}
	d, err := time.ParseDuration(s)
	if err == nil && d <= 0 {
		err = fmt.Errorf("%q is not positive", s)
	}
	return d, err
}

// errTimeout is wrapped by launch's error when the job was killed.
var errTimeout = errors.New("timed out")

// launch runs the test binary as np ranks selecting the tests that pattern
// matches and the Run call id, and returns its combined, rank-tagged output.
// It kills the job after timeout. It fails unless mpirun exits 0 and every
// rank reported that its body passed.
func launch(np int, id, pattern string, timeout time.Duration, env []string) (string, error) {
	return launchWith(np, id, pattern, timeout, env, nil)
}

// launchWith is launch with edit, if not nil, applied to the mpirun
// command before it starts.
func launchWith(np int, id, pattern string, timeout time.Duration, env []string, edit func(*exec.Cmd)) (string, error) {
	exe, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("mpitest: finding the test binary: %v", err)
	}
	args := []string{exe, "-test.run", pattern, "-test.v", "-test.count=1"}
	if testing.Short() {
		args = append(args, "-test.short")
	}
	cmd, err := command(np, tagFlags, args)
	if err != nil {
		return "", err
	}
	if edit != nil {
		edit(cmd)
	}
	cmd.Env = append(cmd.Env, env...)
	cmd.Env = append(cmd.Env, childEnv+"="+id)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	// mpirun and its ranks form one process group, so that a timeout can
	// kill them all; WaitDelay stops Wait from waiting on pipes held open
	// by ranks that outlive mpirun.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.WaitDelay = 5 * time.Second
	what := fmt.Sprintf("mpitest: %s: mpirun -np %d", id, np)
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return "", fmt.Errorf("%s: %v", what, err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case err = <-done:
	case <-timer.C:
		pgid := cmd.Process.Pid
		syscall.Kill(-pgid, syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(3 * time.Second):
			syscall.Kill(-pgid, syscall.SIGKILL)
			<-done
		}
		return out.String(), fmt.Errorf("%s: %w after %v (M2N_MPITEST_TIMEOUT sets the limit); killed the job", what, errTimeout, timeout)
	}
	output := out.String()
	if err != nil {
		return output, fmt.Errorf("%s failed after %v: %v", what, time.Since(start).Round(time.Millisecond), err)
	}
	if missing := missingRanks(output, np); len(missing) > 0 {
		return output, fmt.Errorf("%s exited 0, but ranks %v never finished the body (does -test.run %q select the test?)", what, missing, pattern)
	}
	return output, nil
}

// missingRanks lists the ranks in [0, np) whose pass marker is absent.
func missingRanks(output string, np int) []int {
	seen := make([]bool, np)
	for line := range strings.Lines(output) {
		_, rest, ok := strings.Cut(line, okMarker)
		if !ok {
			continue
		}
		if r, err := strconv.Atoi(strings.TrimSpace(rest)); err == nil && r >= 0 && r < np {
			seen[r] = true
		}
	}
	var missing []int
	for r, ok := range seen {
		if !ok {
			missing = append(missing, r)
		}
	}
	return missing
}

// runChild is Run inside the MPI job: one rank's part.
func runChild(t *testing.T, body func(T, *mpi.Comm)) {
	// Keep this goroutine on the thread that calls Init, so that the body
	// works even if MPI provides only ThreadFunneled.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if _, err := mpi.Init(mpi.ThreadMultiple); err != nil {
		t.Fatalf("mpitest: %v", err)
	}
	world := mpi.World()
	rt := &rankT{T: t, rank: world.Rank(), size: world.Size()}
	// The harness's own barrier runs on a private communicator, apart from
	// anything the body does on world.
	harness, err := world.Dup()
	if err != nil {
		t.Fatalf("mpitest: rank %d: %v", rt.rank, err)
	}
	defer finish(rt, harness)
	body(rt, world)
}

// finish ends a rank after its body returned, called t.FailNow or
// panicked: ranks meet at a barrier and finalize MPI, and passing ranks
// print the marker launch looks for. A failed rank waits at most the grace
// period for the others and then aborts the job; a panicking rank aborts at
// once.
func finish(t *rankT, harness *mpi.Comm) {
	if p := recover(); p != nil {
		fmt.Printf("mpitest: rank %d/%d panicked: %v\n%s", t.rank, t.size, p, debug.Stack())
		mpi.Abort(nil, 2)
	}
	failed := t.Failed()
	req, err := harness.Ibarrier()
	if err != nil {
		fmt.Printf("mpitest: rank %d/%d: %v\n", t.rank, t.size, err)
		mpi.Abort(nil, 1)
	}
	if failed {
		grace := defaultGrace
		if d, err := parseDuration(os.Getenv("M2N_MPITEST_GRACE")); err == nil {
			grace = d
		}
		deadline := time.Now().Add(grace)
		for {
			done, err := req.Test()
			if err != nil {
				fmt.Printf("mpitest: rank %d/%d: final barrier: %v; aborting the job\n", t.rank, t.size, err)
				mpi.Abort(nil, 1)
			}
			if done {
				break
			}
			if time.Now().After(deadline) {
				fmt.Printf("mpitest: rank %d/%d failed and the other ranks did not finish within %v; aborting the job\n", t.rank, t.size, grace)
				mpi.Abort(nil, 1)
			}
			time.Sleep(time.Millisecond)
		}
	} else if err := req.Wait(); err != nil {
		t.Errorf("mpitest: final barrier: %v", err)
	}
	if err := harness.Free(); err != nil {
		t.Errorf("mpitest: %v", err)
	}
	if err := mpi.Finalize(); err != nil {
		t.Errorf("mpitest: %v", err)
	}
	if !t.Failed() {
		fmt.Printf("%s%d\n", okMarker, t.rank)
	}
}

// rankT is the T of one rank.
type rankT struct {
	*testing.T
	rank, size int
}

func (t *rankT) Rank() int { return t.rank }
func (t *rankT) Size() int { return t.size }

func (t *rankT) prefix() string { return fmt.Sprintf("rank %d/%d: ", t.rank, t.size) }

// sprintln formats like t.Log: operands separated by spaces.
func sprintln(args ...any) string { return strings.TrimSuffix(fmt.Sprintln(args...), "\n") }

func (t *rankT) Log(args ...any) {
	t.T.Helper()
	t.T.Log(t.prefix() + sprintln(args...))
}

func (t *rankT) Logf(format string, args ...any) {
	t.T.Helper()
	t.T.Log(t.prefix() + fmt.Sprintf(format, args...))
}

func (t *rankT) Error(args ...any) {
	t.T.Helper()
	t.T.Error(t.prefix() + sprintln(args...))
}

func (t *rankT) Errorf(format string, args ...any) {
	t.T.Helper()
	t.T.Error(t.prefix() + fmt.Sprintf(format, args...))
}

func (t *rankT) Fatal(args ...any) {
	t.T.Helper()
	t.T.Fatal(t.prefix() + sprintln(args...))
}

func (t *rankT) Fatalf(format string, args ...any) {
	t.T.Helper()
	t.T.Fatal(t.prefix() + fmt.Sprintf(format, args...))
}

func (t *rankT) Skip(args ...any) {
	t.T.Helper()
	t.T.Fatal(t.prefix() + "mpitest: Skip inside an MPI body is not supported (skip before Run): " + sprintln(args...))
}

func (t *rankT) Skipf(format string, args ...any) {
	t.T.Helper()
	t.T.Fatal(t.prefix() + "mpitest: Skip inside an MPI body is not supported (skip before Run): " + fmt.Sprintf(format, args...))
}

func (t *rankT) SkipNow() {
	t.T.Helper()
	t.T.Fatal(t.prefix() + "mpitest: Skip inside an MPI body is not supported (skip before Run)")
}
