package reshard

import (
	"fmt"
	"testing"
)

// BenchmarkPlanDeepSeekExperts plans a DeepSeek-V3 expert tensor
// (256x2048x7168 bf16, 7 GiB) from EP-sharded trainer ranks to TP8 x DP
// generator ranks at growing scale, and reports the cost per transfer, which
// must stay flat as ranks grow: the sweep's cost follows the transfers, not
// M*N.
func BenchmarkPlanDeepSeekExperts(b *testing.B) {
	cases := []struct {
		name           string
		srcMesh, srcPl string
		dstMesh, dstPl string
	}{
		{"256+256 EP256 to DP32xTP8", "256", "S0", "32x8", "R,S1"},
		{"512+512 EP256xDP2 to DP64xTP8", "256x2", "S0,R", "64x8", "R,S1"},
		{"1024+1024 EP256xDP4 to DP128xTP8", "256x4", "S0,R", "128x8", "R,S1"},
		{"2048+2048 EP256xDP8 to DP256xTP8 (4096 ranks)", "256x8", "S0,R", "256x8", "R,S1"},
		{"2048+2048 EP256xTP8 to DP256xTP8 (4096 ranks, 2-D source)", "256x8", "S0,S2", "256x8", "R,S1"},
	}
	for _, tc := range cases {
		src := layout(b, "256x2048x7168", "bf16", tc.srcMesh, tc.srcPl, nil)
		dst := layout(b, "256x2048x7168", "bf16", tc.dstMesh, tc.dstPl, seq(src.Mesh().Size(), src.Mesh().Size()))
		world := src.Mesh().Size() * 2
		b.Run(tc.name, func(b *testing.B) {
			var p *Plan
			for b.Loop() {
				var err error
				p, err = NewPlan(src, dst, world, Options{StripeReplicas: true})
				if err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(p.Len()), "ns/transfer")
			b.ReportMetric(float64(p.Len()), "transfers")
		})
	}
}

// BenchmarkTransfer measures materializing one transfer (box and both
// strided descriptors) from the compact plan.
func BenchmarkTransfer(b *testing.B) {
	src := layout(b, "256x2048x7168", "bf16", "256", "S0", nil)
	dst := layout(b, "256x2048x7168", "bf16", "32x8", "R,S1", seq(256, 256))
	p, err := NewPlan(src, dst, 512, Options{})
	if err != nil {
		b.Fatal(err)
	}
	i := 0
	for b.Loop() {
		t := p.Transfer(i % p.Len())
		if t.bytes() == 0 {
			b.Fatal(fmt.Sprint("empty transfer ", i))
		}
		i++
	}
}
