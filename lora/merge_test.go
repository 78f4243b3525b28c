package lora_test

import (
	"encoding/binary"
	"math"
	"strings"
	"testing"

	"github.com/m2n-dev/m2n/dtype"
	"github.com/m2n-dev/m2n/lora"
	"github.com/m2n-dev/m2n/mesh"
	"github.com/m2n-dev/m2n/model"
	"github.com/m2n-dev/m2n/placement"
)

// value is a bf16 value in about [-1, 1] drawn from a tensor's seed and an
// element's global index; step varies the adapters from step to step.
func value(seed string, g int64, step int) uint16 {
	return valueOf(seedOf(seed), g, step)
}

func seedOf(name string) uint64 {
	x := uint64(0xCBF29CE484222325)
	for _, c := range name {
		x = (x ^ uint64(c)) * 0x100000001B3
	}
	return x
}

func valueOf(seed uint64, g int64, step int) uint16 {
	x := uint64(g)*0x9E3779B97F4A7C15 + uint64(step)*0xD6E8FEB86659FD93 + seed
	x ^= x >> 31
	x *= 0xBF58476D1CE4E5B9
	x ^= x >> 29
	f := float32(int64(x>>40)-(1<<23)) / float32(1<<23)
	return uint16(math.Float32bits(f) >> 16) // truncation: any bf16 will do
}

func bf16(u uint16) float32 { return math.Float32frombits(uint32(u) << 16) }

func roundBF16(x float32) uint16 {
	u := math.Float32bits(x)
	return uint16((u + 0x7FFF + (u>>16)&1) >> 16)
}

// rankBuffers holds one generator rank's buffers of a stage's side, by
// buffer name.
type rankBuffers map[string][]byte

func alloc(st *model.Stage, side model.Side, rank int) rankBuffers {
	out := rankBuffers{}
	for _, b := range st.Buffers(side, rank) {
		out[b.Name] = make([]byte, b.Bytes())
	}
	return out
}

// fill writes every element of rank's part of tl (on side) as fn of its
// whole tensor's row-major [rows, cols] index.
func fill(t *testing.T, tl *model.TensorLayout, side model.Side, rank int, bufs rankBuffers, fn func(i, j int64) uint16) {
	t.Helper()
	p, ok := tl.Part(side, rank)
	if !ok {
		return
	}
	box, _ := tl.Box(side, rank)
	whole := tl.Whole()
	ls := whole.LayoutShape
	cols := ls[len(ls)-1]
	shape := box.Shape()
	st := p.View.ResolvedStrides(shape)
	idx := make([]int64, len(shape))
	buf := bufs[p.Buffer]
	elems := box.Elems()
	for n := int64(0); n < elems; n++ {
		q := n
		off := p.View.Offset
		g := int64(0)
		for d := len(shape) - 1; d >= 0; d-- {
			idx[d] = q % shape[d]
			q /= shape[d]
		}
		for d := range shape {
			off += idx[d] * st[d]
			o := int64(0)
			if tl.Origin != nil {
				o = tl.Origin[d]
			}
			g = g*ls[d] + box.Lo[d] + idx[d] + o
		}
		binary.LittleEndian.PutUint16(buf[2*off:], fn(g/cols, g%cols))
	}
}

// matrix is tl's part on the generator rank as a merge operand.
func matrix(tl *model.TensorLayout, rank int, bufs rankBuffers) lora.Matrix {
	p, _ := tl.Part(model.Dst, rank)
	m := lora.Matrix{Layout: tl.Dst, Rank: rank, Buf: bufs[p.Buffer], View: p.View}
	if tl.Origin != nil {
		m.Origin, m.Whole = tl.Origin, tl.Whole().LayoutShape
	}
	return m
}

// TestMergeMatchesDenseReference merges three steps of adapters into every
// generator rank's parts of every adapted weight (fused views included:
// vLLM's qkv_proj and gate_up_proj) and checks every element of every
// part against the same sums over the whole matrices, for generators
// whose TP is below, equal to and above the key-value heads (vLLM then
// replicates k and v, and B's rows with them), against trainers as
// Megatron-Bridge splits the adapters.
func TestMergeMatchesDenseReference(t *testing.T) {
	base, err := model.Load("../model/testdata/models/qwen3-8b.config.json", model.LoadOptions{Scale: 32, Layers: 1})
	if err != nil {
		t.Fatal(err)
	}
	ad, err := model.Adapters(base, model.LoRA{Rank: 16, Alpha: 32})
	if err != nil {
		t.Fatal(err)
	}
	if got := len(ad.Tensors); got != 14 {
		t.Fatalf("%d adapter tensors for one layer's 7 projections, want 14", got)
	}
	for _, tc := range []struct{ tr, gen string }{{"tp=2", "tp=4"}, {"tp=4,dp=2", "tp=8"}, {"tp=1", "tp=16"}, {"tp=2", "tp=2,dp=2"}} {
		t.Run(tc.tr+"->"+tc.gen, func(t *testing.T) { checkMerge(t, base, ad, tc.tr, tc.gen) })
	}
}

