package lora

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"

	"github.com/m2n-dev/m2n/dtype"
	"github.com/m2n-dev/m2n/fp8"
	"github.com/m2n-dev/m2n/placement"
)

// fp8Base is what a Merger keeps of an FP8 weight part: its E4M3 bytes
// and its blocks' scales as the first Merge after NewMerger or Reset found
// them (what the last full sync delivered), the base every later Merge
// re-quantizes from. q is in row-major order of the part's box.
type fp8Base struct {
	box placement.Box
	q   []byte
	s   []float32
}

// mergeFP8 is Merge for a weight the generator holds in float8_e4m3fn
// (w.Layout's dtype, w.Scales its part's float32 scales, w.Mode their
// grid):
//
//	W = Q(D(Wq0) + s x (B @ A))
//
// D dequantizes each element of the base, Decode(q) x its block's scale
// (one float32 multiply, fp8's rule); the adapter product of the latest
// step is added in float32 exactly as the bf16 merge adds it (k in order,
// each product rounded to float32); Q re-quantizes every block the part
// holds with m2n's own quantizer (fp8.Grid.Amax, Window.ToScales,
// Grid.Pack: the block's amax, its scale amax x float32(1/448), each
// element a true float32 division rounded to E4M3, bit for bit torch's),
// writing the bytes and the scales in place.
//
// The base Wq0 is the FP8 weight and scales the first merge found (what
// the last full sync delivered), kept by the Merger, and not the previous
// step's merged FP8 weight: re-quantizing that each step (adding the new
// product and taking the previous one away, as the bf16 merge does) would
// round every element to E4M3's 3 mantissa bits again at every step, with
// a scale that moves with the adapters, so the weight would drift from
// the merge of its base by a rounding step a step, growing with the step
// count. From a fixed base, every step's weight depends only on the base
// and the latest adapters: the same after 1 step or 1000, the same on
// every replica, and what a single re-quantization of the merged weight
// gives. (The generator never holds the bf16 weight, which the full sync
// quantized in flight, so D(Wq0) stands for it: the one rounding it adds
// is the full sync's own.) It costs a copy of the part's FP8 bytes and
// scales per adapted weight (1 byte an element plus 4 a block, the FP8
// weights' own size again), until Reset.
//
// Every block the part touches must be whole on the rank (a block's scale
// needs the amax of all its elements, and another rank holding part of
// the block would need an exchange): a part that cuts a block is refused.
func (mg *Merger) mergeFP8(name string, w, a, b Matrix, scale float64) error {
	wsegs, wr, err := w.segments()
	if err != nil {
		return fmt.Errorf("lora: weight %s: %w", name, err)
	}
	if len(wsegs) == 0 {
		return nil
	}
	box, _ := w.Layout.RankBox(w.Rank)
	g, err := fp8.NewGrid(w.Layout.Shape(), w.Mode)
	if err != nil {
		return fmt.Errorf("lora: weight %s: %w", name, err)
	}
	if err := g.WholeBlocks(box); err != nil {
		return fmt.Errorf("lora: weight %s: rank %d's FP8 part cuts scale blocks, and the merge re-quantizes whole blocks where one rank holds them: %w", name, w.Rank, err)
	}
	win, err := g.WindowFor(box)
	if err != nil {
		return fmt.Errorf("lora: weight %s: %w", name, err)
	}
	if len(w.Scales) != 4*len(win.Values) {
		return fmt.Errorf("lora: weight %s: rank %d holds %d bytes of scales, its part's %d blocks need %d", name, w.Rank, len(w.Scales), len(win.Values), 4*len(win.Values))
	}
	cur, err := product(name, wr, a, b, scale)
	if err != nil {
		return err
	}
	n := box.Elems()
	base := mg.base[name]
	if base == nil {
		base = &fp8Base{box: cloneBox(box), q: make([]byte, 0, n), s: make([]float32, len(win.Values))}
		for _, s := range wsegs {
			base.q = append(base.q, w.Buf[s.off:s.off+s.n]...)
		}
		if err := win.ReadBits(w.Scales); err != nil {
			return fmt.Errorf("lora: weight %s: %w", name, err)
		}
		copy(base.s, win.Values)
	} else if !slices.Equal(base.box.Lo, box.Lo) || !slices.Equal(base.box.Hi, box.Hi) {
		return fmt.Errorf("lora: weight %s: its FP8 part moved since the first merge (%v then %v); Reset first", name, base.box, box)
	}
	// D(Wq0) + s x (B @ A), row-major over the box: segment r is the box's
	// innermost row r.
	shape := box.Shape()
	nd := len(shape)
	rows, cols := g.BlockShape()
	acc := grow(&mg.acc, n)
	alpha := make([]float32, cur.ar.rows())
	coord, idx := make([]int64, nd), make([]int64, nd)
	pos := int64(0)
	for r, s := range wsegs {
		q := int64(r)
		for d := nd - 2; d >= 0; d-- {
			idx[d] = q%shape[d] + box.Lo[d]
			q /= shape[d]
		}
		copy(coord, idx)
		coord[nd-2] = idx[nd-2] / rows
		row := acc[pos : pos+s.n]
		for k := int64(0); k < s.n; {
			coord[nd-1] = (box.Lo[nd-1] + k) / cols
			end := min(s.n, (coord[nd-1]+1)*cols-box.Lo[nd-1])
			bi, ok := win.Index(coord)
			if !ok {
				return fmt.Errorf("lora: weight %s: no scale for block %v", name, coord)
			}
			sc := base.s[bi]
			dst, q := row[k:end], base.q[pos+k:pos+end]
			for x := range dst {
				dst[x] = decodeE4M3[q[x]] * sc
			}
			k = end
		}
		cur.add(row, s, 1, alpha)
		pos += s.n
	}
	// Q: m2n's quantizer over the box, every block whole here.
	raw := grow(&mg.raw, 4*n)
	for i, x := range acc {
		binary.LittleEndian.PutUint32(raw[4*i:], math.Float32bits(x))
	}
	reg := fp8.Dense(dtype.F32, raw, box)
	nw, err := g.WindowFor(box)
	if err != nil {
		return fmt.Errorf("lora: weight %s: %w", name, err)
	}
	if err := g.Amax(nw, reg); err != nil {
		return fmt.Errorf("lora: weight %s: the merged weight: %w", name, err)
	}
	if err := nw.ToScales(); err != nil {
		return fmt.Errorf("lora: weight %s: %w", name, err)
	}
	out := grow(&mg.out, n)
	if err := g.Pack(out, reg, nw); err != nil {
		return fmt.Errorf("lora: weight %s: %w", name, err)
	}
	pos = 0
	for _, s := range wsegs {
		copy(w.Buf[s.off:s.off+s.n], out[pos:pos+s.n])
		pos += s.n
	}
	copy(w.Scales, nw.AppendBits(nil))
	mg.base[name] = base
	return nil
}

// decodeE4M3 is fp8.Decode of every byte, bit for bit (NaNs included).
var decodeE4M3 = func() (t [256]float32) {
	for i := range t {
		t[i] = fp8.Decode(byte(i))
	}
	return t
}()

// grow returns (*buf)[:n], growing *buf where it is shorter: the merge's
// scratch, kept by the Merger from one weight to the next.
func grow[T any](buf *[]T, n int64) []T {
	if int64(cap(*buf)) < n {
		*buf = make([]T, n)
	}
	return (*buf)[:n]
}

func cloneBox(b placement.Box) placement.Box {
	return placement.Box{Lo: slices.Clone(b.Lo), Hi: slices.Clone(b.Hi)}
}
