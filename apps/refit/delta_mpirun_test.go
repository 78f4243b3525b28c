package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/m2n-dev/m2n/perf"
)

// TestDeltaMPI runs refit run --delta as real mpirun jobs over MPI (the
// encodings' lengths exchanged each round, every receive sized by them),
// flat and hier with the destination replicas in two domains, every
// element checked after every step against the pattern with the same
// updates; the JSON report's bytes must show the delta's saving, and a
// destination byte flipped before the check must fail it. Then refit sync
// --delta --change-model moves a scaled model with the measured change
// fractions, checked.
func TestDeltaMPI(t *testing.T) {
	args := []string{"run", "--shape", "96x80", "--dtype", "bf16", "--src-mesh", "4", "--src-placements", "S0",
		"--dst-mesh", "2x2", "--dst-placements", "R,S1", "--dst-domain-size", "2", "--route", "flat,hier",
		"--delta", "--change", "0.01", "--check", "--iters", "3", "--json", "--timeout", "60s"}
	runDeltaChecked(t, 8, 6, "destination", args)
	stdout, stderr, err := mpirunRefit(t, 4, nil, "sync", "--model", "qwen3-235b-a22b", "--scale", "64", "--layers", "1",
		"--train", "tp=2", "--gen", "tp=2", "--delta", "--change-model", "../../testdata/change-model.json", "--check", "--iters", "2", "--timeout", "60s")
	if err != nil || !strings.Contains(stdout, "check passed") || !strings.Contains(stdout, "of the model's elements changed per step") {
		t.Errorf("refit sync --delta: %v\nstdout:\n%s\nstderr:\n%s", err, stdout, stderr)
	}
}

// TestDeltaFP8MPI runs refit run --delta with an FP8 destination as a
// real mpirun job (the sources quantize with the step's scales, whose
// amaxes combine across the source shards that cut 128x128 blocks, and
// send only the codes that changed), flat and hier, every code and scale
// checked after every step against quantizing the updated tensor whole;
// a destination byte flipped before the check must fail it. Then refit
// sync --delta with a generator in FP8 (row scales), checked.
func TestDeltaFP8MPI(t *testing.T) {
	args := []string{"run", "--shape", "384x320", "--dtype", "bf16", "--src-mesh", "2", "--src-placements", "S0",
		"--dst-mesh", "2", "--dst-placements", "S1", "--dst-domain-size", "1", "--src-domain-size", "2", "--route", "flat,hier",
		"--dst-dtype", "e4m3", "--delta", "--change", "0.01", "--check", "--iters", "3", "--json", "--timeout", "60s"}
	runDeltaChecked(t, 4, 3, "FP8 destination", args)
	stdout, stderr, err := mpirunRefit(t, 4, nil, "sync", "--model", "qwen3-235b-a22b", "--scale", "64", "--layers", "1",
		"--train", "tp=2", "--gen", "tp=2", "--delta", "--change-model", "../../testdata/change-model.json", "--dst-dtype", "e4m3",
		"--fp8-scale", "row", "--check", "--iters", "2", "--timeout", "60s")
	if err != nil || !strings.Contains(stdout, "check passed") || !strings.Contains(stdout, "generator in FP8") ||
		!strings.Contains(stdout, "of the model's elements changed per step") {
		t.Errorf("refit sync --delta --dst-dtype e4m3: %v\nstdout:\n%s\nstderr:\n%s", err, stdout, stderr)
	}
}

// runDeltaChecked runs refit run args (a --delta --change 0.01 --check
// job over flat and hier, ending in "--json --timeout 60s") on np ranks:
// both routes must pass their check and send some bytes but at most a
// quarter of the dense sync's. Then it runs the job again, without
// --json, with a byte of rank corrupt's destination (what) flipped before
// the check, which must fail it.
func runDeltaChecked(t *testing.T, np, corrupt int, what string, args []string) {
	t.Helper()
	stdout, stderr, err := mpirunRefit(t, np, nil, args...)
	if err != nil {
		t.Fatalf("%v\nstdout:\n%s\nstderr:\n%s", err, stdout, stderr)
	}
	var rep perf.RunReport
	if err := json.Unmarshal([]byte(stdout[strings.Index(stdout, "{"):]), &rep); err != nil {
		t.Fatalf("%v\n%s", err, stdout)
	}
	if len(rep.Routes) != 2 {
		t.Fatalf("%d routes reported, want 2\n%s", len(rep.Routes), stdout)
	}
	for _, rr := range rep.Routes {
		d := rr.Delta
		switch {
		case rr.Check != "passed":
			t.Errorf("route %s: check %s", rr.Route, rr.Check)
		case d == nil || d.Dense == 0:
			t.Errorf("route %s: no delta report: %+v", rr.Route, d)
		case d.Sent > d.Dense/4 || d.Sent == 0:
			t.Errorf("route %s: 1%% changed, %d bytes sent against %d dense", rr.Route, d.Sent, d.Dense)
		}
	}
	fault := fmt.Sprintf("M2N_FAULT_CORRUPT=%d:37", corrupt)
	stdout, _, err = mpirunRefit(t, np, []string{fault}, append(args[:len(args)-3], "--timeout", "60s")...)
	if err == nil || !strings.Contains(stdout, fmt.Sprintf("check FAILED: rank %d", corrupt)) {
		t.Errorf("a corrupted %s byte passed the delta check (%v)\n%s", what, err, stdout)
	}
}
