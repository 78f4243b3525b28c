package fp8

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/m2n-dev/m2n/dtype"
	"github.com/m2n-dev/m2n/placement"
	"github.com/m2n-dev/m2n/strided"
)

func bx(c ...int64) placement.Box { // lo..., hi...
	n := len(c) / 2
	return placement.Box{Lo: c[:n:n], Hi: c[n:]}
}

func TestGrid(t *testing.T) {
	for _, c := range []struct {
		shape      []int64
		mode       Mode
		rows, cols int64
		scale      []int64
	}{
		{[]int64{256, 384}, Block, 128, 128, []int64{2, 3}},
		{[]int64{300, 200}, Block, 128, 128, []int64{3, 2}},
		{[]int64{4, 256, 384}, Block, 128, 128, []int64{4, 2, 3}},
		{[]int64{300, 200}, Row, 1, 200, []int64{300, 1}},
		{[]int64{300, 200}, Tensor, 300, 200, []int64{1, 1}},
		{[]int64{2, 3, 300, 200}, Tensor, 300, 200, []int64{2, 3, 1, 1}},
		{[]int64{0, 200}, Block, 128, 128, []int64{0, 2}},
		{[]int64{5, 0}, Row, 1, 1, []int64{5, 0}},
	} {
		g, err := NewGrid(c.shape, c.mode)
		if err != nil {
			t.Fatal(err)
		}
		r, k := g.BlockShape()
		if r != c.rows || k != c.cols || !slices.Equal(g.ScaleShape(), c.scale) || g.NDim() != len(c.shape) {
			t.Errorf("%v %v: blocks %dx%d, scale shape %v; want %dx%d, %v", c.shape, c.mode, r, k, g.ScaleShape(), c.rows, c.cols, c.scale)
		}
		n := int64(1)
		for _, s := range c.scale {
			n *= s
		}
		if g.NumBlocks() != n {
			t.Errorf("%v %v: %d blocks, want %d", c.shape, c.mode, g.NumBlocks(), n)
		}
	}
	for _, c := range []struct {
		shape []int64
		mode  Mode
		want  string
	}{
		{[]int64{7}, Block, "needs 2 to 8 dims"},
		{nil, Block, "needs 2 to 8 dims"},
		{[]int64{1, 1, 1, 1, 1, 1, 1, 1, 1}, Block, "needs 2 to 8 dims"},
		{[]int64{4, -1}, Row, "negative"},
		{[]int64{1 << 40, 1 << 40}, Row, "overflows"},
		{[]int64{4, 4}, 0, "not a scaling mode"},
	} {
		if _, err := NewGrid(c.shape, c.mode); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("NewGrid(%v, %v): %v, want %q", c.shape, c.mode, err, c.want)
		}
	}
	for _, s := range []string{"block", "Row", " tensor "} {
		if _, err := ParseMode(s); err != nil {
			t.Error(err)
		}
	}
	if _, err := ParseMode("col"); err == nil {
		t.Error("ParseMode(col) accepted")
	}
}

func TestBlocks(t *testing.T) {
	g, _ := NewGrid([]int64{4, 300, 200}, Block)
	for _, c := range []struct{ box, want placement.Box }{
		{bx(0, 0, 0, 4, 300, 200), bx(0, 0, 0, 4, 3, 2)},
		{bx(1, 127, 128, 2, 129, 129), bx(1, 0, 1, 2, 2, 2)}, // cuts: rows 127-128, column 128
		{bx(1, 128, 0, 3, 256, 128), bx(1, 1, 0, 3, 2, 1)},   // exactly one block row and column
		{bx(0, 299, 199, 1, 300, 200), bx(0, 2, 1, 1, 3, 2)}, // the last element: a partial edge block
		{bx(2, 10, 10, 2, 20, 20), bx(2, 0, 0, 2, 1, 0)},     // empty
	} {
		got, err := g.Blocks(c.box)
		if err != nil {
			t.Fatal(err)
		}
		if !got.Equal(c.want) {
			t.Errorf("Blocks(%v) = %v, want %v", c.box, got, c.want)
		}
	}
	if _, err := g.Blocks(bx(0, 0, 0, 4, 301, 200)); err == nil {
		t.Error("a box outside the tensor accepted")
	}
	if _, err := g.Blocks(bx(0, 0, 4, 4)); err == nil {
		t.Error("a 2-D box of a 3-D tensor accepted")
	}
	eb, err := g.BlockBox(bx(1, 2, 1, 3, 3, 2))
	if err != nil || !eb.Equal(bx(1, 256, 128, 3, 300, 200)) {
		t.Errorf("BlockBox = %v, %v; want [1:3, 256:300, 128:200)", eb, err)
	}
	if _, err := g.BlockBox(bx(0, 0, 0, 1, 4, 1)); err == nil {
		t.Error("a block box outside the grid accepted")
	}
	if !g.All().Equal(bx(0, 0, 0, 4, 3, 2)) {
		t.Errorf("All = %v", g.All())
	}
}

