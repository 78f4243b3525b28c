package fp8

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"
)

// avx2Scales are scales the AVX2 tests divide by: block scales of random
// amaxes over the bfloat16 range, and the extremes (subnormal scales, 0
// for f32 blocks of tiny amax, 1 for all-zero blocks, huge ones).
func avx2Scales(r *rand.Rand, n int) []float32 {
	out := []float32{1, 0, math.Float32frombits(1), 0x1p-130, 0x1p-126, ScaleOf(0x1p-133), ScaleOf(448), ScaleOf(3.3e38), 0x1p100, 3e38}
	for len(out) < n {
		a := math.Float32frombits(r.Uint32N(0x7F800000))
		out = append(out, ScaleOf(a))
	}
	return out
}

// TestAVX2MatchesScalar compares the AVX2 quantize kernels (through
// quantBF16 and quantF32, which hand the scalar loop the groups they
// refuse and the tail) with the scalar loops, byte for byte and in the
// index of the first NaN or infinity: every bfloat16 bit pattern, in a
// shuffled order so that NaNs and infinities fall anywhere in a group, at
// odd lengths and offsets, against hundreds of scales; and random float32
// values with specials mixed in. It also compares the amax kernels.
func TestAVX2MatchesScalar(t *testing.T) {
	if !useAVX2 {
		t.Skip("no AVX2 on this CPU (or built with purego): the scalar loops are all there is")
	}
	r := rand.New(rand.NewPCG(7, 8))
	all := make([]byte, 2*65536)
	for i, v := range r.Perm(65536) {
		binary.LittleEndian.PutUint16(all[2*i:], uint16(v))
	}
	// most groups finite: a copy with the NaNs and infinities made finite
	finite := append([]byte(nil), all...)
	for i := 0; i < 65536; i++ {
		if u := binary.LittleEndian.Uint16(finite[2*i:]); u&0x7F80 == 0x7F80 {
			binary.LittleEndian.PutUint16(finite[2*i:], u&^0x4000)
		}
	}
	got, want := make([]byte, 65536), make([]byte, 65536)
	for _, s := range avx2Scales(r, 100) {
		inv := 1 / float64(s)
		for _, src := range [][]byte{all, finite} {
			off := r.IntN(9)
			n := 65536 - off - r.IntN(9)
			a := quantBF16(got[:n], src[2*off:], s)
			b := quantBF16Scalar(want[:n], src[2*off:], inv)
			if a != b {
				t.Fatalf("scale %v: first non-finite %d, scalar %d", s, a, b)
			}
			for i := range n {
				if got[i] != want[i] {
					u := binary.LittleEndian.Uint16(src[2*(off+i):])
					t.Fatalf("scale %v (bits %#08x): bf16 %#04x: AVX2 %#02x, scalar %#02x", s, math.Float32bits(s), u, got[i], want[i])
				}
			}
		}
	}
	// float32: random bits, with specials
	const m = 1 << 16
	f := make([]byte, 4*m)
	for i := 0; i < m; i++ {
		u := r.Uint32()
		switch r.IntN(64) {
		case 0:
			u = 0x7F800000 | u&0x80000000 // infinity
		case 1:
			u |= 0x7F800001 // NaN
		case 2:
			u &= 0x807FFFFF // subnormal or zero
		}
		binary.LittleEndian.PutUint32(f[4*i:], u)
	}
	fin := append([]byte(nil), f...)
	for i := 0; i < m; i++ {
		if u := binary.LittleEndian.Uint32(fin[4*i:]); u&0x7F800000 == 0x7F800000 {
			binary.LittleEndian.PutUint32(fin[4*i:], u&^0x40000000)
		}
	}
	for _, s := range avx2Scales(r, 50) {
		inv := 1 / float64(s)
		for _, src := range [][]byte{f, fin} {
			off := r.IntN(9)
			n := m - off - r.IntN(9)
			a := quantF32(got[:n], src[4*off:], s)
			b := quantF32Scalar(want[:n], src[4*off:], inv)
			if a != b {
				t.Fatalf("f32 scale %v: first non-finite %d, scalar %d", s, a, b)
			}
			for i := range n {
				if got[i] != want[i] {
					t.Fatalf("f32 scale %v: %#08x: AVX2 %#02x, scalar %#02x", s, binary.LittleEndian.Uint32(src[4*(off+i):]), got[i], want[i])
				}
			}
		}
	}
	// amaxes of random lengths
	for it := 0; it < 2000; it++ {
		n := r.IntN(300)
		off := r.IntN(5)
		b := all[2*off : 2*(off+n)]
		if got, want := amaxBF16(b), amaxBF16Ref(b); got != want {
			t.Fatalf("bf16 amax of %d values: %#04x, want %#04x", n, got, want)
		}
		c := f[4*off : 4*(off+n)]
		if got, want := amaxF32(c), amaxF32Ref(c); got != want {
			t.Fatalf("f32 amax of %d values: %#08x, want %#08x", n, got, want)
		}
	}
}

func amaxBF16Ref(b []byte) uint16 {
	var m uint16
	for i := 0; i+2 <= len(b); i += 2 {
		m = max(m, binary.LittleEndian.Uint16(b[i:])&0x7FFF)
	}
	return m
}

func amaxF32Ref(b []byte) uint32 {
	var m uint32
	for i := 0; i+4 <= len(b); i += 4 {
		m = max(m, binary.LittleEndian.Uint32(b[i:])&0x7FFFFFFF)
	}
	return m
}
