package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

type layoutsResult struct {
	Model   string `json:"model"`
	Tensors []struct {
		Name  string  `json:"name"`
		Shape []int64 `json:"shape"`
		DType string  `json:"dtype"`
		Stage int     `json:"stage"`
		Src   struct {
			Layout, Placements, Buffer string
			Offset                     int64
			Strides                    []int64
		} `json:"src"`
		Dst struct {
			Layout, Placements, Buffer string
			Offset                     int64
			Strides                    []int64
		} `json:"dst"`
	} `json:"tensors"`
	Count  int   `json:"count"`
	Params int64 `json:"params"`
	Bytes  int64 `json:"bytes"`
	Ranks  []struct {
		Rank int
		Role string
		Src  int64 `json:"src_bytes"`
		Dst  int64 `json:"dst_bytes"`
	} `json:"ranks"`
}

// TestLayoutsPublished: refit layouts --json lays out the three published
// configurations, with the published totals.
func TestLayoutsPublished(t *testing.T) {
	for _, tc := range []struct {
		model, train, gen string
		count             int
		params            int64
		ranks             int
		tensor, src, dst  string
	}{
		// vLLM's DP without EP splits the experts over all tp x dp ranks
		{"deepseek-v3", "tp=1,dp=32,pp=4,ep=16", "tp=8,dp=16", 967, 671026419200, 256,
			"model.layers.3.mlp.experts.gate_up_proj", "256x2x2048x7168 bf16 on 2x16[0-31] R,S0", "256x2x2048x7168 bf16 on 128[32-159] S2"},
		{"qwen3-235b-a22b", "tp=2,cp=2,dp=4,pp=4,ep=16,etp=1", "tp=8,dp=8", 1037, 235093634560, 128,
			"model.layers.0.self_attn.k_proj.weight", "4x128x4096 bf16 on 8x2[0-15] R,S0", "4x128x4096 bf16 on 8x4x2[16-79] R,S0,R"},
		{"deepseek-v3", "pp=16,dp=16,ep=16", "tp=32,dp=8", 967, 671026419200, 512,
			"lm_head.weight", "129280x7168 bf16 on 16[0-15] R", "129280x7168 bf16 on 8x32[16-271] R,S0"},
		// the command (case 1): the experts over tp x dp = 8 ranks, not R,S2
		{"qwen3-235b-a22b", "tp=4,pp=4,ep=8,dp=2,etp=1", "tp=4,dp=2", 1037, 235093634560, 40,
			"model.layers.0.mlp.experts.down_proj", "128x4096x1536 bf16 on 8[0-7] S0", "128x4096x1536 bf16 on 8[8-15] S2"},
	} {
		out, err := runRefit(t, "layouts", "--model", tc.model, "--train", tc.train, "--gen", tc.gen, "--json")
		if err != nil {
			t.Fatal(err)
		}
		var got layoutsResult
		if err := json.Unmarshal([]byte(out), &got); err != nil {
			t.Fatal(err)
		}
		if got.Count != tc.count || len(got.Tensors) < tc.count || got.Params != tc.params || got.Bytes < 2*tc.params || len(got.Ranks) != tc.ranks {
			t.Errorf("%s: count %d (%d listed), params %d, bytes %d, %d ranks", tc.model, got.Count, len(got.Tensors), got.Params, got.Bytes, len(got.Ranks))
		}
		var src, dst int64
		for _, r := range got.Ranks {
			src += r.Src
			dst += r.Dst
		}
		if src < got.Bytes || dst < got.Bytes {
			t.Errorf("%s: ranks hold %d and %d bytes, less than the model's %d", tc.model, src, dst, got.Bytes)
		}
		found := false
		for _, x := range got.Tensors {
			if x.Name == tc.tensor {
				found = true
				if x.Src.Layout != tc.src || x.Dst.Layout != tc.dst {
					t.Errorf("%s: %s -> %s, want %s -> %s", x.Name, x.Src.Layout, x.Dst.Layout, tc.src, tc.dst)
				}
			}
		}
		if !found {
			t.Errorf("%s: no %s", tc.model, tc.tensor)
		}
	}
}

