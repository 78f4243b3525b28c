package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/m2n-dev/m2n/internal/testutil/mpitest"
	"github.com/m2n-dev/m2n/mesh"
	"github.com/m2n-dev/m2n/perf"
	"github.com/m2n-dev/m2n/routespec"
	"github.com/m2n-dev/m2n/transport/transporttest"
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

// TestConformanceMPI runs every pair of internal/conformance/reshard_pairs.txt, in
// every rank arrangement (disjoint, permuted, overlapping), as real mpirun
// jobs with --check: flat, agbcast, hier and auto with all ranks in one
// domain, then hier and auto again with the destination ranks emulated as
// 2 and as 4 domains. Small tensors run with tiny chunks so that they cross
// many rounds, and half the cases pack strided boxes through staging
// instead of moving them in place with MPI datatypes.
func TestConformanceMPI(t *testing.T) {
	cases, err := transporttest.DefaultCases(13)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cases {
		for _, domains := range []int{1, 2, 4} {
			name := fmt.Sprintf("line%d/%s/domains%d", c.Line, c.Arrangement, domains)
			t.Run(name, func(t *testing.T) {
				routes := "all,auto"
				want := append(append([]string(nil), routespec.Names...), "auto")
				args := []string{"run", "--check", "--json", "--iters", "1", "--warmup", "0"}
				if domains > 1 {
					n := c.Dst.Mesh().Size()
					routes, want = "hier,auto", []string{"hier", "auto"}
					args = append(args, "--dst-domain-size", fmt.Sprint((n+domains-1)/domains))
				}
				args = append(append(args, "--route", routes), caseArgs(c)...)
				if c.Src.Bytes() <= 64<<10 {
					args = append(args, "--chunk-bytes", "40", "--staging-bytes", "320")
				}
				var env []string
				if c.Line%2 == 1 {
					env = []string{"M2N_MPI_INPLACE=0"}
				}
				stdout, stderr, err := mpirunRefit(t, c.World(), env, args...)
				if err != nil {
					t.Fatalf("%v: %v\nstdout:\n%s\nstderr:\n%s", c, err, stdout, stderr)
				}
				var rep perf.RunReport
				if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
					t.Fatalf("%v: %v\n%s", c, err, stdout)
				}
				if len(rep.Routes) != len(want) {
					t.Fatalf("%v: %d routes ran, want %d", c, len(rep.Routes), len(want))
				}
				for i, r := range rep.Routes {
					if !strings.HasPrefix(r.Route, want[i]) {
						t.Errorf("%v: route %d is %s, want %s", c, i, r.Route, want[i])
					}
					if r.Check != "passed" {
						t.Errorf("%v: route %s: check %s", c, r.Route, r.Check)
					}
				}
			})
		}
	}
}

