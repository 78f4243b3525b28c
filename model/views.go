package model

import (
	"fmt"
	"slices"
	"strings"

	"github.com/m2n-dev/m2n/dtype"
	"github.com/m2n-dev/m2n/placement"
)

// fuseMode says how a local buffer holds the parts of its tensors.
type fuseMode uint8

const (
	// own: one tensor, in a buffer of its own: exactly its part, or, where
	// the framework pads (sideLayout.rows), its part then padding rows.
	own fuseMode = iota
	// concat: the members' parts one after another, each dense (vLLM's
	// qkv_proj, gate_up_proj and fused_qkv_a_proj; Megatron's linear_fc1).
	concat
	// interleave: the members share their local dim 0 (Megatron's query
	// groups) and, for each index of it, the buffer holds each member's
	// slab of the remaining dims in turn (Megatron's linear_qkv: for each
	// local query group its q heads, its k head, its v head).
	interleave
)

// fusion is how one tensor sits in its buffer on one side: the buffer's
// name, how the buffer fuses, and the tensor's position among its members.
type fusion struct {
	name  string
	mode  fuseMode
	order int
}

// fusedAs names the buffer that fuses the module of name (one of from)
// into the module to, under the same prefix and with the same parameter
// suffix: "model.layers.0.self_attn.k_proj.weight" with to "linear_qkv" is
// "model.layers.0.self_attn.linear_qkv.weight". A name that holds none of
// from stays in a buffer of its own.
func fusedAs(name string, mode fuseMode, from []string, to string, k Kind) fusion {
	parts := strings.Split(name, ".")
	for i := len(parts) - 1; i >= 0; i-- {
		if j := slices.Index(from, parts[i]); j >= 0 {
			parts[i] = to
			return fusion{name: strings.Join(parts, "."), mode: mode, order: j}
		}
	}
	return fusion{name: name}
}

// group is one local buffer of a stage's side and the tensors it holds, in
// buffer order.
type group struct {
	name    string
	mode    fuseMode
	dtype   dtype.DType
	members []*wholeTensor
}

// join puts w into the buffer f names on the given side, creating it on
// first use.
func (s *Stage) join(w *wholeTensor, side Side, f fusion) error {
	g := s.byName[side][f.name]
	dt := w.dtype[side] // the destination's may be FP8 (NewQuantized)
	if g == nil {
		g = &group{name: f.name, mode: f.mode, dtype: dt}
		s.groups[side] = append(s.groups[side], g)
		s.byName[side][f.name] = g
	}
	if g.mode != f.mode || (f.mode == own && len(g.members) > 0) {
		return fmt.Errorf("%s buffer %s: tensor %s cannot share it with %s", side, f.name, w.Name, g.members[0].Name)
	}
	if g.dtype != dt {
		return fmt.Errorf("%s buffer %s fuses %s (%s) and %s (%s): dtypes differ", side, f.name, g.members[0].Name, g.dtype, w.Name, dt)
	}
	if f.mode != own && w.side[side].rows > 0 {
		return fmt.Errorf("%s buffer %s: tensor %s is padded and cannot be fused", side, f.name, w.Name)
	}
	// Insert by order (q, k, v; gate, up), keeping arrival order for ties.
	i := len(g.members)
	for i > 0 && g.members[i-1].order[side] > f.order {
		i--
	}
	w.group[side] = g
	w.order[side] = f.order
	g.members = slices.Insert(g.members, i, w)
	for j, m := range g.members {
		m.member[side] = j
	}
	return nil
}

// checkGroups checks that the members of every fused buffer span the same
// ranks in the same way, and that an interleaved buffer's members agree on
// their local dim 0 and trailing dims on every rank.
func (s *Stage) checkGroups() error {
	for side := Src; side <= Dst; side++ {
		for _, g := range s.groups[side] {
			first := g.members[0]
			fl := first.side[side]
			for _, m := range g.members[1:] {
				ml := m.side[side]
				same := fl.start == ml.start && len(fl.axes) == len(ml.axes)
				for a := 0; same && a < len(fl.axes); a++ {
					same = fl.axes[a].size == ml.axes[a].size
				}
				if !same {
					return fmt.Errorf("%s buffer %s fuses %s and %s over different ranks", side, g.name, first.Name, m.Name)
				}
				if g.mode != interleave {
					continue
				}
				a, b := first.LayoutShape, m.LayoutShape
				ok := len(a) >= 2 && len(a) == len(b) && a[0] == b[0] && slices.Equal(a[2:], b[2:])
				for x := 0; ok && x < len(fl.axes); x++ {
					fa, ma := fl.axes[x], ml.axes[x]
					ok = fa.dim == ma.dim && (fa.dim == 1 || slices.Equal(fa.parts, ma.parts))
				}
				if !ok {
					return fmt.Errorf("%s buffer %s interleaves %s (%s) and %s (%s): they must agree on dim 0, the dims after 1 and how they split",
						side, g.name, first.Name, placement.FormatShape(a), m.Name, placement.FormatShape(b))
				}
			}
		}
	}
	return nil
}

// Part is where one rank's part of a tensor sits: the local buffer that
// holds it and the view into that buffer (placement.View: offset and
// strides in elements over the part's local shape). The zero View means
// the part is dense in a buffer of its own, of exactly its size.
type Part struct {
	Buffer string
	View   placement.View
}

// part returns rank's box of the whole tensor on side and its local
// shape, false when the side does not hold rank.
func (w *wholeTensor) part(side Side, rank int) (placement.Box, []int64, bool) {
	b, ok := w.side[side].rankBox(w.LayoutShape, rank)
	if !ok {
		return b, nil, false
	}
	return b, b.Shape(), true
}

