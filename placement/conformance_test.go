package placement_test

import (
	"encoding/json"
	"os"
	"slices"
	"testing"

	"github.com/m2n-dev/m2n/dtype"
	"github.com/m2n-dev/m2n/mesh"
	"github.com/m2n-dev/m2n/placement"
)

// conformanceFile holds per-rank local shapes and offsets that PyTorch
// itself computed (see its "source" field); the layout algebra must match
// every case.
const conformanceFile = "../testdata/dtensor_layouts.json"

type conformanceCase struct {
	Global     []int64  `json:"global"`
	Mesh       []int    `json:"mesh"`
	Placements []string `json:"placements"`
	Ranks      []struct {
		Coord  []int   `json:"coord"`
		Shape  []int64 `json:"shape"`
		Offset []int64 `json:"offset"`
	} `json:"ranks"`
}

func TestDTensorConformance(t *testing.T) {
	raw, err := os.ReadFile(conformanceFile)
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Source string            `json:"source"`
		Cases  []conformanceCase `json:"cases"`
	}
	if err := json.Unmarshal(raw, &file); err != nil {
		t.Fatal(err)
	}
	if len(file.Cases) < 300 {
		t.Fatalf("conformance file holds %d cases, want the full set of 300", len(file.Cases))
	}
	checked := 0
	for i, c := range file.Cases {
		m, err := mesh.Interval(c.Mesh, 0)
		if err != nil {
			t.Fatalf("case %d: %v", i, err)
		}
		var ps []placement.Placement
		for _, s := range c.Placements {
			p, err := placement.Parse(s)
			if err != nil {
				t.Fatalf("case %d: %v", i, err)
			}
			ps = append(ps, p...)
		}
		l, err := placement.NewLayout(c.Global, dtype.F32, m, ps)
		if err != nil {
			t.Fatalf("case %d (%v on %v %v): %v", i, c.Global, c.Mesh, c.Placements, err)
		}
		if len(c.Ranks) != m.Size() {
			t.Fatalf("case %d lists %d ranks for a mesh of %d", i, len(c.Ranks), m.Size())
		}
		for j, r := range c.Ranks {
			if want := m.Coord(j, nil); !slices.Equal(r.Coord, want) {
				t.Fatalf("case %d: rank %d has coord %v, want row-major %v", i, j, r.Coord, want)
			}
			shape, offset := l.LocalShapeOffset(r.Coord)
			if !slices.Equal(shape, r.Shape) || !slices.Equal(offset, r.Offset) {
				t.Errorf("case %d: %v on mesh %v %v coord %v: got shape %v offset %v, torch says shape %v offset %v",
					i, c.Global, c.Mesh, c.Placements, r.Coord, shape, offset, r.Shape, r.Offset)
			}
			checked++
		}
	}
	t.Logf("matched %d ranks over %d cases from %s", checked, len(file.Cases), file.Source)
}
