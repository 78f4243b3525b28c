package perf

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/m2n-dev/m2n/dtype"
	"github.com/m2n-dev/m2n/fp8"
	"github.com/m2n-dev/m2n/model"
	"github.com/m2n-dev/m2n/pattern"
	"github.com/m2n-dev/m2n/session"
)

// checkLoRA checks this rank's destination weights of full after steps
// LoRA steps of LoRASync: each adapted element against the merges
// recomputed from the patterns of the base weight and of every step's
// adapters, one element at a time (lora.Merger's sum, written out again
// here as the reference), the other weights against the base; and the
// adapters against the last step's (none after 0 steps). The first wrong
// element is named with its tensor and worldRank.
func checkLoRA(full *session.Model, wb *session.ModelBuffers, ad *session.Model, ab *session.ModelBuffers, steps uint64, worldRank int) error {
	if steps > 0 {
		err := ad.EachPart(ab, model.Dst, false, func(p session.ModelPart) error {
			err := pattern.CheckFloats(p.Tensor.Dst, p.Rank, adapterSeed(p.Index, steps), p.Bytes, p.Part.View)
			if err != nil {
				nameWorldRank(err, p.Tensor.Name, worldRank)
			}
			return err
		})
		if err != nil {
			return err
		}
	}
	byBase := map[string]*adapterRef{}
	for i, t := range ad.Layouts.Model.Tensors {
		r := byBase[t.Adapter.Base]
		if r == nil {
			r = &adapterRef{rank: t.Adapter.Rank, scale: float32(t.Adapter.Scale), steps: steps}
			byBase[t.Adapter.Base] = r
		}
		if t.Adapter.B {
			r.b, r.dt = i, t.DType
		} else {
			r.a, r.in = i, t.Shape[1]
		}
	}
	return full.EachPart(wb, model.Dst, false, func(p session.ModelPart) error {
		t := p.Tensor
		ref := byBase[t.Whole().Name]
		var err error
		switch {
		case t.Scale != 0 && (ref == nil || steps == 0):
			err = pattern.CheckFP8(t.Src.DType(), t.Dst, t.Scale, p.Rank, uint64(p.Index), p.Bytes, p.Part.View, p.Scale)
		case t.Scale != 0:
			err = ref.checkFP8(p)
		case ref == nil:
			err = pattern.CheckFloats(t.Dst, p.Rank, uint64(p.Index), p.Bytes, p.Part.View)
		default:
			err = pattern.CheckFunc(t.Dst, p.Rank, p.Bytes, p.Part.View, ref.want(t, uint64(p.Index)))
		}
		if err != nil {
			nameWorldRank(err, t.Name, worldRank)
		}
		return err
	})
}

// adapterRef recomputes merged weights: the adapter's A and B (indices in
// the adapter model, their dtype), its rank and scale, the steps merged.
type adapterRef struct {
	a, b  int
	dt    dtype.DType
	in    int64
	rank  int64
	scale float32
	steps uint64
}

// want returns the bytes that element g of weight part t (seed its
// pattern's) holds after the merges: w = round(f32(w) + sum_k
// f32(f32(s*B[i,k])*A[k,j]) - the previous step's, the same sum), step
// by step, B's rows and A's columns drawn once each.
func (r *adapterRef) want(t *model.TensorLayout, seed uint64) func(g int64, out []byte) {
	whole := t.Whole().LayoutShape
	rows, cols := map[int64][]float32{}, map[int64][]float32{}
	T, R := int64(r.steps), r.rank
	bRow := func(i int64) []float32 { // s*B_t[i,k] for t = 1..T, k < R
		if v, ok := rows[i]; ok {
			return v
		}
		v := make([]float32, T*R)
		for s := range T {
			for k := range R {
				v[s*R+k] = r.scale * pattern.Float(r.dt, i*R+k, adapterSeed(r.b, uint64(s+1)))
			}
		}
		rows[i] = v
		return v
	}
	aCol := func(j int64) []float32 {
		if v, ok := cols[j]; ok {
			return v
		}
		v := make([]float32, T*R)
		for s := range T {
			for k := range R {
				v[s*R+k] = pattern.Float(r.dt, k*r.in+j, adapterSeed(r.a, uint64(s+1)))
			}
		}
		cols[j] = v
		return v
	}
	dt := t.Dst.DType()
	return func(g int64, out []byte) {
		w := pattern.Float(dt, g, seed)
		G := wholeIndex(t, whole, g)
		b, a := bRow(G/r.in), aCol(G%r.in)
		for s := range T {
			acc := w
			for k := range R {
				acc += float32(b[s*R+k] * a[s*R+k])
			}
			if s > 0 {
				for k := range R {
					acc += float32(-b[(s-1)*R+k] * a[(s-1)*R+k])
				}
			}
			w = rounded(dt, acc)
		}
		switch dt {
		case dtype.BF16:
			binary.LittleEndian.PutUint16(out, uint16(math.Float32bits(w)>>16))
		default:
			binary.LittleEndian.PutUint32(out, math.Float32bits(w))
		}
	}
}

