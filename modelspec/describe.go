package modelspec

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/m2n-dev/m2n/mesh"
	"github.com/m2n-dev/m2n/model"
	"github.com/m2n-dev/m2n/placement"
	"github.com/m2n-dev/m2n/units"
)

// This file describes a model's layouts for people (WriteLayouts) and
// programs (WriteLayoutsJSON), as refit layouts prints them.

// genDType renders what the generator holds a tensor in: its dtype, or
// "e4m3 <mode> [scale shape]" with the shape of its weight_scale_inv.
func genDType(l *model.Layouts, t *model.TensorLayout) string {
	if t.Scale == 0 {
		return t.Dst.DType().String()
	}
	return fmt.Sprintf("e4m3 %v scale %s", t.Scale, placement.FormatShape(model.ScaleShape(t.Whole(), t.Scale)))
}

// meshText renders a layout's mesh and placements: "16x8[32-159] R,S0".
func meshText(l placement.Layout) string {
	return fmt.Sprintf("%v %s", l.Mesh(), placement.Format(l.Placements()))
}

// viewOf returns the part of t on the first rank that holds it on a side,
// that rank, and whether every rank holding it has the same view.
func viewOf(s *model.Stage, t *model.TensorLayout, side model.Side) (model.Part, int, bool) {
	ranks := t.Layout(side).Mesh().Ranks()
	slices.Sort(ranks)
	first, _ := t.Part(side, ranks[0])
	for _, r := range ranks[1:] {
		p, _ := t.Part(side, r)
		if p.Buffer != first.Buffer || p.View.Offset != first.View.Offset || !slices.Equal(p.View.Strides, first.View.Strides) {
			return first, ranks[0], false
		}
	}
	return first, ranks[0], true
}

// shortBuffer names a buffer relative to the tensor's own prefix:
// "linear_qkv.weight" for model.layers.0.self_attn.linear_qkv.weight.
func shortBuffer(tensor, buffer string) string {
	a, b := strings.Split(tensor, "."), strings.Split(buffer, ".")
	i := 0
	for i < len(a) && i < len(b)-1 && a[i] == b[i] {
		i++
	}
	return strings.Join(b[i:], ".")
}

func viewText(s *model.Stage, t *model.TensorLayout, side model.Side) string {
	p, first, same := viewOf(s, t, side)
	if !t.Fused(side) && p.View.Dense() {
		return "-"
	}
	out := fmt.Sprintf("%s @%d %v", shortBuffer(t.Whole().Name, p.Buffer), p.View.Offset, p.View.ResolvedStrides(partShape(t, side, first)))
	if !same {
		out += fmt.Sprintf(" (local rank %d; others differ)", first)
	}
	return out
}

func partShape(t *model.TensorLayout, side model.Side, rank int) []int64 {
	b, _ := t.Layout(side).RankBox(rank)
	sh := make([]int64, len(b.Lo))
	for d := range sh {
		sh[d] = b.Hi[d] - b.Lo[d]
	}
	return sh
}

func shapeText(t model.Tensor) string {
	s := placement.FormatShape(t.Shape)
	if !slices.Equal(t.Shape, t.LayoutShape) {
		s += " as " + placement.FormatShape(t.LayoutShape)
	}
	return s
}

// rankRow is what one world rank holds.
type rankRow struct {
	Rank     int    `json:"rank"`
	Role     string `json:"role"`  // train or gen
	Stage    int    `json:"stage"` // the trainer's stage; -1 for a generator rank
	SrcBytes int64  `json:"src_bytes"`
	DstBytes int64  `json:"dst_bytes"`
	Buffers  int    `json:"buffers"`
}

func rankRows(l *model.Layouts) []rankRow {
	rows := make([]rankRow, l.World())
	T := l.Trainer.Ranks()
	for w := range rows {
		r := rankRow{Rank: w, Role: "gen", Stage: -1}
		r.SrcBytes, r.DstBytes = l.RankBytes(w)
		for _, s := range l.Stages {
			lr := s.LocalRank(w)
			if lr < 0 {
				continue
			}
			if w < T {
				r.Role, r.Stage = "train", s.Index
				r.Buffers += len(s.Buffers(model.Src, lr))
			} else {
				r.Buffers += len(s.Buffers(model.Dst, lr))
			}
		}
		rows[w] = r
	}
	return rows
}

