package reshard

import (
	"fmt"

	"github.com/m2n-dev/m2n/placement"
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
	At     Strided
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
	numLinkClasses
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

// Class returns the link class between two ranks.
func (t Topology) Class(a, b int) LinkClass {
	switch {
	case a == b:
		return LinkSelf
	case t.Domain != nil && t.Domain[a] == t.Domain[b]:
		return LinkLocal
	}
	return LinkNetwork
}

// Builder assembles a Schedule: Add places each message in the earliest
// round, no earlier than its dependency allows, in which its sender may
// still send and its receiver still receive that many bytes under the
// per-rank, per-round budget. Network and local traffic have budgets of
// their own, so that a leader's fan-out over the local fabric does not
// hold back what it forwards over the network. The placement only looks at
// the messages added before, so every rank that adds the same messages in
// the same order builds the same schedule. Messages between a pair of ranks
// match in (round, insertion) order, which both sides see alike.
type Builder struct {
	s        *Schedule
	topo     Topology
	use      [2][2][][]int64 // [send, recv][network, local][rank][round] bytes
	open     []int           // [rank] every round before this is full
	maxRound int
}

// NewBuilder starts a schedule for the plans (one per tensor, all over the
// same communicator) with roundBytes the most a rank sends, and separately
// receives, in one round.
func NewBuilder(route string, plans []*Plan, topo Topology, roundBytes int64) (*Builder, error) {
	if len(plans) == 0 {
		return nil, fmt.Errorf("reshard: a schedule needs at least one tensor")
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
	return &Builder{
		s:    &Schedule{Route: route, Plans: plans, RoundBytes: roundBytes, world: world},
		topo: topo,
		use: [2][2][][]int64{
			{make([][]int64, world), make([][]int64, world)},
			{make([][]int64, world), make([][]int64, world)}},
		open: make([]int, world),
	}, nil
}

// Add schedules m no earlier than round after and returns its round. A
// message that forwards data received in round k must pass after >= k+2
// (AfterRecv does that); one that reads data a local copy wrote in round k
// may pass k. Local copies (Src == Dst) use no transport budget. A message
// larger than the budget gets a round to itself.
func (b *Builder) Add(m Message, after int) int {
	m.Class = b.topo.Class(m.Src, m.Dst)
	r := max(after, 0)
	if m.Src != m.Dst {
		send, recv := &b.use[0][m.Class][m.Src], &b.use[1][m.Class][m.Dst]
		r = max(r, min(b.open[m.Src], b.open[m.Dst]))
		for !(b.fits(*send, r, m.Bytes) && b.fits(*recv, r, m.Bytes)) {
			r++
		}
		*send = charge(*send, r, m.Bytes)
		*recv = charge(*recv, r, m.Bytes)
		b.advance(m.Src)
		b.advance(m.Dst)
	}
	m.Round = r
	b.maxRound = max(b.maxRound, r)
	b.s.Messages = append(b.s.Messages, m)
	return r
}

// fits reports whether n more bytes fit round r of a usage list. An empty
// round takes any message.
func (b *Builder) fits(use []int64, r int, n int64) bool {
	if r >= len(use) || use[r] == 0 {
		return true
	}
	return use[r]+n <= b.s.RoundBytes
}

func charge(use []int64, r int, n int64) []int64 {
	for len(use) <= r {
		use = append(use, 0)
	}
	use[r] += n
	return use
}

// advance moves a rank's open pointer past rounds that are full in every
// direction and class.
func (b *Builder) advance(rank int) {
	for o := b.open[rank]; ; o++ {
		for dir := range b.use {
			for class := range b.use[dir] {
				if u := b.use[dir][class][rank]; o >= len(u) || u[o] < b.s.RoundBytes {
					b.open[rank] = o
					return
				}
			}
		}
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
func seg(tensor int, kind BufKind, at Strided) []Segment {
	return []Segment{{Tensor: tensor, Buf: kind, At: at}}
}

// Bytes returns the total bytes of every message of class c.
func (s *Schedule) Bytes(c LinkClass) int64 {
	var n int64
	for i := range s.Messages {
		if s.Messages[i].Class == c {
			n += s.Messages[i].Bytes
		}
	}
	return n
}
