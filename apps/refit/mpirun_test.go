package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/m2n-dev/m2n/internal/mpitest"
	"github.com/m2n-dev/m2n/mesh"
	"github.com/m2n-dev/m2n/reshard/transporttest"
)

// refitBin is the refit binary the integration tests launch under mpirun,
// built once by TestMain.
var refitBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "refit-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	refitBin = filepath.Join(dir, "refit")
	if out, err := exec.Command("go", "build", "-o", refitBin, ".").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building refit: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// mpirunRefit runs refit under mpirun with np ranks and returns stdout,
// stderr and the exit error.
func mpirunRefit(t *testing.T, np int, env []string, args ...string) (string, string, error) {
	t.Helper()
	mpitest.Require(t)
	cmd, err := mpitest.Command(np, append([]string{refitBin}, args...)...)
	if err != nil {
		t.Fatal(err)
	}
	cmd.Env = append(cmd.Env, env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	done := make(chan error, 1)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { done <- cmd.Wait() }()
	select {
	case err = <-done:
	case <-time.After(120 * time.Second):
		cmd.Process.Kill()
		<-done
		t.Fatalf("mpirun %v timed out\nstdout:\n%s\nstderr:\n%s", args, stdout.String(), stderr.String())
	}
	return stdout.String(), stderr.String(), err
}

// caseArgs renders a conformance case as refit flags.
func caseArgs(c transporttest.Case) []string {
	return []string{"--shape", c.Shape, "--dtype", c.DType,
		"--src-mesh", c.SrcMesh, "--src-placements", c.SrcPl, "--src-ranks", mesh.FormatRanks(c.Src.Mesh().Ranks()),
		"--dst-mesh", c.DstMesh, "--dst-placements", c.DstPl, "--dst-ranks", mesh.FormatRanks(c.Dst.Mesh().Ranks())}
}

// TestConformanceMPI runs every pair of testdata/reshard_pairs.txt, in
// every rank arrangement (disjoint, permuted, overlapping), on every route,
// as a real mpirun job with --check. Small tensors also run with tiny chunks
// so that they cross many rounds.
func TestConformanceMPI(t *testing.T) {
	pairs, err := transporttest.ReadPairs("../../testdata/reshard_pairs.txt")
	if err != nil {
		t.Fatal(err)
	}
	cases, err := transporttest.Cases(pairs)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cases {
		name := fmt.Sprintf("line%d/%s", c.Line, c.Arrangement)
		t.Run(name, func(t *testing.T) {
			args := append([]string{"run", "--route", "all", "--check", "--json", "--iters", "1", "--warmup", "0"}, caseArgs(c)...)
			if c.Src.Bytes() <= 64<<10 {
				args = append(args, "--chunk-bytes", "40", "--staging-bytes", "160")
			}
			// half the cases pack strided boxes through staging instead of
			// moving them in place with MPI datatypes.
			var env []string
			if c.Line%2 == 1 {
				env = []string{"M2N_MPI_INPLACE=0"}
			}
			stdout, stderr, err := mpirunRefit(t, c.World(), env, args...)
			if err != nil {
				t.Fatalf("%v: %v\nstdout:\n%s\nstderr:\n%s", c, err, stdout, stderr)
			}
			var rep runReport
			if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
				t.Fatalf("%v: %v\n%s", c, err, stdout)
			}
			if len(rep.Routes) != len(routeBuilders) {
				t.Fatalf("%v: %d routes ran, want %d", c, len(rep.Routes), len(routeBuilders))
			}
			for _, r := range rep.Routes {
				if r.Check != "passed" {
					t.Errorf("%v: route %s: check %s", c, r.Route, r.Check)
				}
			}
		})
	}
}

// TestRunFailsOnWrongByte corrupts one received byte on one destination
// (the test-only M2N_FAULT_CORRUPT switch) and expects the job to fail,
// naming the rank, the element, and the expected and received values.
func TestRunFailsOnWrongByte(t *testing.T) {
	args := []string{"run", "--shape", "16x8", "--dtype", "bf16", "--src-mesh", "4", "--src-placements", "S0",
		"--dst-mesh", "2x2", "--dst-placements", "R,S1", "--check", "--iters", "1", "--warmup", "0"}
	stdout, stderr, err := mpirunRefit(t, 8, []string{"M2N_FAULT_CORRUPT=6:37"}, args...)
	if err == nil {
		t.Fatalf("a corrupted byte passed the check\n%s", stdout)
	}
	// byte 37 of rank 6 (coordinate (1,0): rows 0-15, columns 0-3) is
	// element 18 of its 16x4 buffer: global [4 2].
	want := "check FAILED: rank 6: element [4 2] holds 0x"
	if !strings.Contains(stdout, want) {
		t.Errorf("report lacks %q\nstdout:\n%s\nstderr:\n%s", want, stdout, stderr)
	}
	if !strings.Contains(stdout, "(1 wrong elements on this rank)") {
		t.Errorf("report does not count one wrong element:\n%s", stdout)
	}
}

func TestRunWrongWorldSize(t *testing.T) {
	_, stderr, err := mpirunRefit(t, 4, nil, "run", "--shape", "16", "--src-mesh", "4", "--src-placements", "S0",
		"--dst-mesh", "4", "--dst-placements", "S0")
	if err == nil {
		t.Fatal("a job of 4 ranks ran meshes that need 8")
	}
	if !strings.Contains(stderr, "the meshes need a communicator of 8 ranks; this job has 4") {
		t.Errorf("stderr:\n%s", stderr)
	}
}

// TestSlurmScript runs jobs/slurm/refit.sbatch with a stand-in srun that
// hands its ranks to mpirun, so the script's parameters and the command it
// builds are checked without a Slurm cluster.
func TestSlurmScript(t *testing.T) {
	mpitest.Require(t)
	dir := t.TempDir()
	launcher, _ := filepath.Abs("../../scripts/mpirun.sh")
	fake := "#!/usr/bin/env bash\n# stand-in srun: --mpi=pmix -n N prog args...\n" +
		"[ \"$1\" = --mpi=pmix ] || { echo \"srun: want --mpi=pmix first, got $1\" >&2; exit 9; }\n" +
		"[ \"$2\" = -n ] || { echo \"srun: want -n, got $2\" >&2; exit 9; }\n" +
		"n=$3; shift 3\nexec " + launcher + " -np \"$n\" \"$@\"\n"
	if err := os.WriteFile(filepath.Join(dir, "srun"), []byte(fake), 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("bash", "../../jobs/slurm/refit.sbatch")
	cmd.Env = append(os.Environ(), "PATH="+dir+":"+os.Getenv("PATH"), "REFIT="+refitBin, "SLURM_NTASKS=6",
		"SHAPE=12x6", "DTYPE=i32", "SRC_MESH=2", "SRC_PL=S1", "DST_MESH=2x2", "DST_PL=S0,R", "ITERS=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	for _, want := range []string{"route flat:", "route agbcast:", "check passed", "destination: 12x6 i32 on 2x2[2-5] S0,R"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}
