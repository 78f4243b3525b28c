package fp8

import (
	"math"
	"sort"

	"github.com/m2n-dev/m2n/dtype"
)

// The reference: the rule of testdata/fp8/cases.json written as plainly as
// possible in float64, sharing no code with the quantizer.

// refValues holds the 127 non-negative finite E4M3 values, by code.
var refValues = func() []float64 {
	v := make([]float64, 127)
	for c := range v {
		e, m := c>>3, float64(c&7)
		if e == 0 {
			v[c] = m * math.Pow(2, -9)
		} else {
			v[c] = (1 + m/8) * math.Pow(2, float64(e-7))
		}
	}
	return v
}()

// refEncode rounds q to the nearest E4M3 value, ties to the even code,
// after clamping to [-448, 448]; NaN gives 0x7F.
func refEncode(q float64) byte {
	if math.IsNaN(q) {
		return 0x7F
	}
	var sign byte
	if math.Signbit(q) {
		sign = 0x80
	}
	a := math.Min(math.Abs(q), 448)
	// the first code whose value is >= a
	i := sort.SearchFloat64s(refValues, a)
	if refValues[i] == a {
		return sign | byte(i)
	}
	lo, hi := i-1, i
	dlo, dhi := a-refValues[lo], refValues[hi]-a
	switch {
	case dlo < dhi:
		return sign | byte(lo)
	case dhi < dlo:
		return sign | byte(hi)
	case lo%2 == 0:
		return sign | byte(lo)
	default:
		return sign | byte(hi)
	}
}

// refScale is the rule's scale: amax * float32(1/448) rounded to float32
// (the product of two float32s is exact in float64), or 1 for amax 0.
func refScale(amax float64) float64 {
	if amax == 0 {
		return 1
	}
	return float64(float32(amax * float64(float32(1.0/448))))
}

// refQuant quantizes x with scale s: the float64 quotient rounded once to
// float32 is the float32 division (53 >= 2*24+2 bits), then clamp and
// round to E4M3.
func refQuant(x, s float64) byte {
	return refEncode(float64(float32(x / s)))
}

// refQuantize quantizes a whole tensor of float64 values (each exactly a
// bfloat16 or float32) by the rule, block by block with explicit loops.
// It returns the first non-finite element's flat index, or -1.
func refQuantize(shape []int64, mode Mode, vals []float64) (out []byte, scales []float64, bad int64) {
	nd := len(shape)
	m, k := shape[nd-2], shape[nd-1]
	batch := int64(1)
	for _, n := range shape[:nd-2] {
		batch *= n
	}
	br, bc := int64(128), int64(128)
	switch mode {
	case Row:
		br, bc = 1, max(k, 1)
	case Tensor:
		br, bc = max(m, 1), max(k, 1)
	}
	nbr, nbc := (m+br-1)/br, (k+bc-1)/bc
	amax := make([]float64, batch*nbr*nbc)
	block := func(b, i, j int64) int64 { return (b*nbr+i/br)*nbc + j/bc }
	for i, v := range vals {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return nil, nil, int64(i)
		}
	}
	for b := range batch {
		for i := range m {
			for j := range k {
				x := vals[(b*m+i)*k+j]
				bl := block(b, i, j)
				amax[bl] = math.Max(amax[bl], math.Abs(x))
			}
		}
	}
	scales = make([]float64, len(amax))
	for i, a := range amax {
		scales[i] = refScale(a)
	}
	out = make([]byte, len(vals))
	for b := range batch {
		for i := range m {
			for j := range k {
				e := (b*m+i)*k + j
				out[e] = refQuant(vals[e], scales[block(b, i, j)])
			}
		}
	}
	return out, scales, -1
}

// refDecode returns the float64 value of raw source bytes.
func refDecode(dt dtype.DType, raw []byte) []float64 {
	if dt == dtype.BF16 {
		v := make([]float64, len(raw)/2)
		for i := range v {
			v[i] = float64(math.Float32frombits(uint32(raw[2*i])<<16 | uint32(raw[2*i+1])<<24))
		}
		return v
	}
	v := make([]float64, len(raw)/4)
	for i := range v {
		v[i] = float64(math.Float32frombits(uint32(raw[4*i]) | uint32(raw[4*i+1])<<8 | uint32(raw[4*i+2])<<16 | uint32(raw[4*i+3])<<24))
	}
	return v
}
