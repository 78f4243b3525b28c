package hier

// A tensor's chains: the shards of its destination layout, each shard's
// contributions (or their parts) as pieces, and which replica of each
// domain leads each piece (the paper's count rule, or BalanceBytes).

import (
	"github.com/m2n-dev/m2n/placement"
	"github.com/m2n-dev/m2n/reshard"
)

// shard is one destination region and the ranks that hold it.
type shard struct {
	replicas []int              // in destination mesh order
	contribs []reshard.Transfer // what the first replica receives
	first    int                // the plan index of the first replica's first transfer (contribs[ci] is transfer first+ci)
	// srcs[ci] are the source ranks the plan names for contribution ci
	// across the replicas (more than one when the plan stripes a
	// replicated source region over its holders), first replica's first.
	srcs [][]int
}

// callChains returns the chains of the call's tensors, each tensor's
// (tensorChains) in tensor order, in one slice of the exact size
// (appending grew and copied it over and over). The tensors share the
// leaders' loads so far and the entry counter, so that leaders and entry
// domains spread over the whole call.
func callChains(plans []*reshard.Plan, tensors []int, topo reshard.Topology, balance Balance, chunk int64) []chain {
	per := make([][]chain, len(tensors))
	n := 0
	world := 0
	for _, ti := range tensors {
		world = max(world, plans[ti].World())
	}
	lead := make([]int64, world) // by rank (spreadLeaders)
	entries := 0
	for k, ti := range tensors {
		per[k] = tensorChains(ti, plans[ti], topo, balance, chunk, lead, &entries)
		n += len(per[k])
	}
	chains := make([]chain, 0, n)
	for k := range per {
		chains = append(chains, per[k]...)
		per[k] = nil
	}
	return chains
}

// tensorChains derives the chains of one tensor, contributions cut into
// parts of at least chunk bytes where a shard has fewer contributions than
// replicas (countParts). lead holds each rank's bytes received as a
// leader so far in the call (spreadLeaders adds this tensor's), and
// entries counts the pieces so far in the call: with the count rule,
// piece k enters the ring at the shard's domain k mod domains, so that the
// entry domains, which root the trees and forward the most, rotate over
// the call. By the contribution's index within its shard, every shard of
// one contribution (a TP1 trainer's dense tensors) entered at its first
// domain, and the first half of the domains forwarded every such tree
// while the rest forwarded none (DeepSeek-V3 at 2048 ranks: 46.6 -> 44.3
// ms, issue 25).
func tensorChains(ti int, p *reshard.Plan, topo reshard.Topology, balance Balance, chunk int64, lead []int64, entries *int) []chain {
	dm := p.Dst().Mesh()
	// a converting plan's messages carry destination (FP8) elements; only
	// the first hop reads the source's.
	srcElem, elem := p.Src().ElemSize(), p.Dst().ElemSize() // messages carry the destination dtype
	index := map[int]int{}
	var shards []shard
	for i := 0; i < dm.Size(); i++ {
		r := dm.RankAt(i)
		recvs := p.Recvs(r)
		if len(recvs) == 0 {
			continue // an empty shard
		}
		_, _, id := p.Ends(int(recvs[0]))
		k, ok := index[id]
		if !ok {
			k = len(shards)
			index[id] = k
			s := shard{first: int(recvs[0]), contribs: make([]reshard.Transfer, len(recvs)), srcs: make([][]int, len(recvs))}
			for ci, t := range recvs {
				s.contribs[ci] = p.Transfer(int(t))
				s.srcs[ci] = []int{s.contribs[ci].Src}
			}
			shards = append(shards, s)
		} else {
			shards[k].noteSources(p, recvs)
		}
		shards[k].replicas = append(shards[k].replicas, r)
	}
	// each shard's pieces, and the leader rotation of each of its domains
	// (spreadLeaders, in shard and domain order), before the chains: the
	// chains are then allocated at once, and the hops of a shard's chains
	// from one backing array.
	type shardPieces struct {
		domains [][]int
		pieces  []piece
		rots    []int
	}
	sps := make([]shardPieces, len(shards))
	total := 0
	for si, s := range shards {
		domains := groupByDomain(s.replicas, topo)
		nd := len(domains)
		var pieces []piece
		most := 0 // the most replicas in one domain
		for _, d := range domains {
			most = max(most, len(d))
		}
		for ci, t := range s.contribs {
			if balance == BalanceBytes {
				for j, part := range t.Box.Split(most) {
					pieces = append(pieces, piece{t: t, ci: ci, box: part, slot: j, entry: (ci*most + j) % nd})
				}
				continue
			}
			for _, part := range t.Box.Split(countParts(t.Box.Elems()*elem, len(s.contribs), most, chunk)) {
				// entries rotate over the domains across the call, not
				// within the shard alone (entries)
				pieces = append(pieces, piece{t: t, ci: ci, box: part, slot: len(pieces), entry: *entries % nd})
				*entries++
			}
		}
		// the count rule's items are the pieces: contributions, or their parts
		rots := make([]int, nd)
		for d, reps := range domains {
			rots[d] = spreadLeaders(pieces, len(pieces), reps, balance, ti+si, elem, lead)
		}
		sps[si] = shardPieces{domains: domains, pieces: pieces, rots: rots}
		total += len(pieces)
	}
	out := make([]chain, 0, total)
	for si, s := range shards {
		sp := &sps[si]
		domains, nd := sp.domains, len(sp.domains)
		// others[d][li]: the replicas of domain d but its leader li, in
		// mesh order; the same for every chain that domain d's replica li
		// leads (hops only read it).
		others := make([][][]int, nd)
		hops := make([]hop, len(sp.pieces)*nd)
		for k, pc := range sp.pieces {
			c := chain{tensor: ti, srcElem: srcElem, elem: elem, src: pc.t.Src, srcs: s.srcs[pc.ci], srcLocal: pc.t.SrcLocal, dstLocal: pc.t.DstLocal, box: pc.box,
				hops: hops[k*nd : (k+1)*nd : (k+1)*nd]}
			for step := 0; step < nd; step++ {
				d := (pc.entry + step) % nd
				reps := domains[d]
				li := leaderOf(pc, len(sp.pieces), len(reps), balance, sp.rots[d])
				if others[d] == nil {
					others[d] = make([][]int, len(reps))
				}
				o := others[d][li]
				if o == nil && len(reps) > 1 {
					o = make([]int, 0, len(reps)-1)
					for j, r := range reps {
						if j != li {
							o = append(o, r)
						}
					}
					others[d][li] = o
				}
				c.hops[step] = hop{leader: reps[li], others: o}
			}
			out = append(out, c)
		}
	}
	return out
}

