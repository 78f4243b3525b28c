package main

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/m2n-dev/m2n/perf"
)

// TestSyncLoRA runs refit sync --lora as real mpirun jobs: full syncs of a
// scaled model, then LoRA steps that move only the adapters and merge
// them into the generator's weights; --check compares every element of
// every weight on every generator rank with the merges recomputed from
// the patterns (and the adapters with the last step's). Qwen3-8B into a
// generator at the trainer's TP, and Llama-3.1-70B from tp=2,dp=2 to
// tp=4 (vLLM's B rows then follow its split of the fused qkv_proj and
// gate_up_proj views), Qwen3-8B into an FP8 generator (row scales, each
// merge re-quantizing from the full sync's FP8 base); --lora with --delta
// is refused, as is an FP8 generator whose parts cut scale blocks.
func TestSyncLoRA(t *testing.T) {
	for _, tc := range []struct {
		name, model, scale, layers, train, gen string
		np                                     int
		extra                                  []string
	}{
		{"qwen3-8b", "../../model/testdata/models/qwen3-8b.config.json", "16", "2", "tp=2", "tp=2", 4, nil},
		{"llama-3.1-70b", "llama-3.1-70b", "64", "1", "tp=2,dp=2", "tp=4", 8, nil},
		// an FP8 generator: each merge re-quantizes the weights' row blocks
		// from the full sync's FP8 base (every byte and scale checked)
		{"qwen3-8b-e4m3", "../../model/testdata/models/qwen3-8b.config.json", "16", "2", "tp=2", "tp=1", 3, []string{"--dst-dtype", "e4m3", "--fp8-scale", "row"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stdout, stderr, err := mpirunRefit(t, tc.np, nil, append([]string{"sync", "--model", tc.model, "--scale", tc.scale, "--layers", tc.layers,
				"--train", tc.train, "--gen", tc.gen, "--lora", "16", "--lora-alpha", "32", "--check", "--json", "--iters", "2", "--warmup", "1"}, tc.extra...)...)
			if err != nil {
				t.Fatalf("%v\nstdout:\n%s\nstderr:\n%s", err, stdout, stderr)
			}
			var rep perf.LoRAReport
			if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
				t.Fatalf("%v\n%s", err, stdout)
			}
			if rep.Check != "passed" || rep.Rank != 16 || rep.Adapters == 0 || rep.ByteRatio <= 0 || rep.ByteRatio > 0.05 || rep.StepSec <= 0 || rep.FullSec <= 0 {
				t.Fatalf("report %+v", rep)
			}
		})
	}
	_, stderr, err := mpirunRefit(t, 4, nil, "sync", "--model", "../../model/testdata/models/qwen3-8b.config.json", "--scale", "16", "--layers", "1",
		"--train", "tp=2", "--gen", "tp=2", "--lora", "16", "--delta")
	if err == nil || !strings.Contains(stderr, "--lora does not combine with --delta") {
		t.Errorf("--lora --delta: %v\n%s", err, stderr)
	}
	// row scales of o_proj split by its columns over tp=2: every generator
	// rank's part cuts the row blocks it would re-quantize
	_, stderr, err = mpirunRefit(t, 4, nil, "sync", "--model", "../../model/testdata/models/qwen3-8b.config.json", "--scale", "16", "--layers", "1",
		"--train", "tp=2", "--gen", "tp=2", "--lora", "16", "--dst-dtype", "e4m3", "--fp8-scale", "row")
	if err == nil || strings.Count(stderr, "cuts row blocks") != 1 {
		t.Errorf("--lora into FP8 parts that cut row blocks: %v\n%s", err, stderr)
	}
}

// TestSyncLoRAFaults injects faults into the adapters' move of a LoRA
// step (M2N_FAULT_CALL=1: the adapters are the job's second prepared call,
// after the model's full syncs): a byte flipped on the wire into generator
// rank 3 in the adapters' second round, with --verify --atomic, must fail
// the job with one message naming the step and the tensor, after which
// every element of every generator weight (and adapter) still holds the
// previous step's merge, checked against the reference; and rank 3 killed
// there must end the job within the timeout, naming it.
func TestSyncLoRAFaults(t *testing.T) {
	args := []string{"sync", "--model", "../../model/testdata/models/qwen3-8b.config.json", "--scale", "16", "--layers", "2",
		"--train", "tp=2", "--gen", "tp=2", "--lora", "16", "--lora-alpha", "32", "--check", "--atomic", "--iters", "2", "--warmup", "1"}
	o := launch(t, 2*time.Minute, []string{"M2N_FAULT_CALL=1", "M2N_FAULT_WIRE=3:1"}, app{np: 4, args: append(args, "--verify", "--timeout", "30s")})
	msg := oneMessage(t, o, 2*time.Minute, "LoRA step ", ", the adapters' move: ", "lora_", "arrived with CRC-32C",
		"atomic: every generator weight still holds LoRA step ")
	if !regexp.MustCompile(`LoRA step ([2-9]), .*still holds LoRA step ([1-8])'s merge`).MatchString(msg) {
		t.Errorf("the fault did not land in a LoRA step after the first: %s", msg)
	}
	o = launch(t, 5*time.Second+margin, []string{"M2N_FAULT_CALL=1", "M2N_FAULT_KILL=3:1"}, app{np: 4, args: append(args, "--timeout", "5s")})
	if o.code == 0 || o.elapsed > 5*time.Second+margin {
		t.Errorf("a rank killed in a LoRA step: exit %d after %v\n%v", o.code, o.elapsed, o)
	}
	noCrash(t, o)
	if out := o.stdout + o.stderr; !strings.Contains(out, "M2N_FAULT_KILL: killing myself at round 1") ||
		!strings.Contains(out, "process rank 3") && !strings.Contains(out, "waiting for ranks [3]") {
		t.Errorf("the kill did not fire in the adapters' move, or the output does not name rank 3:\n%v", o)
	}
}
