package fp8

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/m2n-dev/m2n/dtype"
	"github.com/m2n-dev/m2n/placement"
)

// Quantized is a whole tensor in FP8: what a destination holding all of it
// receives.
type Quantized struct {
	Grid   Grid
	Data   []byte    // E4M3 bytes, row-major over the tensor's shape
	Scales []float32 // weight_scale_inv, row-major over Grid.ScaleShape()
}

// Quantize quantizes a whole tensor held dense and row-major in src (raw
// little-endian bf16 or f32) for mode: the reference every distributed
// quantization must reproduce, byte for byte. It fails on a NaN or
// infinity with a *NonFiniteError naming the first one.
func Quantize(dt dtype.DType, shape []int64, mode Mode, src []byte) (Quantized, error) {
	g, err := NewGrid(shape, mode)
	if err != nil {
		return Quantized{}, err
	}
	esz, err := elemSize(dt)
	if err != nil {
		return Quantized{}, err
	}
	box := placement.Box{Lo: make([]int64, g.nd), Hi: g.Shape()}
	n := box.Elems()
	if int64(len(src)) != n*esz {
		return Quantized{}, fmt.Errorf("fp8: a %s %v tensor is %d bytes, got %d", placement.FormatShape(shape), dt, n*esz, len(src))
	}
	w, err := g.NewWindow(g.All())
	if err != nil {
		return Quantized{}, err
	}
	r := Dense(dt, src, box)
	if err := g.Amax(w, r); err != nil {
		return Quantized{}, err
	}
	if err := w.ToScales(); err != nil {
		return Quantized{}, err
	}
	out := make([]byte, n)
	if err := g.Pack(out, r, w); err != nil {
		return Quantized{}, err
	}
	return Quantized{Grid: g, Data: out, Scales: w.Values}, nil
}

// ScaleBytes returns the scales as raw little-endian float32, row-major
// over Grid.ScaleShape(): weight_scale_inv as a file holds it.
func (q Quantized) ScaleBytes() []byte {
	out := make([]byte, 4*len(q.Scales))
	for i, v := range q.Scales {
		binary.LittleEndian.PutUint32(out[4*i:], math.Float32bits(v))
	}
	return out
}

// Stats counts the elements at the format's bounds, saturated (+-448) and
// zeros (+-0), and returns the least and the greatest scale (0 for none).
func (q Quantized) Stats() (saturated, zeros int, minScale, maxScale float32) {
	for _, b := range q.Data {
		switch b & 0x7F {
		case 0x7E:
			saturated++
		case 0:
			zeros++
		}
	}
	for i, s := range q.Scales {
		if i == 0 || s < minScale {
			minScale = s
		}
		if i == 0 || s > maxScale {
			maxScale = s
		}
	}
	return saturated, zeros, minScale, maxScale
}
