package main

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/m2n-dev/m2n/mesh"
	"github.com/m2n-dev/m2n/model"
	"github.com/m2n-dev/m2n/modelspec"
	"github.com/m2n-dev/m2n/placement"
	"github.com/spf13/cobra"
)

func newLayoutsCmd() *cobra.Command {
	var spec, train, gen string
	var scale, layers int
	var mtp, asJSON bool
	cmd := &cobra.Command{
		Use:   "layouts --model NAME|config.json|list.json --train tp=..,pp=..,dp=..[,cp=..,ep=..,etp=..] --gen tp=..,dp=..[,ep=..] [flags]",
		Short: "Show every tensor of a model laid out from a Megatron trainer to a vLLM generator",
		Long: `layouts lays a whole model out for weight sync: every tensor, named and shaped
as transformers names it, with its layout on the trainer (Megatron-Core
conventions) and on the generator (vLLM conventions), the local buffer and
view that hold each rank's part (fused weights stay fused: Megatron's
linear_qkv and linear_fc1, vLLM's qkv_proj, gate_up_proj and
fused_qkv_a_proj), per pipeline stage, and what every rank holds.

--model is a built-in model (deepseek-v3, qwen3-235b-a22b, llama-3.1-70b), a
HuggingFace config.json (model_type deepseek_v3, qwen3_moe, qwen3, llama,
mistral, mixtral) or a JSON list of {"name", "shape", "dtype"}.

--train gives Megatron's sizes: tp, pp, cp, dp, ep (expert parallel), etp
(expert tensor parallel), and optionally first and last (layers on the first
and last pipeline stage); --gen gives vLLM's tp, dp and ep (expert parallel
over all tp x dp ranks). Sizes not given are 1. Trainer ranks go TP fastest,
then CP, then DP, PP slowest; experts fold a stage's ranks as etp x ep x
expert-dp. Stage s trains on world ranks [s*P, (s+1)*P) (P = tp*cp*dp) and
the generator ranks come after all trainers; each stage's layouts use the
ranks of its own communicator: the stage's trainers, then every generator.

Layouts are printed as mesh[ranks] placements over the tensor's layout
shape, which is its shape except for q, k, v ([kv heads, rows per kv head,
H]) and the experts' gate_up_proj ([E, 2, I, H]). A view is the buffer,
@offset and strides in elements, the same on every rank of a side; "-" is
a tensor alone and dense in its own buffer.

--scale N divides hidden and intermediate sizes, head dims and expert counts
by N (head counts stay); --layers L keeps the first L layers; --mtp adds
DeepSeek's multi-token-prediction layer (on the last stage).`,
		Example: `  # DeepSeek-V3, 128 trainer GPUs (EP16, expert-DP 2, PP4) to 128 generator GPUs (TP8, DP16)
  refit layouts --model deepseek-v3 --train tp=1,dp=32,pp=4,ep=16 --gen tp=8,dp=16
  # Qwen3-235B-A22B, 64 (TP2, CP2, DP4, PP4, EP16) to 64 (TP8, DP8)
  refit layouts --model qwen3-235b-a22b --train tp=2,cp=2,dp=4,pp=4,ep=16 --gen tp=8,dp=8
  # NeMo-RL's DeepSeek-V3: PP16 x EP16 to TP32 x DP8, as JSON
  refit layouts --model deepseek-v3 --train pp=16,dp=16,ep=16 --gen tp=32,dp=8 --json
  # a scaled model that fits 16 CPU ranks
  refit layouts --model llama-3.1-70b --scale 32 --train tp=2,pp=2,dp=2 --gen tp=8`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			l, err := modelLayouts(modelspec.Spec{Model: spec, Train: train, Gen: gen, Scale: int64(scale), Layers: layers, MTP: mtp})
			if err != nil {
				return err
			}
			if asJSON {
				return json.NewEncoder(cmd.OutOrStdout()).Encode(layoutsJSON(l))
			}
			return writeLayouts(cmd.OutOrStdout(), l)
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&spec, "model", "", "a built-in model, a config.json or a tensor list (JSON)")
	fs.StringVar(&train, "train", "", "trainer sizes, e.g. tp=2,cp=2,dp=4,pp=4,ep=16 (etp, first, last too)")
	fs.StringVar(&gen, "gen", "", "generator sizes, e.g. tp=8,dp=8 (ep too)")
	fs.IntVar(&scale, "scale", 1, "divide widths and expert counts by N")
	fs.IntVar(&layers, "layers", 0, "keep only the first L decoder layers (0: all)")
	fs.BoolVar(&mtp, "mtp", false, "add DeepSeek's multi-token-prediction layer")
	fs.BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

// sideRanks returns the communicator-local ranks [lo, hi) of a stage's
// side.
func sideRanks(s *model.Stage, side model.Side) (lo, hi int) {
	if side == model.Src {
		return 0, s.Trainers
	}
	return s.Trainers, s.Trainers + s.Generators
}

// meshText renders a layout's mesh and placements: "16x8[32-159] R,S0".
func meshText(l placement.Layout) string {
	return fmt.Sprintf("%v %s", l.Mesh(), placement.Format(l.Placements()))
}

// viewOf returns the part of t on the first rank of a side, and whether
// every rank of the side has the same view.
func viewOf(s *model.Stage, t *model.TensorLayout, side model.Side) (model.Part, bool) {
	lo, hi := sideRanks(s, side)
	first, _ := t.Part(side, lo)
	for r := lo + 1; r < hi; r++ {
		p, _ := t.Part(side, r)
		if p.Buffer != first.Buffer || p.View.Offset != first.View.Offset || !slices.Equal(p.View.Strides, first.View.Strides) {
			return first, false
		}
	}
	return first, true
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
	p, same := viewOf(s, t, side)
	if !t.Fused(side) && p.View.Dense() {
		return "-"
	}
	out := fmt.Sprintf("%s @%d %v", shortBuffer(t.Name, p.Buffer), p.View.Offset, p.View.ResolvedStrides(partShape(t, side, sideFirst(s, side))))
	if !same {
		out += " (rank 0 of the side; others differ)"
	}
	return out
}

func sideFirst(s *model.Stage, side model.Side) int { lo, _ := sideRanks(s, side); return lo }

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

func writeLayouts(w io.Writer, l *model.Layouts) error {
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
		fmt.Fprintln(tw, "  tensor\tshape\tdtype\tsrc\tsrc view\tdst\tdst view")
		for _, t := range s.Tensors {
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%s\t%s\n", t.Name, shapeText(t.Tensor), t.DType,
				meshText(t.Src), viewText(s, t, model.Src), meshText(t.Dst), viewText(s, t, model.Dst))
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
	_, err := fmt.Fprintf(w, "\ntotals: %d tensors, %d parameters, %d bytes; trainer ranks hold %s to %s, generator ranks %s to %s\n",
		len(m.Tensors), m.Params(), m.Bytes(), formatDecimal(float64(srcMin)), formatDecimal(float64(srcMax)),
		formatDecimal(float64(dstMin)), formatDecimal(float64(dstMax)))
	return err
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
}

type stageJSON struct {
	Stage   int    `json:"stage"`
	Layers  [2]int `json:"layers"`
	Members []int  `json:"members"`
	Tensors int    `json:"tensors"`
}

type layoutsOut struct {
	Model   string       `json:"model"`
	Train   string       `json:"train"`
	Gen     string       `json:"gen"`
	Stages  []stageJSON  `json:"stages"`
	Tensors []tensorJSON `json:"tensors"`
	Count   int          `json:"count"`
	Params  int64        `json:"params"`
	Bytes   int64        `json:"bytes"`
	Ranks   []rankRow    `json:"ranks"`
}

func layoutsJSON(l *model.Layouts) layoutsOut {
	out := layoutsOut{Model: l.Model.Name, Train: l.Trainer.String(), Gen: l.Generator.String(),
		Count: len(l.Model.Tensors), Params: l.Model.Params(), Bytes: l.Model.Bytes(), Ranks: rankRows(l)}
	side := func(s *model.Stage, t *model.TensorLayout, sd model.Side) sideJSON {
		lay := t.Layout(sd)
		p, _ := viewOf(s, t, sd)
		return sideJSON{Layout: lay.String(), Mesh: lay.Mesh().Shape(), Ranks: mesh.FormatRanks(lay.Mesh().Ranks()), Placements: placement.Format(lay.Placements()),
			Buffer: p.Buffer, Offset: p.View.Offset, Strides: p.View.ResolvedStrides(partShape(t, sd, sideFirst(s, sd)))}
	}
	for _, s := range l.Stages {
		out.Stages = append(out.Stages, stageJSON{Stage: s.Index, Layers: s.Layers, Members: s.Members, Tensors: len(s.Tensors)})
		for _, t := range s.Tensors {
			out.Tensors = append(out.Tensors, tensorJSON{Name: t.Name, Shape: t.Shape, LayoutShape: t.LayoutShape, DType: t.DType.String(),
				Kind: t.Kind.String(), Stage: s.Index, Src: side(s, t, model.Src), Dst: side(s, t, model.Dst)})
		}
	}
	return out
}
