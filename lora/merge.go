package lora

import (
	"fmt"

	"github.com/m2n-dev/m2n/dtype"
)

// Merger merges one rank's LoRA adapters into its parts of the weights
// they adapt, step after step. The weight a generator serves is W0 +
// scale x (B @ A) for the adapters of the latest step, while its buffers
// hold the weight with the previous step's adapters merged, so each Merge
// adds the new product and takes the previous one away, per element in
// one float32 sum rounded once to the weight's dtype:
//
//	w = round(f32(w) + sum_k f32(s*B[i,k]) * A[k,j] - sum_k f32(s*B'[i,k]) * A'[k,j])
//
// (k in order, each product rounded to float32 before it is added, s the
// scale in float32, B' and A' the matrices of the previous Merge of the
// weight: none before the first). The Merger keeps this rank's parts of
// the previous adapters, in float32 (rank x its columns of A plus its rows
// of B x rank per weight: a fraction of a percent of the weights at rank
// 16). It is not safe for concurrent use.
//
// A weight in float8_e4m3fn (Matrix.Scales) is merged otherwise, from a
// base the Merger keeps rather than from the previous step's weight, and
// re-quantized block by block with fp8's rule (mergeFP8 says why):
//
//	W = Q(D(Wq0) + s x (B @ A))
type Merger struct {
	prev map[string]*merged
	base map[string]*fp8Base
	// the FP8 merge's scratch (fp8.go): the merged weight in float32, its
	// bytes for the quantizer, the codes
	acc      []float32
	raw, out []byte
}

// merged is what a Merger keeps of the adapters it last merged into one
// weight: this rank's parts of A and B in float32, with their rectangles,
// and the scale.
type merged struct {
	a, b   []float32
	ar, br rect
	scale  float32
}

// NewMerger returns a Merger that has merged nothing.
func NewMerger() *Merger {
	return &Merger{prev: map[string]*merged{}, base: map[string]*fp8Base{}}
}

// Reset forgets every adapter merged so far: the next Merge of each weight
// adds its product to the weight as it is (after the generator reloaded
// its base weights, say; an FP8 weight's next Merge takes the weight as
// it is as its new base).
func (mg *Merger) Reset() {
	clear(mg.prev)
	clear(mg.base)
}

// Merge merges the adapter (a, b) of weight name into rank's part w of the
// weight, in place, as the Merger's doc says. The part of B must hold
// every row of w's part, and the part of A every column, with all of the
// adapter's rank: the layouts of model.Adapters on the generator give
// every rank what its weight part needs (a part that misses rows or
// columns is an error naming them). Nothing is written unless the whole
// merge can be done.
func (mg *Merger) Merge(name string, w, a, b Matrix, scale float64) error {
	if w.Layout.DType() == dtype.FP8E4M3 {
		return mg.mergeFP8(name, w, a, b, scale)
	}
	wsegs, wr, err := w.segments()
	if err != nil {
		return fmt.Errorf("lora: weight %s: %w", name, err)
	}
	if len(wsegs) == 0 {
		return nil
	}
	cur, err := product(name, wr, a, b, scale)
	if err != nil {
		return err
	}
	prev := mg.prev[name]
	if prev != nil && (prev.ar != cur.ar || prev.br != cur.br) {
		return fmt.Errorf("lora: weight %s: its adapter parts changed shape since the last merge (A %v then %v, B %v then %v); Reset first", name, prev.ar, cur.ar, prev.br, cur.br)
	}
	dt := w.Layout.DType()
	var acc []float32
	alpha := make([]float32, cur.ar.rows())
	for _, s := range wsegs {
		if int64(cap(acc)) < s.n {
			acc = make([]float32, s.n)
		}
		acc = acc[:s.n]
		if err := toFloat(dt, w.Buf[s.off:], acc); err != nil {
			return fmt.Errorf("lora: weight %s: %w", name, err)
		}
		cur.add(acc, s, 1, alpha)
		if prev != nil {
			prev.add(acc, s, -1, alpha)
		}
		fromFloat(dt, acc, w.Buf[s.off:])
	}
	mg.prev[name] = cur
	return nil
}

// covers checks that the adapter parts hold every row and column of a
// weight part over rect wr, and agree on the rank.
func (m *merged) covers(wr rect) error {
	r := m.ar.rows()
	switch {
	case m.ar.i0 != 0 || m.br.j0 != 0 || m.br.cols() != r:
		return fmt.Errorf("its A part holds rank rows [%d, %d) and its B part rank columns [%d, %d): every rank needs the whole rank of both", m.ar.i0, m.ar.i1, m.br.j0, m.br.j1)
	case m.br.i0 > wr.i0 || m.br.i1 < wr.i1:
		return fmt.Errorf("its B part holds rows [%d, %d), the weight part rows [%d, %d)", m.br.i0, m.br.i1, wr.i0, wr.i1)
	case m.ar.j0 > wr.j0 || m.ar.j1 < wr.j1:
		return fmt.Errorf("its A part holds columns [%d, %d), the weight part columns [%d, %d)", m.ar.j0, m.ar.j1, wr.j0, wr.j1)
	}
	return nil
}

// add adds sign x scale x (B @ A) over segment s to acc, k in order;
// alpha is scratch of the adapter's rank.
func (m *merged) add(acc []float32, s segment, sign float32, alpha []float32) {
	r := m.ar.rows()
	brow := m.b[(s.i-m.br.i0)*r : (s.i-m.br.i0+1)*r]
	for k, b := range brow {
		alpha[k] = sign * (m.scale * b)
	}
	addRows(acc, alpha[:r], m.a[s.j-m.ar.j0:], int(m.ar.cols()))
}

// product reads weight name's adapter parts a and b densely into the
// product both merges add, scaled by scale, and checks that they cover
// every row and column of wr, the weight part's.
func product(name string, wr rect, a, b Matrix, scale float64) (*merged, error) {
	af, ar, err := a.dense()
	if err != nil {
		return nil, fmt.Errorf("lora: weight %s, A: %w", name, err)
	}
	bf, br, err := b.dense()
	if err != nil {
		return nil, fmt.Errorf("lora: weight %s, B: %w", name, err)
	}
	cur := &merged{a: af, b: bf, ar: ar, br: br, scale: float32(scale)}
	if err := cur.covers(wr); err != nil {
		return nil, fmt.Errorf("lora: weight %s: %w", name, err)
	}
	return cur, nil
}
