package fp8

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/m2n-dev/m2n/dtype"
	"github.com/m2n-dev/m2n/placement"
	"github.com/m2n-dev/m2n/strided"
)

// TestRescale rewrites a strided sub-box of codes for scales of which
// some moved, and compares every byte of the buffer with the rule
// applied element by element: Requantize in the blocks whose scale
// moved, the old code elsewhere and outside the region.
func TestRescale(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 27))
	for _, c := range []struct {
		shape []int64
		mode  Mode
		box   placement.Box
	}{
		{[]int64{300, 400}, Block, bx(5, 100, 290, 390)},
		{[]int64{3, 260, 270}, Block, bx(1, 0, 7, 3, 260, 200)},
		{[]int64{40, 90}, Row, bx(3, 0, 37, 90)},
		{[]int64{2, 40, 90}, Tensor, bx(0, 1, 2, 2, 39, 80)},
	} {
		g, err := NewGrid(c.shape, c.mode)
		if err != nil {
			t.Fatal(err)
		}
		from, err := g.WindowFor(c.box)
		if err != nil {
			t.Fatal(err)
		}
		to := Window{Blocks: from.Blocks, Values: make([]float32, len(from.Values))}
		for i := range from.Values {
			from.Values[i] = ScaleOf(float32(rng.IntN(4000)+1) / 8)
			to.Values[i] = from.Values[i]
			if i%3 != 1 { // two of three blocks move
				to.Values[i] = ScaleOf(float32(rng.IntN(4000)+1) / 8)
			}
		}
		// the box's rows, last dim padded by 5 elements in the buffer, 11 bytes in front
		nd := len(c.shape)
		cols := c.box.Hi[nd-1] - c.box.Lo[nd-1]
		rows := c.box.Elems() / cols
		at := strided.Desc{Offset: 11, Run: cols, Count: []int64{rows}, Stride: []int64{cols + 5}}
		buf := make([]byte, 11+rows*(cols+5))
		for i := range buf {
			buf[i] = byte(rng.IntN(0x7E)) | byte(rng.IntN(2))<<7 // no NaN codes
		}
		want := bytes.Clone(buf)
		var moved int64
		pos := int64(0)
		forEachIndex(c.box, func(idx []int64) {
			off := 11 + pos/cols*(cols+5) + pos%cols
			pos++
			bi := make([]int64, nd)
			copy(bi, idx)
			br, bc := g.BlockShape()
			bi[nd-2], bi[nd-1] = idx[nd-2]/br, idx[nd-1]/bc
			k, ok := from.Index(bi)
			if !ok {
				t.Fatalf("%v: block %v of element %v outside the window %v", c.shape, bi, idx, from.Blocks)
			}
			if from.Values[k] != to.Values[k] {
				want[off] = QuantizeValue(Decode(want[off])*from.Values[k], to.Values[k])
				moved++
			}
		})
		n, err := g.Rescale(buf, at, c.box, from, to)
		if err != nil {
			t.Fatal(err)
		}
		if n != moved || !bytes.Equal(buf, want) {
			t.Errorf("%v %v: rewrote %d elements, want %d; bytes equal %v", c.shape, c.mode, n, moved, bytes.Equal(buf, want))
		}
		// unchanged scales rewrite nothing
		if n, err := g.Rescale(buf, at, c.box, to, to); n != 0 || err != nil || !bytes.Equal(buf, want) {
			t.Errorf("%v: rescaling to the same scales: %d, %v", c.shape, n, err)
		}
	}
}

// TestRescalePredicts checks what Rescale is for: quantize bf16 values,
// move the amax of a block, and the old codes rescaled match the new
// codes in far more elements than the old codes do.
func TestRescalePredicts(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	shape := []int64{128, 128}
	src := make([]byte, 2*128*128)
	for i := 0; i < len(src); i += 2 {
		v := rng.Uint32()&0x807F | (120+rng.Uint32N(8))<<7
		binary.LittleEndian.PutUint16(src[i:], uint16(v))
	}
	a, err := Quantize(dtype.BF16, shape, Block, src)
	if err != nil {
		t.Fatal(err)
	}
	binary.LittleEndian.PutUint16(src, 130<<7|0x55) // a new amax
	b, err := Quantize(dtype.BF16, shape, Block, src)
	if err != nil {
		t.Fatal(err)
	}
	if a.Scales[0] == b.Scales[0] {
		t.Fatal("the scale did not move")
	}
	box := bx(0, 0, 128, 128)
	codes := bytes.Clone(a.Data)
	if _, err := a.Grid.Rescale(codes, strided.Desc{Run: 128 * 128}, box, Window{Blocks: box1(), Values: a.Scales}, Window{Blocks: box1(), Values: b.Scales}); err != nil {
		t.Fatal(err)
	}
	old, pred := 0, 0
	for i := range codes {
		if a.Data[i] != b.Data[i] {
			old++
		}
		if codes[i] != b.Data[i] {
			pred++
		}
	}
	t.Logf("of %d codes, %d differ from the old codes, %d from the rescaled ones", len(codes), old, pred)
	if pred*2 >= old {
		t.Errorf("the rescaled codes miss %d, the old ones %d: no better prediction", pred, old)
	}
}

func box1() placement.Box { return bx(0, 0, 1, 1) }

func TestRescaleErrors(t *testing.T) {
	g, _ := NewGrid([]int64{256, 256}, Block)
	w, _ := g.WindowFor(bx(0, 0, 256, 256))
	small, _ := g.WindowFor(bx(0, 0, 128, 256))
	box := bx(0, 0, 256, 256)
	for _, c := range []struct {
		codes    []byte
		box      placement.Box
		from, to Window
		want     string
	}{
		{make([]byte, 100), box, w, w, "reaches byte"},
		{make([]byte, 256*256), box, small, small, "does not hold blocks"},
		{make([]byte, 256*256), box, w, small, "must be the same blocks"},
	} {
		_, err := g.Rescale(c.codes, strided.Desc{Run: 256 * 256}, c.box, c.from, c.to)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("got %v, want an error containing %q", err, c.want)
		}
	}
}
