package refit_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/m2n-dev/m2n/control"
	"github.com/m2n-dev/m2n/dtype"
	"github.com/m2n-dev/m2n/fp8"
	"github.com/m2n-dev/m2n/mesh"
	"github.com/m2n-dev/m2n/pattern"
	"github.com/m2n-dev/m2n/placement"
	"github.com/m2n-dev/m2n/refit"
	"github.com/m2n-dev/m2n/reshard"
	"github.com/m2n-dev/m2n/transport"
	"github.com/m2n-dev/m2n/transport/inproc"
)

// lay builds a layout from CLI spellings, or returns the error.
func lay(shape, dtypeName, meshShape, pl string, ranks []int) (placement.Layout, error) {
	s, err := placement.ParseShape(shape)
	if err != nil {
		return placement.Layout{}, err
	}
	dt, err := dtype.Parse(dtypeName)
	if err != nil {
		return placement.Layout{}, err
	}
	ms, err := mesh.ParseShape(meshShape)
	if err != nil {
		return placement.Layout{}, err
	}
	m, err := mesh.New(ms, ranks)
	if err != nil {
		return placement.Layout{}, err
	}
	ps, err := placement.Parse(pl)
	if err != nil {
		return placement.Layout{}, err
	}
	return placement.NewLayout(s, dt, m, ps)
}

func mustLay(t testing.TB, shape, dtypeName, meshShape, pl string, ranks []int) placement.Layout {
	t.Helper()
	l, err := lay(shape, dtypeName, meshShape, pl, ranks)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func rng(lo, n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = lo + i
	}
	return out
}

// tensor is one tensor of a test call on one rank: its spec and buffers.
type tensor struct {
	Name     string
	Src, Dst placement.Layout
	Buffers  refit.TensorBuffers
	Scale    fp8.Mode
}

// call describes one rank's inputs to a call.
type call struct {
	tensors []tensor
	opts    refit.Options
	route   reshard.Route
	timeout time.Duration
}

// flatOpts are the options every test call starts from.
func flatOpts() refit.Options {
	return refit.Options{Schedule: reshard.DefaultScheduleOptions}
}

// buffers makes a rank's buffers for a tensor, the source filled with the
// pattern and the destination poisoned.
func buffers(src, dst placement.Layout, rank int) refit.TensorBuffers {
	var b refit.TensorBuffers
	if src.Mesh().Contains(rank) {
		h := make([]byte, src.LocalBytes(rank))
		if err := pattern.Fill(src, rank, 0, h, placement.View{}); err != nil {
			panic(err)
		}
		b.Src = transport.HostBuffer(h)
	}
	if dst.Mesh().Contains(rank) {
		h := bytes.Repeat([]byte{pattern.Poison}, int(dst.LocalBytes(rank)))
		b.Dst = transport.HostBuffer(h)
	}
	return b
}

// runCall prepares and runs a call once on world in-process ranks, rank
// r's inputs from mk(r), with wrap wrapping each rank's transport if not
// nil, and returns every rank's report and error (from Prepare or Run).
func runCall(world int, mk func(rank int) call, wrap func(transport.Transport) transport.Transport) ([]*refit.Report, []error) {
	w := inproc.NewWorld(world)
	reps := make([]*refit.Report, world)
	errs := make([]error, world)
	var wg sync.WaitGroup
	for r := 0; r < world; r++ {
		wg.Add(1)
		go func(r int) {
			defer wg.Done()
			c := mk(r)
			tr := w.Transport(r)
			if wrap != nil {
				tr = wrap(tr)
			}
			route := c.route
			if route == nil {
				route = reshard.Flat
			}
			specs := make([]refit.Spec, len(c.tensors))
			bufs := make([]refit.TensorBuffers, len(c.tensors))
			for i, t := range c.tensors {
				specs[i] = refit.Spec{Name: t.Name, Src: t.Src, Dst: t.Dst, Scale: t.Scale}
				bufs[i] = t.Buffers
			}
			ctx := context.Background()
			opts := c.opts
			opts.Timeout = 5 * time.Second
			if c.timeout > 0 {
				opts.Timeout = c.timeout
			}
			p, err := refit.New(control.Plain(w.Collective(r))).Prepare(ctx, specs, route, refit.Target{Transport: tr, Memory: transport.HostMemory{}}, opts)
			if err != nil {
				errs[r] = err
				return
			}
			defer p.Close()
			reps[r], errs[r] = p.Run(ctx, bufs)
			if errors.Is(errs[r], control.ErrTimeout) {
				tr.Abort(errs[r])
			}
		}(r)
	}
	wg.Wait()
	return reps, errs
}

