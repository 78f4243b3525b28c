package refit_test

import (
	"context"
	"fmt"
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

// TestDerivedReused prepares one call five times on four in-process
// ranks, each time in a new group (a generator that left and another that
// joined), every rank keeping a Derived of its own: the second
// preparation, with the same inputs, re-uses what the first derived on
// every rank; the third, with another chunk size, derives afresh, and so
// does the fourth, in delta mode (another input); the fifth re-uses the
// fourth's and still runs in delta mode (its second step sends less than
// a dense one). Every step moves every element.
func TestDerivedReused(t *testing.T) {
	const world = 4
	src := mustLay(t, "16x12", "f32", "2", "S0", rng(0, 2))
	dst := mustLay(t, "16x12", "f32", "2", "S1", rng(2, 2))
	derived := make([]*refit.Derived, world)
	for r := range derived {
		derived[r] = refit.NewDerived(4)
	}
	for i, p := range []struct {
		chunk int64
		delta bool
	}{{1 << 20, false}, {1 << 20, false}, {64, false}, {1 << 20, true}, {1 << 20, true}} {
		w := inproc.NewWorld(world)
		errs := make([]error, world)
		var wg sync.WaitGroup
		for r := 0; r < world; r++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[r] = prepareAndCheck(w, r, src, dst, p.chunk, p.delta, derived[r])
			}()
		}
		wg.Wait()
		for r, err := range errs {
			if err != nil {
				t.Fatalf("preparation %d, rank %d: %v", i, r, err)
			}
		}
		want := []int{0, 1, 1, 1, 2}[i]
		for r, d := range derived {
			if got := d.Reused(); got != want {
				t.Errorf("after preparation %d (chunk %d, delta %v), rank %d re-used %d times, want %d", i, p.chunk, p.delta, r, got, want)
			}
		}
	}
}

// prepareAndCheck prepares src -> dst on rank r of w with chunk bytes, in
// delta mode or not, and d, runs one step (two in delta mode, the second
// of which must send less than a dense step on a source rank) and checks
// every element this rank receives.
func prepareAndCheck(w *inproc.World, r int, src, dst placement.Layout, chunk int64, delta bool, d *refit.Derived) error {
	opts := refit.Options{Schedule: reshard.ScheduleOptions{ChunkBytes: chunk, StagingBytes: 8 << 20}, Timeout: 5 * time.Second, Delta: delta, Derived: d}
	specs := []refit.Spec{{Name: "w", Src: src, Dst: dst}}
	c, err := refit.New(control.Plain(w.Collective(r))).Prepare(context.Background(), specs, reshard.Flat,
		refit.Target{Transport: w.Transport(r), Memory: transport.HostMemory{}}, opts)
	if err != nil {
		return err
	}
	defer c.Close()
	bufs := []refit.TensorBuffers{buffers(src, dst, r)}
	if _, err := c.Run(context.Background(), bufs); err != nil {
		return err
	}
	if delta {
		rep, err := c.Run(context.Background(), bufs)
		if err != nil {
			return err
		}
		if sent, dense := netBytes(rep.Stats.Sent), netBytes(rep.Stats.DenseSent); src.Mesh().Contains(r) && (dense == 0 || sent >= dense) {
			return fmt.Errorf("rank %d: the second delta step sent %d bytes against %d dense", r, sent, dense)
		}
	}
	if dst.Mesh().Contains(r) {
		return pattern.Check(dst, r, 0, bufs[0].Dst.(transport.HostBuffer), placement.View{})
	}
	return nil
}
