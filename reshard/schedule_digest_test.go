package reshard_test

import (
	"crypto/sha256"
	"encoding/hex"
	"testing"

	"github.com/m2n-dev/m2n/hier"
	"github.com/m2n-dev/m2n/internal/testutil/scheduletest"
	"github.com/m2n-dev/m2n/reshard"
	"github.com/m2n-dev/m2n/transport/transporttest"
)

// scheduleDigest is the SHA-256 of every route's schedule (every message
// in posting order: ranks, round, bytes, class, tensor, box and both sides'
// segments) for every conformance pair and arrangement, over flat,
// agbcast and hier (1, 2 and 4 domains, both balances), with default and
// with tiny chunks. It was computed with the Builder and routes of commit
// 79cde72 (before the Builder's bookkeeping became a tree, before SplitBox
// returned errors and the routes counted their messages first), and again
// when hier's schedule changed on purpose (issue 25: leaders rotated over
// the replicas, a receiver's share of a round; flat's
// and agbcast's schedules alone hash as before, d16a1cb9...; and again
// for hier's taper, its last chunks cut in four and placed in rounds of a
// quarter budget: 9f193d05... before; and for hier's chunks of half the
// network receive budget: 2c508307... before; and for hier's count rule
// cutting a shard's contributions into parts of whole chunks where the
// shard has fewer contributions than replicas: 6bda1d0c... before; and
// for its entry domains rotating over the call's pieces: 3454269b...
// before): schedules must stay byte-identical.
const scheduleDigest = "3be821e6844984594301dd828089b6b9d64eaa116782a3d3b6336f3a90ebcc11"

func TestSchedulesUnchanged(t *testing.T) {
	cases, err := transporttest.DefaultCases(13)
	if err != nil {
		t.Fatal(err)
	}
	type build struct {
		route reshard.Route
		dom   int
	}
	var builds []build
	for _, dom := range []int{0, 1, 2, 4} {
		builds = append(builds, build{reshard.Flat, dom}, build{reshard.AllGatherBroadcast, dom})
		if dom == 0 {
			continue
		}
		for _, bal := range []hier.Balance{hier.BalanceCount, hier.BalanceBytes} {
			builds = append(builds, build{hier.Hier{Balance: bal}, dom})
		}
	}
	h := sha256.New()
	for _, c := range cases {
		world := c.World()
		plan, err := reshard.NewPlan(c.Src, c.Dst, world, reshard.Options{StripeReplicas: true})
		if err != nil {
			t.Fatal(err)
		}
		optsList := []reshard.ScheduleOptions{reshard.DefaultScheduleOptions, {ChunkBytes: 1 << 10, StagingBytes: 1 << 13}}
		if c.Src.Bytes() <= 64<<10 {
			optsList = append(optsList, reshard.ScheduleOptions{ChunkBytes: 24, StagingBytes: 8 * 24})
		}
		for _, bd := range builds {
			var topo reshard.Topology
			if bd.dom > 0 {
				n := c.Dst.Mesh().Size()
				if topo, err = hier.Domains(make([]int, world), c.Src, c.Dst, hier.DomainSizes{Dst: (n + bd.dom - 1) / bd.dom}); err != nil {
					t.Fatal(err)
				}
			}
			for _, opts := range optsList {
				s, err := bd.route.Schedule([]*reshard.Plan{plan, plan}, topo, opts)
				if err != nil {
					t.Fatalf("%v: %v", c, err)
				}
				scheduletest.Digest(h, s)
			}
		}
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != scheduleDigest {
		t.Errorf("schedules changed: digest %s, want %s", got, scheduleDigest)
	}
}
