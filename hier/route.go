package hier

import (
	"fmt"
	"maps"
	"math"
	"slices"

	"github.com/m2n-dev/m2n/internal/checked"
	"github.com/m2n-dev/m2n/placement"
	"github.com/m2n-dev/m2n/reshard"
	"github.com/m2n-dev/m2n/strided"
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
// matching leaders of other domains, down a binary tree over the domains
// that hold the shard (in ring order from the entry domain: log n network
// hops to the last of n, where a ring takes n-1), one network copy per
// domain; and inside each domain the leader fans it out to the other
// replicas over the local fabric. Contributions enter at rotating domains,
// so each domain receives every byte of its shards once and forwards a
// share. Sources are spread over the holders of a replicated region and
// leaders over the replicas of a shard by the bytes they already carry
// (spreadSources, spreadLeaders). Chunks pipeline: the chain of each
// chunk depends only on its own receipt, so chunk i fans out and moves on
// while chunk i+1 crosses the network, through the bounded staging of the
// schedule's rounds. A whole call (Schedule) ends tapered: each source's
// last chunks, cut in four, go in rounds of a quarter budget, so that the
// fan-out left after the last network byte is a quarter of two rounds'
// (see taper). Where fewer ranks send than receive, a whole call's
// receivers take at most their share of the senders' rounds
// (receiveBudget) and forward under the same budget (forwarders), and
// where the receivers then need more rounds than the sources, the sources
// keep pace with them (paceBudget).
//
// The messages are counted before any box is cut into chunks: more than
// reshard.MaxMessages is an error naming the count, as is a schedule that
// needs reshard.maxRounds rounds or more.
type Hier struct {
	// Balance says how the replicas of a shard share its contributions.
	Balance Balance
	// Stage is the pipeline stage the call serves (ForStage): it rotates
	// the order in which the schedule walks its chains, so that stages of
	// equal layouts running at once do not send into the same receivers in
	// the same rounds.
	Stage int
}

// ForStage implements reshard.StageRoute.
func (h Hier) ForStage(s int) reshard.Route {
	h.Stage = s
	return h
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
	all := make([]int, len(plans))
	for i := range all {
		all[i] = i
	}
	if err := h.addTensors(b, plans, all, topo, opts, true); err != nil {
		return nil, err
	}
	return b.Schedule(), nil
}

// AddTensors implements reshard.BucketRoute. The builder's budgets are its
// owner's: a bucket leaves the local budget as it is (see localBudget).
func (h Hier) AddTensors(b *reshard.Builder, plans []*reshard.Plan, tensors []int, topo reshard.Topology, opts reshard.ScheduleOptions) error {
	return h.addTensors(b, plans, tensors, topo, opts, false)
}

// addTensors is AddTensors; with budget, it first sets b's budgets: the
// network receive budget from the plans (receiveBudget) and the local
// budget from the chains (localBudget).
func (h Hier) addTensors(b *reshard.Builder, plans []*reshard.Plan, tensors []int, topo reshard.Topology, opts reshard.ScheduleOptions, budget bool) error {
	// every transfer reaches its destination in at least one message:
	// refuse an absurd plan before deriving chains from it.
	var transfers int64
	for _, ti := range tensors {
		transfers += int64(plans[ti].Len()) // at most maxTransfers each
	}
	if transfers > reshard.MaxMessages {
		return b.Expect(transfers)
	}
	var srcs, dsts map[int]bool
	recv := b.NetReceiveBudget()
	if budget {
		srcs, dsts = endpoints(plans)
		recv = receiveBudget(len(srcs), len(dsts), opts)
	}
	// a chunk is at most half of what a round may receive (receiveBudget),
	// so that no receiver needs a round of its own for one chunk and a
	// receiver's round that holds a smaller message still takes a chunk:
	// with whole-budget chunks a round with any other message in it had no
	// room for one, and the receivers' rounds went part empty where many
	// sources share them (NeMo-RL's DeepSeek-V3 on HGX, 16 stages into the
	// same 256 receivers: 185.5 ms against 175.6 ms with half; issue 25).
	chunk := min(opts.ChunkBytes, max(recv/2, 1))
	// each tensor's chains, then all of them in one slice of the exact
	// size (appending grew and copied it over and over).
	per := make([][]chain, len(tensors))
	n := 0
	world := 0
	for _, ti := range tensors {
		world = max(world, plans[ti].World())
	}
	lead := make([]int64, world) // by rank (spreadLeaders)
	entries := 0
	for k, ti := range tensors {
		per[k] = tensorChains(ti, plans[ti], topo, h.Balance, chunk, lead, &entries)
		n += len(per[k])
	}
	chains := make([]chain, 0, n)
	for k := range per {
		chains = append(chains, per[k]...)
		per[k] = nil
	}
	spreadSources(chains)
	if budget {
		if err := b.SetBudgets(recv, localBudget(chains, recv, opts.RoundBytes())); err != nil {
			return err
		}
		if recv < opts.RoundBytes() {
			if err := b.SetNetSendBudget(forwarders(srcs, dsts), recv); err != nil {
				return err
			}
		}
	}
	// the sources keep pace with the receivers (paceBudget).
	if budget {
		if pace := paceBudget(chains, topo, b.NetReceiveBudget(), opts.RoundBytes(), chunk); pace < opts.RoundBytes() {
			if err := b.SetNetSendBudget(slices.Sorted(maps.Keys(srcs)), pace); err != nil {
				return err
			}
		}
	}
	// count: every chunk of a chain is messagesPerChunk messages.
	var total int64
	for i := range chains {
		c := &chains[i]
		n, err := reshard.CountChunks(c.box, c.elem, chunk)
		if err != nil {
			return err
		}
		m, ok := checked.Mul(n, c.messagesPerChunk())
		if ok {
			total, ok = checked.Add(total, m)
		}
		if !ok {
			total = math.MaxInt64 // saturate: Expect refuses it
		}
	}
	if err := b.Expect(total); err != nil {
		return err
	}
	for i := range chains {
		c := &chains[i]
		var err error
		if c.chunks, err = reshard.SplitBox(c.box, c.elem, chunk); err != nil {
			return err
		}
		c.arity = arityOf(len(c.chunks), len(c.hops))
	}
	// Add chunk-major: every chain's first chunk, then every second, ...
	// active lists, in chain order, the chains with chunks left.
	// Add chunk-major (every chain's first chunk, then every second, ...),
	// chains through more domains first: all of a depth's chunks before
	// the next shallower depth's, so that the deep chains, whose last hop
	// lands 2 x depth rounds after their first, start and end early while
	// the one-domain chains fill the rounds around them (Add places a
	// message in the earliest round with room, before the ones added
	// earlier where they left room).
	order := make([]int, len(chains))
	for i := range order {
		order[i] = i
	}
	depth := func(i int) int { return treeDepth(len(chains[i].hops), chains[i].arity) }
	slices.SortStableFunc(order, func(a, b int) int { return depth(b) - depth(a) })
	for lo := 0; lo < len(order); {
		hi := lo
		for hi < len(order) && depth(order[hi]) == depth(order[lo]) {
			hi++
		}
		// a whole call ends tapered (see taper); a bucket does not know
		// whether it is the last.
		var tp taper
		if budget && hi == len(order) {
			tp = newTaper(opts.RoundBytes(), chunk)
		}
		if err := addGroup(b, chains, rotate(order[lo:hi], h.Stage), int(max(1, opts.RoundBytes()/chunk)), tp); err != nil {
			return err
		}
		lo = hi
	}
	return b.Err()
}

// receiveBudget is the network receive budget of a round (see
// reshard.Builder.SetBudgets): with srcs ranks sending and dsts > srcs
// receiving, the round budget times srcs/dsts, so that every round
// spreads the senders' full rounds evenly over the receivers: calls that
// run at once into the same receivers (a model's pipeline stages, srcs
// sources each, together as many as the receivers) then bring each
// receiver at most about one round budget per round between them, where
// each call could bring a full one and the receiver's NIC would bind the
// round. With srcs >= dsts, the round budget. Chunks are cut to the
// budget (AddTensors), and the receivers forward under it too
// (forwarders).
func receiveBudget(srcs, dsts int, opts reshard.ScheduleOptions) int64 {
	round := opts.RoundBytes()
	if srcs == 0 || srcs >= dsts {
		return round
	}
	n := round / int64(dsts) * int64(srcs) // < round: no overflow
	return max(n, 1)
}

// endpoints returns the ranks that send and the ranks that receive
// (another rank's bytes) in the plans.
func endpoints(plans []*reshard.Plan) (srcs, dsts map[int]bool) {
	srcs, dsts = map[int]bool{}, map[int]bool{}
	for _, p := range plans {
		for i := 0; i < p.Len(); i++ {
			if src, dst, _ := p.Ends(i); src != dst {
				srcs[src], dsts[dst] = true, true
			}
		}
	}
	return srcs, dsts
}

// forwarders returns, in rank order, the ranks that receive and send no
// bytes of their own (dsts not in srcs): what they send over the network
// is what they forward, leader to leader, and they send it under the
// network receive budget (reshard.Builder.SetNetSendBudget). Their NICs
// out are shared by the calls that run at once as their NICs in are: with
// the round budget, every pipeline stage's leaders forwarded a full round
// budget in the same early rounds (chains through more domains go first),
// 16 stages' forwards met on the generator's NICs out, and those rounds
// took twice the others (NeMo-RL's DeepSeek-V3 on HGX: 175.6 ms, 148.3 ms
// with this budget; issue 25).
func forwarders(srcs, dsts map[int]bool) []int {
	var out []int
	for r := range dsts {
		if !srcs[r] {
			out = append(out, r)
		}
	}
	slices.Sort(out)
	return out
}

// chain is the path of one piece of one contribution: from its source owner
// into the entry domain's leader, leader to leader around the ring, and
// from each leader to the other replicas of its domain.
type chain struct {
	tensor   int
	srcElem  int64         // bytes of a source element
	elem     int64         // bytes of an element on the wire and in the destination
	src      int           // source owner
	srcs     []int         // the source ranks that may send it (spreadSources picks src among them)
	srcLocal placement.Box // the region the owner holds
	dstLocal placement.Box // the region every replica of the shard holds
	hops     []hop         // in ring order, the entry domain first
	arity    int           // how many hops a hop forwards to (arityOf)
	box      placement.Box // what the chain carries
	chunks   []placement.Box
}

// hop is one domain on the ring: its leader and the replicas it fans out to.
type hop struct {
	leader int
	others []int
}

// messagesPerChunk is how many messages one chunk of the chain makes: one
// per hop into a leader and one per replica a leader fans out to.
func (c *chain) messagesPerChunk() int64 {
	per := int64(len(c.hops))
	for _, h := range c.hops {
		per += int64(len(h.others))
	}
	return per
}

// add adds the messages of one chunk of the chain: its network hops with
// the budgets divided by div (reshard.Builder.AddTapered; 1 for a chunk
// outside the taper), the fan-out with the whole local budget.
func (c *chain) add(b *reshard.Builder, sub placement.Box, div int64) {
	bytes := sub.Elems() * c.elem
	dstAt := strided.Describe(c.dstLocal, sub, c.elem)
	from := []reshard.Segment{{Tensor: c.tensor, Buf: reshard.BufSrc, At: strided.Describe(c.srcLocal, sub, c.srcElem)}}
	to := []reshard.Segment{{Tensor: c.tensor, Buf: reshard.BufDst, At: dstAt}}
	// ready[i] is the first round in which hop i's leader holds the chunk
	// (on the stack for up to 16 domains).
	var buf [16]int
	ready := buf[:0]
	if len(c.hops) > len(buf) {
		ready = make([]int, len(c.hops))
	}
	ready = ready[:len(c.hops)]
	for i, h := range c.hops {
		prev, seg, after := c.src, from, 0
		if p := treeParent(i, c.arity); p >= 0 {
			prev, seg, after = c.hops[p].leader, to, ready[p]
		}
		r := b.AddTapered(reshard.Message{Src: prev, Dst: h.leader, Bytes: bytes, From: seg, To: to, Tensor: c.tensor, Box: sub}, after, div)
		if prev == h.leader {
			ready[i] = r // a local copy is complete within its round
		} else {
			ready[i] = reshard.AfterRecv(r)
		}
		for _, o := range h.others {
			b.Add(reshard.Message{Src: h.leader, Dst: o, Bytes: bytes, From: to, To: to, Tensor: c.tensor, Box: sub}, ready[i])
		}
	}
}

// treeArity is how many domains a domain's leader forwards a chunk to
// when the chain has fewer chunks than domains: the domains holding a
// shard then form a tree of this arity in ring order from the entry domain
// (hop i's parent is hop (i-1)/arity), so a chunk reaches the last of n
// domains after about log(n) network hops where a ring takes n-1, and a
// small replicated tensor does not wait out n-1 hops. A chain of at least
// as many chunks as domains goes around the ring (arity 1): its chunks
// pipeline over the ring's hops, and each forwarder sends one copy of what
// it receives, where a tree's inner leaders send two out of a NIC that
// also receives (4 emulated domains of TP2: 203 ms on the ring, 263 ms in
// a tree). Each domain receives every byte once either way.
const treeArity = 2

// arityOf returns the forwarding arity of a chain of chunks chunks
// through domains domains (see treeArity).
func arityOf(chunks, domains int) int {
	if chunks < domains {
		return treeArity
	}
	return 1
}

// treeDepth returns the network hops from the entry domain to the last of
// n domains in the tree of the arity.
func treeDepth(n, arity int) int {
	d := 0
	for i := n - 1; i > 0; i = treeParent(i, arity) {
		d++
	}
	return d
}

// treeParent returns the hop that forwards to hop i in a tree of the
// arity, or -1 for the entry hop (which the source sends to).
func treeParent(i, arity int) int {
	if i == 0 {
		return -1
	}
	return (i - 1) / arity
}

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
		slots   int // the count rule's items: contributions, or their parts
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
		slots := len(pieces) // the count rule's items: contributions, or their parts
		rots := make([]int, nd)
		for d, reps := range domains {
			rots[d] = spreadLeaders(pieces, slots, reps, balance, ti+si, elem, lead)
		}
		sps[si] = shardPieces{domains: domains, pieces: pieces, rots: rots, slots: slots}
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
				li := leaderOf(pc, sp.slots, len(reps), balance, sp.rots[d])
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
