package hier

import (
	"fmt"

	"github.com/m2n-dev/m2n/placement"
	"github.com/m2n-dev/m2n/reshard"
)

// Balance says how the replicas of a destination shard inside one domain
// share the shard's contributions.
type Balance uint8

const (
	// BalanceCount is the paper's rule: each contribution has one leader,
	// and leader loads (contributions per replica) differ by at most one:
	// every replica takes the base load and the first (count mod replicas)
	// take one more, in contiguous blocks.
	BalanceCount Balance = iota
	// BalanceBytes cuts every contribution into one part per replica, so
	// that every replica receives an equal share of the bytes: two
	// contributions over eight replicas keep all eight receiving, where
	// the count rule leaves six idle.
	BalanceBytes
)

func (b Balance) String() string {
	if b == BalanceBytes {
		return "bytes"
	}
	return "count"
}

// ParseBalance reads "count" or "bytes".
func ParseBalance(s string) (Balance, error) {
	switch s {
	case "count", "":
		return BalanceCount, nil
	case "bytes":
		return BalanceBytes, nil
	}
	return 0, fmt.Errorf("unknown leader balance %q: want count or bytes", s)
}

// Hier is the hierarchical, topology-aware route of NCCL M2N: every
// contribution (a box one destination shard needs from one source owner)
// crosses the network once into one destination domain, to a leader among
// the shard's replicas there; the domain's leader forwards it to the
// matching leader of the next domain, around a ring of the domains that hold
// the shard, one network copy per domain; and inside each domain the leader
// fans it out to the other replicas over the local fabric. Contributions
// enter the ring at rotating domains, so each domain receives every byte of
// its shards once and forwards a share. Chunks pipeline: the chain of each
// chunk depends only on its own receipt, so chunk i fans out and moves on
// while chunk i+1 crosses the network, through the bounded staging of the
// schedule's rounds.
type Hier struct {
	// Balance says how the replicas of a shard share its contributions.
	Balance Balance
}

// Name returns "hier".
func (Hier) Name() string { return "hier" }

// Schedule implements reshard.Route.
func (h Hier) Schedule(plans []*reshard.Plan, topo reshard.Topology, opts reshard.ScheduleOptions) (*reshard.Schedule, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	b, err := reshard.NewBuilder("hier", plans, topo, opts.RoundBytes())
	if err != nil {
		return nil, err
	}
	var chains []chain
	for ti, p := range plans {
		chains = append(chains, tensorChains(ti, p, topo, h.Balance, opts.ChunkBytes)...)
	}
	// Add chunk-major: every chain's first chunk, then every second, ...
	for k, more := 0, true; more; k++ {
		more = false
		for i := range chains {
			c := &chains[i]
			if k >= len(c.chunks) {
				continue
			}
			more = more || k+1 < len(c.chunks)
			c.add(b, c.chunks[k])
		}
	}
	return b.Schedule(), nil
}

// chain is the path of one piece of one contribution: from its source owner
// into the entry domain's leader, leader to leader around the ring, and
// from each leader to the other replicas of its domain.
type chain struct {
	tensor   int
	srcElem  int64         // bytes of a source element
	elem     int64         // bytes of an element on the wire and in the destination
	src      int           // source owner
	srcLocal placement.Box // the region the owner holds
	dstLocal placement.Box // the region every replica of the shard holds
	hops     []hop         // in ring order, the entry domain first
	chunks   []placement.Box
}

// hop is one domain on the ring: its leader and the replicas it fans out to.
type hop struct {
	leader int
	others []int
}

func (c *chain) add(b *reshard.Builder, sub placement.Box) {
	bytes := sub.Elems() * c.elem
	dstAt := reshard.Describe(c.dstLocal, sub, c.elem)
	from := []reshard.Segment{{Tensor: c.tensor, Buf: reshard.BufSrc, At: reshard.Describe(c.srcLocal, sub, c.srcElem)}}
	prev := c.src
	after := 0
	for _, h := range c.hops {
		to := []reshard.Segment{{Tensor: c.tensor, Buf: reshard.BufDst, At: dstAt}}
		r := b.Add(reshard.Message{Src: prev, Dst: h.leader, Bytes: bytes, From: from, To: to, Tensor: c.tensor, Box: sub}, after)
		if prev == h.leader {
			after = r // a local copy is complete within its round
		} else {
			after = reshard.AfterRecv(r)
		}
		for _, o := range h.others {
			b.Add(reshard.Message{Src: h.leader, Dst: o, Bytes: bytes, From: to, To: to, Tensor: c.tensor, Box: sub}, after)
		}
		from, prev = to, h.leader
	}
}

