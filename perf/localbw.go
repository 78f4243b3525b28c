package perf

import (
	"context"
	"slices"
	"time"

	"github.com/m2n-dev/m2n/refit"
	"github.com/m2n-dev/m2n/session"
	"github.com/m2n-dev/m2n/transport"
)

// localBandwidth measures the local-fabric bandwidth per rank: the
// destination ranks (dst) of each domain pass a buffer around a ring
// inside the domain over the call's transport (local traffic runs at the
// real speed under emulation), all domains at once, and the slowest rank's
// rate counts. Every rank of s takes part.
func localBandwidth(s *session.Session, call *refit.Call, dst []int) (float64, error) {
	const n = 8 << 20
	topo := call.Topology()
	var peers []int
	if slices.Contains(dst, s.Rank()) {
		for _, r := range dst {
			if topo.Domain[r] == topo.Domain[s.Rank()] {
				peers = append(peers, r)
			}
		}
	}
	mem := s.Memory()
	send, err := mem.Alloc(n)
	if err != nil {
		return 0, err
	}
	defer mem.Free(send)
	recv, err := mem.Alloc(n)
	if err != nil {
		return 0, err
	}
	defer mem.Free(recv)
	tr := call.Transport()
	best := 0.0
	for it := 0; it < 3; it++ {
		if err := s.Barrier(context.Background()); err != nil {
			return 0, err
		}
		t0 := time.Now()
		if len(peers) > 1 {
			me := slices.Index(peers, s.Rank())
			next, prev := peers[(me+1)%len(peers)], peers[(me+len(peers)-1)%len(peers)]
			pend, err := tr.Start([]transport.Op{{Peer: prev, Buf: recv, Len: n}, {Peer: next, Send: true, Buf: send, Len: n}})
			if err != nil {
				return 0, err
			}
			ctx, cancel := context.WithTimeout(context.Background(), s.Options().Timeout)
			err = pend.Wait(ctx)
			cancel()
			if err != nil {
				return 0, err
			}
		}
		slow, _, err := maxOver(s, time.Since(t0).Seconds())
		if err != nil {
			return 0, err
		}
		best = max(best, n/slow)
	}
	return best, nil
}
