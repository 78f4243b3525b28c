package reshard

import (
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"
)

// WriteTable renders the plan as a readable table: a header with the
// layouts and fingerprint, one row per transfer (ranks, global box, bytes,
// where the bytes sit on each side) and the bytes each rank sends and
// receives. maxRows bounds the transfer rows printed (0 prints all); totals
// always cover the whole plan.
func (p *Plan) WriteTable(w io.Writer, maxRows int) error {
	ew := &errWriter{w: w}
	fmt.Fprintf(ew, "source:      %v\n", p.src)
	fmt.Fprintf(ew, "destination: %v\n", p.dst)
	fmt.Fprintf(ew, "world %d, stripe replicas %v, fingerprint %016x\n", p.world, p.opts.StripeReplicas, p.fingerprint)
	fmt.Fprintf(ew, "%d transfers, %d bytes\n\n", p.Len(), p.totalBytes())
	tw := tabwriter.NewWriter(ew, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "#\tsrc\tdst\tbox\tbytes\t\tsource at\tdestination at\t")
	n := p.Len()
	if maxRows > 0 && n > maxRows {
		n = maxRows
	}
	for i := 0; i < n; i++ {
		t := p.Transfer(i)
		note := ""
		if t.Src == t.Dst {
			note = "local"
		}
		fmt.Fprintf(tw, "%d\t%d\t%d\t%v\t%d\t%s\t%v\t%v\t\n", i, t.Src, t.Dst, t.Box, t.bytes(), note, t.SrcAt, t.DstAt)
	}
	tw.Flush()
	if n < p.Len() {
		fmt.Fprintf(ew, "... %d more transfers\n", p.Len()-n)
	}
	sent, recv := p.rankBytes()
	fmt.Fprintln(ew)
	tw = tabwriter.NewWriter(ew, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "rank\tsends\treceives\ttransfers out\ttransfers in\t")
	for r := 0; r < p.world; r++ {
		if !p.src.Mesh().Contains(r) && !p.dst.Mesh().Contains(r) {
			continue
		}
		fmt.Fprintf(tw, "%d\t%d\t%d\t%d\t%d\t\n", r, sent[r], recv[r], len(p.sends(r)), p.dstStart[r+1]-p.dstStart[r])
	}
	tw.Flush()
	return ew.err
}

type errWriter struct {
	w   io.Writer
	err error
}

func (e *errWriter) Write(b []byte) (int, error) {
	if e.err != nil {
		return 0, e.err
	}
	n, err := e.w.Write(b)
	e.err = err
	return n, err
}

type transferJSON struct {
	Src    int     `json:"src"`
	Dst    int     `json:"dst"`
	Offset []int64 `json:"offset"`
	Shape  []int64 `json:"shape"`
	Bytes  int64   `json:"bytes"`
	SrcAt  string  `json:"src_at"`
	DstAt  string  `json:"dst_at"`
}

// WriteJSON writes the plan as one JSON object: its fingerprint (hex),
// world, bytes and every transfer (source and destination rank, the box's
// offset and shape, bytes, and where the bytes sit on each side), as
// `refit plan --json` prints it.
func (p *Plan) WriteJSON(w io.Writer) error {
	out := struct {
		Fingerprint string         `json:"fingerprint"`
		World       int            `json:"world"`
		Bytes       int64          `json:"bytes"`
		Transfers   []transferJSON `json:"transfers"`
	}{Fingerprint: fmt.Sprintf("%016x", p.Fingerprint()), World: p.World(), Bytes: p.totalBytes(),
		Transfers: make([]transferJSON, p.Len())}
	for i := range out.Transfers {
		t := p.Transfer(i)
		out.Transfers[i] = transferJSON{Src: t.Src, Dst: t.Dst, Offset: t.Box.Lo, Shape: t.Box.Shape(),
			Bytes: t.bytes(), SrcAt: t.SrcAt.String(), DstAt: t.DstAt.String()}
	}
	return json.NewEncoder(w).Encode(out)
}
