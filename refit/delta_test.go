package refit_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/m2n-dev/m2n/control"
	"github.com/m2n-dev/m2n/fp8"
	"github.com/m2n-dev/m2n/hier"
	"github.com/m2n-dev/m2n/pattern"
	"github.com/m2n-dev/m2n/placement"
	"github.com/m2n-dev/m2n/refit"
	"github.com/m2n-dev/m2n/reshard"
	"github.com/m2n-dev/m2n/transport"
	"github.com/m2n-dev/m2n/transport/inproc"
)

// deltaTensor is one tensor of a delta test call.
type deltaTensor struct {
	name     string
	src, dst placement.Layout
	scale    fp8.Mode // converts to FP8 with this mode (0: does not convert)
}

// deltaRank is one rank's side of a delta test: its buffers and the
// destination bytes every step must leave.
type deltaRank struct {
	rank  int
	ts    []deltaTensor
	bufs  []refit.TensorBuffers
	want  [][]byte // per tensor, the destination part's expected bytes (nil: none)
	steps uint64   // updates applied so far
}

func newDeltaRank(t testing.TB, rank int, ts []deltaTensor) *deltaRank {
	d := &deltaRank{rank: rank, ts: ts}
	for i, x := range ts {
		b := buffers(x.src, x.dst, rank)
		if b.Src != nil {
			if err := pattern.Fill(x.src, rank, uint64(i), b.Src.(transport.HostBuffer), placement.View{}); err != nil {
				t.Fatal(err)
			}
		}
		var w []byte
		if b.Dst != nil {
			w = make([]byte, b.Dst.Len())
			if err := pattern.Fill(x.dst, rank, uint64(i), w, placement.View{}); err != nil {
				t.Fatal(err)
			}
		}
		d.bufs, d.want = append(d.bufs, b), append(d.want, w)
	}
	return d
}

// update applies the next update, changing a fraction frac of every
// tensor's elements, to the sources and the expected destinations.
func (d *deltaRank) update(frac float64) error { return d.updateOnly(frac, -1) }

// updateOnly is update of tensor only alone (every tensor: -1).
func (d *deltaRank) updateOnly(frac float64, only int) error {
	d.steps++
	for i, x := range d.ts {
		if only >= 0 && i != only {
			continue
		}
		if s := d.bufs[i].Src; s != nil {
			if err := pattern.Change(x.src, d.rank, uint64(i), d.steps, frac, s.(transport.HostBuffer), placement.View{}); err != nil {
				return err
			}
		}
		if d.want[i] != nil {
			if err := pattern.Change(x.dst, d.rank, uint64(i), d.steps, frac, d.want[i], placement.View{}); err != nil {
				return err
			}
		}
	}
	return nil
}

// check compares every destination element with the expected bytes.
func (d *deltaRank) check(what string) error {
	for i, w := range d.want {
		if w == nil {
			continue
		}
		got := d.bufs[i].Dst.(transport.HostBuffer)
		if !bytes.Equal(got, w) {
			n := 0
			for k := range w {
				if got[k] != w[k] {
					n++
				}
			}
			return fmt.Errorf("%s: rank %d, tensor %s: %d of %d destination bytes wrong", what, d.rank, d.ts[i].name, n, len(w))
		}
	}
	return nil
}

// netBytes sums s's bytes over the links between ranks.
func netBytes(s [reshard.LinkClasses]int64) int64 {
	var n int64
	for c, b := range s {
		if reshard.LinkClass(c) != reshard.LinkSelf {
			n += b
		}
	}
	return n
}

// abortOnError aborts the world when a rank's fn fails, so that the
// other ranks' collectives end instead of waiting for it.
func abortOnError(fn func(transport.Transport) error) func(transport.Transport) error {
	return func(tr transport.Transport) error {
		err := fn(tr)
		if err != nil {
			tr.Abort(err)
		}
		return err
	}
}

