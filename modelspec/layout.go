package modelspec

import (
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/m2n-dev/m2n/placement"
)

// This file describes one layout for people (WriteLayout) and programs
// (WriteLayoutJSON), as refit layout prints it.

// meshPart is one rank's local part of a layout, as WriteLayoutJSON
// writes it.
type meshPart struct {
	Coord  []int   `json:"coord"`
	Rank   int     `json:"rank"`
	Shape  []int64 `json:"shape"`
	Offset []int64 `json:"offset"`
}

// meshParts returns every rank's part of l, in mesh order, with the local
// shape and global offset as DTensor reports them.
func meshParts(l placement.Layout) []meshPart {
	m := l.Mesh()
	rows := make([]meshPart, m.Size())
	for i := range rows {
		coord := m.Coord(i, nil)
		shape, offset := l.LocalShapeOffset(coord)
		rows[i] = meshPart{Coord: coord, Rank: m.RankAt(i), Shape: shape, Offset: offset}
	}
	return rows
}

// WriteLayoutJSON writes every rank's local part of l, in mesh order, as
// one JSON object {"ranks": [{coord, rank, shape, offset}, ...]}, as
// `refit layout --json` prints it.
func WriteLayoutJSON(w io.Writer, l placement.Layout) error {
	return json.NewEncoder(w).Encode(struct {
		Ranks []meshPart `json:"ranks"`
	}{meshParts(l)})
}

// WriteLayout writes l and a table of every rank's local part: its mesh
// coordinate, shape, offset in the global tensor and bytes, as `refit
// layout` prints it.
func WriteLayout(w io.Writer, l placement.Layout) error {
	if _, err := fmt.Fprintf(w, "%v\n\n", l); err != nil {
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "rank\tcoord\tshape\toffset\tbytes\t")
	for _, r := range meshParts(l) {
		fmt.Fprintf(tw, "%d\t%v\t%s\t%v\t%d\t\n", r.Rank, r.Coord, placement.FormatShape(r.Shape), r.Offset, l.LocalBytes(r.Rank))
	}
	return tw.Flush()
}
