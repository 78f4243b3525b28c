package fp8_test

import (
	"bytes"
	"encoding/binary"
	"math"
	"slices"
	"testing"

	"github.com/m2n-dev/m2n/fp8"
	"github.com/m2n-dev/m2n/fp8/fp8test"
)

// TestConformance quantizes every torch-made case of testdata/fp8 whole and
// compares elements and scales bit for bit.
func TestConformance(t *testing.T) {
	f, err := fp8test.Load("../testdata/fp8")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range f.Cases {
		q, err := fp8.Quantize(c.DType, c.Shape, c.Mode, c.Input)
		if err != nil {
			t.Errorf("%v: %v", c, err)
			continue
		}
		if got := q.Grid.ScaleShape(); !slices.Equal(got, c.ScaleShape) {
			t.Errorf("%v: scale shape %v, torch %v", c, got, c.ScaleShape)
		}
		if rows, cols := q.Grid.BlockShape(); rows != c.Block[0] || cols != c.Block[1] {
			t.Errorf("%v: block %dx%d, torch %v", c, rows, cols, c.Block)
		}
		if i := firstDiff(q.Data, c.Output); i >= 0 {
			t.Errorf("%v: element %d is %#02x, torch %#02x (%d bytes)", c, i, at(q.Data, i), at(c.Output, i), len(c.Output))
		}
		got := make([]byte, 4*len(q.Scales))
		for i, s := range q.Scales {
			binary.LittleEndian.PutUint32(got[4*i:], math.Float32bits(s))
		}
		if !bytes.Equal(got, c.Scales) {
			t.Errorf("%v: scales %v, torch %v", c, q.Scales, decodeF32(c.Scales))
		}
	}
	t.Logf("%d cases match torch bit for bit (%s)", len(f.Cases), f.MadeBy)
}

func firstDiff(a, b []byte) int {
	for i := range max(len(a), len(b)) {
		if at(a, i) != at(b, i) || i >= len(a) || i >= len(b) {
			return i
		}
	}
	return -1
}

func at(b []byte, i int) int {
	if i < len(b) {
		return int(b[i])
	}
	return -1
}

func decodeF32(b []byte) []float32 {
	v := make([]float32, len(b)/4)
	for i := range v {
		v[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return v
}