// TestValidation is the validation table: every bad input fails before any
// data moves, on every rank, with its own clear error naming the rank, the
// tensor, the field, the value and what was expected. Inputs that cannot
// even be built (a bad placement, a mesh repeating a rank) fail when built.
func TestValidation(t *testing.T) {
	const world = 8
	goodSrc := func() placement.Layout { return mustLay(t, "8x4", "f32", "4", "S0", rng(0, 4)) }
	goodDst := func() placement.Layout { return mustLay(t, "8x4", "f32", "2x2", "R,S1", rng(4, 4)) }
	built := []struct {
		name, shape, dtype, mesh, pl string
		ranks                        []int
		want                         string
	}{
		{"placement count differs from mesh dims", "8x4", "f32", "2x2", "S0", rng(0, 4), "1 placements [S0] for a 2-axis mesh 2x2: want one per mesh axis"},
		{"shard dim out of range", "8x4", "f32", "4", "S2", rng(0, 4), "placement S2 on mesh axis 0: shard dim 2 is out of range for a 2-dim tensor 8x4"},
		{"mesh repeats a rank", "8x4", "f32", "4", "S0", []int{0, 1, 1, 3}, "mesh repeats rank 1 (positions 1 and 2)"},
		{"partial placement", "8x4", "f32", "4", "Partial()", rng(0, 4), "Partial placements (pending reductions) are not supported"},
		{"strided placement", "8x4", "f32", "4", "_StridedShard(0, split_factor=2)", rng(0, 4), "strided shards (_StridedShard) are not supported"},
	}
	for _, tc := range built {
		t.Run(tc.name, func(t *testing.T) {
			_, err := lay(tc.shape, tc.dtype, tc.mesh, tc.pl, tc.ranks)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want %q", err, tc.want)
			}
		})
	}

	short := func(b transport.Buffer) transport.Buffer { return b.(transport.HostBuffer)[1:] }
	long := func(b transport.Buffer) transport.Buffer { return append(b.(transport.HostBuffer), 0, 0) }
	// callW is rank r's call of one tensor "w" from src to dst, rank at's
	// buffers changed by edit (at -1: none).
	callW := func(src, dst placement.Layout, r, at int, edit func(*refit.TensorBuffers)) call {
		b := buffers(src, dst, r)
		if r == at {
			edit(&b)
		}
		return call{tensors: []tensor{{Name: "w", Src: src, Dst: dst, Buffers: b}}, opts: flatOpts()}
	}
	calls := []struct {
		name string
		mk   func(rank int) call
		want string
	}{
		{"global shapes differ", func(r int) call {
			return callW(goodSrc(), mustLay(t, "8x5", "f32", "2x2", "R,S1", rng(4, 4)), r, -1, nil)
		}, `tensor "w": shape 8x5, want 8x4: source and destination global shapes differ`},
		{"dtypes differ", func(r int) call {
			return callW(goodSrc(), mustLay(t, "8x4", "bf16", "2x2", "R,S1", rng(4, 4)), r, -1, nil)
		}, `tensor "w": dtype bf16, want f32: source and destination dtypes differ`},
		{"mesh outside the communicator", func(r int) call {
			return callW(goodSrc(), mustLay(t, "8x4", "f32", "2x2", "R,S1", []int{4, 5, 6, 9}), r, -1, nil)
		}, "destination mesh 2x2[4-6,9]: mesh 2x2[4-6,9] reaches rank 9, outside a communicator of 8 ranks"},
		{"destination buffer too short", func(r int) call {
			return callW(goodSrc(), goodDst(), r, 6, func(b *refit.TensorBuffers) { b.Dst = short(b.Dst) })
		}, `rank 6, tensor "w": destination buffer is too short: 63 bytes, the layout needs 64`},
		{"source buffer too long", func(r int) call {
			return callW(goodSrc(), goodDst(), r, 1, func(b *refit.TensorBuffers) { b.Src = long(b.Src) })
		}, `rank 1, tensor "w": source buffer is too long: 34 bytes, the layout needs 32`},
		{"source and destination alias", func(r int) call {
			// ranks 0-3 hold the source and, on 0-3 again, the destination.
			dst := mustLay(t, "8x4", "f32", "4", "S0", []int{3, 2, 1, 0})
			return callW(goodSrc(), dst, r, 2, func(b *refit.TensorBuffers) { b.Dst = b.Src })
		}, `rank 2: the source part of tensor "w" and the destination part of tensor "w" overlap in memory`},
		{"buffers of two tensors alias", func(r int) call {
			src, dst := goodSrc(), goodDst()
			b1, b2 := buffers(src, dst, r), buffers(src, dst, r)
			if r == 5 {
				b2.Dst = b1.Dst
			}
			return call{tensors: []tensor{{Name: "a", Src: src, Dst: dst, Buffers: b1}, {Name: "b", Src: src, Dst: dst, Buffers: b2}}, opts: flatOpts()}
		}, `rank 5: the destination part of tensor "a" and the destination part of tensor "b" overlap in memory`},
		{"chunk size differs across ranks", func(r int) call {
			src, dst := goodSrc(), goodDst()
			o := flatOpts()
			if r == 3 {
				o.Schedule.ChunkBytes = 1 << 20
			}
			return call{tensors: []tensor{{Name: "w", Src: src, Dst: dst, Buffers: buffers(src, dst, r)}}, opts: o}
		}, "ranks disagree: rank 3 has chunk bytes 1048576, rank 0 has 16777216 (ranks differing from rank 0: [3])"},
		{"staging differs across ranks", func(r int) call {
			src, dst := goodSrc(), goodDst()
			o := flatOpts()
			if r >= 6 {
				o.Schedule.StagingBytes = 512 << 20
			}
			return call{tensors: []tensor{{Name: "w", Src: src, Dst: dst, Buffers: buffers(src, dst, r)}}, opts: o}
		}, "ranks disagree: rank 6 has staging bytes 536870912, rank 0 has 268435456 (ranks differing from rank 0: [6 7])"},
		{"one rank has another destination layout", func(r int) call {
			src, dst := goodSrc(), goodDst()
			if r == 5 {
				dst = mustLay(t, "8x4", "f32", "2x2", "R,S0", rng(4, 4))
			}
			other := mustLay(t, "8x4", "f32", "4", "S0", rng(4, 4))
			return call{tensors: []tensor{
				{Name: "a", Src: src, Dst: other, Buffers: buffers(src, other, r)},
				{Name: "b", Src: src, Dst: dst, Buffers: buffers(src, dst, r)}}, opts: flatOpts()}
		}, `ranks disagree: rank 5 has destination placements [R,S0] for tensor "b", rank 0 has [R,S1] (ranks differing from rank 0: [5])`},
		{"tensor lists differ", func(r int) call {
			src, dst := goodSrc(), goodDst()
			ts := []tensor{{Name: "a", Src: src, Dst: dst, Buffers: buffers(src, dst, r)}}
			if r == 7 {
				ts = append(ts, tensor{Name: "b", Src: src, Dst: dst, Buffers: buffers(src, dst, r)})
			}
			return call{tensors: ts, opts: flatOpts()}
		}, "ranks disagree: rank 7 has tensor count 2, rank 0 has 1 (ranks differing from rank 0: [7])"},
	}
	for _, tc := range calls {
		t.Run(tc.name, func(t *testing.T) {
			moved := false
			wrap := func(tr transport.Transport) transport.Transport { return &watching{Transport: tr, moved: &moved} }
			_, errs := runCall(world, tc.mk, wrap)
			for r, err := range errs {
				if err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Errorf("rank %d: error %v, want %q", r, err, tc.want)
				}
			}
			if moved {
				t.Error("data moved before the error")
			}
		})
	}
}

