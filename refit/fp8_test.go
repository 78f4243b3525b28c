package refit_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/m2n-dev/m2n/control"
	"github.com/m2n-dev/m2n/dtype"
	"github.com/m2n-dev/m2n/fp8"
	"github.com/m2n-dev/m2n/pattern"
	"github.com/m2n-dev/m2n/placement"
	"github.com/m2n-dev/m2n/refit"
	"github.com/m2n-dev/m2n/reshard"
	"github.com/m2n-dev/m2n/transport"
	"github.com/m2n-dev/m2n/transport/inproc"
	"github.com/m2n-dev/m2n/transport/transporttest"
)

// TestFP8Inproc converts every FP8 pair (every 2-D and 3-D pair of the
// conformance file, in its dtype and in bf16, and pairs whose shards cut
// 128x128 blocks), in every arrangement, to FP8 on the flat route over the
// in-process transport, two steps each, and compares every destination
// byte and scale with quantizing the whole tensor at once: every mode with
// default staging; then tiny chunks with strided regions moved in place
// from padded views (the quantizing sends must still stage), and tiny
// chunks coalesced, verified and atomic.
func TestFP8Inproc(t *testing.T) {
	cases, err := transporttest.FP8Cases()
	if err != nil {
		t.Fatal(err)
	}
	tiny := reshard.ScheduleOptions{ChunkBytes: 48, StagingBytes: 8 * 48}
	setups := []struct {
		inprocSetup
		call refit.Options
	}{
		{inprocSetup{"default", reshard.DefaultScheduleOptions, false, false, 0}, refit.Options{}},
		{inprocSetup{"tiny chunks, in place, views", tiny, true, true, 0}, refit.Options{}},
		{inprocSetup{"tiny chunks, coalesced, verified, atomic", tiny, false, false, 64}, refit.Options{Verify: true, Atomic: true}},
	}
	runs := 0
	for ci, c := range cases {
		for si, su := range setups {
			modes := []fp8.Mode{fp8.Block, fp8.Row, fp8.Tensor}
			if si > 0 {
				if c.Src.Bytes() > 64<<10 {
					continue // tiny chunks of a large tensor only slow the test
				}
				modes = modes[(ci+si)%3 : (ci+si)%3+1]
			}
			for _, mode := range modes {
				w := su.world(c.World() + 1)
				errs := w.Run(func(tr transport.Transport) error {
					ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
					defer cancel()
					env := transporttest.Env{T: tr, Mem: transport.HostMemory{}, IO: transport.HostMemory{}, Opts: su.opts,
						Coalesce: su.coalesce, Padded: su.padded}
					_, err := transporttest.RunFP8Case(ctx, env, control.Plain(w.Collective(tr.Rank())), c, reshard.Flat, mode, su.call, 2)
					if err != nil {
						tr.Abort(err)
					}
					return err
				})
				if err := errors.Join(errs...); err != nil {
					t.Errorf("%v, %v, %s: %v", c, mode, su.name, err)
				}
				runs++
			}
		}
	}
	t.Logf("%d FP8 calls of 2 steps checked byte for byte and scale for scale", runs)
}

