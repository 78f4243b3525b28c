package hier

import "github.com/m2n-dev/m2n/reshard"

// localBudget is the local fabric's per-round budget for a schedule of
// these chains (reshard.Builder.SetBudgets): a leader forwards every
// chunk it receives to the other replicas of its domain, so in a round in
// which it receives its network share (net bytes) it has that many bytes
// times its fan-out to send over the local fabric, and the other replicas
// as many to receive. With the round budget for both (the default), the
// fan-out takes more rounds than the receives it forwards, falls behind,
// and ends after the last network byte. The budget is net times the
// largest ratio, over the ranks, of the bytes a rank moves over the local
// fabric (sent or received) to the bytes it leads in over the network,
// and at least the round budget. The local fabric shares no link with the
// network, so the larger budget takes nothing from it; what it costs is
// staging for the local messages a round packs.
func localBudget(chains []chain, net, round int64) int64 {
	lead := map[int]int64{}     // network bytes a rank receives as a leader
	local := map[int][2]int64{} // local bytes a rank sends and receives
	for i := range chains {
		c := &chains[i]
		n := c.box.Elems() * c.elem
		for _, h := range c.hops {
			lead[h.leader] += n
			l := local[h.leader]
			l[0] += n * int64(len(h.others))
			local[h.leader] = l
			for _, o := range h.others {
				l := local[o]
				l[1] += n
				local[o] = l
			}
		}
	}
	// the ratio over the ranks that lead anything (a rank that only
	// receives locally moves its bytes in the rounds its leaders send).
	var most float64
	for r, v := range lead {
		if v == 0 {
			continue
		}
		l := local[r]
		most = max(most, float64(max(l[0], l[1]))/float64(v))
	}
	b := int64(most * float64(net))
	return max(b, round)
}

// paceBudget is the network send budget of the sources (ranks that send
// their own bytes) for these chains. Where the receivers need more rounds
// than the sources (the busiest receiver's network bytes over the network
// receive budget, recv, against the busiest source's over the round
// budget), it is the busiest source's bytes spread evenly over the
// receivers' rounds, plus a chunk of slack for the rounds the receivers
// leave uneven: a round lasts as long as its fullest link, and sources at
// the round budget made the middle rounds a seventh longer than the
// receivers' (NeMo-RL's DeepSeek-V3 on HGX, issue 25). It is the round
// budget where that is not at least a further chunk below it: a source
// that has less slack than that binds the schedule as much as the
// receivers (DeepSeek-V3 128+128 with an FP8 generator: its lighter
// stages paced to 96-98% of a round took it from 121.2 to 123.3 ms).
func paceBudget(chains []chain, topo reshard.Topology, recv, round, chunk int64) int64 {
	sent, got := map[int]int64{}, map[int]int64{}
	for i := range chains {
		c := &chains[i]
		n := c.box.Elems() * c.elem
		for hi, h := range c.hops {
			if hi > 0 || topo.Class(c.src, h.leader) == reshard.LinkNetwork {
				got[h.leader] += n // every later hop is another domain's
			}
		}
		if topo.Class(c.src, c.hops[0].leader) == reshard.LinkNetwork {
			sent[c.src] += n
		}
	}
	var src, dst int64
	for _, v := range sent {
		src = max(src, v)
	}
	for _, v := range got {
		dst = max(dst, v)
	}
	rd := (dst + recv - 1) / recv // the receivers' rounds
	if rd == 0 {
		return round
	}
	pace := (src+rd-1)/rd + chunk
	if pace > round-chunk {
		return round
	}
	return pace
}
