package main

import (
	"strings"
	"testing"
	"time"
)

// The CLI items of issues 23 and 26, each as the issue ran it where it can
// be: a job must end with one message naming the cause, or run correctly.

// syncDSV3 is issue 23.2's sync: scaled DeepSeek-V3 on 8 ranks, two
// pipeline stages.
var syncDSV3 = []string{"sync", "--model", "deepseek-v3", "--scale", "64", "--layers", "4", "--train", "tp=1,pp=2,ep=2,dp=2",
	"--gen", "tp=2,dp=2", "--check", "--iters", "2"}

// TestSyncChecksEveryStep is 23.2: a byte flipped on the wire in the
// warm-up step (M2N_FAULT_WIRE) must fail refit sync --check, as it fails
// refit run --check, also when the generator is in FP8: every step the
// sync runs is checked, not only the last.
func TestSyncChecksEveryStep(t *testing.T) {
	for _, extra := range [][]string{nil, {"--dst-dtype", "e4m3"}} {
		t.Run(strings.Join(append([]string{"bf16"}, extra...), " "), func(t *testing.T) {
			o := launch(t, 2*time.Minute, []string{"M2N_FAULT_WIRE=5"}, app{np: 8, args: append(append([]string(nil), syncDSV3...), extra...)})
			oneMessage(t, o, 2*time.Minute, "check failed: ", "in warm-up step 0")
			if strings.Contains(o.stdout, "check passed") {
				t.Errorf("check passed with a byte flipped on the wire:\n%s", o.stdout)
			}
		})
	}
}