// TestFP8Colocated converts every FP8 pair with both meshes on the same
// ranks: every message is a local copy that quantizes.
func TestFP8Colocated(t *testing.T) {
	cases, err := transporttest.ColocatedCases(transporttest.FP8Pairs())
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range cases {
		c = c.FP8()
		w := inproc.NewWorld(c.World())
		mode := fp8.Mode(1 + i%3)
		errs := w.Run(func(tr transport.Transport) error {
			env := transporttest.Env{T: tr, Mem: transport.HostMemory{}, IO: transport.HostMemory{}, Opts: reshard.DefaultScheduleOptions}
			_, err := transporttest.RunFP8Case(context.Background(), env, control.Plain(w.Collective(tr.Rank())), c, reshard.Flat, mode, refit.Options{Verify: i%2 == 0}, 1)
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

// TestFP8NetworkBytesHalve: the bytes a converting call moves are the FP8
// bytes, half those of the same call in bf16.
func TestFP8NetworkBytesHalve(t *testing.T) {
	src := mustLay(t, "256x384", "bf16", "4", "S0", rng(0, 4))
	dst := mustLay(t, "256x384", "bf16", "2", "S1", rng(4, 2))
	bytesOf := func(d refit.Spec) int64 {
		var sent int64
		w := inproc.NewWorld(6)
		reps := make([]*refit.Report, 6)
		errs := w.Run(func(tr transport.Transport) error {
			c := transporttest.Case{Src: d.Src, Dst: d.Dst}
			env := transporttest.Env{T: tr, Mem: transport.HostMemory{}, IO: transport.HostMemory{}, Opts: reshard.DefaultScheduleOptions}
			var err error
			if d.Scale != 0 {
				reps[tr.Rank()], err = transporttest.RunFP8Case(context.Background(), env, control.Plain(w.Collective(tr.Rank())), c, reshard.Flat, d.Scale, refit.Options{}, 1)
				return err
			}
			st, err := transporttest.RunCase(context.Background(), env, c, reshard.Flat)
			reps[tr.Rank()] = &refit.Report{Stats: st}
			return err
		})
		if err := errors.Join(errs...); err != nil {
			t.Fatal(err)
		}
		for _, r := range reps {
			for _, n := range r.Stats.Sent {
				sent += n
			}
		}
		return sent
	}
	b16 := bytesOf(refit.Spec{Src: src, Dst: dst})
	f8 := bytesOf(refit.Spec{Src: src, Dst: dst.WithDType(dtype.FP8E4M3), Scale: fp8.Block})
	if b16 != 2*256*384 || f8 != 256*384 {
		t.Errorf("bf16 call sent %d bytes, FP8 call %d: want %d and %d", b16, f8, 2*256*384, 256*384)
	}
}

// TestFP8Refused: what cannot convert fails every rank with a message
// naming the tensor, the field and the value.
func TestFP8Refused(t *testing.T) {
	src := mustLay(t, "256x128", "bf16", "2", "S0", rng(0, 2))
	dst := mustLay(t, "256x128", "fp8e4m3", "2", "S1", rng(2, 2))
	f16 := mustLay(t, "256x128", "f16", "2", "S0", rng(0, 2))
	vec := mustLay(t, "256", "bf16", "2", "S0", rng(0, 2))
	vecDst := mustLay(t, "256", "fp8e4m3", "2", "S0", rng(2, 2))
	plain := mustLay(t, "256x128", "bf16", "2", "S1", rng(2, 2))
	tests := []struct {
		name  string
		spec  refit.Spec
		route reshard.Route
		want  string
	}{
		{"no mode", refit.Spec{Name: "w", Src: src, Dst: dst}, reshard.Flat,
			`tensor "w": fp8 scale mode none, want block, row or tensor: the tensor converts bf16 to fp8e4m3 in flight`},
		{"mode without conversion", refit.Spec{Name: "w", Src: src, Dst: plain, Scale: fp8.Row}, reshard.Flat,
			`tensor "w": fp8 scale mode row, want none: the tensor does not convert in flight (source bf16, destination bf16)`},
		{"from f16", refit.Spec{Name: "w", Src: f16, Dst: dst, Scale: fp8.Block}, reshard.Flat,
			`tensor "w": dtype fp8e4m3, want f16: source and destination dtypes differ, and the only conversion in flight is bf16 or f32 to fp8e4m3`},
		{"1-D", refit.Spec{Name: "w", Src: vec, Dst: vecDst, Scale: fp8.Block}, reshard.Flat,
			`tensor "w": shape 256: converting to fp8e4m3 by block: fp8: shape 256: FP8 scaling needs 2 to 8 dims`},
		{"agbcast", refit.Spec{Name: "w", Src: src, Dst: dst, Scale: fp8.Block}, reshard.AllGatherBroadcast,
			"route agbcast, want flat or hier: tensor 0 converts bf16 to fp8e4m3 in flight, which the all-gather + broadcast route cannot carry"},
	}
	for _, tc := range tests {
		_, errs := runCall(4, func(int) call {
			return call{tensors: []tensor{{Name: tc.spec.Name, Src: tc.spec.Src, Dst: tc.spec.Dst, Scale: tc.spec.Scale}}, opts: flatOpts(), route: tc.route}
		}, nil)
		for r, err := range errs {
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%s: rank %d: %v, want %q", tc.name, r, err, tc.want)
			}
		}
	}
}

// fp8Buffers makes a rank's buffers for a converting tensor: the source
// filled with the float pattern, the destination and scales poisoned.
func fp8Buffers(t *testing.T, spec refit.Spec, rank int) refit.TensorBuffers {
	var b refit.TensorBuffers
	if spec.Src.Mesh().Contains(rank) {
		h := make([]byte, spec.Src.LocalBytes(rank))
		if err := pattern.FillFloats(spec.Src, rank, 0, h, placement.View{}); err != nil {
			t.Fatal(err)
		}
		b.Src = transport.HostBuffer(h)
	}
	if spec.Dst.Mesh().Contains(rank) {
		b.Dst = transport.HostBuffer(bytes.Repeat([]byte{pattern.Poison}, int(spec.Dst.LocalBytes(rank))))
		n, err := spec.ScaleBytes(rank)
		if err != nil {
			t.Fatal(err)
		}
		b.Scale = transport.HostBuffer(bytes.Repeat([]byte{pattern.Poison}, int(n)))
	}
	return b
}

// setBF16 sets global element idx of a bf16 source part of l on rank to
// the bits v.
func setBF16(t *testing.T, l placement.Layout, rank int, buf transport.Buffer, idx []int64, v uint16) {
	box, _ := l.RankBox(rank)
	off := int64(0)
	for d := range idx {
		if idx[d] < box.Lo[d] || idx[d] >= box.Hi[d] {
			t.Fatalf("element %v is not in rank %d's box %v", idx, rank, box)
		}
		off = off*(box.Hi[d]-box.Lo[d]) + idx[d] - box.Lo[d]
	}
	binary.LittleEndian.PutUint16(buf.(transport.HostBuffer)[2*off:], v)
}

// TestFP8NonFinite: NaNs and infinities in the sources of the second
// tensor of a call fail every rank alike, before any destination byte or
// scale changes, naming the tensor and its first element in row-major
// order (the lowest flat index over every rank), with or without Atomic.
func TestFP8NonFinite(t *testing.T) {
	src := mustLay(t, "256x384", "bf16", "4", "S1", rng(0, 4)) // 96 columns each
	dst := mustLay(t, "256x384", "fp8e4m3", "2", "S0", rng(4, 2))
	specs := []refit.Spec{{Name: "a", Src: src, Dst: dst, Scale: fp8.Block}, {Name: "b", Src: src, Dst: dst, Scale: fp8.Row}}
	for _, atomic := range []bool{false, true} {
		bufs := make([][]refit.TensorBuffers, 6)
		_, errs := runCall(6, func(r int) call {
			c := call{opts: flatOpts()}
			c.opts.Atomic = atomic
			for _, sp := range specs {
				b := fp8Buffers(t, sp, r)
				if sp.Name == "b" {
					switch r {
					case 3:
						setBF16(t, src, r, b.Src, []int64{200, 300}, 0x7FC0) // NaN, flat 77100
						setBF16(t, src, r, b.Src, []int64{210, 290}, 0xFFC0)
					case 0:
						setBF16(t, src, r, b.Src, []int64{201, 5}, 0x7F80) // +Inf, flat 77189
					}
				}
				c.tensors = append(c.tensors, tensor{Name: sp.Name, Src: sp.Src, Dst: sp.Dst, Scale: sp.Scale, Buffers: b})
			}
			bufs[r] = []refit.TensorBuffers{c.tensors[0].Buffers, c.tensors[1].Buffers}
			return c
		}, nil)
		for r, err := range errs {
			var ve *control.ValidationError
			var nf *refit.NonFiniteError
			if !errors.As(err, &ve) || !errors.As(err, &nf) {
				t.Fatalf("atomic %v: rank %d: %v, want a *ValidationError wrapping a *NonFiniteError", atomic, r, err)
			}
			want := `tensor "b": element [200 300] (flat index 77100) is NaN on source rank 3: FP8 quantization refuses non-finite weights`
			if nf.Tensor != "b" || nf.Flat != 77100 || nf.Rank != 3 || err.Error() != "invalid input: "+want {
				t.Errorf("atomic %v: rank %d: %v, want %q", atomic, r, err, want)
			}
			// the error keeps its type across ranks
			back := control.DecodeError(control.EncodeError(err))
			var nf2 *refit.NonFiniteError
			if !errors.As(back, &nf2) || back.Error() != err.Error() || nf2.Flat != 77100 || !slices.Equal(nf2.Index, []int64{200, 300}) {
				t.Errorf("decoded %v (%+v), want %v", back, nf2, err)
			}
		}
		for r := 4; r < 6; r++ {
			for i, b := range bufs[r] {
				for _, x := range [][]byte{b.Dst.(transport.HostBuffer), b.Scale.(transport.HostBuffer)} {
					if !bytes.Equal(x, bytes.Repeat([]byte{pattern.Poison}, len(x))) {
						t.Errorf("atomic %v: rank %d: tensor %d's destination or scales changed", atomic, r, i)
					}
				}
			}
		}
	}
}

// TestFP8ScaleBuffers: a destination's scale buffer is checked like its
// other buffers, before anything moves.
func TestFP8ScaleBuffers(t *testing.T) {
	src := mustLay(t, "300x200", "bf16", "2", "S0", rng(0, 2))
	dst := mustLay(t, "300x200", "fp8e4m3", "2", "S0", rng(2, 2)) // rows [0,150) and [150,300): blocks 0-1 and 1-2
	plain := mustLay(t, "300x200", "bf16", "2", "S0", rng(2, 2))
	spec := refit.Spec{Name: "w", Src: src, Dst: dst, Scale: fp8.Block}
	if n, _ := spec.ScaleBytes(2); n != 4*2*2 {
		t.Errorf("rank 2 holds %d scale bytes, want 16 (2x2 blocks)", n)
	}
	if n, _ := spec.ScaleBytes(0); n != 0 {
		t.Errorf("a source rank holds %d scale bytes", n)
	}
	tests := []struct {
		name string
		mod  func(r int, b *refit.TensorBuffers)
		dst  placement.Layout
		want string
	}{
		{"missing", func(r int, b *refit.TensorBuffers) {
			if r == 3 {
				b.Scale = nil
			}
		}, dst, `rank 3, tensor "w": scale buffer is missing (the tensor converts to FP8 and the rank is in the destination mesh) (want 16 bytes)`},
		{"short", func(r int, b *refit.TensorBuffers) {
			if r == 2 {
				b.Scale = b.Scale.(transport.HostBuffer)[:12]
			}
		}, dst, `rank 2, tensor "w": scale buffer is too short: 12 bytes, the layout needs 16`},
		{"on a source", func(r int, b *refit.TensorBuffers) {
			if r == 1 {
				b.Scale = transport.HostBuffer(make([]byte, 16))
			}
		}, dst, `rank 1, tensor "w": scale buffer is given but the rank is not in the destination mesh: 16 bytes, the layout needs 0`},
		{"no conversion", func(r int, b *refit.TensorBuffers) {
			if r == 2 {
				b.Scale = transport.HostBuffer(make([]byte, 16))
			}
		}, plain, `rank 2, tensor "w": scale buffer is given but the tensor does not convert to FP8: 16 bytes, the layout needs 0`},
		{"aliases the destination", func(r int, b *refit.TensorBuffers) {
			if r == 3 {
				b.Scale = b.Dst.(transport.HostBuffer)[:16]
			}
		}, dst, `rank 3: the destination part of tensor "w" and the scales of tensor "w" overlap in memory`},
	}
	for _, tc := range tests {
		_, errs := runCall(4, func(r int) call {
			sp := spec
			sp.Dst = tc.dst
			if tc.dst.DType() != dtype.FP8E4M3 {
				sp.Scale = 0
			}
			b := fp8Buffers(t, sp, r)
			tc.mod(r, &b)
			return call{tensors: []tensor{{Name: "w", Src: sp.Src, Dst: sp.Dst, Scale: sp.Scale, Buffers: b}}, opts: flatOpts()}
		}, nil)
		for r, err := range errs {
			var be *refit.BufferError
			if !errors.As(err, &be) && !strings.Contains(err.Error(), "overlap") || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%s: rank %d: %v, want %q", tc.name, r, err, tc.want)
			}
		}
	}
}
