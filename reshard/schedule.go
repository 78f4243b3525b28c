package reshard

import (
	"fmt"
	"slices"
	"sort"

	"github.com/m2n-dev/m2n/internal/checked"
	"github.com/m2n-dev/m2n/placement"
	"github.com/m2n-dev/m2n/strided"
)

// BufKind names which of a rank's buffers for a tensor a Segment lives in.
type BufKind uint8

const (
	// BufSrc is the rank's local buffer in the source layout.
	BufSrc BufKind = iota
	// BufDst is the rank's local buffer in the destination layout.
	BufDst
	// BufFull is scratch holding the whole global tensor, dense row-major
	// (the legacy all-gather + broadcast route needs it).
	BufFull
)

func (k BufKind) String() string {
	switch k {
	case BufSrc:
		return "src"
	case BufDst:
		return "dst"
	case BufFull:
		return "full"
	}
	return fmt.Sprintf("buf(%d)", uint8(k))
}

// Segment is a strided region of one buffer of one tensor.
type Segment struct {
	Tensor int
	Buf    BufKind
	At     strided.Desc
}

// LinkClass says which fabric a message crosses.
type LinkClass uint8

const (
	// LinkNetwork crosses between domains (the NICs).
	LinkNetwork LinkClass = iota
	// LinkLocal stays inside one domain (NVLink, or shared memory on a host).
	LinkLocal
	// LinkSelf is a copy inside one rank.
	LinkSelf
	// LinkClasses counts the classes (the length of per-class arrays).
	LinkClasses
)

func (c LinkClass) String() string {
	switch c {
	case LinkNetwork:
		return "network"
	case LinkLocal:
		return "local"
	case LinkSelf:
		return "self"
	}
	return fmt.Sprintf("link(%d)", uint8(c))
}

// Message moves bytes from one rank to another (or copies inside one rank
// when Src == Dst). From lists the regions the sender reads and To the
// regions the receiver writes, in the same byte order; both total Bytes.
type Message struct {
	Src, Dst int
	Round    int
	Bytes    int64
	Class    LinkClass
	From, To []Segment
	// Tensor and Box name what the message carries (the global region of
	// tensor Tensor), for checksums and error messages.
	Tensor int
	Box    placement.Box
}

// Schedule is a plan turned into messages and rounds for one route. Every
// rank builds the same Schedule; each executes its own part. A message's
// dependencies (data it forwards) always lie at least two rounds earlier, so
// a rank may keep two rounds in flight.
type Schedule struct {
	Route string
	// Note says why the route was chosen, for routes that choose (auto).
	Note  string
	Plans []*Plan
	// TensorNames name the tensors in errors and reports; optional.
	TensorNames []string
	Messages    []Message // in posting order: by round, then insertion order
	Rounds      int
	// RoundBytes bounds the bytes a rank sends, and separately receives,
	// in one round over each link class (network, local).
	RoundBytes int64
	world      int
}

// World returns the communicator size.
func (s *Schedule) World() int { return s.world }

// Topology says which domain each rank of a communicator belongs to.
// Ranks of one domain share a fast local fabric.
type Topology struct {
	// Domain[r] identifies rank r's domain; ranks with equal values share
	// one. A nil Domain puts every rank in a domain of its own.
	Domain []int
}

// Class returns the link class between two ranks. A rank that Domain does
// not name (outside [0, len(Domain))) is in a domain of its own, as every
// rank is when Domain is nil; Validate reports such ranks as errors.
func (t Topology) Class(a, b int) LinkClass {
	switch {
	case a == b:
		return LinkSelf
	case t.Domain != nil && a >= 0 && b >= 0 && a < len(t.Domain) && b < len(t.Domain) && t.Domain[a] == t.Domain[b]:
		return LinkLocal
	}
	return LinkNetwork
}

// Validate checks that the topology fits a communicator of world ranks:
// a nil Domain, or one domain per rank.
func (t Topology) Validate(world int) error {
	if t.Domain != nil && len(t.Domain) != world {
		return &FieldError{Field: "topology", Got: fmt.Sprintf("%d ranks", len(t.Domain)), Want: fmt.Sprintf("%d (the communicator)", world),
			Why: "the topology must name the domain of every rank"}
	}
	return nil
}