// TestTrafficAccounting checks the paper's claims on real mpirun runs, from
// the bytes each rank counted by link class: 4 sources in one domain move a
// tensor of B bytes to DP4 x TP2 [R, S1] destinations in 2 domains of 4.
// With hier the sources inject B exactly once and each destination domain
// receives B once over the network; with flat the sources inject rho*B;
// with agbcast the root sends B over the network, once, and every
// destination receives the whole tensor.
func TestTrafficAccounting(t *testing.T) {
	const B = 64 * 32 * 2
	args := []string{"run", "--shape", "64x32", "--dtype", "bf16", "--src-mesh", "4", "--src-placements", "S0",
		"--dst-mesh", "4x2", "--dst-placements", "R,S1", "--src-domain-size", "4", "--dst-domain-size", "4",
		"--route", "all", "--check", "--json", "--iters", "1", "--warmup", "0", "--chunk-bytes", "256", "--staging-bytes", "2KiB"}
	stdout, stderr, err := mpirunRefit(t, 12, nil, args...)
	if err != nil {
		t.Fatalf("%v\nstdout:\n%s\nstderr:\n%s", err, stdout, stderr)
	}
	var rep perf.RunReport
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
		t.Fatalf("%v\n%s", err, stdout)
	}
	routes := map[string]perf.RouteReport{}
	for _, r := range rep.Routes {
		if r.Check != "passed" {
			t.Fatalf("route %s: check %s", r.Route, r.Check)
		}
		routes[r.Route] = r
	}
	sum := func(rr perf.RouteReport, pick func(perf.RankTraffic) bool, val func(perf.RankTraffic) int64) int64 {
		var n int64
		for _, x := range rr.Ranks {
			if pick(x) {
				n += val(x)
			}
		}
		return n
	}
	isSrc := func(x perf.RankTraffic) bool { return x.Role == "src" }
	netOut := func(x perf.RankTraffic) int64 { return x.SentNetwork }
	if got := sum(routes["hier"], isSrc, netOut); got != B {
		t.Errorf("hier: sources inject %d bytes, want B = %d", got, B)
	}
	domains := map[int]int64{}
	for _, x := range routes["hier"].Ranks {
		if x.Role == "dst" {
			domains[x.Domain] += x.RecvNetwork
		}
	}
	if len(domains) != 2 {
		t.Fatalf("hier: destinations in %d domains, want 2", len(domains))
	}
	for d, got := range domains {
		if got != B {
			t.Errorf("hier: domain %d receives %d bytes over the network, want B = %d", d, got, B)
		}
	}
	if got := sum(routes["flat"], isSrc, netOut); got != 4*B {
		t.Errorf("flat: sources inject %d bytes, want rho*B = %d", got, 4*B)
	}
	ag := routes["agbcast"]
	if got := ag.Ranks[0].SentNetwork; got != B {
		t.Errorf("agbcast: the root sends %d bytes over the network, want B = %d", got, B)
	}
	if got := sum(ag, isSrc, netOut); got != B {
		t.Errorf("agbcast: sources send %d bytes over the network in all, want the root's B = %d", got, B)
	}
	for _, x := range ag.Ranks {
		if x.Role == "dst" && x.Recv != B {
			t.Errorf("agbcast: destination %d receives %d bytes, want the whole tensor, %d", x.Rank, x.Recv, B)
		}
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

// TestSlurmSyncScript runs jobs/slurm/sync.sbatch with a stand-in srun.
func TestSlurmSyncScript(t *testing.T) {
	mpitest.Require(t)
	dir := t.TempDir()
	launcher, _ := filepath.Abs("../../scripts/mpirun.sh")
	fake := "#!/usr/bin/env bash\n[ \"$1\" = --mpi=pmix ] && [ \"$2\" = -n ] || exit 9\nn=$3; shift 3\nexec " + launcher + " -np \"$n\" \"$@\"\n"
	if err := os.WriteFile(filepath.Join(dir, "srun"), []byte(fake), 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("bash", "../../jobs/slurm/sync.sbatch")
	cmd.Env = append(os.Environ(), "PATH="+dir+":"+os.Getenv("PATH"), "REFIT="+refitBin, "SLURM_NTASKS=8",
		"MODEL=llama-3.1-70b", "TRAIN=tp=2,pp=2", "GEN=tp=4", "SCALE=32", "LAYERS=2", "ITERS=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if !strings.Contains(string(out), "check passed") {
		t.Errorf("output lacks a passed check:\n%s", out)
	}
}

// TestSyncModels moves every tensor of scaled DeepSeek-V3, Qwen3-235B-A22B
// and Llama-3.1-70B from a pipeline-parallel Megatron-style trainer to a
// vLLM-style generator, fused weights moved in place through their views
// on both sides (linear_qkv, linear_fc1 and grouped experts on the trainer;
// qkv_proj, gate_up_proj and fused_qkv_a_proj on the generator), every
// element of every tensor checked on every destination. It also checks
// the memory accounting: every rank's staging stays within the staging
// bound of every stage it is in, and its peak resident memory grows by at
// most its share of the model plus its staging and scratch, plus the
// allowance stated below.
func TestSyncModels(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"deepseek-v3", []string{"--model", "deepseek-v3", "--scale", "64", "--layers", "5", "--train", "tp=1,pp=2,ep=2,dp=2,first=3,last=2", "--gen", "tp=2,dp=2", "--mtp"}},
		{"qwen3-235b-a22b", []string{"--model", "qwen3-235b-a22b", "--scale", "16", "--layers", "4", "--train", "tp=2,pp=2,ep=2,etp=1", "--gen", "tp=2,dp=2"}},
		{"llama-3.1-70b", []string{"--model", "llama-3.1-70b", "--scale", "32", "--layers", "4", "--train", "tp=2,pp=2", "--gen", "tp=4"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"sync", "--check", "--json", "--iters", "1", "--warmup", "0", "--staging-bytes", "16MiB", "--chunk-bytes", "1MiB",
				"--dst-domain-size", "2", "--route", "auto"}, tc.args...)
			stdout, stderr, err := mpirunRefit(t, 8, nil, args...)
			if err != nil {
				t.Fatalf("%v\nstdout:\n%s\nstderr:\n%s", err, stdout, stderr)
			}
			var rep perf.SyncReport
			if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
				t.Fatalf("%v\n%s", err, stdout)
			}
			if rep.Check != "passed" || rep.Completed != entries(rep) || len(rep.Stages) != 2 {
				t.Fatalf("check %s, %d of %d entries completed, %d stages", rep.Check, rep.Completed, entries(rep), len(rep.Stages))
			}
			for _, r := range rep.Ranks {
				if r.Staging > r.Bound {
					t.Errorf("rank %d stages %d bytes, over its bound of %d", r.Rank, r.Staging, r.Bound)
				}
				// allowance: the Go runtime lets the heap grow to twice what
				// is live before collecting (GOGC=100), and plans,
				// schedules and programs live beside the model's bytes.
				budget := r.Share + r.Staging + r.Scratch
				if grew := r.Peak - r.Base; grew > 2*budget+32<<20 {
					t.Errorf("rank %d: peak memory grew by %d bytes for a share of %d, staging %d and scratch %d",
						r.Rank, grew, r.Share, r.Staging, r.Scratch)
				}
			}
		})
	}
}

