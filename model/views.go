package model

import (
	"fmt"
	"slices"
	"strings"

	"github.com/m2n-dev/m2n/placement"
)

// fuseMode says how a local buffer holds the parts of its tensors.
type fuseMode uint8

const (
	// own: one tensor, dense, in a buffer of exactly its size.
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
	dtype   placement.DType
	members []*TensorLayout
}

// join puts t into the buffer f names on the given side, creating it on
// first use.
func (s *Stage) join(t *TensorLayout, side Side, f fusion) error {
	var g *group
	for _, x := range s.groups[side] {
		if x.name == f.name {
			g = x
			break
		}
	}
	dt := t.Layout(side).DType() // the destination's may be FP8 (NewQuantized)
	if g == nil {
		g = &group{name: f.name, mode: f.mode, dtype: dt}
		s.groups[side] = append(s.groups[side], g)
	}
	if g.mode != f.mode || (f.mode == own && len(g.members) > 0) {
		return fmt.Errorf("%s buffer %s: tensor %s cannot share it with %s", side, f.name, t.Name, g.members[0].Name)
	}
	if g.dtype != dt {
		return fmt.Errorf("%s buffer %s fuses %s (%s) and %s (%s): dtypes differ", side, f.name, g.members[0].Name, g.dtype, t.Name, dt)
	}
	// Insert by order (q, k, v; gate, up), keeping arrival order for ties.
	i := len(g.members)
	for i > 0 && g.members[i-1].order[side] > f.order {
		i--
	}
	t.group[side] = g
	t.order[side] = f.order
	g.members = slices.Insert(g.members, i, t)
	for j, m := range g.members {
		m.member[side] = j
	}
	return nil
}

// checkGroups checks that every interleaved buffer's members agree on
// their local dim 0 and trailing dims on every rank (same layout shape
// there, same mesh and placements), and that every member of a fused
// buffer covers the same ranks.
func (s *Stage) checkGroups() error {
	for side := Src; side <= Dst; side++ {
		for _, g := range s.groups[side] {
			first := g.members[0]
			fl := first.Layout(side)
			for _, m := range g.members[1:] {
				ml := m.Layout(side)
				if !ml.Mesh().Equal(fl.Mesh()) {
					return fmt.Errorf("%s buffer %s fuses %s on %v and %s on %v: meshes differ", side, g.name, first.Name, fl.Mesh(), m.Name, ml.Mesh())
				}
				if g.mode != interleave {
					continue
				}
				a, b := first.LayoutShape, m.LayoutShape
				if len(a) < 2 || len(a) != len(b) || a[0] != b[0] || !slices.Equal(a[2:], b[2:]) ||
					!slices.Equal(fl.Placements(), ml.Placements()) {
					return fmt.Errorf("%s buffer %s interleaves %s (%s %s) and %s (%s %s): they must agree on dim 0, the dims after 1 and the placements",
						side, g.name, first.Name, placement.FormatShape(a), placement.Format(fl.Placements()),
						m.Name, placement.FormatShape(b), placement.Format(ml.Placements()))
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

// localShape returns the shape of rank's part of t on the given side, and
// false when the side's mesh does not hold rank.
func localShape(t *TensorLayout, side Side, rank int) ([]int64, bool) {
	b, ok := t.Layout(side).RankBox(rank)
	if !ok {
		return nil, false
	}
	sh := make([]int64, len(b.Lo))
	for d := range sh {
		sh[d] = b.Hi[d] - b.Lo[d]
	}
	return sh, true
}

func elems(shape []int64) int64 {
	n := int64(1)
	for _, s := range shape {
		n *= s
	}
	return n
}

// Part returns where rank (a local rank of the stage's communicator) holds
// its part of t on the given side, and false when the rank holds none
// (it is not on that side). Views of the tensors that share a buffer do
// not overlap and together cover it exactly.
func (t *TensorLayout) Part(side Side, rank int) (Part, bool) {
	sh, ok := localShape(t, side, rank)
	if !ok {
		return Part{}, false
	}
	g := t.group[side]
	switch g.mode {
	case concat:
		var off int64
		for _, m := range g.members[:t.member[side]] {
			ms, _ := localShape(m, side, rank)
			off += elems(ms)
		}
		return Part{Buffer: g.name, View: placement.DenseView(sh, off)}, true
	case interleave:
		inner := elems(sh[2:])
		var before, rows int64
		for j, m := range g.members {
			ms, _ := localShape(m, side, rank)
			if j < t.member[side] {
				before += ms[1]
			}
			rows += ms[1]
		}
		st := placement.DenseView(sh, 0).Strides
		st[0], st[1] = rows*inner, inner
		return Part{Buffer: g.name, View: placement.View{Offset: before * inner, Strides: st}}, true
	}
	return Part{Buffer: g.name}, true
}

// Buffer is one local buffer of a rank on one side: its name, element type
// and size in elements, and the tensors whose parts it holds, in the order
// they sit in it.
type Buffer struct {
	Name    string
	DType   placement.DType
	Elems   int64
	Tensors []string
}

// Bytes returns the buffer's size in bytes.
func (b Buffer) Bytes() int64 { return b.Elems * int64(b.DType.Size()) }

// Buffers returns the local buffers that rank (a local rank of the stage's
// communicator) holds on the given side, in the order of their first
// tensor; none when the rank is not on that side. A fused buffer is one
// entry holding several tensors' views.
func (s *Stage) Buffers(side Side, rank int) []Buffer {
	var out []Buffer
	for _, g := range s.groups[side] {
		b := Buffer{Name: g.name, DType: g.dtype}
		held := false
		var n0, rows, inner int64
		for _, m := range g.members {
			sh, ok := localShape(m, side, rank)
			if !ok {
				continue
			}
			held = true
			b.Tensors = append(b.Tensors, m.Name)
			if g.mode == interleave {
				n0, inner = sh[0], elems(sh[2:])
				rows += sh[1]
			} else {
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

// Bytes returns how many bytes rank (a local rank of the stage's
// communicator) holds of the stage's tensors on the given side.
func (s *Stage) Bytes(side Side, rank int) int64 {
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
		src += s.Bytes(Src, r)
		dst += s.Bytes(Dst, r)
	}
	return src, dst
}

// World returns the number of world ranks: every trainer rank of every
// stage and every generator rank.
func (l *Layouts) World() int { return l.Trainer.Ranks() + l.Generator.Ranks() }
