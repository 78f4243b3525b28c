package refit_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/m2n-dev/m2n/control"
	"github.com/m2n-dev/m2n/fp8"
	"github.com/m2n-dev/m2n/placement"
	"github.com/m2n-dev/m2n/refit"
	"github.com/m2n-dev/m2n/reshard"
	"github.com/m2n-dev/m2n/reshard/program"
	"github.com/m2n-dev/m2n/transport"
	"github.com/m2n-dev/m2n/transport/inproc"
	"github.com/m2n-dev/m2n/transport/transporttest"
)

// TestFP8SelfScaled: tensors whose every source part holds its blocks
// whole and whose every destination part lies in the same rank's source
// part (fp8.Grid.ScalesLocal) convert on the host driver from each rank's
// own amaxes, with nothing exchanged but failures: every byte and scale
// is still quantizing the whole tensor's, in each mode, over colocated
// layouts that agree, a replicated source sharded, and shards on block
// edges that each generator rank also holds.
func TestFP8SelfScaled(t *testing.T) {
	cases := []transporttest.Case{
		{Src: mustLay(t, "512x384", "bf16", "4", "S0", rng(0, 4)), Dst: mustLay(t, "512x384", "fp8e4m3", "4", "S0", rng(0, 4))},
		{Src: mustLay(t, "300x260", "f32", "2", "R", rng(0, 2)), Dst: mustLay(t, "300x260", "fp8e4m3", "2", "S1", rng(0, 2))},
		{Src: mustLay(t, "256x512", "bf16", "2", "S1", rng(0, 2)), Dst: mustLay(t, "256x512", "fp8e4m3", "2x2", "S1,S0", rng(0, 4))},
	}
	for _, c := range cases {
		for _, mode := range []fp8.Mode{fp8.Block, fp8.Row, fp8.Tensor} {
			g, err := fp8.NewGrid(c.Src.Shape(), mode)
			if err != nil {
				t.Fatal(err)
			}
			local, err := g.ScalesLocal(c.Src, c.Dst, c.World())
			if err != nil {
				t.Fatal(err)
			}
			wantLocal := mode != fp8.Tensor || c.Src.Mesh().Size() == 1 || c.Src.Placements()[0] == placement.Replicate()
			if c.Dst.Mesh().Size() == 4 && c.Src.Mesh().Size() == 2 {
				wantLocal = false // ranks 2 and 3 hold destination parts only
			}
			if local != wantLocal {
				t.Errorf("%v, %v: ScalesLocal %v, want %v", c, mode, local, wantLocal)
			}
			w := inproc.NewWorld(c.World())
			errs := w.Run(func(tr transport.Transport) error {
				env := transporttest.Env{T: tr, Mem: transport.HostMemory{}, IO: transport.HostMemory{}, Opts: reshard.DefaultScheduleOptions}
				_, err := transporttest.RunFP8Case(context.Background(), env, control.Plain(w.Collective(tr.Rank())), c, reshard.Flat, mode, refit.Options{}, 2)
				if err != nil {
					tr.Abort(err)
				}
				return err
			})
			if err := errors.Join(errs...); err != nil {
				t.Errorf("%v, %v: %v", c, mode, err)
			}
		}
	}
}

// selfDevice is a device driver for TestFP8SelfScaledOnDevice: it moves
// nothing, keeps the StepInput.Quant it is given, and reports the
// tensors in nonFinite as a device driver that found their scales
// non-finite does.
type selfDevice struct {
	got       []refit.TensorQuant
	nonFinite []int
}

func (d *selfDevice) Name() string { return string(refit.DriverReplay) }
func (d *selfDevice) Close() error { return nil }
func (d *selfDevice) Move(_ context.Context, in refit.StepInput) (refit.Stats, error) {
	d.got = in.Quant
	return refit.Stats{NonFinite: d.nonFinite}, nil
}

// TestFP8SelfScaledOnDevice: on a device driver, a call that is not
// atomic hands a self-scaled tensor to the driver to scale (TensorQuant.Self,
// with the rank's part, its blocks and its destination blocks, and no
// scales), keeps exchanging the others' amaxes, and turns a driver's
// Stats.NonFinite into a *NonFiniteError on every rank naming the first
// NaN, after which the group runs the next step.
func TestFP8SelfScaledOnDevice(t *testing.T) {
	src := mustLay(t, "256x384", "bf16", "2", "S0", rng(0, 2))
	dst := mustLay(t, "256x384", "fp8e4m3", "2", "S0", rng(0, 2))
	cut := mustLay(t, "256x384", "bf16", "2", "S1", rng(0, 2)) // 192 columns each: cuts blocks
	specs := []refit.Spec{{Name: "self", Src: src, Dst: dst, Scale: fp8.Block}, {Name: "cut", Src: cut, Dst: dst, Scale: fp8.Block}}
	w := inproc.NewWorld(2)
	drivers := []*selfDevice{{}, {nonFinite: []int{0}}}
	errs := make([]error, 2)
	second := make([]error, 2)
	var wg sync.WaitGroup
	for r := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			bufs := make([]refit.TensorBuffers, len(specs))
			for i, sp := range specs {
				bufs[i] = fp8Buffers(t, sp, r)
			}
			if r == 1 {
				setBF16(t, src, r, bufs[0].Src, []int64{130, 7}, 0x7FC0) // NaN, flat 49927
			}
			target := refit.Target{Transport: w.Transport(r), Memory: transport.HostMemory{},
				Device: func(*program.Program) (refit.Driver, error) { return drivers[r], nil }}
			call, err := refit.New(control.Plain(w.Collective(r))).Prepare(ctx, specs, reshard.Flat, target, flatOpts())
			if err != nil {
				errs[r] = err
				return
			}
			defer call.Close()
			_, errs[r] = call.Run(ctx, bufs)
			drivers[r].nonFinite = nil
			_, second[r] = call.Run(ctx, bufs)
		}()
	}
	wg.Wait()
	for r, err := range errs {
		var nf *refit.NonFiniteError
		if !errors.As(err, &nf) || nf.Tensor != "self" || nf.Rank != 1 || nf.Flat != 130*384+7 {
			t.Errorf("rank %d: %v, want the NaN of tensor \"self\" at flat %d on rank 1", r, err, 130*384+7)
		}
		if second[r] != nil {
			t.Errorf("rank %d: the step after: %v", r, second[r])
		}
		got := drivers[r].got
		if len(got) != 2 {
			t.Fatalf("rank %d: the driver got %d tensors' FP8 inputs", r, len(got))
		}
		box, _ := src.RankBox(r)
		if q := got[0]; !q.Self || !q.Part.Equal(box) || q.Scales.Window.Values != nil || q.PartBlocks.Elems() != 3 || !q.DstBlocks.Equal(q.PartBlocks) {
			t.Errorf("rank %d: the self-scaled tensor's input %+v, want Self over part %v, 1x3 blocks, no scales", r, q, box)
		}
		if q := got[1]; q.Self || q.Scales.Window.Values == nil {
			t.Errorf("rank %d: the tensor whose blocks are cut came as %+v, want exchanged scales", r, q)
		}
	}
}