// TestPipelineStages runs the paper's Example B for real: two stages of two
// trainer ranks each (world 0-1 and 2-3) reshard to one generator rank
// (world 4), each on its own communicator; the generator receives one full
// tensor per stage, each with its own contents.
func TestPipelineStages(t *testing.T) {
	stdout, stderr, err := mpirunRefit(t, 5, nil, "run", "--pp-stages", "2", "--shape", "8x6", "--dtype", "f32",
		"--src-mesh", "2", "--src-placements", "S0", "--dst-mesh", "1", "--dst-placements", "R",
		"--route", "all", "--check", "--iters", "1", "--warmup", "0")
	if err != nil {
		t.Fatalf("%v\nstdout:\n%s\nstderr:\n%s", err, stdout, stderr)
	}
	for _, want := range []string{"== stage 0 of 2: world ranks 0,1,4", "== stage 1 of 2: world ranks 2-4",
		"destination: 8x6 f32 on 1[2] R"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("output lacks %q:\n%s", want, stdout)
		}
	}
	if n := strings.Count(stdout, "check passed"); n != 6 {
		t.Errorf("%d routes passed their check, want 3 routes x 2 stages:\n%s", n, stdout)
	}
}

// faultArgs is a small multi-round job: hier with tiny chunks.
var faultArgs = []string{"run", "--shape", "64x64", "--dtype", "bf16", "--src-mesh", "4", "--src-placements", "S0",
	"--dst-mesh", "2x2", "--dst-placements", "R,S1", "--route", "hier", "--chunk-bytes", "256", "--staging-bytes", "2KiB",
	"--timeout", "4s", "--check", "--iters", "2"}

