package hier

import (
	"fmt"
	"testing"

	"github.com/m2n-dev/m2n/reshard"
)

// traffic sums a schedule's bytes per rank and link class.
func traffic(s *reshard.Schedule) (sent, recv map[int][3]int64) {
	sent, recv = map[int][3]int64{}, map[int][3]int64{}
	for _, m := range s.Messages {
		a, b := sent[m.Src], recv[m.Dst]
		a[m.Class] += m.Bytes
		b[m.Class] += m.Bytes
		sent[m.Src], recv[m.Dst] = a, b
	}
	return sent, recv
}

// TestAccounting checks the paper's claims on schedules: with hier the
// sources inject the unique bytes B exactly once and each destination
// domain receives B once over the network; with flat the sources inject
// rho*B; with agbcast the root injects B once and every destination
// receives the whole tensor.
func TestAccounting(t *testing.T) {
	for _, tc := range []struct{ rho, tp, domains int }{{2, 2, 1}, {4, 2, 1}, {4, 2, 2}, {8, 2, 4}, {4, 4, 2}} {
		t.Run(fmt.Sprintf("rho%d_tp%d_domains%d", tc.rho, tc.tp, tc.domains), func(t *testing.T) {
			shape := []int64{64, 48}
			m, n := 4, tc.rho*tc.tp
			src := layoutOf(t, shape, []int{m}, seq(0, m), "S0")
			dst := layoutOf(t, shape, []int{tc.rho, tc.tp}, seq(m, n), "R,S1")
			B := int64(64 * 48 * 2)
			world := m + n
			plan, err := reshard.NewPlan(src, dst, world, reshard.Options{})
			if err != nil {
				t.Fatal(err)
			}
			topo, err := Domains(make([]int, world), src, dst, DomainSizes{Dst: n / tc.domains})
			if err != nil {
				t.Fatal(err)
			}
			opts := reshard.ScheduleOptions{ChunkBytes: 512, StagingBytes: 8 << 10}
			hs, err := Hier{}.Schedule([]*reshard.Plan{plan}, topo, opts)
			if err != nil {
				t.Fatal(err)
			}
			sent, recv := traffic(hs)
			var inject int64
			for r := 0; r < m; r++ {
				inject += sent[r][reshard.LinkNetwork] + sent[r][reshard.LinkLocal]
			}
			if inject != B {
				t.Errorf("hier: sources inject %d bytes, want B = %d", inject, B)
			}
			perDomain := map[int]int64{}
			local := map[int]int64{}
			for r := m; r < world; r++ {
				perDomain[topo.Domain[r]] += recv[r][reshard.LinkNetwork]
				local[topo.Domain[r]] += recv[r][reshard.LinkLocal]
			}
			if len(perDomain) != tc.domains {
				t.Fatalf("%d destination domains, want %d", len(perDomain), tc.domains)
			}
			rd := int64(tc.rho / tc.domains)
			for d, got := range perDomain {
				if got != B {
					t.Errorf("hier: domain %d receives %d network bytes, want B = %d", d, got, B)
				}
				if local[d] != (rd-1)*B {
					t.Errorf("hier: domain %d replicates %d bytes locally, want (rho_d-1)*B = %d", d, local[d], (rd-1)*B)
				}
			}

			fs, err := reshard.Flat.Schedule([]*reshard.Plan{plan}, topo, opts)
			if err != nil {
				t.Fatal(err)
			}
			sent, _ = traffic(fs)
			inject = 0
			for r := 0; r < m; r++ {
				inject += sent[r][reshard.LinkNetwork]
			}
			if inject != int64(tc.rho)*B {
				t.Errorf("flat: sources inject %d bytes, want rho*B = %d", inject, int64(tc.rho)*B)
			}

			as, err := reshard.AllGatherBroadcast.Schedule([]*reshard.Plan{plan}, topo, opts)
			if err != nil {
				t.Fatal(err)
			}
			sent, recv = traffic(as)
			// the root's bytes to destinations: the first hop of the chain.
			var rootOut int64
			for _, msg := range as.Messages {
				if msg.Src == 0 && msg.Dst >= m {
					rootOut += msg.Bytes
				}
			}
			if rootOut != B {
				t.Errorf("agbcast: the root sends %d bytes to the destinations, want B = %d", rootOut, B)
			}
			for r := m; r < world; r++ {
				if got := recv[r][reshard.LinkNetwork] + recv[r][reshard.LinkLocal]; got != B {
					t.Errorf("agbcast: destination %d receives %d bytes, want the whole tensor %d", r, got, B)
				}
			}
		})
	}
}

func seq(start, n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = start + i
	}
	return out
}
