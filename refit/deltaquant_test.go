package refit_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"sync/atomic"
	"testing"

	"github.com/m2n-dev/m2n/dtype"
	"github.com/m2n-dev/m2n/fp8"
	"github.com/m2n-dev/m2n/pattern"
	"github.com/m2n-dev/m2n/placement"
	"github.com/m2n-dev/m2n/refit"
	"github.com/m2n-dev/m2n/strided"
	"github.com/m2n-dev/m2n/transport"
)

// fp8DeltaTensors are the converting tensors of the FP8 delta tests: one
// whose source and destination shards cut 128x128 blocks (their amaxes
// combine across ranks), one smaller than a block.
func fp8DeltaTensors(t testing.TB, mode fp8.Mode) []deltaTensor {
	return []deltaTensor{
		{"w", mustLay(t, "256x320", "bf16", "4", "S0", rng(0, 4)), mustLay(t, "256x320", "fp8e4m3", "2x2", "R,S1", rng(4, 4)), mode},
		{"b", mustLay(t, "10x7", "bf16", "2x2", "S0,S1", rng(0, 4)), mustLay(t, "10x7", "fp8e4m3", "4", "S1", rng(4, 4)), mode},
	}
}

// fp8DeltaRank is one rank's side of an FP8 delta test: its buffers, and
// per tensor the whole bf16 tensor as the updates leave it, from which
// check derives the dense FP8 reference.
type fp8DeltaRank struct {
	rank  int
	ts    []deltaTensor
	bufs  []refit.TensorBuffers
	full  [][]byte
	whole []placement.Layout // each tensor on one rank, replicated
	steps uint64
}

func newFP8DeltaRank(t testing.TB, rank int, ts []deltaTensor) *fp8DeltaRank {
	d := &fp8DeltaRank{rank: rank, ts: ts}
	for i, x := range ts {
		var b refit.TensorBuffers
		if x.src.Mesh().Contains(rank) {
			h := make([]byte, x.src.LocalBytes(rank))
			if err := pattern.FillFloats(x.src, rank, uint64(i), h, placement.View{}); err != nil {
				t.Fatal(err)
			}
			b.Src = transport.HostBuffer(h)
		}
		if x.dst.Mesh().Contains(rank) {
			b.Dst = transport.HostBuffer(bytes.Repeat([]byte{pattern.Poison}, int(x.dst.LocalBytes(rank))))
			spec := refit.Spec{Name: x.name, Src: x.src, Dst: x.dst, Scale: x.scale}
			n, err := spec.ScaleBytes(rank)
			if err != nil {
				t.Fatal(err)
			}
			b.Scale = transport.HostBuffer(bytes.Repeat([]byte{pattern.Poison}, int(n)))
		}
		shape := x.src.Shape()
		whole := mustLay(t, fmt.Sprintf("%dx%d", shape[0], shape[1]), "bf16", "1", "R", rng(0, 1))
		full := make([]byte, whole.LocalBytes(0))
		if err := pattern.FillFloats(whole, 0, uint64(i), full, placement.View{}); err != nil {
			t.Fatal(err)
		}
		d.bufs, d.full, d.whole = append(d.bufs, b), append(d.full, full), append(d.whole, whole)
	}
	return d
}

// update changes a fraction frac of every tensor's elements (their low
// mantissa bits: pattern.Change) and, with raise not 0, sets element
// (3, 5) of every tensor to the bf16 value raise, so that its block's
// amax and scale change: bigRaise (512) far above every other element,
// smallRaise (0.1875) a quarter above the amax of tensor w's first block.
func (d *fp8DeltaRank) update(frac float64, raise uint16) error {
	d.steps++
	for i, x := range d.ts {
		if err := pattern.Change(d.whole[i], 0, uint64(i), d.steps, frac, d.full[i], placement.View{}); err != nil {
			return err
		}
		if raise != 0 {
			binary.LittleEndian.PutUint16(d.full[i][2*(3*x.src.Shape()[1]+5):], raise)
		}
		s := d.bufs[i].Src
		if s == nil {
			continue
		}
		if err := pattern.Change(x.src, d.rank, uint64(i), d.steps, frac, s.(transport.HostBuffer), placement.View{}); err != nil {
			return err
		}
		if box, _ := x.src.RankBox(d.rank); raise != 0 && box.Lo[0] <= 3 && 3 < box.Hi[0] && box.Lo[1] <= 5 && 5 < box.Hi[1] {
			w := box.Hi[1] - box.Lo[1]
			binary.LittleEndian.PutUint16(s.(transport.HostBuffer)[2*((3-box.Lo[0])*w+5-box.Lo[1]):], raise)
		}
	}
	return nil
}