// runDeltaCall prepares cfg's call of ts on every rank of an 8-rank
// in-process world, over wrap's transport where wrap is not nil, and runs
// step on every rank with its call; a rank whose step fails aborts the
// world (abortOnError), and the test fails with every rank's error.
func runDeltaCall(t *testing.T, cfg deltaConfig, ts []deltaTensor, wrap func(r int, tr transport.Transport) transport.Transport, step func(r int, c *refit.Call) error) {
	t.Helper()
	w := inproc.NewWorld(8)
	errs := w.Run(abortOnError(func(tr transport.Transport) error {
		r := tr.Rank()
		if wrap != nil {
			tr = wrap(r, tr)
		}
		c, err := cfg.prepare(w, r, tr, ts)
		if err != nil {
			return err
		}
		defer c.Close()
		return step(r, c)
	}))
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
}

// runDeltaStep runs step k (from 0, named what) of call c in delta mode
// on bufs, after an update that changed a fraction frac of the elements,
// checks every destination element with check, and checks the report's
// bytes: the first step is a full sync (no dense bytes counted), the
// others delta steps, and with nothing changed only a header and an op a
// message move.
func runDeltaStep(c *refit.Call, bufs []refit.TensorBuffers, check func(what string) error, what string, k int, frac float64) (*refit.Report, error) {
	rep, err := c.Run(context.Background(), bufs)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	if err := check(what); err != nil {
		return nil, err
	}
	sent, dense := netBytes(rep.Stats.Sent), netBytes(rep.Stats.DenseSent)
	switch {
	case rep.Delta != (k > 0):
		return nil, fmt.Errorf("%s: Report.Delta %v, want %v (the first step is a full sync, the others delta steps)", what, rep.Delta, k > 0)
	case k == 0 && dense != 0:
		return nil, fmt.Errorf("%s counts %d dense bytes: it must be a full sync", what, dense)
	case k > 0 && sent > 0 && dense == 0:
		return nil, fmt.Errorf("%s sent %d bytes but counts no dense bytes: not a delta step", what, sent)
	case frac == 0 && sent > int64(32*rep.Stats.Messages):
		return nil, fmt.Errorf("%s: nothing changed, yet %d bytes sent in %d messages", what, sent, rep.Stats.Messages)
	}
	return rep, nil
}

// deltaConfig is one configuration of TestDelta.
type deltaConfig struct {
	dtype    string
	route    string
	coalesce int64
	verify   bool
	atomic   bool
}

func deltaTensors(t testing.TB, dtype string) []deltaTensor {
	return []deltaTensor{
		// replicated destinations: each source region goes to two replicas
		{"w", mustLay(t, "96x80", dtype, "4", "S0", rng(0, 4)), mustLay(t, "96x80", dtype, "2x2", "R,S1", rng(4, 4)), 0},
		// small messages (coalesced when asked), a shape that cuts blocks
		{"b", mustLay(t, "10x7", dtype, "2x2", "S0,S1", rng(0, 4)), mustLay(t, "10x7", dtype, "4", "S1", rng(4, 4)), 0},
	}
}

func (c deltaConfig) prepare(w *inproc.World, r int, tr transport.Transport, ts []deltaTensor) (*refit.Call, error) {
	specs := make([]refit.Spec, len(ts))
	for i, x := range ts {
		specs[i] = refit.Spec{Name: x.name, Src: x.src, Dst: x.dst, Scale: x.scale}
	}
	o := flatOpts()
	o.Delta, o.Verify, o.Atomic, o.CoalesceBytes, o.Timeout = true, c.verify, c.atomic, c.coalesce, 5*time.Second
	var route reshard.Route = reshard.Flat
	topo := reshard.Topology{}
	if c.route == "hier" {
		route = hier.Hier{}
		var err error
		if topo, err = hier.Domains(make([]int, 8), ts[0].src, ts[0].dst, hier.DomainSizes{Dst: 2}); err != nil {
			return nil, err
		}
	}
	return refit.New(control.Plain(w.Collective(r))).Prepare(context.Background(), specs, route, refit.Target{Transport: tr, Memory: transport.HostMemory{}, Topology: topo}, o)
}