func TestLayoutsText(t *testing.T) {
	out, err := runRefit(t, "layouts", "--model", "qwen3-235b-a22b", "--train", "tp=2,cp=2,dp=4,pp=4,ep=16,etp=1", "--gen", "tp=8,dp=8")
	if err != nil {
		t.Fatal(err)
	}
	wantInOutput(t, out,
		"model Qwen3-235B-A22B: 1037 tensors, 235093634560 parameters",
		"stage 0: layers [0, 23), 262 tensors; communicator of 80 ranks: world 0-15 (local 0-15) train, world 64-127 (local 16-79) generate",
		// Megatron pads 151936 rows to 152064 over tp=2 (76032 a rank), vLLM's tp=8 parts are 18992 rows: a piece between
		"model.embed_tokens.weight[75968:76032]",
		"stage 3: layers [71, 94)",
		"8192x4096 as 4x2048x4096",
		"linear_qkv.weight @8388608 [9437184 4096 1]",
		"qkv_proj.weight @4194304 [524288 4096 1]",
		"8x4x2[16-79] R,S0,S1",
		"totals: 1037 tensors, 235093634560 parameters, 470187269120 bytes",
	)
	// a scaled model, cut to 4 layers, with DeepSeek's MTP layer on the last stage.
	out, err = runRefit(t, "layouts", "--model", "deepseek-v3", "--scale", "32", "--layers", "4", "--mtp", "--train", "tp=2,pp=2,dp=2,ep=4,etp=1", "--gen", "tp=4,dp=2")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"model DeepSeek-V3/32:", "stage 1: layers [2, 4)", "model.layers.4.eh_proj.weight", "linear_fc1.weight @"} {
		if !strings.Contains(out, want) {
			t.Errorf("scaled output lacks %q:\n%s", want, out)
		}
	}
}

// TestLayoutsBadInput: bad input is a one-line usage error naming the flag
// and the value.
func TestLayoutsBadInput(t *testing.T) {
	ok := []string{"--model", "qwen3-235b-a22b", "--train", "tp=2,pp=2", "--gen", "tp=8"}
	with := func(flag, value string) []string {
		args := append([]string{"layouts"}, ok...)
		for i := range args {
			if args[i] == flag {
				args[i+1] = value
				return args
			}
		}
		return append(args, flag, value)
	}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no model", []string{"layouts", "--train", "tp=2"}, "--model is required"},
		{"unknown model", with("--model", "gpt-5"), `--model "gpt-5": model "gpt-5" is neither built in`},
		{"unknown key", with("--train", "tp=2,zp=3"), `--train "tp=2,zp=3": unknown key "zp"`},
		{"etp default", with("--train", "tp=2,pp=2,ep=2"), `etp=2 x ep=2 does not divide a stage's tp x cp x dp = 2 ranks (etp not given: Megatron-Core's default is etp = tp = 2`},
		{"gen heads", with("--gen", "tp=128"), `--gen "tp=128": tensor model.layers.0.self_attn.q_proj.weight: its 64 attention heads do not divide over generator tp=128`},
		{"gen ep", with("--gen", "tp=8,dp=2,ep=8"), `--gen "tp=8,dp=2,ep=8": generator ep=8: vLLM's expert parallelism spans an engine's tp x dp = 16 ranks`},
		{"gen vocab", with("--gen", "tp=3"), `--gen "tp=3": tensor model.embed_tokens.weight: dim 0 (151936 vocabulary rows, 151936 once padded to a multiple of 64) does not divide over generator tp=3`},
		{"gen dp experts", with("--gen", "tp=8,dp=5"), `--gen "tp=8,dp=5": tensor model.layers.0.mlp.experts.gate_up_proj: dim 2 (1536 intermediate rows) does not divide over generator tp x dp=40`},
		{"empty stage", with("--train", "pp=95"), `--train "pp=95": model Qwen3-235B-A22B: pp=95 is more than the model's 94 layers`},
		{"dst dtype", append(with("--scale", "1"), "--dst-dtype", "int8"), `--dst-dtype "int8": the one conversion is to e4m3`},
		{"fp8 scale alone", append(with("--scale", "1"), "--fp8-scale", "row"), `--fp8-scale "row": it needs --dst-dtype e4m3`},
		{"fp8 blocks", append(with("--scale", "16"), "--dst-dtype", "e4m3"), `--fp8-scale "block": tensor model.layers.0.self_attn.k_proj.weight: --fp8-scale block: the checkpoint and vLLM`},
		{"scale", with("--scale", "3"), `--scale "3": model Qwen3-235B-A22B: scale 3 does not divide hidden_size 4096`},
		{"scale zero", with("--scale", "0"), `--scale "0": want at least 1`},
		{"layers", with("--layers", "95"), `--layers "95": model Qwen3-235B-A22B: layers 95: want between 1 and the model's num_hidden_layers 94`},
		{"mtp", append(with("--scale", "1"), "--mtp"), "--mtp: model Qwen3-235B-A22B: MTP layers asked for, but the config has no num_nextn_predict_layers"},
	} {
		t.Run(tc.name, func(t *testing.T) { wantUsageError(t, tc.want, tc.args...) })
	}
}