// MaxRounds bounds the rounds of a schedule: a message that would land in
// round MaxRounds or later makes the Builder fail (see Builder.Err). Every
// round costs every rank a posting step, so more rounds than this mean
// chunks and staging far too small for the tensor.
const MaxRounds = 1 << 24

// MaxMessages bounds the messages of a schedule (about MessageBytes each,
// so a few GiB at most). Routes count their messages before cutting boxes
// into chunks and refuse more with an error naming the count; since every
// message lands at most two rounds after the latest before it, a schedule
// within MaxMessages also stays within MaxRounds.
const MaxMessages = 1 << 23

// MessageBytes estimates the memory one message of a schedule takes, with
// its segments, box and descriptors, for comparing a schedule's size with
// the memory a rank has.
const MessageBytes = 512

// Builder assembles a Schedule: Add places each message in the earliest
// round, no earlier than its dependency allows, in which its sender may
// still send and its receiver still receive that many bytes under the
// per-rank, per-round budget. Network and local traffic have budgets of
// their own, so that a leader's fan-out over the local fabric does not
// hold back what it forwards over the network. The placement only looks at
// the messages added before, so every rank that adds the same messages in
// the same order builds the same schedule. Messages between a pair of ranks
// match in (round, insertion) order, which both sides see alike.
//
// The rule in full: a message of n bytes from src to dst (src != dst) over
// link class c goes to the first round r >= max(after, 0, min(open(src),
// open(dst))) in which src's send usage and dst's receive usage over c are
// both either zero or at most budget-n, where open(rank) is the first round
// in which some usage list of the rank (send or receive, network or local)
// is below the budget. A local copy (src == dst) goes to round
// max(after, 0) and uses no budget.
//
// Bookkeeping costs memory in proportion to the messages (and the pairs
// of ranks that exchange them), not to ranks times rounds, and Add costs
// a few tree searches per message: each usage list is a sparse 64-ary tree
// of per-round usage with subtree minima, which finds the first round at
// or after r with room for n bytes in at most 2 x 4 node visits, plus a
// pointer past the rounds that are full and, for the few limits searched
// for last, a front before which no round has that much room. Add
// alternates between the sender's and the receiver's list until both have
// room in one round; a hint per pair of ranks remembers the stretches in
// which the pair's searches found no room, so that message after message
// does not walk the same stretch again. BenchmarkBuilder shows the cost
// per message flat from a thousand to a million messages.
//
// Add never panics on bad input: a message naming a rank outside the
// communicator, a negative size, a round at or past MaxRounds, or more
// than MaxMessages messages make the Builder fail; Err reports the first
// such error and every route checks it before returning a schedule.
type Builder struct {
	s        *Schedule
	topo     Topology
	use      []rankUsage // per rank
	maxRound int
	err      error
	totals   [2][2][]int64 // [send, recv][network, local][rank] bytes added, for the MaxRounds error
	hints    map[uint64]*pairHint
}

// rankUsage is a rank's usage lists, [send, recv][network, local]; nil
// until used.
type rankUsage [2][2]*usage

// EmptySchedule returns the schedule of a call of no tensors over world
// ranks: no messages, no rounds.
func EmptySchedule(route string, world int) *Schedule {
	return &Schedule{Route: route, world: world}
}

// NewBuilder starts a schedule for the plans (one per tensor, all over the
// same communicator) with roundBytes the most a rank sends, and separately
// receives, in one round.
func NewBuilder(route string, plans []*Plan, topo Topology, roundBytes int64) (*Builder, error) {
	if len(plans) == 0 {
		return nil, fmt.Errorf("reshard: a schedule needs at least one tensor")
	}
	for i, p := range plans {
		if p == nil {
			return nil, fmt.Errorf("reshard: tensor %d has no plan (nil)", i)
		}
	}
	world := plans[0].World()
	for i, p := range plans {
		if p.World() != world {
			return nil, fmt.Errorf("reshard: tensor %d is planned for %d ranks, tensor 0 for %d", i, p.World(), world)
		}
	}
	if topo.Domain != nil && len(topo.Domain) != world {
		return nil, fmt.Errorf("reshard: topology names %d ranks, the communicator has %d", len(topo.Domain), world)
	}
	if roundBytes <= 0 {
		return nil, fmt.Errorf("reshard: round budget %d bytes, want > 0", roundBytes)
	}
	b := &Builder{
		s:     &Schedule{Route: route, Plans: plans, RoundBytes: roundBytes, world: world},
		topo:  topo,
		use:   make([]rankUsage, world),
		hints: map[uint64]*pairHint{},
	}
	for dir := range b.totals {
		for class := range b.totals[dir] {
			b.totals[dir][class] = make([]int64, world)
		}
	}
	return b, nil
}