// countParts returns how many parts the count rule cuts one contribution
// of bytes into, in a shard of contribs contributions whose domains hold
// at most replicas replicas each: where the contributions are fewer than
// the replicas, each into about replicas/contribs parts, but none smaller
// than a chunk, so that the replicas lead a large contribution between
// them and each part still moves in whole chunks (no more messages than
// the contribution's chunks, plus one per part at most). A contribution
// with one leader per domain is received whole by that leader, which, in
// the tree over the domains, forwards it whole to its children, one chunk
// per round to each: a DeepSeek-V3 lm_head shard (231 MB under TP8, one
// contribution from a TP1 trainer) took 15 chunks down a tree of 16
// domains at 2048 ranks, and its forwards alone filled the last 11 of its
// stage's 31 rounds (issue 25: 51.6 ms against a bound of 36.2 ms; 46.6
// ms with the parts).
func countParts(bytes int64, contribs, replicas int, chunk int64) int {
	if contribs >= replicas || chunk <= 0 {
		return 1
	}
	want := (replicas + contribs - 1) / contribs
	return int(max(1, min(int64(want), bytes/chunk)))
}

// piece is a contribution, or one part of it (BalanceBytes, or countParts).
type piece struct {
	t     reshard.Transfer
	ci    int // the contribution's index in its shard
	box   placement.Box
	slot  int // which leader: the piece's index in its shard (count: contributions or their parts) or the part's index (bytes)
	entry int // the domain the piece enters the ring at
}

// leaderOf returns which of r replicas (in one domain) leads piece pc of a
// shard with n contributions. The paper's rule (or, with BalanceBytes, one
// part per replica) fixes the loads; rot, the tensor's index plus the
// shard's, rotates which replica takes which load, so that shards with
// fewer contributions than replicas (a norm or an MLA projection
// replicated on every destination rank has one or a few) do not all pick
// the domain's first replica: without it, that one rank fans every such
// tensor out to the whole domain and its local link binds the schedule.
func leaderOf(pc piece, n, r int, balance Balance, rot int) int {
	if balance == BalanceBytes {
		return (pc.slot + rot) % r
	}
	return (blockOwner(pc.slot, n, r) + rot) % r
}

// blockOwner returns which of r replicas leads item i of n under the
// paper's rule: replica j takes base = n/r items, and the first n mod r
// replicas one more, in contiguous blocks.
func blockOwner(i, n, r int) int {
	base, rem := n/r, n%r
	big := rem * (base + 1)
	if i < big {
		return i / (base + 1)
	}
	return rem + (i-big)/base
}

// groupByDomain splits ranks into their domains, keeping mesh order inside
// each and ordering domains by their first rank.
func groupByDomain(ranks []int, topo reshard.Topology) [][]int {
	if topo.Domain == nil {
		out := make([][]int, len(ranks))
		for i, r := range ranks {
			out[i] = []int{r}
		}
		return out
	}
	index := map[int]int{}
	var out [][]int
	for _, r := range ranks {
		d := topo.Domain[r]
		k, ok := index[d]
		if !ok {
			k = len(out)
			index[d] = k
			out = append(out, nil)
		}
		out[k] = append(out[k], r)
	}
	return out
}
