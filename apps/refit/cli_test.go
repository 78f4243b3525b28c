package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// refit runs the command in-process with args and returns its output and
// error.
func runRefit(t *testing.T, args ...string) (string, error) {
	t.Helper()
	root := newRoot()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs(args)
	err := root.Execute()
	return out.String(), err
}

// wantInOutput fails for each of wants that out lacks.
func wantInOutput(t *testing.T, out string, wants ...string) {
	t.Helper()
	for _, want := range wants {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q", want)
		}
	}
}

// wantUsageError runs refit with args and fails unless it returns a usage
// error of one line containing want.
func wantUsageError(t *testing.T, want string, args ...string) {
	t.Helper()
	_, err := runRefit(t, args...)
	var ue usageError
	if !errors.As(err, &ue) {
		t.Fatalf("got %v, want a usage error", err)
	}
	if !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "\n") {
		t.Errorf("error %q, want one line containing %q", err, want)
	}
}

func TestLayoutJSON(t *testing.T) {
	out, err := runRefit(t, "layout", "--shape", "13x2", "--mesh", "4x2", "--placements", "S0,S0", "--json")
	if err != nil {
		t.Fatal(err)
	}
	want := `{"ranks":[{"coord":[0,0],"rank":0,"shape":[2,2],"offset":[0,0]},{"coord":[0,1],"rank":1,"shape":[2,2],"offset":[2,0]},` +
		`{"coord":[1,0],"rank":2,"shape":[2,2],"offset":[4,0]},{"coord":[1,1],"rank":3,"shape":[2,2],"offset":[6,0]},` +
		`{"coord":[2,0],"rank":4,"shape":[2,2],"offset":[8,0]},{"coord":[2,1],"rank":5,"shape":[2,2],"offset":[10,0]},` +
		`{"coord":[3,0],"rank":6,"shape":[1,2],"offset":[12,0]},{"coord":[3,1],"rank":7,"shape":[0,2],"offset":[13,0]}]}` + "\n"
	if out != want {
		t.Errorf("got\n%s\nwant\n%s", out, want)
	}
}

func TestLayoutExplicitRanks(t *testing.T) {
	out, err := runRefit(t, "layout", "--shape", "4", "--mesh", "2", "--placements", "Shard(0)", "--ranks", "9,3", "--json")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, `"rank":9,"shape":[2],"offset":[0]`) || !strings.Contains(out, `"rank":3,"shape":[2],"offset":[2]`) {
		t.Errorf("ranks not in mesh order: %s", out)
	}
}

func TestPlanJSON(t *testing.T) {
	out, err := runRefit(t, "plan", "--shape", "4x2", "--src-mesh", "2", "--src-placements", "S0",
		"--dst-mesh", "2", "--dst-placements", "S1", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Fingerprint string `json:"fingerprint"`
		Transfers   []struct {
			Src, Dst      int
			Offset, Shape []int64
			Bytes         int64
		} `json:"transfers"`
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Fingerprint) != 16 {
		t.Errorf("fingerprint %q, want 16 hex digits", got.Fingerprint)
	}
	// rows [0,2) and [2,4) from ranks 0 and 1; column 0 to rank 2, column 1 to rank 3.
	type tr struct {
		src, dst int
		off      [2]int64
	}
	want := []tr{{0, 2, [2]int64{0, 0}}, {1, 2, [2]int64{2, 0}}, {0, 3, [2]int64{0, 1}}, {1, 3, [2]int64{2, 1}}}
	if len(got.Transfers) != len(want) {
		t.Fatalf("%d transfers, want %d: %s", len(got.Transfers), len(want), out)
	}
	for i, w := range want {
		g := got.Transfers[i]
		if g.Src != w.src || g.Dst != w.dst || g.Offset[0] != w.off[0] || g.Offset[1] != w.off[1] || g.Bytes != 8 {
			t.Errorf("transfer %d = %+v, want %+v with 8 bytes", i, g, w)
		}
	}
}

func TestPlanTable(t *testing.T) {
	out, err := runRefit(t, "plan", "--shape", "8x4", "--src-mesh", "4", "--src-placements", "S0",
		"--dst-mesh", "2x2", "--dst-placements", "R,S0")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"8 transfers, 256 bytes", "rank  sends  receives", "[6:8, 0:4)"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
}

