package mpitest

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// DefaultFlags are the mpirun options of every job that this package starts
// on one machine (a laptop, a container, CI: root, 2 cores):
//
//   - --oversubscribe: allow more ranks than cores (tests use 2 to 8 ranks).
//   - --bind-to none: OpenMPI binds each rank to one core when ranks do not
//     outnumber cores, which confines a Go process's threads (the
//     goroutine scheduler, the garbage collector) to that core.
//   - --mca pml ob1 --mca btl self,vader: plain shared-memory transport;
//     skips UCX, libfabric and InfiniBand probing, which is slow or noisy
//     in containers (Debian's openmpi-mca-params.conf excludes most of them
//     already, but other installs do not).
//   - --mca btl_vader_single_copy_mechanism none: vader's default single
//     copy (CMA, process_vm_readv) fails in containers that forbid ptrace,
//     as Docker's default seccomp profile does ("Read -1, expected N,
//     errno = 1"); copying through the shared segment always works, at about
//     a fifth of the speed for large messages.
//
// OpenMPI makes waiting ranks yield the CPU by itself when they outnumber
// the cores (mpi_yield_when_idle), so that is not set here.
//
// These are OpenMPI options. M2N_MPIRUN_FLAGS, if set, replaces them; with
// MPICH's mpiexec (Hydra) set it to the empty string.
var DefaultFlags = []string{
	"--oversubscribe",
	"--bind-to", "none",
	"--mca", "pml", "ob1",
	"--mca", "btl", "self,vader",
	"--mca", "btl_vader_single_copy_mechanism", "none",
}

// DefaultEnv are environment settings added to every job unless the
// environment already sets them: OpenMPI refuses to run as root without the
// first two (CI and containers run as root), and PMIX_MCA_gds=hash avoids
// PMIx's shared-memory data store, whose locks fail in some containers
// ("PMIX ERROR: ... gds_ds12_lock_pthread.c").
var DefaultEnv = []string{
	"OMPI_ALLOW_RUN_AS_ROOT=1",
	"OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1",
	"PMIX_MCA_gds=hash",
}

// ErrNoMpirun is returned by Mpirun when no mpirun can be found.
var ErrNoMpirun = errors.New("mpitest: mpirun not found; install openmpi-bin (scripts/ensure-deps.sh does), or set M2N_MPIRUN")

// Mpirun returns the path of the mpirun to use: $M2N_MPIRUN if set, else
// mpirun on PATH. It returns an error wrapping ErrNoMpirun if there is none.
func Mpirun() (string, error) {
	name := "mpirun"
	if p := os.Getenv("M2N_MPIRUN"); p != "" {
		name = p
	}
	path, err := exec.LookPath(name)
	if err != nil {
		return "", fmt.Errorf("%w (%v)", ErrNoMpirun, err)
	}
	return path, nil
}

// Flags returns the mpirun options to use: DefaultFlags, or the words of
// $M2N_MPIRUN_FLAGS if that is set.
func Flags() []string {
	if s, ok := os.LookupEnv("M2N_MPIRUN_FLAGS"); ok {
		return strings.Fields(s)
	}
	return append([]string(nil), DefaultFlags...)
}

// Env returns the environment for an mpirun job: the current environment
// plus those DefaultEnv entries whose variables it does not set.
func Env() []string {
	env := os.Environ()
	for _, kv := range DefaultEnv {
		k, _, _ := strings.Cut(kv, "=")
		if _, ok := os.LookupEnv(k); !ok {
			env = append(env, kv)
		}
	}
	return env
}

// Command returns a command that runs args (a program and its arguments)
// as np ranks: `mpirun <Flags()> -np <np> <args...>` with Env(). Other
// packages' tests use it to start their own programs under the same flags.
// The caller sets Stdout, Stderr and the like and runs it. It returns an
// error wrapping ErrNoMpirun if mpirun is missing, and an error if np < 1
// or args is empty.
func Command(np int, args ...string) (*exec.Cmd, error) {
	return command(np, nil, args)
}

// command is Command with options extra(path) added after Flags().
func command(np int, extra func(path string) []string, args []string) (*exec.Cmd, error) {
	if np < 1 {
		return nil, fmt.Errorf("mpitest: %d ranks; want at least 1", np)
	}
	if len(args) == 0 {
		return nil, errors.New("mpitest: no program to run")
	}
	path, err := Mpirun()
	if err != nil {
		return nil, err
	}
	argv := Flags()
	if extra != nil {
		argv = append(argv, extra(path)...)
	}
	argv = append(argv, "-np", strconv.Itoa(np))
	argv = append(argv, args...)
	cmd := exec.Command(path, argv...)
	cmd.Env = Env()
	return cmd, nil
}

// launcher is the kind of mpirun at a path, found once from its --version
// output: "openmpi", "mpich" (Hydra) or "" when unknown.
var launcher = struct {
	sync.Mutex
	kind map[string]string
}{kind: map[string]string{}}

func launcherKind(path string) string {
	launcher.Lock()
	defer launcher.Unlock()
	if k, ok := launcher.kind[path]; ok {
		return k
	}
	out, _ := exec.Command(path, "--version").CombinedOutput()
	k := ""
	switch {
	case bytes.Contains(out, []byte("Open MPI")), bytes.Contains(out, []byte("OpenRTE")):
		k = "openmpi"
	case bytes.Contains(out, []byte("HYDRA")):
		k = "mpich"
	}
	launcher.kind[path] = k
	return k
}

// tagFlags returns the option that makes the launcher at path prefix each
// output line with the rank it came from, if it has one.
func tagFlags(path string) []string {
	switch launcherKind(path) {
	case "openmpi":
		return []string{"--tag-output"} // "[1,3]<stdout>:"
	case "mpich":
		return []string{"-prepend-rank"} // "[3] "
	}
	return nil
}

// Require returns mpirun's path for a test that needs it. If there is none,
// it fails t, saying to install openmpi-bin, because a skipped integration
// test must not look like a pass; only with M2N_SKIP_MPI=1 in the
// environment does it skip t instead.
func Require(t testing.TB) string {
	t.Helper()
	path, err := Mpirun()
	if err == nil {
		return path
	}
	if os.Getenv("M2N_SKIP_MPI") == "1" {
		t.Skipf("M2N_SKIP_MPI=1: %v", err)
	}
	t.Fatalf("%v; set M2N_SKIP_MPI=1 to skip MPI tests instead", err)
	return ""
}