// update's raises, bf16 values.
const (
	bigRaise   = 0x4400
	smallRaise = 0x3E40
)

// check compares every destination code and scale with quantizing the
// whole tensor at once (fp8.Grid over the whole bf16 tensor).
func (d *fp8DeltaRank) check(what string) error {
	for i, x := range d.ts {
		if d.bufs[i].Dst == nil {
			continue
		}
		shape := x.src.Shape()
		g, err := fp8.NewGrid(shape, x.scale)
		if err != nil {
			return err
		}
		w, err := g.NewWindow(g.All())
		if err != nil {
			return err
		}
		all := placement.Box{Lo: []int64{0, 0}, Hi: shape}
		if err := g.Amax(w, fp8.Dense(dtype.BF16, d.full[i], all)); err != nil {
			return err
		}
		if err := w.ToScales(); err != nil {
			return err
		}
		codes := make([]byte, all.Elems())
		r := fp8.Region{DType: dtype.BF16, Data: d.full[i], At: strided.Desc{Run: int64(len(d.full[i]))}, Box: all}
		if err := g.Pack(codes, r, w); err != nil {
			return err
		}
		err = pattern.CheckFunc(x.dst, d.rank, d.bufs[i].Dst.(transport.HostBuffer), placement.View{}, func(k int64, out []byte) { out[0] = codes[k] })
		if err != nil {
			return fmt.Errorf("%s: tensor %s: %w", what, x.name, err)
		}
		box, _ := x.dst.RankBox(d.rank)
		blocks, err := g.Blocks(box)
		if err != nil {
			return err
		}
		got := d.bufs[i].Scale.(transport.HostBuffer)
		k := 0
		for b0 := blocks.Lo[0]; b0 < blocks.Hi[0]; b0++ {
			for b1 := blocks.Lo[1]; b1 < blocks.Hi[1]; b1++ {
				j, ok := w.Index([]int64{b0, b1})
				if !ok {
					return fmt.Errorf("block (%d, %d) outside the whole tensor's window", b0, b1)
				}
				if s := math.Float32frombits(binary.LittleEndian.Uint32(got[4*k:])); math.Float32bits(s) != math.Float32bits(w.Values[j]) {
					return fmt.Errorf("%s: rank %d, tensor %s: block (%d, %d) has scale %v, want %v", what, d.rank, x.name, b0, b1, s, w.Values[j])
				}
				k++
			}
		}
		if 4*k != len(got) {
			return fmt.Errorf("%s: rank %d, tensor %s: %d scale bytes for %d blocks", what, d.rank, x.name, len(got), k)
		}
	}
	return nil
}

// TestDeltaFP8 runs calls in delta mode whose tensors convert bf16 to
// FP8 (each scale mode, flat and hier, coalesced, verified and atomic),
// for steps that change 0%, 1%, 50% and 100% of the elements, one that
// also raises an element so that its block's scale changes, and 1%
// again, and after every step compares every destination code and scale
// with quantizing the whole updated tensor at once. The first step is a
// full sync; with nothing changed only headers move; at 1% at most a
// quarter of the dense codes.
func TestDeltaFP8(t *testing.T) {
	configs := []struct {
		deltaConfig
		mode fp8.Mode
	}{
		{deltaConfig{route: "flat"}, fp8.Block},
		{deltaConfig{route: "hier"}, fp8.Row},
		{deltaConfig{route: "flat", coalesce: 4096}, fp8.Tensor},
		{deltaConfig{route: "hier", verify: true, atomic: true}, fp8.Block},
		{deltaConfig{route: "flat", atomic: true, coalesce: 4096}, fp8.Row},
	}
	for _, cfg := range configs {
		t.Run(fmt.Sprintf("%+v,%v", cfg.deltaConfig, cfg.mode), func(t *testing.T) {
			ts := fp8DeltaTensors(t, cfg.mode)
			runDeltaCall(t, cfg.deltaConfig, ts, nil, func(r int, c *refit.Call) error {
				d := newFP8DeltaRank(t, r, ts)
				for k, frac := range []float64{-1, 0, 0.01, 0.5, 1, 0.01, 0.01} {
					big := k == 5
					if k > 0 {
						raise := uint16(0)
						if big {
							raise = bigRaise
						}
						if err := d.update(frac, raise); err != nil {
							return err
						}
					}
					what := fmt.Sprintf("step %d (%v changed, scale change %v)", k+1, frac, big)
					rep, err := runDeltaStep(c, d.bufs, d.check, what, k, frac)
					if err != nil {
						return err
					}
					if sent, dense := netBytes(rep.Stats.Sent), netBytes(rep.Stats.DenseSent); frac == 0.01 && !big && sent > dense/4 {
						return fmt.Errorf("%s: %d bytes sent of %d dense", what, sent, dense)
					}
				}
				return nil
			})
		})
	}
}

