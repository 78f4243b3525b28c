package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/m2n-dev/m2n/internal/testutil/mpitest"
)

// These tests build the shared library as `make capi` does, then use it as
// its users do: its header and exports are checked against each other, a C
// program links it and runs a checked reshard under mpirun, and the Python
// package's tests and examples run under mpirun with Debian's python3 and
// its python3-mpi4py and python3-numpy (python3-torch where installed).

// lib is the library, built once per test binary into a temporary folder.
var lib struct {
	once      sync.Once
	dir       string
	so, cgoh  string // the library and the header cgo generated
	err       error
	buildTime time.Duration
}

func TestMain(m *testing.M) {
	code := m.Run()
	if lib.dir != "" {
		os.RemoveAll(lib.dir)
	}
	os.Exit(code)
}

// library builds libm2n.so (once) and returns its path.
func library(t testing.TB) string {
	t.Helper()
	lib.once.Do(func() {
		if lib.dir, lib.err = os.MkdirTemp("", "m2n-capi-"); lib.err != nil {
			return
		}
		lib.so = filepath.Join(lib.dir, "libm2n.so")
		lib.cgoh = filepath.Join(lib.dir, "libm2n.h")
		mapFile, err := filepath.Abs("libm2n.map")
		if err != nil {
			lib.err = err
			return
		}
		start := time.Now()
		cmd := exec.Command("go", "build", "-tags", "nonvml", "-buildmode=c-shared",
			"-ldflags=-extldflags=-Wl,--version-script="+mapFile+",-soname,libm2n.so", "-o", lib.so, ".")
		if out, err := cmd.CombinedOutput(); err != nil {
			lib.err = fmt.Errorf("go build -buildmode=c-shared: %v\n%s", err, out)
		}
		lib.buildTime = time.Since(start)
	})
	if lib.err != nil {
		t.Fatal(lib.err)
	}
	return lib.so
}

// prototypes reads the function prototypes of a C header, normalised
// (no const, no parameter names, no spaces): name -> "ret(params)".
func prototypes(t *testing.T, path string) map[string]string {
	t.Helper()
	src, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	text := regexp.MustCompile(`(?s)/\*.*?\*/`).ReplaceAllString(string(src), "")
	text = regexp.MustCompile(`//[^\n]*`).ReplaceAllString(text, "")
	out := map[string]string{}
	re := regexp.MustCompile(`(?m)^(?:extern\s+)?([A-Za-z_][A-Za-z0-9_ ]*?[\s*]+)(m2n_[a-z0-9_]+)\s*\(([^)]*)\)\s*;`)
	for _, m := range re.FindAllStringSubmatch(text, -1) {
		var params []string
		for _, p := range strings.Split(m[3], ",") {
			p = strings.TrimSpace(strings.ReplaceAll(p, "const ", ""))
			if p != "void" {
				// drop the parameter's name: the last identifier.
				p = regexp.MustCompile(`[A-Za-z_][A-Za-z0-9_]*$`).ReplaceAllString(p, "")
			}
			params = append(params, strings.ReplaceAll(p, " ", ""))
		}
		ret := strings.ReplaceAll(strings.TrimSpace(strings.ReplaceAll(m[1], "const ", "")), " ", "")
		out[m[2]] = ret + "(" + strings.Join(params, ",") + ")"
	}
	return out
}

func keys(m map[string]string) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// TestHeader checks that m2n.h declares exactly the functions the library
// exports, with the types cgo gave them (m2n.h adds const), that
// libm2n.map exports those, and that the library exports nothing else.
func TestHeader(t *testing.T) {
	so := library(t)
	want := prototypes(t, "m2n.h")
	got := prototypes(t, lib.cgoh)
	if len(want) < 20 {
		t.Fatalf("m2n.h: found only %d prototypes: %v", len(want), keys(want))
	}
	for _, name := range keys(want) {
		if got[name] != want[name] {
			t.Errorf("%s: m2n.h declares %s, the library %q", name, want[name], got[name])
		}
	}
	for _, name := range keys(got) {
		if _, ok := want[name]; !ok {
			t.Errorf("the library exports %s, which m2n.h does not declare", name)
		}
	}
	mapText, err := os.ReadFile("libm2n.map")
	if err != nil {
		t.Fatal(err)
	}
	var mapped []string
	for _, m := range regexp.MustCompile(`(?m)^\s*(m2n_[a-z0-9_]+);`).FindAllStringSubmatch(string(mapText), -1) {
		mapped = append(mapped, m[1])
	}
	slices.Sort(mapped)
	if !slices.Equal(mapped, keys(want)) {
		t.Errorf("libm2n.map exports %v; m2n.h declares %v", mapped, keys(want))
	}
	if _, err := exec.LookPath("nm"); err != nil {
		t.Logf("no nm: not listing the library's dynamic symbols")
		return
	}
	out, err := exec.Command("nm", "-D", "--defined-only", so).Output()
	if err != nil {
		t.Fatal(err)
	}
	var exported []string
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); len(f) == 3 && (f[1] == "T" || f[1] == "D" || f[1] == "B") {
			exported = append(exported, f[2])
		}
	}
	slices.Sort(exported)
	if !slices.Equal(exported, keys(want)) {
		t.Errorf("libm2n.so exports %v; want m2n.h's %v", exported, keys(want))
	}
}