// TestFaultKilledRank kills rank 5 with SIGKILL in the middle of a transfer
// (round 1): the job must end non-zero within the timeout plus a few
// seconds, and the output must name the lost rank.
func TestFaultKilledRank(t *testing.T) {
	start := time.Now()
	stdout, stderr, err := mpirunRefit(t, 8, []string{"M2N_FAULT_KILL=5:1"}, faultArgs...)
	el := time.Since(start)
	if err == nil {
		t.Fatalf("the job survived a killed rank\n%s", stdout)
	}
	if el > 4*time.Second+10*time.Second {
		t.Errorf("the job took %v to fail, more than the 4s timeout plus 10s", el)
	}
	if out := stdout + stderr; !strings.Contains(out, "process rank 5") && !strings.Contains(out, "waiting for ranks [5]") {
		t.Errorf("the output does not name rank 5:\n%s", out)
	}
}

// TestFaultHungRank stops rank 5 for good at round 1 without killing it:
// only timeouts can end that; the peers that wait for it must say so and
// abort the job within the timeout plus a few seconds.
func TestFaultHungRank(t *testing.T) {
	start := time.Now()
	stdout, stderr, err := mpirunRefit(t, 8, []string{"M2N_FAULT_HANG=5:1"}, faultArgs...)
	el := time.Since(start)
	if err == nil {
		t.Fatalf("the job survived a stuck rank\n%s", stdout)
	}
	if el > 4*time.Second+10*time.Second {
		t.Errorf("the job took %v to fail, more than the 4s timeout plus 10s", el)
	}
	// The rank that speaks names rank 5 among those it waited for; it may
	// name a rank that was itself waiting on 5 too (seen under load: a
	// destination waiting on [5 7], whose notice stopped rank 7 before its
	// own timer ran out), which is what it saw.
	if !regexp.MustCompile(`timed out after 4s waiting for ranks \[([0-9]+ )*5( [0-9]+)*\]`).MatchString(stderr) {
		t.Errorf("no rank names rank 5 as one it waits for:\n%s", stderr)
	}
}

// TestFaultDifferentLayout starts one rank with a different destination
// layout (an MPMD launch): every rank fails with the agreement error, which
// names the rank and the field, and nothing hangs.
func TestFaultDifferentLayout(t *testing.T) {
	mpitest.Require(t)
	common := []string{"run", "--shape", "16x8", "--dtype", "bf16", "--src-mesh", "4", "--src-placements", "S0",
		"--dst-mesh", "2x2", "--check", "--iters", "1", "--warmup", "0", "--timeout", "20s"}
	args := append(append([]string{refitBin}, common...), "--dst-placements", "R,S1", ":", "-np", "1", refitBin)
	args = append(append(args, common...), "--dst-placements", "R,S0")
	cmd, err := mpitest.Command(7, args...)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("ranks with different layouts ran:\n%s", out)
	}
	if el := time.Since(start); el > 15*time.Second {
		t.Errorf("took %v", el)
	}
	// the ranks agree on their flags before anything else.
	want := `refit: ranks disagree: rank 7 has flag --dst-placements R,S0, rank 0 has R,S1 (ranks differing from rank 0: [7])`
	if n := strings.Count(string(out), want); n != 1 {
		t.Errorf("the agreement error appears %d times, want once:\n%s", n, out)
	}
}

// TestFaultShortBuffer gives rank 5 a destination buffer one byte short:
// the job fails before any transfer, every rank with the same message.
func TestFaultShortBuffer(t *testing.T) {
	stdout, stderr, err := mpirunRefit(t, 8, []string{"M2N_FAULT_SHORT_DST=5"}, "run", "--shape", "16x8", "--dtype", "bf16",
		"--src-mesh", "4", "--src-placements", "S0", "--dst-mesh", "2x2", "--dst-placements", "R,S1", "--check", "--iters", "1", "--warmup", "0")
	if err == nil {
		t.Fatalf("a short buffer passed\n%s", stdout)
	}
	want := `refit: invalid input: rank 5, tensor "tensor0": destination buffer is too short: 127 bytes, the layout needs 128`
	if strings.Count(stderr, want) != 1 || strings.Contains(stdout, "route flat") {
		t.Errorf("want %q once and no route report\nstdout:\n%s\nstderr:\n%s", want, stdout, stderr)
	}
}

