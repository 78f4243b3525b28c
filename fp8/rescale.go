package fp8

import (
	"fmt"
	"slices"

	"github.com/m2n-dev/m2n/dtype"
	"github.com/m2n-dev/m2n/placement"
	"github.com/m2n-dev/m2n/strided"
)

// Rescale rewrites E4M3 codes quantized with the scales from for the
// scales to: codes holds box (row-major over box, where at says, one byte
// per element), and in every block whose scale differs between from and
// to, each code c becomes Requantize(c, from, to) of its block; the
// blocks whose scale is the same are not touched. from and to are windows
// over the same blocks, holding every block box touches. It returns how
// many elements it rewrote.
//
// The result is a prediction, not the codes of quantizing the original
// values with the new scales (the old codes lost the bits that decide
// some roundings), but a deterministic one: a delta sync's source and
// destination, both holding the old codes and both scales, compute the
// same bytes, so that the source can encode the codes it quantized
// against the prediction instead of the old codes, and send only the
// elements the prediction got wrong (21-27% of a block whose scale moved
// at 1% of changed bf16 elements, against 63-85% that differ from the
// old codes: TestFP8DeltaBytes in package pattern).
func (g Grid) Rescale(codes []byte, at strided.Desc, box placement.Box, from, to Window) (int64, error) {
	r := Region{DType: dtype.FP8E4M3, Data: codes, At: at, Box: box}
	elems, err := g.checkAt(r, 1)
	if err != nil {
		return 0, err
	}
	if err := g.checkWindow(from, box); err != nil {
		return 0, err
	}
	if !slices.Equal(from.Blocks.Lo, to.Blocks.Lo) || !slices.Equal(from.Blocks.Hi, to.Blocks.Hi) || len(from.Values) != len(to.Values) {
		return 0, fmt.Errorf("fp8: rescaling from scales over blocks %v to scales over blocks %v (they must be the same blocks)", from.Blocks, to.Blocks)
	}
	if elems == 0 || slices.Equal(from.Values, to.Values) {
		return 0, nil
	}
	// one table per block whose scale moved: the new code of every code
	tabs := map[int64]*[256]byte{}
	for i, a := range from.Values {
		if b := to.Values[i]; a != b {
			t := new([256]byte)
			for c := range t {
				t[c] = Requantize(byte(c), a, b)
			}
			tabs[int64(i)] = t
		}
	}
	var wk walker
	wk.init(&g, &r, 1, &from)
	n := int64(0)
	wk.walk(func(s segment) bool {
		if t := tabs[s.win]; t != nil {
			for i, c := range s.data {
				s.data[i] = t[c]
			}
			n += s.n
		}
		return true
	})
	return n, nil
}

// Requantize returns the code of the value of code c under scale from
// (Decode(c) * from, a float32 multiply) quantized with scale to
// (QuantizeValue): what Rescale writes.
func Requantize(c byte, from, to float32) byte {
	return QuantizeValue(float32(Decode(c)*from), to)
}