// WriteLayouts prints l as refit layouts prints it: the model, the trainer
// and the generator; per pipeline stage its communicator and a table of its
// tensors (shape, dtype, each side's mesh[ranks] placements and view, the
// generator's dtype); what every world rank holds (runs of ranks alike on
// one line); the totals; with FP8, which tensors the generator quantizes;
// and the tensors the generator must refresh after every step.
func WriteLayouts(w io.Writer, l *model.Layouts) error {
	m := l.Model
	tr, g := l.Trainer, l.Generator
	T, G := tr.Ranks(), g.Ranks()
	fmt.Fprintf(w, "model %s: %d tensors, %d parameters, %s (%d bytes)\n", m.Name, len(m.Tensors), m.Params(), formatDecimal(float64(m.Bytes())), m.Bytes())
	edp := ""
	if slices.ContainsFunc(m.Tensors, func(t model.Tensor) bool { return t.Kind == model.ExpertsGateUp || t.Kind == model.ExpertsDown }) {
		edp = fmt.Sprintf(" (expert-dp %d)", tr.ExpertDP())
	}
	fmt.Fprintf(w, "trainer %v%s: %d ranks, world %s\n", tr, edp, T, mesh.FormatRanks(seq(0, T)))
	fmt.Fprintf(w, "generator %v: %d ranks, world %s\n", g, G, mesh.FormatRanks(seq(T, G)))
	for _, s := range l.Stages {
		fmt.Fprintf(w, "\nstage %d: layers [%d, %d), %d tensors; communicator of %d ranks: world %s (local %s) train, world %s (local %s) generate\n",
			s.Index, s.Layers[0], s.Layers[1], len(s.Tensors), len(s.Members),
			mesh.FormatRanks(s.Members[:s.Trainers]), mesh.FormatRanks(seq(0, s.Trainers)),
			mesh.FormatRanks(s.Members[s.Trainers:]), mesh.FormatRanks(seq(s.Trainers, s.Generators)))
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "  tensor\tshape\tdtype\tsrc\tsrc view\tdst\tdst dtype\tdst view")
		for _, t := range s.Tensors {
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", t.Name, shapeText(t.Tensor), t.DType,
				meshText(t.Src), viewText(s, t, model.Src), meshText(t.Dst), genDType(l, t), viewText(s, t, model.Dst))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	fmt.Fprintln(w, "\nper rank (world ranks; a generator rank holds its part of every stage):")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "ranks\trole\tstage\tsrc bytes\tdst bytes\tbuffers\t")
	rows := rankRows(l)
	var srcMin, srcMax, dstMin, dstMax int64 = 1 << 62, 0, 1 << 62, 0
	for i := 0; i < len(rows); {
		j := i
		for j+1 < len(rows) && sameHolding(rows[j+1], rows[i]) {
			j++
		}
		r := rows[i]
		stage := "-"
		if r.Stage >= 0 {
			stage = fmt.Sprint(r.Stage)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t\n", mesh.FormatRanks(seq(i, j-i+1)), r.Role, stage,
			formatDecimal(float64(r.SrcBytes)), formatDecimal(float64(r.DstBytes)), r.Buffers)
		i = j + 1
	}
	for _, r := range rows {
		if r.Role == "train" {
			srcMin, srcMax = min(srcMin, r.SrcBytes), max(srcMax, r.SrcBytes)
		} else {
			dstMin, dstMax = min(dstMin, r.DstBytes), max(dstMax, r.DstBytes)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if _, err := fmt.Fprintf(w, "\ntotals: %d tensors, %d parameters, %d bytes; trainer ranks hold %s to %s, generator ranks %s to %s\n",
		len(m.Tensors), m.Params(), m.Bytes(), formatDecimal(float64(srcMin)), formatDecimal(float64(srcMax)),
		formatDecimal(float64(dstMin)), formatDecimal(float64(dstMax))); err != nil {
		return err
	}
	if l.FP8 != 0 {
		n := 0
		for _, t := range m.Tensors {
			if t.FP8 {
				n++
			}
		}
		fmt.Fprintf(w, "FP8: %d of %d tensors e4m3 with %v scales (the linear and expert weights of the decoder layers, as vLLM's Fp8Config quantizes them); the others as they are\n",
			n, len(m.Tensors), l.FP8)
	}
	return writeRefresh(w, m)
}

// writeRefresh lists the tensors the generator must run its post-load step
// for after every refit step, one line per reason.
func writeRefresh(w io.Writer, m *model.Model) error {
	var reasons []string
	names := map[string][]string{}
	for _, t := range m.Tensors {
		if t.Refresh == "" {
			continue
		}
		if names[t.Refresh] == nil {
			reasons = append(reasons, t.Refresh)
		}
		names[t.Refresh] = append(names[t.Refresh], t.Name)
	}
	for i, r := range reasons {
		if i == 0 {
			fmt.Fprintln(w, "\nafter every step the generator must refresh (m2n.Model.refresh):")
		}
		ns := names[r]
		what := ns[0]
		if len(ns) > 1 {
			what = fmt.Sprintf("%d tensors, %s ... %s", len(ns), ns[0], ns[len(ns)-1])
		}
		if _, err := fmt.Fprintf(w, "  %s: %s\n", what, r); err != nil {
			return err
		}
	}
	return nil
}

func sameHolding(a, b rankRow) bool {
	return a.Role == b.Role && a.Stage == b.Stage && a.SrcBytes == b.SrcBytes && a.DstBytes == b.DstBytes && a.Buffers == b.Buffers
}

func seq(start, n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = start + i
	}
	return out
}