func TestWindow(t *testing.T) {
	g, _ := NewGrid([]int64{300, 200}, Block) // 3x2 blocks
	a, _ := g.WindowFor(bx(0, 0, 200, 150))   // blocks [0:2, 0:2)
	b, _ := g.WindowFor(bx(100, 100, 300, 200))
	if !a.Blocks.Equal(bx(0, 0, 2, 2)) || !b.Blocks.Equal(bx(0, 0, 3, 2)) || len(a.Values) != 4 || len(b.Values) != 6 {
		t.Fatalf("windows %v %v", a.Blocks, b.Blocks)
	}
	copy(a.Values, []float32{1, 5, 3, 0})
	copy(b.Values, []float32{2, 2, 2, 2, 7, 8})
	if err := a.MaxWith(b); err != nil || !slices.Equal(a.Values, []float32{2, 5, 3, 2}) {
		t.Errorf("MaxWith: %v, %v", a.Values, err)
	}
	if err := b.MaxWith(a); err != nil || !slices.Equal(b.Values, []float32{2, 5, 3, 2, 7, 8}) {
		t.Errorf("MaxWith: %v, %v", b.Values, err)
	}
	c, _ := g.NewWindow(bx(1, 1, 3, 2))
	if err := c.CopyFrom(b); err != nil || !slices.Equal(c.Values, []float32{2, 8}) {
		t.Errorf("CopyFrom: %v, %v", c.Values, err)
	}
	if i, ok := b.Index([]int64{2, 1}); !ok || i != 5 {
		t.Errorf("Index = %d, %v", i, ok)
	}
	if _, ok := a.Index([]int64{2, 1}); ok {
		t.Error("Index outside the window reported inside")
	}
	if err := c.ToScales(); err != nil || c.Values[0] != ScaleOf(2) || c.Values[1] != ScaleOf(8) {
		t.Errorf("ToScales: %v, %v", c.Values, err)
	}
	bad := Window{Blocks: bx(0, 0, 1, 1), Values: []float32{-1}}
	if bad.ToScales() == nil {
		t.Error("a negative amax accepted")
	}
	if err := a.MaxWith(Window{Blocks: bx(0, 0, 1, 1)}); err == nil {
		t.Error("a window with too few values accepted")
	}
	if _, err := g.NewWindow(bx(0, 0, 4, 1)); err == nil {
		t.Error("a window outside the grid accepted")
	}
}

func TestRegionErrors(t *testing.T) {
	g, _ := NewGrid([]int64{4, 8}, Block)
	data := make([]byte, 2*4*8)
	full := bx(0, 0, 4, 8)
	w, _ := g.WindowFor(full)
	out := make([]byte, 32)
	for _, c := range []struct {
		r    Region
		want string
	}{
		{Region{DType: dtype.F16, Data: data, At: strided.Desc{Run: 64}, Box: full}, "takes bf16 or f32"},
		{Region{DType: dtype.BF16, Data: data, At: strided.Desc{Run: 62}, Box: full}, "describes 62"},
		{Region{DType: dtype.BF16, Data: data[:60], At: strided.Desc{Run: 64}, Box: full}, "reaches byte 64 of a 60-byte buffer"},
		{Region{DType: dtype.BF16, Data: data, At: strided.Desc{Run: 3, Count: []int64{2}, Stride: []int64{3}}, Box: bx(0, 0, 1, 3)}, "whole number"},
		{Region{DType: dtype.BF16, Data: data, At: strided.Desc{Run: 2, Count: []int64{2}}, Box: bx(0, 0, 1, 2)}, "counts and"},
		{Region{DType: dtype.BF16, Data: data, At: strided.Desc{Run: 2, Count: []int64{2}, Stride: []int64{-2}}, Box: bx(0, 0, 1, 2)}, "negative"},
		{Region{DType: dtype.BF16, Data: data, At: strided.Desc{Run: 64}, Box: bx(0, 0, 4, 9)}, "not inside the tensor"},
	} {
		if err := g.Amax(w, c.r); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Amax(%+v): %v, want %q", c.r, err, c.want)
		}
		if err := g.Pack(out, c.r, w); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Pack(%+v): %v, want %q", c.r, err, c.want)
		}
	}
	ok := Dense(dtype.BF16, data, full)
	if err := g.Pack(out[:31], ok, w); err == nil || !strings.Contains(err.Error(), "needs 32") {
		t.Errorf("short destination: %v", err)
	}
	small := Window{Blocks: bx(0, 0, 0, 0), Values: nil}
	if err := g.Amax(small, ok); err == nil || !strings.Contains(err.Error(), "does not hold blocks") {
		t.Errorf("window without the region's blocks: %v", err)
	}
	if _, err := Quantize(dtype.BF16, []int64{4, 8}, Block, data[:10]); err == nil {
		t.Error("Quantize of a short buffer accepted")
	}
	// An empty region is fine and touches nothing.
	empty := Region{DType: dtype.BF16, Data: nil, At: strided.Desc{}, Box: bx(1, 1, 1, 5)}
	if err := g.Amax(w, empty); err != nil {
		t.Error(err)
	}
	if err := g.Pack(nil, empty, w); err != nil {
		t.Error(err)
	}
}

