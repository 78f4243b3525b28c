package reshard

import (
	"fmt"
	"slices"
	"sort"

	"github.com/m2n-dev/m2n/internal/checked"
)

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
// communicator, a negative size, a round at or past maxRounds, or more
// than MaxMessages messages make the Builder fail; Err reports the first
// such error and every route checks it before returning a schedule.
type Builder struct {
	s        *Schedule
	topo     Topology
	use      []rankUsage // per rank
	maxRound int
	err      error
	totals   [2][2][]int64 // [send, recv][network, local][rank] bytes added, for the maxRounds error
	hints    map[uint64]*pairHint
	recvNet  int64 // the per-round budget of network receives (SetBudgets)
	local    int64 // the per-round budget of local sends and receives (SetBudgets)
	// sendNet[r] is rank r's per-round budget of network sends where it
	// is not the round budget (SetNetSendBudget); nil when none is.
	sendNet []int64
}

// rankUsage is a rank's usage lists, [send, recv][network, local]; nil
// until used.
type rankUsage [2][2]*usage

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
		s:       &Schedule{Route: route, Plans: plans, RoundBytes: roundBytes, World: world},
		topo:    topo,
		use:     make([]rankUsage, world),
		hints:   map[uint64]*pairHint{},
		recvNet: roundBytes,
		local:   roundBytes,
	}
	for dir := range b.totals {
		for class := range b.totals[dir] {
			b.totals[dir][class] = make([]int64, world)
		}
	}
	return b, nil
}

// SetBudgets sets a round's budgets apart from the round budget: the
// most a rank receives over the network in one round to netReceive bytes
// (0 < netReceive <= the round budget; the default is the round budget),
// and the most a rank sends, and separately receives, over the local
// fabric in one round to local bytes (local > 0; the default is the round
// budget). Network sends keep the round budget.
//
// A lower network receive budget lets a route whose few senders feed many
// receivers make every round spread its sends over the receivers evenly:
// calls that run at once into the same receivers (a model's pipeline
// stages) then add up to at most a round budget per receiver and round,
// where each could otherwise bring a full one. A local budget apart from
// the network's serves a route whose ranks forward over the local fabric
// a multiple of what they receive over the network (hier's leaders fan
// each chunk out to the other replicas of their domain): a local budget of
// that multiple keeps a round's fan-out from falling behind the round's
// network receives and finishing after them. A round's local staging, for
// the messages that are packed, can then reach local.
//
// SetBudgets must come before the first Add; otherwise, or with a budget
// out of range, it makes the Builder fail.
func (b *Builder) SetBudgets(netReceive, local int64) error {
	switch {
	case b.err != nil:
		return b.err
	case len(b.s.Messages) > 0:
		b.err = fmt.Errorf("reshard: %s schedule: the budgets must be set before the first message", b.s.Route)
	case netReceive <= 0 || netReceive > b.s.RoundBytes:
		b.err = &FieldError{Field: "network receive budget", Got: fmt.Sprint(netReceive), Want: fmt.Sprintf("in (0, %d], the round budget", b.s.RoundBytes),
			Why: "receives are bounded by the staging a round holds"}
	case local <= 0:
		b.err = &FieldError{Field: "local budget", Got: fmt.Sprint(local), Want: "> 0", Why: "a round must move some bytes"}
	default:
		b.recvNet, b.local = netReceive, local
	}
	return b.err
}

// SetNetSendBudget sets the most each of ranks sends over the network in
// one round to bytes (0 < bytes <= the round budget); the other ranks
// keep the round budget. A route whose receivers forward what they
// receive over the network (hier's leaders, to the leaders of other
// domains) gives them the network receive budget: calls that run at once
// into the same receivers (a model's pipeline stages) share those ranks'
// NICs out as they share their NICs in, and each call's forwards then add
// up, over the calls, to about one round budget per round, where each
// call could otherwise send a whole one in the same rounds.
//
// Like SetBudgets, it must come before the first Add; otherwise, or with
// a budget out of range or a rank outside the communicator, it makes the
// Builder fail.
func (b *Builder) SetNetSendBudget(ranks []int, bytes int64) error {
	switch {
	case b.err != nil:
		return b.err
	case len(b.s.Messages) > 0:
		b.err = fmt.Errorf("reshard: %s schedule: the budgets must be set before the first message", b.s.Route)
		return b.err
	case bytes <= 0 || bytes > b.s.RoundBytes:
		b.err = &FieldError{Field: "network send budget", Got: fmt.Sprint(bytes), Want: fmt.Sprintf("in (0, %d], the round budget", b.s.RoundBytes),
			Why: "sends are bounded by the staging a round holds"}
		return b.err
	}
	for _, r := range ranks {
		if r < 0 || r >= b.s.World {
			b.err = fmt.Errorf("reshard: %s schedule: network send budget for rank %d, outside the communicator [0, %d)", b.s.Route, r, b.s.World)
			return b.err
		}
	}
	if b.sendNet == nil && len(ranks) > 0 {
		b.sendNet = make([]int64, b.s.World)
	}
	for _, r := range ranks {
		b.sendNet[r] = bytes
	}
	return nil
}

