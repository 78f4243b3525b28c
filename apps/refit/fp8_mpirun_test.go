package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/m2n-dev/m2n/model"
	"github.com/m2n-dev/m2n/perf"
	"github.com/m2n-dev/m2n/transport/transporttest"
)

// TestFP8ConformanceMPI runs `refit run --dst-dtype e4m3 --check` as real
// mpirun jobs on every FP8 pair (every 2-D and 3-D pair of the conformance
// pairs file in its own dtype, f32 or bf16, in every rank arrangement; the
// f32 ones again with the source in bf16, disjoint; and the pairs of
// fp8_pairs.txt, whose shard boundaries cut 128x128 blocks, in every
// arrangement): flat, hier and auto in one job, the destination as one
// domain or, every other case, as two (hier forwards FP8 bytes around the
// ring), the scale mode cycling through block, row and tensor, small
// tensors in tiny chunks. --check compares every destination byte and
// scale with quantizing the whole pattern tensor at once.
func TestFP8ConformanceMPI(t *testing.T) {
	pairs, err := transporttest.FP8Pairs()
	if err != nil {
		t.Fatal(err)
	}
	main, err := transporttest.DefaultPairs()
	if err != nil {
		t.Fatal(err)
	}
	inMain := map[string]string{} // pair -> its dtype in the conformance file
	for _, p := range main {
		q := p
		q.DType = ""
		inMain[q.String()] = p.DType
	}
	k := 0
	for _, p := range pairs {
		q := p
		q.DType = ""
		arrangements := transporttest.Arrangements
		if dt, ok := inMain[q.String()]; ok && dt != p.DType {
			arrangements = []transporttest.Arrangement{transporttest.Disjoint} // the bf16 override of an f32 pair
		}
		for _, a := range arrangements {
			c, err := p.Layouts(a)
			if err != nil {
				t.Fatal(err)
			}
			domains := 1 + k%2
			mode := []string{"block", "row", "tensor"}[k%3]
			k++
			t.Run(fmt.Sprintf("%s/%s/%s/domains%d/%s", strings.ReplaceAll(p.String(), " ", "_"), p.DType, a, domains, mode), func(t *testing.T) {
				args := []string{"run", "--check", "--json", "--iters", "1", "--warmup", "1", "--route", "flat,hier,auto",
					"--dst-dtype", "e4m3", "--fp8-scale", mode}
				if domains > 1 {
					args = append(args, "--dst-domain-size", fmt.Sprint((c.Dst.Mesh().Size()+1)/2))
				}
				args = append(args, caseArgs(c)...)
				if c.Src.Bytes() <= 64<<10 {
					args = append(args, "--chunk-bytes", "40", "--staging-bytes", "320")
				}
				stdout, stderr, err := mpirunRefit(t, c.World(), nil, args...)
				if err != nil {
					t.Fatalf("%v: %v\nstdout:\n%s\nstderr:\n%s", c, err, stdout, stderr)
				}
				var rep perf.RunReport
				if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
					t.Fatalf("%v: %v\n%s", c, err, stdout)
				}
				if len(rep.Routes) != 3 || !strings.Contains(rep.Destination, "fp8e4m3") || rep.FP8Scale == "" {
					t.Fatalf("%v: %d routes, destination %s, scales %q", c, len(rep.Routes), rep.Destination, rep.FP8Scale)
				}
				for _, r := range rep.Routes {
					if r.Check != "passed" || strings.Contains(r.Route, "agbcast") {
						t.Errorf("%v: route %s: check %s", c, r.Route, r.Check)
					}
				}
			})
		}
	}
}