// TestDelta runs a call in delta mode for steps that change 0%, 1%, 50%
// and 100% of the elements (then 1% again), bf16 and f32, over the flat
// and hier routes (hier's leaders forward what they receive to the other
// replicas of their domain), with and without coalescing, Verify and
// Atomic, and checks every destination element after every step against
// the dense reference (the pattern with the same updates applied). The
// first step is a full sync (nothing counted in DenseSent); the others
// send encodings: with nothing changed a header and an op per message, with
// everything changed exactly the dense bytes (every source finds its
// regions changed throughout, and the step moves dense, Atomic and Verify
// included). A Resync on one rank then makes the next step a full sync on
// every rank.
func TestDelta(t *testing.T) {
	var configs []deltaConfig
	for _, dt := range []string{"bf16", "f32"} {
		for _, route := range []string{"flat", "hier"} {
			configs = append(configs, deltaConfig{dtype: dt, route: route})
		}
	}
	configs = append(configs,
		deltaConfig{dtype: "bf16", route: "flat", coalesce: 4096, verify: true},
		deltaConfig{dtype: "bf16", route: "hier", coalesce: 4096},
		deltaConfig{dtype: "bf16", route: "hier", atomic: true, verify: true},
		deltaConfig{dtype: "f32", route: "flat", atomic: true, coalesce: 4096})
	for _, cfg := range configs {
		t.Run(fmt.Sprintf("%+v", cfg), func(t *testing.T) {
			ts := deltaTensors(t, cfg.dtype)
			runDeltaCall(t, cfg, ts, nil, func(r int, c *refit.Call) error {
				d := newDeltaRank(t, r, ts)
				for k, frac := range []float64{-1, 0, 0.01, 0.5, 1, 0.01} {
					if k > 0 {
						if err := d.update(frac); err != nil {
							return err
						}
					}
					what := fmt.Sprintf("step %d (%v changed)", k+1, frac)
					rep, err := runDeltaStep(c, d.bufs, d.check, what, k, frac)
					if err != nil {
						return err
					}
					sent, dense := netBytes(rep.Stats.Sent), netBytes(rep.Stats.DenseSent)
					switch {
					case frac == 1 && sent != dense:
						return fmt.Errorf("%s: everything changed, yet %d bytes sent of %d dense: the step did not go dense", what, sent, dense)
					case frac == 0.01 && sent > dense/4:
						return fmt.Errorf("%s: 1%% changed, yet %d bytes sent of %d dense", what, sent, dense)
					}
				}
				if h := c.Held(); h.Version != 6 || !h.Intact {
					return fmt.Errorf("rank %d holds %v after 6 good steps", r, h)
				}
				// one rank asks for a full sync: every rank sends dense
				if r == 6 {
					c.Resync()
				}
				if err := d.update(0.01); err != nil {
					return err
				}
				rep, err := c.Run(context.Background(), d.bufs)
				if err != nil {
					return fmt.Errorf("the resync: %w", err)
				}
				if netBytes(rep.Stats.DenseSent) != 0 || rep.Delta {
					return fmt.Errorf("rank %d: the step after Resync on rank 6 counts dense bytes: not a full sync", r)
				}
				return d.check("after the resync")
			})
		})
	}
}

// TestDeltaDenseVote changes all of tensor w and none of tensor b, then
// all of both, in an atomic call (whose encodings never go raw wire by
// wire): the first step must stay a delta step (b's messages encoded, so
// more bytes than dense travel), because the ranks go dense only where
// every one found all it sends changed throughout; the second moves
// exactly the dense bytes. Every element is checked after each step.
func TestDeltaDenseVote(t *testing.T) {
	ts := deltaTensors(t, "bf16")
	runDeltaCall(t, deltaConfig{route: "hier", atomic: true}, ts, nil, func(r int, c *refit.Call) error {
		d := newDeltaRank(t, r, ts)
		for k, only := range []int{-1, 0, -1} {
			if k > 0 {
				if err := d.updateOnly(1, only); err != nil {
					return err
				}
			}
			what := fmt.Sprintf("step %d (all of tensor %d changed)", k+1, only)
			rep, err := runDeltaStep(c, d.bufs, d.check, what, k, -1)
			if err != nil {
				return err
			}
			sent, dense := netBytes(rep.Stats.Sent), netBytes(rep.Stats.DenseSent)
			switch {
			case k == 1 && dense > 0 && sent <= dense:
				return fmt.Errorf("rank %d, %s: %d bytes sent of %d dense: the step went dense though tensor b did not change", r, what, sent, dense)
			case k == 2 && sent != dense:
				return fmt.Errorf("rank %d, %s: %d bytes sent of %d dense: the step did not go dense", r, what, sent, dense)
			}
		}
		return nil
	})
}

