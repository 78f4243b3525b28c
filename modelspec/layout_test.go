package modelspec

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/m2n-dev/m2n/dtype"
	"github.com/m2n-dev/m2n/mesh"
	"github.com/m2n-dev/m2n/placement"
)

// TestWriteLayout: 13 rows on 4 ranks split as torch.chunk does (4, 4, 4,
// 1), in the JSON and in the table, with each rank's bytes.
func TestWriteLayout(t *testing.T) {
	m, err := mesh.New([]int{4}, []int{3, 2, 1, 0})
	if err != nil {
		t.Fatal(err)
	}
	l, err := placement.ParseLayout("13x2", dtype.F32, m, "S0")
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := WriteLayoutJSON(&buf, l); err != nil {
		t.Fatal(err)
	}
	var got struct{ Ranks []meshPart }
	if err := json.Unmarshal(buf.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	rows, offs := []int64{4, 4, 4, 1}, []int64{0, 4, 8, 12}
	if len(got.Ranks) != 4 {
		t.Fatalf("%d rank parts, want 4:\n%s", len(got.Ranks), buf.String())
	}
	for i, r := range got.Ranks {
		if r.Rank != 3-i || r.Coord[0] != i || r.Shape[0] != rows[i] || r.Shape[1] != 2 || r.Offset[0] != offs[i] {
			t.Errorf("rank part %d: %+v", i, r)
		}
	}
	buf.Reset()
	if err := WriteLayout(&buf, l); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{l.String(), "rank  coord  shape  offset  bytes", "0    [3]    1x2  [12 0]      8"} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, buf.String())
		}
	}
}
