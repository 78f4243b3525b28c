package main

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/m2n-dev/m2n/cuda"
	"github.com/m2n-dev/m2n/faults"
	"github.com/m2n-dev/m2n/perf"
)

// The adversarial cases of issue 17, each as the issue ran it where it can
// be (docs/hardening.md lists them with their outcomes now): a 64x64 f32
// S0 -> S1 between 2 and 2 ranks unless said. Each job must end within its
// timeout plus a margin, non-zero, with exactly one message naming the
// cause, and no trace; or, where the input is valid, run correctly.

// pairB is the issue's $B.
var pairB = []string{"--shape", "64x64", "--src-mesh", "2", "--src-placements", "S0", "--dst-mesh", "2", "--dst-placements", "S1"}

func runArgs(extra ...string) []string { return append(append([]string{"run"}, pairB...), extra...) }

// TestIssue17ItersWarmupAgreed is case 1: one rank with another --iters
// or --warmup (an MPMD launch) fails every rank at once, naming the rank
// and the flag with both values.
func TestIssue17ItersWarmupAgreed(t *testing.T) {
	for _, tc := range []struct {
		flag, value, want string
	}{
		{"--iters", "7", "rank 3 has flag --iters 7, rank 0 has 5"},
		{"--warmup", "0", "rank 3 has flag --warmup 0, rank 0 has 1"},
	} {
		t.Run(tc.flag, func(t *testing.T) {
			o := launch(t, 10*time.Second+margin, nil,
				app{np: 3, args: runArgs("--check", "--timeout", "10s")},
				app{np: 1, args: runArgs("--check", "--timeout", "10s", tc.flag, tc.value)})
			oneMessage(t, o, 10*time.Second+margin, tc.want)
		})
	}
}

// TestIssue17CorruptNegative is case 2: M2N_FAULT_CORRUPT=2:-1 is refused,
// naming the variable and its value; and a panic on one rank while the
// others wait in a collective (M2N_FAULT_PANIC, at every point) is printed
// once, without a trace, and ends the job.
func TestIssue17CorruptNegative(t *testing.T) {
	o := launch(t, 5*time.Second+margin, []string{"M2N_FAULT_CORRUPT=2:-1"}, app{np: 4, args: runArgs("--check", "--timeout", "5s")})
	oneMessage(t, o, 5*time.Second+margin, `M2N_FAULT_CORRUPT "2:-1": want rank or rank:n`)
	for _, at := range faults.Points {
		t.Run("panic-"+at, func(t *testing.T) {
			o := launch(t, 5*time.Second+margin, []string{"M2N_FAULT_PANIC=2:" + at}, app{np: 4, args: runArgs("--check", "--iters", "2", "--timeout", "5s")})
			oneMessage(t, o, 5*time.Second+margin, "rank 2: internal error: panicking on purpose before "+at+" (M2N_FAULT_PANIC)")
		})
	}
}

// TestSyncStagePanic: a panic inside a pipeline stage of refit sync (the
// stages run concurrently, each on a goroutine of its own) is that stage's
// error, printed once without a trace, and ends the job.
func TestSyncStagePanic(t *testing.T) {
	o := launch(t, 5*time.Second+margin, []string{"M2N_FAULT_PANIC=2:step"}, app{np: 4, args: []string{"sync", "--model", "llama-3.1-70b",
		"--scale", "32", "--layers", "2", "--train", "tp=1,pp=2", "--gen", "tp=2", "--iters", "1", "--warmup", "0", "--timeout", "5s"}})
	msg := oneMessage(t, o, 5*time.Second+margin, "internal error: panicking on purpose before step (M2N_FAULT_PANIC)")
	if !stageMap.MatchString(msg) {
		t.Errorf("the message does not map the stage's ranks to world ranks: %s", msg)
	}
}

// stageMap is the prefix of a stage's error in the 4-rank sync jobs below:
// stage 0 is world ranks 0, 2 and 3 (its trainer, then the generators),
// stage 1 world ranks 1, 2 and 3.
var stageMap = regexp.MustCompile(`stage (0 \(stage ranks 0-2 are world ranks 0,2,3\)|1 \(stage ranks 0-2 are world ranks 1-3\)): `)