func checkMerge(t *testing.T, base, ad *model.Model, trs, gens string) {
	tr, err := model.ParseTrainer(trs)
	if err != nil {
		t.Fatal(err)
	}
	gen, err := model.ParseGenerator(gens)
	if err != nil {
		t.Fatal(err)
	}
	wl, err := model.New(base, tr, gen)
	if err != nil {
		t.Fatal(err)
	}
	al, err := model.New(ad, tr, gen)
	if err != nil {
		t.Fatal(err)
	}
	ws, as := wl.Stages[0], al.Stages[0]
	adapters := map[string][2]*model.TensorLayout{}
	var scale float64
	for _, tl := range as.Tensors {
		p := adapters[tl.Adapter.Base]
		if tl.Adapter.B {
			p[1] = tl
		} else {
			p[0] = tl
		}
		adapters[tl.Adapter.Base] = p
		scale = tl.Adapter.Scale
	}
	const steps = 3
	first := ws.Trainers
	for rank := first; rank < first+ws.Generators; rank++ {
		wb, ab := alloc(ws, model.Dst, rank), alloc(as, model.Dst, rank)
		for _, tl := range ws.Tensors {
			if _, ok := adapters[tl.Whole().Name]; ok {
				seed := seedOf(tl.Whole().Name)
				fill(t, tl, model.Dst, rank, wb, func(i, j int64) uint16 { return valueOf(seed, i*1e6+j, 0) })
			}
		}
		mg := lora.NewMerger()
		for step := 1; step <= steps; step++ {
			for _, tl := range as.Tensors {
				seed := seedOf(tl.Name)
				fill(t, tl, model.Dst, rank, ab, func(i, j int64) uint16 { return valueOf(seed, i*1e6+j, step) })
			}
			merged := 0
			for _, tl := range ws.Tensors {
				p, ok := adapters[tl.Whole().Name]
				if !ok {
					continue
				}
				if err := mg.Merge(tl.Whole().Name, matrix(tl, rank, wb), matrix(p[0], rank, ab), matrix(p[1], rank, ab), scale); err != nil {
					t.Fatalf("rank %d, step %d: %v", rank, step, err)
				}
				merged++
			}
			if merged != 7 {
				t.Fatalf("rank %d merged %d weights, want 7", rank, merged)
			}
		}
		for _, tl := range ws.Tensors {
			if _, ok := adapters[tl.Whole().Name]; ok {
				checkWeight(t, tl, rank, wb, adapters, scale, steps)
			}
		}
	}
}

// checkWeight compares rank's part of weight tl with the merges of steps
// adapter steps computed from the whole matrices.
func checkWeight(t *testing.T, tl *model.TensorLayout, rank int, wb rankBuffers, adapters map[string][2]*model.TensorLayout, scale float64, steps int) {
	t.Helper()
	name := tl.Whole().Name
	p := adapters[name]
	bad := 0
	part, ok := tl.Part(model.Dst, rank)
	if !ok {
		return
	}
	got := rankBuffers{part.Buffer: wb[part.Buffer]}
	want := rankBuffers{part.Buffer: make([]byte, len(wb[part.Buffer]))}
	copy(want[part.Buffer], wb[part.Buffer]) // other tensors of a fused buffer
	s := float32(scale)
	const r = 16
	var A, B [][]float32 // per step, the whole matrices
	{
		in, out := p[0].Whole().Shape[1], p[1].Whole().Shape[0]
		for step := 0; step <= steps; step++ {
			a, b := make([]float32, r*in), make([]float32, out*r)
			for k := range int64(r) {
				for j := range in {
					a[k*in+j] = bf16(value(p[0].Name, k*1e6+j, step))
				}
				for i := range out {
					b[i*r+k] = bf16(value(p[1].Name, i*1e6+k, step))
				}
			}
			A, B = append(A, a), append(B, b)
		}
	}
	seed := seedOf(name)
	fill(t, tl, model.Dst, rank, want, func(i, j int64) uint16 {
		w := valueOf(seed, i*1e6+j, 0)
		in := int64(len(A[0]) / r)
		for step := 1; step <= steps; step++ {
			acc := bf16(w)
			for k := range int64(r) {
				acc += float32(float32(s*B[step][i*r+k]) * A[step][k*in+j])
			}
			if step > 1 {
				for k := range int64(r) {
					acc += float32(float32(-(s * B[step-1][i*r+k])) * A[step-1][k*in+j])
				}
			}
			w = roundBF16(acc)
		}
		return w
	})
	g, w := got[part.Buffer], want[part.Buffer]
	for k := 0; k+1 < len(g); k += 2 {
		if g[k] != w[k] || g[k+1] != w[k+1] {
			if bad++; bad <= 3 {
				t.Errorf("rank %d, %s: buffer element %d is %#04x, want %#04x", rank, name, k/2,
					binary.LittleEndian.Uint16(g[k:]), binary.LittleEndian.Uint16(w[k:]))
			}
		}
	}
	if bad > 3 {
		t.Errorf("rank %d, %s: %d wrong elements", rank, name, bad)
	}
}

