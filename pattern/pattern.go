package pattern

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"math"
	"math/bits"
	"slices"

	"github.com/m2n-dev/m2n/dtype"
	"github.com/m2n-dev/m2n/fp8"
	"github.com/m2n-dev/m2n/placement"
	"github.com/m2n-dev/m2n/strided"
)

// Poison fills destination buffers before a checked run.
const Poison = 0xA5

// Byte returns byte k of the pattern of global element g of the tensor
// numbered seed: a mix of g and seed, so that every element differs from
// its neighbours and tensors with different seeds hold different bytes.
func Byte(g int64, k int, seed uint64) byte {
	x := uint64(g)*0x9E3779B97F4A7C15 + 0x632BE59BD9B4E019 + seed*0xD6E8FEB86659FD93
	x ^= x >> 29
	x *= 0xBF58476D1CE4E5B9
	x ^= x >> 32
	return byte(x >> (8 * (k % 8)))
}

// rows calls fn for every innermost row of rank's part of l: the global
// linear index of its first element, its byte offset in the buffer the
// view v places the part in, and its length in elements. It checks that
// buf is large enough (exactly the part's size for the default view).
func rows(l placement.Layout, rank int, buf []byte, v placement.View, fn func(global, off, n int64)) error {
	box, ok := l.RankBox(rank)
	if !ok || box.Empty() {
		return nil
	}
	elem := l.ElemSize()
	shape := box.Shape()
	if err := v.Validate(shape); err != nil {
		return fmt.Errorf("rank %d: %w", rank, err)
	}
	ext, err := v.Extent(shape)
	if err != nil {
		return fmt.Errorf("rank %d: %w", rank, err)
	}
	if n := int64(len(buf)); n < ext*elem || (v.Dense() && n != ext*elem) {
		return fmt.Errorf("rank %d: a buffer of %d bytes for a part that needs %d", rank, n, ext*elem)
	}
	st := v.ResolvedStrides(shape)
	gshape := l.Shape()
	nd := len(gshape)
	if nd == 0 {
		fn(0, v.Offset*elem, 1)
		return nil
	}
	eachRow(box, gshape, func(g int64, idx []int64) {
		off := v.Offset
		for d := range nd {
			off += (idx[d] - box.Lo[d]) * st[d]
		}
		fn(g, off*elem, shape[nd-1])
	})
	return nil
}

// eachRow calls fn for every innermost row of a non-empty box of a tensor
// of shape gshape (at least one dim), in row-major order: the global
// linear index of the row's first element and its index (fn must not keep
// it).
func eachRow(box placement.Box, gshape []int64, fn func(g int64, idx []int64)) {
	nd := len(gshape)
	idx := append([]int64(nil), box.Lo...)
	for {
		g := int64(0)
		for d := range nd {
			g = g*gshape[d] + idx[d]
		}
		fn(g, idx)
		if !box.Next(idx[:nd-1]) {
			return
		}
	}
}

// Fill writes the pattern of tensor seed into rank's part of l, which the
// view v places in buf (the zero View: buf is exactly the part). Ranks
// without a part do nothing.
func Fill(l placement.Layout, rank int, seed uint64, buf []byte, v placement.View) error {
	return fill(l, rank, buf, v, func(g int64, out []byte) { putBytes(g, seed, out) })
}

// putBytes writes element g's bytes of Byte's pattern of tensor seed.
func putBytes(g int64, seed uint64, out []byte) {
	for k := range out {
		out[k] = Byte(g, k, seed)
	}
}

// elems calls elemOf for each element of a run of them in out that starts
// at global element g.
func elems(g, elem int64, out []byte, elemOf func(g int64, out []byte)) {
	for i := int64(0); i*elem < int64(len(out)); i++ {
		elemOf(g+i, out[i*elem:(i+1)*elem])
	}
}