// flipper flips, once armed, one byte of the first message of more than
// 64 bytes its rank receives (an encoding, not a length): at offset at
// of the message, or its last byte when at is negative.
type flipper struct {
	transport.Transport
	arm *atomic.Bool
	at  int64
}

// flipInto5 returns runDeltaCall's wrap that makes rank 5's transport a
// flipper, armed by arm, at offset at.
func flipInto5(arm *atomic.Bool, at int64) func(int, transport.Transport) transport.Transport {
	return func(r int, tr transport.Transport) transport.Transport {
		if r == 5 {
			return flipper{tr, arm, at}
		}
		return tr
	}
}

func (f flipper) Start(ops []transport.Op) (transport.Pending, error) {
	p, err := f.Transport.Start(ops)
	if err != nil {
		return nil, err
	}
	return flipPending{p, f, ops}, nil
}

type flipPending struct {
	transport.Pending
	f   flipper
	ops []transport.Op
}

func (p flipPending) Wait(ctx context.Context) error {
	if err := p.Pending.Wait(ctx); err != nil {
		return err
	}
	for _, o := range p.ops {
		if !o.Send && o.Len > 64 && p.f.arm.CompareAndSwap(true, false) {
			at := p.f.at
			if at < 0 {
				at = o.Len - 1
			}
			o.Buf.(transport.HostBuffer)[o.Off+at] ^= 0x10
		}
	}
	return nil
}

// runFlippedStep runs, after two good steps, the step of c whose encoding
// into rank 5 a flipper flips once arm is set (rank 5 sets it): every rank
// must fail it with a checksum error and then hold the second step,
// intact only when atomic.
func runFlippedStep(c *refit.Call, bufs []refit.TensorBuffers, arm *atomic.Bool, r int, atomicMode bool) error {
	if r == 5 {
		arm.Store(true)
	}
	_, err := c.Run(context.Background(), bufs)
	if err == nil || !strings.Contains(err.Error(), "CRC-32C") {
		return fmt.Errorf("rank %d: the step with a flipped byte returned %v, want a checksum error", r, err)
	}
	if h := c.Held(); h.Version != 2 || h.Intact != atomicMode {
		return fmt.Errorf("rank %d holds %v after the failed step", r, h)
	}
	return nil
}

// TestDeltaFaults flips a byte of an encoding on the wire into rank 5 in
// the third step of a verified call in delta mode (a value byte, or the
// header's first), so that every rank fails the step with a checksum
// error. Not atomic, the next step must be a full sync and end with every
// element right; atomic, rank 5's destination must still hold the
// second step's bytes, Held intact, and the next step is a delta again.
func TestDeltaFaults(t *testing.T) {
	for _, cfg := range []struct {
		atomic bool
		at     int64
	}{{false, -1}, {false, 0}, {true, -1}, {true, 0}} {
		t.Run(fmt.Sprintf("atomic=%v,at=%d", cfg.atomic, cfg.at), func(t *testing.T) {
			ts := deltaTensors(t, "bf16")
			var arm atomic.Bool
			dc := deltaConfig{dtype: "bf16", route: "hier", verify: true, atomic: cfg.atomic}
			runDeltaCall(t, dc, ts, flipInto5(&arm, cfg.at), func(r int, c *refit.Call) error {
				d := newDeltaRank(t, r, ts)
				for k := 1; k <= 2; k++ {
					if k > 1 {
						if err := d.update(0.01); err != nil {
							return err
						}
					}
					if _, err := c.Run(context.Background(), d.bufs); err != nil {
						return fmt.Errorf("step %d: %w", k, err)
					}
				}
				before := make([][]byte, len(d.bufs))
				for i, b := range d.bufs {
					if b.Dst != nil {
						before[i] = bytes.Clone(b.Dst.(transport.HostBuffer))
					}
				}
				if err := d.update(0.05); err != nil {
					return err
				}
				if err := runFlippedStep(c, d.bufs, &arm, r, cfg.atomic); err != nil {
					return err
				}
				if cfg.atomic {
					for i, b := range before {
						if b != nil && !bytes.Equal(b, d.bufs[i].Dst.(transport.HostBuffer)) {
							return fmt.Errorf("rank %d: the failed atomic step changed tensor %s", r, d.ts[i].name)
						}
					}
				}
				if err := d.update(0.01); err != nil {
					return err
				}
				rep, err := c.Run(context.Background(), d.bufs)
				if err != nil {
					return fmt.Errorf("the step after the failed one: %w", err)
				}
				if full := netBytes(rep.Stats.DenseSent) == 0; full != !cfg.atomic && netBytes(rep.Stats.Sent) > 0 {
					return fmt.Errorf("rank %d: the step after the failed one is a full sync: %v, want %v", r, full, !cfg.atomic)
				}
				return d.check("after the failed step")
			})
		})
	}
}