// watching records whether any round was started.
type watching struct {
	transport.Transport
	moved *bool
	mu    sync.Mutex
}

func (w *watching) Start(ops []transport.Op) (transport.Pending, error) {
	w.mu.Lock()
	if len(ops) > 0 {
		*w.moved = true
	}
	w.mu.Unlock()
	return w.Transport.Start(ops)
}

// corrupting flips one byte of the first message the rank receives.
type corrupting struct {
	transport.Transport
	once sync.Once
}

func (c *corrupting) Start(ops []transport.Op) (transport.Pending, error) {
	p, err := c.Transport.Start(ops)
	if err != nil {
		return nil, err
	}
	return &corruptPending{Pending: p, c: c, ops: ops}, nil
}

type corruptPending struct {
	transport.Pending
	c   *corrupting
	ops []transport.Op
}

func (p *corruptPending) Wait(ctx context.Context) error {
	if err := p.Pending.Wait(ctx); err != nil {
		return err
	}
	for _, o := range p.ops {
		if !o.Send && o.Len > 0 {
			p.c.once.Do(func() { o.Buf.(transport.HostBuffer)[o.Off] ^= 0x10 })
			break
		}
	}
	return nil
}

// TestVerifyAndAtomic corrupts one byte on the wire to rank 5: with Verify
// the call fails on every rank, naming the tensor, the box and both ranks;
// with Atomic every destination still holds its old bytes, bit for bit;
// without Atomic the other tensor still completes.
func TestVerifyAndAtomic(t *testing.T) {
	const world = 8
	src, dst := mustLay(t, "16x8", "bf16", "4", "S0", rng(0, 4)), mustLay(t, "16x8", "bf16", "2x2", "R,S1", rng(4, 4))
	src2, dst2 := mustLay(t, "6", "i32", "2", "R", rng(0, 2)), mustLay(t, "6", "i32", "4", "S0", rng(4, 4))
	for _, atomic := range []bool{false, true} {
		before := make([][][]byte, world)
		bufs := make([][]refit.TensorBuffers, world)
		mk := func(r int) call {
			o := flatOpts()
			o.Verify, o.Atomic = true, atomic
			bufs[r] = []refit.TensorBuffers{buffers(src, dst, r), buffers(src2, dst2, r)}
			for _, b := range bufs[r] {
				if b.Dst != nil {
					before[r] = append(before[r], bytes.Clone(b.Dst.(transport.HostBuffer)))
				}
			}
			return call{tensors: []tensor{{Name: "w1", Src: src, Dst: dst, Buffers: bufs[r][0]},
				{Name: "w2", Src: src2, Dst: dst2, Buffers: bufs[r][1]}}, opts: o}
		}
		wrap := func(tr transport.Transport) transport.Transport {
			if tr.Rank() == 5 {
				return &corrupting{Transport: tr}
			}
			return tr
		}
		reps, errs := runCall(world, mk, wrap)
		for r, err := range errs {
			want := `tensor "w1": box [`
			if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "to rank 5 arrived with CRC-32C") {
				t.Fatalf("atomic %v, rank %d: error %v", atomic, r, err)
			}
			if atomic {
				if len(reps[r].Completed) != 0 {
					t.Errorf("atomic: rank %d reports %v completed", r, reps[r].Completed)
				}
				i := 0
				for _, b := range bufs[r] {
					if b.Dst == nil {
						continue
					}
					if !bytes.Equal(b.Dst.(transport.HostBuffer), before[r][i]) {
						t.Errorf("atomic: rank %d's destination changed although the call failed", r)
					}
					i++
				}
			} else if strings.Join(reps[r].Completed, ",") != "w2" || strings.Join(reps[r].Failed, ",") != "w1" {
				t.Errorf("rank %d: completed %v, failed %v; want w2 completed and w1 failed", r, reps[r].Completed, reps[r].Failed)
			}
		}
	}
	// Without the fault, the atomic, verified call lands every byte.
	reps, errs := runCall(world, func(r int) call {
		o := flatOpts()
		o.Verify, o.Atomic = true, true
		b := buffers(src, dst, r)
		return call{tensors: []tensor{{Name: "w1", Src: src, Dst: dst, Buffers: b}}, opts: o}
	}, nil)
	for r, err := range errs {
		if err != nil || len(reps[r].Completed) != 1 {
			t.Fatalf("rank %d: %v, completed %v", r, err, reps[r].Completed)
		}
	}
}

