package bounds

import (
	"bytes"
	"strings"
	"testing"

	"github.com/m2n-dev/m2n/dtype"
	"github.com/m2n-dev/m2n/hier"
	"github.com/m2n-dev/m2n/mesh"
	"github.com/m2n-dev/m2n/placement"
)

// TestWriteTable: the paper's single-layer experiment prints its figures
// exactly (hier 8.96 ms), and auto picks hier.
func TestWriteTable(t *testing.T) {
	p, err := Uniform(7168e6, 16, 8, 2, 1, 16<<20)
	if err != nil {
		t.Fatal(err)
	}
	fab := Fabric{NetBW: 50e9, LocalBW: 900e9, Latency: 20e-6}
	var b bytes.Buffer
	if err := WriteTable(&b, p, fab, Choose(p, fab)); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"B = 7.168 GB (7168000000 bytes), Ns = 16, rho = 2, 16 destination ranks in 1 domain(s)",
		"flat     17.92 ms", "agbcast  143.36 ms", "hier     8.96 ms", "auto: hier predicts the least time"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, b.String())
		}
	}
}

// TestFromLayouts: 16 sources to TP8 x DP4 in one domain (the default).
func TestFromLayouts(t *testing.T) {
	layout := func(ms []int, start int, pl string) placement.Layout {
		m, err := mesh.Interval(ms, start)
		if err != nil {
			t.Fatal(err)
		}
		ps, err := placement.Parse(pl)
		if err != nil {
			t.Fatal(err)
		}
		l, err := placement.NewLayout([]int64{256, 2048, 7168}, dtype.BF16, m, ps)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	src, dst := layout([]int{16}, 0, "S0"), layout([]int{4, 8}, 16, "R,S1")
	p, err := FromLayouts(src, dst, 48, false, hier.DomainSizes{}, 16<<20)
	if err != nil {
		t.Fatal(err)
	}
	if p.Bytes != 256*2048*7168*2 || p.Sources != 16 || p.Rho != 4 || len(p.Domains) != 1 || p.Domains[0].Ranks != 32 {
		t.Errorf("derived %+v", p)
	}
}