// Expect declares that about n more messages will be added: it fails (and
// makes the Builder fail) when that would pass MaxMessages, with an error
// naming the count and its memory, and otherwise reserves room for them.
// Routes call it with their exact message count before cutting boxes into
// chunks, so that an absurd schedule is refused before it takes memory.
func (b *Builder) Expect(n int64) error {
	if b.err != nil {
		return b.err
	}
	total, ok := checked.Add(int64(len(b.s.Messages)), n)
	if n < 0 || !ok || total > MaxMessages {
		b.err = tooManyMessages(b.s.Route, n)
		return b.err
	}
	b.s.Messages = slices.Grow(b.s.Messages, int(n))
	return nil
}

func tooManyMessages(route string, n int64) error {
	mem, ok := checked.Mul(n, MessageBytes)
	memS := fmt.Sprintf("about %d bytes", mem)
	if !ok || n < 0 {
		memS = "more bytes than an int64 counts"
	}
	return &FieldError{Field: route + " schedule", Got: fmt.Sprintf("%d messages (%s)", n, memS),
		Want: fmt.Sprintf("at most %d messages", MaxMessages),
		Why:  "the chunks are too small for these tensors and layouts: larger chunk bytes (and staging bytes, at least 8 x chunk) make fewer messages"}
}

// Err returns the first error Add or Expect met, or nil. A Builder that
// failed keeps returning rounds from Add but no longer records messages;
// its Schedule must not be used.
func (b *Builder) Err() error { return b.err }

// Add schedules m no earlier than round after and returns its round. A
// message that forwards data received in round k must pass after >= k+2
// (AfterRecv does that); one that reads data a local copy wrote in round k
// may pass k. Local copies (Src == Dst) use no transport budget. A message
// larger than the budget gets a round to itself.
//
// A message Add cannot place makes the Builder fail (see Err): Src or Dst
// outside the communicator, negative Bytes, a round at or past MaxRounds,
// or more than MaxMessages messages. Add then returns max(after, 0).
func (b *Builder) Add(m Message, after int) int {
	r := max(after, 0)
	if b.err != nil {
		return r
	}
	world := b.s.world
	switch {
	case m.Src < 0 || m.Src >= world || m.Dst < 0 || m.Dst >= world:
		b.err = fmt.Errorf("reshard: %s schedule, message %d from rank %d to rank %d: ranks must lie in the communicator [0, %d)",
			b.s.Route, len(b.s.Messages), m.Src, m.Dst, world)
		return r
	case m.Bytes < 0:
		b.err = fmt.Errorf("reshard: %s schedule, message %d from rank %d to rank %d has %d bytes, want >= 0",
			b.s.Route, len(b.s.Messages), m.Src, m.Dst, m.Bytes)
		return r
	case len(b.s.Messages) >= MaxMessages:
		b.err = tooManyMessages(b.s.Route, int64(len(b.s.Messages))+1)
		return r
	}
	m.Class = b.topo.Class(m.Src, m.Dst)
	if m.Src != m.Dst && r < MaxRounds {
		su := b.list(0, m.Class, m.Src)
		du := b.list(1, m.Class, m.Dst)
		from := r
		r = max(r, min(b.open(m.Src), b.open(m.Dst)))
		h := b.hint(m.Src, m.Dst)
		r = b.place(su, du, h.skip(r, m.Bytes), m.Bytes)
		h.learn(from, r, m.Bytes)
		b.totals[0][m.Class][m.Src] = checked.SatSum(b.totals[0][m.Class][m.Src], m.Bytes)
		b.totals[1][m.Class][m.Dst] = checked.SatSum(b.totals[1][m.Class][m.Dst], m.Bytes)
		if r < MaxRounds && m.Bytes > 0 {
			su.add(r, m.Bytes)
			du.add(r, m.Bytes)
		}
	}
	if r >= MaxRounds {
		b.err = b.tooManyRounds(m, r)
		return max(after, 0)
	}
	m.Round = r
	b.maxRound = max(b.maxRound, r)
	b.s.Messages = append(b.s.Messages, m)
	if addHook != nil {
		addHook(b, m, after)
	}
	return r
}