// silent drops every operation of its rank: a peer that stops mid-transfer.
type silent struct{ transport.Transport }

// never is a round that never completes: it gives up only after its peers
// have timed out, whatever its own deadline.
type never struct{}

func (never) Wait(ctx context.Context) error {
	time.Sleep(time.Second)
	return errors.New("the silent rank gives up")
}

func (silent) Start([]transport.Op) (transport.Pending, error) { return never{}, nil }

// TestTimeoutNamesPeers: a rank that stops moving data makes its peers
// time out, each naming it among the ranks it still waits for.
func TestTimeoutNamesPeers(t *testing.T) {
	src, dst := mustLay(t, "8x4", "f32", "4", "S0", rng(0, 4)), mustLay(t, "8x4", "f32", "4", "S0", rng(4, 4))
	start := time.Now()
	_, errs := runCall(8, func(r int) call {
		return call{tensors: []tensor{{Name: "w", Src: src, Dst: dst, Buffers: buffers(src, dst, r)}}, opts: flatOpts(), timeout: 300 * time.Millisecond}
	}, func(tr transport.Transport) transport.Transport {
		if tr.Rank() == 2 {
			return silent{tr}
		}
		return tr
	})
	if el := time.Since(start); el > 5*time.Second {
		t.Errorf("took %v", el)
	}
	var te *control.TimeoutError
	if !errors.As(errs[6], &te) || len(te.Peers) != 1 || te.Peers[0] != 2 || te.Tensors[0] != "w" {
		t.Fatalf("rank 6: %v, want a timeout waiting for rank 2 on tensor w", errs[6])
	}
	for r, err := range errs {
		if err == nil {
			t.Errorf("rank %d finished although rank 2 never sent", r)
		}
	}
}