// shard is one destination region and the ranks that hold it.
type shard struct {
	replicas []int              // in destination mesh order
	contribs []reshard.Transfer // what the first replica receives
}

// tensorChains derives the chains of one tensor.
func tensorChains(ti int, p *reshard.Plan, topo reshard.Topology, balance Balance, chunkBytes int64) []chain {
	dm := p.Dst().Mesh()
	// a converting plan's messages carry destination (FP8) elements; only
	// the first hop reads the source's.
	srcElem, elem := p.Src().ElemSize(), p.WireElemSize()
	index := map[int]int{}
	var shards []shard
	for i := 0; i < dm.Size(); i++ {
		r := dm.RankAt(i)
		recvs := p.Recvs(r)
		if len(recvs) == 0 {
			continue // an empty shard
		}
		id := p.Transfer(int(recvs[0])).DstShard
		k, ok := index[id]
		if !ok {
			k = len(shards)
			index[id] = k
			s := shard{}
			for _, t := range recvs {
				s.contribs = append(s.contribs, p.Transfer(int(t)))
			}
			shards = append(shards, s)
		}
		shards[k].replicas = append(shards[k].replicas, r)
	}
	var out []chain
	for _, s := range shards {
		domains := groupByDomain(s.replicas, topo)
		nd := len(domains)
		var pieces []piece
		for ci, t := range s.contribs {
			if balance == BalanceBytes {
				n := 0
				for _, d := range domains {
					n = max(n, len(d))
				}
				for j, part := range SplitEven(t.Box, n) {
					pieces = append(pieces, piece{t: t, box: part, slot: j, entry: (ci*n + j) % nd})
				}
				continue
			}
			pieces = append(pieces, piece{t: t, box: t.Box, slot: ci, entry: ci % nd})
		}
		for _, pc := range pieces {
			c := chain{tensor: ti, srcElem: srcElem, elem: elem, src: pc.t.Src, srcLocal: pc.t.SrcLocal, dstLocal: pc.t.DstLocal,
				chunks: reshard.SplitBox(pc.box, elem, chunkBytes)}
			for step := 0; step < nd; step++ {
				reps := domains[(pc.entry+step)%nd]
				var li int
				if balance == BalanceBytes {
					li = pc.slot % len(reps)
				} else {
					li = blockOwner(pc.slot, len(s.contribs), len(reps))
				}
				h := hop{leader: reps[li]}
				for j, r := range reps {
					if j != li {
						h.others = append(h.others, r)
					}
				}
				c.hops = append(c.hops, h)
			}
			out = append(out, c)
		}
	}
	return out
}

// piece is a contribution, or with BalanceBytes one part of it.
type piece struct {
	t     reshard.Transfer
	box   placement.Box
	slot  int // which leader: contribution index (count) or part index (bytes)
	entry int // the domain the piece enters the ring at
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

// SplitEven cuts a nonempty box into n parts of near-equal size along its
// outermost dim that has at least n indices (or, if none has, into one part
// per index of its longest dim). Parts are in order; fewer than n come
// back when the box is too small.
func SplitEven(b placement.Box, n int) []placement.Box {
	nd := b.NDim()
	if n <= 1 || nd == 0 {
		return []placement.Box{b}
	}
	dim, best := -1, int64(0)
	for d := 0; d < nd; d++ {
		ext := b.Hi[d] - b.Lo[d]
		if ext >= int64(n) {
			dim = d
			break
		}
		if ext > best {
			best, dim = ext, d
		}
	}
	ext := b.Hi[dim] - b.Lo[dim]
	parts := min(int64(n), ext)
	out := make([]placement.Box, 0, parts)
	for j := int64(0); j < parts; j++ {
		lo := b.Lo[dim] + ext*j/parts
		hi := b.Lo[dim] + ext*(j+1)/parts
		sub := placement.Box{Lo: append([]int64(nil), b.Lo...), Hi: append([]int64(nil), b.Hi...)}
		sub.Lo[dim], sub.Hi[dim] = lo, hi
		out = append(out, sub)
	}
	return out
}
