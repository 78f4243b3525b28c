package reshard_test

import (
	"testing"

	"github.com/m2n-dev/m2n/hier"
	"github.com/m2n-dev/m2n/reshard"
	"github.com/m2n-dev/m2n/transport/transporttest"
)

// TestBuilderOracleConformance builds every route's schedule for every
// conformance pair, in every rank arrangement (and both colocated), with
// default staging and with tiny chunks that make many rounds, and checks
// every message's round against the old round-by-round Builder: flat,
// agbcast, and hier over 1, 2 and 4 destination domains with both leader
// balances.
func TestBuilderOracleConformance(t *testing.T) {
	cases, err := transporttest.DefaultCases(13)
	if err != nil {
		t.Fatal(err)
	}
	colocated, err := transporttest.ColocatedCases(transporttest.DefaultPairs())
	if err != nil {
		t.Fatal(err)
	}
	cases = append(cases, colocated...)
	type build struct {
		name  string
		route reshard.Route
		dom   int // destination domains, 0: a domain per rank
	}
	builds := []build{{"flat", reshard.Flat, 0}, {"agbcast", reshard.AllGatherBroadcast, 0}}
	for _, dom := range []int{1, 2, 4} {
		builds = append(builds, build{"flat", reshard.Flat, dom}, build{"agbcast", reshard.AllGatherBroadcast, dom})
		for _, bal := range []hier.Balance{hier.BalanceCount, hier.BalanceBytes} {
			builds = append(builds, build{"hier " + bal.String(), hier.Hier{Balance: bal}, dom})
		}
	}
	stop := reshard.WatchBuilders()
	defer stop()
	schedules := 0
	for _, c := range cases {
		world := c.World()
		plan, err := reshard.NewPlan(c.Src, c.Dst, world, reshard.Options{})
		if err != nil {
			t.Fatal(err)
		}
		striped, err := reshard.NewPlan(c.Src, c.Dst, world, reshard.Options{StripeReplicas: true})
		if err != nil {
			t.Fatal(err)
		}
		optsList := []reshard.ScheduleOptions{reshard.DefaultScheduleOptions, {ChunkBytes: 1 << 10, StagingBytes: 1 << 14}}
		if c.Src.Bytes() <= 64<<10 {
			optsList = append(optsList, reshard.ScheduleOptions{ChunkBytes: 24, StagingBytes: 8 * 24}, reshard.ScheduleOptions{ChunkBytes: 40, StagingBytes: 320})
		}
		for _, bd := range builds {
			var topo reshard.Topology
			if bd.dom > 0 {
				n := c.Dst.Mesh().Size()
				topo, err = hier.Domains(make([]int, world), c.Src, c.Dst, hier.DomainSizes{Dst: (n + bd.dom - 1) / bd.dom})
				if err != nil {
					t.Fatal(err)
				}
			}
			for _, opts := range optsList {
				for _, p := range []*reshard.Plan{plan, striped} {
					if _, err := bd.route.Schedule([]*reshard.Plan{p, p}, topo, opts); err != nil {
						t.Fatalf("%v, %s, %d domains, chunk %d: %v", c, bd.name, bd.dom, opts.ChunkBytes, err)
					}
					schedules++
				}
			}
		}
	}
	n, err := stop()
	if err != nil {
		t.Fatal(err)
	}
	if n < 100000 {
		t.Errorf("only %d messages compared", n)
	}
	t.Logf("%d schedules, %d messages placed as the old Builder places them", schedules, n)
}
