package hier

import (
	"testing"

	"github.com/m2n-dev/m2n/placement"
	"github.com/m2n-dev/m2n/reshard"
)

// TestLeadersRotate: eight tensors, each replicated on all eight ranks of
// one destination domain and sent by one source, have eight different
// leaders, so that every rank fans out one tensor: with the paper's rule
// alone the domain's first rank would lead (and fan out) all eight.
func TestLeadersRotate(t *testing.T) {
	for _, bal := range []Balance{BalanceCount, BalanceBytes} {
		shape := []int64{16, 16}
		src := layoutOf(t, shape, []int{1}, []int{0}, "R")
		dst := layoutOf(t, shape, []int{8}, seq(1, 8), "R")
		world := 9
		var plans []*reshard.Plan
		for i := 0; i < 8; i++ {
			p, err := reshard.NewPlan(src, dst, world, reshard.Options{})
			if err != nil {
				t.Fatal(err)
			}
			plans = append(plans, p)
		}
		topo, err := Domains(make([]int, world), src, dst, DomainSizes{Dst: 8})
		if err != nil {
			t.Fatal(err)
		}
		s, err := Hier{Balance: bal}.Schedule(plans, topo, reshard.ScheduleOptions{ChunkBytes: 1 << 10, StagingBytes: 8 << 10})
		if err != nil {
			t.Fatal(err)
		}
		sent, _ := traffic(s)
		tensor := int64(16 * 16 * 2)
		for r := 1; r < world; r++ {
			if got, want := sent[r][reshard.LinkLocal], 7*tensor; got != want {
				t.Errorf("balance %s: rank %d fans out %d bytes, want %d (one tensor to seven replicas)", bal, r, got, want)
			}
		}
	}
}

// schedule1 schedules one tensor's hier route.
func schedule1(t *testing.T, src, dst placement.Layout, world int, sizes DomainSizes, opts reshard.ScheduleOptions) *reshard.Schedule {
	t.Helper()
	plan, err := reshard.NewPlan(src, dst, world, reshard.Options{})
	if err != nil {
		t.Fatal(err)
	}
	topo, err := Domains(make([]int, world), src, dst, sizes)
	if err != nil {
		t.Fatal(err)
	}
	s, err := Hier{}.Schedule([]*reshard.Plan{plan}, topo, opts)
	if err != nil {
		t.Fatal(err)
	}
	return s
}