// TestSyncStageTimeout: a generator rank that stops in a pipelined sync
// makes the trainer rank of each stage time out; one of them says so,
// once, in the stage's ranks and with their map to world ranks (world
// rank 2 is rank 1 of both stages).
func TestSyncStageTimeout(t *testing.T) {
	o := launch(t, 3*time.Second+margin, []string{"M2N_FAULT_HANG=2"}, app{np: 4, args: []string{"sync", "--model", "llama-3.1-70b",
		"--scale", "32", "--layers", "2", "--train", "tp=1,pp=2", "--gen", "tp=2", "--iters", "1", "--warmup", "0", "--timeout", "3s"}})
	if o.code == 0 || o.elapsed > 3*time.Second+margin {
		t.Errorf("want a failure within %v:\n%v", 3*time.Second+margin, o)
	}
	noCrash(t, o)
	var timeouts int
	for _, m := range messages(o) {
		if !strings.Contains(m, "timed out") {
			continue
		}
		timeouts++
		if !stageMap.MatchString(m) || !strings.Contains(m, "rank 0: timed out after 3s waiting for ranks [1] in round 0") {
			t.Errorf("a timeout without the stage's rank map, or naming other ranks: %s", m)
		}
	}
	if timeouts != 1 {
		t.Errorf("%d timeout messages, want one:\n%v", timeouts, o)
	}
}

// TestIssue17NotARefitJob is case 3: the run ranks of an MPMD launch whose
// other part is not a refit job end promptly: the launcher ends the job
// when `refit layout` exits without MPI, naming its rank; and with a part
// that never starts MPI at all (sleep), the run ranks' bounded MPI_Init
// gives up after the timeout, one rank saying so.
func TestIssue17NotARefitJob(t *testing.T) {
	o := launch(t, 10*time.Second+margin, nil, app{np: 3, args: runArgs("--check", "--timeout", "10s")},
		app{np: 1, args: []string{"layout", "--shape", "8x4", "--mesh", "4", "--placements", "S0"}})
	// Either mpirun notices the process that left without MPI and names
	// it, or the run ranks' bounded MPI_Init gives up first (both seen:
	// which comes first depends on the launcher's timing).
	named := strings.Contains(o.stderr, "process rank 3") || strings.Contains(o.stderr, "MPI_Init did not finish in 10s")
	if o.code == 0 || o.elapsed > 10*time.Second+margin || !named {
		t.Errorf("want a failure within the bound naming process rank 3 or the MPI_Init bound:\n%v", o)
	}
	noCrash(t, o)
	if msgs := messages(o); len(msgs) > 1 {
		t.Errorf("%d messages: %q", len(msgs), msgs)
	}
	o = launch(t, 3*time.Second+margin, nil, app{np: 3, args: runArgs("--check", "--timeout", "3s")},
		app{np: 1, prog: "sleep", args: []string{"30"}})
	oneMessage(t, o, 3*time.Second+margin, "rank 0: MPI_Init did not finish in 3s")
}

// TestIssue17StoppedRank is case 4 as the issue ran it: rank 1 of a long
// checked run is stopped with SIGSTOP from outside, and resumed with
// SIGCONT 20 s later. The other ranks must time out within the timeout
// plus the margin (long before the SIGCONT), name rank 1 once, and no
// rank may exit 0 or print a report.
func TestIssue17StoppedRank(t *testing.T) {
	const timeout = 5 * time.Second
	for _, after := range []time.Duration{time.Second, 3 * time.Second} {
		t.Run(fmt.Sprint(after), func(t *testing.T) {
			mark := marker(t)
			defer reap(mark)
			r := start(t, []string{mark}, app{np: 4, args: runArgs("--iters", "20000", "--check", "--timeout", timeout.String())})
			pid := rankProcess(t, mark, 1, 30*time.Second)
			time.Sleep(after)
			if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
				t.Fatal(err)
			}
			stopped := time.Now()
			cont := time.AfterFunc(20*time.Second, func() { _ = syscall.Kill(pid, syscall.SIGCONT) })
			defer cont.Stop()
			o := r.wait(t, time.Since(r.start)+40*time.Second)
			if el := time.Since(stopped); el > timeout+margin {
				t.Errorf("the job ended %v after rank 1 stopped, more than the timeout %v plus %v", el, timeout, margin)
			}
			oneMessage(t, o, o.elapsed, "waiting for ranks [1]")
			if strings.Contains(o.stdout, "route flat") || strings.Contains(o.stdout, "check passed") {
				t.Errorf("a report despite the stopped rank:\n%s", o.stdout)
			}
		})
	}
}

