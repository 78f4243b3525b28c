package fp8

import "math"

// Max is the largest finite float8_e4m3fn value: 0x7E, 1.75 * 2^8. E4M3FN
// has no infinities; 0x7F and 0xFF are its NaNs.
const Max = 448

// ReciprocalBits is the bit pattern of Reciprocal: float32(1/448).
const ReciprocalBits = 0x3B124925

// Reciprocal is float32(1/448). A block's scale is its amax times
// Reciprocal, one float32 multiply, because torch divides a tensor by a
// Python scalar by multiplying with the scalar's rounded reciprocal: amax/448
// as a true division differs from it in the last bit for some amaxes.
var Reciprocal = math.Float32frombits(ReciprocalBits)

// NaN is the E4M3 byte every NaN encodes to. torch keeps a NaN's sign bit,
// and the sign of the NaN that 0/0 makes differs between CPUs and GPUs;
// m2n writes 0x7F on both (what torch writes on the GPU) so that the CPU
// and GPU paths agree byte for byte.
const NaN byte = 0x7F

// f32 bit patterns the encoder compares magnitudes with.
const (
	bitsMax      = 0x43E00000 // 448
	bitsMinNorm  = 0x3C800000 // 2^-6, the smallest normal E4M3 value
	bitsInf      = 0x7F800000
	bitsDenormMg = 0x46800000 // 2^14: adding it rounds to multiples of 2^-9
)

// Encode rounds f to float8_e4m3fn, to nearest with ties to even,
// saturating: magnitudes of 448 and above (infinities included) become
// +-448, as the rule's clamp to [-448, 448] before the cast makes them. A NaN
// becomes NaN (0x7F). The sign of zero is kept: -0 and negative values that
// round to zero encode as 0x80.
func Encode(f float32) byte {
	u := math.Float32bits(f)
	a := u & 0x7FFFFFFF
	var c uint32
	switch {
	case a < bitsMinNorm:
		// E4M3 subnormals are multiples of 2^-9: adding 2^14 makes the
		// float32 adder round there (its ulp at 2^14 is 2^-9).
		c = math.Float32bits(math.Float32frombits(a)+16384) - bitsDenormMg
	case a < bitsMax:
		// Round the f32 mantissa to 3 bits (nearest, ties to even), then
		// rebias the exponent from 127 to 7.
		c = (a+0x7FFFF+(a>>20)&1)>>20 - 120<<3
	case a <= bitsInf:
		c = 0x7E
	default:
		return NaN
	}
	return byte(c | u>>24&0x80)
}

// Decode returns the value of an E4M3 byte as a float32 (exact); 0x7F and
// 0xFF decode to NaN.
func Decode(b byte) float32 {
	sign := float32(1)
	if b&0x80 != 0 {
		sign = -1
	}
	e, m := int(b>>3)&0xF, float32(b&7)
	switch {
	case e == 15 && m == 7:
		return float32(math.NaN())
	case e == 0:
		return sign * m / 512 // m * 2^-9
	default:
		return sign * (1 + m/8) * float32(math.Ldexp(1, e-7))
	}
}

// ScaleOf returns the scale of a block whose amax (largest magnitude) is
// amax: amax * Reciprocal as one float32 multiply, or 1 for an all-zero
// block. The scale is weight_scale_inv, the dequantization multiplier: a
// block's element is Decode(q) * scale. amax must be finite and not
// negative. For float32 sources, amaxes below about 2^-141 make a scale of
// 0, as they do in torch.
func ScaleOf(amax float32) float32 {
	if amax == 0 {
		return 1
	}
	return float32(amax * Reciprocal)
}

// QuantizeValue returns the E4M3 byte of element x of a block of scale s:
// float32(x) / s as a true float32 division, clamped to [-448, 448] and
// rounded to nearest-even. It is the rule for one element, as plainly as it
// can be written; the quantizers in this package compute the same bytes
// faster.
func QuantizeValue(x, s float32) byte {
	return Encode(float32(x / s))
}

// quantizeMul is QuantizeValue with the division replaced by a float64
// multiply by inv = 1/float64(s), which gives the same float32 quotient for
// every float32 x and s: the float64 product is within 2^-52 (relative) of
// x/s, and x/s, a quotient of two 24-bit significands, is either a float32
// midpoint exactly (impossible: a midpoint has a 25-bit odd significand,
// which cannot divide x's) or at least 2^-49 away from every midpoint, so
// rounding the product to float32 rounds x/s. TestQuantizeMulExhaustive
// checks it for every bfloat16 x against hundreds of scales.
func quantizeMul(x float32, inv float64) byte {
	return Encode(float32(float64(x) * inv))
}

// bf16 returns the float32 value of bfloat16 bits.
func bf16(u uint16) float32 { return math.Float32frombits(uint32(u) << 16) }
