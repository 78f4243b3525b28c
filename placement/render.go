package placement

import (
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"
)

// rankPart is one rank's local part of a layout, as WriteJSON writes it.
type rankPart struct {
	Coord  []int   `json:"coord"`
	Rank   int     `json:"rank"`
	Shape  []int64 `json:"shape"`
	Offset []int64 `json:"offset"`
}

// rankParts returns every rank's part, in mesh order.
func (l Layout) rankParts() []rankPart {
	m := l.Mesh()
	rows := make([]rankPart, m.Size())
	for i := range rows {
		coord := m.Coord(i, nil)
		shape, offset := l.LocalShapeOffset(coord)
		rows[i] = rankPart{Coord: coord, Rank: m.RankAt(i), Shape: shape, Offset: offset}
	}
	return rows
}

// WriteJSON writes every rank's local part, in mesh order, as one JSON
// object {"ranks": [{coord, rank, shape, offset}, ...]}, as `refit layout
// --json` prints it.
func (l Layout) WriteJSON(w io.Writer) error {
	return json.NewEncoder(w).Encode(struct {
		Ranks []rankPart `json:"ranks"`
	}{l.rankParts()})
}

// WriteTable writes the layout and a table of every rank's local part:
// its mesh coordinate, shape, offset in the global tensor and bytes.
func (l Layout) WriteTable(w io.Writer) error {
	if _, err := fmt.Fprintf(w, "%v\n\n", l); err != nil {
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "rank\tcoord\tshape\toffset\tbytes\t")
	for _, r := range l.rankParts() {
		fmt.Fprintf(tw, "%d\t%v\t%s\t%v\t%d\t\n", r.Rank, r.Coord, FormatShape(r.Shape), r.Offset, l.LocalBytes(r.Rank))
	}
	return tw.Flush()
}