// addHook, set only by tests, sees every message Add places (with its
// round) and the lower bound it was given, to compare with a reference.
var addHook func(b *Builder, m Message, after int)

// place returns the first round at or after r in which n more bytes fit
// both the sender's list su and the receiver's list du (MaxRounds or more
// if none does). A round fits when its usage is zero or at most budget-n.
func (b *Builder) place(su, du *usage, r int, n int64) int {
	budget := b.s.RoundBytes
	limit := int64(0) // a message larger than the budget needs an empty round
	if n <= budget {
		limit = budget - n
	}
	for r < MaxRounds {
		r = su.find(r, limit)
		if r2 := du.find(r, limit); r2 != r {
			r = r2
			continue
		}
		return r
	}
	return r
}

// hint returns (creating) the pair hint of src and dst.
func (b *Builder) hint(src, dst int) *pairHint {
	key := uint64(src)<<32 | uint64(dst)
	h := b.hints[key]
	if h == nil {
		h = &pairHint{}
		b.hints[key] = h
	}
	return h
}

// pairHint remembers, for one sender and receiver, stretches of rounds in
// which an earlier message found no room: "no round in [lo, hi) takes n
// bytes from this sender to this receiver". Usage only grows and open only
// moves forward, so such a stretch stays without room for n bytes or more,
// and a later search that starts inside it may start at hi instead: this
// is what keeps Add from walking, message after message, over the rounds in
// which the sender has room and the receiver has none (or the reverse).
// The rounds found are the ones the plain search finds. Stretches are kept
// per message size (the few a pair's chunks have; past pairHints sizes the
// oldest size gives way), sorted and merged.
type pairHint struct {
	sizes [pairHints]int64
	spans [pairHints][]hintSpan // per size: sorted, disjoint, not touching
	used  int                   // sizes in use
	next  int                   // the size to give way next
}

const pairHints = 4

type hintSpan struct{ lo, hi int }

// skip returns where a search for n bytes from round r may start.
func (h *pairHint) skip(r int, n int64) int {
	for moved := true; moved; {
		moved = false
		for i := 0; i < h.used; i++ {
			if h.sizes[i] > n {
				continue
			}
			sp := h.spans[i]
			// the last stretch that starts at or before r
			j := sort.Search(len(sp), func(k int) bool { return sp[k].lo > r }) - 1
			if j >= 0 && r < sp[j].hi {
				r, moved = sp[j].hi, true
			}
		}
	}
	return r
}

// learn records that a search for n bytes from round lo found round hi.
func (h *pairHint) learn(lo, hi int, n int64) {
	if hi <= lo {
		return
	}
	i := 0
	for i < h.used && h.sizes[i] != n {
		i++
	}
	if i == h.used {
		if h.used < pairHints {
			h.used++
		} else {
			i = h.next
			h.next = (h.next + 1) % pairHints
		}
		h.sizes[i], h.spans[i] = n, h.spans[i][:0]
	}
	sp := h.spans[i]
	// the stretches that overlap or touch [lo, hi) are sp[a:b].
	a := sort.Search(len(sp), func(k int) bool { return sp[k].hi >= lo })
	b := a
	for b < len(sp) && sp[b].lo <= hi {
		lo, hi = min(lo, sp[b].lo), max(hi, sp[b].hi)
		b++
	}
	h.spans[i] = slices.Replace(sp, a, b, hintSpan{lo, hi})
}

// list returns (creating) the usage list of rank in direction dir over
// link class c.
func (b *Builder) list(dir int, c LinkClass, rank int) *usage {
	u := b.use[rank][dir][c]
	if u == nil {
		u = newUsage(b.s.RoundBytes)
		b.use[rank][dir][c] = u
	}
	return u
}

// open returns the first round in which some usage list of rank has room
// (is below the budget): every round before it is full in every direction
// and class.
func (b *Builder) open(rank int) int {
	o := MaxRounds
	for dir := range b.use[rank] {
		for _, u := range b.use[rank][dir] {
			if u == nil {
				return 0
			}
			o = min(o, u.free)
		}
	}
	return o
}

