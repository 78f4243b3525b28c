package model

import (
	"testing"

	"github.com/m2n-dev/m2n/reshard"
)

// TestPlansCompatible plans every tensor of every scaledCase with the
// real planner: each source and destination layout pair is compatible, and
// every generator rank receives exactly its part.
func TestPlansCompatible(t *testing.T) {
	for _, tc := range scaledCases {
		l := mustLayouts(t, tc.spec, LoadOptions{Scale: tc.scale, MTP: tc.spec == "deepseek-v3"}, tc.train, tc.gen)
		n := 0
		for _, s := range l.Stages {
			world := len(s.Members)
			for _, x := range s.Tensors {
				p, err := reshard.NewPlan(x.Src, x.Dst, world, reshard.Options{})
				if err != nil {
					t.Fatalf("%s stage %d %s: %v", tc.spec, s.Index, x.Name, err)
				}
				for r := s.Trainers; r < world; r++ {
					var recv int64
					for _, i := range p.Recvs(r) {
						recv += p.Transfer(int(i)).DstAt.Bytes()
					}
					if recv != x.Dst.LocalBytes(r) {
						t.Fatalf("%s %s: rank %d receives %d bytes, holds %d", tc.spec, x.Name, r, recv, x.Dst.LocalBytes(r))
					}
				}
				n++
			}
		}
		if n < len(l.Model.Tensors) {
			t.Errorf("%s: planned %d entries for %d tensors", tc.spec, n, len(l.Model.Tensors))
		}
	}
}
