package refit_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/m2n-dev/m2n/control"
	"github.com/m2n-dev/m2n/refit"
	"github.com/m2n-dev/m2n/reshard"
	"github.com/m2n-dev/m2n/transport"
	"github.com/m2n-dev/m2n/transport/inproc"
)

// armed flips one byte of the first message its rank receives once armed.
type armed struct {
	transport.Transport
	arm *atomic.Bool
}

func (a armed) Start(ops []transport.Op) (transport.Pending, error) {
	p, err := a.Transport.Start(ops)
	if err != nil {
		return nil, err
	}
	return armedPending{p, a.arm, ops}, nil
}

type armedPending struct {
	transport.Pending
	arm *atomic.Bool
	ops []transport.Op
}

func (p armedPending) Wait(ctx context.Context) error {
	if err := p.Pending.Wait(ctx); err != nil {
		return err
	}
	for _, o := range p.ops {
		if !o.Send && o.Len > 0 && p.arm.CompareAndSwap(true, false) {
			o.Buf.(transport.HostBuffer)[o.Off] ^= 0x10
		}
	}
	return nil
}

// TestVersions runs steps of a verified call, atomic and not, and checks
// on every rank the version each step carries and what Held says after
// it: versions count up by themselves, SetVersion sets one, ranks that
// give different versions fail the step alike (nothing moved, the held
// version unchanged), and a step that fails on the wire (a byte flipped
// into rank 5) leaves the held version intact only with Atomic; the next
// good step holds its version again.
func TestVersions(t *testing.T) {
	const world = 8
	src, dst := mustLay(t, "16x8", "bf16", "4", "S0", rng(0, 4)), mustLay(t, "16x8", "bf16", "2x2", "R,S1", rng(4, 4))
	for _, atomicCall := range []bool{false, true} {
		var arm atomic.Bool
		w := inproc.NewWorld(world)
		errs := w.Run(func(tr transport.Transport) error {
			r := tr.Rank()
			if r == 5 {
				tr = armed{tr, &arm}
			}
			o := flatOpts()
			o.Verify, o.Atomic, o.Timeout = true, atomicCall, 5*time.Second
			c, err := refit.New(control.Plain(w.Collective(r))).Prepare(context.Background(), []refit.Spec{{Name: "w", Src: src, Dst: dst}},
				reshard.Flat, refit.Target{Transport: tr, Memory: transport.HostMemory{}}, o)
			if err != nil {
				return err
			}
			defer c.Close()
			bufs := []refit.TensorBuffers{buffers(src, dst, r)}
			if h := c.Held(); h != (refit.Held{Intact: true}) {
				return fmt.Errorf("before any step: %v", h)
			}
			step := func(wantVersion uint64, wantErr string, want refit.Held) error {
				rep, err := c.Run(context.Background(), bufs)
				if (err == nil) != (wantErr == "") || err != nil && !strings.Contains(err.Error(), wantErr) {
					return fmt.Errorf("version %d: error %v, want %q", wantVersion, err, wantErr)
				}
				if rep.Version != wantVersion {
					return fmt.Errorf("the step carries version %d, want %d", rep.Version, wantVersion)
				}
				if h := c.Held(); h != want {
					return fmt.Errorf("after version %d (error %v): holds %v, want %v", wantVersion, err, h, want)
				}
				return nil
			}
			held := func(v uint64) refit.Held { return refit.Held{Version: v, Verified: true, Intact: true} }
			for _, f := range []func() error{
				func() error { return step(1, "", held(1)) },
				func() error { return step(2, "", held(2)) },
				func() error { _ = c.SetVersion(10); return step(10, "", held(10)) },
				func() error {
					v := uint64(12)
					if r == 3 {
						v = 11
					}
					_ = c.SetVersion(v)
					return step(v, "rank 3 begins the step as version 11, rank 0 as version 12", held(10))
				},
				func() error { return step(11, "", held(11)) }, // the mismatched step did not count
				func() error {
					if r == 5 {
						arm.Store(true)
					}
					want := held(11)
					want.Intact = atomicCall
					return step(12, "CRC-32C", want)
				},
				func() error { return step(13, "", held(13)) },
			} {
				if err := f(); err != nil {
					return fmt.Errorf("rank %d, atomic %v: %w", r, atomicCall, err)
				}
			}
			if err := c.SetVersion(0); err == nil {
				return fmt.Errorf("rank %d: SetVersion(0) accepted", r)
			}
			return nil
		})
		if err := errors.Join(errs...); err != nil {
			t.Fatal(err)
		}
	}
}