// TestIssue17StallAnywhere is deliverable 2: a rank stopped (SIGSTOP, by
// M2N_FAULT_STOP) at any point of the job, before Join, before Prepare, in
// the middle of a step, before the report is gathered, before the closing
// barrier, makes the others end within the timeout plus the margin with
// one message naming it and the collective or round it stalled; one stopped
// before MPI_Finalize is caught by Finalize's own bound.
func TestIssue17StallAnywhere(t *testing.T) {
	const timeout = 3 * time.Second
	for _, tc := range []struct{ at, want string }{
		{"join", "waiting for ranks [2] in the session set-up (Join)"},
		{"prepare", "waiting for ranks [2] in the memory check of the call's plans and schedule"},
		{"step", "waiting for ranks [2] in round 0"},
		{"report", "waiting for ranks [2] in the report gathering"},
		{"end", "waiting for ranks [2] in the closing barrier"},
		{"finalize", "MPI_Finalize did not finish in 3s"},
	} {
		t.Run(tc.at, func(t *testing.T) {
			mark := marker(t)
			defer reap(mark)
			o := launch(t, timeout+margin, []string{mark, "M2N_FAULT_STOP=2:" + tc.at}, app{np: 4, args: runArgs("--check", "--iters", "2", "--timeout", timeout.String())})
			oneMessage(t, o, timeout+margin, tc.want)
			if tc.at == "step" || tc.at == "report" {
				if strings.Contains(o.stdout, "check passed") {
					t.Errorf("a report despite the stopped rank:\n%s", o.stdout)
				}
			}
		})
	}
}

// TestIssue17TinyChunks is case 5: the issue's command (1-byte chunks and
// 8 bytes of staging for a 4 MiB tensor: a million rounds) now runs and
// passes its check; where the chunks would make more messages than a
// schedule may hold, the job is refused at once, naming where the sizes
// came from and a chunk that would fit.
func TestIssue17TinyChunks(t *testing.T) {
	env := []string{"M2N_CHUNK_BYTES=1", "M2N_STAGING_BYTES=8"}
	o := launch(t, 5*time.Minute, env, app{np: 4, args: []string{"run", "--shape", "1024x1024", "--src-mesh", "2", "--src-placements", "S0",
		"--dst-mesh", "2", "--dst-placements", "S1", "--route", "flat", "--iters", "1", "--check"}})
	if o.code != 0 || !strings.Contains(o.stdout, "rounds; check passed") {
		t.Errorf("the issue's command did not pass its check:\n%v", o)
	}
	o = launch(t, 30*time.Second, env, app{np: 4, args: []string{"run", "--shape", "4096x4096", "--dtype", "bf16", "--src-mesh", "2", "--src-placements", "S0",
		"--dst-mesh", "2", "--dst-placements", "S1", "--route", "flat", "--iters", "1", "--check"}})
	oneMessage(t, o, 30*time.Second, "flat schedule 16777216 messages", "chunk bytes 1 (from M2N_CHUNK_BYTES), staging bytes 8 (from M2N_STAGING_BYTES)",
		"chunks of 8 bytes (--chunk-bytes 8 --staging-bytes 64)")
}

// TestIssue17CheckAgreed is case 6: --check is agreed (a rank without it
// fails every rank, naming it), and with --check on every rank a wrong
// element on rank 3 (a byte flipped on the wire) fails the check naming it.
func TestIssue17CheckAgreed(t *testing.T) {
	o := launch(t, 5*time.Minute, nil, app{np: 3, args: runArgs("--iters", "1", "--check")},
		app{np: 1, env: []string{"M2N_FAULT_WIRE=3"}, args: runArgs("--iters", "1")})
	oneMessage(t, o, 5*time.Minute, "rank 3 has flag --check false, rank 0 has true")
	if strings.Contains(o.stdout, "check passed") {
		t.Errorf("check passed:\n%s", o.stdout)
	}
	o = launch(t, 5*time.Minute, nil, app{np: 3, args: runArgs("--iters", "1", "--check")},
		app{np: 1, env: []string{"M2N_FAULT_WIRE=3"}, args: runArgs("--iters", "1", "--check")})
	oneMessage(t, o, 5*time.Minute, "check failed on route flat: rank 3: element")
}

