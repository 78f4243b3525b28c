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
	chains := callChains(plans, tensors, topo, h.Balance, chunk)
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
		// the sources keep pace with the receivers (paceBudget).
		if pace := paceBudget(chains, topo, recv, opts.RoundBytes(), chunk); pace < opts.RoundBytes() {
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
