package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/m2n-dev/m2n/internal/testutil/mpitest"
)

// These tests run testdata/calls.c, which interleaves several calls of one
// session through the C ABI on purpose (other orders on other ranks, two
// threads per rank) and checks every destination element of every run:
// each run returns M2N_OK with its own call's data everywhere, or
// M2N_ERR_CALL_MISMATCH naming both calls with the destination untouched.

// callsBin is testdata/calls.c, compiled once per test binary.
var callsBin struct {
	once sync.Once
	path string
	err  error
}

func callsProgram(t testing.TB) string {
	t.Helper()
	library(t) // lib.dir
	callsBin.once.Do(func() { callsBin.path, callsBin.err = compileC(t, "calls", lib.dir, "-lpthread") })
	if errors.Is(callsBin.err, errNoMpicc) {
		t.Skip(callsBin.err)
	}
	if callsBin.err != nil {
		t.Fatal(callsBin.err)
	}
	return callsBin.path
}

// callRun is one run line of calls.c.
type callRun struct {
	rank, thread, call int
	step               int64
	rc                 int
	msg                string
}

// callsOutput is what calls.c printed: its runs by rank, in order, the
// joins' outcomes (badtimeout=) and whether it passed.
type callsOutput struct {
	runs   map[int][]callRun
	joins  map[int]map[string]any
	passed bool
}

func parseCalls(t *testing.T, out string) callsOutput {
	t.Helper()
	co := callsOutput{runs: map[int][]callRun{}, joins: map[int]map[string]any{}}
	for _, line := range strings.Split(out, "\n") {
		switch {
		case strings.HasPrefix(line, "run "):
			var r callRun
			head, msg, _ := strings.Cut(line, " msg=")
			if _, err := fmt.Sscanf(head, "run rank=%d thread=%d call=%d step=%d rc=%d", &r.rank, &r.thread, &r.call, &r.step, &r.rc); err != nil {
				t.Fatalf("line %q: %v", line, err)
			}
			r.msg = msg
			co.runs[r.rank] = append(co.runs[r.rank], r)
		case strings.HasPrefix(line, "join "):
			var rank, rc int
			head, detail, _ := strings.Cut(line, " detail=")
			if _, err := fmt.Sscanf(head, "join rank=%d rc=%d", &rank, &rc); err != nil {
				t.Fatalf("line %q: %v", line, err)
			}
			d := map[string]any{}
			if err := json.Unmarshal([]byte(detail), &d); err != nil {
				t.Fatalf("line %q: detail: %v", line, err)
			}
			d["rc"] = float64(rc)
			co.joins[rank] = d
		case line == "calls: passed":
			co.passed = true
		}
	}
	return co
}

// runCalls runs calls.c on np ranks with args, bounded (the runs' own
// timeout is 30 s; none should come near it).
func runCalls(t *testing.T, np int, args ...string) (callsOutput, string) {
	t.Helper()
	bin := callsProgram(t)
	mpitest.Require(t)
	start := time.Now()
	out, err := mpirunWithin(t, 90*time.Second, np, nil, append([]string{bin}, args...)...)
	if el := time.Since(start); el > 60*time.Second {
		t.Errorf("calls %v took %v", args, el.Round(time.Millisecond))
	}
	co := parseCalls(t, out)
	if err != nil || !co.passed {
		t.Fatalf("calls %s on %d ranks: %v\n%s", strings.Join(args, " "), np, err, out)
	}
	return co, out
}

// simulate predicts a single-threaded run of per-rank orders (letters a,
// b, c for calls 0, 1, 2; every order the same length): the i-th run of
// every rank meets the i-th of every other in the step's first agreement;
// if every rank began the same call at the same step it completes
// (M2N_OK) and that call's step count grows, else every rank returns
// M2N_ERR_CALL_MISMATCH and no count grows.
func simulate(orders []string) [][]callRun {
	world := len(orders)
	out := make([][]callRun, world)
	steps := map[int]int64{} // call -> completed steps (the same on every rank)
	for i := range len(orders[0]) {
		call0 := int(orders[0][i] - 'a')
		same := true
		for r := range world {
			if int(orders[r][i]-'a') != call0 {
				same = false
			}
		}
		// a rank's step of a call is its completed steps + 1; counts are
		// equal on every rank, so equal calls mean equal steps.
		for r := range world {
			k := int(orders[r][i] - 'a')
			rc := 0
			if !same {
				rc = int(errCallMismatch)
			}
			out[r] = append(out[r], callRun{rank: r, call: k, step: steps[k] + 1, rc: rc})
		}
		if same {
			steps[call0]++
		}
	}
	return out
}