// TestIssue17EmulatedRate is case 7: a rate too small to emulate is
// refused naming the variable; a valid one gives a finite, positive bound.
func TestIssue17EmulatedRate(t *testing.T) {
	o := launch(t, 5*time.Minute, []string{"M2N_EMULATE_NET_BW=1e-300"}, app{np: 4, args: runArgs("--dst-domain-size", "1", "--iters", "1")})
	oneMessage(t, o, 5*time.Minute, `M2N_EMULATE_NET_BW "1e-300": want at least 1kB/s`)
	o = launch(t, 5*time.Minute, []string{"M2N_EMULATE_NET_BW=100MB/s"}, app{np: 4, args: runArgs("--dst-domain-size", "1", "--iters", "1", "--json", "--check")})
	var rep perf.RunReport
	if err := json.Unmarshal([]byte(o.stdout), &rep); err != nil || o.code != 0 {
		t.Fatalf("%v: %v", err, o)
	}
	for _, rr := range rep.Routes {
		// 8 KiB a rank over the network at 100 MB/s: about 80 us.
		if rr.Check != "passed" || !(rr.BoundSec > 0 && rr.BoundSec < 1) {
			t.Errorf("route %s: check %s, bound %v s", rr.Route, rr.Check, rr.BoundSec)
		}
	}
}

// TestIssue17HugeShape is case 8: a shape whose bytes overflow an int64 is
// refused by layout and by run, blamed on --shape; with 1-byte elements
// it fits and no local shape or offset is negative.
func TestIssue17HugeShape(t *testing.T) {
	_, err := runRefit(t, "layout", "--shape", "0x9223372036854775807", "--mesh", "2", "--placements", "S1")
	if err == nil || !strings.Contains(err.Error(), `--shape "0x9223372036854775807": shape 0x9223372036854775807 of f32 is too large`) {
		t.Errorf("layout: %v", err)
	}
	out, err := runRefit(t, "layout", "--shape", "0x9223372036854775807", "--dtype", "u8", "--mesh", "2", "--placements", "S1", "--json")
	if err != nil || strings.Contains(out, "-") {
		t.Errorf("u8 layout: %v\n%s", err, out)
	}
	o := launch(t, 5*time.Minute, nil, app{np: 4, args: []string{"run", "--shape", "0x9223372036854775807", "--src-mesh", "2", "--src-placements", "S1",
		"--dst-mesh", "2", "--dst-placements", "S0", "--check"}})
	oneMessage(t, o, 5*time.Minute, `--shape "0x9223372036854775807"`, "too large")
	if strings.Contains(o.stdout, "check passed") {
		t.Errorf("check passed:\n%s", o.stdout)
	}
}

// TestIssue17OverflowingOptions is case 9: a chunk whose 8 x overflows, a
// chunk larger than the default staging holds and a negative latency are
// refused naming the variable or flag.
func TestIssue17OverflowingOptions(t *testing.T) {
	for _, tc := range []struct {
		env  []string
		args []string
		want string
	}{
		{[]string{"M2N_CHUNK_BYTES=1152921504606846976"}, nil, `M2N_CHUNK_BYTES "1152921504606846976": chunk bytes 1152921504606846976, want at most 1152921504606846975`},
		{[]string{"M2N_CHUNK_BYTES=1GiB"}, nil, `M2N_CHUNK_BYTES "1GiB": staging bytes 268435456, want >= 8 x chunk`},
		{nil, []string{"--latency", "-1s"}, `--latency "-1s": want a duration of at least 0`},
	} {
		t.Run(tc.want[:12], func(t *testing.T) {
			o := launch(t, 5*time.Minute, tc.env, app{np: 4, args: runArgs(append([]string{"--iters", "1"}, tc.args...)...)})
			oneMessage(t, o, 5*time.Minute, tc.want)
		})
	}
}

// TestIssue17NoGPU is case 10: --device cuda where no CUDA driver loads
// fails every rank with the loader's message, printed once, not a panic.
func TestIssue17NoGPU(t *testing.T) {
	if err := cuda.Load(); err == nil {
		t.Skip("a CUDA driver loads here: this case is for a machine without one")
	}
	o := launch(t, 5*time.Minute, nil, app{np: 4, args: runArgs("--iters", "1", "--device", "cuda")})
	oneMessage(t, o, 5*time.Minute, "device cuda: cuda: not available: libcuda.so.1 not found")
}