// sideJSON is one side of a tensor: its layout, and the buffer and view of
// the side's first rank (every rank of a side has the same view).
type sideJSON struct {
	Layout     string  `json:"layout"`
	Mesh       []int   `json:"mesh"`
	Ranks      string  `json:"ranks"`
	Placements string  `json:"placements"`
	Buffer     string  `json:"buffer"`
	Offset     int64   `json:"offset"`
	Strides    []int64 `json:"strides"`
}

type tensorJSON struct {
	Name        string   `json:"name"`
	Shape       []int64  `json:"shape"`
	LayoutShape []int64  `json:"layout_shape"`
	DType       string   `json:"dtype"`
	Kind        string   `json:"kind"`
	Stage       int      `json:"stage"`
	Src         sideJSON `json:"src"`
	Dst         sideJSON `json:"dst"`
	// GenDType is the generator's dtype, Scale the mode and ScaleShape the
	// shape of its weight_scale_inv when it holds the tensor in FP8.
	GenDType   string  `json:"gen_dtype"`
	Scale      string  `json:"scale,omitempty"`
	ScaleShape []int64 `json:"scale_shape,omitempty"`
	// Of and Origin: a piece's tensor and the corner of its box in that
	// tensor's layout shape.
	Of      string  `json:"of,omitempty"`
	Origin  []int64 `json:"origin,omitempty"`
	Refresh string  `json:"refresh,omitempty"`
}

type stageJSON struct {
	Stage   int    `json:"stage"`
	Layers  [2]int `json:"layers"`
	Members []int  `json:"members"`
	Tensors int    `json:"tensors"`
}

// Part is where one entry of a stage sits on a rank: the tensor, the
// entry (the tensor's name, or the piece's, for a tensor a framework splits
// otherwise than torch.chunk: model.TensorLayout), its global shape as
// transformers holds it and the layout shape both sides shard (Transposed:
// the layout moves Shape with its last two dims swapped), this rank's box
// of the layout shape (LocalShape at the global Offset; a piece's box is
// in the whole tensor's layout shape) and the view (ViewOffset and
// ViewStrides, in elements) that places it in its buffer. It is what refit
// layouts --json --parts and the C ABI's model description (Python's
// Model.buffers) print per part.
type Part struct {
	Tensor      string  `json:"tensor"`
	Entry       string  `json:"entry"`
	Transposed  bool    `json:"transposed"`
	Shape       []int64 `json:"shape"`
	LayoutShape []int64 `json:"layout_shape"`
	LocalShape  []int64 `json:"local_shape"`
	Offset      []int64 `json:"offset"`
	ViewOffset  int64   `json:"view_offset"`
	ViewStrides []int64 `json:"view_strides"`
}

// PartOf returns the part of entry t that rank (local to t's stage) holds
// on side, and the name of the buffer that holds it; false when the rank
// holds none of it.
func PartOf(t *model.TensorLayout, side model.Side, rank int) (Part, string, bool) {
	p, ok := t.Part(side, rank)
	if !ok {
		return Part{}, "", false
	}
	box, _ := t.Box(side, rank)
	sh, whole := box.Shape(), t.Whole()
	return Part{Tensor: whole.Name, Entry: t.Name, Transposed: whole.Transposed, Shape: whole.Shape, LayoutShape: whole.LayoutShape,
		LocalShape: sh, Offset: box.Lo, ViewOffset: p.View.Offset, ViewStrides: p.View.ResolvedStrides(sh)}, p.Buffer, true
}

// partJSON is one entry a rank holds and the buffer that holds it.
type partJSON struct {
	Buffer string `json:"buffer"`
	Part
}