// errCallMismatch is M2N_ERR_CALL_MISMATCH (cgo is not allowed in tests).
const errCallMismatch = 10

// checkSimulated compares a single-threaded run with simulate's
// prediction, and every mismatch's message with the calls it names.
func checkSimulated(t *testing.T, co callsOutput, orders []string, out string) {
	t.Helper()
	want := simulate(orders)
	for r := range orders {
		got := co.runs[r]
		if len(got) != len(want[r]) {
			t.Fatalf("rank %d ran %d steps, want %d\n%s", r, len(got), len(want[r]), out)
		}
		for i, g := range got {
			w := want[r][i]
			if g.call != w.call || g.step != w.step || g.rc != w.rc {
				t.Errorf("rank %d, run %d: call %c step %d rc %d, want call %c step %d rc %d (%s)", r, i, 'a'+g.call, g.step, g.rc,
					'a'+w.call, w.step, w.rc, g.msg)
			}
			if g.rc == errCallMismatch {
				checkMismatchMessage(t, r, g.msg, orders, i)
			}
		}
	}
}

// checkMismatchMessage checks that a mismatch names both calls: the
// first rank that differs from rank 0 and the call and step it began, and
// rank 0's, as m2n numbers calls (#1 for a, the first prepared).
func checkMismatchMessage(t *testing.T, rank int, msg string, orders []string, i int) {
	t.Helper()
	first := -1
	for r := range orders {
		if orders[r][i] != orders[0][i] && first < 0 {
			first = r
		}
	}
	if first < 0 {
		return // another step of the same call: checked by the step numbers
	}
	for _, w := range []string{
		"ranks run different steps",
		fmt.Sprintf("rank %d began call #%d \"w\"", first, int(orders[first][i]-'a')+1),
		fmt.Sprintf("where rank 0 began call #%d \"w\"", int(orders[0][i]-'a')+1),
	} {
		if !strings.Contains(msg, w) {
			t.Errorf("rank %d, run %d: the mismatch lacks %q: %s", rank, i, w, msg)
		}
	}
}

// TestCCallsCrossed is 23.1 through the C ABI: the sources run call a then
// b while the destinations run b then a (the same layout and tensor name,
// 19,200 elements). Both steps fail on every rank with
// M2N_ERR_CALL_MISMATCH naming both calls, every destination element
// untouched; run in the same order afterwards, each call delivers its own
// data, every element checked. With verify and atomic on too.
func TestCCallsCrossed(t *testing.T) {
	orders := []string{"abab", "abab", "baab", "baab"}
	for _, opts := range [][]string{{"route=flat"}, {"route=hier", "verify=1", "atomic=1"}} {
		t.Run(strings.Join(opts, ","), func(t *testing.T) {
			co, out := runCalls(t, 4, append(opts, "order="+strings.Join(orders, ","))...)
			checkSimulated(t, co, orders, out)
			if testing.Verbose() {
				t.Logf("rank 0's first run: %+v", co.runs[0][0])
			}
		})
	}
}

// TestCCallsThreads is the other half of 23.1 (and 23.10's MPI_ERR_TRUNCATE
// x8): two threads of every rank run two same-layout calls of one session
// (which m2n.h allows), so the library serialises them in an order of its
// own on each rank. Every run returns M2N_OK with its own call's data in
// every element, or M2N_ERR_CALL_MISMATCH (once per run, naming both
// calls) with the destination untouched; every rank completes the same
// steps of each call. With verify and atomic on, as in the report.
func TestCCallsThreads(t *testing.T) {
	// the threads' order is the scheduler's: try a few times for a run in
	// which some steps complete, so that their data is checked too.
	for try := 1; ; try++ {
		co, out := runCalls(t, 4, "threads=2", "steps=6", "verify=1", "atomic=1", "route=hier", fmt.Sprintf("seed=%d", try))
		ok, mismatch := 0, 0
		for r := range 4 {
			if len(co.runs[r]) != 12 {
				t.Fatalf("rank %d ran %d steps, want 12\n%s", r, len(co.runs[r]), out)
			}
			for _, run := range co.runs[r] {
				switch run.rc {
				case 0:
					ok++
				case errCallMismatch:
					mismatch++
					if strings.Count(run.msg, "call #") != 2 || strings.Count(run.msg, "ranks run different steps") != 1 {
						t.Errorf("rank %d: mismatch message %q", r, run.msg)
					}
				default:
					t.Errorf("rank %d: rc %d: %s", r, run.rc, run.msg)
				}
			}
		}
		t.Logf("try %d: %d runs completed with their own data in every element, %d failed with M2N_ERR_CALL_MISMATCH", try, ok, mismatch)
		if ok > 0 || try == 4 || t.Failed() {
			return
		}
	}
}