// TestLayoutsHugeLayerCounts: a config of 2^53 layers cut by --layers 2
// lays out at once (issue 23.4); 10^9 layers uncut are refused by their
// size before anything is built (issue 23.6), naming --layers.
func TestLayoutsHugeLayerCounts(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		layers int64
		args   []string
		want   string
	}{
		{1 << 53, []string{"--layers", "2"}, "model huge: 21 tensors"},
		{1e9, nil, "more than m2n lays out (1048576 tensors): cut them with --layers"},
	} {
		path := filepath.Join(dir, "huge.json")
		cfg := fmt.Sprintf(`{"model_type":"llama","vocab_size":64,"hidden_size":16,"intermediate_size":32,"num_hidden_layers":%d,"num_attention_heads":4}`, tc.layers)
		if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		out, err := runRefit(t, append([]string{"layouts", "--model", path, "--train", "tp=1", "--gen", "tp=1"}, tc.args...)...)
		if el := time.Since(start); el > 5*time.Second {
			t.Errorf("%d layers: %v", tc.layers, el)
		}
		got := out
		if err != nil {
			got = err.Error()
		}
		if !strings.Contains(got, tc.want) {
			t.Errorf("%d layers %v: %q, want %q", tc.layers, tc.args, got, tc.want)
		}
	}
}

// TestBoundAndModelAlias: refit bound is the data-movement model; refit
// model still runs it, with a one-line notice on stderr.
func TestBoundAndModelAlias(t *testing.T) {
	args := []string{"--bytes", "7168MB", "--sources", "16", "--dst-shards", "8", "--rho", "2", "--net-bw", "50GB/s", "--local-bw", "900GB/s"}
	run := func(name string) (string, string) {
		root := newRoot()
		var out, errOut bytes.Buffer
		root.SetOut(&out)
		root.SetErr(&errOut)
		root.SetArgs(append([]string{name}, args...))
		if err := root.Execute(); err != nil {
			t.Fatalf("refit %s: %v", name, err)
		}
		return out.String(), errOut.String()
	}
	bound, boundErr := run("bound")
	model, modelErr := run("model")
	if !strings.Contains(bound, "hier     8.96 ms") || bound != model {
		t.Errorf("refit bound and refit model differ or miss the paper's figure:\n%s\n%s", bound, model)
	}
	if boundErr != "" {
		t.Errorf("refit bound wrote to stderr: %q", boundErr)
	}
	if strings.Count(modelErr, "\n") != 1 || !strings.Contains(modelErr, `"refit model" is now "refit bound"`) {
		t.Errorf("refit model notice %q, want one line", modelErr)
	}
	help, err := runRefit(t, "--help")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(help, "refit bound ") || !strings.Contains(help, "refit layouts ") || strings.Contains(help, "refit model ") {
		t.Errorf("root help does not list bound and layouts:\n%s", help)
	}
}