type bufferJSON struct {
	Name  string `json:"name"`
	DType string `json:"dtype"`
	Elems int64  `json:"elems"`
}

// rankPartsJSON is what one world rank holds on its side, every stage.
type rankPartsJSON struct {
	Rank    int          `json:"rank"`
	Side    string       `json:"side"`
	Buffers []bufferJSON `json:"buffers"`
	Parts   []partJSON   `json:"parts"`
}

type layoutsOut struct {
	Model     string          `json:"model"`
	Train     string          `json:"train"`
	Gen       string          `json:"gen"`
	Stages    []stageJSON     `json:"stages"`
	Tensors   []tensorJSON    `json:"tensors"`
	Count     int             `json:"count"`
	Params    int64           `json:"params"`
	Bytes     int64           `json:"bytes"`
	Ranks     []rankRow       `json:"ranks"`
	RankParts []rankPartsJSON `json:"rank_parts,omitempty"`
}

// WriteLayoutsJSON prints l as one JSON object (refit layouts --json): the
// stages, every tensor with both sides' layouts and views and the
// generator's dtype (and FP8 scale shape), the totals and what every world
// rank holds; with parts, also every rank's buffers and the box and view of
// every entry it holds.
func WriteLayoutsJSON(w io.Writer, l *model.Layouts, parts bool) error {
	return json.NewEncoder(w).Encode(layoutsJSON(l, parts))
}

func layoutsJSON(l *model.Layouts, parts bool) layoutsOut {
	out := layoutsOut{Model: l.Model.Name, Train: l.Trainer.String(), Gen: l.Generator.String(),
		Count: len(l.Model.Tensors), Params: l.Model.Params(), Bytes: l.Model.Bytes(), Ranks: rankRows(l)}
	side := func(s *model.Stage, t *model.TensorLayout, sd model.Side) sideJSON {
		lay := t.Layout(sd)
		p, first, _ := viewOf(s, t, sd)
		return sideJSON{Layout: lay.String(), Mesh: lay.Mesh().Shape(), Ranks: mesh.FormatRanks(lay.Mesh().Ranks()), Placements: placement.Format(lay.Placements()),
			Buffer: p.Buffer, Offset: p.View.Offset, Strides: p.View.ResolvedStrides(partShape(t, sd, first))}
	}
	for _, s := range l.Stages {
		out.Stages = append(out.Stages, stageJSON{Stage: s.Index, Layers: s.Layers, Members: s.Members, Tensors: len(s.Tensors)})
		for _, t := range s.Tensors {
			tj := tensorJSON{Name: t.Name, Shape: t.Shape, LayoutShape: t.LayoutShape, DType: t.DType.String(),
				Kind: t.Kind.String(), Stage: s.Index, Src: side(s, t, model.Src), Dst: side(s, t, model.Dst),
				GenDType: t.Dst.DType().String(), Refresh: t.Refresh, Origin: t.Origin}
			if t.Origin != nil {
				tj.Of = t.Whole().Name
			}
			if t.Scale != 0 {
				tj.Scale, tj.ScaleShape = t.Scale.String(), model.ScaleShape(t.Whole(), t.Scale)
			}
			out.Tensors = append(out.Tensors, tj)
		}
	}
	if parts {
		out.RankParts = rankParts(l)
	}
	return out
}

// rankParts lists, for every world rank, its buffers and the parts of
// every entry it holds in them (a generator rank: over every stage).
func rankParts(l *model.Layouts) []rankPartsJSON {
	T := l.Trainer.Ranks()
	out := make([]rankPartsJSON, l.World())
	for w := range out {
		side := model.Src
		if w >= T {
			side = model.Dst
		}
		rp := rankPartsJSON{Rank: w, Side: side.String(), Buffers: []bufferJSON{}, Parts: []partJSON{}}
		for _, s := range l.Stages {
			r := s.LocalRank(w)
			if r < 0 {
				continue
			}
			for _, b := range s.Buffers(side, r) {
				rp.Buffers = append(rp.Buffers, bufferJSON{Name: b.Name, DType: b.DType.String(), Elems: b.Elems})
			}
			for _, t := range s.Tensors {
				if p, buf, ok := PartOf(t, side, r); ok {
					rp.Parts = append(rp.Parts, partJSON{Buffer: buf, Part: p})
				}
			}
		}
		out[w] = rp
	}
	return out
}

// formatDecimal renders bytes with decimal units (7168 MB).
func formatDecimal(b float64) string { return units.FormatDecimalBytes(b, 6) }