// TestFaultWireVerifyAtomic flips one byte on the wire into rank 5:
// --verify fails the call, naming the tensor, the box and both ranks, and
// with --atomic every destination still holds its previous bytes.
func TestFaultWireVerifyAtomic(t *testing.T) {
	stdout, stderr, err := mpirunRefit(t, 8, []string{"M2N_FAULT_WIRE=5"}, "run", "--shape", "16x8", "--dtype", "bf16",
		"--src-mesh", "4", "--src-placements", "S0", "--dst-mesh", "2x2", "--dst-placements", "R,S1",
		"--verify", "--atomic", "--check", "--iters", "1", "--warmup", "0")
	if err == nil {
		t.Fatalf("a corrupted byte passed --verify\n%s", stdout)
	}
	for _, want := range []string{`refit: tensor "tensor0": box [0:4, 4:8) from rank 0 to rank 5 arrived with CRC-32C`,
		"atomic: every destination still holds its previous bytes"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr)
		}
	}
	// and without the fault the same verified, atomic call passes its check.
	stdout, stderr, err = mpirunRefit(t, 8, nil, "run", "--shape", "16x8", "--dtype", "bf16",
		"--src-mesh", "4", "--src-placements", "S0", "--dst-mesh", "2x2", "--dst-placements", "R,S1",
		"--verify", "--atomic", "--check", "--route", "all", "--iters", "2")
	if err != nil || strings.Count(stdout, "check passed") != 3 {
		t.Fatalf("%v\nstdout:\n%s\nstderr:\n%s", err, stdout, stderr)
	}
}

// TestSoak runs 300 consecutive checked reshards in one job and checks that
// nothing accumulates: no more pending MPI requests than the session's three
// standing receives (its abort, roll-call and leave listeners), no communicator
// left over, no goroutine, and no growth of the live Go heap beyond a
// megabyte (the plans and schedules of 250 calls would be far more).
func TestSoak(t *testing.T) {
	stdout, stderr, err := mpirunRefit(t, 16, nil, "soak", "--count", "300", "--progress", "0", "--json")
	if err != nil {
		t.Fatalf("%v\nstdout:\n%s\nstderr:\n%s", err, stdout, stderr)
	}
	var rep struct {
		Count int
		Ranks []struct {
			Rank                              int
			Heap, HeapAfter                   int64
			Goroutines, GoroutinesAfter       int64
			Requests, RequestsAfter           int64
			Communicators, CommunicatorsAfter int64
		}
	}
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
		t.Fatalf("%v\n%s", err, stdout)
	}
	if rep.Count != 300 || len(rep.Ranks) != 16 {
		t.Fatalf("report of %d reshards over %d ranks", rep.Count, len(rep.Ranks))
	}
	for _, r := range rep.Ranks {
		if r.RequestsAfter != r.Requests || r.RequestsAfter > 3 || r.CommunicatorsAfter != r.Communicators || r.GoroutinesAfter != r.Goroutines {
			t.Errorf("rank %d: requests %d -> %d, communicators %d -> %d, goroutines %d -> %d", r.Rank, r.Requests,
				r.RequestsAfter, r.Communicators, r.CommunicatorsAfter, r.Goroutines, r.GoroutinesAfter)
		}
		if g := r.HeapAfter - r.Heap; g > 1<<20 {
			t.Errorf("rank %d: live Go heap grew by %d bytes", r.Rank, g)
		}
	}
}