// TestDeltaFP8Faults flips a byte of an encoding of FP8 codes on the
// wire into rank 5 in the third step of a verified call in delta mode, so
// that every rank fails the step with a checksum error. Atomic, rank 5's
// codes and scales must still be the second step's and the next step a
// delta again, encoded against the codes the destinations hold (the
// failed step moved a scale a little: a source that kept the codes it
// rescaled for it would send most of that block again); not atomic, the
// next step is a full sync. Either way the step after ends with every
// code and scale right.
func TestDeltaFP8Faults(t *testing.T) {
	for _, atomicMode := range []bool{true, false} {
		t.Run(fmt.Sprintf("atomic=%v", atomicMode), func(t *testing.T) {
			ts := fp8DeltaTensors(t, fp8.Block)
			var arm atomic.Bool
			dc := deltaConfig{route: "hier", verify: true, atomic: atomicMode}
			runDeltaCall(t, dc, ts, flipInto5(&arm, -1), func(r int, c *refit.Call) error {
				d := newFP8DeltaRank(t, r, ts)
				for k := 1; k <= 2; k++ {
					if k > 1 {
						if err := d.update(0.01, 0); err != nil {
							return err
						}
					}
					if _, err := c.Run(context.Background(), d.bufs); err != nil {
						return fmt.Errorf("step %d: %w", k, err)
					}
				}
				var before [][]byte
				for _, b := range d.bufs {
					if b.Dst != nil {
						before = append(before, bytes.Clone(b.Dst.(transport.HostBuffer)), bytes.Clone(b.Scale.(transport.HostBuffer)))
					}
				}
				if err := d.update(0.05, smallRaise); err != nil {
					return err
				}
				if err := runFlippedStep(c, d.bufs, &arm, r, atomicMode); err != nil {
					return err
				}
				if atomicMode {
					k := 0
					for i, b := range d.bufs {
						if b.Dst == nil {
							continue
						}
						if !bytes.Equal(before[k], b.Dst.(transport.HostBuffer)) || !bytes.Equal(before[k+1], b.Scale.(transport.HostBuffer)) {
							return fmt.Errorf("rank %d: the failed atomic step changed tensor %s's codes or scales", r, d.ts[i].name)
						}
						k += 2
					}
				}
				if err := d.update(0.01, 0); err != nil {
					return err
				}
				rep, err := c.Run(context.Background(), d.bufs)
				if err != nil {
					return fmt.Errorf("the step after the failed one: %w", err)
				}
				if rep.Delta != atomicMode {
					return fmt.Errorf("rank %d: the step after the failed one: Report.Delta %v, want %v", r, rep.Delta, atomicMode)
				}
				// the failed step moved a scale: the sources' codes must
				// still be those the destinations hold, rescaled once
				if sent, dense := netBytes(rep.Stats.Sent), netBytes(rep.Stats.DenseSent); atomicMode && sent > dense/4 {
					return fmt.Errorf("rank %d: the step after the failed one sent %d bytes of %d dense", r, sent, dense)
				}
				return d.check("after the failed step")
			})
		})
	}
}

// TestDeltaFP8ScaleMoved raises one element of each tensor, and nothing
// else, so that the scale of the block holding it moves and most of the
// block's codes change: the destinations must still hold every code and
// scale of quantizing the whole tensor, and the step must send far less
// than the block's codes, because both sides rescale the old codes for the
// new scale (fp8.Grid.Rescale) and only the codes the prediction misses
// travel, not every code that differs from the old ones.
func TestDeltaFP8ScaleMoved(t *testing.T) {
	for _, cfg := range []deltaConfig{{route: "flat"}, {route: "hier", atomic: true}} {
		t.Run(fmt.Sprintf("%+v", cfg), func(t *testing.T) {
			ts := fp8DeltaTensors(t, fp8.Block)
			runDeltaCall(t, cfg, ts, nil, func(r int, c *refit.Call) error {
				d := newFP8DeltaRank(t, r, ts)
				if _, err := runDeltaStep(c, d.bufs, d.check, "the full step", 0, -1); err != nil {
					return err
				}
				if err := d.update(0, bigRaise); err != nil {
					return err
				}
				rep, err := c.Run(context.Background(), d.bufs)
				if err != nil {
					return err
				}
				if err := d.check("the step that moves a scale"); err != nil {
					return err
				}
				sent, dense := netBytes(rep.Stats.Sent), netBytes(rep.Stats.DenseSent)
				if sent > dense/16 {
					return fmt.Errorf("rank %d: the step that moves a scale sent %d bytes of %d dense (at most 1/16)", r, sent, dense)
				}
				return nil
			})
		})
	}
}