func (b *Builder) tooManyRounds(m Message, r int) error {
	// the busiest list says how much staging would fit the traffic in
	// half the round limit (the other half for the dependencies).
	var most int64
	for dir := range b.totals {
		for class := range b.totals[dir] {
			for _, t := range b.totals[dir][class] {
				most = max(most, t)
			}
		}
	}
	need := most / (MaxRounds / 2)
	if most%(MaxRounds/2) != 0 {
		need++
	}
	need = max(need, b.s.RoundBytes+1)
	staging, ok := checked.Mul(need, 8)
	hint := fmt.Sprintf("staging bytes of at least %d (round budget %d) with chunk bytes at most %d", staging, need, need)
	if !ok {
		hint = "larger staging bytes and chunk bytes"
	}
	return &FieldError{Field: b.s.Route + " schedule", Got: fmt.Sprintf("message %d (%d bytes, rank %d to rank %d) in round %d", len(b.s.Messages), m.Bytes, m.Src, m.Dst, r),
		Want: fmt.Sprintf("rounds below %d", MaxRounds),
		Why: fmt.Sprintf("a rank moves at most %d bytes a round each way over each link class (staging / 8) and the busiest moves %d bytes: use %s",
			b.s.RoundBytes, most, hint)}
}

// usage is one rank's bytes per round in one direction over one link
// class, as a sparse tree: level 0 holds the bytes of every round of a
// node of usageFan rounds, and each level above holds, per child node, the
// least usage in it (0 while some round of it is untouched). A node exists
// only once a round under it is charged, so that an absent node means
// usageFan^(level+1) untouched rounds, and the parent of every node exists.
// Usage only grows, so free (every round before it is full, usage >=
// budget) only moves forward.
type usage struct {
	nodes  [usageLevels]map[int32]*usageNode
	budget int64
	free   int
	// fronts remembers, for the few limits searched for most recently, a
	// round before which no round's usage is at most the limit (usage
	// only grows, so that stays true): the first answer of a search for
	// the limit that started at or before its front.
	fronts [usageFronts]usageFront
	nextFr int
	// the node of each level looked up last (nodes are never removed).
	cacheIdx [usageLevels]int32
	cacheNd  [usageLevels]*usageNode
}

const (
	usageBits   = 6
	usageFan    = 1 << usageBits
	usageMask   = usageFan - 1
	usageLevels = 4 // usageFan^usageLevels == MaxRounds rounds
)

// usageNode holds the usage of usageFan rounds (level 0) or the least
// usage of usageFan child nodes (0 for a child that does not exist), and
// the least of its own values.
type usageNode struct {
	v     [usageFan]int64
	least int64
}

func newUsage(budget int64) *usage {
	u := &usage{budget: budget}
	for k := range u.nodes {
		u.nodes[k] = map[int32]*usageNode{}
	}
	return u
}

// node returns node i of level k, nil if absent.
func (u *usage) node(k int, i int32) *usageNode {
	if nd := u.cacheNd[k]; nd != nil && u.cacheIdx[k] == i {
		return nd
	}
	nd := u.nodes[k][i]
	if nd != nil {
		u.cacheIdx[k], u.cacheNd[k] = i, nd
	}
	return nd
}

const usageFronts = 4

type usageFront struct {
	limit int64
	at    int
	set   bool
}

// find is first with what is known of the rounds before r: it starts the
// search past free (for limits below the budget) and past every front
// whose limit is at least limit, and when nothing between those and r was
// unknown, the answer becomes the front of limit.
func (u *usage) find(r int, limit int64) int {
	lower := 0 // every round before lower has usage above limit
	if limit < u.budget {
		lower = u.free // rounds before free hold at least the budget
	}
	exact := -1
	for i := range u.fronts {
		f := &u.fronts[i]
		if !f.set {
			continue
		}
		if f.limit == limit {
			exact = i
		}
		if f.limit >= limit {
			lower = max(lower, f.at)
		}
	}
	t := u.first(max(r, lower), limit)
	if r <= lower { // [0, t) is known to have no round with usage <= limit
		if exact < 0 {
			exact = u.nextFr
			u.nextFr = (u.nextFr + 1) % usageFronts
		}
		u.fronts[exact] = usageFront{limit: limit, at: t, set: true}
	}
	return t
}

