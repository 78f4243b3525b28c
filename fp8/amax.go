package fp8

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"

	"github.com/m2n-dev/m2n/dtype"
	"github.com/m2n-dev/m2n/placement"
)

// Amax folds the amax (largest magnitude) of every block that region r
// touches into w: each such block's value becomes the larger of what it
// holds and the largest magnitude among r's elements in it. Starting from a
// zeroed window (WindowFor), one call per region a rank holds gives the
// rank's partial amaxes; combining every rank's partial amaxes of a block
// (MaxWith) gives the block's amax, and ToScales its scale.
//
// w must hold every block r touches (Blocks(r.Box)). A NaN or infinite
// element fails the call with a *NonFiniteError naming the first one in
// row-major order of r.Box; w may then be partly updated. Amax allocates
// nothing (but its error).
func (g Grid) Amax(w Window, r Region) error {
	elems, esz, err := g.check(r)
	if err != nil {
		return err
	}
	if err := g.checkWindow(w, r.Box); err != nil {
		return err
	}
	if elems == 0 {
		return nil
	}
	var wk walker
	wk.init(&g, &r, esz, &w)
	var bad *NonFiniteError
	if r.DType == dtype.BF16 {
		wk.walk(func(s segment) bool {
			m := amaxBF16(s.data)
			if m >= 0x7F80 {
				i := firstNonFinite(s.data, 2)
				bad = g.nonFinite(r.Box, s.pos+i, float64(bf16(binary.LittleEndian.Uint16(s.data[2*i:]))))
				return false
			}
			w.Values[s.win] = max(w.Values[s.win], bf16(m))
			return true
		})
	} else {
		wk.walk(func(s segment) bool {
			m := amaxF32(s.data)
			if m >= bitsInf {
				i := firstNonFinite(s.data, 4)
				bad = g.nonFinite(r.Box, s.pos+i, float64(math.Float32frombits(binary.LittleEndian.Uint32(s.data[4*i:]))))
				return false
			}
			w.Values[s.win] = max(w.Values[s.win], math.Float32frombits(m))
			return true
		})
	}
	if bad != nil {
		return bad
	}
	return nil
}

// checkWindow reports an error unless w is well formed and holds every
// block that box touches.
func (g Grid) checkWindow(w Window, box placement.Box) error {
	if err := w.check(); err != nil {
		return err
	}
	var lo, hi [placement.MaxTensorDims]int64
	g.blocks(box, lo[:g.nd], hi[:g.nd])
	if !w.contains(lo[:g.nd], hi[:g.nd]) {
		blocks := placement.Box{Lo: slices.Clone(lo[:g.nd]), Hi: slices.Clone(hi[:g.nd])}
		return fmt.Errorf("fp8: window over blocks %v does not hold blocks %v, which region %v touches", w.Blocks, blocks, box)
	}
	return nil
}

// amaxBF16 returns the largest magnitude, as bits, of the bfloat16 values
// in b. Magnitudes of finite floats order as their bits; 0x7F80 and above
// are infinities and NaNs.
func amaxBF16(b []byte) uint16 {
	var m0, m1, m2, m3 uint16
	i := 0
	if n := len(b) / 2 &^ 31; useAVX2 && n > 0 {
		m0 = amaxBF16AVX2(&b[0], n)
		i = 2 * n
	}
	for ; i+8 <= len(b); i += 8 {
		w := binary.LittleEndian.Uint64(b[i:])
		m0 = max(m0, uint16(w)&0x7FFF)
		m1 = max(m1, uint16(w>>16)&0x7FFF)
		m2 = max(m2, uint16(w>>32)&0x7FFF)
		m3 = max(m3, uint16(w>>48)&0x7FFF)
	}
	for ; i+2 <= len(b); i += 2 {
		m0 = max(m0, binary.LittleEndian.Uint16(b[i:])&0x7FFF)
	}
	return max(m0, m1, m2, m3)
}

// amaxF32 is amaxBF16 for float32 values.
func amaxF32(b []byte) uint32 {
	var m0, m1 uint32
	i := 0
	if n := len(b) / 4 &^ 15; useAVX2 && n > 0 {
		m0 = amaxF32AVX2(&b[0], n)
		i = 4 * n
	}
	for ; i+8 <= len(b); i += 8 {
		w := binary.LittleEndian.Uint64(b[i:])
		m0 = max(m0, uint32(w)&0x7FFFFFFF)
		m1 = max(m1, uint32(w>>32)&0x7FFFFFFF)
	}
	for ; i+4 <= len(b); i += 4 {
		m0 = max(m0, binary.LittleEndian.Uint32(b[i:])&0x7FFFFFFF)
	}
	return max(m0, m1)
}

// firstNonFinite returns the index of the first NaN or infinity among the
// elements of esz bytes (2: bfloat16, 4: float32) in b, or -1.
func firstNonFinite(b []byte, esz int) int64 {
	for i := 0; i+esz <= len(b); i += esz {
		if esz == 2 {
			if binary.LittleEndian.Uint16(b[i:])&0x7FFF >= 0x7F80 {
				return int64(i / 2)
			}
		} else if binary.LittleEndian.Uint32(b[i:])&0x7FFFFFFF >= bitsInf {
			return int64(i / 4)
		}
	}
	return -1
}

// CheckFinite returns a *NonFiniteError naming the first NaN or infinity of
// region r in row-major order of r.Box, or nil: for callers that gathered
// amaxes elsewhere (a GPU kernel) and saw a non-finite one.
func (g Grid) CheckFinite(r Region) error {
	elems, esz, err := g.check(r)
	if err != nil || elems == 0 {
		return err
	}
	all := Window{Blocks: g.All()}
	var wk walker
	wk.init(&g, &r, esz, &all)
	var bad *NonFiniteError
	wk.walk(func(s segment) bool {
		i := firstNonFinite(s.data, int(esz))
		if i < 0 {
			return true
		}
		bad = g.nonFinite(r.Box, s.pos+i, valueAt(s.data, esz, i))
		return false
	})
	if bad != nil {
		return bad
	}
	return nil
}

// valueAt returns element i of b, bf16 (esz 2) or float32 values.
func valueAt(b []byte, esz, i int64) float64 {
	if esz == 2 {
		return float64(bf16(binary.LittleEndian.Uint16(b[2*i:])))
	}
	return float64(math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:])))
}