// fill writes elemOf's bytes of every element of rank's part of l into
// buf through the view v.
func fill(l placement.Layout, rank int, buf []byte, v placement.View, elemOf func(g int64, out []byte)) error {
	elem := l.ElemSize()
	return rows(l, rank, buf, v, func(g, off, n int64) { elems(g, elem, buf[off:off+n*elem], elemOf) })
}

// PoisonPart fills rank's part of l in buf (through the view v) with Poison,
// leaving the rest of buf alone.
func PoisonPart(l placement.Layout, rank int, buf []byte, v placement.View) error {
	elem := l.ElemSize()
	return rows(l, rank, buf, v, func(_, off, n int64) {
		p := buf[off : off+n*elem]
		for i := range p {
			p[i] = Poison
		}
	})
}

// MismatchError reports the first destination element that does not hold
// the pattern.
type MismatchError struct {
	Tensor    string  // the tensor's name, when the caller gives one
	Rank      int     // the rank that holds it
	Index     []int64 // its global index
	Want, Got []byte  // its bytes
	Wrong     int64   // how many elements of the rank's part are wrong in all
}

func (e *MismatchError) Error() string {
	of := ""
	if e.Tensor != "" {
		of = fmt.Sprintf("tensor %q, ", e.Tensor)
	}
	return fmt.Sprintf("%srank %d: element %v holds 0x%s, expected 0x%s (%d wrong elements on this rank)",
		of, e.Rank, e.Index, hex.EncodeToString(e.Got), hex.EncodeToString(e.Want), e.Wrong)
}

// Check compares rank's part of l in buf (through the view v) with the
// pattern of tensor seed and returns a *MismatchError naming the first
// wrong element, or nil.
func Check(l placement.Layout, rank int, seed uint64, buf []byte, v placement.View) error {
	return check(l, rank, buf, v, func(g int64, out []byte) { putBytes(g, seed, out) })
}

// check compares every element of rank's part of l in buf (through the
// view v) with elemOf's bytes for it.
func check(l placement.Layout, rank int, buf []byte, v placement.View, elemOf func(g int64, out []byte)) error {
	elem := l.ElemSize()
	shape := l.Shape()
	var want []byte
	var first *MismatchError
	var wrong int64
	err := rows(l, rank, buf, v, func(g, off, n int64) {
		p := buf[off : off+n*elem]
		want = slices.Grow(want[:0], len(p))[:len(p)]
		elems(g, elem, want, elemOf)
		if bytes.Equal(p, want) {
			return
		}
		for i := int64(0); i < n; i++ {
			got, w := p[i*elem:(i+1)*elem], want[i*elem:(i+1)*elem]
			if bytes.Equal(got, w) {
				continue
			}
			wrong++
			if first == nil {
				first = &MismatchError{Rank: rank, Index: unravel(shape, g+i), Want: slices.Clone(w), Got: slices.Clone(got)}
			}
		}
	})
	if err != nil {
		return err
	}
	if first != nil {
		first.Wrong = wrong
		return first
	}
	return nil
}

// unravel turns a global linear index into a row-major index of shape.
func unravel(shape []int64, g int64) []int64 {
	idx := make([]int64, len(shape))
	for d := len(shape) - 1; d >= 0; d-- {
		if shape[d] > 0 {
			idx[d] = g % shape[d]
			g /= shape[d]
		}
	}
	return idx
}

// The float pattern: the finite test values of a bf16 or f32 tensor, for tensors
// that convert to FP8 (Byte's pattern holds NaNs and infinities, which the
// quantizer refuses). Element g of the tensor numbered seed gets a random
// sign and mantissa and an exponent from 2^-16 to 2^8 drawn geometrically
// (each binade half as likely as the one below it, from the top): the
// largest magnitude of a block then sits in a binade only one or two of
// its elements reach, with a random mantissa, so neighbouring blocks get
// different scales, and most elements quantize to small or subnormal E4M3
// values. One element in 256 is a zero. Other dtypes take Byte's pattern.