// TestRefuse has one rank refuse a step (a buffer only it knows is bad):
// every rank fails at the buffer check with that rank's error, typed, and
// the next step runs and checks on every rank.
func TestRefuse(t *testing.T) {
	const world = 4
	src := mustLay(t, "8x4", "f32", "2", "S0", rng(0, 2))
	dst := mustLay(t, "8x4", "f32", "2", "S1", rng(2, 2))
	w := inproc.NewWorld(world)
	errs := make([]error, world)
	second := make([]error, world)
	var wg sync.WaitGroup
	for r := range world {
		wg.Go(func() {
			ctx := context.Background()
			specs := []refit.Spec{{Name: "w", Src: src, Dst: dst}}
			tr := w.Transport(r)
			opts := flatOpts()
			opts.Timeout = 5 * time.Second
			p, err := refit.New(control.Plain(w.Collective(r))).Prepare(ctx, specs, reshard.Flat, refit.Target{Transport: tr, Memory: transport.HostMemory{}}, opts)
			if err != nil {
				errs[r] = err
				return
			}
			defer p.Close()
			bufs := []refit.TensorBuffers{buffers(src, dst, r)}
			if r == 1 {
				errs[r] = p.Refuse(ctx, &refit.BufferError{Rank: 1, Tensor: "w", Side: "source", Why: "has dtype f16, the layout's is f32", Want: 64, Got: -1})
			} else {
				_, errs[r] = p.Run(ctx, bufs)
			}
			if _, second[r] = p.Run(ctx, bufs); second[r] == nil && r >= 2 {
				second[r] = pattern.Check(dst, r, 0, bufs[0].Dst.(transport.HostBuffer), placement.View{})
			}
		})
	}
	wg.Wait()
	for r, err := range errs {
		var ve *control.ValidationError
		var be *refit.BufferError
		if !errors.As(err, &ve) || ve.Rank != 1 || !errors.As(err, &be) || be.Tensor != "w" || be.Side != "source" {
			t.Errorf("rank %d: refused step returned %v; want a ValidationError of rank 1 wrapping its BufferError", r, err)
		} else if !strings.Contains(err.Error(), "rank 1, tensor \"w\": source buffer has dtype f16") {
			t.Errorf("rank %d: message %q does not name the rank, tensor and side", r, err)
		}
		if second[r] != nil {
			t.Errorf("rank %d: the step after the refusal: %v", r, second[r])
		}
	}
}