// first returns the first round t >= r whose usage is at most limit
// (limit >= 0, so an untouched round always qualifies), or MaxRounds if no
// round below MaxRounds does.
func (u *usage) first(r int, limit int64) int {
	if r >= MaxRounds {
		return r
	}
	nd := u.node(0, int32(r>>usageBits))
	if nd == nil {
		return r
	}
	if nd.least <= limit { // else no round of the node qualifies
		for s := r & usageMask; s < usageFan; s++ {
			if nd.v[s] <= limit {
				return r&^usageMask | s
			}
		}
	}
	// climb: e is the node just searched in full, at level k-1.
	e := r >> usageBits
	for k := 1; k < usageLevels; k++ {
		i := e >> usageBits
		nd = u.node(k, int32(i))
		if nd == nil { // cannot happen (parents exist); the rest of it is untouched
			return (e + 1) << (usageBits * k)
		}
		for s := e&usageMask + 1; s < usageFan; s++ {
			if nd.v[s] <= limit {
				return u.descend(k, i<<usageBits|s, limit)
			}
		}
		e = i
	}
	return MaxRounds
}

// descend returns the first round under node e of level k-1 whose usage
// is at most limit; the node's least usage is.
func (u *usage) descend(k, e int, limit int64) int {
	for ; k > 0; k-- {
		nd := u.node(k-1, int32(e))
		if nd == nil {
			return e << (usageBits * k)
		}
		s := 0
		for nd.v[s] > limit {
			s++ // a slot qualifies: the parent holds this node's least usage
		}
		e = e<<usageBits | s
	}
	return e
}

// add charges n > 0 bytes to round r < MaxRounds and moves free past the
// rounds that are now full.
func (u *usage) add(r int, n int64) {
	e := r
	var least int64 // the least usage of the node just updated
	var now int64   // round r's usage after the charge
	for k := 0; k < usageLevels; k++ {
		i := int32(e >> usageBits)
		s := e & usageMask
		nd := u.node(k, i)
		created := nd == nil
		if created { // a new node, and (below) its slot in a parent
			nd = new(usageNode)
			u.nodes[k][i] = nd
			u.cacheIdx[k], u.cacheNd[k] = i, nd
		}
		old := nd.v[s]
		if k == 0 {
			nd.v[s] = checked.SatSum(old, n)
			now = nd.v[s]
		} else {
			nd.v[s] = least
		}
		prev := nd.least
		if old == prev && nd.v[s] != old { // the slot held the least: it may have grown
			m := nd.v[0]
			for _, v := range nd.v[1:] {
				m = min(m, v)
			}
			nd.least = m
		}
		if !created && nd.least == prev {
			break // this node's least usage did not change: nothing above does
		}
		least = nd.least
		e >>= usageBits
	}
	if r == u.free && now >= u.budget {
		u.free = u.first(r, u.budget-1)
	}
}

// AfterRecv returns the earliest round in which data received in round r
// may be forwarded.
func AfterRecv(r int) int { return r + 2 }

// Schedule finishes the schedule: messages sorted by round, stably.
func (b *Builder) Schedule() *Schedule {
	s := b.s
	if len(s.Messages) > 0 {
		s.Rounds = b.maxRound + 1
	}
	// counting sort by round keeps insertion order within a round.
	counts := make([]int, s.Rounds+1)
	for i := range s.Messages {
		counts[s.Messages[i].Round+1]++
	}
	for r := 0; r < s.Rounds; r++ {
		counts[r+1] += counts[r]
	}
	sorted := make([]Message, len(s.Messages))
	for _, m := range s.Messages {
		sorted[counts[m.Round]] = m
		counts[m.Round]++
	}
	s.Messages = sorted
	return s
}

// seg is shorthand for a one-segment list.
func seg(tensor int, kind BufKind, at strided.Desc) []Segment {
	return []Segment{{Tensor: tensor, Buf: kind, At: at}}
}

// TensorName names tensor i of the schedule in errors: its TensorNames
// entry if it has one, else "tensor i". A nil schedule names every tensor
// by index.
func (s *Schedule) TensorName(i int) string {
	if s != nil && i >= 0 && i < len(s.TensorNames) && s.TensorNames[i] != "" {
		return s.TensorNames[i]
	}
	return fmt.Sprintf("tensor %d", i)
}

// Bytes returns the total bytes of every message of class c, saturating
// at math.MaxInt64.
func (s *Schedule) Bytes(c LinkClass) int64 {
	var n int64
	for i := range s.Messages {
		if s.Messages[i].Class == c {
			n = checked.SatSum(n, s.Messages[i].Bytes)
		}
	}
	return n
}
