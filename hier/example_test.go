package hier_test

import (
	"fmt"

	"github.com/m2n-dev/m2n/dtype"
	"github.com/m2n-dev/m2n/hier"
	"github.com/m2n-dev/m2n/mesh"
	"github.com/m2n-dev/m2n/placement"
	"github.com/m2n-dev/m2n/reshard"
)

// Four source ranks in rows (Shard(0)) to a DP2 x TP2 generator ([R, S0]),
// a 128-byte tensor. As two domains of two ranks (one DP replica each),
// every domain needs the whole tensor: it crosses the network once per
// domain. As one domain of four, it crosses once, into leaders that fan
// it out to the other replica over the local fabric.
func ExampleHier_Schedule() {
	trainer, _ := mesh.Interval([]int{4}, 0)
	generator, _ := mesh.Interval([]int{2, 2}, 4)
	src, _ := placement.ParseLayout("8x4", dtype.F32, trainer, "S0")
	dst, _ := placement.ParseLayout("8x4", dtype.F32, generator, "R,S0")
	plan, _ := reshard.NewPlan(src, dst, 8, reshard.Options{})
	host := make([]int, 8) // every rank on one host
	for _, domains := range []int{2, 4} {
		topo, _ := hier.Domains(host, src, dst, hier.DomainSizes{Dst: domains})
		sched, _ := hier.Hier{}.Schedule([]*reshard.Plan{plan}, topo, reshard.DefaultScheduleOptions)
		var net, local int64
		for _, m := range sched.Messages {
			if m.Class == reshard.LinkNetwork {
				net += m.Bytes
			} else {
				local += m.Bytes
			}
		}
		fmt.Printf("domains of %d ranks: %d rounds, %d bytes over the network, %d over the local fabric\n", domains, sched.Rounds, net, local)
	}
	// Output:
	// domains of 2 ranks: 3 rounds, 256 bytes over the network, 0 over the local fabric
	// domains of 4 ranks: 3 rounds, 128 bytes over the network, 128 over the local fabric
}