// TestDeltaRefused: delta mode refuses, at Prepare and on every rank, a
// route that forwards regions it did not receive whole (agbcast's
// broadcast chunks).
func TestDeltaRefused(t *testing.T) {
	for _, c := range []struct {
		dstType string
		route   reshard.Route
		want    string
	}{
		{"bf16", reshard.AllGatherBroadcast, "did not arrive whole"},
	} {
		src := mustLay(t, "64x64", "bf16", "4", "S0", rng(0, 4))
		dst := mustLay(t, "64x64", c.dstType, "2x2", "R,S1", rng(4, 4))
		_, errs := runCall(8, func(r int) call {
			o := flatOpts()
			o.Delta = true
			x := tensor{Name: "w", Src: src, Dst: dst, Buffers: buffers(src, dst, r)}
			if c.dstType == "fp8e4m3" {
				x.Scale = fp8.Block
			}
			return call{tensors: []tensor{x}, opts: o, route: c.route}
		}, nil)
		for r, err := range errs {
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("%s over %s: rank %d: %v, want an error saying %q", c.dstType, c.route.Name(), r, err, c.want)
			}
		}
	}
}

// idleCounter counts its rank's waits by whether their context marks
// them idle (transport.WithIdleWaits).
type idleCounter struct {
	transport.Transport
	idle, busy *atomic.Int64
}

func (c idleCounter) Start(ops []transport.Op) (transport.Pending, error) {
	p, err := c.Transport.Start(ops)
	if err != nil {
		return nil, err
	}
	return idlePending{p, c}, nil
}

type idlePending struct {
	transport.Pending
	c idleCounter
}

func (p idlePending) Wait(ctx context.Context) error {
	if transport.IdleWaits(ctx) {
		p.c.idle.Add(1)
	} else {
		p.c.busy.Add(1)
	}
	return p.Pending.Wait(ctx)
}

// TestDeltaIdleWaits checks which waits a delta-mode call marks idle:
// none of a full sync's or of a step that changed everything (both move
// dense bytes, which a sleeping wait would stall), every one of a delta
// step at 1% (the lengths, and encodings of a few percent of the dense
// bytes), whose ranks wait while their peers encode and apply. Every
// element is checked after each step.
func TestDeltaIdleWaits(t *testing.T) {
	ts := deltaTensors(t, "bf16")
	var idle, busy [8]atomic.Int64
	wrap := func(r int, tr transport.Transport) transport.Transport {
		return idleCounter{tr, &idle[r], &busy[r]}
	}
	runDeltaCall(t, deltaConfig{route: "hier"}, ts, wrap, func(r int, c *refit.Call) error {
		d := newDeltaRank(t, r, ts)
		for k, frac := range []float64{-1, 0.01, 1} {
			if k > 0 {
				if err := d.update(frac); err != nil {
					return err
				}
			}
			idle[r].Store(0)
			busy[r].Store(0)
			what := fmt.Sprintf("step %d (%v changed)", k+1, frac)
			if _, err := runDeltaStep(c, d.bufs, d.check, what, k, frac); err != nil {
				return err
			}
			i, b := idle[r].Load(), busy[r].Load()
			if want := frac == 0.01; i+b == 0 || (i > 0) != want || want && b > 0 {
				return fmt.Errorf("rank %d, %s: %d idle waits and %d busy ones (idle: %v)", r, what, i, b, want)
			}
		}
		return nil
	})
}
