package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

// TestAgreedFieldsCoverJobs checks that nothing that changes what a job
// runs or reports escapes the ranks' agreement at Join: every flag of
// every SPMD command but --log-level and --help (and --listen and
// --connect, which differ between a two-job session's jobs by design: the
// session's ranks agree on everything else), and every M2N_ variable
// set but the test-only fault switches, the log level and the test
// harness's own.
func TestAgreedFieldsCoverJobs(t *testing.T) {
	t.Setenv("M2N_CHUNK_BYTES", "1MiB")
	t.Setenv("M2N_SOMETHING_NEW", "x")
	t.Setenv("M2N_FAULT_WIRE", "3")
	t.Setenv("M2N_LOG_LEVEL", "debug")
	t.Setenv("M2N_MPITEST_MARK", "y")
	root := newRoot()
	for _, name := range []string{"run", "bench", "sweep", "sync", "soak"} {
		cmd, _, err := root.Find([]string{name})
		if err != nil || cmd.Name() != name {
			t.Fatalf("no command %s: %v", name, err)
		}
		got := map[string]string{}
		for _, f := range agreedFields(cmd) {
			got[f.Name] = f.Value
		}
		cmd.Flags().VisitAll(func(fl *pflag.Flag) {
			if _, ok := got["flag --"+fl.Name]; !ok && fl.Name != "log-level" && fl.Name != "help" && fl.Name != "listen" && fl.Name != "connect" {
				t.Errorf("%s: flag --%s is not agreed", name, fl.Name)
			}
		})
		if _, ok := got["flag --log-level"]; ok {
			t.Errorf("%s: --log-level is agreed; it is this rank's own", name)
		}
		env := got["M2N_ environment"]
		for _, want := range []string{"M2N_CHUNK_BYTES=1MiB", "M2N_SOMETHING_NEW=x"} {
			if !strings.Contains(env, want) {
				t.Errorf("%s: %s is not agreed: %s", name, want, env)
			}
		}
		for _, own := range []string{"M2N_FAULT_WIRE", "M2N_LOG_LEVEL", "M2N_MPITEST_MARK"} {
			if strings.Contains(env, own) {
				t.Errorf("%s: %s is agreed; it is this rank's own: %s", name, own, env)
			}
		}
	}
}

// TestEnvironmentReadsAgreed scans the program's sources (every package
// refit links) for the environment variables they name and checks each
// against the agreement's rule: M2N_ variables are agreed at Join (the
// rule of agreedFields) unless they are among the documented exceptions;
// any other variable must be one whose value may differ between ranks
// without changing what runs: where the launcher numbered the rank, and
// where this host keeps its CUDA toolkit.
func TestEnvironmentReadsAgreed(t *testing.T) {
	notAgreed := map[string]string{
		"M2N_LOG_LEVEL": "the log level is this rank's own (logs are not the report)",
		"M2N_FAULT_":    "test-only fault switches, meant for one rank",
		"M2N_MPITEST":   "the test harness's own variables",
	}
	perRank := map[string]string{
		"OMPI_COMM_WORLD_RANK":       "the launcher's rank, read before MPI starts",
		"OMPI_COMM_WORLD_LOCAL_SIZE": "the launcher's count of ranks on this host, read when it interrupts the job",
		"PMIX_RANK":                  "the launcher's rank",
		"PMI_RANK":                   "the launcher's rank",
		"SLURM_PROCID":               "the launcher's rank",
		"CUDA_HOME":                  "where this host's CUDA toolkit lives (NVRTC's search path)",
		"CUDA_PATH":                  "where this host's CUDA toolkit lives (NVRTC's search path)",
	}
	name := regexp.MustCompile(`"((?:M2N|CUDA|OMPI|PMIX|PMI|SLURM|NCCL|NVIDIA)_[A-Z0-9_]*)"`)
	found := map[string]string{}
	err := filepath.Walk("../..", func(path string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		if info.IsDir() && (info.Name() == ".git" || info.Name() == "testdata" || info.Name() == "examples" || info.Name() == "bench") {
			return filepath.SkipDir
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") || strings.Contains(path, "internal/testutil/mpitest") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range name.FindAllStringSubmatch(string(b), -1) {
			found[m[1]] = path
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(found) < 10 {
		t.Fatalf("found only %d variables: the scan is broken: %v", len(found), found)
	}
	for v, path := range found {
		excused := false
		for prefix := range notAgreed {
			excused = excused || strings.HasPrefix(v, prefix)
		}
		switch {
		case strings.HasPrefix(v, "M2N_") && excused:
			if agreedEnv(t, v) {
				t.Errorf("%s (%s) is agreed, but it is this rank's own", v, path)
			}
		case strings.HasPrefix(v, "M2N_"):
			if !agreedEnv(t, v) {
				t.Errorf("%s (%s) is an M2N_ variable that the agreement leaves out, with no reason given", v, path)
			}
		default:
			if _, ok := perRank[v]; !ok {
				t.Errorf("%s (%s) is read but not agreed across ranks: agree on it, or say why it may differ", v, path)
			}
		}
	}
}

// agreedEnv reports whether agreedFields agrees on variable v.
func agreedEnv(t *testing.T, v string) bool {
	t.Setenv(v, "probe")
	fs := agreedFields(nil)
	return strings.Contains(fs[len(fs)-1].Value, v+"=probe")
}