func TestQuantizeEmpty(t *testing.T) {
	for _, shape := range [][]int64{{0, 200}, {3, 0}, {2, 0, 5}} {
		q, err := Quantize(dtype.BF16, shape, Block, nil)
		if err != nil || len(q.Data) != 0 {
			t.Errorf("%v: %v, %d bytes", shape, err, len(q.Data))
		}
	}
}

func TestZeroGrid(t *testing.T) {
	var g Grid
	b := bx(0, 0, 1, 1)
	if _, err := g.Blocks(b); err == nil {
		t.Error("zero Grid: Blocks accepted a box")
	}
	if _, err := g.NewWindow(b); err == nil {
		t.Error("zero Grid: NewWindow accepted a box")
	}
	w := Window{Blocks: b, Values: []float32{0}}
	if err := g.Amax(w, Dense(dtype.BF16, make([]byte, 2), b)); err == nil {
		t.Error("zero Grid: Amax accepted a region")
	}
	if err := g.Pack(make([]byte, 1), Dense(dtype.BF16, make([]byte, 2), b), w); err == nil {
		t.Error("zero Grid: Pack accepted a region")
	}
}

// TestCombineMatchesElementwise: MaxWith and CopyFrom of windows of 1 to 4
// dims that overlap in every way (apart, corners, nested, equal, full
// trailing dims in one and not the other) give, block by block, what the
// element-wise rule gives.
func TestCombineMatchesElementwise(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 5))
	box := func(nd int) placement.Box {
		b := placement.Box{Lo: make([]int64, nd), Hi: make([]int64, nd)}
		for d := range nd {
			b.Lo[d] = rng.Int64N(3)
			b.Hi[d] = b.Lo[d] + 1 + rng.Int64N(3)
			if rng.IntN(3) == 0 { // often the same span in every window
				b.Lo[d], b.Hi[d] = 0, 4
			}
		}
		return b
	}
	fill := func(b placement.Box) Window {
		w := Window{Blocks: b, Values: make([]float32, b.Elems())}
		for i := range w.Values {
			w.Values[i] = float32(rng.IntN(100))
		}
		return w
	}
	for it := 0; it < 2000; it++ {
		nd := 1 + rng.IntN(4)
		w, o := fill(box(nd)), fill(box(nd))
		for _, copyFrom := range []bool{false, true} {
			got := Window{Blocks: w.Blocks, Values: slices.Clone(w.Values)}
			want := slices.Clone(w.Values)
			c := slices.Clone(w.Blocks.Lo)
			for ok := true; ok; ok = w.Blocks.Next(c) {
				wi, _ := w.Index(c)
				if oi, in := o.Index(c); in {
					if copyFrom {
						want[wi] = o.Values[oi]
					} else {
						want[wi] = max(want[wi], o.Values[oi])
					}
				}
			}
			var err error
			if copyFrom {
				err = got.CopyFrom(o)
			} else {
				err = got.MaxWith(o)
			}
			if err != nil || !slices.Equal(got.Values, want) {
				t.Fatalf("%v with %v (copy %v): %v, got %v, want %v", w.Blocks, o.Blocks, copyFrom, err, got.Values, want)
			}
		}
	}
}

// TestWindowBits: AppendBits writes each value as 4 little-endian bytes
// (checked one by one), ReadBits reads them back, and a length that does
// not fit the window is refused.
func TestWindowBits(t *testing.T) {
	w := Window{Blocks: placement.Box{Lo: []int64{0}, Hi: []int64{5}}, Values: []float32{0, 1.5, -2, float32(math.Inf(1)), 3e-39}}
	b := w.AppendBits([]byte{9})
	if len(b) != 1+4*5 || b[0] != 9 {
		t.Fatalf("%d bytes: %v", len(b), b)
	}
	for i, v := range w.Values {
		if got := binary.LittleEndian.Uint32(b[1+4*i:]); got != math.Float32bits(v) {
			t.Errorf("value %d: bits %#x, want %#x", i, got, math.Float32bits(v))
		}
	}
	r := Window{Blocks: w.Blocks, Values: make([]float32, 5)}
	if err := r.ReadBits(b[1:]); err != nil || !slices.Equal(r.Values, w.Values) {
		t.Errorf("read back %v, %v", r.Values, err)
	}
	if err := r.ReadBits(b); err == nil {
		t.Error("21 bytes for 5 values accepted")
	}
}