func mix(x uint64) uint64 {
	x ^= x >> 29
	x *= 0xBF58476D1CE4E5B9
	x ^= x >> 32
	x *= 0x94D049BB133111EB
	x ^= x >> 31
	return x
}

// floatBits returns the bits of the finite value of element g: a sign, a
// biased float32 exponent and 23 mantissa bits (bf16 keeps the top 7).
func floatBits(g int64, seed uint64) (sign, exp, mant uint32, zero bool) {
	x := mix(uint64(g)*0x9E3779B97F4A7C15 + seed*0xD6E8FEB86659FD93 + 0x632BE59BD9B4E019)
	// bits 0-23 draw the binade, 25-47 the mantissa, 48-55 a zero, 63 the
	// sign.
	j := uint32(bits.TrailingZeros64(x | 1<<24))
	return uint32(x >> 63), 111 + j, uint32(x>>25) & 0x7FFFFF, (x>>48)&0xFF == 0
}

// floatBF16 returns the bfloat16 bits of element g of tensor seed.
func floatBF16(g int64, seed uint64) uint16 {
	sign, exp, mant, zero := floatBits(g, seed)
	if zero {
		return uint16(sign << 15)
	}
	return uint16(sign<<15 | exp<<7 | mant>>16)
}

// floatF32 returns the float32 bits of element g of tensor seed.
func floatF32(g int64, seed uint64) uint32 {
	sign, exp, mant, zero := floatBits(g, seed)
	if zero {
		return sign << 31
	}
	return sign<<31 | exp<<23 | mant
}

// putFloat writes the bytes of element g of tensor seed in dtype dt into
// out (len(out) = dt.Size()): finite values for bf16 and f32, Byte's
// pattern for other dtypes.
func putFloat(dt dtype.DType, g int64, seed uint64, out []byte) {
	switch dt {
	case dtype.BF16:
		v := floatBF16(g, seed)
		out[0], out[1] = byte(v), byte(v>>8)
	case dtype.F32:
		v := floatF32(g, seed)
		out[0], out[1], out[2], out[3] = byte(v), byte(v>>8), byte(v>>16), byte(v>>24)
	default:
		putBytes(g, seed, out)
	}
}

// FillFloats is Fill with finite values (the float pattern above) for bf16 and f32
// layouts; other dtypes get Fill's bytes.
func FillFloats(l placement.Layout, rank int, seed uint64, buf []byte, v placement.View) error {
	dt := l.DType()
	return fill(l, rank, buf, v, func(g int64, out []byte) { putFloat(dt, g, seed, out) })
}

// CheckFloats is Check against FillFloats' values.
func CheckFloats(l placement.Layout, rank int, seed uint64, buf []byte, v placement.View) error {
	dt := l.DType()
	return check(l, rank, buf, v, func(g int64, out []byte) { putFloat(dt, g, seed, out) })
}

// floatsBox returns the elements of box of tensor seed (a tensor of the
// given global shape in dtype dt, filled as FillFloats fills it), dense
// and row-major.
func floatsBox(dt dtype.DType, shape []int64, box placement.Box, seed uint64) []byte {
	elem := int64(dt.Size())
	out := make([]byte, box.Elems()*elem)
	if box.Empty() {
		return out
	}
	nd := len(shape)
	n := box.Hi[nd-1] - box.Lo[nd-1]
	pos := int64(0)
	eachRow(box, shape, func(g int64, _ []int64) {
		for i := int64(0); i < n; i++ {
			putFloat(dt, g+i, seed, out[pos:pos+elem])
			pos += elem
		}
	})
	return out
}

// fp8Want returns what a destination holding box of an FP8 tensor must
// receive when the source, a tensor of the given shape in dtype src (bf16
// or f32), holds FillFloats' values of tensor seed and converts with mode:
// the E4M3 bytes of box, dense and row-major, and the scales of the blocks
// box touches (fp8.Grid.Blocks), both those of quantizing the whole tensor
// at once (fp8.Quantize). It reads only the elements of those blocks.
func fp8Want(src dtype.DType, shape []int64, mode fp8.Mode, box placement.Box, seed uint64) ([]byte, fp8.Window, error) {
	return fp8WantChanged(src, shape, mode, box, seed, 0, 0)
}