// TestFP8NaN puts a NaN into one source rank's part (M2N_FAULT_NAN): the
// call fails on every rank, naming the tensor and the element's global
// index, and with --atomic every destination, scales included, still holds
// its previous bytes; the same job without the fault passes its check.
func TestFP8NaN(t *testing.T) {
	// 300x200 over 4 rows-shards of 75: rank 2 holds rows [150, 225);
	// its element 1234 is row 150+6, column 34.
	args := []string{"run", "--shape", "300x200", "--dtype", "bf16", "--src-mesh", "4", "--src-placements", "S0",
		"--dst-mesh", "2x2", "--dst-placements", "R,S1", "--dst-dtype", "e4m3", "--route", "hier", "--dst-domain-size", "2",
		"--check", "--atomic", "--iters", "1", "--warmup", "0"}
	stdout, stderr, err := mpirunRefit(t, 8, []string{"M2N_FAULT_NAN=2:1234"}, args...)
	if err == nil {
		t.Fatalf("a NaN passed\n%s", stdout)
	}
	want := `refit: invalid input: tensor "tensor0": element [156 34] (flat index 31234) is NaN on source rank 2: FP8 quantization refuses non-finite weights; atomic: every destination still holds its previous bytes`
	if !strings.Contains(stderr, want) || strings.Contains(stdout, "check passed") {
		t.Errorf("want %q\nstdout:\n%s\nstderr:\n%s", want, stdout, stderr)
	}
	if stdout, stderr, err := mpirunRefit(t, 8, nil, args...); err != nil || !strings.Contains(stdout, "check passed") {
		t.Fatalf("%v\nstdout:\n%s\nstderr:\n%s", err, stdout, stderr)
	}
}

// TestFP8Sync refits a scaled DeepSeek-V3 (4 layers, the last two MoE,
// two pipeline stages) into an FP8 generator: every weight vLLM's FP8 path
// quantizes (the linear and expert weights of the decoder layers), fused
// ones (gate_up_proj, fused_qkv_a_proj) through their views, as e4m3 with
// its block scales; the embedding, LM head, norms, router and its bias as
// they are; every element and scale of every tensor checked.
func TestFP8Sync(t *testing.T) {
	stdout, stderr, err := mpirunRefit(t, 8, nil, "sync", "--model", "deepseek-v3", "--scale", "64", "--layers", "4",
		"--train", "tp=1,pp=2,ep=2,dp=2", "--gen", "tp=2,dp=2", "--dst-dtype", "e4m3", "--check", "--iters", "2", "--json")
	if err != nil {
		t.Fatalf("%v\nstdout:\n%s\nstderr:\n%s", err, stdout, stderr)
	}
	var rep perf.SyncReport
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
		t.Fatalf("%v\n%s", err, stdout)
	}
	m, err := model.Load("deepseek-v3", model.LoadOptions{Scale: 64, Layers: 4})
	if err != nil {
		t.Fatal(err)
	}
	var fp8s int
	var fp8Bytes int64
	for _, x := range m.Tensors {
		if x.FP8 {
			fp8s++
			fp8Bytes += x.Bytes()
		}
	}
	if rep.Check != "passed" || rep.Completed != entries(rep) || rep.FP8 != "block" || rep.FP8Tensors != fp8s || rep.DstBytes != rep.Bytes-fp8Bytes/2 {
		t.Errorf("check %s, %d of %d entries completed, %d tensors in FP8 (%s; want %d), generator holds %d bytes of %d (want %d)",
			rep.Check, rep.Completed, entries(rep), rep.FP8Tensors, rep.FP8, fp8s, rep.DstBytes, rep.Bytes, rep.Bytes-fp8Bytes/2)
	}
}

// TestFP8Flags: the conversion flags are checked like the others, on every
// rank before anything runs.
func TestFP8Flags(t *testing.T) {
	base := []string{"run", "--shape", "16x8", "--src-mesh", "2", "--src-placements", "S0", "--dst-mesh", "2", "--dst-placements", "S1"}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--dtype", "bf16", "--fp8-scale", "row"}, `--fp8-scale "row": it needs --dst-dtype e4m3`},
		{[]string{"--dtype", "bf16", "--dst-dtype", "f16"}, `--dst-dtype "f16": the one conversion in flight is to e4m3`},
		{[]string{"--dtype", "bf16", "--dst-dtype", "e4m3", "--fp8-scale", "column"}, `--fp8-scale "column": unknown fp8 scaling mode "column": want block, row or tensor`},
		{[]string{"--dtype", "f16", "--dst-dtype", "e4m3"}, "dtype fp8e4m3, want f16: source and destination dtypes differ, and the only conversion in flight is bf16 or f32 to fp8e4m3"},
		{[]string{"--dtype", "bf16", "--dst-dtype", "e4m3", "--route", "agbcast"}, "route agbcast, want flat or hier"},
	} {
		stdout, stderr, err := mpirunRefit(t, 4, nil, append(append([]string(nil), base...), tc.args...)...)
		if err == nil || !strings.Contains(stderr, tc.want) {
			t.Errorf("%v: %v, want %q\nstdout:\n%s\nstderr:\n%s", tc.args, err, tc.want, stdout, stderr)
		}
	}
}
