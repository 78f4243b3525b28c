package pattern

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/m2n-dev/m2n/dtype"
	"github.com/m2n-dev/m2n/fp8"
	"github.com/m2n-dev/m2n/mesh"
	"github.com/m2n-dev/m2n/placement"
)

// TestFP8WantIsWholeQuantize: what fp8Want computes from the blocks a box
// touches is, byte for byte and scale for scale, the box of quantizing the
// whole pattern tensor at once, for random shapes, boxes and modes, in
// bf16 and f32.
func TestFP8WantIsWholeQuantize(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	shapes := [][]int64{{300, 200}, {256, 384}, {3, 130, 257}, {1, 1}, {129, 1}, {2, 2, 140, 70}}
	for it := 0; it < 60; it++ {
		shape := shapes[it%len(shapes)]
		dt := []dtype.DType{dtype.BF16, dtype.F32}[it%2]
		mode := fp8.Mode(1 + it%3)
		seed := uint64(it)
		whole := floatsBox(dt, shape, placement.Box{Lo: make([]int64, len(shape)), Hi: shape}, seed)
		q, err := fp8.Quantize(dt, shape, mode, whole)
		if err != nil {
			t.Fatal(err)
		}
		box := placement.Box{Lo: make([]int64, len(shape)), Hi: make([]int64, len(shape))}
		for d, n := range shape {
			box.Lo[d] = r.Int64N(n)
			box.Hi[d] = box.Lo[d] + 1 + r.Int64N(n-box.Lo[d])
		}
		want, w, err := fp8Want(dt, shape, mode, box, seed)
		if err != nil {
			t.Fatal(err)
		}
		// the box's bytes of the whole quantization
		k := 0
		forEach(box, func(idx []int64) {
			flat := int64(0)
			for d := range shape {
				flat = flat*shape[d] + idx[d]
			}
			if want[k] != q.Data[flat] {
				t.Fatalf("%v %v %v box %v: element %v: fp8Want %#02x, whole tensor %#02x", shape, dt, mode, box, idx, want[k], q.Data[flat])
			}
			k++
		})
		all := fp8.Window{Blocks: q.Grid.All(), Values: q.Scales}
		got, _ := q.Grid.NewWindow(w.Blocks)
		if err := got.CopyFrom(all); err != nil {
			t.Fatal(err)
		}
		for i := range got.Values {
			if math.Float32bits(got.Values[i]) != math.Float32bits(w.Values[i]) {
				t.Fatalf("%v %v %v box %v: scale %d of %v: %v, whole tensor %v", shape, dt, mode, box, i, w.Blocks, w.Values[i], got.Values[i])
			}
		}
	}
}

// TestFloatsAreFinite: the float pattern never holds a NaN or an infinity,
// holds zeros, and spans many binades.
func TestFloatsAreFinite(t *testing.T) {
	zeros := 0
	exps := map[uint32]bool{}
	for g := int64(0); g < 1<<16; g++ {
		b := floatBF16(g, 3)
		if b&0x7F80 == 0x7F80 {
			t.Fatalf("element %d: bf16 %#04x is not finite", g, b)
		}
		f := floatF32(g, 3)
		if f&0x7F800000 == 0x7F800000 {
			t.Fatalf("element %d: f32 %#08x is not finite", g, f)
		}
		if b&0x7FFF == 0 {
			zeros++
		}
		exps[uint32(b>>7)&0xFF] = true
	}
	if zeros == 0 || len(exps) < 16 {
		t.Errorf("%d zeros and %d binades in 65536 elements", zeros, len(exps))
	}
}

func forEach(b placement.Box, fn func([]int64)) {
	idx := append([]int64(nil), b.Lo...)
	for {
		fn(idx)
		if !b.Next(idx) {
			return
		}
	}
}

// TestChangeBoxIsChange: the updates changeBox applies to a box (what
// CheckFP8Changed's reference quantizes) are Change's on every part of a
// sharded layout, byte for byte, over three updates.
func TestChangeBoxIsChange(t *testing.T) {
	for _, frac := range []float64{0.01, 0.3, 1} {
		four, _ := mesh.Interval([]int{2, 2}, 0)
		l, err := placement.ParseLayout("300x257", dtype.BF16, four, "S1,S0")
		if err != nil {
			t.Fatal(err)
		}
		for rank := range 4 {
			buf := make([]byte, l.LocalBytes(rank))
			if err := FillFloats(l, rank, 7, buf, placement.View{}); err != nil {
				t.Fatal(err)
			}
			box, _ := l.RankBox(rank)
			want := floatsBox(dtype.BF16, l.Shape(), box, 7)
			if string(buf) != string(want) {
				t.Fatalf("rank %d: floatsBox is not FillFloats' part", rank)
			}
			for step := uint64(1); step <= 3; step++ {
				if err := Change(l, rank, 7, step, frac, buf, placement.View{}); err != nil {
					t.Fatal(err)
				}
				changeBox(l.Shape(), box, 2, 7, step, frac, want)
			}
			if string(buf) == string(floatsBox(dtype.BF16, l.Shape(), box, 7)) {
				t.Errorf("frac %v, rank %d: nothing changed", frac, rank)
			}
			if string(buf) != string(want) {
				t.Errorf("frac %v, rank %d: changeBox differs from Change", frac, rank)
			}
		}
	}
}
