package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/m2n-dev/m2n/perf"
)

// entries returns how many entries a sync moves: its tensors, pieces
// counted one by one (the stages' counts).
func entries(rep perf.SyncReport) int {
	n := 0
	for _, s := range rep.Stages {
		n += s.Tensors
	}
	return n
}

// TestSyncArchitectures refits a scaled model of every architecture m2n
// lays out (the framework suite's configs: testdata/frameworks/models),
// on parallel configurations the suite checks element by element against
// the frameworks (vLLM's tp above the kv heads, DP without EP, uneven EP,
// sequence-parallel MoE, independent engines; Megatron's padded
// vocabulary and etp = tp), into a bf16 generator and an FP8 one (block
// scales where the blocks are the checkpoint's, row scales for GQA heads
// of 4 or 8 rows; gpt-oss is refused), as real mpirun jobs of up to 8
// ranks with every element (and scale) of every tensor checked.
func TestSyncArchitectures(t *testing.T) {
	for _, tc := range []struct {
		name, config, train, gen string
		np                       int
		mtp                      bool
		fp8                      string // "": bf16 only
	}{
		{"llama-gen-tp-above-kv", "llama-tiny", "tp=2,dp=2", "tp=4", 8, false, "row"},
		{"qwen2", "qwen2-tiny", "tp=2", "tp=2", 4, false, "row"},
		{"qwen3-tied", "qwen3-tied", "tp=2,pp=2", "tp=2,dp=2", 8, false, "row"},
		{"qwen3_moe-uneven-ep", "qwen3moe-tiny", "dp=2,ep=2", "tp=2,dp=3,ep=6", 8, false, "row"},
		{"deepseek_v3-sp-moe", "deepseek-tiny", "tp=2,dp=2,ep=4,etp=1", "tp=2,dp=2,ep=4", 8, true, "block"},
		{"deepseek_v3-q-lora-null", "deepseek-lite", "tp=2", "tp=4", 6, false, ""},
		{"kimi_k2", "kimi-tiny", "dp=2,ep=2", "tp=2,dp=2,ep=4", 6, false, "block"},
		{"glm4_moe", "glm-tiny", "tp=2,dp=2,ep=2", "tp=2,dp=2,ep=4", 8, false, "row"},
		{"gpt_oss-dp", "gptoss-tiny", "tp=2,dp=2,ep=2", "tp=2,dp=2", 8, false, ""},
		{"gpt_oss-ep", "gptoss-tiny", "tp=2,ep=2,etp=1", "tp=2,dp=2,ep=4", 6, false, ""},
		{"mixtral-engines", "mixtral-tiny", "dp=2,ep=2", "tp=2,engines=2", 6, false, "row"},
	} {
		dsts := []string{""}
		if tc.fp8 != "" {
			dsts = append(dsts, tc.fp8)
		}
		for _, dst := range dsts {
			name := tc.name + "/bf16"
			if dst != "" {
				name = tc.name + "/e4m3-" + dst
			}
			t.Run(name, func(t *testing.T) {
				args := []string{"sync", "--model", filepath.Join(suiteDir, "models", tc.config+".json"), "--train", tc.train, "--gen", tc.gen,
					"--check", "--json", "--iters", "1", "--warmup", "0", "--route", "auto"}
				if tc.mtp {
					args = append(args, "--mtp")
				}
				if dst != "" {
					args = append(args, "--dst-dtype", "e4m3", "--fp8-scale", dst)
				}
				stdout, stderr, err := mpirunRefit(t, tc.np, nil, args...)
				if err != nil {
					t.Fatalf("%v\nstdout:\n%s\nstderr:\n%s", err, stdout, stderr)
				}
				var rep perf.SyncReport
				if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
					t.Fatalf("%v\n%s", err, stdout)
				}
				if rep.Check != "passed" || rep.Completed != entries(rep) || (dst != "") != (rep.FP8Tensors > 0) {
					t.Fatalf("check %s, %d of %d entries completed, %d tensors in FP8", rep.Check, rep.Completed, entries(rep), rep.FP8Tensors)
				}
			})
		}
	}
	// gpt-oss into an FP8 generator, and int8 weights into e4m3, are
	// refused on every rank, naming the tensor (issue 23.3) or the model.
	for _, tc := range []struct {
		config, train, gen, want string
		np                       int
	}{
		{"gptoss-tiny", "tp=2", "tp=2", "m2n does not convert gpt-oss", 4},
	} {
		_, stderr, err := mpirunRefit(t, tc.np, nil, "sync", "--model", filepath.Join(suiteDir, "models", tc.config+".json"), "--train", tc.train,
			"--gen", tc.gen, "--dst-dtype", "e4m3", "--check")
		if err == nil || !strings.Contains(stderr, tc.want) {
			t.Errorf("%s to e4m3: %v, want %q\n%s", tc.config, err, tc.want, stderr)
		}
	}
}

// TestSyncInt8ToE4M3: refit sync --dst-dtype e4m3 of a model whose weights
// are int8 is refused, naming the tensor and its dtype, not "check passed"
// with nothing converted (issue 23.3).
func TestSyncInt8ToE4M3(t *testing.T) {
	list := filepath.Join(t.TempDir(), "int8.json")
	if err := os.WriteFile(list, []byte(`{"tensors":[{"name":"model.embed_tokens.weight","shape":[64,8],"dtype":"bf16"},
		{"name":"model.layers.0.mlp.down_proj.weight","shape":[8,8],"dtype":"int8"}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	_, stderr, err := mpirunRefit(t, 2, nil, "sync", "--model", list, "--train", "tp=1", "--gen", "tp=1", "--dst-dtype", "e4m3", "--check")
	if err == nil || !strings.Contains(stderr, "tensor model.layers.0.mlp.down_proj.weight is i8") {
		t.Errorf("int8 to e4m3: %v\n%s", err, stderr)
	}
}
