package main

import (
	"fmt"
	"strings"
	"testing"
)

// FuzzCABI drives the C ABI through testdata/calls.c over configurations
// the fuzzer decodes: 2 to 4 ranks, 1 to 3 same-layout calls of one
// session, call orders that differ between ranks (or one thread per call,
// interleaved as each rank's scheduler likes, with pseudo-random sleeps),
// four layout pairs, every route, verify, atomic, striping, coalescing off,
// emulated domains, tensor shapes with uneven and empty shards, and a
// timeout_seconds on one rank from a table of bad and good values. Every
// outcome must be the right data or the agreed error: a single-threaded
// run exactly as simulate predicts (each step M2N_OK with its own call's
// data in every element, or M2N_ERR_CALL_MISMATCH on every rank naming
// both calls with the destinations untouched), a threaded run only those
// two outcomes with every rank completing the same steps, a bad timeout
// refused alike on every rank naming the rank and the field, and every job
// ending well within its bound. Each input is one mpirun job of about a
// second (Go's fuzzing gives an input 10 s, so the library and calls.c
// are built first): `make test` replays the seeds in
// testdata/fuzz/FuzzCABI (what fuzzing finds lands there too); `make fuzz`
// fuzzes.
func FuzzCABI(f *testing.F) {
	callsProgram(f)
	f.Fuzz(func(t *testing.T, world, calls, threads, steps, layout, route, flags uint8, order string, bad uint8) {
		c := decodeCABI(world, calls, threads, steps, layout, route, flags, order, bad)
		co, out := runCalls(t, c.world, c.args...)
		if c.badRank >= 0 {
			checkJoin(t, co, out, c.world, c.badRank, c.badValue)
			if detailInt(co.joins[0], "rc") != 0 {
				return
			}
		}
		if c.threads == 1 {
			checkSimulated(t, co, c.orders, out)
			return
		}
		for r := range c.world {
			if n := len(co.runs[r]); n != c.threads*c.steps {
				t.Fatalf("rank %d ran %d steps, want %d\n%s", r, n, c.threads*c.steps, out)
			}
			for _, run := range co.runs[r] {
				if run.rc != 0 && run.rc != errCallMismatch {
					t.Errorf("rank %d, call %c: rc %d, want M2N_OK or M2N_ERR_CALL_MISMATCH: %s", r, 'a'+run.call, run.rc, run.msg)
				}
				if run.rc == errCallMismatch && (strings.Count(run.msg, "call #") != 2 || !strings.Contains(run.msg, "ranks run different steps")) {
					t.Errorf("rank %d: the mismatch does not name both calls: %s", r, run.msg)
				}
			}
		}
	})
}

// cabiCase is one decoded FuzzCABI input: calls.c's arguments and what
// the checks need.
type cabiCase struct {
	world, calls, threads, steps int
	orders                       []string // single-threaded: every rank's calls in order
	badRank                      int      // -1: none
	badValue                     string
	args                         []string
}

// cabiTimeouts are the timeout_seconds values a rank may join with, as
// calls.c reads them with strtod: refused (NaN, infinities, negative, past
// a Go time.Duration), valid but unlike the others' 30 s (an agreement
// error naming the field), and equal (the job runs).
var cabiTimeouts = []string{"nan", "inf", "-inf", "-1", "1e300", "9223372037", "9223372036", "1e-300", "-0", "0", "30", "0.5"}

func decodeCABI(world, calls, threads, steps, layout, route, flags uint8, order string, bad uint8) cabiCase {
	c := cabiCase{world: 2 + int(world)%3, calls: 1 + int(calls)%3, steps: 1 + int(steps)%4, badRank: -1}
	c.threads = 1 + int(threads)%c.calls
	routes := []string{"flat", "hier", "agbcast", "auto"}
	shapes := [][2]int{{160, 120}, {7, 5}, {3, 64}, {1, 1}}
	sh := shapes[int(flags>>5)&3]
	c.args = []string{
		fmt.Sprintf("calls=%d", c.calls), fmt.Sprintf("layout=%d", int(layout)%4), "route=" + routes[int(route)%4],
		fmt.Sprintf("rows=%d", sh[0]), fmt.Sprintf("cols=%d", sh[1]),
		fmt.Sprintf("verify=%d", flags&1), fmt.Sprintf("atomic=%d", flags>>1&1), fmt.Sprintf("stripe=%d", flags>>2&1),
	}
	if flags&8 != 0 {
		c.args = append(c.args, "coalesce=-1")
	}
	if flags&16 != 0 {
		c.args = append(c.args, "dstdom=1")
	}
	if c.threads > 1 {
		c.args = append(c.args, fmt.Sprintf("threads=%d", c.threads), fmt.Sprintf("steps=%d", c.steps))
		if flags&128 != 0 {
			c.args = append(c.args, "jitter=1000", fmt.Sprintf("seed=%d", len(order)))
		}
	} else {
		if order == "" {
			order = "a"
		}
		for r := range c.world {
			var b strings.Builder
			for i := range c.steps {
				b.WriteByte(byte('a' + int(order[(r*c.steps+i)%len(order)])%c.calls))
			}
			c.orders = append(c.orders, b.String())
		}
		c.args = append(c.args, "order="+strings.Join(c.orders, ","))
	}
	if bad != 0 {
		c.badValue = cabiTimeouts[int(bad-1)%len(cabiTimeouts)]
		c.badRank = (int(bad-1) / len(cabiTimeouts)) % c.world
		c.args = append(c.args, fmt.Sprintf("badtimeout=%d:%s", c.badRank, c.badValue))
	}
	return c
}
