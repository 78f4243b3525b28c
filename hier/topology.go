package hier

import (
	"fmt"

	"github.com/m2n-dev/m2n/placement"
	"github.com/m2n-dev/m2n/reshard"
)

// DomainSizes override the domains a runtime discovers. A size of 0 keeps
// the discovered domains for that side.
type DomainSizes struct {
	// Src groups the source ranks, in source mesh order, into domains of
	// this many ranks.
	Src int
	// Dst groups the destination ranks, in destination mesh order, into
	// domains of this many ranks.
	Dst int
}

// Domains builds the topology of a communicator from the domain each rank
// discovered (host[r]: ranks with equal values share a host or an NVLink
// domain) and the overrides. A side with an override gets domains of its
// own, numbered apart from everything else, so that traffic between the
// two sides crosses the network even when every rank runs on one machine:
// that is how several domains are emulated on one host. A rank in both
// meshes takes its destination domain when that side is overridden. Ranks
// the overrides do not cover keep their discovered domain.
//
// host has one entry per rank of the communicator: a mesh that reaches a
// rank at or past len(host) is an error naming it, as are negative sizes.
func Domains(host []int, src, dst placement.Layout, sizes DomainSizes) (reshard.Topology, error) {
	return DomainsOf(host, src.Mesh().Ranks(), dst.Mesh().Ranks(), sizes)
}

// DomainsOf is Domains for a call of several tensors: srcRanks and
// dstRanks are the call's source and destination ranks, in the order the
// overrides group them (Domains passes each mesh's ranks in mesh order).
// Every rank named must be inside host.
func DomainsOf(host []int, srcRanks, dstRanks []int, sizes DomainSizes) (reshard.Topology, error) {
	world := len(host)
	if sizes.Src < 0 || sizes.Dst < 0 {
		return reshard.Topology{}, fmt.Errorf("hier: domain sizes %+v must not be negative", sizes)
	}
	for _, side := range []struct {
		name  string
		ranks []int
	}{{"source", srcRanks}, {"destination", dstRanks}} {
		for _, r := range side.ranks {
			if r < 0 || r >= world {
				return reshard.Topology{}, &reshard.FieldError{Field: "host list", Got: fmt.Sprintf("%d ranks", world),
					Want: "one domain per rank of the communicator", Why: fmt.Sprintf("the %s ranks reach rank %d, outside a communicator of %d ranks", side.name, r, world)}
			}
		}
	}
	key := make([]string, world)
	for r := range key {
		key[r] = fmt.Sprintf("host:%d", host[r])
	}
	assign := func(side string, ranks []int, size int) {
		if size == 0 {
			return
		}
		for i, r := range ranks {
			key[r] = fmt.Sprintf("%s:%d", side, i/size)
		}
	}
	assign("src", srcRanks, sizes.Src)
	assign("dst", dstRanks, sizes.Dst) // last, so a shared rank takes its destination domain
	ids := map[string]int{}
	domain := make([]int, world)
	for r, k := range key {
		id, ok := ids[k]
		if !ok {
			id = len(ids)
			ids[k] = id
		}
		domain[r] = id
	}
	return reshard.Topology{Domain: domain}, nil
}

// DomainCount returns how many distinct domains the ranks of a mesh span.
// A rank the topology does not name counts as a domain of its own.
func DomainCount(topo reshard.Topology, l placement.Layout) int {
	m := l.Mesh()
	if topo.Domain == nil {
		return m.Size()
	}
	seen := map[int]bool{}
	own := 0
	for i := 0; i < m.Size(); i++ {
		r := m.RankAt(i)
		if r >= len(topo.Domain) {
			own++
			continue
		}
		seen[topo.Domain[r]] = true
	}
	return len(seen) + own
}