// TestCJoinBadTimeout is 23.10: a timeout_seconds of NaN, an infinity, a
// negative number or one past a Go time.Duration on one rank fails every
// rank's join alike, naming that rank, the field and the value.
func TestCJoinBadTimeout(t *testing.T) {
	for _, v := range []struct{ arg, value string }{{"nan", "NaN"}, {"inf", "+Inf"}, {"-1", "-1"}, {"1e300", "1e+300"}, {"9223372037", "9.223372037e+09"}, {"1e-300", "1e-300"}} {
		t.Run(v.arg, func(t *testing.T) {
			co, out := runCalls(t, 3, "badtimeout=1:"+v.arg)
			checkJoin(t, co, out, 3, 1, v.arg)
			if msg, _ := co.joins[0]["message"].(string); !strings.Contains(msg, "timeout_seconds "+v.value+": ") {
				t.Errorf("message %q lacks the value %s", co.joins[0]["message"], v.value)
			}
		})
	}
}

// detailInt reads a number of an error's detail, -1 if it has none.
func detailInt(d map[string]any, key string) int {
	if v, ok := d[key].(float64); ok {
		return int(v)
	}
	return -1
}

// checkJoin checks the joins of a run with badtimeout=bad:value on world
// ranks: a valid timeout that differs from the others' (30 s) fails every
// rank with M2N_ERR_AGREEMENT on the field "timeout"; 30 joins; anything
// else fails every rank with M2N_ERR_VALIDATION naming rank bad, the field
// timeout_seconds and the value.
func checkJoin(t *testing.T, co callsOutput, out string, world, bad int, value string) {
	t.Helper()
	f, err := strconv.ParseFloat(value, 64)
	valid := err == nil && !math.IsNaN(f) && f >= 0 && f*1e9 < math.Exp2(63) && (f == 0 || f*1e9 >= 1)
	d := time.Duration(f * 1e9)
	if valid && f == 0 {
		d = 5 * time.Minute
	}
	for r := range world {
		j, ok := co.joins[r]
		if !ok {
			t.Fatalf("rank %d printed no join\n%s", r, out)
		}
		rc := detailInt(j, "rc")
		switch {
		case valid && d == 30*time.Second:
			if rc != 0 {
				t.Errorf("rank %d: join with timeout %s: rc %d: %v", r, value, rc, j["message"])
			}
		case valid:
			// a timeout this short may end the bad rank's wait before the
			// others arrive: then every rank fails with its timeout.
			msg, _ := j["message"].(string)
			timedOut := d < 10*time.Second && rc == 5 && strings.Contains(msg, fmt.Sprintf("rank %d: timed out after %v", bad, d))
			if (rc != 3 || j["field"] != "timeout") && !timedOut {
				t.Errorf("rank %d: join with timeout %s on rank %d: rc %d, detail %v; want M2N_ERR_AGREEMENT on timeout", r, value, bad, rc, j)
			}
		default:
			msg, _ := j["message"].(string)
			if rc != 2 || j["field"] != "timeout_seconds" || detailInt(j, "rank") != bad ||
				!strings.Contains(msg, fmt.Sprintf("rank %d: options: timeout_seconds ", bad)) || strings.Count(msg, "timeout_seconds") != 1 {
				t.Errorf("rank %d: join with timeout_seconds %s on rank %d: rc %d, detail %v; want M2N_ERR_VALIDATION naming it", r, value, bad, rc, j)
			}
		}
	}
}
