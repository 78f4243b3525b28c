package hier

import (
	"math"
	"slices"

	"github.com/m2n-dev/m2n/placement"
	"github.com/m2n-dev/m2n/reshard"
)

// noteSources adds the sources that another replica of the shard receives
// its contributions from (recvs, in plan order) to s.srcs: a plan that
// stripes a replicated source region over its holders names a different
// holder for each destination rank, and hier, which moves each
// contribution over the network once per domain, may take it from any of
// them. A replica whose contributions do not line up with the first
// replica's (another count, or another box at some index) adds nothing.
func (s *shard) noteSources(p *reshard.Plan, recvs []int32) {
	if len(recvs) != len(s.contribs) {
		return
	}
	for ci, ti := range recvs {
		if !p.SameRegion(int(ti), s.first+ci) {
			return
		}
	}
	for ci, ti := range recvs {
		src, dst, _ := p.Ends(int(ti))
		if src == dst || s.contribs[ci].Src == s.contribs[ci].Dst {
			continue // a local copy on some replica: keep the plan's source
		}
		if !slices.Contains(s.srcs[ci], src) {
			s.srcs[ci] = append(s.srcs[ci], src)
		}
	}
}

// spreadSources picks each chain's source among the holders the plan
// names for it (chain.srcs) so that the source ranks inject about equal
// bytes: a source's network egress is what binds hier (every contribution
// leaves its source once), and the plan's striping, which deals a region's
// holders out to the destination ranks round-robin, gives the first
// replica of every shard the same few holders. Chains with one holder
// count first; the rest go, largest first (ties in chain order), each to
// its least loaded holder (ties to the first in the list). Every rank
// computes the same choice from the same plans.
func spreadSources(chains []chain) {
	load := map[int]int64{}
	var free []int
	for i := range chains {
		c := &chains[i]
		if len(c.srcs) <= 1 {
			load[c.src] += c.box.Elems() * c.elem
			continue
		}
		free = append(free, i)
	}
	slices.SortStableFunc(free, func(a, b int) int {
		na, nb := chains[a].box.Elems(), chains[b].box.Elems()
		switch {
		case na > nb:
			return -1
		case na < nb:
			return 1
		}
		return 0
	})
	for _, i := range free {
		c := &chains[i]
		best := c.srcs[0]
		for _, r := range c.srcs[1:] {
			if load[r] < load[best] {
				best = r
			}
		}
		c.src = best
		load[best] += c.box.Elems() * c.elem
	}
}

// spreadLeaders returns the rotation of leader loads over the replicas reps
// of one shard in one domain (leaderOf's rot) that keeps the busiest of
// them least busy, given lead, the bytes each rank already receives as a
// leader in this call (by rank), and adds the shard's pieces to lead under it. The
// paper's rule still fixes the loads within the shard (contiguous blocks
// that differ by at most one contribution); only which replica takes which
// block moves, so that the shards of many tensors do not pile onto the
// same replicas: the tensor-and-shard rotation alone (def, preferred on a
// tie) maps a tensor that recurs every layer to the same replica in every
// layer whenever a layer's tensor count is a multiple of the replicas.
func spreadLeaders(pieces []piece, n int, reps []int, balance Balance, def int, elem int64, lead []int64) int {
	r := len(reps)
	w := make([]int64, r)
	for _, pc := range pieces {
		w[leaderOf(pc, n, r, balance, 0)] += pc.box.Elems() * elem
	}
	best, bestCost := def%r, int64(-1)
	for k := 0; k < r; k++ {
		o := (def + k) % r
		var cost int64
		for j, b := range w {
			if b > 0 {
				cost = max(cost, lead[reps[(j+o)%r]]+b)
			}
		}
		if bestCost < 0 || cost < bestCost {
			best, bestCost = o, cost
		}
	}
	for j, b := range w {
		if b > 0 {
			lead[reps[(j+best)%r]] += b
		}
	}
	return best
}

// rotate returns a copy of x rotated left by stage's share of its length:
// the fractional part of stage x (the golden ratio - 1), so that any few
// consecutive stages start far apart whatever their count.
func rotate(x []int, stage int) []int {
	out := make([]int, 0, len(x))
	if len(x) == 0 {
		return out
	}
	const phi = 0.6180339887498949
	f := float64(stage) * phi
	k := int((f - math.Floor(f)) * float64(len(x)))
	k = min(max(k, 0), len(x)-1)
	return append(append(out, x[k:]...), x[:k]...)
}

// addGroup adds the chunks of the chains group (indices into chains) to b,
// chunk-major per source: each source's chains, in group order rotated by
// the source's place among the group's sources (by an even share of its
// chains, or by one chain where it has fewer chains than there are
// sources, so that the sources do not start on the same receivers), give its chunks, every chain's
// first chunk, then every second, ...; the sources then take turns, the
// one that has added the fewest bytes next (ties to the earlier source),
// so that every source fills the early rounds alike where chain order
// alone let the first sources of each shard take the receivers' room.
// With a taper (tp.div > 1), each source's last chunks (tp.split) are
// cut smaller and added, in the same turns, after every source's other
// chunks, into tapered rounds.
func addGroup(b *reshard.Builder, chains []chain, group []int, per int, tp taper) error {
	var srcs []int
	bySrc := map[int][]int{}
	for _, i := range group {
		s := chains[i].src
		if _, ok := bySrc[s]; !ok {
			srcs = append(srcs, s)
		}
		bySrc[s] = append(bySrc[s], i)
	}
	qs := make([][]item, len(srcs))
	for si, s := range srcs {
		own := bySrc[s]
		k := si * per % len(own)
		own = append(slices.Clone(own[k:]), own[:k]...)
		var items []item
		for c := 0; len(own) > 0; c++ {
			next := own[:0]
			for _, i := range own {
				items = append(items, item{chain: i, sub: chains[i].chunks[c]})
				if c+1 < len(chains[i].chunks) {
					next = append(next, i)
				}
			}
			own = next
		}
		qs[si] = items
	}
	body, tail, err := tp.cut(b, chains, qs)
	if err != nil {
		return err
	}
	addTurns(b, chains, body, 1)
	addTurns(b, chains, tail, tp.div)
	return nil
}

// item is one chunk of one chain.
type item struct {
	chain int
	sub   placement.Box
}

// addTurns adds the sources' items (qs[s], in order) with the budgets
// divided by div, the source that has added the fewest bytes next (ties to
// the earlier source).
func addTurns(b *reshard.Builder, chains []chain, qs [][]item, div int64) {
	// the sources with items left, in a heap by (bytes added, source)
	type turn struct {
		added int64
		src   int
	}
	less := func(a, b turn) bool { return a.added < b.added || a.added == b.added && a.src < b.src }
	var h []turn
	for si, q := range qs {
		if len(q) > 0 {
			h = append(h, turn{0, si}) // in source order: already a heap
		}
	}
	next := make([]int, len(qs))
	for len(h) > 0 {
		best := h[0].src
		it := qs[best][next[best]]
		next[best]++
		c := &chains[it.chain]
		h[0].added += it.sub.Elems() * c.elem
		if next[best] == len(qs[best]) {
			h[0] = h[len(h)-1]
			h = h[:len(h)-1]
		}
		for i := 0; ; { // sift the top down
			k := 2*i + 1
			if k >= len(h) {
				break
			}
			if k+1 < len(h) && less(h[k+1], h[k]) {
				k++
			}
			if !less(h[k], h[i]) {
				break
			}
			h[i], h[k] = h[k], h[i]
			i = k
		}
		c.add(b, it.sub, div)
	}
}