// fp8WantChanged is fp8Want of the source after updates 1 to steps of
// Change, each of fraction frac.
func fp8WantChanged(src dtype.DType, shape []int64, mode fp8.Mode, box placement.Box, seed, steps uint64, frac float64) ([]byte, fp8.Window, error) {
	g, err := fp8.NewGrid(shape, mode)
	if err != nil {
		return nil, fp8.Window{}, err
	}
	blocks, err := g.Blocks(box)
	if err != nil {
		return nil, fp8.Window{}, err
	}
	w, err := g.NewWindow(blocks)
	if err != nil {
		return nil, fp8.Window{}, err
	}
	if box.Empty() {
		return nil, w, nil
	}
	cover, err := g.BlockBox(blocks)
	if err != nil {
		return nil, fp8.Window{}, err
	}
	data := floatsBox(src, shape, cover, seed)
	for st := uint64(1); st <= steps; st++ {
		changeBox(shape, cover, int64(src.Size()), seed, st, frac, data)
	}
	if err := g.Amax(w, fp8.Dense(src, data, cover)); err != nil {
		return nil, fp8.Window{}, err
	}
	if err := w.ToScales(); err != nil {
		return nil, fp8.Window{}, err
	}
	want := make([]byte, box.Elems())
	r := fp8.Region{DType: src, Data: data, At: subBox(cover, box, int64(src.Size())), Box: box}
	if err := g.Pack(want, r, w); err != nil {
		return nil, fp8.Window{}, err
	}
	return want, w, nil
}

// subBox describes where the elements of sub sit in a dense row-major
// buffer holding the box outer (elem bytes each): one run per innermost
// row of sub.
func subBox(outer, sub placement.Box, elem int64) strided.Desc {
	nd := len(outer.Lo)
	stride := make([]int64, nd)
	acc := elem
	off := int64(0)
	for d := nd - 1; d >= 0; d-- {
		stride[d] = acc
		off += (sub.Lo[d] - outer.Lo[d]) * acc
		acc *= outer.Hi[d] - outer.Lo[d]
	}
	at := strided.Desc{Offset: off, Run: (sub.Hi[nd-1] - sub.Lo[nd-1]) * elem}
	for d := 0; d < nd-1; d++ {
		at.Count = append(at.Count, sub.Hi[d]-sub.Lo[d])
		at.Stride = append(at.Stride, stride[d])
	}
	return at
}

// ScaleMismatchError reports the first wrong scale of a destination's
// scale tensor.
type ScaleMismatchError struct {
	Tensor    string
	Rank      int
	Block     []int64 // block coordinates (fp8.Grid)
	Want, Got float32
	Wrong     int64 // wrong scales on this rank in all
	Why       string
}

func (e *ScaleMismatchError) Error() string {
	of := ""
	if e.Tensor != "" {
		of = fmt.Sprintf("tensor %q, ", e.Tensor)
	}
	if e.Why != "" {
		return fmt.Sprintf("%srank %d: scale tensor %s", of, e.Rank, e.Why)
	}
	return fmt.Sprintf("%srank %d: the scale of block %v is %v (bits %#08x), expected %v (bits %#08x) (%d wrong scales on this rank)",
		of, e.Rank, e.Block, e.Got, math.Float32bits(e.Got), e.Want, math.Float32bits(e.Want), e.Wrong)
}

// CheckFP8 checks rank's part of an FP8 destination layout l (through the
// view v in buf) and its scale tensor (little-endian float32s over the
// blocks its box touches) against fp8Want of a src-dtype source filled by
// FillFloats with tensor seed: a *MismatchError names the first wrong
// element (its global index, the E4M3 byte expected and got), a
// *ScaleMismatchError the first wrong scale.
func CheckFP8(src dtype.DType, l placement.Layout, mode fp8.Mode, rank int, seed uint64, buf []byte, v placement.View, scales []byte) error {
	return CheckFP8Changed(src, l, mode, rank, seed, 0, 0, buf, v, scales)
}