// errNoMpicc is compileC's error where there is no mpicc.
var errNoMpicc = errors.New("no mpicc (OpenMPI's compiler wrapper, from libopenmpi-dev: scripts/ensure-deps.sh installs it)")

// compileC compiles testdata/name.c against m2n.h and the library into
// dir/name and returns its path; extra (-lpthread) follows the library.
func compileC(t testing.TB, name, dir string, extra ...string) (string, error) {
	t.Helper()
	so := library(t)
	cc, err := exec.LookPath("mpicc")
	if err != nil {
		return "", fmt.Errorf("%w: %v", errNoMpicc, err)
	}
	bin := filepath.Join(dir, name)
	args := []string{"-Wall", "-Wextra", "-Werror", "-I.", filepath.Join("testdata", name+".c"), "-L" + filepath.Dir(so), "-lm2n",
		"-Wl,-rpath," + filepath.Dir(so)}
	cmd := exec.Command(cc, append(append(args, extra...), "-o", bin)...)
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("mpicc testdata/%s.c: %v\n%s", name, err, out)
	}
	return bin, nil
}

// cProgram compiles testdata/name.c (compileC), skipping without mpicc.
func cProgram(t *testing.T, name string) string {
	t.Helper()
	bin, err := compileC(t, name, t.TempDir())
	if errors.Is(err, errNoMpicc) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// TestC runs testdata/smoke.c: without MPI initialised (refused), then as
// a checked 4-rank reshard under mpirun with an error on one rank.
func TestC(t *testing.T) {
	bin := cProgram(t, "smoke")
	if out, err := exec.Command(bin, "--no-init").CombinedOutput(); err != nil || !strings.Contains(string(out), "refused") {
		t.Fatalf("smoke --no-init: %v\n%s", err, out)
	}
	mpitest.Require(t)
	out, err := mpirun(t, 4, nil, bin)
	if err != nil || !strings.Contains(out, "smoke: passed") {
		t.Fatalf("smoke under mpirun: %v\n%s", err, out)
	}
}

// TestStructSizes compares the C structs' sizes with the Python package's
// ctypes mirrors.
func TestStructSizes(t *testing.T) {
	bin := cProgram(t, "smoke")
	py := python(t)
	out, err := exec.Command(bin, "--sizes").CombinedOutput()
	if err != nil {
		t.Fatalf("smoke --sizes: %v\n%s", err, out)
	}
	script := `import sys, ctypes; sys.path.insert(0, "../python"); from m2n import _lib
for n in ("Options", "Side", "Tensor", "Buffer", "TensorBuffers", "Report", "NamedBuffer", "DeltaReport"):
    print(n, ctypes.sizeof(getattr(_lib, n)))`
	pout, err := exec.Command(py, "-c", script).CombinedOutput()
	if err != nil {
		t.Fatalf("python: %v\n%s", err, pout)
	}
	if string(out) != string(pout) {
		t.Errorf("struct sizes: C\n%s\nPython ctypes\n%s", out, pout)
	}
}

// readInputs reads the Python package, its tests and the examples, so that
// go test's cache (which sees the files this process opens, not those its
// children do) reruns these tests when one of them changes.
func readInputs(t *testing.T) {
	t.Helper()
	for _, dir := range []string{"../python", "../examples/python"} {
		err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
			if err == nil && !d.IsDir() && strings.HasSuffix(path, ".py") {
				_, err = os.ReadFile(path)
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}

// python returns the interpreter the Python tests run on ($M2N_PYTHON,
// default /usr/bin/python3, Debian's: the one python3-mpi4py and
// python3-numpy install into), skipping when it cannot import them.
func python(t *testing.T) string {
	t.Helper()
	readInputs(t)
	py := os.Getenv("M2N_PYTHON")
	if py == "" {
		py = "/usr/bin/python3"
	}
	if out, err := exec.Command(py, "-c", "import mpi4py, numpy").CombinedOutput(); err != nil {
		t.Skipf("%s cannot import mpi4py and numpy (%v: %s): install python3-mpi4py and python3-numpy "+
			"(scripts/ensure-deps.sh does, where apt-get can)", py, err, bytes.TrimSpace(out))
	}
	return py
}

// hasTorch reports whether py can import torch.
func hasTorch(py string) bool {
	return exec.Command(py, "-c", "import torch").Run() == nil
}

// mpirun runs args as np ranks with the library and the package on the
// Python path, bounded to 5 minutes, and returns the combined output.
func mpirun(t *testing.T, np int, env []string, args ...string) (string, error) {
	t.Helper()
	return mpirunWithin(t, 5*time.Minute, np, env, args...)
}

// mpirunWithin is mpirun bounded to limit (then SIGTERM, and SIGKILL 5 s
// later).
func mpirunWithin(t *testing.T, limit time.Duration, np int, env []string, args ...string) (string, error) {
	t.Helper()
	cmd, err := mpitest.Command(np, args...)
	if err != nil {
		t.Fatal(err)
	}
	pkg, err := filepath.Abs("../python")
	if err != nil {
		t.Fatal(err)
	}
	cmd.Env = append(cmd.Env, "M2N_LIBRARY="+library(t), "PYTHONPATH="+pkg, "PYTHONDONTWRITEBYTECODE=1")
	cmd.Env = append(cmd.Env, env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	timer := time.AfterFunc(limit, func() { _ = cmd.Process.Signal(syscall.SIGTERM) })
	kill := time.AfterFunc(limit+5*time.Second, func() { _ = cmd.Process.Kill() })
	err = cmd.Wait()
	timer.Stop()
	kill.Stop()
	return out.String(), err
}

// TestPython runs the Python package's tests under mpirun: every element
// checked, bad inputs on one rank raising on every rank with the rank and
// field, a layout mismatch raising AgreementError, whole models through
// their fused views, delta mode (calls and a model, resync, its bytes
// against dense), LoRA merges into bf16 and FP8 weights (every element,
// byte and scale against numpy), FP8 in flight (bytes and scales), torch
// tensors.
func TestPython(t *testing.T) {
	py := python(t)
	mpitest.Require(t)
	for _, tc := range []struct {
		script string
		np     int
		torch  bool
	}{
		{"test_calls.py", 6, false},
		{"test_model.py", 6, false},
		{"test_delta.py", 6, false},
		{"test_lora.py", 6, false},
		{"test_lora_fp8.py", 3, false},
		{"test_fp8.py", 4, false},
		{"test_crossed.py", 4, false},
		{"test_torch.py", 2, true}, // torch is slow to import: few ranks
	} {
		t.Run(fmt.Sprintf("%s/np=%d", tc.script, tc.np), func(t *testing.T) {
			out := runPython(t, py, tc.torch, tc.np, fmt.Sprintf("%s: %d ranks, passed", tc.script, tc.np), "python", "tests", tc.script)
			t.Logf("\n%s", out)
		})
	}
}

// TestPythonTimeout runs test_timeout.py: the ranks that wait raise
// m2n.TimeoutError naming the rank that never came, and at exit the
// package ends the job with MPI_Abort (so mpirun exits non-zero) rather
// than let MPI_Finalize wait.
func TestPythonTimeout(t *testing.T) {
	py := python(t)
	mpitest.Require(t)
	start := time.Now()
	out, err := mpirun(t, 3, nil, py, filepath.Join("..", "python", "tests", "test_timeout.py"))
	if err == nil {
		t.Errorf("the job exited 0 after an abort; want MPI_Abort's non-zero status\n%s", out)
	}
	// a Finalize that waited would end only at mpirun's 5-minute kill
	if el := time.Since(start); el > 2*time.Minute {
		t.Errorf("the job took %v to end: MPI_Finalize waited instead of MPI_Abort\n%s", el, out)
	}
	// The non-zero status after "passed" is MPI_Abort's: mpirun's own
	// "MPI_ABORT was invoked" text is not asked for, since orted can lose
	// it (seen on a fresh machine: "ORTE_ERROR_LOG: Data unpack would read
	// past end of buffer in file show_help.c" in its place).
	for _, want := range []string{"rank 0: TimeoutError: ", "rank 1: TimeoutError: ", "rank 2: ", "waiting for ranks [2]",
		"test_timeout.py: 3 ranks, passed"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q\n%s", want, out)
		}
	}
}

// TestPythonExamples runs examples/python: the numpy trainer (8 ranks),
// and the PyTorch one (2 ranks: torch is slow to import) where torch is
// installed.
func TestPythonExamples(t *testing.T) {
	py := python(t)
	mpitest.Require(t)
	for _, ex := range []struct {
		script string
		np     int
		want   string
		torch  bool
	}{
		{"trainer_numpy.py", 8, "3 steps of 6 tensors checked on every generator rank", false},
		{"trainer_torch.py", 2, "3 steps of 6 tensors from a 1-rank trainer to a 1x1 generator on cpu, every element checked", true},
	} {
		t.Run(ex.script, func(t *testing.T) {
			runPython(t, py, ex.torch, ex.np, ex.want, "examples", "python", ex.script)
		})
	}
}

// runPython runs the Python program at path (from the repository root)
// with interpreter py on np ranks and returns its output, which must hold
// want; the job must exit 0. A program that imports torch (torch) is
// skipped where py cannot.
func runPython(t *testing.T, py string, torch bool, np int, want string, path ...string) string {
	t.Helper()
	if torch && !hasTorch(py) {
		t.Skipf("%s cannot import torch (Debian's python3-torch, not installed by the set-up: it is large)", py)
	}
	out, err := mpirun(t, np, nil, py, filepath.Join(append([]string{".."}, path...)...))
	if err != nil || !strings.Contains(out, want) {
		t.Fatalf("%v\n%s", err, out)
	}
	return out
}

// TestPythonLeft runs test_left.py: a rank whose Python code raises with
// a session open (at top level, and inside `with m2n.Session`), a rank
// that runs a call after closing it, and a rank whose program ends with
// its session open. In each the other ranks, waiting in a step, raise
// m2n.LeftError at once naming that rank and why (their sessions wait up
// to 120 s, so waiting it out would show), the raising rank's traceback
// is printed once with its rank, and the job ends non-zero within seconds.
func TestPythonLeft(t *testing.T) {
	py := python(t)
	mpitest.Require(t)
	library(t) // built before the clock starts
	for _, tc := range []struct {
		mode  string
		cause string
		once  []string // printed exactly once
	}{
		{"raise", "uncaught ZeroDivisionError: division by zero (at test_left.py:", []string{"\nZeroDivisionError: division by zero\n", "m2n: rank 1: uncaught exception with an m2n session open"}},
		{"with", "uncaught ZeroDivisionError: division by zero (at test_left.py:", []string{"\nZeroDivisionError: division by zero\n", "m2n: rank 1: uncaught exception with an m2n session open"}},
		{"closed", "m2n_call_run on call handle", []string{"rank 1: InvalidArgument: rank 1: m2n_call_run on call handle"}},
		{"unclosed", "its program ended with the session open", nil},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			start := time.Now()
			out, err := mpirunWithin(t, 100*time.Second, 3, nil, py, filepath.Join("..", "python", "tests", "test_left.py"), tc.mode)
			el := time.Since(start)
			if err == nil {
				t.Errorf("the job exited 0; want non-zero (a rank failed)")
			}
			if el > 45*time.Second {
				t.Errorf("the job took %v to end; want seconds (the sessions' timeout is 120 s)", el.Round(time.Millisecond))
			}
			for _, r := range []int{0, 2} {
				want := fmt.Sprintf("rank %d: LeftError after ", r)
				line := ""
				for _, l := range strings.Split(out, "\n") {
					// mpirun may join two ranks' lines into one
					if i := strings.Index(l, want); i >= 0 {
						line = l[i:]
					}
				}
				if !strings.Contains(line, "rank 1 left the session: "+tc.cause) {
					t.Errorf("rank %d did not raise LeftError naming rank 1 and %q", r, tc.cause)
				}
				if !strings.Contains(out, fmt.Sprintf("rank %d: detail rank=1 cause=", r)) {
					t.Errorf("rank %d's LeftError does not say rank 1 in its detail", r)
				}
			}
			for _, w := range tc.once {
				if n := strings.Count(out, w); n != 1 {
					t.Errorf("%q printed %d times, want once", w, n)
				}
			}
			if t.Failed() {
				t.Logf("%v\n%s", err, out)
			}
			t.Logf("ended in %v", el.Round(time.Millisecond))
		})
	}
}