func elems(shape []int64) int64 {
	n := int64(1)
	for _, s := range shape {
		n *= s
	}
	return n
}

// view returns where rank's part of the whole tensor sits in its buffer on
// side: the zero View for a tensor dense in a buffer of exactly its size.
func (w *wholeTensor) view(side Side, rank int) (placement.View, []int64, bool) {
	_, sh, ok := w.part(side, rank)
	if !ok {
		return placement.View{}, nil, false
	}
	g := w.group[side]
	switch g.mode {
	case concat:
		var off int64
		for _, m := range g.members[:w.member[side]] {
			_, ms, _ := m.part(side, rank)
			off += elems(ms)
		}
		return placement.DenseView(sh, off), sh, true
	case interleave:
		inner := elems(sh[2:])
		var before, rows int64
		for j, m := range g.members {
			_, ms, _ := m.part(side, rank)
			if j < w.member[side] {
				before += ms[1]
			}
			rows += ms[1]
		}
		st := placement.DenseView(sh, 0).Strides
		st[0], st[1] = rows*inner, inner
		return placement.View{Offset: before * inner, Strides: st}, sh, true
	}
	sl := w.side[side]
	if sl.order != nil {
		st := make([]int64, len(sh))
		acc := int64(1)
		for i := len(sl.order) - 1; i >= 0; i-- {
			d := sl.order[i]
			st[d] = acc
			acc *= max(sh[d], 1)
		}
		return placement.View{Strides: st}, sh, true
	}
	if sl.rows > 0 && len(sh) > 0 && sl.rows != sh[0] {
		return placement.DenseView(sh, 0), sh, true // a padded buffer: longer than the part
	}
	return placement.View{}, sh, true
}

// Part returns where rank (a local rank of the stage's communicator) holds
// its part of t on the given side, and false when the rank holds none
// (it is not on that side, or holds nothing of a piece). Views of the
// tensors (and pieces) that share a buffer do not overlap, and together
// cover it but for the rows a framework pads.
func (t *TensorLayout) Part(side Side, rank int) (Part, bool) {
	b, ok := t.Layout(side).RankBox(rank)
	if !ok {
		return Part{}, false
	}
	w := t.whole
	v, wsh, _ := w.view(side, rank)
	p := Part{Buffer: w.group[side].name, View: v}
	if t.Origin == nil {
		return p, true
	}
	wb, _, _ := w.part(side, rank)
	st := v.ResolvedStrides(wsh)
	off := v.Offset
	for d := range b.Lo {
		off += (b.Lo[d] + t.Origin[d] - wb.Lo[d]) * st[d]
	}
	p.View = placement.View{Offset: off, Strides: st}
	return p, true
}

// Buffer is one local buffer of a rank on one side: its name, element type
// and size in elements (padding rows included), and the tensors whose parts
// it holds, in the order they sit in it.
type Buffer struct {
	Name    string
	DType   dtype.DType
	Elems   int64
	Tensors []string
}

// Bytes returns the buffer's size in bytes.
func (b Buffer) Bytes() int64 { return b.Elems * int64(b.DType.Size()) }

// Buffers returns the local buffers that rank (a local rank of the stage's
// communicator) holds on the given side, in the order of their first
// tensor; none when the rank is not on that side. A fused buffer is one
// entry holding several tensors' views; a padded one counts its padding
// rows.
func (s *Stage) Buffers(side Side, rank int) []Buffer {
	var out []Buffer
	for _, g := range s.groups[side] {
		b := Buffer{Name: g.name, DType: g.dtype}
		held := false
		var n0, rows, inner int64
		for _, m := range g.members {
			_, sh, ok := m.part(side, rank)
			if !ok {
				continue
			}
			held = true
			b.Tensors = append(b.Tensors, m.Name)
			switch {
			case g.mode == interleave:
				n0, inner = sh[0], elems(sh[2:])
				rows += sh[1]
			case m.side[side].rows > 0 && len(sh) > 0:
				b.Elems += m.side[side].rows * elems(sh[1:])
			default:
				b.Elems += elems(sh)
			}
		}
		if g.mode == interleave {
			b.Elems = n0 * rows * inner
		}
		if held {
			out = append(out, b)
		}
	}
	return out
}

// LocalRank returns world rank w's rank in the stage's communicator, or -1
// when it is not a member.
func (s *Stage) LocalRank(w int) int { return slices.Index(s.Members, w) }

// localBytes returns how many bytes of the stage's tensors a refit moves to or
// from rank (a local rank of the stage's communicator) on the given side
// (padding rows not counted).
func (s *Stage) localBytes(side Side, rank int) int64 {
	var n int64
	for _, t := range s.Tensors {
		n += t.Layout(side).LocalBytes(rank)
	}
	return n
}

// RankBytes returns how many bytes world rank w holds on each side over all
// stages: a trainer rank its stage's part, a generator rank its part of
// every stage.
func (l *Layouts) RankBytes(w int) (src, dst int64) {
	for _, s := range l.Stages {
		r := s.LocalRank(w)
		if r < 0 {
			continue
		}
		src += s.localBytes(Src, r)
		dst += s.localBytes(Dst, r)
	}
	return src, dst
}

// World returns the number of world ranks: every trainer rank of every
// stage and every generator rank.
func (l *Layouts) World() int { return l.Trainer.Ranks() + l.Generator.Ranks() }