// wholeIndex turns element g of piece t into its linear index in the
// whole tensor's layout shape (g itself for a whole tensor).
func wholeIndex(t *model.TensorLayout, whole []int64, g int64) int64 {
	if t.Origin == nil {
		return g
	}
	shape := t.LayoutShape
	idx := make([]int64, len(shape))
	for d := len(shape) - 1; d >= 0; d-- {
		idx[d] = g%shape[d] + t.Origin[d]
		g /= shape[d]
	}
	G := int64(0)
	for d := range whole {
		G = G*whole[d] + idx[d]
	}
	return G
}

// rounded is x stored in dtype dt and read back: bf16 rounds to nearest
// even.
func rounded(dt dtype.DType, x float32) float32 {
	if dt != dtype.BF16 {
		return x
	}
	u := math.Float32bits(x)
	if x != x {
		return math.Float32frombits((u | 0x400000) &^ 0xFFFF)
	}
	return math.Float32frombits((u + 0x7FFF + (u>>16)&1) &^ 0xFFFF)
}

// checkFP8 checks this rank's part of an FP8 weight after r.steps merges
// (lora.Merger's FP8 merge): every element is Q(D(Wq0) + s x (B_T @ A_T))
// of its block, written out here one element at a time: the base Wq0 is
// what the full sync delivered (pattern.WantFP8 of the weight's source
// pattern), dequantized as Decode(q) x its block's scale, plus the last
// step's product in float32 (k in order, each product rounded), then each
// block's amax, fp8.ScaleOf and fp8.QuantizeValue; the scales as well.
func (r *adapterRef) checkFP8(p session.ModelPart) error {
	t := p.Tensor
	box, ok := t.Dst.RankBox(p.Rank)
	if !ok || box.Empty() {
		return nil
	}
	shape := t.Dst.Shape()
	q0, w0, err := pattern.WantFP8(t.Src.DType(), shape, t.Scale, box, uint64(p.Index))
	if err != nil {
		return err
	}
	g, err := fp8.NewGrid(shape, t.Scale)
	if err != nil {
		return err
	}
	br, bc := g.BlockShape()
	whole := t.Whole().LayoutShape
	nd, bs := len(shape), box.Shape()
	n := box.Elems()
	acc := make([]float32, n)
	blk := make([]int, n)
	amax := make([]float32, len(w0.Values))
	rows, cols := map[int64][]float32{}, map[int64][]float32{}
	T, R := int64(r.steps), r.rank
	idx, coord := make([]int64, nd), make([]int64, nd)
	for e := range n {
		q := e
		for d := nd - 1; d >= 0; d-- {
			idx[d] = q%bs[d] + box.Lo[d]
			q /= bs[d]
		}
		gi := int64(0)
		for d := range nd {
			gi = gi*shape[d] + idx[d]
		}
		copy(coord, idx)
		coord[nd-2], coord[nd-1] = idx[nd-2]/br, idx[nd-1]/bc
		bi, ok := w0.Index(coord)
		if !ok {
			return fmt.Errorf("rank %d: element %v lies in no block of its window", p.Rank, idx)
		}
		G := wholeIndex(t, whole, gi)
		i, j := G/r.in, G%r.in
		b, ok := rows[i]
		if !ok {
			b = make([]float32, R)
			for k := range R {
				b[k] = r.scale * pattern.Float(r.dt, i*R+k, adapterSeed(r.b, uint64(T)))
			}
			rows[i] = b
		}
		a, ok := cols[j]
		if !ok {
			a = make([]float32, R)
			for k := range R {
				a[k] = pattern.Float(r.dt, k*r.in+j, adapterSeed(r.a, uint64(T)))
			}
			cols[j] = a
		}
		x := fp8.Decode(q0[e]) * w0.Values[bi]
		for k := range R {
			x += float32(b[k] * a[k])
		}
		acc[e], blk[e] = x, bi
		amax[bi] = max(amax[bi], float32(math.Abs(float64(x))))
	}
	want := make([]byte, n)
	for e, x := range acc {
		want[e] = fp8.QuantizeValue(x, fp8.ScaleOf(amax[blk[e]]))
	}
	err = pattern.CheckFunc(t.Dst, p.Rank, p.Bytes, p.Part.View, func(gi int64, out []byte) {
		e := int64(0)
		for d := range nd {
			e = e*bs[d] + (gi/stride(shape, d))%shape[d] - box.Lo[d]
		}
		out[0] = want[e]
	})
	if err != nil {
		return err
	}
	if len(p.Scale) != 4*len(amax) {
		return fmt.Errorf("rank %d: %d bytes of scales, want %d", p.Rank, len(p.Scale), 4*len(amax))
	}
	for bi, a := range amax {
		got := math.Float32frombits(binary.LittleEndian.Uint32(p.Scale[4*bi:]))
		if s := fp8.ScaleOf(a); math.Float32bits(got) != math.Float32bits(s) {
			return fmt.Errorf("rank %d: scale %d of its window %v holds %v, expected %v", p.Rank, bi, w0.Blocks, got, s)
		}
	}
	return nil
}

// stride is the row-major stride of dim d of shape.
func stride(shape []int64, d int) int64 {
	s := int64(1)
	for _, n := range shape[d+1:] {
		s *= n
	}
	return s
}
