package refit_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/m2n-dev/m2n/pattern"
	"github.com/m2n-dev/m2n/placement"
	"github.com/m2n-dev/m2n/refit"
	"github.com/m2n-dev/m2n/reshard"
	"github.com/m2n-dev/m2n/transport"
	"github.com/m2n-dev/m2n/transport/inproc"
)

// TestDerivedReused prepares one call three times on four in-process
// ranks, each time in a new group (a generator that left and another that
// joined), every rank keeping a Derived of its own: the second
// preparation, with the same inputs, re-uses what the first derived on
// every rank; the third, with another chunk size, derives afresh. Every
// step moves every element.
func TestDerivedReused(t *testing.T) {
	const world = 4
	src := mustLay(t, "16x12", "f32", "2", "S0", rng(0, 2))
	dst := mustLay(t, "16x12", "f32", "2", "S1", rng(2, 2))
	derived := make([]*refit.Derived, world)
	for r := range derived {
		derived[r] = refit.NewDerived(4)
	}
	for i, chunk := range []int64{1 << 20, 1 << 20, 64} {
		w := inproc.NewWorld(world)
		errs := make([]error, world)
		var wg sync.WaitGroup
		for r := 0; r < world; r++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[r] = prepareAndCheck(w, r, src, dst, chunk, derived[r])
			}()
		}
		wg.Wait()
		for r, err := range errs {
			if err != nil {
				t.Fatalf("preparation %d, rank %d: %v", i, r, err)
			}
		}
		want := []int{0, 1, 1}[i]
		for r, d := range derived {
			if got := d.Reused(); got != want {
				t.Errorf("after preparation %d (chunk %d), rank %d re-used %d times, want %d", i, chunk, r, got, want)
			}
		}
	}
}

// prepareAndCheck prepares src -> dst on rank r of w with chunk bytes and
// d, runs one step and checks every element this rank receives.
func prepareAndCheck(w *inproc.World, r int, src, dst placement.Layout, chunk int64, d *refit.Derived) error {
	opts := refit.Options{Schedule: reshard.ScheduleOptions{ChunkBytes: chunk, StagingBytes: 8 << 20}, Timeout: 5 * time.Second, Derived: d}
	specs := []refit.Spec{{Name: "w", Src: src, Dst: dst}}
	c, err := refit.New(refit.Plain(w.Collective(r))).Prepare(context.Background(), specs, reshard.Flat{},
		refit.Target{Transport: w.Transport(r), Memory: transport.HostMemory{}}, opts)
	if err != nil {
		return err
	}
	defer c.Close()
	bufs := []refit.TensorBuffers{buffers(src, dst, r)}
	if _, err := c.Run(context.Background(), bufs); err != nil {
		return err
	}
	if dst.Mesh().Contains(r) {
		return pattern.Check(dst, r, 0, bufs[0].Dst.(transport.HostBuffer), placement.View{})
	}
	return nil
}