// TestMergeRefusesMissingRows gives a rank a B part that lacks rows of its
// weight part (the trainer's layout of B instead of the generator's):
// Merge must refuse, naming the rows, and leave the weight unchanged.
func TestMergeRefusesMissingRows(t *testing.T) {
	base, err := model.Load("../model/testdata/models/qwen3-8b.config.json", model.LoadOptions{Scale: 32, Layers: 1})
	if err != nil {
		t.Fatal(err)
	}
	ad, err := model.Adapters(base, model.LoRA{Rank: 16})
	if err != nil {
		t.Fatal(err)
	}
	tr, _ := model.ParseTrainer("tp=1")
	gen, _ := model.ParseGenerator("tp=2")
	wl, _ := model.New(base, tr, gen)
	al, err := model.New(ad, tr, gen)
	if err != nil {
		t.Fatal(err)
	}
	var w, a, b *model.TensorLayout
	for _, tl := range wl.Stages[0].Tensors {
		if strings.HasSuffix(tl.Name, "o_proj.weight") {
			w = tl
		}
	}
	for _, tl := range al.Stages[0].Tensors {
		if strings.Contains(tl.Name, "q_proj.lora_") {
			if tl.Adapter.B {
				b = tl
			} else {
				a = tl
			}
		}
	}
	// q_proj's adapter against o_proj's weight: B holds half of q's rows
	// on rank 2, o_proj's part needs all of its rows.
	const rank = 2
	wb, ab := alloc(wl.Stages[0], model.Dst, rank), alloc(al.Stages[0], model.Dst, rank)
	wpart, _ := w.Part(model.Dst, rank)
	for k := range wb[wpart.Buffer] {
		wb[wpart.Buffer][k] = byte(k)
	}
	before := string(wb[wpart.Buffer])
	err = lora.NewMerger().Merge(w.Name, matrix(w, rank, wb), matrix(a, rank, ab), matrix(b, rank, ab), 1)
	if err == nil || !strings.Contains(err.Error(), "rows") && !strings.Contains(err.Error(), "columns") {
		t.Fatalf("Merge of mismatched parts: %v, want an error naming the rows or columns", err)
	}
	if string(wb[wpart.Buffer]) != before {
		t.Error("a refused merge wrote the weight")
	}
}

// TestMergeAdapterPartsWiderThanTheWeight merges into a weight part that
// is a block of both rows and columns (rank 3 of a 2x2 mesh holds rows
// [4, 8) and columns [6, 12) of an 8x12 weight, through a view with an
// offset) from adapters every rank holds whole: the merge must read B's
// rows and A's columns at the part's corner.
func TestMergeAdapterPartsWiderThanTheWeight(t *testing.T) {
	const rows, cols, r, rank = 8, 12, 4, 3
	m2, _ := mesh.Interval([]int{2, 2}, 0)
	m1, _ := mesh.Interval([]int{4}, 0)
	wl, err := placement.NewLayout([]int64{rows, cols}, dtype.BF16, m2, []placement.Placement{placement.Shard(0), placement.Shard(1)})
	if err != nil {
		t.Fatal(err)
	}
	al, _ := placement.NewLayout([]int64{r, cols}, dtype.BF16, m1, []placement.Placement{placement.Replicate()})
	bl, _ := placement.NewLayout([]int64{rows, r}, dtype.BF16, m1, []placement.Placement{placement.Replicate()})
	const off = 5 // elements before the part in its buffer
	w := make([]byte, 2*(off+4*6))
	a, b := make([]byte, 2*r*cols), make([]byte, 2*rows*r)
	for i := range int64(4) {
		for j := range int64(6) {
			binary.LittleEndian.PutUint16(w[2*(off+i*6+j):], valueOf(1, (4+i)*cols+6+j, 0))
		}
	}
	for g := range int64(r * cols) {
		binary.LittleEndian.PutUint16(a[2*g:], valueOf(2, g, 1))
	}
	for g := range int64(rows * r) {
		binary.LittleEndian.PutUint16(b[2*g:], valueOf(3, g, 1))
	}
	err = lora.NewMerger().Merge("w", lora.Matrix{Layout: wl, Rank: rank, Buf: w, View: placement.DenseView([]int64{4, 6}, off)},
		lora.Matrix{Layout: al, Rank: rank, Buf: a}, lora.Matrix{Layout: bl, Rank: rank, Buf: b}, 0.5)
	if err != nil {
		t.Fatal(err)
	}
	for i := range int64(4) {
		for j := range int64(6) {
			gi, gj := 4+i, 6+j
			acc := bf16(valueOf(1, gi*cols+gj, 0))
			for k := range int64(r) {
				acc += float32(float32(0.5*bf16(valueOf(3, gi*r+k, 1))) * bf16(valueOf(2, k*cols+gj, 1)))
			}
			if got, want := binary.LittleEndian.Uint16(w[2*(off+i*6+j):]), roundBF16(acc); got != want {
				t.Fatalf("element (%d, %d) is %#04x, want %#04x", gi, gj, got, want)
			}
		}
	}
	for k := range 2 * off {
		if w[k] != 0 {
			t.Fatalf("byte %d before the view's offset was written", k)
		}
	}
}
