package refit_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/m2n-dev/m2n/control"
	"github.com/m2n-dev/m2n/pattern"
	"github.com/m2n-dev/m2n/placement"
	"github.com/m2n-dev/m2n/refit"
	"github.com/m2n-dev/m2n/reshard"
	"github.com/m2n-dev/m2n/transport"
	"github.com/m2n-dev/m2n/transport/inproc"
)

// twoCalls prepares, on every rank of an in-process world, two calls of
// the same layouts (a 16x8 f32 tensor from 4 ranks in rows to a DP2 x TP2
// generator), a then b, and fills rank r's source buffers of call a with
// the pattern of seed 1 and those of b with seed 2. It returns, per rank,
// the runtime, the calls and their buffers.
type twoCallRank struct {
	calls [2]*refit.Call
	bufs  [2][]refit.TensorBuffers
}

func prepareTwoCalls(t *testing.T, w *inproc.World, src, dst placement.Layout) []twoCallRank {
	t.Helper()
	const world = 8
	out := make([]twoCallRank, world)
	var mu sync.Mutex
	errs := w.Run(func(tr transport.Transport) error {
		r := tr.Rank()
		rt := refit.New(control.Plain(w.Collective(r)))
		var rk twoCallRank
		for k, name := range []string{"a", "b"} {
			// the same tensor name in both calls: only the order tells them apart
			specs := []refit.Spec{{Name: "w", Src: src, Dst: dst}}
			c, err := rt.Prepare(context.Background(), specs, reshard.Flat, refit.Target{Transport: tr, Memory: transport.HostMemory{}},
				refit.Options{Name: name, Schedule: reshard.DefaultScheduleOptions, Timeout: 5 * time.Second})
			if err != nil {
				return err
			}
			b := buffers(src, dst, r)
			if b.Src != nil {
				if err := pattern.Fill(src, r, uint64(k+1), b.Src.(transport.HostBuffer), placement.View{}); err != nil {
					return err
				}
			}
			rk.calls[k], rk.bufs[k] = c, []refit.TensorBuffers{b}
		}
		mu.Lock()
		out[r] = rk
		mu.Unlock()
		return nil
	})
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestCallsCrossed runs two calls of the same layouts (and the same tensor
// name) in opposite orders on the two sides: the sources run a then b, the
// destinations b then a. Every step fails on every rank with a
// *CallMismatchError that names both calls, and no destination byte
// changes; run in the same order afterwards, both calls deliver their own
// data.
func TestCallsCrossed(t *testing.T) {
	src := mustLay(t, "16x8", "f32", "4", "S0", rng(0, 4))
	dst := mustLay(t, "16x8", "f32", "2x2", "R,S1", rng(4, 4))
	w := inproc.NewWorld(8)
	ranks := prepareTwoCalls(t, w, src, dst)
	var mu sync.Mutex
	var msgs []string
	errs := w.Run(func(tr transport.Transport) error {
		r := tr.Rank()
		order := []int{0, 1}
		if r >= 4 {
			order = []int{1, 0}
		}
		for _, k := range order {
			_, err := ranks[r].calls[k].Run(context.Background(), ranks[r].bufs[k])
			var cm *refit.CallMismatchError
			if !errors.As(err, &cm) {
				return fmt.Errorf("rank %d, call %d: %v, want a call mismatch", r, k, err)
			}
			mu.Lock()
			msgs = append(msgs, err.Error())
			mu.Unlock()
		}
		for k := range 2 {
			if b := ranks[r].bufs[k][0].Dst; b != nil {
				for i, v := range b.(transport.HostBuffer) {
					if v != pattern.Poison {
						return fmt.Errorf("rank %d, call %d: destination byte %d changed in a failed step", r, k, i)
					}
				}
			}
		}
		// the same order everywhere: both calls deliver their own data
		for k := range 2 {
			if _, err := ranks[r].calls[k].Run(context.Background(), ranks[r].bufs[k]); err != nil {
				return fmt.Errorf("rank %d, call %d in order: %v", r, k, err)
			}
			if b := ranks[r].bufs[k][0].Dst; b != nil {
				if err := pattern.Check(dst, r, uint64(k+1), b.(transport.HostBuffer), placement.View{}); err != nil {
					return fmt.Errorf("rank %d, call %d in order: %v", r, k, err)
				}
			}
		}
		return nil
	})
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	for _, m := range msgs {
		if !strings.Contains(m, `call #1 "a"`) || !strings.Contains(m, `call #2 "b"`) || !strings.Contains(m, "rank 4 began") {
			t.Fatalf("the mismatch does not name both calls and the first rank that differs: %s", m)
		}
	}
}

// TestStepSkipped has one rank refuse a step and then run another call
// than the others: that step fails on every rank, naming the call and
// step each side began.
func TestStepSkipped(t *testing.T) {
	src := mustLay(t, "16x8", "f32", "4", "S0", rng(0, 4))
	dst := mustLay(t, "16x8", "f32", "2x2", "R,S1", rng(4, 4))
	w := inproc.NewWorld(8)
	ranks := prepareTwoCalls(t, w, src, dst)
	errs := w.Run(func(tr transport.Transport) error {
		r := tr.Rank()
		c, bufs := ranks[r].calls[0], ranks[r].bufs[0]
		if r == 6 {
			if err := c.Refuse(context.Background(), errors.New("rank 6 skips")); err == nil {
				return errors.New("rank 6: a refusal was agreed")
			}
		} else if _, err := c.Run(context.Background(), bufs); err == nil {
			return fmt.Errorf("rank %d: a step rank 6 refused succeeded", r)
		}
		// now rank 6 runs another call: every rank fails naming both
		k := 0
		if r == 6 {
			k = 1
		}
		_, err := ranks[r].calls[k].Run(context.Background(), ranks[r].bufs[k])
		var cm *refit.CallMismatchError
		if !errors.As(err, &cm) || cm.Rank != 6 || cm.Step != 1 || cm.WantStep != 2 || len(cm.Differing) != 1 {
			return fmt.Errorf("rank %d: %v (%+v), want rank 6 naming step 1 of call b against step 2 of call a", r, err, cm)
		}
		return nil
	})
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
}

// TestCallsConcurrent runs two calls of the same layouts from two
// goroutines on every rank at once, many steps, as two threads of a C
// program may: steps never interleave on a rank (the runtime runs one at a
// time), and whatever order each rank's goroutines happen to take, a step
// either fails on every rank with a *CallMismatchError or delivers its own
// call's data: never the other call's.
func TestCallsConcurrent(t *testing.T) {
	src := mustLay(t, "16x8", "f32", "4", "S0", rng(0, 4))
	dst := mustLay(t, "16x8", "f32", "2x2", "R,S1", rng(4, 4))
	w := inproc.NewWorld(8)
	ranks := prepareTwoCalls(t, w, src, dst)
	const steps = 20
	var mu sync.Mutex
	ok, mismatched := 0, 0
	errs := w.Run(func(tr transport.Transport) error {
		r := tr.Rank()
		var wg sync.WaitGroup
		var first error
		for k := range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				c, bufs := ranks[r].calls[k], ranks[r].bufs[k]
				for range steps {
					_, err := c.Run(context.Background(), bufs)
					var cm *refit.CallMismatchError
					switch {
					case errors.As(err, &cm):
						mu.Lock()
						mismatched++
						mu.Unlock()
						continue
					case err != nil:
						mu.Lock()
						first = errors.Join(first, fmt.Errorf("rank %d, call %d: %v", r, k, err))
						mu.Unlock()
						return
					}
					mu.Lock()
					ok++
					mu.Unlock()
					if d := bufs[0].Dst; d != nil {
						if err := pattern.Check(dst, r, uint64(k+1), d.(transport.HostBuffer), placement.View{}); err != nil {
							mu.Lock()
							first = errors.Join(first, fmt.Errorf("rank %d, call %d holds other data: %v", r, k, err))
							mu.Unlock()
							return
						}
					}
				}
			}()
		}
		wg.Wait()
		return first
	})
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d rank-steps delivered their own call's data, %d failed as mismatched", ok, mismatched)
}