// NetReceiveBudget returns the most a rank receives over the network in
// one round (SetBudgets; the round budget by default).
func (b *Builder) NetReceiveBudget() int64 { return b.recvNet }

// budget returns rank's per-round budget of direction dir over class c.
func (b *Builder) budget(dir int, c LinkClass, rank int) int64 {
	switch {
	case c == LinkLocal:
		return b.local
	case dir == 1:
		return b.recvNet
	case b.sendNet != nil && b.sendNet[rank] > 0:
		return b.sendNet[rank]
	}
	return b.s.RoundBytes
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
// outside the communicator, negative Bytes, a round at or past maxRounds,
// or more than MaxMessages messages. Add then returns max(after, 0).
func (b *Builder) Add(m Message, after int) int { return b.add(m, after, 1) }

// AddTapered is Add with the budgets of m's link class, send and
// receive, divided by div (>= 1): m goes to the first round, no earlier
// than after, in which both of its ends have used nothing or at most
// budget/div - m.Bytes over that class. A route ends its schedule with
// such rounds so that the last rounds carry a fraction of a full round:
// what is forwarded after the last of them (hier's fan-out of its last
// network rounds) is then that fraction of a round's. A div below 1 makes
// the Builder fail.
func (b *Builder) AddTapered(m Message, after int, div int64) int {
	if div < 1 && b.err == nil {
		b.err = &FieldError{Field: "taper", Got: fmt.Sprint(div), Want: "at least 1", Why: "a round's budget is divided by it"}
	}
	return b.add(m, after, div)
}

func (b *Builder) add(m Message, after int, div int64) int {
	r := max(after, 0)
	if b.err != nil {
		return r
	}
	world := b.s.World
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
	if m.Src != m.Dst && r < maxRounds {
		su := b.list(0, m.Class, m.Src)
		du := b.list(1, m.Class, m.Dst)
		from := r
		r = max(r, min(b.open(m.Src), b.open(m.Dst)))
		h := b.hint(m.Src, m.Dst)
		r = b.place(su, du, h.skip(r, m.Bytes), m.Bytes, b.budget(0, m.Class, m.Src)/div, b.budget(1, m.Class, m.Dst)/div)
		if div == 1 {
			// a stretch without room under a divided budget may have
			// room under the whole one: only whole-budget searches learn.
			h.learn(from, r, m.Bytes)
		}
		b.totals[0][m.Class][m.Src] = checked.SatSum(b.totals[0][m.Class][m.Src], m.Bytes)
		b.totals[1][m.Class][m.Dst] = checked.SatSum(b.totals[1][m.Class][m.Dst], m.Bytes)
		if r < maxRounds && m.Bytes > 0 {
			su.add(r, m.Bytes)
			du.add(r, m.Bytes)
		}
	}
	if r >= maxRounds {
		b.err = b.tooManyRounds(m, r)
		return max(after, 0)
	}
	m.Round = r
	b.maxRound = max(b.maxRound, r)
	b.s.Messages = append(b.s.Messages, m)
	if addHook != nil {
		addHook(b, m, after, div)
	}
	return r
}

// place returns the first round at or after r in which n more bytes fit
// both the sender's list su and the receiver's list du, whose budgets are
// send and recv (maxRounds or more if none does). A round fits when its
// usage is zero or at most budget-n.
func (b *Builder) place(su, du *usage, r int, n int64, send, recv int64) int {
	sl, rl := fitLimit(send, n), fitLimit(recv, n)
	for r < maxRounds {
		r = su.find(r, sl)
		if r2 := du.find(r, rl); r2 != r {
			r = r2
			continue
		}
		return r
	}
	return r
}

// fitLimit is the most usage a round of a list with this budget may hold
// and still take n bytes: budget-n, or 0 (an empty round) for a message
// larger than the budget.
func fitLimit(budget, n int64) int64 {
	if n <= budget {
		return budget - n
	}
	return 0
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
		u = newUsage(b.budget(dir, c, rank))
		b.use[rank][dir][c] = u
	}
	return u
}

// open returns the first round in which some usage list of rank has room
// (is below the budget): every round before it is full in every direction
// and class.
func (b *Builder) open(rank int) int {
	o := maxRounds
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
	need := most / (maxRounds / 2)
	if most%(maxRounds/2) != 0 {
		need++
	}
	need = max(need, b.s.RoundBytes+1)
	staging, ok := checked.Mul(need, 8)
	hint := fmt.Sprintf("staging bytes of at least %d (round budget %d) with chunk bytes at most %d", staging, need, need)
	if !ok {
		hint = "larger staging bytes and chunk bytes"
	}
	return &FieldError{Field: b.s.Route + " schedule", Got: fmt.Sprintf("message %d (%d bytes, rank %d to rank %d) in round %d", len(b.s.Messages), m.Bytes, m.Src, m.Dst, r),
		Want: fmt.Sprintf("rounds below %d", maxRounds),
		Why: fmt.Sprintf("a rank moves at most %d bytes a round each way over each link class (staging / 8) and the busiest moves %d bytes: use %s",
			b.s.RoundBytes, most, hint)}
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
