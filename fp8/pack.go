package fp8

import (
	"fmt"
	"math"
	"sync"

	"github.com/m2n-dev/m2n/dtype"
)

// Pack quantizes region r into dst while packing it: dst[i] becomes the
// E4M3 byte of the i-th element of r in row-major order of r.Box, quantized
// with its block's scale from scales, so dst holds what a plain pack of r
// would hold, in FP8 (half the bytes of bf16). scales must hold every block
// r touches, with the global scales (every rank that holds a part of a
// block quantizes it with the same scale). dst needs r.Box.Elems() bytes.
//
// Pack reads the source once. With AVX2 it quantizes eight elements at a
// time (quant_amd64.s); otherwise, for bfloat16 sources, it builds, per
// block it covers with enough elements, a table of the E4M3 byte of every
// bfloat16 magnitude the block can hold, so that an element costs a load,
// a lookup and a store; the bytes are those of QuantizeValue either way. A NaN or
// infinite element fails the call with a *NonFiniteError (dst is then
// partly written). Pack allocates nothing once warm (the tables are pooled).
func (g Grid) Pack(dst []byte, r Region, scales Window) error {
	elems, esz, err := g.check(r)
	if err != nil {
		return err
	}
	if err := g.checkWindow(scales, r.Box); err != nil {
		return err
	}
	if int64(len(dst)) < elems {
		return fmt.Errorf("fp8: packing region %v into %d bytes, it needs %d", r.Box, len(dst), elems)
	}
	if elems == 0 {
		return nil
	}
	var wk walker
	wk.init(&g, &r, esz, &scales)
	var bad *NonFiniteError
	fail := func(s segment, i int64) bool {
		bad = g.nonFinite(r.Box, s.pos+i, valueAt(s.data, esz, i))
		return false
	}
	if r.DType == dtype.F32 {
		wk.walk(func(s segment) bool {
			if i := quantF32(dst[s.pos:s.pos+s.n], s.data, scales.Values[s.win]); i >= 0 {
				return fail(s, i)
			}
			return true
		})
		if bad != nil {
			return bad
		}
		return nil
	}
	tabs := tablePool.Get().(*tables)
	defer tablePool.Put(tabs)
	_, cols := g.BlockShape()
	tabs.reset((r.Box.Hi[g.nd-1]-1)/cols - r.Box.Lo[g.nd-1]/cols + 1)
	wk.walk(func(s segment) bool {
		out := dst[s.pos : s.pos+s.n]
		sc := scales.Values[s.win]
		var i int64
		if !useAVX2 && s.served >= tableMinElems && tableable(sc) {
			t, base, inv := tabs.get(s.slot, s.win, sc)
			i = quantBF16Table(out, s.data, t, base, inv)
		} else {
			i = quantBF16(out, s.data, sc)
		}
		if i >= 0 {
			return fail(s, i)
		}
		return true
	})
	if bad != nil {
		return bad
	}
	return nil
}

// quantBF16 quantizes the bfloat16 values in src into dst, dividing by the
// scale s. It returns the index of the first NaN or infinity, or -1. With
// AVX2 the kernel does eight elements at a time (quant_amd64.s: a float32
// division, as the rule says), the scalar loop the rest.
func quantBF16(dst, src []byte, s float32) int64 {
	src = src[:2*len(dst)]
	inv := 1 / float64(s)
	if !useAVX2 || len(dst) < 8 {
		return quantBF16Scalar(dst, src, inv)
	}
	i := quantBF16AVX2(&dst[0], &src[0], len(dst), s)
	if j := quantBF16Scalar(dst[i:], src[2*i:], inv); j >= 0 {
		return int64(i) + j
	}
	return -1
}

// quantBF16Scalar is quantBF16 element by element, dividing by the scale
// 1/inv through a multiply (see quantizeMul). Encode's normal case is
// written out so that the loop needs no call for most elements (Encode is
// a little too large to inline).
func quantBF16Scalar(dst, src []byte, inv float64) int64 {
	src = src[:2*len(dst)]
	bad := int64(-1)
	for i := range dst {
		u := uint16(src[2*i]) | uint16(src[2*i+1])<<8
		q := math.Float32bits(float32(float64(bf16(u)) * inv))
		if a := q & 0x7FFFFFFF; a-bitsMinNorm < bitsMax-bitsMinNorm {
			dst[i] = byte((a+0x7FFFF+(a>>20)&1)>>20 - 120<<3 | q>>24&0x80)
			continue
		}
		if u&0x7FFF >= 0x7F80 && bad < 0 {
			bad = int64(i)
		}
		dst[i] = Encode(math.Float32frombits(q))
	}
	return bad
}

// quantF32 is quantBF16 for float32 values.
func quantF32(dst, src []byte, s float32) int64 {
	src = src[:4*len(dst)]
	inv := 1 / float64(s)
	if !useAVX2 || len(dst) < 8 {
		return quantF32Scalar(dst, src, inv)
	}
	i := quantF32AVX2(&dst[0], &src[0], len(dst), s)
	if j := quantF32Scalar(dst[i:], src[4*i:], inv); j >= 0 {
		return int64(i) + j
	}
	return -1
}

