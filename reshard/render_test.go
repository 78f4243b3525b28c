package reshard

import (
	"bytes"
	"encoding/json"
	"fmt"
	"testing"
)

// TestWriteJSON: the plan's JSON holds its fingerprint, world, bytes and
// every transfer as Transfer gives it.
func TestWriteJSON(t *testing.T) {
	src := layout(t, "8x4", "f32", "4", "S0", nil)
	dst := layout(t, "8x4", "f32", "2x2", "R,S0", seq(4, 4))
	p, err := NewPlan(src, dst, 8, Options{})
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := p.WriteJSON(&buf); err != nil {
		t.Fatal(err)
	}
	var got struct {
		Fingerprint string
		World       int
		Bytes       int64
		Transfers   []struct {
			Src, Dst      int
			Offset, Shape []int64
			Bytes         int64
			SrcAt         string `json:"src_at"`
			DstAt         string `json:"dst_at"`
		}
	}
	if err := json.Unmarshal(buf.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	if got.Fingerprint != fmt.Sprintf("%016x", p.Fingerprint()) || got.World != 8 || got.Bytes != p.totalBytes() || len(got.Transfers) != p.Len() {
		t.Fatalf("header %+v for a plan of %d transfers, %d bytes", got, p.Len(), p.totalBytes())
	}
	for i, g := range got.Transfers {
		tr := p.Transfer(i)
		if g.Src != tr.Src || g.Dst != tr.Dst || fmt.Sprint(g.Offset) != fmt.Sprint(tr.Box.Lo) || fmt.Sprint(g.Shape) != fmt.Sprint(tr.Box.Shape()) ||
			g.Bytes != tr.bytes() || g.SrcAt != tr.SrcAt.String() || g.DstAt != tr.DstAt.String() {
			t.Errorf("transfer %d: %+v, want %+v", i, g, tr)
		}
	}
}