// TestBadInput checks that every kind of bad input is a usage error whose
// one-line message names the flag and the value.
func TestBadInput(t *testing.T) {
	base := []string{"plan", "--shape", "8x4", "--src-mesh", "4", "--src-placements", "S0", "--dst-mesh", "2", "--dst-placements", "S0"}
	with := func(flag, value string) []string {
		args := append([]string(nil), base...)
		for i := range args {
			if args[i] == flag {
				args[i+1] = value
				return args
			}
		}
		return append(args, flag, value)
	}
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"unknown placement", with("--src-placements", "X1"), `--src-placements "X1": unknown placement "X1"`},
		{"shard dim out of range", with("--dst-placements", "S2"), `--dst-placements "S2": placement S2 on mesh axis 0: shard dim 2 is out of range`},
		{"placement count", with("--src-placements", "S0,R"), `--src-placements "S0,R": 2 placements [S0,R] for a 1-axis mesh 4`},
		{"repeated rank", with("--dst-ranks", "4,4"), `--dst-ranks "4,4": rank list "4,4" repeats rank 4`},
		{"rank count", with("--dst-ranks", "4-6"), `--dst-ranks "4-6": mesh 2 holds 2 ranks, got a list of 3`},
		{"negative size", with("--shape", "8x-4"), `--shape "8x-4"`},
		{"negative mesh", with("--src-mesh", "-4"), `--src-mesh "-4"`},
		{"partial", with("--src-placements", "Partial()"), `Partial placements (pending reductions) are not supported`},
		{"strided", with("--src-placements", "_StridedShard(0, split_factor=2)"), `strided shards (_StridedShard) are not supported`},
		{"bad dtype", with("--dtype", "f128"), `--dtype "f128": unknown dtype "f128"`},
		{"world too small", with("--world", "3"), `--world "3": the meshes reach rank 5`},
		{"missing shape", []string{"plan", "--src-mesh", "4"}, "--shape is required"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { wantUsageError(t, tc.want, tc.args...) })
	}
}

// TestExitStatus runs the real binary: bad input exits 2 with one line on
// stderr; good input exits 0.
func TestExitStatus(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "refit")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	cmd := exec.Command(bin, "plan", "--shape", "8", "--src-mesh", "2", "--src-placements", "S1", "--dst-mesh", "2", "--dst-placements", "S0")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 2 {
		t.Fatalf("exit %v, want status 2", err)
	}
	if lines := strings.Count(stderr.String(), "\n"); lines != 1 || !strings.HasPrefix(stderr.String(), "refit: --src-placements \"S1\"") {
		t.Errorf("stderr %q, want one line naming the flag", stderr.String())
	}
	if out, err := exec.Command(bin, "layout", "--shape", "4", "--mesh", "2", "--placements", "S0").CombinedOutput(); err != nil {
		t.Fatalf("good input failed: %v\n%s", err, out)
	}
	_ = os.Remove(bin)
}

// TestModelPaperNumbers: refit bound prints the paper's figures exactly.
func TestModelPaperNumbers(t *testing.T) {
	for rho, want := range map[string][]string{
		"2": {"flat     17.92 ms", "agbcast  143.36 ms", "hier     8.96 ms"},
		"4": {"flat     35.84 ms", "agbcast  143.36 ms", "hier     8.96 ms"},
		"8": {"flat     71.68 ms", "agbcast  143.36 ms", "hier     8.96 ms"},
	} {
		out, err := runRefit(t, "bound", "--bytes", "7168MB", "--sources", "16", "--dst-shards", "8", "--rho", rho,
			"--domains", "1", "--net-bw", "50GB/s", "--local-bw", "900GB/s")
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range want {
			if !strings.Contains(out, w) {
				t.Errorf("rho %s: output lacks %q:\n%s", rho, w, out)
			}
		}
		if !strings.Contains(out, "auto: hier predicts the least time") {
			t.Errorf("rho %s: auto does not pick hier:\n%s", rho, out)
		}
	}
	// the layout form derives B, Ns, K and rho: 16 sources, TP8 x DP4.
	out, err := runRefit(t, "bound", "--shape", "256x2048x7168", "--dtype", "bf16", "--src-mesh", "16", "--src-placements", "S0",
		"--dst-mesh", "4x8", "--dst-placements", "R,S1", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Problem struct {
			Bytes   float64
			Sources int
			Rho     int
			Domains []struct{ Ranks int }
		} `json:"problem"`
		Route string `json:"route"`
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatal(err)
	}
	if got.Problem.Bytes != 256*2048*7168*2 || got.Problem.Sources != 16 || got.Problem.Rho != 4 ||
		len(got.Problem.Domains) != 1 || got.Problem.Domains[0].Ranks != 32 || got.Route != "hier" {
		t.Errorf("layout form derived %+v, route %s", got.Problem, got.Route)
	}
}