// TestIssue17TooLarge is case 11 and deliverable 3: a 1 TiB tensor on 4
// ranks fails before anything is allocated, on every rank at once, with
// the numbers (what the rank and its host need, what is available),
// naming the rank and the tensor: not in makeslice, not killed by the
// kernel. The 32768-rank plan is refused with its count and bytes.
func TestIssue17TooLarge(t *testing.T) {
	o := launch(t, 30*time.Second, nil, app{np: 4, args: []string{"run", "--shape", "65536x65536x64", "--src-mesh", "2", "--src-placements", "S0",
		"--dst-mesh", "2", "--dst-placements", "S1", "--iters", "1"}})
	msg := oneMessage(t, o, 30*time.Second, `rank 0, tensor "tensor0": needs 1099813618128 bytes (1.0 TiB) of host memory`,
		"buffers 512.0 GiB", "the 4 ranks of its host (0-3) need", "available (")
	if o.code != 1 {
		t.Errorf("exit %d, want 1 (killed?): %s", o.code, msg)
	}
	_, err := runRefit(t, "plan", "--shape", "32768x32768", "--dtype", "bf16", "--src-mesh", "32768", "--src-placements", "S1",
		"--dst-mesh", "32768", "--dst-placements", "S0")
	if err == nil || !strings.Contains(err.Error(), "plan 1073741824 transfers (about 51540131848 bytes of plan), want at most 67108864") {
		t.Errorf("plan: %v", err)
	}
}

// TestIssue17MeshZero is the CLI's side of case 12 (the library panics on
// zero-sized inputs are argument errors, tested in their packages): a
// mesh axis of 0 is refused naming the flag.
func TestIssue17MeshZero(t *testing.T) {
	_, err := runRefit(t, "layout", "--shape", "8", "--mesh", "0", "--placements", "S0")
	if err == nil || !strings.Contains(err.Error(), `--mesh "0": mesh shape "0": axis length 0, want at least 1`) {
		t.Errorf("layout: %v", err)
	}
}

// TestIssue17BadFlagOnOneRank is case 13: a rank of an MPMD launch with a
// flag the others do not have (or one that does not parse) fails every
// rank at once with one message naming rank 3, the flag and its value;
// and a bad flag on every rank is printed once, not once per rank.
func TestIssue17BadFlagOnOneRank(t *testing.T) {
	for _, tc := range []struct{ flag, value, want string }{
		{"--dtype", "q4", "rank 3 has flag --dtype q4, rank 0 has f32"},
		{"--chunk-bytes", "abc", "rank 3 has flag --chunk-bytes abc, rank 0 has (unset)"},
		{"--pp-stages", "1", "rank 3 has flag --pp-stages 1, rank 0 has 0"},
	} {
		t.Run(tc.flag, func(t *testing.T) {
			o := launch(t, 10*time.Second+margin, nil, app{np: 3, args: runArgs("--timeout", "10s")},
				app{np: 1, args: runArgs("--timeout", "10s", tc.flag, tc.value)})
			oneMessage(t, o, 10*time.Second+margin, tc.want)
		})
	}
	o := launch(t, 10*time.Second+margin, nil, app{np: 4, args: runArgs("--timeout", "10s", "--dtype", "q4")})
	oneMessage(t, o, 10*time.Second+margin, `--dtype "q4": unknown dtype "q4"`)
}

// TestIssue17UnclearErrors is case 14: timeouts out of range, a shape too
// large for an int64, junk after a domain size and an unknown in-place
// switch are refused naming the variable or flag and the value; a rank
// with a variable the others lack fails every rank naming it.
func TestIssue17UnclearErrors(t *testing.T) {
	for _, tc := range []struct {
		env  []string
		args []string
		want string
	}{
		{[]string{"M2N_TIMEOUT=1ns"}, nil, `M2N_TIMEOUT "1ns": want at least 1ms`},
		{[]string{"M2N_TIMEOUT=9999999h"}, nil, `M2N_TIMEOUT "9999999h": want a duration from 1ms to 24h0m0s`},
		{[]string{"M2N_DST_DOMAIN_SIZE=2 junk"}, nil, `M2N_DST_DOMAIN_SIZE "2 junk": want a whole number`},
		{[]string{"M2N_MPI_INPLACE=banana"}, nil, `M2N_MPI_INPLACE "banana": want 0`},
		{nil, []string{"--shape", "99999999999x99999999999"}, `--shape "99999999999x99999999999": shape "99999999999x99999999999" is too large`},
	} {
		t.Run(tc.want[:16], func(t *testing.T) {
			o := launch(t, 5*time.Minute, tc.env, app{np: 4, args: runArgs(tc.args...)})
			oneMessage(t, o, 5*time.Minute, tc.want)
		})
	}
	o := launch(t, 5*time.Minute, nil, app{np: 3, args: runArgs("--iters", "1")}, app{np: 1, env: []string{"M2N_MPI_INPLACE=0"}, args: runArgs("--iters", "1")})
	oneMessage(t, o, 5*time.Minute, "rank 3 has in-place strided moves off true, rank 0 has false")
}