// CheckFP8Changed is CheckFP8 against the source after updates 1 to
// steps of Change, each of fraction frac (a delta sync's FP8
// destinations: CheckChanged's counterpart).
func CheckFP8Changed(src dtype.DType, l placement.Layout, mode fp8.Mode, rank int, seed, steps uint64, frac float64, buf []byte, v placement.View, scales []byte) error {
	if !(frac >= 0 && frac <= 1) {
		return fmt.Errorf("pattern: change fraction %v outside [0, 1]", frac)
	}
	box, ok := l.RankBox(rank)
	if !ok {
		return nil
	}
	want, w, err := fp8WantChanged(src, l.Shape(), mode, box, seed, steps, frac)
	if err != nil {
		return fmt.Errorf("rank %d: %w", rank, err)
	}
	shape := l.Shape()
	var first *MismatchError
	var wrong int64
	pos := int64(0)
	err = rows(l, rank, buf, v, func(g, off, n int64) {
		for i := int64(0); i < n; i++ {
			if buf[off+i] != want[pos+i] {
				wrong++
				if first == nil {
					first = &MismatchError{Rank: rank, Index: unravel(shape, g+i), Want: []byte{want[pos+i]}, Got: []byte{buf[off+i]}}
				}
			}
		}
		pos += n
	})
	if err != nil {
		return err
	}
	if first != nil {
		first.Wrong = wrong
		return first
	}
	if int64(len(scales)) != 4*int64(len(w.Values)) {
		return &ScaleMismatchError{Rank: rank, Why: fmt.Sprintf("holds %d bytes, expected %d (%d blocks %v)", len(scales), 4*len(w.Values), len(w.Values), w.Blocks)}
	}
	var bad *ScaleMismatchError
	for i, x := range w.Values {
		got := math.Float32frombits(uint32(scales[4*i]) | uint32(scales[4*i+1])<<8 | uint32(scales[4*i+2])<<16 | uint32(scales[4*i+3])<<24)
		if math.Float32bits(got) == math.Float32bits(x) {
			continue
		}
		if bad == nil {
			bad = &ScaleMismatchError{Rank: rank, Block: unravel(w.Blocks.Shape(), int64(i)), Want: x, Got: got}
			for d := range bad.Block {
				bad.Block[d] += w.Blocks.Lo[d]
			}
		}
		bad.Wrong++
	}
	if bad != nil {
		return bad
	}
	return nil
}

// Float returns element g of tensor seed as FillFloats fills a bf16 or f32
// tensor, as a float32 (exact: a bf16 value widens without rounding); 0
// for other dtypes.
func Float(dt dtype.DType, g int64, seed uint64) float32 {
	switch dt {
	case dtype.BF16:
		return math.Float32frombits(uint32(floatBF16(g, seed)) << 16)
	case dtype.F32:
		return math.Float32frombits(floatF32(g, seed))
	}
	return 0
}

// WantFP8 returns what CheckFP8 expects of the box of an FP8 tensor of
// shape converted from FillFloats' src values with seed: its E4M3 bytes,
// row-major over box, and the scales of the blocks it touches (the bytes
// and scales of quantizing the whole tensor at once).
func WantFP8(src dtype.DType, shape []int64, mode fp8.Mode, box placement.Box, seed uint64) ([]byte, fp8.Window, error) {
	return fp8Want(src, shape, mode, box, seed)
}

// CheckFunc is Check against any values: want writes the bytes that
// element g (its global linear index in l) must hold into out (len(out)
// is l's element size). Callers that transform the pattern (a merge of
// adapters into weights, say) check with it.
func CheckFunc(l placement.Layout, rank int, buf []byte, v placement.View, want func(g int64, out []byte)) error {
	return check(l, rank, buf, v, want)
}