// quantF32Scalar is quantBF16Scalar for float32 values.
func quantF32Scalar(dst, src []byte, inv float64) int64 {
	src = src[:4*len(dst)]
	bad := int64(-1)
	for i := range dst {
		u := uint32(src[4*i]) | uint32(src[4*i+1])<<8 | uint32(src[4*i+2])<<16 | uint32(src[4*i+3])<<24
		q := math.Float32bits(float32(float64(math.Float32frombits(u)) * inv))
		if a := q & 0x7FFFFFFF; a-bitsMinNorm < bitsMax-bitsMinNorm {
			dst[i] = byte((a+0x7FFFF+(a>>20)&1)>>20 - 120<<3 | q>>24&0x80)
			continue
		}
		if u&0x7FFFFFFF >= bitsInf && bad < 0 {
			bad = int64(i)
		}
		dst[i] = Encode(math.Float32frombits(q))
	}
	return bad
}

// The bfloat16 table of a block of scale s maps a magnitude's bits b
// (exponent and mantissa, 15 bits) in [base, base+tableLen) to its E4M3
// byte. It covers the tableBinades binades at and below the one holding
// s*512, which is above any magnitude of the block (its amax is about
// s*448); smaller magnitudes quantize to zero (below s*2^-14, far under the
// smallest E4M3 subnormal's half, 2^-10), larger ones (which the block's
// own elements never are) take the direct path.
const (
	tableBinades  = 24
	tableLen      = tableBinades << 7
	tableMinElems = 8192 // elements of a block worth building its table for (measured)
	tableCap      = 4096 // a power of two above tableLen, so that masked indices need no bounds check
)

// tableable reports whether a scale suits a table: positive, finite, and
// with s*512 a normal float32.
func tableable(s float32) bool {
	return s >= 0x1p-126 && s <= 0x1p100
}

// quantBF16Table is quantBF16 through a block's table.
func quantBF16Table(dst, src []byte, t *[tableCap]byte, base int32, inv float64) int64 {
	src = src[:2*len(dst)]
	bad := int64(-1)
	for i := range dst {
		u := uint16(src[2*i]) | uint16(src[2*i+1])<<8
		sign := byte(u>>8) & 0x80
		k := uint32(int32(u&0x7FFF) - base)
		if k < tableLen {
			dst[i] = t[k&(tableCap-1)] | sign
			continue
		}
		if int32(k) < 0 { // below the table: zero
			dst[i] = sign
			continue
		}
		if u&0x7FFF >= 0x7F80 && bad < 0 {
			bad = int64(i)
		}
		dst[i] = Encode(float32(float64(bf16(u)) * inv))
	}
	return bad
}

// buildTable fills t for scale s (tableable) and returns its base.
func buildTable(t *[tableCap]byte, s float32) int32 {
	top := int32(math.Float32bits(s*512) >> 23) // 1..227
	lowE := top - (tableBinades - 1)
	inv := 1 / float64(s)
	if lowE < 1 {
		// The table reaches subnormal bfloat16 values: compute every
		// entry directly.
		for k := range tableLen {
			t[k] = Encode(float32(float64(bf16(uint16(k))) * inv))
		}
		return 0
	}
	// Quotients of the top binade, then every lower binade's by exact
	// scaling by powers of two (all stay normal float32s: the top
	// binade's quotients exceed 256). Where a quotient is in E4M3's normal
	// range, halving it takes 8 (one exponent step) off its code, so only
	// the first such entry, the clamped ones and the subnormal ones need
	// Encode.
	for m := range 128 {
		q := float32(float64(bf16(uint16(top)<<7|uint16(m))) * inv)
		var c byte
		normal := false
		for j := range tableBinades {
			k := (tableBinades-1-j)<<7 | m
			switch {
			case q < 0x1p-6:
				c, normal = Encode(q), false
			case normal:
				c -= 8
			default:
				c, normal = Encode(q), q < Max
			}
			t[k] = c
			q *= 0.5
		}
	}
	return lowE << 7
}

// tables caches one table per block column of the region being packed.
type tables struct {
	t    []*[tableCap]byte
	tag  []int64 // window index of the block whose table the slot holds; -1 none
	base []int32
	inv  []float64
}

var tablePool = sync.Pool{New: func() any { return new(tables) }}

// reset prepares n empty slots, keeping the tables already allocated.
func (ts *tables) reset(n int64) {
	for int64(len(ts.t)) < n {
		ts.t = append(ts.t, nil)
		ts.tag = append(ts.tag, -1)
		ts.base = append(ts.base, 0)
		ts.inv = append(ts.inv, 0)
	}
	for i := range ts.tag {
		ts.tag[i] = -1
	}
}

// get returns slot's table for block win of scale s, building it if the
// slot holds another block's.
func (ts *tables) get(slot, win int64, s float32) (*[tableCap]byte, int32, float64) {
	if ts.tag[slot] != win {
		if ts.t[slot] == nil {
			ts.t[slot] = new([tableCap]byte)
		}
		ts.base[slot] = buildTable(ts.t[slot], s)
		ts.inv[slot] = 1 / float64(s)
		ts.tag[slot] = win
	}
	return ts.t[slot], ts.base[slot], ts.inv[slot]
}
