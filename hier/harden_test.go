package hier

import (
	"strings"
	"testing"

	"github.com/m2n-dev/m2n/dtype"
	"github.com/m2n-dev/m2n/mesh"
	"github.com/m2n-dev/m2n/placement"
	"github.com/m2n-dev/m2n/reshard"
)

// TestDomainsShortHostList is issue 17 case 12: a host list shorter than
// the meshes need indexed out of range.
func TestDomainsShortHostList(t *testing.T) {
	src := layoutOf(t, []int64{8}, []int{2}, []int{0, 1}, "S0")
	dst := layoutOf(t, []int64{8}, []int{2}, []int{2, 3}, "S0")
	for _, host := range [][]int{{0}, nil, {0, 0, 0}} {
		_, err := Domains(host, src, dst, DomainSizes{Dst: 1})
		if err == nil || !strings.Contains(err.Error(), "outside a communicator of") || !strings.Contains(err.Error(), "host list") {
			t.Errorf("Domains(%v) = %v", host, err)
		}
	}
	if _, err := Domains([]int{0, 0, 0, 0}, src, dst, DomainSizes{Dst: 1}); err != nil {
		t.Error(err)
	}
	if n := DomainCount(reshard.Topology{Domain: []int{0, 0}}, dst); n != 2 {
		t.Errorf("DomainCount over ranks the topology does not name = %d, want 2", n)
	}
}

// TestRouteCountsFirst is issue 17 case 11 on the hierarchical route: a
// 2^58-element f64 tensor is refused with the message count before any
// box is cut, and so are 1-byte chunks of a tensor too large for them.
func TestRouteCountsFirst(t *testing.T) {
	src := layoutOfDT(t, []int64{1 << 58}, dtype.F64, []int{2}, []int{0, 1}, "S0")
	dst := layoutOfDT(t, []int64{1 << 58}, dtype.F64, []int{2, 2}, []int{2, 3, 4, 5}, "R,S0")
	p, err := reshard.NewPlan(src, dst, 6, reshard.Options{})
	if err != nil {
		t.Fatal(err)
	}
	topo, err := Domains(make([]int, 6), src, dst, DomainSizes{Dst: 2})
	if err != nil {
		t.Fatal(err)
	}
	for _, bal := range []Balance{BalanceCount, BalanceBytes} {
		_, err := Hier{Balance: bal}.Schedule([]*reshard.Plan{p}, topo, reshard.DefaultScheduleOptions)
		if err == nil || !strings.Contains(err.Error(), "hier schedule") || !strings.Contains(err.Error(), "want at most 8388608 messages") {
			t.Errorf("%v: %v", bal, err)
		}
	}
}

func layoutOfDT(t *testing.T, shape []int64, dt dtype.DType, ms []int, ranks []int, pl string) placement.Layout {
	t.Helper()
	m, err := mesh.New(ms, ranks)
	if err != nil {
		t.Fatal(err)
	}
	ps, _ := placement.Parse(pl)
	l, err := placement.NewLayout(shape, dt, m, ps)
	if err != nil {
		t.Fatal(err)
	}
	return l
}
